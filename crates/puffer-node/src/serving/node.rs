//! The adaptive node: every shard replica serves from its own queue, and every `delta`
//! the node samples the queues, feeds the layer manager and applies its decisions.
//!
//! This is the only place where the policies of `puffer-adapt` meet threads and clocks:
//! [`AdaptiveNode::tick`] gathers measurements (queue lengths, completions, busy time,
//! footprints), hands them to the pure policies and reconciles each replica's indexes to
//! the layer count decided. A background thread calls `tick` every `delta`; tests call it
//! by hand.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use puffer_adapt::attributes::{
    self, AttributeConfig, AttributeDecision, AttributeSample, LayerKind,
};
use puffer_adapt::manager::{DropReason, ReplicaSample};
use puffer_adapt::replication::joint::LayerCost;
use puffer_adapt::{
    Decision, LayerManager, ManagerConfig, Marks, QueueAverager, ReplicaId, ReplicaScheduler,
    ThroughputCurve,
};
use puffer_index::Construction;
use serde::Serialize;

use crate::serving::pool::{PoolCounters, ReplicaPool};
use crate::serving::replica::{reconcile, AttributeLayerRow, LayerState, LayeredReplica};
use puffer_store::{Result, StoreError};

/// Most layers an index has (puffer-index allows up to 8 levels).
const MAX_INDEX_LAYERS: u32 = 8;

/// Settings of the adaptive node; every one is configurable, defaults chosen by measurement
/// (see ARCHITECTURE.md, "Adapting on one node").
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// How often queues are sampled and the layer manager runs.
    pub delta: Duration,
    /// Weight of the newest queue sample in the average.
    pub alpha: f64,
    /// Marks, hold time and drop headroom of the layer manager.
    pub manager: ManagerConfig,
    /// When attribute layers are bought and sold.
    pub attributes: AttributeConfig,
    /// Memory the node may spend on all replicas' indexes.
    pub memory_budget_bytes: u64,
    /// How new layers are filled.
    pub construction: Construction,
    /// Bound of each replica's request queue.
    pub queue_capacity: usize,
    /// Worker threads per replica.
    pub workers_per_replica: usize,
    /// Samples of history kept per replica (for the dashboard and the admin API).
    pub history_len: usize,
    /// Whether the layer manager runs (off: layers change only by hand).
    pub automatic: bool,
    /// Whether a background thread ticks every `delta` (off: the caller ticks).
    pub background: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            delta: Duration::from_millis(250),
            alpha: 0.2,
            manager: ManagerConfig {
                marks: Marks::uniform(16.0, 1.0).expect("default marks are valid"),
                hold_seconds: 2.0,
                idle_drop_after_seconds: 10.0,
                drop_headroom: 0.7,
            },
            attributes: AttributeConfig::default(),
            memory_budget_bytes: 1 << 30,
            construction: Construction::Opportunistic,
            queue_capacity: 256,
            workers_per_replica: std::thread::available_parallelism().map_or(2, |n| n.get()),
            history_len: 1200,
            automatic: true,
            background: true,
        }
    }
}

impl NodeConfig {
    /// Checks every setting; the error names the one out of range.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting: &str, why: String| {
            Err(StoreError::InvalidSetting(format!("{setting}: {why}")))
        };
        if self.delta < Duration::from_millis(1) || self.delta > Duration::from_secs(60) {
            return bad(
                "delta",
                format!("{:?} is not between 1 ms and 60 s", self.delta),
            );
        }
        QueueAverager::new(self.alpha).map_err(|e| StoreError::InvalidSetting(e.to_string()))?;
        self.manager
            .validate()
            .map_err(|e| StoreError::InvalidSetting(e.to_string()))?;
        self.attributes
            .validate()
            .map_err(|e| StoreError::InvalidSetting(e.to_string()))?;
        if !(1..=1 << 20).contains(&self.queue_capacity) {
            return bad(
                "queue_capacity",
                format!("{} is not between 1 and 2^20", self.queue_capacity),
            );
        }
        if !(1..=256).contains(&self.workers_per_replica) {
            return bad(
                "workers_per_replica",
                format!("{} is not between 1 and 256", self.workers_per_replica),
            );
        }
        if !(1..=1 << 20).contains(&self.history_len) {
            return bad(
                "history_len",
                format!("{} is not between 1 and 2^20", self.history_len),
            );
        }
        Ok(())
    }
}

/// One replica of a shard, served from its own queue.
pub struct ReplicaSlot<R: LayeredReplica> {
    /// Node-wide number of the replica.
    pub id: ReplicaId,
    /// Its number within the shard.
    pub replica: usize,
    /// Most bytes it may occupy (a memory-constrained replica), if limited.
    pub memory_limit_bytes: Option<u64>,
    pool: ReplicaPool<R>,
    target_layers: AtomicU32,
    pinned: AtomicBool,
    /// Attributes whose layers the node reconciles this replica to, ascending, per
    /// kind (indexed by [`kind_index`]).
    target_attributes: [Mutex<Vec<u16>>; 2],
    /// Attributes whose layers of a kind were set by hand; the policy leaves them alone.
    attribute_pins: Mutex<BTreeMap<(LayerKind, u16), AttributePin>>,
}

/// An attribute's layers set by hand on a replica (`AdaptiveNode::pin_attribute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AttributePin {
    /// Held whatever the demand.
    Keep,
    /// Not held whatever the demand.
    Drop,
}

impl<R: LayeredReplica> ReplicaSlot<R> {
    /// The replica's queue and workers.
    pub fn pool(&self) -> &ReplicaPool<R> {
        &self.pool
    }

    /// The layer count the node reconciles this replica to.
    pub fn target_layers(&self) -> u32 {
        self.target_layers.load(Ordering::Relaxed)
    }

    /// The attributes whose layers of `kind` the node reconciles this replica to.
    pub fn target_attributes(&self, kind: LayerKind) -> Vec<u16> {
        self.target_attributes[kind_index(kind)]
            .lock()
            .expect("target attributes poisoned")
            .clone()
    }

    /// How `attribute`'s layers of `kind` were set by hand, if they were.
    pub fn attribute_pin(&self, kind: LayerKind, attribute: u16) -> Option<AttributePin> {
        self.attribute_pins
            .lock()
            .expect("attribute pins poisoned")
            .get(&(kind, attribute))
            .copied()
    }
}

/// Where `kind`'s entry is in the per-kind arrays of a replica.
fn kind_index(kind: LayerKind) -> usize {
    match kind {
        LayerKind::Attribute => 0,
        LayerKind::Column => 1,
    }
}

/// Shard groups made in this process (numbers their counting).
static GROUPS_MADE: AtomicU64 = AtomicU64::new(0);

/// The replicas of one shard and the scheduler that spreads queries over them.
pub struct ShardGroup<R: LayeredReplica> {
    /// The table.
    pub table: String,
    /// The shard's number within the table.
    pub shard: u32,
    replicas: Vec<Arc<ReplicaSlot<R>>>,
    scheduler: Mutex<ReplicaScheduler>,
    draw_state: AtomicU64,
    /// Reads answered since the group was made: the shard's access count, which a
    /// cluster's coordinator turns into popularity (Getafix).
    reads: AtomicU64,
    /// When counting began (ms since the Unix epoch, and a process-wide sequence
    /// number): a group made again for the same shard counts anew, and whoever takes
    /// differences of the counts must know.
    counting_since: (u64, u64),
}

impl<R: LayeredReplica> ShardGroup<R> {
    /// The replicas.
    pub fn replicas(&self) -> &[Arc<ReplicaSlot<R>>] {
        &self.replicas
    }

    /// Reads answered (or taken to be answered) since the group was made.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Bytes its replicas on this node take: every replica's indexes at their present
    /// layers and the rest it keeps in memory.
    pub fn footprint_bytes(&self) -> u64 {
        self.replicas
            .iter()
            .map(|slot| slot.pool.replica().footprint_bytes())
            .sum()
    }

    /// When this group began counting: (ms since the Unix epoch, a sequence number
    /// unique in the process).
    pub fn counting_since(&self) -> (u64, u64) {
        self.counting_since
    }

    /// Counts one read.
    pub fn count_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// The replica the next query goes to: drawn in inverse proportion to the queue
    /// lengths the replicas last reported.
    pub fn route(&self) -> &Arc<ReplicaSlot<R>> {
        let uniform = self.next_uniform();
        let chosen = self
            .scheduler
            .lock()
            .expect("scheduler poisoned")
            .pick(uniform)
            .unwrap_or(0);
        &self.replicas[chosen.min(self.replicas.len() - 1)]
    }

    /// Requests waiting on the shard's replicas now (what a remote answer carries
    /// back to the broker that routes to this node).
    pub fn queue_length(&self) -> usize {
        self.replicas
            .iter()
            .map(|slot| slot.pool().queue_length())
            .sum()
    }

    /// Records the queue length a response from replica `replica` carried.
    pub fn report(&self, replica: usize, queue_length: usize) {
        self.scheduler
            .lock()
            .expect("scheduler poisoned")
            .report(replica, queue_length as f64);
    }

    /// Queues `job` on a replica chosen by the scheduler; [`Pending::wait`] gives the
    /// answer and hands the response's queue length back to the scheduler.
    pub fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&R) -> T + Send + 'static,
    ) -> Result<Pending<'_, R, T>> {
        let slot = self.route();
        Ok(Pending {
            group: self,
            replica: slot.replica,
            receiver: slot.pool.submit(job)?,
        })
    }

    /// Runs `job` on a replica chosen by the scheduler and waits for the answer (on this
    /// thread when the replica has a free worker slot and nobody queued).
    pub fn execute<T: Send + 'static>(
        &self,
        job: impl FnOnce(&R) -> T + Send + 'static,
    ) -> Result<T> {
        let slot = self.route();
        let response = slot.pool.execute(job)?;
        self.report(slot.replica, response.queue_length);
        Ok(response.value)
    }

    /// Runs `job` on this thread, now, on a replica chosen by the scheduler if that
    /// replica has a free worker slot and nobody queued; otherwise gives `job` back.
    pub fn try_execute_here<T, F: FnOnce(&R) -> T>(
        &self,
        job: F,
    ) -> Result<std::result::Result<T, F>> {
        let slot = self.route();
        Ok(match slot.pool.try_run_here(job)? {
            Ok(response) => {
                self.report(slot.replica, response.queue_length);
                Ok(response.value)
            }
            Err(job) => Err(job),
        })
    }

    /// Shares of queries each replica gets now.
    pub fn shares(&self) -> Vec<f64> {
        self.scheduler.lock().expect("scheduler poisoned").shares()
    }

    fn next_uniform(&self) -> f64 {
        // splitmix64 over a shared counter: cheap, lock-free, and good enough to spread load.
        let mut z = self
            .draw_state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A query queued on a replica of a shard.
pub struct Pending<'a, R: LayeredReplica, T> {
    group: &'a ShardGroup<R>,
    replica: usize,
    receiver: std::sync::mpsc::Receiver<crate::serving::pool::Response<T>>,
}

impl<R: LayeredReplica, T> Pending<'_, R, T> {
    /// Waits for the answer; the response's queue length goes back to the scheduler.
    pub fn wait(self) -> Result<T> {
        let response = self.receiver.recv().map_err(|_| {
            StoreError::Unavailable(format!(
                "table {} shard {} replica {} failed to answer the request",
                self.group.table, self.group.shard, self.replica
            ))
        })?;
        self.group.report(self.replica, response.queue_length);
        Ok(response.value)
    }
}

/// One sample of a replica's state, kept in its history.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReplicaHistoryRow {
    /// Seconds since the node started.
    pub t_seconds: f64,
    /// Layers every index has.
    pub layers: u32,
    /// Resident bytes.
    pub footprint_bytes: u64,
    /// Requests waiting at the sample.
    pub queue_length: usize,
    /// Exponentially averaged queue length.
    pub averaged_queue: f64,
    /// Requests arriving per second (accepted plus refused) since the last sample.
    pub request_per_second: f64,
    /// Requests answered per second since the last sample.
    pub response_per_second: f64,
    /// Requests refused per second (queue full) since the last sample.
    pub refused_per_second: f64,
}

/// What the admin API shows of a replica.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaStatus {
    /// Node-wide number.
    pub id: ReplicaId,
    /// The table.
    pub table: String,
    /// Shard number within the table.
    pub shard: u32,
    /// Replica number within the shard.
    pub replica: usize,
    /// Layers every index has now.
    pub layers: u32,
    /// Layers the node is reconciling to.
    pub target_layers: u32,
    /// Layers the indexes can have.
    pub max_layers: u32,
    /// Resident bytes.
    pub footprint_bytes: u64,
    /// Memory limit of a constrained replica.
    pub memory_limit_bytes: Option<u64>,
    /// Layers changed only by hand.
    pub pinned: bool,
    /// Requests waiting now.
    pub queue_length: usize,
    /// Queue bound.
    pub queue_capacity: usize,
    /// Averaged queue length at the last tick.
    pub averaged_queue: f64,
    /// Requests per second at the last tick.
    pub request_per_second: f64,
    /// Responses per second at the last tick.
    pub response_per_second: f64,
    /// Share of the shard's queries the scheduler sends here.
    pub share: f64,
    /// Measured queries per busy thread-second, per layer count (index 0 = 1 layer).
    pub curve_ops_per_thread_second: Vec<Option<f64>>,
    /// Worker threads.
    pub workers: usize,
    /// Attributes held or queried: their attribute layers and the rows found through
    /// them.
    pub attribute_layers: Vec<AttributeLayerStatus>,
    /// Attributes held or scanned: their column layers and the values read of them.
    pub column_layers: Vec<AttributeLayerStatus>,
}

/// One attribute of a replica in the admin API.
#[derive(Clone, Debug, Serialize)]
pub struct AttributeLayerStatus {
    /// Its layers on the replica's segments.
    #[serde(flatten)]
    pub layers: AttributeLayerRow,
    /// Whether the node keeps the replica's layers of it.
    pub target: bool,
    /// Set by hand: kept or dropped whatever the demand (`None`: the policy decides).
    pub pin: Option<AttributePin>,
    /// Rows served through it per second, averaged (found by predicates for attribute
    /// layers, read by scans for column layers).
    pub rows_per_second: f64,
}

/// What the admin API shows of the node.
#[derive(Clone, Debug, Serialize)]
pub struct NodeStatus {
    /// Seconds since the node started.
    pub uptime_seconds: f64,
    /// The memory budget.
    pub memory_budget_bytes: u64,
    /// Sum of the replicas' footprints.
    pub memory_used_bytes: u64,
    /// Whether the layer manager runs.
    pub automatic: bool,
    /// Construction mode of new layers.
    pub construction: &'static str,
    /// Sampling period.
    pub delta_ms: u64,
    /// Every replica.
    pub replicas: Vec<ReplicaStatus>,
}

struct ReplicaControl {
    averager: QueueAverager,
    curve: ThroughputCurve,
    counters: PoolCounters,
    state: LayerState,
    history: VecDeque<ReplicaHistoryRow>,
    /// Per attribute and kind of layer: rows served so far, their averaged rate, and
    /// when its layers were last bought or sold.
    attributes: HashMap<(LayerKind, u16), AttributeDemandState>,
    /// The replica's attribute and column layers at the last tick (by [`kind_index`]).
    attribute_rows: [Vec<AttributeLayerRow>; 2],
}

struct AttributeDemandState {
    window: attributes::WindowedRate,
    rows_per_second: f64,
    changed_at_seconds: Option<f64>,
}

impl AttributeDemandState {
    fn new(config: &AttributeConfig, kind: LayerKind) -> AttributeDemandState {
        AttributeDemandState {
            window: attributes::WindowedRate::new(config.window_seconds_of(kind)),
            rows_per_second: 0.0,
            changed_at_seconds: None,
        }
    }
}

struct Control {
    manager: LayerManager,
    replicas: HashMap<ReplicaId, ReplicaControl>,
    last_tick: Instant,
}

struct Inner<R: LayeredReplica> {
    config: NodeConfig,
    memory_budget_bytes: AtomicU64,
    started: Instant,
    groups: RwLock<Vec<Arc<ShardGroup<R>>>>,
    control: Mutex<Control>,
    next_id: AtomicU64,
}

/// Shard replicas on one node, their queues, and the loop that adapts their layers.
pub struct AdaptiveNode<R: LayeredReplica> {
    inner: Arc<Inner<R>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    ticker: Mutex<Option<JoinHandle<()>>>,
}

/// A replica to register: the data and its memory limit, if constrained.
pub struct NewReplica<R> {
    /// The replica's data.
    pub replica: R,
    /// Most bytes it may occupy, if limited.
    pub memory_limit_bytes: Option<u64>,
}

impl<R: LayeredReplica> AdaptiveNode<R> {
    /// Starts a node (and its ticking thread, when `config.background`).
    pub fn start(config: NodeConfig) -> Result<AdaptiveNode<R>> {
        config.validate()?;
        let manager = LayerManager::new(config.manager.clone())
            .map_err(|e| StoreError::InvalidSetting(e.to_string()))?;
        let inner = Arc::new(Inner {
            memory_budget_bytes: AtomicU64::new(config.memory_budget_bytes),
            config,
            started: Instant::now(),
            groups: RwLock::new(Vec::new()),
            control: Mutex::new(Control {
                manager,
                replicas: HashMap::new(),
                last_tick: Instant::now(),
            }),
            next_id: AtomicU64::new(0),
        });
        let node = AdaptiveNode {
            inner,
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            ticker: Mutex::new(None),
        };
        if node.inner.config.background {
            let inner = node.inner.clone();
            let stop = node.stop.clone();
            let handle = std::thread::Builder::new()
                .name("puffer-adapt".into())
                .spawn(move || tick_loop(&inner, &stop))
                .map_err(|e| {
                    StoreError::Unavailable(format!("cannot start the adaptivity thread: {e}"))
                })?;
            *node.ticker.lock().expect("ticker poisoned") = Some(handle);
        }
        Ok(node)
    }

    /// The settings.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// Registers a shard with its replicas; each starts serving from its own queue.
    pub fn add_shard(
        &self,
        table: &str,
        shard: u32,
        replicas: Vec<NewReplica<R>>,
    ) -> Result<Arc<ShardGroup<R>>> {
        if replicas.is_empty() {
            return Err(StoreError::InvalidSetting(format!(
                "shard {shard} of table {table}: needs at least one replica"
            )));
        }
        let config = &self.inner.config;
        let count = replicas.len();
        let mut slots = Vec::with_capacity(count);
        for (number, new) in replicas.into_iter().enumerate() {
            let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            // Start from the layers the segments were built with; a replica without
            // segments yet keeps whatever its first segments bring.
            let initial_target = if new.replica.indexes().is_empty() {
                MAX_INDEX_LAYERS
            } else {
                reconcile(&new.replica, MAX_INDEX_LAYERS, config.construction).layers
            };
            let name = format!("table {table} shard {shard} replica {number}");
            let pool = ReplicaPool::start(
                name,
                new.replica,
                config.workers_per_replica,
                config.queue_capacity,
            )?;
            slots.push(Arc::new(ReplicaSlot {
                id,
                replica: number,
                memory_limit_bytes: new.memory_limit_bytes,
                pool,
                target_layers: AtomicU32::new(initial_target),
                pinned: AtomicBool::new(false),
                target_attributes: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
                attribute_pins: Mutex::new(BTreeMap::new()),
            }));
        }
        let group = Arc::new(ShardGroup {
            table: table.to_string(),
            shard,
            replicas: slots,
            scheduler: Mutex::new(ReplicaScheduler::new(count)),
            draw_state: AtomicU64::new(u64::from(shard) << 32 | count as u64),
            reads: AtomicU64::new(0),
            counting_since: (
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                GROUPS_MADE.fetch_add(1, Ordering::Relaxed),
            ),
        });
        {
            let mut control = self.inner.control.lock().expect("control poisoned");
            for slot in &group.replicas {
                let state = reconcile(
                    slot.pool.replica(),
                    slot.target_layers(),
                    config.construction,
                );
                control.replicas.insert(
                    slot.id,
                    ReplicaControl {
                        averager: QueueAverager::new(config.alpha).expect("alpha validated"),
                        curve: ThroughputCurve::new(),
                        counters: slot.pool.counters(),
                        state,
                        history: VecDeque::new(),
                        attributes: HashMap::new(),
                        attribute_rows: [Vec::new(), Vec::new()],
                    },
                );
            }
        }
        self.inner
            .groups
            .write()
            .expect("groups poisoned")
            .push(group.clone());
        Ok(group)
    }

    /// Unregisters every shard of `table`; their workers finish what is queued.
    pub fn remove_table(&self, table: &str) {
        let removed: Vec<_> = {
            let mut groups = self.inner.groups.write().expect("groups poisoned");
            let (gone, kept) = groups.drain(..).partition(|g| g.table == table);
            *groups = kept;
            gone
        };
        let mut control = self.inner.control.lock().expect("control poisoned");
        for group in &removed {
            for slot in &group.replicas {
                control.replicas.remove(&slot.id);
            }
        }
    }

    /// Unregisters shard `shard` of `table`; its workers finish what is queued.
    pub fn remove_shard(&self, table: &str, shard: u32) {
        let removed: Vec<_> = {
            let mut groups = self.inner.groups.write().expect("groups poisoned");
            let (gone, kept) = groups
                .drain(..)
                .partition(|g| g.table == table && g.shard == shard);
            *groups = kept;
            gone
        };
        let mut control = self.inner.control.lock().expect("control poisoned");
        for group in &removed {
            for slot in &group.replicas {
                control.replicas.remove(&slot.id);
            }
        }
    }

    /// The shard `shard` of `table`, if registered.
    pub fn group(&self, table: &str, shard: u32) -> Option<Arc<ShardGroup<R>>> {
        let groups = self.inner.groups.read().expect("groups poisoned");
        groups
            .iter()
            .find(|g| g.table == table && g.shard == shard)
            .cloned()
    }

    /// Every registered shard.
    pub fn groups(&self) -> Vec<Arc<ShardGroup<R>>> {
        self.inner.groups.read().expect("groups poisoned").clone()
    }

    /// The memory budget the layer manager spends: the node's room for replicas.
    pub fn memory_budget_bytes(&self) -> u64 {
        self.inner.memory_budget_bytes.load(Ordering::Relaxed)
    }

    /// Changes the memory budget; the next tick brings the node under it.
    pub fn set_memory_budget(&self, bytes: u64) {
        self.inner
            .memory_budget_bytes
            .store(bytes, Ordering::Relaxed);
    }

    /// Sets a replica's layer count by hand and pins it (the manager leaves it alone)
    /// until [`AdaptiveNode::unpin`]; returns the layer count it will be reconciled to.
    pub fn set_layers(&self, replica: ReplicaId, layers: u32) -> Result<u32> {
        let slot = self.slot(replica)?;
        let state = {
            let control = self.inner.control.lock().expect("control poisoned");
            control
                .replicas
                .get(&replica)
                .map(|c| c.state)
                .unwrap_or_default()
        };
        let target = layers.clamp(1, state.max_layers.max(1));
        slot.pinned.store(true, Ordering::Relaxed);
        slot.target_layers.store(target, Ordering::Relaxed);
        reconcile(slot.pool.replica(), target, self.inner.config.construction);
        Ok(target)
    }

    /// The storage-throughput curve the node has measured for `group`, as a planner
    /// across nodes reads it: per layer count at which some replica of the group was
    /// measured, its footprint and mean service time, from the replica measured
    /// longest there (ascending layers; empty before any measurement).
    pub fn measured_curve(&self, group: &ShardGroup<R>) -> Vec<LayerCost> {
        let control = self.inner.control.lock().expect("control poisoned");
        let curves: Vec<&ThroughputCurve> = group
            .replicas
            .iter()
            .filter_map(|slot| control.replicas.get(&slot.id).map(|c| &c.curve))
            .collect();
        layer_costs(&curves)
    }

    /// Keeps or drops a replica's layers of `kind` of `attribute` by hand (the next
    /// tick builds or drops them, and the policy no longer buys or sells them), or with
    /// `None` hands them back to the policy (holding what they hold now).
    pub fn pin_attribute(
        &self,
        replica: ReplicaId,
        kind: LayerKind,
        attribute: u16,
        pin: Option<AttributePin>,
    ) -> Result<()> {
        let slot = self.slot(replica)?;
        let mut pins = slot.attribute_pins.lock().expect("attribute pins poisoned");
        let mut target = slot.target_attributes[kind_index(kind)]
            .lock()
            .expect("target attributes poisoned");
        match pin {
            None => {
                pins.remove(&(kind, attribute));
            }
            Some(pin) => {
                pins.insert((kind, attribute), pin);
                target.retain(|&a| a != attribute);
                if pin == AttributePin::Keep {
                    target.push(attribute);
                    target.sort_unstable();
                }
            }
        }
        Ok(())
    }

    /// Hands a pinned replica back to the layer manager.
    pub fn unpin(&self, replica: ReplicaId) -> Result<()> {
        self.slot(replica)?.pinned.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn slot(&self, replica: ReplicaId) -> Result<Arc<ReplicaSlot<R>>> {
        let groups = self.inner.groups.read().expect("groups poisoned");
        groups
            .iter()
            .flat_map(|g| g.replicas.iter())
            .find(|s| s.id == replica)
            .cloned()
            .ok_or_else(|| StoreError::InvalidQuery(format!("no replica {replica} on this node")))
    }

    /// One round: sample, average, measure curves, decide, reconcile. The background
    /// thread calls this every `delta`.
    pub fn tick(&self) -> Vec<Decision> {
        tick(&self.inner)
    }

    /// The node and every replica now.
    pub fn status(&self) -> NodeStatus {
        let inner = &self.inner;
        let groups = self.groups();
        let control = inner.control.lock().expect("control poisoned");
        let mut replicas = Vec::new();
        for group in &groups {
            let shares = group.shares();
            for slot in &group.replicas {
                let Some(c) = control.replicas.get(&slot.id) else {
                    continue;
                };
                let last = c.history.back();
                replicas.push(ReplicaStatus {
                    id: slot.id,
                    table: group.table.clone(),
                    shard: group.shard,
                    replica: slot.replica,
                    layers: c.state.layers,
                    target_layers: slot.target_layers(),
                    max_layers: c.state.max_layers,
                    footprint_bytes: c.state.footprint_bytes,
                    memory_limit_bytes: slot.memory_limit_bytes,
                    pinned: slot.pinned.load(Ordering::Relaxed),
                    queue_length: slot.pool.queue_length(),
                    queue_capacity: slot.pool.capacity(),
                    averaged_queue: c.averager.average(),
                    request_per_second: last.map_or(0.0, |r| r.request_per_second),
                    response_per_second: last.map_or(0.0, |r| r.response_per_second),
                    share: shares.get(slot.replica).copied().unwrap_or(0.0),
                    curve_ops_per_thread_second: c
                        .curve
                        .points()
                        .iter()
                        .map(|p| p.ops_per_thread_second)
                        .collect(),
                    workers: slot.pool.threads(),
                    attribute_layers: layer_status(slot, c, LayerKind::Attribute),
                    column_layers: layer_status(slot, c, LayerKind::Column),
                });
            }
        }
        NodeStatus {
            uptime_seconds: inner.started.elapsed().as_secs_f64(),
            memory_budget_bytes: inner.memory_budget_bytes.load(Ordering::Relaxed),
            memory_used_bytes: replicas.iter().map(|r| r.footprint_bytes).sum(),
            automatic: inner.config.automatic,
            construction: match inner.config.construction {
                Construction::Dedicated => "dedicated",
                Construction::Opportunistic => "opportunistic",
            },
            delta_ms: inner.config.delta.as_millis() as u64,
            replicas,
        }
    }

    /// A replica's samples newer than `since_seconds` (seconds since the node started).
    pub fn history(&self, replica: ReplicaId, since_seconds: f64) -> Vec<ReplicaHistoryRow> {
        let control = self.inner.control.lock().expect("control poisoned");
        control
            .replicas
            .get(&replica)
            .map(|c| {
                c.history
                    .iter()
                    .filter(|r| r.t_seconds > since_seconds)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A replica's measured storage-throughput curve.
    pub fn curve(&self, replica: ReplicaId) -> Option<ThroughputCurve> {
        let control = self.inner.control.lock().expect("control poisoned");
        control.replicas.get(&replica).map(|c| c.curve.clone())
    }

    /// Stops the ticking thread and every replica's workers.
    pub fn shutdown(&self) {
        {
            let (stopped, wake) = &*self.stop;
            *stopped.lock().expect("stop flag poisoned") = true;
            wake.notify_all();
        }
        if let Some(handle) = self.ticker.lock().expect("ticker poisoned").take() {
            let _ = handle.join();
        }
        for group in self.groups() {
            for slot in &group.replicas {
                slot.pool.shutdown();
            }
        }
    }
}

impl<R: LayeredReplica> Drop for AdaptiveNode<R> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn tick_loop<R: LayeredReplica>(inner: &Inner<R>, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    let mut next = Instant::now() + inner.config.delta;
    loop {
        let mut guard = stopped.lock().expect("stop flag poisoned");
        while !*guard {
            let now = Instant::now();
            if now >= next {
                break;
            }
            guard = wake
                .wait_timeout(guard, next - now)
                .expect("stop flag poisoned")
                .0;
        }
        if *guard {
            return;
        }
        drop(guard);
        tick(inner);
        // Keep the period steady; after a stall, do not tick in a burst to catch up.
        next = (next + inner.config.delta).max(Instant::now());
    }
}

fn tick<R: LayeredReplica>(inner: &Inner<R>) -> Vec<Decision> {
    let config = &inner.config;
    let groups = inner.groups.read().expect("groups poisoned").clone();
    let mut control = inner.control.lock().expect("control poisoned");
    let now = Instant::now();
    let elapsed_seconds = now
        .duration_since(control.last_tick)
        .as_secs_f64()
        .max(1e-6);
    control.last_tick = now;
    let t_seconds = now.duration_since(inner.started).as_secs_f64();

    let slots: Vec<&Arc<ReplicaSlot<R>>> = groups.iter().flat_map(|g| g.replicas.iter()).collect();
    let mut samples = Vec::with_capacity(slots.len());
    let mut attribute_samples = Vec::new();
    let mut attribute_pending_bytes = 0u64;
    for slot in &slots {
        let Some(c) = control.replicas.get_mut(&slot.id) else {
            continue;
        };
        let queue_length = slot.pool.queue_length();
        let averaged_queue = c.averager.observe(queue_length as f64);
        let counters = slot.pool.counters();
        let completed = counters.completed - c.counters.completed;
        let busy_seconds = (counters.busy_nanos - c.counters.busy_nanos) as f64 / 1e9;
        let arrived =
            (counters.accepted - c.counters.accepted) + (counters.refused - c.counters.refused);
        let refused = counters.refused - c.counters.refused;
        let state = reconcile(
            slot.pool.replica(),
            slot.target_layers(),
            config.construction,
        );
        // The curve point belongs to the layers the replica had through the interval; an
        // interval in which a layer was published (a dedicated build finishing) or a
        // compaction changed the indexes says nothing clean about either count.
        if state.layers == c.state.layers {
            c.curve.observe(
                c.state.layers,
                completed,
                busy_seconds,
                c.state.footprint_bytes,
            );
        }
        c.counters = counters;
        c.state = state;
        let row = ReplicaHistoryRow {
            t_seconds,
            layers: c.state.layers,
            footprint_bytes: c.state.footprint_bytes,
            queue_length,
            averaged_queue,
            request_per_second: arrived as f64 / elapsed_seconds,
            response_per_second: completed as f64 / elapsed_seconds,
            refused_per_second: refused as f64 / elapsed_seconds,
        };
        if c.history.len() >= config.history_len {
            c.history.pop_front();
        }
        c.history.push_back(row);
        attribute_pending_bytes += observe_attributes(
            slot,
            c,
            t_seconds,
            &config.attributes,
            &mut attribute_samples,
        );
        // Indexes come and go with compactions: keep the target within what they allow.
        // A replica with no index yet (its records all in log tables, as a table just
        // made and filled) keeps its target, so that its first segments bring the
        // layers they were built with; the manager sees the one layer it has. Stored
        // clamped to 1 instead, a new table's replicas stayed at one layer for good
        // wherever no manager adds any.
        let target = slot.target_layers().clamp(1, c.state.max_layers.max(1));
        if !slot.pool.replica().indexes().is_empty() {
            slot.target_layers.store(target, Ordering::Relaxed);
        }
        let pinned = slot.pinned.load(Ordering::Relaxed);
        let threads = slot.pool.threads() as u32;
        samples.push(ReplicaSample {
            id: slot.id,
            layers: target,
            // A pinned replica is shown to the manager as unable to move.
            base_layers: if pinned { target } else { 1 },
            max_layers: if pinned { target } else { c.state.max_layers },
            footprint_bytes: c.state.footprint_bytes,
            next_layer_bytes: c.state.next_layer_bytes,
            deepest_layer_bytes: c.state.deepest_layer_bytes,
            averaged_queue,
            arrival_per_second: arrived as f64 / elapsed_seconds,
            capacity_one_layer_fewer_per_second: c
                .curve
                .capacity_per_second(target.saturating_sub(1), threads),
            building: c.state.building,
            memory_limit_bytes: slot.memory_limit_bytes,
        });
    }
    if !config.automatic {
        return Vec::new();
    }
    let budget = inner.memory_budget_bytes.load(Ordering::Relaxed);
    // Attribute layers give memory back before sample layers do (puffer-adapt
    // `attributes`): the layer manager does not count them against the budget, and what
    // they take beyond it is sold below.
    let attribute_held_bytes: u64 = control
        .replicas
        .values()
        .flat_map(|c| c.attribute_rows.iter().flatten())
        .map(|row| row.held_bytes)
        .sum();
    let decisions = control.manager.decide(
        t_seconds,
        budget.saturating_add(attribute_held_bytes),
        &samples,
    );
    // Attribute layers get what the sample layers leave: the footprints now, the layers
    // just granted and the attribute layers still being built are spoken for.
    let granted: u64 = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Add { replica } => samples.iter().find(|s| s.id == *replica),
            Decision::Drop { .. } => None,
        })
        .map(|s| s.next_layer_bytes)
        .sum();
    let used: u64 =
        samples.iter().map(|s| s.footprint_bytes).sum::<u64>() + granted + attribute_pending_bytes;
    let as_i64 = |bytes: u64| bytes.min(i64::MAX as u64) as i64;
    let free = as_i64(budget) - as_i64(used);
    let attribute_decisions =
        attributes::decide(t_seconds, free, &attribute_samples, &config.attributes);
    apply_attribute_decisions(
        &slots,
        &mut control,
        &attribute_decisions,
        t_seconds,
        &config.attributes,
    );
    for decision in &decisions {
        let (replica, delta) = match *decision {
            Decision::Add { replica } => (replica, 1i64),
            Decision::Drop {
                replica,
                reason: DropReason::Idle | DropReason::Reclaimed | DropReason::OverBudget,
            } => (replica, -1),
        };
        let Some(slot) = slots.iter().find(|s| s.id == replica) else {
            continue;
        };
        let target = (i64::from(slot.target_layers()) + delta).max(1) as u32;
        slot.target_layers.store(target, Ordering::Relaxed);
    }
    // Apply at once: drops free memory before the adds that were granted it allocate.
    for slot in &slots {
        if decisions
            .iter()
            .any(|d| matches!(d, Decision::Drop { replica, .. } if *replica == slot.id))
        {
            if let Some(c) = control.replicas.get_mut(&slot.id) {
                c.state = reconcile(
                    slot.pool.replica(),
                    slot.target_layers(),
                    config.construction,
                );
            }
        }
    }
    for slot in &slots {
        if decisions
            .iter()
            .any(|d| matches!(d, Decision::Add { replica } if *replica == slot.id))
        {
            if let Some(c) = control.replicas.get_mut(&slot.id) {
                c.state = reconcile(
                    slot.pool.replica(),
                    slot.target_layers(),
                    config.construction,
                );
            }
        }
    }
    decisions
}

/// What the admin API shows of a replica's layers of `kind`.
fn layer_status<R: LayeredReplica>(
    slot: &ReplicaSlot<R>,
    c: &ReplicaControl,
    kind: LayerKind,
) -> Vec<AttributeLayerStatus> {
    let target = slot.target_attributes(kind);
    c.attribute_rows[kind_index(kind)]
        .iter()
        .map(|row| AttributeLayerStatus {
            layers: row.clone(),
            target: target.contains(&row.attribute),
            pin: slot.attribute_pin(kind, row.attribute),
            rows_per_second: c
                .attributes
                .get(&(kind, row.attribute))
                .map_or(0.0, |a| a.rows_per_second),
        })
        .collect()
}

/// Updates a replica's averaged rows per attribute and kind of layer, reconciles its
/// attribute and column layers to its targets, and adds a sample for every attribute
/// held or with rows served; returns the bytes the layers it holds still need (builds
/// not yet done).
fn observe_attributes<R: LayeredReplica>(
    slot: &ReplicaSlot<R>,
    c: &mut ReplicaControl,
    t_seconds: f64,
    config: &AttributeConfig,
    samples: &mut Vec<AttributeSample>,
) -> u64 {
    let replica = slot.pool.replica();
    let mut pending = 0;
    for kind in LayerKind::ALL {
        for rows in replica.layer_demand(kind) {
            let state = c
                .attributes
                .entry((kind, rows.attribute))
                .or_insert_with(|| AttributeDemandState::new(config, kind));
            state.rows_per_second = state.window.observe(t_seconds, rows.walked + rows.layered);
        }
        let target = slot.target_attributes(kind);
        let mut report: Vec<u16> = c
            .attributes
            .iter()
            .filter(|((k, a), state)| {
                *k == kind && (state.rows_per_second > 0.0 || target.contains(a))
            })
            .map(|(&(_, a), _)| a)
            .chain(target.iter().copied())
            .collect();
        report.sort_unstable();
        report.dedup();
        let rows = replica.reconcile_layers(kind, &target, &report);
        for row in &rows {
            let held = target.contains(&row.attribute);
            let state = c.attributes.get(&(kind, row.attribute));
            if held {
                pending += row.missing_bytes;
            }
            if slot.attribute_pin(kind, row.attribute).is_some() {
                continue; // set by hand: not the policy's to buy or sell
            }
            samples.push(AttributeSample {
                replica: slot.id,
                attribute: row.attribute,
                kind,
                rows_per_second: state.map_or(0.0, |s| s.rows_per_second),
                bytes: row.held_bytes + row.missing_bytes,
                held,
                changed_at_seconds: state.and_then(|s| s.changed_at_seconds),
            });
        }
        c.attribute_rows[kind_index(kind)] = rows;
    }
    pending
}

/// Changes the replicas' target attributes as decided, and drops sold layers at once.
fn apply_attribute_decisions<R: LayeredReplica>(
    slots: &[&Arc<ReplicaSlot<R>>],
    control: &mut Control,
    decisions: &[AttributeDecision],
    t_seconds: f64,
    attribute_config: &AttributeConfig,
) {
    for decision in decisions {
        let (replica, attribute, kind, buy) = match *decision {
            AttributeDecision::Buy {
                replica,
                attribute,
                kind,
            } => (replica, attribute, kind, true),
            AttributeDecision::Sell {
                replica,
                attribute,
                kind,
                ..
            } => (replica, attribute, kind, false),
        };
        let (Some(slot), Some(c)) = (
            slots.iter().find(|s| s.id == replica),
            control.replicas.get_mut(&replica),
        ) else {
            continue;
        };
        if slot.attribute_pin(kind, attribute).is_some() {
            continue; // pinned by hand since the samples were taken
        }
        {
            let mut target = slot.target_attributes[kind_index(kind)]
                .lock()
                .expect("target attributes poisoned");
            target.retain(|&a| a != attribute);
            if buy {
                target.push(attribute);
                target.sort_unstable();
            }
        }
        c.attributes
            .entry((kind, attribute))
            .or_insert_with(|| AttributeDemandState::new(attribute_config, kind))
            .changed_at_seconds = Some(t_seconds);
        let rows = &mut c.attribute_rows[kind_index(kind)];
        let report: Vec<u16> = rows.iter().map(|r| r.attribute).collect();
        *rows = slot
            .pool
            .replica()
            .reconcile_layers(kind, &slot.target_attributes(kind), &report);
    }
}

/// The steps of `curves` (one per replica of a shard) that were measured: at each layer
/// count, the point of the replica with the most busy time there, as a footprint and a
/// mean service time (the inverse of queries per busy thread-second).
pub fn layer_costs(curves: &[&ThroughputCurve]) -> Vec<LayerCost> {
    let steps = curves.iter().map(|c| c.points().len()).max().unwrap_or(0);
    (0..steps)
        .filter_map(|i| {
            let best = curves
                .iter()
                .filter_map(|c| c.points().get(i))
                .filter(|p| {
                    p.ops_per_thread_second
                        .is_some_and(|o| o.is_finite() && o > 0.0)
                })
                .filter(|p| p.footprint_bytes.is_some_and(|b| b > 0))
                .max_by(|a, b| a.busy_seconds.total_cmp(&b.busy_seconds))?;
            Some(LayerCost {
                layers: i as u32 + 1,
                footprint_bytes: best.footprint_bytes?,
                seconds_per_query: 1.0 / best.ops_per_thread_second?,
            })
        })
        .take(puffer_adapt::replication::joint::MAX_CURVE_STEPS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_curve_takes_each_layer_count_from_the_replica_measured_longest_there() {
        let mut first = ThroughputCurve::new();
        first.observe(1, 100, 1.0, 1_000); // 100 queries/s at one layer, 1 s busy
        first.observe(2, 300, 0.5, 2_000); // 600 queries/s at two, 0.5 s busy
        let mut second = ThroughputCurve::new();
        second.observe(1, 400, 2.0, 1_100); // 200 queries/s at one layer, 2 s busy
        second.observe(3, 0, 0.0, 3_000); // seen at three layers, never busy there
        let costs = layer_costs(&[&first, &second]);
        assert_eq!(
            costs,
            vec![
                LayerCost {
                    layers: 1,
                    footprint_bytes: 1_100,
                    seconds_per_query: 1.0 / 200.0,
                },
                LayerCost {
                    layers: 2,
                    footprint_bytes: 2_000,
                    seconds_per_query: 1.0 / 600.0,
                },
            ]
        );
        assert!(layer_costs(&[]).is_empty());
        assert!(layer_costs(&[&ThroughputCurve::new()]).is_empty());
    }
}
