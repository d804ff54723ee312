//! A discrete-event simulation of a Druid-like cluster: time-chunked segments on data
//! nodes, a broker routing each query's segment queries, a coordinator re-planning
//! replicas every window. The policies are the real ones (`puffer_adapt::replication`);
//! the service times are measured on the real store (see the module above).
//!
//! Each node serves its segment queries first come, first served, one at a time. Queries
//! arrive as a Poisson process and are handled in arrival order, so a node's queue is
//! exact without an event heap: a segment query starts when it arrives or when the
//! node's previous one finishes, whichever is later. A query's latency is that of its
//! slowest segment query. Loads take `load_delay_seconds` before a replica serves;
//! drops are immediate; a broker refreshes its routing table every `poll_seconds`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{ensure, Context};
use puffer_adapt::replication::joint::{joint_plan, replicas_alone, JointConfig, LayerCost};
use puffer_adapt::replication::{
    collect_garbage, inherit_from_predecessors, lazy_transition, match_bins_to_nodes,
    modified_best_fit, place_new_segment, scarlett_placement, uniform_placement_keeping, GcConfig,
    NodeIndex, NodeStorage, Placement, Plan, Popularity, ScarlettConfig, SegmentId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How a broker picks the replica of a segment for one segment query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// By the routing fractions of the coordinator's last plan (Getafix's table).
    Plan,
    /// By the plan's fractions, each divided by one plus the node's queue length, which
    /// every answer carries (the broker of PufferDB's cluster, BlowFish 3.3.2).
    PlanByQueue,
    /// Uniformly among the replicas that serve (Druid's random balancer).
    Random,
}

/// Who decides the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// ModifiedBestFit on aged popularity, Hungarian matching, lazy deletion, GC.
    Getafix(Routing),
    /// Getafix with every segment at the one layer step the replicas-alone planner picks
    /// for the measured rates (the memory baseline of the joint planner).
    ReplicasAlone,
    /// Getafix with the joint planner: each segment's layer step and replicas together.
    Joint,
    /// Scarlett: one replica per concurrent access, dealt keeping what is placed.
    Scarlett,
    /// Every segment on `factor` nodes.
    Uniform(usize),
}

impl Policy {
    pub fn label(&self) -> String {
        match self {
            Policy::Getafix(Routing::PlanByQueue) => "getafix".into(),
            Policy::Getafix(Routing::Plan) => "getafix-plan-only".into(),
            Policy::Getafix(Routing::Random) => "getafix-random".into(),
            Policy::ReplicasAlone => "getafix-replicas-alone".into(),
            Policy::Joint => "getafix-joint".into(),
            Policy::Scarlett => "scarlett".into(),
            Policy::Uniform(k) => format!("uniform-{k}"),
        }
    }

    pub fn is_getafix(&self) -> bool {
        matches!(
            self,
            Policy::Getafix(_) | Policy::ReplicasAlone | Policy::Joint
        )
    }

    fn routing(&self) -> Routing {
        match self {
            Policy::Getafix(routing) => *routing,
            Policy::ReplicasAlone | Policy::Joint => Routing::PlanByQueue,
            Policy::Scarlett | Policy::Uniform(_) => Routing::Random,
        }
    }
}

/// Where queries look.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// The paper's synthetic workload: the query's end "Latest" (Zipfian recency, the
    /// newest segment most likely), its interval Zipfian (short ones most likely).
    Latest,
    /// As `Latest`, but a share of the queries end at one older segment that changes
    /// every `every_windows` windows (an old event becoming popular, then not).
    Shifting { share: f64, every_windows: usize },
}

/// The measured cost of one segment query, per layer step (shallowest first).
#[derive(Clone, Debug)]
pub struct ServiceModel {
    /// Seconds of single segment queries measured at each step.
    pub samples_seconds_by_step: Vec<Vec<f64>>,
    /// One replica's footprint at each step.
    pub footprint_bytes_by_step: Vec<u64>,
    /// The layer count of each step.
    pub layers_by_step: Vec<u32>,
}

impl ServiceModel {
    pub fn mean_seconds(&self, step: usize) -> f64 {
        let samples = &self.samples_seconds_by_step[step];
        samples.iter().sum::<f64>() / samples.len() as f64
    }

    fn curve(&self) -> Vec<LayerCost> {
        (0..self.layers_by_step.len())
            .map(|step| LayerCost {
                layers: self.layers_by_step[step],
                footprint_bytes: self.footprint_bytes_by_step[step],
                seconds_per_query: self.mean_seconds(step),
            })
            .collect()
    }
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: usize,
    pub initial_segments: usize,
    /// A new segment every this many windows (0: none, a batch workload).
    pub new_segment_every_windows: usize,
    pub windows: usize,
    /// Windows whose queries are not measured (popularity is still being learnt).
    pub warmup_windows: usize,
    pub window_seconds: f64,
    pub poll_seconds: f64,
    pub load_delay_seconds: f64,
    pub query_rate_per_second: f64,
    pub recency_skew: f64,
    pub interval_skew: f64,
    pub max_interval_segments: usize,
    pub shape: Shape,
    pub policy: Policy,
    /// The layer step segments run at unless the joint planner chooses.
    pub default_step: usize,
    /// Work one node may do per second in the joint planner's budget.
    pub work_budget_per_node: f64,
    /// A node's storage for garbage collection (Getafix only).
    pub node_capacity_bytes: u64,
    /// Getafix plans a new segment at once with its predecessor's popularity, and
    /// keeps at least that for its first windows (see `YOUNG_WINDOWS`).
    pub successor_prior: bool,
    pub seed: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct SimOutcome {
    pub latencies_seconds: Vec<f64>,
    /// Replicas held (serving or loading), sampled every poll after the warm-up.
    pub replica_samples: Vec<usize>,
    /// Bytes held, sampled with the replicas.
    pub memory_samples_bytes: Vec<u64>,
    pub segment_queries: u64,
    /// Segment queries that found no serving replica and waited for a load.
    pub waited_for_load: u64,
    pub loads: u64,
    pub drops: u64,
    /// Per window: (end seconds, replicas, mean latency seconds, p99 latency seconds).
    pub series: Vec<(f64, usize, f64, f64)>,
}

impl SimOutcome {
    /// Adds another run's queries and samples to this one's (the series stays this
    /// run's).
    pub fn pool(&mut self, other: SimOutcome) {
        self.latencies_seconds.extend(other.latencies_seconds);
        self.replica_samples.extend(other.replica_samples);
        self.memory_samples_bytes.extend(other.memory_samples_bytes);
        self.segment_queries += other.segment_queries;
        self.waited_for_load += other.waited_for_load;
        self.loads += other.loads;
        self.drops += other.drops;
    }
}

/// Cumulative Zipf weights over ranks `1..=n`, for draws limited to a prefix.
pub(crate) struct ZipfPrefix {
    cumulative: Vec<f64>,
}

impl ZipfPrefix {
    pub(crate) fn new(n: usize, skew: f64) -> ZipfPrefix {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(skew);
                total
            })
            .collect();
        ZipfPrefix { cumulative }
    }

    /// A rank in `0..limit` (0 the most likely).
    pub(crate) fn draw(&self, limit: usize, rng: &mut StdRng) -> usize {
        let limit = limit.min(self.cumulative.len()).max(1);
        let u = rng.gen::<f64>() * self.cumulative[limit - 1];
        self.cumulative[..limit]
            .partition_point(|&c| c <= u)
            .min(limit - 1)
    }
}

/// The segments one query reads, by id (ids grow with time).
pub struct QueryShape {
    recency: ZipfPrefix,
    interval: ZipfPrefix,
    max_interval: usize,
    shape: Shape,
    hot_old_segment: Option<SegmentId>,
}

impl QueryShape {
    pub fn new(config: &SimConfig, most_segments: usize) -> QueryShape {
        QueryShape {
            recency: ZipfPrefix::new(most_segments, config.recency_skew),
            interval: ZipfPrefix::new(config.max_interval_segments, config.interval_skew),
            max_interval: config.max_interval_segments,
            shape: config.shape,
            hot_old_segment: None,
        }
    }

    /// Picks a new popular old segment among `segments` (for the shifting workload).
    fn shift(&mut self, segments: usize, rng: &mut StdRng) {
        if matches!(self.shape, Shape::Shifting { .. }) && segments > 2 {
            // Anywhere but the newest few, which "Latest" already makes hot.
            self.hot_old_segment = Some(rng.gen_range(0..segments - 2) as SegmentId);
        }
    }

    /// First and last segment of a query over `segments` segments.
    pub fn draw(&self, segments: usize, rng: &mut StdRng) -> (SegmentId, SegmentId) {
        let newest = segments - 1;
        let end = match (self.shape, self.hot_old_segment) {
            (Shape::Shifting { share, .. }, Some(hot)) if rng.gen::<f64>() < share => hot as usize,
            _ => newest - self.recency.draw(segments, rng),
        };
        let length = 1 + self.interval.draw(self.max_interval, rng);
        let start = (end + 1).saturating_sub(length);
        (start as SegmentId, end as SegmentId)
    }
}

/// Mean segments per query of a shape over `segments` segments, by sampling.
pub fn mean_segments_per_query(config: &SimConfig, segments: usize) -> f64 {
    let shape = QueryShape::new(config, segments);
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x5e9);
    let draws = 200_000;
    let total: u64 = (0..draws)
        .map(|_| {
            let (start, end) = shape.draw(segments, &mut rng);
            end - start + 1
        })
        .sum();
    total as f64 / draws as f64
}

/// Windows a segment counts as young: it takes at least its predecessor's popularity,
/// as its own aged sum still misses the windows before it existed.
const YOUNG_WINDOWS: usize = 3;

/// The cluster as the simulation sees it.
struct Cluster {
    /// Per node: segment -> when its replica serves (seconds).
    held: Vec<BTreeMap<SegmentId, f64>>,
    /// Per node: when it finishes the segment queries it has.
    free_at_seconds: Vec<f64>,
    /// Each segment's layer step.
    step_of_segment: Vec<usize>,
    /// The broker's routing table: per segment, (node, cumulative fraction).
    table: BTreeMap<SegmentId, Vec<(NodeIndex, f64)>>,
    /// The last plan's table, which the broker takes at its next poll.
    planned_table: BTreeMap<SegmentId, Vec<(NodeIndex, f64)>>,
    /// Replicas the last run dropped: they serve until the broker has the table that
    /// no longer names them (its next poll), then go.
    dropping: Vec<(NodeIndex, SegmentId)>,
}

impl Cluster {
    fn replicas(&self) -> usize {
        self.held.iter().map(BTreeMap::len).sum()
    }

    fn memory_bytes(&self, service: &ServiceModel) -> u64 {
        self.held
            .iter()
            .flat_map(|held| held.keys())
            .map(|&s| service.footprint_bytes_by_step[self.step_of_segment[s as usize]])
            .sum()
    }

    /// What each node holds once the drops under way are done.
    fn held_sets(&self) -> Vec<BTreeSet<SegmentId>> {
        self.held
            .iter()
            .enumerate()
            .map(|(node, held)| {
                held.keys()
                    .copied()
                    .filter(|&s| !self.dropping.contains(&(node, s)))
                    .collect()
            })
            .collect()
    }

    /// The node that serves one segment query arriving at `now`, and when the replica
    /// there serves (later than `now` only when none serves yet).
    fn route(
        &self,
        segment: SegmentId,
        now: f64,
        routing: Routing,
        mean_service_seconds: f64,
        rng: &mut StdRng,
    ) -> (NodeIndex, f64) {
        if routing == Routing::PlanByQueue {
            if let Some(entries) = self.table.get(&segment) {
                // The answers' queue lengths, as the node's backlog in mean queries.
                let mut previous = 0.0;
                let weights: Vec<(NodeIndex, f64)> = entries
                    .iter()
                    .map(|&(node, cumulative)| {
                        let fraction = cumulative - previous;
                        previous = cumulative;
                        (node, fraction)
                    })
                    .filter(|&(node, _)| self.held[node].get(&segment).is_some_and(|&r| r <= now))
                    .map(|(node, fraction)| {
                        let backlog = (self.free_at_seconds[node] - now).max(0.0);
                        let queue = (backlog / mean_service_seconds).ceil();
                        (node, fraction / (1.0 + queue))
                    })
                    .collect();
                let total: f64 = weights.iter().map(|w| w.1).sum();
                if total > 0.0 {
                    let mut u = rng.gen::<f64>() * total;
                    for &(node, weight) in &weights {
                        if u < weight {
                            return (node, now);
                        }
                        u -= weight;
                    }
                    return (weights.last().expect("a positive total").0, now);
                }
            }
        }
        if routing == Routing::Plan {
            if let Some(entries) = self.table.get(&segment) {
                let u = rng.gen::<f64>() * entries.last().map_or(0.0, |e| e.1);
                let at = entries.partition_point(|e| e.1 <= u).min(entries.len() - 1);
                let node = entries[at].0;
                // A table naming a replica that is not there falls back to any holder.
                if self.held[node]
                    .get(&segment)
                    .is_some_and(|&ready| ready <= now)
                {
                    return (node, now);
                }
            }
        }
        let serving: Vec<NodeIndex> = (0..self.held.len())
            .filter(|&n| {
                self.held[n]
                    .get(&segment)
                    .is_some_and(|&ready| ready <= now)
            })
            .collect();
        if !serving.is_empty() {
            return (serving[rng.gen_range(0..serving.len())], now);
        }
        // Held nowhere yet: the query waits for the first load to finish.
        (0..self.held.len())
            .filter_map(|n| self.held[n].get(&segment).map(|&ready| (n, ready)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .expect("every segment keeps a replica")
    }
}

fn cumulative(
    routing: &BTreeMap<SegmentId, Vec<(NodeIndex, f64)>>,
) -> BTreeMap<SegmentId, Vec<(NodeIndex, f64)>> {
    routing
        .iter()
        .map(|(&segment, shares)| {
            let mut total = 0.0;
            let entries = shares
                .iter()
                .map(|&(node, fraction)| {
                    total += fraction;
                    (node, total)
                })
                .collect();
            (segment, entries)
        })
        .collect()
}

/// Peak concurrent accesses of each segment from its (start, end) intervals.
fn peak_concurrency(intervals: &mut [(f64, f64)]) -> u64 {
    let mut events: Vec<(f64, i32)> = Vec::with_capacity(intervals.len() * 2);
    for &(start, end) in intervals.iter() {
        events.push((start, 1));
        events.push((end, -1));
    }
    // Ends before starts at the same instant: touching intervals are not concurrent.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, delta) in events {
        now += i64::from(delta);
        peak = peak.max(now);
    }
    peak as u64
}

/// Each segment of `counts` on its count of nodes, keeping current holders: a segment
/// with too many keeps those holding the fewest replicas; a missing replica goes to the
/// node holding the fewest (Scarlett decides counts; this keeps transfers few).
fn place_counts_keeping(
    counts: &BTreeMap<SegmentId, usize>,
    held: &[BTreeSet<SegmentId>],
) -> Vec<BTreeSet<SegmentId>> {
    let nodes = held.len();
    let mut placed: Vec<BTreeSet<SegmentId>> = vec![BTreeSet::new(); nodes];
    let mut load = vec![0usize; nodes];
    for (&segment, &count) in counts {
        let mut holders: Vec<NodeIndex> =
            (0..nodes).filter(|&n| held[n].contains(&segment)).collect();
        holders.sort_by_key(|&n| (held[n].len(), n));
        holders.truncate(count);
        for &n in &holders {
            placed[n].insert(segment);
            load[n] += 1;
        }
        while placed.iter().filter(|p| p.contains(&segment)).count() < count.min(nodes) {
            let n = (0..nodes)
                .filter(|&n| !placed[n].contains(&segment))
                .min_by_key(|&n| (load[n], n))
                .expect("fewer holders than nodes");
            placed[n].insert(segment);
            load[n] += 1;
        }
    }
    placed
}

/// Runs one simulation.
pub fn simulate(config: &SimConfig, service: &ServiceModel) -> anyhow::Result<SimOutcome> {
    ensure!(
        config.nodes >= 1 && config.initial_segments >= 1,
        "a cluster needs nodes and segments"
    );
    ensure!(
        config.query_rate_per_second > 0.0,
        "the query rate must be positive"
    );
    let mut rng = StdRng::seed_from_u64(config.seed);
    let new_segments = config
        .windows
        .checked_div(config.new_segment_every_windows)
        .unwrap_or(0);
    let most_segments = config.initial_segments + new_segments;
    let mut shape = QueryShape::new(config, most_segments);
    let mut segments = config.initial_segments;
    let routing = config.policy.routing();
    let mean_service_seconds = service.mean_seconds(config.default_step);
    let mut cluster = Cluster {
        held: vec![BTreeMap::new(); config.nodes],
        free_at_seconds: vec![0.0; config.nodes],
        step_of_segment: vec![config.default_step; most_segments],
        table: BTreeMap::new(),
        planned_table: BTreeMap::new(),
        dropping: Vec::new(),
    };
    // The history is there before the run: placed as the policy places a new segment.
    for segment in 0..segments as SegmentId {
        add_segment(&mut cluster, config, segment, 0.0, &mut rng)?;
    }
    shape.shift(segments, &mut rng);

    let mut popularity = Popularity::new();
    let mut outcome = SimOutcome::default();
    let mut counts: BTreeMap<SegmentId, u64> = BTreeMap::new();
    let mut intervals: BTreeMap<SegmentId, Vec<(f64, f64)>> = BTreeMap::new();
    let mut window_latencies: Vec<f64> = Vec::new();
    let end_seconds = config.windows as f64 * config.window_seconds;
    let warmup_seconds = config.warmup_windows as f64 * config.window_seconds;
    let mut window = 1usize;
    // (segment, window it was born in) of the segments made during the run.
    let mut born: Vec<(SegmentId, usize)> = Vec::new();
    let mut next_poll = config.poll_seconds;
    let mut now = 0.0f64;
    loop {
        now += -(1.0 - rng.gen::<f64>()).ln() / config.query_rate_per_second;
        // Everything due before this arrival happens first, in time order.
        loop {
            let window_end = window as f64 * config.window_seconds;
            if next_poll <= now.min(window_end) {
                cluster.table = cluster.planned_table.clone();
                for (node, segment) in std::mem::take(&mut cluster.dropping) {
                    cluster.held[node].remove(&segment);
                }
                if next_poll >= warmup_seconds {
                    outcome.replica_samples.push(cluster.replicas());
                    outcome
                        .memory_samples_bytes
                        .push(cluster.memory_bytes(service));
                }
                next_poll += config.poll_seconds;
            } else if window_end <= now {
                if window > config.windows {
                    break;
                }
                let young: Vec<SegmentId> = born
                    .iter()
                    .filter(|&&(_, at)| window - at < YOUNG_WINDOWS)
                    .map(|&(segment, _)| segment)
                    .collect();
                plan_window(
                    &mut cluster,
                    config,
                    service,
                    &mut popularity,
                    Some(&counts),
                    &mut intervals,
                    &young,
                    segments,
                    window_end,
                    &mut outcome,
                )?;
                counts.clear();
                intervals.clear();
                window_latencies.sort_by(f64::total_cmp);
                outcome.series.push((
                    window_end,
                    cluster.replicas(),
                    mean(&window_latencies),
                    quantile(&window_latencies, 0.99),
                ));
                window_latencies.clear();
                if config.new_segment_every_windows > 0
                    && window.is_multiple_of(config.new_segment_every_windows)
                    && segments < most_segments
                {
                    let segment = segments as SegmentId;
                    add_segment(&mut cluster, config, segment, window_end, &mut rng)?;
                    segments += 1;
                    born.push((segment, window));
                    if config.successor_prior && config.policy.is_getafix() {
                        // Planned at once, with the popularity it inherits.
                        plan_window(
                            &mut cluster,
                            config,
                            service,
                            &mut popularity,
                            None,
                            &mut intervals,
                            &[segment],
                            segments,
                            window_end,
                            &mut outcome,
                        )?;
                    }
                }
                if let Shape::Shifting { every_windows, .. } = config.shape {
                    if every_windows > 0 && window.is_multiple_of(every_windows) {
                        shape.shift(segments, &mut rng);
                    }
                }
                window += 1;
            } else {
                break;
            }
        }
        if now >= end_seconds {
            break;
        }
        let (first, last) = shape.draw(segments, &mut rng);
        let mut done = now;
        for segment in first..=last {
            let (node, ready) =
                cluster.route(segment, now, routing, mean_service_seconds, &mut rng);
            if ready > now {
                outcome.waited_for_load += 1;
            }
            let samples =
                &service.samples_seconds_by_step[cluster.step_of_segment[segment as usize]];
            let seconds = samples[rng.gen_range(0..samples.len())];
            let start = cluster.free_at_seconds[node].max(ready);
            let finish = start + seconds;
            cluster.free_at_seconds[node] = finish;
            done = done.max(finish);
            *counts.entry(segment).or_insert(0) += 1;
            if config.policy == Policy::Scarlett {
                intervals.entry(segment).or_default().push((now, finish));
            }
            outcome.segment_queries += 1;
        }
        let latency = done - now;
        window_latencies.push(latency);
        if now >= warmup_seconds {
            outcome.latencies_seconds.push(latency);
        }
    }
    Ok(outcome)
}

/// A new segment: one replica on a random node (Getafix §4.2, and Scarlett until it
/// counts), or `factor` on the least loaded nodes (uniform).
fn add_segment(
    cluster: &mut Cluster,
    config: &SimConfig,
    segment: SegmentId,
    now: f64,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let ready = now + config.load_delay_seconds;
    match config.policy {
        Policy::Uniform(factor) => {
            let mut nodes: Vec<NodeIndex> = (0..config.nodes).collect();
            nodes.sort_by_key(|&n| (cluster.held[n].len(), n));
            for &n in nodes.iter().take(factor) {
                // The history is loaded before the run starts.
                cluster.held[n].insert(segment, if now == 0.0 { 0.0 } else { ready });
            }
        }
        _ => {
            let node = place_new_segment(config.nodes, rng.gen())?;
            cluster.held[node].insert(segment, if now == 0.0 { 0.0 } else { ready });
        }
    }
    Ok(())
}

/// The coordinator's run at the end of a window.
#[allow(clippy::too_many_arguments)]
fn plan_window(
    cluster: &mut Cluster,
    config: &SimConfig,
    service: &ServiceModel,
    popularity: &mut Popularity,
    counts: Option<&BTreeMap<SegmentId, u64>>,
    intervals: &mut BTreeMap<SegmentId, Vec<(f64, f64)>>,
    young: &[SegmentId],
    segments: usize,
    now: f64,
    outcome: &mut SimOutcome,
) -> anyhow::Result<()> {
    if let Some(counts) = counts {
        popularity.record_window(counts)?;
    }
    let held = cluster.held_sets();
    let all: BTreeSet<SegmentId> = (0..segments as SegmentId).collect();
    let ready = now + config.load_delay_seconds;
    match config.policy {
        Policy::Getafix(_) | Policy::ReplicasAlone | Policy::Joint => {
            let mut popularities = popularity.popularities();
            if config.successor_prior {
                // Segments are numbered in time order: the predecessor is the id before.
                let heirs: Vec<(SegmentId, SegmentId)> = young
                    .iter()
                    .filter_map(|&s| Some((s, s.checked_sub(1)?)))
                    .collect();
                inherit_from_predecessors(&mut popularities, &heirs);
            }
            let plan: Plan = match config.policy {
                Policy::Getafix(_) => modified_best_fit(&popularities, config.nodes)?,
                _ => {
                    // Aged counts back to queries per second: in a steady state the
                    // weights 1, 1/2, 1/4, ... of the windows remembered sum to this.
                    let windows = popularity.window_count() as i32;
                    let weight_sum = 2.0 - 2f64.powi(1 - windows);
                    let rates: BTreeMap<SegmentId, f64> = all
                        .iter()
                        .map(|&s| {
                            let p = popularities.get(&s).copied().unwrap_or(0.0);
                            (s, p / (config.window_seconds * weight_sum))
                        })
                        .collect();
                    let curve = service.curve();
                    let curves: BTreeMap<SegmentId, Vec<LayerCost>> =
                        all.iter().map(|&s| (s, curve.clone())).collect();
                    let budget = JointConfig {
                        work_budget_per_node: config.work_budget_per_node,
                    };
                    let joint = if config.policy == Policy::Joint {
                        joint_plan(&rates, &curves, config.nodes, &budget)?
                    } else {
                        replicas_alone(&rates, &curves, config.nodes, &budget)?
                    };
                    for (&segment, &layers) in &joint.layers_by_segment {
                        let step = service
                            .layers_by_step
                            .iter()
                            .position(|&l| l == layers)
                            .context("the planner chose a layer count not measured")?;
                        cluster.step_of_segment[segment as usize] = step;
                    }
                    joint.plan
                }
            };
            let matching = match_bins_to_nodes(&plan, &held, None)?;
            let placement = plan.place(&matching)?;
            let transition = lazy_transition(&held, &placement)?;
            cluster.dropping.extend(transition.drops.iter().copied());
            for &(node, segment) in &transition.loads {
                cluster.held[node].insert(segment, ready);
            }
            outcome.loads += transition.loads.len() as u64;
            outcome.drops += transition.drops.len() as u64;
            // Garbage collection sees the nodes as they will be after the drops.
            let storage: Vec<NodeStorage> = cluster
                .held
                .iter()
                .enumerate()
                .map(|(node, held)| NodeStorage {
                    capacity_bytes: config.node_capacity_bytes,
                    size_bytes_by_segment: held
                        .keys()
                        .filter(|&&s| !cluster.dropping.contains(&(node, s)))
                        .map(|&s| {
                            let step = cluster.step_of_segment[s as usize];
                            (s, service.footprint_bytes_by_step[step])
                        })
                        .collect(),
                })
                .collect();
            let garbage = collect_garbage(&storage, &popularities, &GcConfig::default())?;
            cluster.dropping.extend(garbage.drops.iter().copied());
            outcome.drops += garbage.drops.len() as u64;
            cluster.planned_table = cumulative(&placement.routing_table());
        }
        Policy::Scarlett => {
            let concurrent: BTreeMap<SegmentId, u64> = all
                .iter()
                .map(|&s| (s, intervals.get_mut(&s).map_or(0, |i| peak_concurrency(i))))
                .collect();
            let target = scarlett_placement(&concurrent, config.nodes, &ScarlettConfig::default())?;
            apply_eagerly(
                cluster,
                &place_counts_keeping(&target.replica_counts(), &held),
                ready,
                outcome,
            );
        }
        Policy::Uniform(factor) => {
            let target: Placement = uniform_placement_keeping(&all, &held, factor)?;
            apply_eagerly(cluster, &target.segments_by_node(), ready, outcome);
        }
    }
    Ok(())
}

/// Loads what `target` adds (serving after the delay) and drops what it leaves out.
fn apply_eagerly(
    cluster: &mut Cluster,
    target: &[BTreeSet<SegmentId>],
    ready: f64,
    outcome: &mut SimOutcome,
) {
    for (node, wanted) in target.iter().enumerate() {
        let before = cluster.held[node].len();
        cluster.held[node].retain(|segment, _| wanted.contains(segment));
        outcome.drops += (before - cluster.held[node].len()) as u64;
        for &segment in wanted {
            if let std::collections::btree_map::Entry::Vacant(slot) =
                cluster.held[node].entry(segment)
            {
                slot.insert(ready);
                outcome.loads += 1;
            }
        }
    }
}

pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// The `q` quantile of sorted values (nearest rank); 0 for none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_concurrency_counts_overlaps_only() {
        let mut intervals = vec![(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (5.0, 6.0)];
        // At 1.5 two run; at 2.0 one ends as one starts.
        assert_eq!(peak_concurrency(&mut intervals), 2);
        assert_eq!(peak_concurrency(&mut []), 0);
    }

    #[test]
    fn counts_are_placed_keeping_holders() {
        let held: Vec<BTreeSet<SegmentId>> = vec![[0, 1].into(), [0].into(), BTreeSet::new()];
        let counts: BTreeMap<SegmentId, usize> = [(0, 1), (1, 2)].into();
        let placed = place_counts_keeping(&counts, &held);
        // Segment 0 stays on node 1 (fewer replicas), segment 1 keeps node 0 and gains
        // the emptiest node.
        assert_eq!(placed[0], [1].into());
        assert_eq!(placed[1], [0].into());
        assert_eq!(placed[2], [1].into());
    }

    #[test]
    fn zipf_prefix_draws_stay_in_the_prefix() {
        let zipf = ZipfPrefix::new(10, 1.0);
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[zipf.draw(4, &mut rng)] += 1;
        }
        assert!(seen[4..].iter().all(|&n| n == 0));
        // Rank 1 has weight 1 of 1 + 1/2 + 1/3 + 1/4 = 2.083: about 48 %.
        assert!((4400..5200).contains(&seen[0]), "{seen:?}");
    }
}
