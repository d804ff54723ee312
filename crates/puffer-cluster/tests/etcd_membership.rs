//! Membership by leases and the coordinator's election with fencing, against a real
//! etcd the test starts.

mod common;

use std::time::{Duration, Instant};

use puffer_cluster::etcd::{self, Candidate, Etcd, MemberCard, Membership, Role};
use puffer_cluster::ClusterError;

const TTL: Duration = Duration::from_secs(2);

fn card(node_id: &str) -> MemberCard {
    MemberCard {
        node_id: node_id.into(),
        roles: vec![Role::Coordinator, Role::Data],
        http_address: "127.0.0.1:1".into(),
        rpc_address: None,
        lease: 0,
    }
}

fn ids(etcd: &Etcd) -> Vec<String> {
    etcd::members(etcd)
        .unwrap()
        .into_iter()
        .map(|c| c.node_id)
        .collect()
}

/// Waits until `done` holds, at most `limit`; how long it took.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn members_come_and_go_with_their_leases() {
    let Some((server, _dir)) = common::etcd_or_skip("members_come_and_go_with_their_leases") else {
        return;
    };
    let etcd = Etcd::connect(&server.config("members").unwrap()).unwrap();
    let a = Membership::join(&etcd, card("a"), TTL).unwrap();
    let b = Membership::join(&etcd, card("b"), TTL).unwrap();
    assert_eq!(ids(&etcd), ["a", "b"]);
    assert_eq!(etcd::members(&etcd).unwrap()[0].lease, a.lease());
    // An id is held once among live nodes.
    let twin = Membership::join(&etcd, card("a"), TTL).unwrap_err();
    assert!(matches!(twin, ClusterError::Invalid(_)), "{twin}");
    // Seen renewed (its time to live, in etcd's whole seconds, never dropped), not
    // merely outliving the wait for a crashed node's lease.
    assert!(twin.to_string().contains("being renewed"), "{twin}");

    // Renewals keep a member in well past its TTL.
    std::thread::sleep(TTL * 2);
    assert_eq!(ids(&etcd), ["a", "b"]);
    assert!(!a.is_lost());

    // Leaving removes the card at once; a crash (no renewals) once the lease expires.
    b.leave().unwrap();
    assert_eq!(ids(&etcd), ["a"]);
    let old_lease = a.lease();
    drop(a);
    // Restarted at once, it waits for its old lease to expire and joins.
    let started = std::time::Instant::now();
    let again = Membership::join(&etcd, card("a"), TTL).unwrap();
    assert_ne!(again.lease(), old_lease);
    assert_eq!(etcd::members(&etcd).unwrap()[0].lease, again.lease());
    eprintln!(
        "a restarted member joined {:?} after its crash (TTL {TTL:?})",
        started.elapsed()
    );
    drop(again);
    let gone = wait_until(TTL * 5, || ids(&etcd).is_empty());
    assert!(gone.is_some(), "a crashed member stayed listed");
    eprintln!("a crashed member left the list after {gone:?} (TTL {TTL:?})");
}

#[test]
fn one_leader_at_a_time_and_a_deposed_one_is_fenced() {
    let Some((server, _dir)) =
        common::etcd_or_skip("one_leader_at_a_time_and_a_deposed_one_is_fenced")
    else {
        return;
    };
    let etcd = Etcd::connect(&server.config("election").unwrap()).unwrap();
    assert_eq!(etcd::leader(&etcd).unwrap(), None);
    let a = Membership::join(&etcd, card("a"), TTL).unwrap();
    let a_stands = Candidate::stand(&etcd, "a", a.lease());
    let a_leads = a_stands.wait_elected(Duration::from_secs(10)).unwrap();
    let b = Membership::join(&etcd, card("b"), TTL).unwrap();
    let b_stands = Candidate::stand(&etcd, "b", b.lease());
    // b waits while a leads.
    assert!(b_stands.wait_elected(TTL).is_none());
    let leader = etcd::leader(&etcd).unwrap().unwrap();
    assert_eq!((leader.node_id.as_str(), leader.lease), ("a", a.lease()));
    a_leads.put("routing", b"from a".to_vec()).unwrap();

    // a stops renewing (as if killed or paused): b leads once a's lease expires, and
    // a's writes are refused from then on.
    let stopped = Instant::now();
    drop(a_stands);
    drop(a);
    let b_leads = b_stands
        .wait_elected(TTL * 5)
        .expect("b was elected after a's lease expired");
    let failover = stopped.elapsed();
    eprintln!("failover took {failover:?} with a TTL of {TTL:?}");
    assert_eq!(etcd::leader(&etcd).unwrap().unwrap().node_id, "b");
    let fenced = a_leads.put("routing", b"stale".to_vec()).unwrap_err();
    assert!(matches!(fenced, ClusterError::Fenced(_)), "{fenced}");
    b_leads.put("routing", b"from b".to_vec()).unwrap();
    // The oracle: the key holds what the current leader wrote, not the stale write.
    let key = format!("{}routing", etcd.keys().coordinated());
    let value = etcd
        .call(move |mut c| async move { c.get(key, None).await })
        .unwrap();
    assert_eq!(value.kvs()[0].value(), b"from b");
}

#[test]
fn a_connection_works_again_after_etcd_restarts() {
    let Some((mut server, _dir)) =
        common::etcd_or_skip("a_connection_works_again_after_etcd_restarts")
    else {
        return;
    };
    let etcd = Etcd::connect(&server.config("restart").unwrap()).unwrap();
    let a = Membership::join(&etcd, card("a"), TTL).unwrap();
    server.kill();
    let error = etcd::members(&etcd).unwrap_err();
    assert!(matches!(error, ClusterError::Unavailable(_)), "{error}");
    server.restart().unwrap();
    let back = wait_until(Duration::from_secs(30), || etcd::members(&etcd).is_ok());
    eprintln!("the connection answered {back:?} after etcd restarted");
    assert!(back.is_some(), "the connection never came back");
    // The lease outlived the outage (etcd renews leases when it elects a leader).
    assert_eq!(ids(&etcd), ["a"]);
    assert!(!a.is_lost());
}
