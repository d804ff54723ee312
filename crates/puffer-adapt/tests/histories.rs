//! The layer manager replayed over synthetic queue histories: the three cases of
//! BlowFish Figure 5, oscillation around a mark, memory reclaimed from idle replicas,
//! and the budget checked after every round of random histories.

use proptest::prelude::*;
use puffer_adapt::manager::DropReason;
use puffer_adapt::{Decision, LayerManager, ManagerConfig, Marks, QueueAverager, ReplicaSample};

const BASE_BYTES: u64 = 1000;
const SAMPLES_BYTES: u64 = 100; // base layer of samples; layer l >= 1 is 2^(l-1) times that

fn config() -> ManagerConfig {
    ManagerConfig {
        marks: Marks::uniform(20.0, 2.0).unwrap(),
        hold_seconds: 1.0,
        idle_drop_after_seconds: 1.0,
        drop_headroom: 0.8,
    }
}

/// A replica as the simulation sees it: layers and its averaged queue.
struct SimReplica {
    id: u64,
    layers: u32,
    max_layers: u32,
    averager: QueueAverager,
    memory_limit_bytes: Option<u64>,
}

fn layer_bytes(level: u32) -> u64 {
    if level == 0 {
        SAMPLES_BYTES
    } else {
        SAMPLES_BYTES << (level - 1)
    }
}

fn footprint(layers: u32) -> u64 {
    BASE_BYTES + (0..layers).map(layer_bytes).sum::<u64>()
}

impl SimReplica {
    fn new(id: u64) -> SimReplica {
        SimReplica {
            id,
            layers: 1,
            max_layers: 5,
            averager: QueueAverager::new(0.25).unwrap(),
            memory_limit_bytes: None,
        }
    }

    fn sample(&self) -> ReplicaSample {
        ReplicaSample {
            id: self.id,
            layers: self.layers,
            base_layers: 1,
            max_layers: self.max_layers,
            footprint_bytes: footprint(self.layers),
            next_layer_bytes: layer_bytes(self.layers),
            deepest_layer_bytes: layer_bytes(self.layers - 1),
            averaged_queue: self.averager.average(),
            arrival_per_second: 0.0,
            capacity_one_layer_fewer_per_second: None,
            building: false,
            memory_limit_bytes: self.memory_limit_bytes,
        }
    }
}

/// Applies decisions; returns (adds, drops) per replica index.
fn apply(replicas: &mut [SimReplica], decisions: &[Decision]) -> Vec<(u32, u32)> {
    let mut counts = vec![(0, 0); replicas.len()];
    for decision in decisions {
        match *decision {
            Decision::Add { replica } => {
                let r = replicas.iter_mut().position(|r| r.id == replica).unwrap();
                replicas[r].layers += 1;
                counts[r].0 += 1;
            }
            Decision::Drop { replica, .. } => {
                let r = replicas.iter_mut().position(|r| r.id == replica).unwrap();
                replicas[r].layers -= 1;
                counts[r].1 += 1;
            }
        }
    }
    counts
}

/// Runs one replica over a queue history (one sample per 0.1 s); returns its layer
/// count after each sample.
fn replay(history: &[f64], budget_bytes: u64) -> Vec<u32> {
    let mut manager = LayerManager::new(config()).unwrap();
    let mut replicas = vec![SimReplica::new(1)];
    let mut layers = Vec::new();
    for (step, &queue) in history.iter().enumerate() {
        replicas[0].averager.observe(queue);
        let samples: Vec<_> = replicas.iter().map(SimReplica::sample).collect();
        let decisions = manager.decide(step as f64 * 0.1, budget_bytes, &samples);
        apply(&mut replicas, &decisions);
        layers.push(replicas[0].layers);
    }
    layers
}

fn flat(value: f64, samples: usize) -> Vec<f64> {
    vec![value; samples]
}

#[test]
fn a_short_spike_is_ignored() {
    // Figure 5(a): two samples at 40 lift the average (alpha 0.25) to 17.5 < 20.
    let history = [flat(0.0, 10), flat(40.0, 2), flat(0.0, 30)].concat();
    let layers = replay(&history, u64::MAX);
    assert!(layers.iter().all(|&l| l == 1), "{layers:?}");
}

#[test]
fn a_longer_spike_is_followed_then_released() {
    // Figure 5(b): ten samples at 40 cross the high mark; afterwards the queue is empty
    // and the layer goes back once the average is under the low mark and the hold passed.
    let history = [flat(0.0, 10), flat(40.0, 10), flat(0.0, 60)].concat();
    let layers = replay(&history, u64::MAX);
    let peak = *layers.iter().max().unwrap();
    assert!(peak >= 2, "{layers:?}");
    assert_eq!(*layers.last().unwrap(), 1, "{layers:?}");
}

#[test]
fn a_plateau_keeps_adding_layers_until_the_deepest() {
    // Figure 5(c): a persistent queue keeps asking, one layer per hold period.
    let history = [flat(0.0, 5), flat(60.0, 80)].concat();
    let layers = replay(&history, u64::MAX);
    assert_eq!(*layers.last().unwrap(), 5, "{layers:?}");
    // Never two changes within the hold time (10 samples).
    let changes: Vec<usize> = (1..layers.len())
        .filter(|&i| layers[i] != layers[i - 1])
        .collect();
    assert!(changes.windows(2).all(|w| w[1] - w[0] >= 10), "{changes:?}");
}

#[test]
fn oscillation_around_a_mark_does_not_flap() {
    // The average oscillates around the high mark (20) with amplitude well inside the gap
    // to the low mark: at most one layer is added, none is dropped.
    let history: Vec<f64> = (0..400)
        .map(|i| if i % 2 == 0 { 26.0 } else { 16.0 })
        .collect();
    let layers = replay(&history, u64::MAX);
    let changes = (1..layers.len())
        .filter(|&i| layers[i] != layers[i - 1])
        .count();
    assert!(changes <= 4, "{changes} changes: {layers:?}");
    assert!(
        layers.windows(2).all(|w| w[1] >= w[0]),
        "a layer was dropped: {layers:?}"
    );
}

#[test]
fn the_budget_limits_growth() {
    // Room for the base plus layers 0 and 1 only: 1000 + 100 + 100.
    let layers = replay(&flat(60.0, 100), footprint(2));
    assert_eq!(*layers.last().unwrap(), 2, "{layers:?}");
}

#[test]
fn memory_comes_from_replicas_below_their_low_marks_first() {
    let mut manager = LayerManager::new(config()).unwrap();
    let mut replicas: Vec<SimReplica> = (0..3).map(SimReplica::new).collect();
    replicas[0].layers = 3; // idle, below low mark
    replicas[1].layers = 3; // busy-ish, between marks: not a donor
    replicas[2].layers = 2; // overloaded
    replicas[1].averager = averaged(10.0);
    replicas[2].averager = averaged(50.0);
    let budget = footprint(3) * 2 + footprint(2); // full: replica 2 needs room
    let decisions = manager.decide(
        100.0,
        budget,
        &replicas.iter().map(SimReplica::sample).collect::<Vec<_>>(),
    );
    // Replica 0 is below its low mark, so it first gives its layer back as idle
    // (dropping to 2 frees layer 2 = 200 bytes, what replica 2's next layer costs).
    assert!(
        decisions.contains(&Decision::Drop {
            replica: 0,
            reason: DropReason::Idle
        }),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&Decision::Add { replica: 2 }),
        "{decisions:?}"
    );
    assert!(
        !decisions
            .iter()
            .any(|d| matches!(d, Decision::Drop { replica: 1, .. })),
        "{decisions:?}"
    );
    apply(&mut replicas, &decisions);
    let used: u64 = replicas.iter().map(|r| footprint(r.layers)).sum();
    assert!(used <= budget);
}

#[test]
fn an_idle_replica_gives_its_memory_to_a_loaded_one() {
    // The node is full; when one replica goes idle and the other overloads, the idle
    // one's deepest layer makes room for the loaded one's next layer in the same round.
    let mut manager = LayerManager::new(config()).unwrap();
    let mut replicas: Vec<SimReplica> = (0..2).map(SimReplica::new).collect();
    replicas[0].layers = 3;
    replicas[1].layers = 1;
    let budget = footprint(3) + footprint(1);
    // Round 1: both busy between marks; nothing happens.
    replicas[0].averager = averaged(10.0);
    replicas[1].averager = averaged(10.0);
    assert!(manager.decide(0.0, budget, &samples(&replicas)).is_empty());
    // Round 2: replica 1 overloaded, replica 0 idle: reclaim (or idle drop) then add.
    replicas[0].averager = averaged(0.0);
    replicas[1].averager = averaged(50.0);
    let decisions = manager.decide(5.0, budget, &samples(&replicas));
    assert!(
        decisions
            .iter()
            .any(|d| matches!(d, Decision::Drop { replica: 0, .. })),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&Decision::Add { replica: 1 }),
        "{decisions:?}"
    );
}

#[test]
fn a_memory_limited_replica_never_grows() {
    let mut manager = LayerManager::new(config()).unwrap();
    let mut replicas: Vec<SimReplica> = (0..2).map(SimReplica::new).collect();
    replicas[1].memory_limit_bytes = Some(footprint(1));
    for step in 0..100 {
        for r in &mut replicas {
            r.averager.observe(80.0);
        }
        let decisions = manager.decide(step as f64 * 0.1, u64::MAX, &samples(&replicas));
        apply(&mut replicas, &decisions);
    }
    assert_eq!(replicas[1].layers, 1);
    assert_eq!(replicas[0].layers, 5);
}

#[test]
fn an_idle_replica_keeps_its_layer_when_the_curve_says_it_is_needed() {
    let mut manager = LayerManager::new(config()).unwrap();
    let mut replica = SimReplica::new(0);
    replica.layers = 3;
    let mut sample = replica.sample();
    sample.arrival_per_second = 900.0;
    sample.capacity_one_layer_fewer_per_second = Some(1000.0); // 0.9 > headroom 0.8
    assert!(manager.decide(0.0, u64::MAX, &[sample.clone()]).is_empty());
    sample.arrival_per_second = 700.0;
    assert_eq!(
        manager.decide(0.0, u64::MAX, &[sample]),
        vec![Decision::Drop {
            replica: 0,
            reason: DropReason::Idle
        }]
    );
}

fn averaged(value: f64) -> QueueAverager {
    let mut averager = QueueAverager::new(1.0).unwrap();
    averager.observe(value);
    averager
}

fn samples(replicas: &[SimReplica]) -> Vec<ReplicaSample> {
    replicas.iter().map(SimReplica::sample).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random loads, limits and budgets (lowered at random): after every round the node
    /// fits its budget (unless every replica is already at its base), no replica is
    /// below its base or above its own limit.
    #[test]
    fn the_budget_is_never_exceeded(
        loads in prop::collection::vec(prop::collection::vec(0.0f64..100.0, 4), 1..60),
        budgets in prop::collection::vec(4000u64..9000, 1..60),
        limited in prop::collection::vec(any::<bool>(), 4),
    ) {
        let mut manager = LayerManager::new(config()).unwrap();
        let mut replicas: Vec<SimReplica> = (0..4).map(SimReplica::new).collect();
        for (r, limit) in replicas.iter_mut().zip(&limited) {
            if *limit {
                r.memory_limit_bytes = Some(footprint(2));
            }
        }
        for (step, load) in loads.iter().enumerate() {
            for (r, &q) in replicas.iter_mut().zip(load) {
                r.averager.observe(q);
            }
            let budget = budgets[step % budgets.len()];
            let decisions = manager.decide(step as f64 * 0.3, budget, &samples(&replicas));
            apply(&mut replicas, &decisions);
            let used: u64 = replicas.iter().map(|r| footprint(r.layers)).sum();
            let all_at_base = replicas.iter().all(|r| r.layers == 1);
            prop_assert!(used <= budget || all_at_base, "used {used} > budget {budget}");
            for r in &replicas {
                prop_assert!(r.layers >= 1 && r.layers <= r.max_layers);
                if let Some(limit) = r.memory_limit_bytes {
                    // A limited replica starts under its limit and only grows within it.
                    prop_assert!(footprint(r.layers) <= limit);
                }
            }
        }
    }
}
