//! Membership by etcd leases: a node is in the cluster while its card, attached to
//! its lease, is in etcd. The node renews the lease every third of its TTL; a node
//! that stops (SIGKILL, a partition, a pause longer than the TTL) drops out by
//! itself when the lease expires, and nothing of ours decides it.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::Etcd;
use crate::error::{ClusterError, Result};

/// Default lease TTL: a lost node is noticed within this.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);
/// Shortest lease TTL (etcd rounds shorter ones up to about its election timeout).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// Longest lease TTL.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(300);
/// Longest node id.
pub const MAX_NODE_ID_BYTES: usize = 64;
/// Most members listed at once.
pub const MAX_MEMBERS: usize = 1024;

/// What a node is for; a process has any mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Keeps placement and routing, by election (one leader).
    Coordinator,
    /// Takes writes: sequences and logs SCUs.
    Ingest,
    /// Builds segments from the log and publishes them.
    Indexer,
    /// Holds segments and serves reads of them.
    Data,
    /// Fans queries out to data nodes and merges their answers.
    Broker,
}

impl Role {
    /// Every role, in order.
    pub const ALL: [Role; 5] = [
        Role::Coordinator,
        Role::Ingest,
        Role::Indexer,
        Role::Data,
        Role::Broker,
    ];

    /// The role's name on the command line and in etcd.
    pub fn name(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Ingest => "ingest",
            Role::Indexer => "indexer",
            Role::Data => "data",
            Role::Broker => "broker",
        }
    }

    /// Parses `--roles a,b,c` (each once, at least one).
    pub fn parse_list(list: &str) -> Result<Vec<Role>> {
        let mut roles = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let role = Role::ALL
                .into_iter()
                .find(|r| r.name() == word)
                .ok_or_else(|| {
                    ClusterError::Invalid(format!(
                        "unknown role {word:?}; roles are coordinator, ingest, indexer, data \
                         and broker"
                    ))
                })?;
            if roles.contains(&role) {
                return Err(ClusterError::Invalid(format!("role {word:?} given twice")));
            }
            roles.push(role);
        }
        if roles.is_empty() {
            return Err(ClusterError::Invalid("give at least one role".into()));
        }
        roles.sort();
        Ok(roles)
    }
}

/// What a node says of itself in etcd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCard {
    /// Unique among live nodes.
    pub node_id: String,
    /// Its roles.
    pub roles: Vec<Role>,
    /// Where its HTTP API listens (`host:port`).
    pub http_address: String,
    /// Where its gRPC service listens (`host:port`), if it has one.
    pub rpc_address: Option<String>,
    /// The lease the card is attached to (set by [`Membership::join`]).
    pub lease: i64,
}

/// Checks a node id: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn check_node_id(node_id: &str) -> Result<()> {
    let ok = !node_id.is_empty()
        && node_id.len() <= MAX_NODE_ID_BYTES
        && node_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "a node id is 1 to {MAX_NODE_ID_BYTES} of A-Z, a-z, 0-9, _, . and -; got {node_id:?}"
        )))
    }
}

/// Checks a lease TTL against the bounds.
pub fn check_lease_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_LEASE_TTL || ttl > MAX_LEASE_TTL || ttl.subsec_nanos() != 0 {
        return Err(ClusterError::Invalid(format!(
            "a lease TTL is a whole number of seconds from {} to {}; got {:?}",
            MIN_LEASE_TTL.as_secs(),
            MAX_LEASE_TTL.as_secs(),
            ttl
        )));
    }
    Ok(())
}

/// This node's membership: its card stays in etcd while this lives and etcd hears
/// from it. Dropping it stops the renewals (the card goes when the lease expires, as
/// after a crash); [`Membership::leave`] removes the card at once.
#[derive(Debug)]
pub struct Membership {
    etcd: Etcd,
    card: MemberCard,
    lease: Arc<AtomicI64>,
    lost: Arc<AtomicBool>,
    renewals: tokio::task::JoinHandle<()>,
}

/// Longest a node waits for the lease of a crashed node with its id to expire.
pub const MAX_JOIN_WAIT: Duration = Duration::from_secs(60);

/// How long a joining node watches the lease holding its id before a time to live that
/// has not dropped (in etcd's whole seconds) proves the lease renewed: an expiring one
/// drops at least a second in any second; two keep a margin for etcd's rounding and
/// for its answers' delay.
const STILL_FOR: Duration = Duration::from_secs(2);

impl Membership {
    /// Grants a lease of `ttl`, puts the card on it, and keeps the lease alive in the
    /// background. `Invalid` if a live node has the same id (one whose lease is renewed);
    /// the lease of a crashed one is waited for, at most [`MAX_JOIN_WAIT`].
    pub fn join(etcd: &Etcd, mut card: MemberCard, ttl: Duration) -> Result<Membership> {
        check_node_id(&card.node_id)?;
        check_lease_ttl(ttl)?;
        let ttl_s = ttl.as_secs() as i64;
        let key = etcd.keys().member(&card.node_id);
        // A node restarted soon after a crash finds its old card until the old lease
        // expires (after an etcd restart, a lease runs its whole TTL again): it waits
        // while that lease runs down, at most twice its TTL and 5 s (and MAX_JOIN_WAIT),
        // and is refused once the lease is seen renewed (a live node holds the id).
        let started = std::time::Instant::now();
        let mut give_up = started + MAX_JOIN_WAIT;
        let mut last_left: Option<i64> = None;
        // The holder's lease, when its time to live was first read, and what it read.
        let mut first_read: Option<(i64, std::time::Instant, i64)> = None;
        let lease = loop {
            let lease = etcd
                .call(move |mut client| async move { client.lease_grant(ttl_s, None).await })?
                .id();
            card.lease = lease;
            let value = serde_json::to_vec(&card).expect("a card encodes");
            // The card is put only where no live node holds the id.
            let txn = Txn::new()
                .when(vec![Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    key.clone(),
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let joined = etcd
                .call(move |mut client| async move { client.txn(txn).await })?
                .succeeded();
            if joined {
                break lease;
            }
            let _ = etcd.call(move |mut client| async move { client.lease_revoke(lease).await });
            let held_key = key.clone();
            let holder = etcd
                .call(move |mut client| async move { client.get(held_key, None).await })?
                .kvs()
                .first()
                .map(|kv| kv.lease());
            let (left, granted) = match holder {
                Some(holder) if holder != 0 => {
                    let answer = etcd.call(move |mut client| async move {
                        client.lease_time_to_live(holder, None).await
                    })?;
                    (answer.ttl(), answer.granted_ttl())
                }
                _ => (-1, 0), // gone meanwhile: try again at once
            };
            // An expiring lease is gone within its TTL (run again in full after an etcd
            // restart): one still there after twice that and some is renewed.
            let expiring_within = Duration::from_secs(2 * granted.max(0) as u64 + 5);
            give_up = give_up.min(started + expiring_within);
            // etcd answers in whole seconds, so a lease renewed every third of its TTL
            // can read the same second at every look and never be seen to rise. One
            // that expires loses a whole second in any second: one that has not
            // dropped below its first reading after STILL_FOR is renewed (a lease at 0
            // may linger in etcd a moment past its expiry, so it proves nothing).
            let holder_lease = holder.unwrap_or(0);
            if left < 0 || first_read.is_some_and(|(lease, _, _)| lease != holder_lease) {
                first_read = None;
            }
            if left >= 0 && first_read.is_none() {
                first_read = Some((holder_lease, std::time::Instant::now(), left));
            }
            let still = first_read.is_some_and(|(_, at, first_left)| {
                at.elapsed() >= STILL_FOR && left > 0 && left >= first_left
            });
            let renewed = still || last_left.is_some_and(|before| left > before);
            if renewed || std::time::Instant::now() >= give_up {
                return Err(ClusterError::Invalid(format!(
                    "a live node already has id {:?} (its lease is {})",
                    card.node_id,
                    if renewed {
                        "being renewed"
                    } else {
                        "not expiring"
                    }
                )));
            }
            last_left = Some(left);
            if left >= 0 {
                std::thread::sleep(Duration::from_millis(500));
            }
        };
        let lease_cell = Arc::new(AtomicI64::new(lease));
        let lost = Arc::new(AtomicBool::new(false));
        let renewals = etcd.spawn(keep_alive(etcd.clone(), lease, ttl, Arc::clone(&lost)));
        Ok(Membership {
            etcd: etcd.clone(),
            card,
            lease: lease_cell,
            lost,
            renewals,
        })
    }

    /// The lease the card is on.
    pub fn lease(&self) -> i64 {
        self.lease.load(Ordering::Acquire)
    }

    /// The card as joined.
    pub fn card(&self) -> &MemberCard {
        &self.card
    }

    /// Whether etcd said the lease is gone (it expired or was revoked): the node must
    /// then act as out of the cluster.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Leaves at once: revokes the lease, which removes the card (and whatever else
    /// was attached to the lease, a campaign included).
    pub fn leave(self) -> Result<()> {
        self.renewals.abort();
        let lease = self.lease();
        self.etcd
            .call(move |mut client| async move { client.lease_revoke(lease).await })?;
        Ok(())
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.renewals.abort();
    }
}

/// Renews `lease` every third of `ttl` until etcd says it is gone. While etcd does
/// not answer, the lease is not counted lost: nobody can act on its expiry without
/// etcd either (elections, the log and fencing all go through it), and etcd renews
/// every lease's TTL when it elects a leader again. A node cut off from a working etcd
/// learns that its lease is gone once it reaches etcd again.
async fn keep_alive(etcd: Etcd, lease: i64, ttl: Duration, lost: Arc<AtomicBool>) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let mut client = etcd.client();
        let renewed = async {
            let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            Ok::<_, etcd_client::Error>(answers.message().await?.map(|a| a.ttl()))
        };
        match tokio::time::timeout(etcd.request_timeout(), renewed).await {
            Ok(Ok(Some(ttl_left))) if ttl_left > 0 => {}
            // etcd answered that the lease is gone: it expired, or was revoked.
            Ok(Ok(_)) => {
                lost.store(true, Ordering::Release);
                return;
            }
            // No answer: try again at the next renewal.
            _ => {}
        }
    }
}

/// The live members, ascending by node id.
pub fn members(etcd: &Etcd) -> Result<Vec<MemberCard>> {
    let prefix = etcd.keys().members();
    let answer = etcd.call(move |mut client| async move {
        client
            .get(
                prefix,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_limit(MAX_MEMBERS as i64),
                ),
            )
            .await
    })?;
    answer
        .kvs()
        .iter()
        .map(|kv| {
            serde_json::from_slice(kv.value()).map_err(|e| ClusterError::Corrupt {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                detail: e.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_once_each() {
        assert_eq!(
            Role::parse_list("data, broker").unwrap(),
            vec![Role::Data, Role::Broker]
        );
        assert_eq!(
            Role::parse_list("coordinator,ingest,indexer,data,broker").unwrap(),
            Role::ALL.to_vec()
        );
        for bad in ["", "data,data", "datum", ",,"] {
            assert!(Role::parse_list(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn node_ids_and_ttls_are_checked() {
        check_node_id("node-1.a_b").unwrap();
        for bad in ["", "a/b", "a b", &"n".repeat(65)] {
            assert!(check_node_id(bad).is_err(), "{bad:?} was taken");
        }
        check_lease_ttl(DEFAULT_LEASE_TTL).unwrap();
        for bad in [
            Duration::from_secs(1),
            Duration::from_millis(2500),
            Duration::from_secs(301),
        ] {
            assert!(check_lease_ttl(bad).is_err(), "{bad:?} was taken");
        }
    }
}
