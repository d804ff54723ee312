//! The coordinator's election, by etcd's election service, and fencing: a leader
//! writes only through a transaction that checks its election key still exists with
//! the revision it won with. That key is on the leader's lease, so once the lease
//! expires (the leader paused, partitioned or dead) every later write of the deposed
//! leader is refused by etcd itself, whatever the deposed process believes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, LeaderKey, Txn, TxnOp};

use super::Etcd;
use crate::error::{ClusterError, Result};

/// The leader now, as etcd's election service reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The value it campaigned with: its node id.
    pub node_id: String,
    /// Its lease.
    pub lease: i64,
}

/// Who leads the coordinators now, if anyone.
pub fn leader(etcd: &Etcd) -> Result<Option<Leader>> {
    leader_of(etcd, etcd.keys().coordinator_election())
}

/// Who leads election `name` now, if anyone.
pub fn leader_of(etcd: &Etcd, name: String) -> Result<Option<Leader>> {
    let answer = etcd.call(move |mut client| async move {
        match client.leader(name).await {
            Ok(answer) => Ok(answer.kv().map(|kv| Leader {
                node_id: String::from_utf8_lossy(kv.value()).into_owned(),
                lease: kv.lease(),
            })),
            // etcd answers "election: no leader" as an error.
            Err(etcd_client::Error::GRpcStatus(status))
                if status.message().contains("no leader") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    })?;
    Ok(answer)
}

/// A process standing for coordinator leader: campaigns in the background, on its
/// membership lease, until elected, and holds the leadership until its lease goes.
#[derive(Debug)]
pub struct Candidate {
    etcd: Etcd,
    won: Arc<Mutex<Option<LeaderKey>>>,
    campaign: tokio::task::JoinHandle<()>,
}

impl Candidate {
    /// Starts campaigning for coordinator as `node_id` on `lease` (the node's
    /// membership lease).
    pub fn stand(etcd: &Etcd, node_id: &str, lease: i64) -> Candidate {
        Candidate::stand_in(etcd, etcd.keys().coordinator_election(), node_id, lease)
    }

    /// Starts campaigning in election `name` (a key of [`super::Keys`]).
    pub fn stand_in(etcd: &Etcd, name: String, node_id: &str, lease: i64) -> Candidate {
        let won = Arc::new(Mutex::new(None));
        let campaign = etcd.spawn(campaign(
            etcd.clone(),
            name,
            node_id.to_string(),
            lease,
            Arc::clone(&won),
        ));
        Candidate {
            etcd: etcd.clone(),
            won,
            campaign,
        }
    }

    /// The leadership, if this candidate has won (it may have been deposed since:
    /// writes through it check).
    pub fn leadership(&self) -> Option<Leadership> {
        let won = self.won.lock().unwrap_or_else(PoisonError::into_inner);
        won.clone().map(|key| Leadership {
            etcd: self.etcd.clone(),
            key,
        })
    }

    /// Waits at most `timeout` to win.
    pub fn wait_elected(&self, timeout: Duration) -> Option<Leadership> {
        let started = Instant::now();
        loop {
            if let Some(leadership) = self.leadership() {
                return Some(leadership);
            }
            if started.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.campaign.abort();
    }
}

/// Campaigns until elected. etcd's campaign call returns once this candidate leads;
/// each call is bounded by the request deadline, and is tried again on the same
/// lease, which etcd treats as the same candidacy.
async fn campaign(
    etcd: Etcd,
    name: String,
    node_id: String,
    lease: i64,
    won: Arc<Mutex<Option<LeaderKey>>>,
) {
    loop {
        let mut client = etcd.client();
        match client.campaign(name.clone(), node_id.clone(), lease).await {
            Ok(mut answer) => {
                if let Some(key) = answer.take_leader() {
                    *won.lock().unwrap_or_else(PoisonError::into_inner) = Some(key);
                    return;
                }
            }
            // A deadline, or etcd away: stand again after a pause. A lease that has
            // gone makes every campaign fail; the node then joins again with a new one.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The right to write as leader, checked by etcd at every write.
#[derive(Clone, Debug)]
pub struct Leadership {
    etcd: Etcd,
    key: LeaderKey,
}

impl Leadership {
    /// The lease the leadership hangs on.
    pub fn lease(&self) -> i64 {
        self.key.lease()
    }

    /// Runs `ops` only if this is still the leader; `Fenced` if it is not.
    pub fn write(&self, ops: Vec<TxnOp>) -> Result<()> {
        self.write_when(Vec::new(), ops)
    }

    /// Runs `ops` only if this is still the leader and `compares` hold; `Fenced` if
    /// either fails (nothing is written then).
    pub fn write_when(&self, compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<()> {
        let mut all = vec![Compare::create_revision(
            self.key.key().to_vec(),
            CompareOp::Equal,
            self.key.rev(),
        )];
        all.extend(compares);
        let txn = Txn::new().when(all).and_then(ops);
        let answer = self
            .etcd
            .call(move |mut client| async move { client.txn(txn).await })?;
        if answer.succeeded() {
            Ok(())
        } else {
            Err(ClusterError::Fenced(
                "this node is no longer the leader (its lease expired), or what it wrote \
                 against has changed"
                    .into(),
            ))
        }
    }

    /// Puts `value` at `name` under the coordinated prefix, as leader.
    pub fn put(&self, name: &str, value: Vec<u8>) -> Result<()> {
        let key = format!("{}{name}", self.etcd.keys().coordinated());
        self.write(vec![TxnOp::put(key, value, None)])
    }
}

/// The coordinator leader's record `name` (JSON), if written; one that does not decode
/// is `corrupt`, never used.
pub fn read_coordinated<T: serde::de::DeserializeOwned>(
    etcd: &Etcd,
    name: &str,
) -> Result<Option<T>> {
    let key = format!("{}{name}", etcd.keys().coordinated());
    let answer = etcd.call(move |mut client| async move { client.get(key, None).await })?;
    match answer.kvs().first() {
        None => Ok(None),
        Some(kv) => {
            serde_json::from_slice(kv.value())
                .map(Some)
                .map_err(|e| ClusterError::Corrupt {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    detail: e.to_string(),
                })
        }
    }
}
