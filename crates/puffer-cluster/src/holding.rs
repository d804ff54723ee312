//! Which shards a data node holds: those the coordinator placed on it.
//!
//! A node with the `data` role alone (no `ingest`, no `indexer`, which hold every shard
//! to number SCUs and to publish) follows the whole log but keeps only the shards placed
//! on it. Every [`HOLDING_INTERVAL`] it compares the placement with what it holds:
//!
//! - a shard placed on it and not held is taken on ([`take_on`]): the files of its
//!   published snapshot are downloaded from deep storage (or none, for a shard not
//!   published yet, whose SCUs the log still holds from the first), the SCUs past the
//!   snapshot are read from the cluster's log, and the shard takes its place between
//!   two SCUs, so that reads never see it in part;
//! - a shard held and not placed on it is let go once it has stayed unplaced for
//!   [`RELEASE_GRACE`] (lazily, as Getafix deletes: a placement that changes back soon
//!   costs no download). A table holding no shard keeps its schema (see
//!   [`puffer_node::shards::NotHeld`]).
//!
//! At most one shard is taken on per round, so that a node that joins or restarts
//! does not download everything at once; brokers route to the holders the placement
//! names, and a holder still taking a shard on answers "not held" and is passed over.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use puffer_node::Database;
use serde::Serialize;

use crate::deep_storage::DeepStorage;
use crate::error::ClusterError;
use crate::etcd::Etcd;
use crate::placement::ShardPlacement;
use crate::scu_log::ClusterLog;
use crate::segments::{download, published_shard};
use puffer_query::Result;

/// How often a data node compares the placement with what it holds.
pub const HOLDING_INTERVAL: Duration = Duration::from_millis(500);
/// How long a shard held and no longer placed on a node stays before it is let go.
pub const RELEASE_GRACE: Duration = Duration::from_secs(10);

/// A change a data node makes to what it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HoldingChange {
    /// Take shard `1` of table `0` on.
    TakeOn(String, u32),
    /// Let shard `1` of table `0` go.
    Release(String, u32),
}

/// One table as a data node holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldTable {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u64,
    /// Whether each shard is held.
    pub held: Vec<bool>,
}

/// The changes `node` makes, given `placement` and what it holds: take on every shard
/// placed on it and not held, let go of those held and unplaced since at least `grace`
/// ago (`unplaced_since` remembers since when, and forgets shards placed again) while
/// the placement names a holder. Tables the placement does not know yet are left as
/// they are. Pure: the caller does the changes.
pub fn holding_changes(
    placement: &ShardPlacement,
    node: &str,
    tables: &[HeldTable],
    unplaced_since: &mut HashMap<(u64, u32), Instant>,
    now: Instant,
    grace: Duration,
) -> Vec<HoldingChange> {
    let mut changes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for table in tables {
        for (shard, &held) in table.held.iter().enumerate() {
            let shard = shard as u32;
            let Some(holders) = placement.holders(table.uid, shard) else {
                continue;
            };
            seen.insert((table.uid, shard));
            let placed_here = holders.iter().any(|n| n == node);
            if placed_here {
                unplaced_since.remove(&(table.uid, shard));
                if !held {
                    changes.push(HoldingChange::TakeOn(table.name.clone(), shard));
                }
                continue;
            }
            if !held || holders.is_empty() {
                unplaced_since.remove(&(table.uid, shard));
                continue;
            }
            let since = *unplaced_since.entry((table.uid, shard)).or_insert(now);
            if now.duration_since(since) >= grace {
                changes.push(HoldingChange::Release(table.name.clone(), shard));
            }
        }
    }
    unplaced_since.retain(|key, _| seen.contains(key));
    changes
}

/// What taking one shard on did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TakenOn {
    /// The table.
    pub table: String,
    /// The shard.
    pub shard: u32,
    /// Bytes downloaded from deep storage (0: taken on empty, from the log alone).
    pub bytes: u64,
    /// The SCU its snapshot covered.
    pub covers: u64,
    /// The SCU it took its place at.
    pub taken_on_at: u64,
    /// Time taken.
    pub millis: u64,
}

/// Takes shard `shard` of `table` on in `database`: its published snapshot from deep
/// storage, then the log past it (see the module docs).
pub fn take_on(
    etcd: &Etcd,
    deep: &DeepStorage,
    log: &ClusterLog,
    database: &Database,
    table: &str,
    shard: u32,
) -> Result<TakenOn> {
    // One at a time on this node: the holding loop and a broker's call may ask at once.
    static TAKING_ON: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = TAKING_ON
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = Instant::now();
    let handle = database.table(table)?;
    let uid = handle.uid();
    let dirs = handle.prepare_adoption(shard)?;
    let mut bytes = 0;
    let covers = match published_shard(etcd, uid, shard)? {
        Some(snapshot) => {
            for file in &snapshot.files {
                let content = download(deep, file)?;
                for dir in &dirs {
                    let path = dir.join(&file.name);
                    puffer_store::fs::write_file_atomic(&puffer_store::fs::RealFs, &path, &content)
                        .map_err(|e| puffer_store::StoreError::io(&path, e))?;
                }
                bytes += content.len() as u64;
            }
            snapshot.covers
        }
        None => {
            // Never published: the log keeps every SCU of it (collection waits for
            // every shard to be published).
            let first = log.first()?;
            if first > 1 {
                return Err(ClusterError::Unavailable(format!(
                    "shard {shard} of table {table} is not published and the log keeps SCUs \
                     from {first} only"
                ))
                .into());
            }
            0
        }
    };
    let reader = log.clone();
    let fetch: puffer_node::table::FetchScus =
        std::sync::Arc::new(move |after, upto| Ok(reader.records_between(after, upto)?));
    let taken_on_at = database.adopt_shard(table, shard, covers, fetch)?;
    Ok(TakenOn {
        table: table.to_string(),
        shard,
        bytes,
        covers,
        taken_on_at,
        millis: started.elapsed().as_millis() as u64,
    })
}

/// Makes sure this node holds shard `shard` of `table` (uid `uid`), taking it on if
/// it does not ([`take_on`]): what a broker asks when no live node holds a shard.
pub fn ensure_held(
    (etcd, deep, log): (&Etcd, &DeepStorage, &ClusterLog),
    database: &Database,
    table: &str,
    uid: u64,
    shard: u32,
) -> Result<()> {
    let here = database.table(table)?;
    if here.uid() != uid {
        return Err(puffer_query::QueryError::UnknownTable(format!(
            "{table} with uid {uid} (this node has uid {})",
            here.uid()
        )));
    }
    if here.holds(shard) {
        return Ok(());
    }
    match take_on(etcd, deep, log, database, table, shard) {
        Ok(_) => Ok(()),
        // Taken on meanwhile by the holding loop.
        Err(_) if here.holds(shard) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a data node's holding did, for status.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HoldingStatus {
    /// Rounds run.
    pub rounds: u64,
    /// Shards held now, per table.
    pub held: BTreeMap<String, Vec<u32>>,
    /// Shards taken on so far.
    pub taken_on: u64,
    /// Shards let go so far.
    pub released: u64,
    /// The last shard taken on.
    pub last_taken_on: Option<TakenOn>,
    /// Shards held here whose layers the joint planner set, with the layers.
    pub planned_layers: BTreeMap<String, Vec<(u32, u32)>>,
    /// The last failure.
    pub error: Option<String>,
}

/// How long a data node waits before it tries again to take on a shard whose taking
/// on failed `failures` times in a row: 1 s, doubling, at most
/// [`MAX_TAKE_ON_BACKOFF`].
pub fn take_on_backoff(failures: u32) -> Duration {
    let doubled = Duration::from_secs(1).saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(MAX_TAKE_ON_BACKOFF)
}

/// The longest wait before taking a shard on is tried again.
pub const MAX_TAKE_ON_BACKOFF: Duration = Duration::from_secs(60);

/// What a data node's holding loop remembers between rounds.
#[derive(Debug, Default)]
pub struct HoldingMemory {
    /// Since when each held shard has been seen not placed here.
    unplaced_since: HashMap<(u64, u32), Instant>,
    /// Shards whose taking on failed: failures in a row, and when to try again.
    failed: HashMap<(String, u32), (u32, Instant)>,
    /// Shards whose layers this loop set as the joint planner chose: (table uid,
    /// shard) to layers. Only these are handed back to the layer manager when the plan
    /// stops naming them (a replica pinned by hand stays pinned).
    planned_layers: HashMap<(u64, u32), u32>,
}

/// Sets the layers of the shards `database` holds as the joint planner chose in
/// `placement` (pinned there), and hands those it set before and the plan no longer
/// names back to the layer manager. Every data node does this, whatever it holds.
pub fn apply_planned_layers(
    placement: &ShardPlacement,
    database: &Database,
    memory: &mut HoldingMemory,
    status: &mut HoldingStatus,
) -> Result<()> {
    let mut first_error = None;
    let mut seen = Vec::new();
    let tables = held_tables(database);
    for table in &tables {
        for shard in (0..table.held.len() as u32).filter(|&s| table.held[s as usize]) {
            let key = (table.uid, shard);
            seen.push(key);
            let wanted = placement.planned_layers(table.uid, shard);
            if wanted == memory.planned_layers.get(&key).copied() {
                continue;
            }
            match database.plan_layers(&table.name, shard, wanted) {
                Ok(_) => match wanted {
                    Some(layers) => {
                        memory.planned_layers.insert(key, layers);
                    }
                    None => {
                        memory.planned_layers.remove(&key);
                    }
                },
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    // A shard let go takes its setting with it.
    memory.planned_layers.retain(|key, _| seen.contains(key));
    let names: HashMap<u64, &str> = tables.iter().map(|t| (t.uid, t.name.as_str())).collect();
    status.planned_layers = BTreeMap::new();
    for (&(uid, shard), &layers) in &memory.planned_layers {
        if let Some(name) = names.get(&uid) {
            status
                .planned_layers
                .entry(name.to_string())
                .or_default()
                .push((shard, layers));
        }
    }
    for shards in status.planned_layers.values_mut() {
        shards.sort_unstable();
    }
    first_error.map_or(Ok(()), Err)
}

/// One round for `node`: makes the changes `placement` asks for (at most one take-on;
/// shards are let go after `grace`). A shard whose taking on fails is tried again
/// after [`take_on_backoff`], and the others go on meanwhile.
#[allow(clippy::too_many_arguments)] // the loop's parts, its settings and its state
pub fn hold_round(
    etcd: &Etcd,
    deep: &DeepStorage,
    log: &ClusterLog,
    database: &Database,
    placement: Option<&ShardPlacement>,
    (node, grace): (&str, Duration),
    memory: &mut HoldingMemory,
    status: &mut HoldingStatus,
) -> Result<()> {
    status.rounds += 1;
    let tables = held_tables(database);
    status.held = tables
        .iter()
        .map(|t| {
            let held = (0..t.held.len() as u32)
                .filter(|&s| t.held[s as usize])
                .collect();
            (t.name.clone(), held)
        })
        .collect();
    let Some(placement) = placement else {
        return Ok(());
    };
    let now = Instant::now();
    let changes = holding_changes(
        placement,
        node,
        &tables,
        &mut memory.unplaced_since,
        now,
        grace,
    );
    // Only shards still to take on are remembered as failed.
    memory.failed.retain(|(table, shard), _| {
        changes.contains(&HoldingChange::TakeOn(table.clone(), *shard))
    });
    let mut took_one = false;
    let mut first_error = None;
    for change in changes {
        match change {
            HoldingChange::TakeOn(table, shard) if !took_one => {
                let key = (table.clone(), shard);
                if memory.failed.get(&key).is_some_and(|(_, next)| *next > now) {
                    continue;
                }
                took_one = true;
                match take_on(etcd, deep, log, database, &table, shard) {
                    Ok(taken) => {
                        memory.failed.remove(&key);
                        status.taken_on += 1;
                        status.last_taken_on = Some(taken);
                    }
                    Err(e) => {
                        let failures = memory.failed.get(&key).map_or(0, |(n, _)| *n) + 1;
                        let next = Instant::now() + take_on_backoff(failures);
                        memory.failed.insert(key, (failures, next));
                        first_error.get_or_insert(e);
                    }
                }
            }
            HoldingChange::TakeOn(..) => {}
            HoldingChange::Release(table, shard) => match database.release_shard(&table, shard) {
                Ok(released) => status.released += u64::from(released),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            },
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Every table of `database` with the shards it holds.
pub fn held_tables(database: &Database) -> Vec<HeldTable> {
    database
        .table_names()
        .into_iter()
        .filter_map(|name| database.table(&name).ok())
        .map(|table| HeldTable {
            name: table.name().to_string(),
            uid: table.uid(),
            held: (0..table.layout().shards).map(|s| table.holds(s)).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(shards: &[&[&str]]) -> ShardPlacement {
        ShardPlacement {
            replicas: 2,
            tables: [(
                7u64,
                shards
                    .iter()
                    .map(|holders| holders.iter().map(|h| h.to_string()).collect())
                    .collect(),
            )]
            .into_iter()
            .collect(),
            ..ShardPlacement::default()
        }
    }

    fn table(held: &[bool]) -> HeldTable {
        HeldTable {
            name: "t".into(),
            uid: 7,
            held: held.to_vec(),
        }
    }

    /// The rule, written out naively: what a node should do about each shard.
    fn expected(
        placement: &ShardPlacement,
        held: &[bool],
        unplaced_for: &[Option<Duration>],
        grace: Duration,
    ) -> Vec<HoldingChange> {
        let mut changes = Vec::new();
        for (s, &is_held) in held.iter().enumerate() {
            let holders = placement.holders(7, s as u32).unwrap();
            let here = holders.iter().any(|h| h == "a");
            if here && !is_held {
                changes.push(HoldingChange::TakeOn("t".into(), s as u32));
            } else if !here
                && is_held
                && !holders.is_empty()
                && unplaced_for[s].is_some_and(|d| d >= grace)
            {
                changes.push(HoldingChange::Release("t".into(), s as u32));
            }
        }
        changes
    }

    #[test]
    fn changes_follow_the_placement_lazily() {
        let grace = Duration::from_secs(10);
        let options: [&[&str]; 4] = [&["a"], &["b"], &["a", "b"], &[]];
        let start = Instant::now();
        // Every combination of 3 shards' holders, what is held, and how long ago it
        // was first seen unplaced.
        for p0 in options {
            for p1 in options {
                for p2 in options {
                    let placement = placement(&[p0, p1, p2]);
                    for held_bits in 0..8u32 {
                        let held: Vec<bool> = (0..3).map(|s| held_bits >> s & 1 == 1).collect();
                        for age in [Duration::ZERO, Duration::from_secs(11)] {
                            let mut since = HashMap::new();
                            for s in 0..3u32 {
                                since.insert((7, s), start);
                            }
                            let now = start + age;
                            let changes = holding_changes(
                                &placement,
                                "a",
                                &[table(&held)],
                                &mut since,
                                now,
                                grace,
                            );
                            let unplaced_for: Vec<Option<Duration>> = (0..3)
                                .map(|s| {
                                    let holders = placement.holders(7, s).unwrap();
                                    (held[s as usize]
                                        && !holders.is_empty()
                                        && !holders.iter().any(|h| h == "a"))
                                    .then_some(age)
                                })
                                .collect();
                            assert_eq!(
                                changes,
                                expected(&placement, &held, &unplaced_for, grace),
                                "{p0:?} {p1:?} {p2:?} held {held:?} age {age:?}"
                            );
                            // What is remembered is exactly the held, unplaced shards.
                            for s in 0..3u32 {
                                assert_eq!(
                                    since.contains_key(&(7, s)),
                                    unplaced_for[s as usize].is_some(),
                                    "shard {s}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_failed_take_on_waits_twice_as_long_each_time_up_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| take_on_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(take_on_backoff(u32::MAX), MAX_TAKE_ON_BACKOFF);
    }

    #[test]
    fn a_shard_first_seen_unplaced_waits_and_one_placed_again_is_forgotten() {
        let grace = Duration::from_secs(10);
        let mut since = HashMap::new();
        let start = Instant::now();
        let unplaced = placement(&[&["a"], &["b"]]);
        let held = [table(&[true, true])];
        assert!(holding_changes(&unplaced, "a", &held, &mut since, start, grace).is_empty());
        assert_eq!(
            holding_changes(&unplaced, "a", &held, &mut since, start + grace, grace),
            vec![HoldingChange::Release("t".into(), 1)]
        );
        let placed_again = placement(&[&["a"], &["a", "b"]]);
        assert!(
            holding_changes(&placed_again, "a", &held, &mut since, start + grace, grace).is_empty()
        );
        assert!(since.is_empty());
        // A table the placement does not know is left alone.
        let other = HeldTable {
            name: "u".into(),
            uid: 8,
            held: vec![false, true],
        };
        assert!(holding_changes(&unplaced, "a", &[other], &mut since, start, grace).is_empty());
    }
}

#[cfg(test)]
mod planned_layers {
    use super::*;
    use puffer_node::{DatabaseOptions, TableLayout};
    use puffer_store::{AttrType, Attribute, Record, Schema, Value, WriteOp};

    /// (pinned, target layers) of every replica of shard `shard` of `table`.
    fn layer_settings(database: &Database, table: &str, shard: u32) -> Vec<(bool, u32)> {
        database
            .node()
            .status()
            .replicas
            .iter()
            .filter(|r| r.table == table && r.shard == shard)
            .map(|r| (r.pinned, r.target_layers))
            .collect()
    }

    #[test]
    fn a_node_sets_the_planned_layers_and_hands_back_only_what_it_set() {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open_with(dir.path(), DatabaseOptions::default()).unwrap();
        let schema = Schema::new(
            "id",
            vec![Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            }],
        )
        .unwrap();
        let layout = TableLayout {
            shards: 2,
            replicas: 1,
        };
        database.create_table_with("rooms", schema, layout).unwrap();
        let ops = (0..4000)
            .map(|i| {
                let mut record = Record::new(format!("room{i:05}").into_bytes());
                let city = format!("city number {} of many", i % 97);
                record
                    .values
                    .insert("city".into(), Value::String(city.into_bytes()));
                WriteOp::Put(record)
            })
            .collect();
        database.write_batch(vec![("rooms".into(), ops)]).unwrap();
        let table = database.table("rooms").unwrap();
        table.compact_all().unwrap();
        let uid = table.uid();
        // One round of the layer manager reads the new segments' layer state.
        database.node().tick();
        let max_layers = database.node().status().replicas[0].max_layers;
        assert!(max_layers >= 2, "an index this size has layers to set");
        // Shard 1 is pinned by hand at 1 layer; the plan names shard 0 only.
        let shard_one = database
            .node()
            .status()
            .replicas
            .iter()
            .find(|r| r.table == "rooms" && r.shard == 1)
            .unwrap()
            .id;
        database.node().set_layers(shard_one, 1).unwrap();
        let mut placement = ShardPlacement {
            replicas: 1,
            layers: [(uid, vec![2, 0])].into(),
            ..ShardPlacement::default()
        };
        let (mut memory, mut status) = (HoldingMemory::default(), HoldingStatus::default());
        apply_planned_layers(&placement, &database, &mut memory, &mut status).unwrap();
        assert_eq!(layer_settings(&database, "rooms", 0), vec![(true, 2)]);
        assert_eq!(layer_settings(&database, "rooms", 1), vec![(true, 1)]);
        assert_eq!(status.planned_layers["rooms"], vec![(0, 2)]);
        // The plan moves shard 0 to 1 layer, then stops naming it: it goes back to
        // the layer manager; the hand-pinned shard 1 stays pinned throughout.
        placement.layers = [(uid, vec![1, 0])].into();
        apply_planned_layers(&placement, &database, &mut memory, &mut status).unwrap();
        assert_eq!(layer_settings(&database, "rooms", 0), vec![(true, 1)]);
        placement.layers = BTreeMap::new();
        apply_planned_layers(&placement, &database, &mut memory, &mut status).unwrap();
        assert!(layer_settings(&database, "rooms", 0)
            .iter()
            .all(|&(pinned, _)| !pinned));
        assert_eq!(layer_settings(&database, "rooms", 1), vec![(true, 1)]);
        assert!(status.planned_layers.is_empty());
    }
}
