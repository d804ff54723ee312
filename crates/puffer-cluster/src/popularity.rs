//! Shard popularity on the coordinator leader (Getafix 4.1): every window it asks each
//! live data node for its shards' read counts, turns them into the window's accesses,
//! ages the windows (`sum_i C_ij / 2^(i-1)`, [`Popularity`]) and checkpoints the book in
//! etcd, so that a new leader starts from the counts of the old one.
//!
//! Nodes never reset their counters: a node reports, per shard it holds, the reads
//! answered since it began counting that shard, and the book keeps the last report of
//! every node, so a window's accesses are differences. A shard counted anew (let go and
//! taken on again, or its node restarted) reports a new start, and its whole count is
//! the window's. A node that did not answer in a window has its reads counted in the
//! window it answers next, and one that left takes its counts since its last report
//! with it. Retrying a collection does not count anything twice.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use puffer_adapt::replication::Popularity;
use puffer_node::ShardReads;
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::etcd::{Etcd, Leadership, MemberCard, Role};
use crate::rpc::client::NodeClient;

/// A shard of a table: (table uid, shard).
pub type ShardKey = (u64, u32);

/// How often the coordinator collects the counts by default (the paper's minute).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Deadline of one node's answer with its counts.
pub const COUNTS_DEADLINE: Duration = Duration::from_secs(2);

/// The book's name under `coordinated/`.
pub const POPULARITY_NAME: &str = "popularity";
/// Windows remembered (as [`Popularity`] ages them, older ones weigh under 2^-31).
pub const MAX_WINDOWS: usize = Popularity::MAX_WINDOWS;
/// Nodes whose last report the book keeps, and shards per report: a bound on its size.
pub const MAX_NODES: usize = 1024;
/// Shards one report may list.
pub const MAX_SHARDS_PER_REPORT: usize = 1 << 16;

/// What one data node reports each window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccessReport {
    /// Each shard it holds: reads answered, and bytes taken.
    pub shards: Vec<ShardReads>,
    /// Its room for replicas (the layer manager's memory budget).
    pub memory_budget_bytes: u64,
}

/// Each reporting node's room and the bytes of each shard it holds, as garbage
/// collection sees them.
pub fn storage_of(reports: &BTreeMap<String, AccessReport>) -> BTreeMap<String, NodeRoom> {
    reports
        .iter()
        .map(|(node, report)| {
            let room = NodeRoom {
                capacity_bytes: report.memory_budget_bytes,
                footprint_bytes_by_shard: report
                    .shards
                    .iter()
                    .map(|s| ((s.uid, s.shard), s.footprint_bytes))
                    .collect(),
            };
            (node.clone(), room)
        })
        .collect()
}

/// Per shard, the storage-throughput curve its holders measured: the one of most steps
/// among the reports (the first node by id on a tie), as the joint planner weighs more
/// layers against more replicas by. Shards with no measured step are absent.
pub fn curves_of(
    reports: &BTreeMap<String, AccessReport>,
) -> BTreeMap<ShardKey, Vec<puffer_adapt::replication::joint::LayerCost>> {
    let mut curves: BTreeMap<ShardKey, Vec<_>> = BTreeMap::new();
    for report in reports.values() {
        for shard in &report.shards {
            let best = curves.entry((shard.uid, shard.shard)).or_default();
            if shard.curve.len() > best.len() {
                *best = shard.curve.clone();
            }
        }
    }
    curves.retain(|_, curve| !curve.is_empty());
    curves
}

/// Per shard, its reads in flight on average over a window (Little's law: the window's
/// reads over its length, times the seconds one read takes), which Scarlett counts
/// replicas by. A read's time is the shard's measured curve's shallowest step (its
/// slowest, so the count errs high), or the median of those of the measured shards for
/// a shard with none; with no curve at all, every shard has 0 in flight.
pub fn reads_in_flight(
    window_reads: &BTreeMap<ShardKey, u64>,
    curves: &BTreeMap<ShardKey, Vec<puffer_adapt::replication::joint::LayerCost>>,
    window: Duration,
) -> BTreeMap<ShardKey, f64> {
    let shallowest = |curve: &Vec<puffer_adapt::replication::joint::LayerCost>| {
        curve.first().map(|c| c.seconds_per_query)
    };
    let mut measured: Vec<f64> = curves
        .values()
        .filter_map(shallowest)
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    measured.sort_by(f64::total_cmp);
    let typical = measured.get(measured.len() / 2).copied();
    let seconds = window.as_secs_f64();
    window_reads
        .iter()
        .map(|(key, &reads)| {
            let per_read = curves
                .get(key)
                .and_then(shallowest)
                .filter(|s| s.is_finite() && *s > 0.0)
                .or(typical)
                .unwrap_or(0.0);
            let rate = if seconds > 0.0 {
                reads as f64 / seconds
            } else {
                0.0
            };
            (*key, rate * per_read)
        })
        .collect()
}

/// One data node's room and what its shards take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRoom {
    /// Its room for replicas.
    pub capacity_bytes: u64,
    /// Bytes each shard it holds takes there.
    pub footprint_bytes_by_shard: BTreeMap<ShardKey, u64>,
}

/// One node's last report of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LastCount {
    counting_since: (u64, u64),
    reads: u64,
}

/// The coordinator's access counts: the windows recorded, newest first, and each node's
/// last report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessBook {
    /// Accesses per shard in each window, newest first.
    windows: VecDeque<Vec<(ShardKey, u64)>>,
    /// Per node id, per shard, its last report.
    last: BTreeMap<String, Vec<(ShardKey, LastCount)>>,
    /// Windows recorded since the book began (numbers them in the admin API).
    pub windows_recorded: u64,
    /// Per node id, at its last report: its room and the bytes its shards take (for
    /// the admin API's view of garbage collection).
    #[serde(default)]
    pub rooms: BTreeMap<String, RoomUse>,
}

/// A data node's room and how much of it its shards take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomUse {
    /// Its room for replicas (0: none reported).
    pub capacity_bytes: u64,
    /// What its shards take.
    pub used_bytes: u64,
}

impl AccessBook {
    /// Records one window from the reports of the nodes that answered (node id, its
    /// shards' counts); nodes not among them keep their last report.
    pub fn record_window(&mut self, reports: &BTreeMap<String, AccessReport>) -> Result<()> {
        // Checked whole first: a window is recorded entirely or not at all.
        if let Some((node, report)) = reports
            .iter()
            .find(|(_, r)| r.shards.len() > MAX_SHARDS_PER_REPORT)
        {
            return Err(ClusterError::Invalid(format!(
                "node {node} reported {} shards, more than {MAX_SHARDS_PER_REPORT}",
                report.shards.len()
            )));
        }
        let nodes = self.last.len()
            + reports
                .keys()
                .filter(|n| !self.last.contains_key(*n))
                .count();
        if nodes > MAX_NODES {
            return Err(ClusterError::Invalid(format!(
                "reports from more than {MAX_NODES} nodes"
            )));
        }
        let shards: std::collections::BTreeSet<ShardKey> = reports
            .values()
            .flat_map(|r| r.shards.iter().map(|c| (c.uid, c.shard)))
            .collect();
        if shards.len() > puffer_adapt::replication::MAX_SEGMENTS {
            return Err(ClusterError::Invalid(format!(
                "reports of {} shards, more than {}",
                shards.len(),
                puffer_adapt::replication::MAX_SEGMENTS
            )));
        }
        let mut window: BTreeMap<ShardKey, u64> = BTreeMap::new();
        for (node, report) in reports {
            let counts = &report.shards;
            let before: BTreeMap<ShardKey, LastCount> = self
                .last
                .get(node)
                .map(|last| last.iter().copied().collect())
                .unwrap_or_default();
            let mut now = Vec::with_capacity(counts.len());
            for count in counts {
                let key = (count.uid, count.shard);
                let accesses = match before.get(&key) {
                    Some(last) if last.counting_since == count.counting_since => {
                        count.reads.saturating_sub(last.reads)
                    }
                    // Counted anew (or first seen): every read is this window's.
                    _ => count.reads,
                };
                if accesses > 0 {
                    let total = window.entry(key).or_insert(0);
                    *total = total.saturating_add(accesses);
                }
                now.push((
                    key,
                    LastCount {
                        counting_since: count.counting_since,
                        reads: count.reads,
                    },
                ));
            }
            self.last.insert(node.clone(), now);
            let used_bytes = counts.iter().map(|c| c.footprint_bytes).sum();
            self.rooms.insert(
                node.clone(),
                RoomUse {
                    capacity_bytes: report.memory_budget_bytes,
                    used_bytes,
                },
            );
        }
        self.windows.push_front(window.into_iter().collect());
        self.windows.truncate(MAX_WINDOWS);
        self.windows_recorded += 1;
        Ok(())
    }

    /// Forgets the last reports of nodes no longer in `live` (their next report, if they
    /// come back, counts whole: they restarted).
    pub fn forget_nodes_except(&mut self, live: &[String]) {
        self.last.retain(|node, _| live.contains(node));
        self.rooms.retain(|node, _| live.contains(node));
    }

    /// Windows remembered.
    pub fn window_count(&self) -> usize {
        self.windows.len()
    }

    /// Each shard's aged popularity (shards read in no remembered window are absent).
    pub fn popularity(&self) -> BTreeMap<ShardKey, f64> {
        // Popularity numbers segments; the shards are numbered here in key order.
        let keys: Vec<ShardKey> = {
            let mut keys: Vec<ShardKey> = self
                .windows
                .iter()
                .flat_map(|w| w.iter().map(|(key, _)| *key))
                .collect();
            keys.sort_unstable();
            keys.dedup();
            keys
        };
        let id = |key: &ShardKey| keys.binary_search(key).expect("listed above") as u64;
        let mut aged = Popularity::new();
        for window in self.windows.iter().rev() {
            let counts = window.iter().map(|(key, n)| (id(key), *n)).collect();
            aged.record_window(&counts)
                .expect("record_window bounds a window's shards by Popularity's own bound");
        }
        aged.popularities()
            .into_iter()
            .map(|(segment, popularity)| (keys[segment as usize], popularity))
            .collect()
    }

    /// Accesses of the newest window per shard.
    pub fn newest_window(&self) -> BTreeMap<ShardKey, u64> {
        self.windows
            .front()
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The coordinator's clients of the data nodes, by gRPC address, kept between windows.
#[derive(Default)]
pub struct CountClients {
    clients: BTreeMap<String, NodeClient>,
}

impl CountClients {
    /// Asks every live data node for its counts, all at once, each within
    /// [`COUNTS_DEADLINE`]; a node that fails is left out of this window (its reads
    /// count in the next it answers).
    pub fn collect(&mut self, members: &[MemberCard]) -> BTreeMap<String, AccessReport> {
        let data: Vec<(&str, &str)> = members
            .iter()
            .filter(|m| m.roles.contains(&Role::Data))
            .filter_map(|m| Some((m.node_id.as_str(), m.rpc_address.as_deref()?)))
            .collect();
        self.clients
            .retain(|address, _| data.iter().any(|(_, a)| a == address));
        let mut asked = Vec::new();
        for (node, address) in data {
            if !self.clients.contains_key(address) {
                match NodeClient::new(address, COUNTS_DEADLINE) {
                    Ok(client) => {
                        self.clients.insert(address.to_string(), client);
                    }
                    Err(_) => continue,
                }
            }
            let client = self.clients[address].clone();
            asked.push((
                node.to_string(),
                std::thread::spawn(move || client.access_counts()),
            ));
        }
        asked
            .into_iter()
            .filter_map(|(node, answer)| Some((node, answer.join().ok()?.ok()?)))
            .collect()
    }
}

/// Writes the book under `coordinated/popularity`, fenced on the leadership.
pub fn checkpoint(leadership: &Leadership, book: &AccessBook) -> Result<()> {
    let value = serde_json::to_vec(book).expect("the book encodes");
    leadership.put(POPULARITY_NAME, value)
}

/// The book the last leader checkpointed, if any.
pub fn read_checkpoint(etcd: &Etcd) -> Result<Option<AccessBook>> {
    crate::etcd::read_coordinated(etcd, POPULARITY_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(uid: u64, shard: u32, reads: u64, since: u64) -> ShardReads {
        ShardReads {
            table: "t".into(),
            uid,
            shard,
            reads,
            counting_since: (1_000, since),
            footprint_bytes: 1,
            curve: Vec::new(),
        }
    }

    #[test]
    fn reads_in_flight_is_the_rate_times_the_time_of_a_read() {
        use puffer_adapt::replication::joint::LayerCost;
        let step = |seconds_per_query| LayerCost {
            layers: 1,
            footprint_bytes: 10,
            seconds_per_query,
        };
        let reads: BTreeMap<ShardKey, u64> = [((1, 0), 600), ((1, 1), 60), ((1, 2), 6)].into();
        let curves: BTreeMap<ShardKey, Vec<LayerCost>> =
            [((1, 0), vec![step(0.5)]), ((1, 1), vec![step(0.1)])].into();
        let in_flight = reads_in_flight(&reads, &curves, Duration::from_secs(60));
        // 10 reads a second of 0.5 s each; 1 of 0.1 s; 0.1 a second of the median 0.5 s
        // (the median of two is the upper one).
        let expected: BTreeMap<ShardKey, f64> =
            [((1, 0), 5.0), ((1, 1), 0.1), ((1, 2), 0.05)].into();
        for (key, value) in &expected {
            assert!((in_flight[key] - value).abs() < 1e-12, "{in_flight:?}");
        }
        // No curve anywhere: nothing in flight.
        let none = reads_in_flight(&reads, &BTreeMap::new(), Duration::from_secs(60));
        assert!(none.values().all(|&v| v == 0.0));
    }

    fn reports(list: &[(&str, Vec<ShardReads>)]) -> BTreeMap<String, AccessReport> {
        list.iter()
            .map(|(node, counts)| {
                let report = AccessReport {
                    shards: counts.clone(),
                    memory_budget_bytes: 0,
                };
                (node.to_string(), report)
            })
            .collect()
    }

    #[test]
    fn windows_are_differences_of_the_counters_and_restarts_count_whole() {
        let mut book = AccessBook::default();
        book.record_window(&reports(&[
            ("a", vec![count(7, 0, 10, 1), count(7, 1, 4, 2)]),
            ("b", vec![count(7, 0, 6, 5)]),
        ]))
        .unwrap();
        // Shard (7, 0) was read on both nodes.
        assert_eq!(book.newest_window(), [((7, 0), 16), ((7, 1), 4)].into());
        // b does not answer; a's counters grow; (7, 1) was let go and taken on again.
        book.record_window(&reports(&[(
            "a",
            vec![count(7, 0, 25, 1), count(7, 1, 3, 9)],
        )]))
        .unwrap();
        assert_eq!(book.newest_window(), [((7, 0), 15), ((7, 1), 3)].into());
        // b answers again: its reads since its last report land in this window.
        book.record_window(&reports(&[("b", vec![count(7, 0, 10, 5)])]))
            .unwrap();
        assert_eq!(book.newest_window(), [((7, 0), 4)].into());
        // The same report again (a retried collection): nothing new.
        book.record_window(&reports(&[("b", vec![count(7, 0, 10, 5)])]))
            .unwrap();
        assert_eq!(book.newest_window(), BTreeMap::new());
        // Aged, newest first: (7,0): 0 + 4/2 + 15/4 + 16/8; (7,1): 0 + 0 + 3/4 + 4/8.
        let popularity = book.popularity();
        assert_eq!(popularity.get(&(7, 0)), Some(&(2.0 + 3.75 + 2.0)));
        assert_eq!(popularity.get(&(7, 1)), Some(&(0.75 + 0.5)));
        assert_eq!(book.windows_recorded, 4);
    }

    #[test]
    fn the_book_survives_a_round_trip_and_forgets_gone_nodes() {
        let mut book = AccessBook::default();
        book.record_window(&reports(&[
            ("a", vec![count(1, 0, 8, 1)]),
            ("b", vec![count(1, 0, 2, 2)]),
        ]))
        .unwrap();
        let copy: AccessBook = serde_json::from_slice(&serde_json::to_vec(&book).unwrap()).unwrap();
        assert_eq!(copy, book);
        book.forget_nodes_except(&["a".to_string()]);
        // b came back (restarted) with a count of 2 since the same start: counted whole.
        book.record_window(&reports(&[("b", vec![count(1, 0, 2, 2)])]))
            .unwrap();
        assert_eq!(book.newest_window(), [((1, 0), 2)].into());
        assert!(book.window_count() <= MAX_WINDOWS);
    }
}
