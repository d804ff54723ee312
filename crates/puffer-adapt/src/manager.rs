//! The layer manager: spends a node's memory budget on sample layers where the queues
//! say they are needed.
//!
//! Each round (every `delta`) the caller passes one [`ReplicaSample`] per replica on the
//! node; [`LayerManager::decide`] returns the layers to add and drop:
//! 1. If the node is over budget (the budget was lowered), drop layers from the least
//!    loaded replicas until it fits.
//! 2. A replica whose averaged queue stays below its low mark gives its deepest layer
//!    back, if the curve says one layer fewer still serves its arrival rate with headroom.
//! 3. Replicas above their high mark get a layer each, highest averaged queue first, while
//!    memory lasts. When the budget is short, memory is taken from replicas below their
//!    low marks first (least loaded first, deepest layers first); if even that is not
//!    enough, nothing is taken and the replica stays memory-constrained.
//!
//! An idle replica keeps a layer at least `idle_drop_after_seconds` after its last change.
//! No replica changes twice within `hold_seconds`, so the average sees the effect of one
//! change before the next; no replica goes below its base layers or above its own memory
//! limit; the sum of footprints never exceeds the budget after the decisions are applied.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{config_error, ConfigError, Marks};

/// Identifies a replica on the node (the caller's numbering).
pub type ReplicaId = u64;

/// What the layer manager knows of a replica at one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaSample {
    /// The replica.
    pub id: ReplicaId,
    /// Layers it has (base included).
    pub layers: u32,
    /// Layers it never goes below.
    pub base_layers: u32,
    /// Layers it can have at most.
    pub max_layers: u32,
    /// Its footprint now.
    pub footprint_bytes: u64,
    /// What adding the next layer costs.
    pub next_layer_bytes: u64,
    /// What dropping the deepest layer frees.
    pub deepest_layer_bytes: u64,
    /// Exponentially averaged queue length.
    pub averaged_queue: f64,
    /// Requests arriving per second, recently.
    pub arrival_per_second: f64,
    /// Queries per second it would sustain with one layer fewer, from its measured curve.
    pub capacity_one_layer_fewer_per_second: Option<f64>,
    /// A layer is still being built (dedicated construction): no change until it is done.
    pub building: bool,
    /// The most this replica may occupy (a memory-constrained node), if limited.
    pub memory_limit_bytes: Option<u64>,
}

/// Why a layer is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DropReason {
    /// The replica's queue stayed below its low mark.
    Idle,
    /// Another replica above its high mark needs the memory.
    Reclaimed,
    /// The node is over its budget.
    OverBudget,
}

/// A change for the caller to apply.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Add the next layer below the existing ones.
    Add {
        /// The replica.
        replica: ReplicaId,
    },
    /// Drop the deepest layer.
    Drop {
        /// The replica.
        replica: ReplicaId,
        /// Why.
        reason: DropReason,
    },
}

/// The layer manager's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManagerConfig {
    /// High and low marks per layer count.
    pub marks: Marks,
    /// Least time between two changes to one replica.
    pub hold_seconds: f64,
    /// Least time a replica keeps its layers after its last change before it gives one
    /// back for idleness: building a layer costs far more than dropping it, so a layer
    /// is not dropped the moment the queue it was built for has drained.
    pub idle_drop_after_seconds: f64,
    /// An idle replica drops a layer only if its arrival rate is at most this fraction
    /// of what it would sustain with one layer fewer.
    pub drop_headroom: f64,
}

impl ManagerConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.hold_seconds.is_finite() && self.hold_seconds >= 0.0) {
            return Err(config_error(
                "hold_seconds",
                format!("{} is not a duration", self.hold_seconds),
            ));
        }
        if !(self.idle_drop_after_seconds.is_finite() && self.idle_drop_after_seconds >= 0.0) {
            return Err(config_error(
                "idle_drop_after_seconds",
                format!("{} is not a duration", self.idle_drop_after_seconds),
            ));
        }
        if !(self.drop_headroom > 0.0 && self.drop_headroom <= 1.0) {
            return Err(config_error(
                "drop_headroom",
                format!("{} is not in (0, 1]", self.drop_headroom),
            ));
        }
        Ok(())
    }
}

/// The layer manager; remembers only when it last changed each replica.
#[derive(Debug, Clone)]
pub struct LayerManager {
    config: ManagerConfig,
    last_change_seconds: HashMap<ReplicaId, f64>,
}

/// A replica's state while a round's decisions accumulate.
struct Planned<'a> {
    sample: &'a ReplicaSample,
    layers: u32,
    footprint_bytes: u64,
    changed: bool,
}

impl Planned<'_> {
    fn can_drop(&self) -> bool {
        self.layers > self.sample.base_layers.max(1) && !self.sample.building
    }

    /// Bytes the deepest planned layer frees: layers double in size going down, so one
    /// layer up from the sample's deepest frees half of it.
    fn deepest_bytes(&self) -> u64 {
        let dropped = self.sample.layers.saturating_sub(self.layers);
        self.sample.deepest_layer_bytes >> dropped
    }

    fn below_low_mark(&self, marks: &Marks) -> bool {
        self.sample.averaged_queue < marks.low(self.layers)
    }
}

impl LayerManager {
    /// A manager with checked settings.
    pub fn new(config: ManagerConfig) -> Result<LayerManager, ConfigError> {
        config.validate()?;
        Ok(LayerManager {
            config,
            last_change_seconds: HashMap::new(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// One round: the layers to add and drop, given the replicas now and the node budget.
    pub fn decide(
        &mut self,
        now_seconds: f64,
        budget_bytes: u64,
        replicas: &[ReplicaSample],
    ) -> Vec<Decision> {
        let mut planned: Vec<Planned> = replicas
            .iter()
            .map(|sample| Planned {
                sample,
                layers: sample.layers,
                footprint_bytes: sample.footprint_bytes,
                changed: false,
            })
            .collect();
        let mut used_bytes: u64 = planned.iter().map(|p| p.footprint_bytes).sum();
        let mut decisions = Vec::new();

        // 1. Over budget: least loaded first, regardless of hold.
        let mut by_load: Vec<usize> = (0..planned.len()).collect();
        by_load.sort_by(|&a, &b| load_order(&planned[a], &planned[b]));
        for &i in &by_load {
            while used_bytes > budget_bytes && planned[i].can_drop() {
                used_bytes -= drop_one(&mut planned[i]);
                decisions.push(drop_decision(&planned[i], DropReason::OverBudget));
            }
        }

        // 2. Idle replicas give a layer back.
        for p in planned.iter_mut() {
            let idle_hold = self
                .config
                .hold_seconds
                .max(self.config.idle_drop_after_seconds);
            if p.changed || self.held_for(p.sample.id, now_seconds, idle_hold) || !p.can_drop() {
                continue;
            }
            let enough_without = p
                .sample
                .capacity_one_layer_fewer_per_second
                .is_none_or(|c| p.sample.arrival_per_second <= self.config.drop_headroom * c);
            if p.below_low_mark(&self.config.marks) && enough_without {
                used_bytes -= drop_one(p);
                decisions.push(drop_decision(p, DropReason::Idle));
            }
        }

        // 3. Loaded replicas get a layer, the most loaded first.
        let mut wanting: Vec<usize> = (0..planned.len())
            .filter(|&i| {
                let p = &planned[i];
                !p.changed
                    && !p.sample.building
                    && !self.held(p.sample.id, now_seconds)
                    && p.layers < p.sample.max_layers
                    && p.sample.averaged_queue > self.config.marks.high(p.layers)
            })
            .collect();
        wanting.sort_by(|&a, &b| load_order(&planned[b], &planned[a]));
        for i in wanting {
            let cost = planned[i].sample.next_layer_bytes;
            let limit = planned[i].sample.memory_limit_bytes.unwrap_or(u64::MAX);
            if planned[i].footprint_bytes.saturating_add(cost) > limit {
                continue;
            }
            if used_bytes.saturating_add(cost) > budget_bytes {
                let donors =
                    self.reclaim_plan(&planned, i, used_bytes + cost - budget_bytes, now_seconds);
                let Some(donors) = donors else { continue };
                for donor in donors {
                    used_bytes -= drop_one(&mut planned[donor]);
                    decisions.push(drop_decision(&planned[donor], DropReason::Reclaimed));
                }
            }
            let p = &mut planned[i];
            p.layers += 1;
            p.footprint_bytes += cost;
            p.changed = true;
            used_bytes += cost;
            decisions.push(Decision::Add {
                replica: p.sample.id,
            });
        }

        for p in planned.iter().filter(|p| p.changed) {
            self.last_change_seconds.insert(p.sample.id, now_seconds);
        }
        debug_assert!(used_bytes <= budget_bytes || planned.iter().all(|p| !p.can_drop()));
        decisions
    }

    /// Layers to take from replicas below their low marks (least loaded first, each
    /// bottom-up) to free `needed_bytes`; `None` if they cannot free that much.
    fn reclaim_plan(
        &self,
        planned: &[Planned],
        requester: usize,
        needed_bytes: u64,
        now_seconds: f64,
    ) -> Option<Vec<usize>> {
        let mut donors: Vec<usize> = (0..planned.len())
            .filter(|&d| {
                d != requester
                    && !self.held(planned[d].sample.id, now_seconds)
                    && planned[d].below_low_mark(&self.config.marks)
            })
            .collect();
        donors.sort_by(|&a, &b| load_order(&planned[a], &planned[b]));
        let mut freed = 0u64;
        let mut plan = Vec::new();
        for d in donors {
            let (mut layers, base) = (planned[d].layers, planned[d].sample.base_layers.max(1));
            let mut deepest = planned[d].deepest_bytes();
            while freed < needed_bytes && layers > base && !planned[d].sample.building {
                freed += deepest;
                deepest >>= 1;
                layers -= 1;
                plan.push(d);
            }
            if freed >= needed_bytes {
                return Some(plan);
            }
        }
        None
    }

    fn held(&self, replica: ReplicaId, now_seconds: f64) -> bool {
        self.held_for(replica, now_seconds, self.config.hold_seconds)
    }

    fn held_for(&self, replica: ReplicaId, now_seconds: f64, hold_seconds: f64) -> bool {
        self.last_change_seconds
            .get(&replica)
            .is_some_and(|&t| now_seconds - t < hold_seconds)
    }
}

fn load_order(a: &Planned, b: &Planned) -> std::cmp::Ordering {
    a.sample
        .averaged_queue
        .total_cmp(&b.sample.averaged_queue)
        .then(a.sample.id.cmp(&b.sample.id))
}

/// Drops the deepest planned layer; returns the bytes freed.
fn drop_one(p: &mut Planned) -> u64 {
    let freed = p.deepest_bytes().min(p.footprint_bytes);
    p.layers -= 1;
    p.footprint_bytes -= freed;
    p.changed = true;
    freed
}

fn drop_decision(p: &Planned, reason: DropReason) -> Decision {
    Decision::Drop {
        replica: p.sample.id,
        reason,
    }
}
