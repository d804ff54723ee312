//! Layers and replicas chosen together: per segment, how many sample layers its replicas
//! carry (BlowFish) and so how many replicas it needs (Getafix).
//!
//! A segment with a rate of `r` queries per second, at a step of its measured curve whose
//! queries take `t` seconds each, brings `r * t` seconds of work per second.
//! [`modified_best_fit`] packs those works into one balanced bin per node; a segment gets
//! one replica per bin holding part of it, and at least one (a segment nobody queries is
//! still stored). The cluster serves the load if the total work is at most
//! `nodes * work_budget_per_node`. Memory is the sum over segments of replicas times the
//! footprint of one replica at the segment's step; all replicas of a segment share it.
//!
//! Deeper layers make a replica bigger and its queries faster: a hot segment needing three
//! replicas at one layer may need one at four layers, for less memory in all, while one
//! whose footprint grows faster than its replicas shrink is better replicated.
//! [`replicas_alone`] is Getafix with the same step for every segment. [`joint_plan`] picks
//! a step per segment greedily, then returns the cheaper of that and replicas alone:
//! 1. every segment starts at its first step (smallest footprint);
//! 2. while the total work is over the budget, the segment whose move to a deeper step
//!    saves the most work per byte added moves (a move adding no bytes comes first);
//! 3. then, while a move lowers the memory without adding work, the one lowering it most.
//!
//! A move may skip steps: with a step measured no faster than the one before it (noise),
//! moving one step at a time could stall short of the least work, so the greedy looks at
//! every deeper step and takes the best; phase 1 thus reaches the least work of every
//! segment whenever it has to, and the greedy is feasible whenever any choice is. The
//! greedy estimates a segment's replicas as `ceil(work / work_budget_per_node)`, between 1
//! and the nodes: the real count depends on every segment's work (the bins are balanced
//! to the total), and the estimate keeps each segment's moves independent of the others,
//! so each phase is a priority queue holding one move per segment. The real plan decides.
//! Every move deepens one segment, so there are at most `segments x steps` moves in all.
//! Ties go to the lower segment id, then the shallower step.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use serde::{Deserialize, Serialize};

use super::{
    check_node_count, check_segment_count, modified_best_fit, Plan, SegmentId,
    MAX_SEGMENT_SIZE_BYTES,
};
use crate::{config_error, ConfigError};

/// Most steps in one segment's curve.
pub const MAX_CURVE_STEPS: usize = 64;

/// Relative slack of the budget test, so that rounding in a sum of works does not turn a
/// load that exactly fills the budget into an overload.
const WORK_TOLERANCE: f64 = 1e-12;

/// One step of a segment's measured curve: a layer count and what one replica costs there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerCost {
    /// Sample layers every replica holds at this step.
    pub layers: u32,
    /// Footprint of one replica with that many layers.
    pub footprint_bytes: u64,
    /// Mean service time of one query on one replica with that many layers.
    pub seconds_per_query: f64,
}

/// The joint planner's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JointConfig {
    /// Seconds of query work per second one node may do: its query threads times a target
    /// utilization, below 1 so that queues stay short.
    pub work_budget_per_node: f64,
}

impl Default for JointConfig {
    /// One query thread at 75 %.
    fn default() -> JointConfig {
        JointConfig {
            work_budget_per_node: 0.75,
        }
    }
}

impl JointConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let budget = self.work_budget_per_node;
        if !(budget.is_finite() && budget > 0.0) {
            return Err(config_error(
                "work_budget_per_node",
                format!("{budget} is not a finite positive number"),
            ));
        }
        Ok(())
    }
}

/// Which way of serving the load a [`JointPlan`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JointChoice {
    /// Every segment at step `layers_step` of its curve (its last step if shorter).
    ReplicasAlone {
        /// The step index shared by all segments.
        layers_step: usize,
    },
    /// The greedy's step per segment.
    Joint,
}

/// What was chosen for one segment, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentDecision {
    /// The segment.
    pub segment: SegmentId,
    /// Sample layers of each of its replicas.
    pub layers: u32,
    /// Its replicas in the plan (at least 1).
    pub replicas: usize,
    /// `replicas` times the footprint of one replica.
    pub memory_bytes: u64,
    /// What it costs with every segment at its first step: its replicas in that plan times
    /// its first footprint.
    pub replicas_at_base_memory_bytes: u64,
    /// The comparison in words.
    pub reason: String,
}

/// A layer count per segment, the replicas that follow, and what they cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JointPlan {
    /// The bins of work, one per node, from [`modified_best_fit`].
    pub plan: Plan,
    /// The layer count of every segment given a rate.
    pub layers_by_segment: BTreeMap<SegmentId, u32>,
    /// Replicas (at least 1 per segment) times footprints, saturating at `u64::MAX`.
    pub memory_bytes: u64,
    /// Seconds of query work per second over all segments.
    pub total_work: f64,
    /// The total work is over `nodes * work_budget_per_node`: the least work found does
    /// not fit.
    pub overloaded: bool,
    /// Which way won.
    pub chosen: JointChoice,
    /// The memory of [`replicas_alone`] on the same input.
    pub replicas_alone_memory_bytes: u64,
    /// One per segment off its first step or with more than one replica, hottest first
    /// (ties the lower segment id).
    pub decisions: Vec<SegmentDecision>,
}

/// Getafix alone: every segment at the same step index `i` of its curve, or at its last
/// step if its curve is shorter (curves may have different lengths). Among the `i` whose
/// total work fits the budget, the one with the least memory (ties the lower `i`); if none
/// fits, the one with the least work (ties the lower `i`), `overloaded`.
///
/// Errors: a bad config, `nodes` not in `1..=`[`MAX_NODES`](super::MAX_NODES), more than
/// [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments, a rate that is negative or not finite,
/// a segment with a rate but no curve, a bad curve (see [`LayerCost`]: 1 to
/// [`MAX_CURVE_STEPS`] steps, layers increasing, footprints in
/// `1..=`[`MAX_SEGMENT_SIZE_BYTES`], seconds per query finite and positive), a total work
/// too large to pack. Curves of segments without a rate are ignored.
pub fn replicas_alone(
    queries_per_second_by_segment: &BTreeMap<SegmentId, f64>,
    curves_by_segment: &BTreeMap<SegmentId, Vec<LayerCost>>,
    nodes: usize,
    config: &JointConfig,
) -> Result<JointPlan, ConfigError> {
    let problem = Problem::checked(
        queries_per_second_by_segment,
        curves_by_segment,
        nodes,
        config,
    )?;
    let (layers_step, alone) = problem.best_same_step()?;
    let alone_memory_bytes = alone.memory_bytes;
    problem.report(
        alone,
        JointChoice::ReplicasAlone { layers_step },
        alone_memory_bytes,
    )
}

/// The greedy of the module documentation, or [`replicas_alone`] when that is no worse:
/// a plan that fits the budget beats one that does not, two that do not compare by total
/// work (serving more of the load matters more than memory), two that do by memory; ties
/// go to replicas alone. Errors as [`replicas_alone`].
pub fn joint_plan(
    queries_per_second_by_segment: &BTreeMap<SegmentId, f64>,
    curves_by_segment: &BTreeMap<SegmentId, Vec<LayerCost>>,
    nodes: usize,
    config: &JointConfig,
) -> Result<JointPlan, ConfigError> {
    let problem = Problem::checked(
        queries_per_second_by_segment,
        curves_by_segment,
        nodes,
        config,
    )?;
    let (layers_step, alone) = problem.best_same_step()?;
    let alone_memory_bytes = alone.memory_bytes;
    let greedy = problem.evaluate(problem.greedy_steps())?;
    let greedy_wins = match (greedy.overloaded, alone.overloaded) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => greedy.total_work < alone.total_work,
        (false, false) => greedy.memory_bytes < alone.memory_bytes,
    };
    if greedy_wins {
        problem.report(greedy, JointChoice::Joint, alone_memory_bytes)
    } else {
        problem.report(
            alone,
            JointChoice::ReplicasAlone { layers_step },
            alone_memory_bytes,
        )
    }
}

/// One checked segment.
struct SegmentInput<'a> {
    segment: SegmentId,
    queries_per_second: f64,
    curve: &'a [LayerCost],
}

/// The checked input; segments in increasing id order, so a lower index is a lower id.
struct Problem<'a> {
    segments: Vec<SegmentInput<'a>>,
    nodes: usize,
    work_budget_per_node: f64,
}

/// Steps of every segment (by index) and the real plan they give.
struct Evaluated {
    steps: Vec<usize>,
    plan: Plan,
    replicas: Vec<usize>,
    memory_bytes: u64,
    total_work: f64,
    overloaded: bool,
}

/// A move of one segment to a deeper step. Better is `free` first, then the larger
/// `gain`, then the lower segment index.
#[derive(Debug, Clone, Copy)]
struct Upgrade {
    free: bool,
    gain: f64,
    index: usize,
    step: usize,
}

impl Ord for Upgrade {
    fn cmp(&self, other: &Upgrade) -> Ordering {
        self.free
            .cmp(&other.free)
            .then(self.gain.total_cmp(&other.gain))
            .then(other.index.cmp(&self.index))
    }
}

impl PartialOrd for Upgrade {
    fn partial_cmp(&self, other: &Upgrade) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Upgrade {
    fn eq(&self, other: &Upgrade) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Upgrade {}

impl<'a> Problem<'a> {
    fn checked(
        queries_per_second_by_segment: &BTreeMap<SegmentId, f64>,
        curves_by_segment: &'a BTreeMap<SegmentId, Vec<LayerCost>>,
        nodes: usize,
        config: &JointConfig,
    ) -> Result<Problem<'a>, ConfigError> {
        config.validate()?;
        check_node_count("nodes", nodes)?;
        check_segment_count(
            "queries_per_second_by_segment",
            queries_per_second_by_segment.len(),
        )?;
        let mut segments = Vec::with_capacity(queries_per_second_by_segment.len());
        let mut most_work = 0.0;
        for (&segment, &queries_per_second) in queries_per_second_by_segment {
            if !(queries_per_second.is_finite() && queries_per_second >= 0.0) {
                return Err(config_error(
                    "queries_per_second_by_segment",
                    format!("segment {segment}'s rate {queries_per_second} is not finite and >= 0"),
                ));
            }
            let curve = curves_by_segment.get(&segment).ok_or_else(|| {
                config_error(
                    "curves_by_segment",
                    format!("segment {segment} has a rate but no curve"),
                )
            })?;
            check_curve(segment, curve)?;
            most_work += curve
                .iter()
                .map(|step| queries_per_second * step.seconds_per_query)
                .fold(0.0, f64::max);
            segments.push(SegmentInput {
                segment,
                queries_per_second,
                curve,
            });
        }
        // The packing scales works by the bins; refuse here what it would refuse later.
        if !(most_work * nodes as f64).is_finite() {
            return Err(config_error(
                "queries_per_second_by_segment",
                format!(
                    "the largest total work {most_work} times {nodes} nodes is not a finite number"
                ),
            ));
        }
        Ok(Problem {
            segments,
            nodes,
            work_budget_per_node: config.work_budget_per_node,
        })
    }

    fn work(&self, index: usize, step: usize) -> f64 {
        let segment = &self.segments[index];
        segment.queries_per_second * segment.curve[step].seconds_per_query
    }

    fn total_work(&self, steps: &[usize]) -> f64 {
        steps
            .iter()
            .enumerate()
            .map(|(index, &step)| self.work(index, step))
            .sum()
    }

    fn fits(&self, total_work: f64) -> bool {
        let budget = self.nodes as f64 * self.work_budget_per_node;
        total_work <= budget + budget * WORK_TOLERANCE
    }

    /// Replicas by the greedy's estimate, `ceil(work / budget per node)` in `1..=nodes`,
    /// times the footprint: at most 2^10 x 2^40 bytes, exact in an `f64` too.
    fn estimated_memory_bytes(&self, index: usize, step: usize) -> u64 {
        let replicas = (self.work(index, step) / self.work_budget_per_node)
            .ceil()
            .clamp(1.0, self.nodes as f64) as u64;
        replicas * self.segments[index].curve[step].footprint_bytes
    }

    /// Step `layers_step` of every curve, or its last step.
    fn same_step(&self, layers_step: usize) -> Vec<usize> {
        let last = |segment: &SegmentInput| segment.curve.len() - 1;
        self.segments
            .iter()
            .map(|segment| layers_step.min(last(segment)))
            .collect()
    }

    /// Replicas alone: the step index and its plan (see [`replicas_alone`]).
    fn best_same_step(&self) -> Result<(usize, Evaluated), ConfigError> {
        let step_count = self
            .segments
            .iter()
            .map(|s| s.curve.len())
            .max()
            .unwrap_or(1);
        let mut best: Option<(usize, Evaluated)> = None;
        for layers_step in 0..step_count {
            let steps = self.same_step(layers_step);
            if !self.fits(self.total_work(&steps)) {
                continue;
            }
            let evaluated = self.evaluate(steps)?;
            if best
                .as_ref()
                .is_none_or(|(_, kept)| evaluated.memory_bytes < kept.memory_bytes)
            {
                best = Some((layers_step, evaluated));
            }
        }
        if let Some(best) = best {
            return Ok(best);
        }
        let work_at = |layers_step: usize| self.total_work(&self.same_step(layers_step));
        let least_work_step = (0..step_count)
            .min_by(|&a, &b| work_at(a).total_cmp(&work_at(b)))
            .unwrap_or(0);
        Ok((
            least_work_step,
            self.evaluate(self.same_step(least_work_step))?,
        ))
    }

    /// The two phases of the module documentation; returns each segment's step.
    fn greedy_steps(&self) -> Vec<usize> {
        let mut steps = vec![0; self.segments.len()];
        let mut total_work = self.total_work(&steps);
        // One queued move per segment, replaced when the segment moves: moves of different
        // segments never change each other's estimates, so the queue's head is the best.
        let mut queue: BinaryHeap<Upgrade> = (0..steps.len())
            .filter_map(|index| self.upgrade_saving_work(index, 0))
            .collect();
        while !self.fits(total_work) {
            let Some(upgrade) = queue.pop() else { break };
            total_work += self.work(upgrade.index, upgrade.step)
                - self.work(upgrade.index, steps[upgrade.index]);
            steps[upgrade.index] = upgrade.step;
            queue.extend(self.upgrade_saving_work(upgrade.index, upgrade.step));
        }
        // Phase 2 never adds work, so the budget phase 1 reached still holds.
        let mut queue: BinaryHeap<Upgrade> = (0..steps.len())
            .filter_map(|index| self.upgrade_saving_memory(index, steps[index]))
            .collect();
        while let Some(upgrade) = queue.pop() {
            steps[upgrade.index] = upgrade.step;
            queue.extend(self.upgrade_saving_memory(upgrade.index, upgrade.step));
        }
        steps
    }

    /// The deeper step saving the most work per estimated byte added (one adding none is
    /// best, then by work saved); `None` if no deeper step saves work.
    fn upgrade_saving_work(&self, index: usize, from: usize) -> Option<Upgrade> {
        let from_memory_bytes = self.estimated_memory_bytes(index, from) as f64;
        let mut best: Option<Upgrade> = None;
        for step in from + 1..self.segments[index].curve.len() {
            let saved_work = self.work(index, from) - self.work(index, step);
            if saved_work <= 0.0 {
                continue;
            }
            let added_bytes = self.estimated_memory_bytes(index, step) as f64 - from_memory_bytes;
            let free = added_bytes <= 0.0;
            let gain = if free {
                saved_work
            } else {
                saved_work / added_bytes
            };
            let upgrade = Upgrade {
                free,
                gain,
                index,
                step,
            };
            if best.is_none_or(|kept| upgrade > kept) {
                best = Some(upgrade);
            }
        }
        best
    }

    /// The deeper step, adding no work, that lowers the estimated memory most; `None` if
    /// none lowers it.
    fn upgrade_saving_memory(&self, index: usize, from: usize) -> Option<Upgrade> {
        let from_memory_bytes = self.estimated_memory_bytes(index, from);
        let mut best: Option<Upgrade> = None;
        for step in from + 1..self.segments[index].curve.len() {
            let memory_bytes = self.estimated_memory_bytes(index, step);
            if self.work(index, step) > self.work(index, from) || memory_bytes >= from_memory_bytes
            {
                continue;
            }
            let gain = (from_memory_bytes - memory_bytes) as f64;
            let upgrade = Upgrade {
                free: true,
                gain,
                index,
                step,
            };
            if best.is_none_or(|kept| upgrade > kept) {
                best = Some(upgrade);
            }
        }
        best
    }

    /// Packs the works at `steps` and counts the memory of the real replicas.
    fn evaluate(&self, steps: Vec<usize>) -> Result<Evaluated, ConfigError> {
        let works: BTreeMap<SegmentId, f64> = (0..steps.len())
            .map(|index| (self.segments[index].segment, self.work(index, steps[index])))
            .collect();
        let plan = modified_best_fit(&works, self.nodes)?;
        let counts = plan.replica_counts();
        let replicas: Vec<usize> = self
            .segments
            .iter()
            .map(|segment| counts.get(&segment.segment).copied().unwrap_or(0).max(1))
            .collect();
        let memory_bytes = (0..steps.len()).fold(0u64, |sum, index| {
            let footprint_bytes = self.segments[index].curve[steps[index]].footprint_bytes;
            sum.saturating_add(replicas[index] as u64 * footprint_bytes)
        });
        let total_work = self.total_work(&steps);
        Ok(Evaluated {
            overloaded: !self.fits(total_work),
            steps,
            plan,
            replicas,
            memory_bytes,
            total_work,
        })
    }

    /// The public result of `evaluated`, with a decision for each segment worth one.
    fn report(
        &self,
        evaluated: Evaluated,
        chosen: JointChoice,
        replicas_alone_memory_bytes: u64,
    ) -> Result<JointPlan, ConfigError> {
        let base = self.evaluate(vec![0; self.segments.len()])?;
        let mut worth_a_decision: Vec<usize> = (0..self.segments.len())
            .filter(|&index| evaluated.steps[index] != 0 || evaluated.replicas[index] > 1)
            .collect();
        worth_a_decision.sort_by(|&a, &b| {
            let rate = |index: usize| self.segments[index].queries_per_second;
            rate(b).total_cmp(&rate(a)).then(a.cmp(&b))
        });
        let decisions = worth_a_decision
            .into_iter()
            .map(|index| {
                let curve = self.segments[index].curve;
                let (step, replicas) = (evaluated.steps[index], evaluated.replicas[index]);
                let memory_bytes = replicas as u64 * curve[step].footprint_bytes;
                let base_memory_bytes = base.replicas[index] as u64 * curve[0].footprint_bytes;
                let chosen_text = cost_text(replicas, curve[step].layers, memory_bytes, false);
                let reason = if step == 0 {
                    chosen_text
                } else {
                    let base_text = cost_text(
                        base.replicas[index],
                        curve[0].layers,
                        base_memory_bytes,
                        true,
                    );
                    format!("{base_text}; {chosen_text}")
                };
                SegmentDecision {
                    segment: self.segments[index].segment,
                    layers: curve[step].layers,
                    replicas,
                    memory_bytes,
                    replicas_at_base_memory_bytes: base_memory_bytes,
                    reason,
                }
            })
            .collect();
        let layers_by_segment = self
            .segments
            .iter()
            .zip(&evaluated.steps)
            .map(|(segment, &step)| (segment.segment, segment.curve[step].layers))
            .collect();
        Ok(JointPlan {
            plan: evaluated.plan,
            layers_by_segment,
            memory_bytes: evaluated.memory_bytes,
            total_work: evaluated.total_work,
            overloaded: evaluated.overloaded,
            chosen,
            replicas_alone_memory_bytes,
            decisions,
        })
    }
}

/// Checks segment `segment`'s curve as [`joint_plan`] does: 1 to [`MAX_CURVE_STEPS`]
/// steps, layers increasing, footprints in `1..=`[`MAX_SEGMENT_SIZE_BYTES`], seconds per
/// query finite and positive. A caller holding curves from elsewhere (measured on the
/// nodes) uses it to leave out a bad one instead of failing the whole plan.
pub fn check_curve(segment: SegmentId, curve: &[LayerCost]) -> Result<(), ConfigError> {
    if curve.is_empty() || curve.len() > MAX_CURVE_STEPS {
        let reason = format!("{} steps is not in 1..={MAX_CURVE_STEPS}", curve.len());
        return Err(config_error(
            "curves_by_segment",
            format!("segment {segment}'s curve: {reason}"),
        ));
    }
    for (index, step) in curve.iter().enumerate() {
        let (layers, footprint_bytes, seconds) =
            (step.layers, step.footprint_bytes, step.seconds_per_query);
        let reason = if index > 0 && layers <= curve[index - 1].layers {
            let previous = curve[index - 1].layers;
            format!("layer counts must increase, not go from {previous} to {layers}")
        } else if footprint_bytes == 0 || footprint_bytes > MAX_SEGMENT_SIZE_BYTES {
            format!(
                "{footprint_bytes} bytes at {layers} layers is not in 1..={MAX_SEGMENT_SIZE_BYTES}"
            )
        } else if !(seconds.is_finite() && seconds > 0.0) {
            format!("{seconds} seconds per query at {layers} layers is not finite and positive")
        } else {
            continue;
        };
        return Err(config_error(
            "curves_by_segment",
            format!("segment {segment}'s curve: {reason}"),
        ));
    }
    Ok(())
}

/// "3 replicas at 1 layer cost 900 KB", or "... would cost ..." for the road not taken.
fn cost_text(replicas: usize, layers: u32, memory_bytes: u64, not_taken: bool) -> String {
    let verb = match (not_taken, replicas) {
        (true, _) => "would cost",
        (false, 1) => "costs",
        (false, _) => "cost",
    };
    let replicas_text = if replicas == 1 { "replica" } else { "replicas" };
    let layers_text = if layers == 1 { "layer" } else { "layers" };
    format!(
        "{replicas} {replicas_text} at {layers} {layers_text} {verb} {}",
        format_bytes(memory_bytes)
    )
}

/// Bytes in decimal units with at most one decimal: "900 KB", "1.5 MB".
fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    let text = format!("{value:.1}");
    format!("{} {}", text.trim_end_matches(".0"), UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(layers: u32, footprint_bytes: u64, seconds_per_query: f64) -> LayerCost {
        LayerCost {
            layers,
            footprint_bytes,
            seconds_per_query,
        }
    }

    fn budget(work_budget_per_node: f64) -> JointConfig {
        JointConfig {
            work_budget_per_node,
        }
    }

    /// SplitMix64, so that the random instances are the same at every run.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len() as u64) as usize]
        }
    }

    struct Instance {
        rates: BTreeMap<SegmentId, f64>,
        curves: BTreeMap<SegmentId, Vec<LayerCost>>,
        nodes: usize,
        config: JointConfig,
    }

    /// 1 to 4 segments on 1 to 3 nodes, curves of 2 or 3 steps; dyadic seconds so that
    /// works add up exactly, and now and then a deeper step measured slower.
    fn random_instance(rng: &mut SplitMix) -> Instance {
        let mut rates = BTreeMap::new();
        // A segment without a rate: its curve, bad as it is, must be ignored.
        let mut curves = BTreeMap::from([(999, Vec::new())]);
        for segment in 1..=1 + rng.below(4) {
            rates.insert(segment, rng.pick(&[0.0, 1.0, 2.0, 3.0, 4.0, 6.0]));
            let mut footprint_bytes = 100 * (1 + rng.below(4));
            let mut seconds_per_query = rng.pick(&[0.25, 0.5, 1.0]);
            let curve = (0..2 + rng.below(2))
                .map(|index| {
                    let here = step(1 << index, footprint_bytes, seconds_per_query);
                    footprint_bytes += 100 * rng.below(4);
                    seconds_per_query *= rng.pick(&[0.25, 0.5, 0.75, 1.0, 1.25]);
                    here
                })
                .collect();
            curves.insert(segment, curve);
        }
        Instance {
            rates,
            curves,
            nodes: 1 + rng.below(3) as usize,
            config: budget(rng.pick(&[0.5, 0.75, 1.0])),
        }
    }

    /// Memory of the given steps (by segment, in id order) by its own packing, or `None`
    /// if the work does not fit: the oracle, written apart from the module's arithmetic.
    fn memory_if_fits(instance: &Instance, steps: &[usize]) -> Option<u64> {
        let chosen: Vec<(SegmentId, f64, LayerCost)> = instance
            .rates
            .iter()
            .zip(steps)
            .map(|((&segment, &rate), &step)| (segment, rate, instance.curves[&segment][step]))
            .collect();
        let works: BTreeMap<SegmentId, f64> = chosen
            .iter()
            .map(|(segment, rate, cost)| (*segment, rate * cost.seconds_per_query))
            .collect();
        let budget = instance.nodes as f64 * instance.config.work_budget_per_node;
        if works.values().sum::<f64>() > budget * (1.0 + 1e-12) {
            return None;
        }
        let counts = modified_best_fit(&works, instance.nodes)
            .unwrap()
            .replica_counts();
        let replicas =
            |segment: &SegmentId| counts.get(segment).copied().unwrap_or(0).max(1) as u64;
        Some(
            chosen
                .iter()
                .map(|(segment, _, cost)| replicas(segment) * cost.footprint_bytes)
                .sum(),
        )
    }

    /// Every assignment of steps to segments, as step indexes in id order.
    fn all_assignments(lengths: &[usize]) -> Vec<Vec<usize>> {
        let mut all = vec![Vec::new()];
        for &length in lengths {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    (0..length).map(move |step| {
                        let mut longer = prefix.clone();
                        longer.push(step);
                        longer
                    })
                })
                .collect();
        }
        all
    }

    /// The memory recomputed from a result's own plan and layer counts.
    fn recomputed_memory(instance: &Instance, result: &JointPlan) -> u64 {
        let counts = result.plan.replica_counts();
        result
            .layers_by_segment
            .iter()
            .map(|(segment, layers)| {
                let cost = instance.curves[segment]
                    .iter()
                    .find(|cost| cost.layers == *layers)
                    .unwrap();
                let rate = instance.rates[segment];
                let planned = result
                    .plan
                    .loads_by_segment()
                    .get(segment)
                    .copied()
                    .unwrap_or(0.0);
                assert_eq!(planned, rate * cost.seconds_per_query, "segment {segment}");
                counts.get(segment).copied().unwrap_or(0).max(1) as u64 * cost.footprint_bytes
            })
            .sum()
    }

    #[test]
    fn greedy_against_the_brute_force_optimum() {
        let mut rng = SplitMix(20_240_611);
        let (mut feasible, mut optimal) = (0, 0);
        for case in 0..4000 {
            let instance = random_instance(&mut rng);
            let lengths: Vec<usize> = instance
                .rates
                .keys()
                .map(|s| instance.curves[s].len())
                .collect();
            let optimum = all_assignments(&lengths)
                .iter()
                .filter_map(|steps| memory_if_fits(&instance, steps))
                .min();
            let deepest = lengths.iter().copied().max().unwrap();
            let same_step_best = (0..deepest)
                .filter_map(|i| {
                    let steps: Vec<usize> =
                        lengths.iter().map(|&length| i.min(length - 1)).collect();
                    memory_if_fits(&instance, &steps)
                })
                .min();
            let (rates, curves, nodes) = (&instance.rates, &instance.curves, instance.nodes);
            let alone = replicas_alone(rates, curves, nodes, &instance.config).unwrap();
            let joint = joint_plan(rates, curves, nodes, &instance.config).unwrap();

            assert_eq!(
                joint.memory_bytes,
                recomputed_memory(&instance, &joint),
                "case {case}"
            );
            assert_eq!(
                alone.memory_bytes,
                recomputed_memory(&instance, &alone),
                "case {case}"
            );
            assert_eq!(
                joint.replicas_alone_memory_bytes, alone.memory_bytes,
                "case {case}"
            );
            assert_eq!(alone.overloaded, same_step_best.is_none(), "case {case}");
            if let Some(best) = same_step_best {
                assert_eq!(alone.memory_bytes, best, "case {case}");
                assert!(joint.memory_bytes <= alone.memory_bytes, "case {case}");
            }
            assert_eq!(joint.overloaded, optimum.is_none(), "case {case}");
            if let Some(optimum) = optimum {
                assert!(joint.memory_bytes >= optimum, "case {case}");
                feasible += 1;
                optimal += usize::from(joint.memory_bytes == optimum);
            }
        }
        let rate = optimal as f64 / feasible as f64;
        println!("joint plan optimal on {optimal} of {feasible} feasible instances ({rate:.3})");
        // Measured: 1646 of 1770 (0.930); the bound sits just below, so a change that makes
        // the greedy worse fails here.
        assert!(rate >= 0.92, "optimal on {optimal} of {feasible}");
    }

    #[test]
    fn layers_win_for_a_hot_segment() {
        // 3 nodes of 1 second of work per second each. Segment 1 takes 10 queries/s:
        // 2.5 s/s at 1 layer (0.25 s a query), 0.5 s/s at 4 layers. Segments 2 and 3
        // take 1 query/s: 0.5 s/s at 1 layer, 0.1 s/s at 4.
        // All at 1 layer: 3.5 s/s > 3, over the budget. All at 4 layers: 0.7 s/s in bins
        // of 0.233, segment 1 spread over all 3: 3 x 400 + 200 + 200 = 1600 KB.
        // Joint: segment 1 alone to 4 layers (estimate: 3 replicas x 300 KB = 900 KB down
        // to 1 x 400 KB) gives 0.5 + 0.5 + 0.5 = 1.5 s/s, one bin each:
        // 400 + 100 + 100 = 600 KB.
        let rates = BTreeMap::from([(1, 10.0), (2, 1.0), (3, 1.0)]);
        let cold = vec![step(1, 100_000, 0.5), step(4, 200_000, 0.1)];
        let curves = BTreeMap::from([
            (1, vec![step(1, 300_000, 0.25), step(4, 400_000, 0.05)]),
            (2, cold.clone()),
            (3, cold),
        ]);
        let joint = joint_plan(&rates, &curves, 3, &budget(1.0)).unwrap();
        assert_eq!(joint.chosen, JointChoice::Joint);
        assert_eq!(joint.memory_bytes, 600_000);
        assert_eq!(joint.replicas_alone_memory_bytes, 1_600_000);
        assert_eq!(
            joint.layers_by_segment,
            BTreeMap::from([(1, 4), (2, 1), (3, 1)])
        );
        assert!(!joint.overloaded);
        assert!((joint.total_work - 1.5).abs() < 1e-12);
        // All at 1 layer, segment 1's 2.5 s/s over bins of 3.5 / 3 takes all 3 bins.
        assert_eq!(
            joint.decisions,
            vec![SegmentDecision {
                segment: 1,
                layers: 4,
                replicas: 1,
                memory_bytes: 400_000,
                replicas_at_base_memory_bytes: 900_000,
                reason:
                    "3 replicas at 1 layer would cost 900 KB; 1 replica at 4 layers costs 400 KB"
                        .into(),
            }]
        );
    }

    #[test]
    fn replicas_win_when_deeper_layers_are_too_big() {
        // 2 nodes of 1 s/s. Segment 1: 6 queries/s, 1.5 s/s at 1 layer (100 KB), 0.6 s/s
        // at 4 layers (400 KB). Segment 2: 1 query/s, 0.5 s/s at 1 layer (100 KB), 0.2 at
        // 4 (400 KB). At 1 layer: 2.0 s/s, just the budget, bins of 1.0: segment 1 in both
        // bins, segment 2 in one: 2 x 100 + 100 = 300 KB. At 4 layers: 2 x 400 + 400 =
        // 1200 KB. The greedy's estimate for segment 1 at 4 layers (1 x 400 KB) is worse
        // than at 1 (2 x 100 KB), so it stays, and replicas alone wins the tie.
        let rates = BTreeMap::from([(1, 6.0), (2, 1.0)]);
        let curves = BTreeMap::from([
            (1, vec![step(1, 100_000, 0.25), step(4, 400_000, 0.1)]),
            (2, vec![step(1, 100_000, 0.5), step(4, 400_000, 0.2)]),
        ]);
        let joint = joint_plan(&rates, &curves, 2, &budget(1.0)).unwrap();
        assert_eq!(joint.chosen, JointChoice::ReplicasAlone { layers_step: 0 });
        assert_eq!(joint.memory_bytes, 300_000);
        assert_eq!(joint.layers_by_segment, BTreeMap::from([(1, 1), (2, 1)]));
        assert!(!joint.overloaded);
        assert_eq!(joint.decisions.len(), 1);
        assert_eq!(joint.decisions[0].segment, 1);
        assert_eq!(joint.decisions[0].replicas, 2);
        assert_eq!(
            joint.decisions[0].reason,
            "2 replicas at 1 layer cost 200 KB"
        );
        assert_eq!(
            joint,
            replicas_alone(&rates, &curves, 2, &budget(1.0)).unwrap()
        );
    }

    #[test]
    fn rejects_bad_inputs() {
        let good = vec![step(1, 100, 0.5), step(2, 200, 0.25)];
        let curves = BTreeMap::from([(7, good.clone())]);
        let rates = BTreeMap::from([(7, 1.0)]);
        let config = JointConfig::default();
        let error_of = |rates: &BTreeMap<SegmentId, f64>,
                        curves: &BTreeMap<SegmentId, Vec<LayerCost>>,
                        nodes: usize,
                        config: &JointConfig| {
            let error = joint_plan(rates, curves, nodes, config).unwrap_err();
            assert_eq!(
                replicas_alone(rates, curves, nodes, config).unwrap_err(),
                error
            );
            (error.setting, error.reason)
        };
        assert!(joint_plan(&rates, &curves, 1, &config).is_ok());
        for rate in [-1.0, f64::NAN, f64::INFINITY] {
            let (setting, reason) = error_of(&BTreeMap::from([(7, rate)]), &curves, 1, &config);
            assert_eq!(setting, "queries_per_second_by_segment");
            assert!(reason.contains("segment 7"), "{reason}");
        }
        let (setting, reason) = error_of(&BTreeMap::from([(8, 1.0)]), &curves, 1, &config);
        assert_eq!(
            (setting, reason.as_str()),
            ("curves_by_segment", "segment 8 has a rate but no curve")
        );
        let bad_curves = [
            (vec![], "0 steps"),
            (vec![step(2, 100, 0.5), step(2, 200, 0.25)], "from 2 to 2"),
            (vec![step(2, 100, 0.5), step(1, 200, 0.25)], "from 2 to 1"),
            (vec![step(1, 0, 0.5)], "0 bytes at 1 layers"),
            (
                vec![step(1, MAX_SEGMENT_SIZE_BYTES + 1, 0.5)],
                "1099511627777 bytes",
            ),
            (vec![step(1, 100, 0.0)], "0 seconds per query"),
            (vec![step(1, 100, f64::NAN)], "NaN seconds per query"),
            (
                (1..=65).map(|layers| step(layers, 100, 0.5)).collect(),
                "65 steps",
            ),
        ];
        for (curve, expected) in bad_curves {
            let (setting, reason) = error_of(&rates, &BTreeMap::from([(7, curve)]), 1, &config);
            assert_eq!(setting, "curves_by_segment");
            assert!(
                reason.contains("segment 7") && reason.contains(expected),
                "{reason}"
            );
        }
        for work_budget_per_node in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let (setting, _) = error_of(&rates, &curves, 1, &budget(work_budget_per_node));
            assert_eq!(setting, "work_budget_per_node");
        }
        for nodes in [0, super::super::MAX_NODES + 1] {
            let (setting, reason) = error_of(&rates, &curves, nodes, &config);
            assert_eq!(setting, "nodes");
            assert!(reason.contains(&format!("{nodes} nodes")), "{reason}");
        }
        let huge = BTreeMap::from([(7, f64::MAX)]);
        assert_eq!(
            error_of(&huge, &curves, 3, &config).0,
            "queries_per_second_by_segment"
        );
    }
}
