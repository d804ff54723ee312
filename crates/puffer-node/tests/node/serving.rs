//! The adaptive node end to end on real indexes: answers checked against a naive scan,
//! layers following the queues, the budget held, routing by queue length.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use puffer_adapt::attributes::LayerKind;
use puffer_adapt::{Decision, ManagerConfig, Marks};
use puffer_index::{BuildOptions, Construction, TextIndex};
use puffer_node::serving::node::AttributeLayerStatus;
use puffer_node::serving::{AdaptiveNode, AttributePin, NewReplica, NodeConfig};

fn text(seed: u64) -> Vec<u8> {
    let words = [
        "puffer", "fish", "blow", "layer", "queue", "shard", "zipf", "a", "the",
    ];
    let mut state = seed;
    let mut out = Vec::new();
    while out.len() < 60_000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(state >> 33) as usize % words.len()].as_bytes());
        out.push(b' ');
    }
    out
}

fn naive_count(text: &[u8], pattern: &[u8]) -> u64 {
    text.windows(pattern.len())
        .filter(|w| *w == pattern)
        .count() as u64
}

fn index(text: &[u8]) -> TextIndex {
    let options = BuildOptions {
        levels: 4,
        ..BuildOptions::default()
    };
    TextIndex::build_with(text, &options, &mut |_, _| {}).unwrap()
}

/// Two separate copies of an index over `data`, unlimited.
fn two_replicas(data: &[u8]) -> Vec<NewReplica<TextIndex>> {
    (0..2)
        .map(|_| NewReplica {
            replica: index(data),
            memory_limit_bytes: None,
        })
        .collect()
}

fn config() -> NodeConfig {
    NodeConfig {
        delta: Duration::from_millis(100),
        alpha: 0.5,
        manager: ManagerConfig {
            marks: Marks::uniform(8.0, 1.0).unwrap(),
            hold_seconds: 0.0,
            idle_drop_after_seconds: 0.0,
            drop_headroom: 0.7,
        },
        attributes: puffer_adapt::attributes::AttributeConfig::default(),
        memory_budget_bytes: u64::MAX,
        construction: Construction::Opportunistic,
        queue_capacity: 64,
        workers_per_replica: 1,
        history_len: 100,
        automatic: true,
        background: false,
    }
}

fn layers_of(node: &AdaptiveNode<TextIndex>) -> Vec<u32> {
    node.status().replicas.iter().map(|r| r.layers).collect()
}

#[test]
fn answers_match_a_naive_scan_through_the_queues() {
    let data = text(1);
    let node = AdaptiveNode::start(config()).unwrap();
    let group = node.add_shard("t", 0, two_replicas(&data)).unwrap();
    for pattern in ["puffer", "fish blow", "zz", "a ", "the queue"] {
        let owned = pattern.as_bytes().to_vec();
        let count = group
            .execute(move |idx| idx.count(&owned).unwrap())
            .unwrap();
        assert_eq!(count, naive_count(&data, pattern.as_bytes()), "{pattern}");
    }
    // Layers change under the queries without changing answers.
    node.set_layers(0, 1).unwrap();
    node.set_layers(1, 3).unwrap();
    for pattern in ["layer", "shard zipf"] {
        let owned = pattern.as_bytes().to_vec();
        let offsets = group
            .execute(move |idx| idx.search(&owned, None).unwrap())
            .unwrap();
        let expected: Vec<u64> = data
            .windows(pattern.len())
            .enumerate()
            .filter(|(_, w)| *w == pattern.as_bytes())
            .map(|(i, _)| i as u64)
            .collect();
        assert_eq!(offsets, expected, "{pattern}");
    }
}

#[test]
fn layers_follow_the_queue_and_idle_replicas_release_them() {
    let data = text(2);
    let node = AdaptiveNode::start(config()).unwrap();
    let group = node.add_shard("t", 0, two_replicas(&data)).unwrap();
    assert_eq!(layers_of(&node), vec![4, 4]);
    // Idle: both give their layers back, one per tick, down to the base.
    for _ in 0..5 {
        node.tick();
    }
    assert_eq!(layers_of(&node), vec![1, 1]);

    // Block replica 0's only worker and fill its queue.
    let pool = group.replicas()[0].pool();
    let (release, gate) = mpsc::channel::<()>();
    let blocker = pool.submit(move |_| gate.recv().ok()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.queue_length() != 0 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    for _ in 0..40 {
        pool.spawn(|idx, _| {
            idx.count(b"fish").unwrap();
        })
        .unwrap();
    }
    let mut adds = 0;
    for _ in 0..4 {
        adds += node
            .tick()
            .iter()
            .filter(|d| matches!(d, Decision::Add { replica: 0 }))
            .count();
    }
    assert!(adds >= 2, "replica 0 should have grown, got {adds} adds");
    let status = node.status();
    assert!(status.replicas[0].layers >= 3, "{:?}", layers_of(&node));
    assert_eq!(
        status.replicas[1].layers, 1,
        "the idle replica must not grow"
    );
    assert!(status.replicas[0].averaged_queue > 8.0);
    release.send(()).unwrap();
    blocker.recv().unwrap();
    // Drained: the queue average decays and layers go back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.queue_length() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..20 {
        node.tick();
    }
    assert_eq!(layers_of(&node), vec![1, 1]);
    let history = node.history(0, 0.0);
    assert!(history.iter().any(|r| r.layers >= 3) && history.last().unwrap().layers == 1);
}

#[test]
fn the_budget_holds_and_a_memory_limited_replica_stays_at_its_base() {
    let data = text(3);
    let mut cfg = config();
    cfg.memory_budget_bytes = 1; // lowered later; first everything must shrink to the base
    let node = AdaptiveNode::start(cfg).unwrap();
    let base = index(&data);
    let group = node
        .add_shard(
            "t",
            0,
            vec![
                NewReplica {
                    replica: index(&data),
                    memory_limit_bytes: None,
                },
                NewReplica {
                    replica: base,
                    memory_limit_bytes: Some(0),
                },
            ],
        )
        .unwrap();
    node.tick();
    assert_eq!(layers_of(&node), vec![1, 1], "over budget: both at base");
    let base_used = node.status().memory_used_bytes;
    // Room for exactly one more layer of replica 0.
    let next = group.replicas()[0]
        .pool()
        .replica()
        .layer_bytes(1, Construction::Opportunistic);
    node.set_memory_budget(base_used + next);
    // Both overloaded.
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
    for slot in group.replicas() {
        let gate = gate.clone();
        slot.pool()
            .spawn(move |_, _| {
                let _ = gate.lock().unwrap().recv();
            })
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    for slot in group.replicas() {
        for _ in 0..40 {
            slot.pool().spawn(|_, _| {}).unwrap();
        }
    }
    for _ in 0..6 {
        node.tick();
        let status = node.status();
        assert!(
            status.memory_used_bytes <= status.memory_budget_bytes,
            "{} > {}",
            status.memory_used_bytes,
            status.memory_budget_bytes
        );
    }
    assert_eq!(layers_of(&node), vec![2, 1]);
    for _ in 0..2 {
        release.send(()).unwrap();
    }
}

#[test]
fn routing_follows_reported_queue_lengths() {
    let data = text(4);
    let node = AdaptiveNode::start(config()).unwrap();
    let group = node.add_shard("t", 0, two_replicas(&data)).unwrap();
    group.report(0, 9); // weights 0.1 and 1
    let draws = 20_000;
    let to_first = (0..draws).filter(|_| group.route().replica == 0).count();
    let share = to_first as f64 / draws as f64;
    assert!((share - 1.0 / 11.0).abs() < 0.02, "share {share}");
    assert!((group.shares()[0] - 1.0 / 11.0).abs() < 1e-12);
}

#[test]
fn bad_settings_are_refused_with_their_name() {
    let mut cfg = config();
    cfg.queue_capacity = 0;
    let error = AdaptiveNode::<TextIndex>::start(cfg)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("queue_capacity"), "{error}");
    let mut cfg = config();
    cfg.alpha = 2.0;
    let error = AdaptiveNode::<TextIndex>::start(cfg)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("alpha"), "{error}");
    let node = AdaptiveNode::<TextIndex>::start(config()).unwrap();
    assert!(node.add_shard("t", 0, Vec::new()).is_err());
    assert!(node.set_layers(99, 2).is_err());
}

/// A shard of 3,000 records (`city` = one of 20, `n` = its number) in one segment.
fn city_shard(dir: &std::path::Path) -> (puffer_store::Shard, Vec<(String, String)>) {
    let (shard, rows) = city_shard_in_log_tables(dir, puffer_store::ShardOptions::default());
    shard.compact_all().unwrap();
    (shard, rows)
}

/// The shard of [`city_shard`] before its first compaction: every record in log
/// tables, no segment yet (a table just made and filled).
fn city_shard_in_log_tables(
    dir: &std::path::Path,
    options: puffer_store::ShardOptions,
) -> (puffer_store::Shard, Vec<(String, String)>) {
    use puffer_store::{AttrType, Attribute, Record, Schema, Shard, Value, WriteOp};
    let schema = Schema::new(
        "id",
        vec![
            Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            },
            Attribute {
                name: "n".into(),
                attr_type: AttrType::Int,
            },
        ],
    )
    .unwrap();
    let shard = Shard::open(dir, schema, options).unwrap();
    let rows: Vec<(String, String)> = (0..3_000)
        .map(|i| (format!("k{i:05}"), format!("c{}", (i * 7) % 20)))
        .collect();
    let ops = rows
        .iter()
        .enumerate()
        .map(|(i, (key, city))| {
            WriteOp::Put(
                Record::new(key.as_str())
                    .with("city", Value::str(city))
                    .with("n", Value::Int(i as i64)),
            )
        })
        .collect();
    shard.write(ops).unwrap();
    (shard, rows)
}

/// `node` serving `shard` as the one replica of shard 0 of table `t`.
fn serve_one(
    node: &AdaptiveNode<puffer_store::Shard>,
    shard: puffer_store::Shard,
) -> std::sync::Arc<puffer_node::serving::ShardGroup<puffer_store::Shard>> {
    node.add_shard(
        "t",
        0,
        vec![NewReplica {
            replica: shard,
            memory_limit_bytes: None,
        }],
    )
    .unwrap()
}

/// A node, the group of its one shard, and the shard's (key, city) rows.
type CityNode = (
    AdaptiveNode<puffer_store::Shard>,
    std::sync::Arc<puffer_node::serving::ShardGroup<puffer_store::Shard>>,
    Vec<(String, String)>,
);

/// A node serving the shard of `city_shard` alone, whose layer policy buys at
/// `buy_rows_per_second`, decides within 0.2 s windows and holds nothing longer than it
/// must; with the shard's group and its rows.
fn city_node(dir: &std::path::Path, buy_rows_per_second: f64) -> CityNode {
    let (shard, rows) = city_shard(dir);
    let node = AdaptiveNode::start(NodeConfig {
        attributes: puffer_adapt::attributes::AttributeConfig {
            enabled: true,
            buy_rows_per_second,
            sell_fraction: 0.2,
            hold_seconds: 0.0,
            window_seconds: 0.2,
            column_window_seconds: 0.2,
        },
        ..config()
    })
    .unwrap();
    let group = serve_one(&node, shard);
    (node, group, rows)
}

#[test]
fn attribute_layers_are_bought_for_a_hot_attribute_within_the_budget_and_sold_when_it_cools() {
    use puffer_store::{Predicate, Query, ReadOptions, Shard, Value};
    let dir = tempfile::tempdir().unwrap();
    let (node, group, rows) = city_node(dir.path(), 100.0);
    // Searches on `city`, each answer checked against a scan of the rows written.
    let search_cities = |round: usize| {
        for i in 0..10 {
            let city = format!("c{}", (round * 10 + i) % 20);
            let asked = city.clone();
            let keys: Vec<Vec<u8>> = group
                .execute(move |shard| {
                    shard.search(&Query {
                        predicate: Predicate::Eq("city".into(), Value::str(&asked)),
                        projection: Some(Vec::new()),
                        limit: None,
                        read: ReadOptions::default(),
                    })
                })
                .unwrap()
                .unwrap()
                .rows
                .into_iter()
                .map(|r| r.key)
                .collect();
            let expected: Vec<Vec<u8>> = rows
                .iter()
                .filter(|(_, c)| *c == city)
                .map(|(k, _)| k.clone().into_bytes())
                .collect();
            assert_eq!(keys, expected, "{city}");
        }
    };
    let city_layer = |node: &AdaptiveNode<Shard>| {
        node.status().replicas[0]
            .attribute_layers
            .iter()
            .find(|a| a.layers.attribute == 0)
            .cloned()
    };
    // No memory to spare: nothing is bought however hot the attribute is.
    let footprint = node.status().memory_used_bytes;
    node.set_memory_budget(footprint);
    for round in 0..10 {
        search_cities(round);
        std::thread::sleep(Duration::from_millis(30));
        node.tick();
    }
    let city = city_layer(&node).expect("the hot attribute is reported");
    assert!(city.rows_per_second > 100.0, "{city:?}");
    assert!(!city.target && city.layers.held_bytes == 0, "{city:?}");
    // With memory: bought, built on the segment, and used by the same searches.
    node.set_memory_budget(u64::MAX);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    loop {
        search_cities(round);
        round += 1;
        std::thread::sleep(Duration::from_millis(30));
        node.tick();
        let city = city_layer(&node).unwrap();
        if city.target && city.layers.segments_held == city.layers.segments {
            assert!(city.layers.held_bytes > 0, "{city:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never bought: {city:?}");
    }
    search_cities(round);
    let layered: u64 = group.replicas()[0]
        .pool()
        .replica()
        .attribute_demand()
        .iter()
        .map(|rows| rows.layered)
        .sum();
    assert!(layered > 0, "the searches read the layer");
    // The attribute `n` was never queried: no layer.
    assert!(node.status().replicas[0]
        .attribute_layers
        .iter()
        .all(|a| a.layers.attribute == 0));
    // Cold: sold, and its memory given back.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        node.tick();
        let city = city_layer(&node).unwrap();
        if !city.target {
            assert_eq!(city.layers.held_bytes, 0, "{city:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never sold: {city:?}");
    }

    // By hand: kept though cold, then dropped though hot, then handed back and bought.
    let replica = node.status().replicas[0].id;
    let until = |what: &str, done: &dyn Fn(&AttributeLayerStatus) -> bool, hot: bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut round = 0;
        loop {
            if hot {
                search_cities(round);
                round += 1;
            }
            std::thread::sleep(Duration::from_millis(30));
            node.tick();
            let city = city_layer(&node).unwrap();
            if done(&city) {
                return city;
            }
            assert!(Instant::now() < deadline, "{what}: {city:?}");
        }
    };
    let held = |c: &AttributeLayerStatus| c.layers.segments_held == c.layers.segments;
    node.pin_attribute(replica, LayerKind::Attribute, 0, Some(AttributePin::Keep))
        .unwrap();
    let city = until("never built when kept", &|c| c.target && held(c), false);
    assert_eq!(city.pin, Some(AttributePin::Keep));
    // Cold for longer than the policy's window: still held.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(30));
        node.tick();
    }
    let city = city_layer(&node).unwrap();
    assert!(
        city.target && held(&city),
        "a kept layer was sold: {city:?}"
    );
    search_cities(0);
    node.pin_attribute(replica, LayerKind::Attribute, 0, Some(AttributePin::Drop))
        .unwrap();
    let city = until(
        "never dropped",
        &|c| !c.target && c.layers.held_bytes == 0,
        true,
    );
    assert_eq!(city.pin, Some(AttributePin::Drop));
    // Hot for longer than the policy's window: still not held.
    let city = until("no demand seen", &|c| c.rows_per_second > 100.0, true);
    assert!(!city.target && city.layers.held_bytes == 0, "{city:?}");
    node.pin_attribute(replica, LayerKind::Attribute, 0, None)
        .unwrap();
    let city = until(
        "never bought once handed back",
        &|c| c.target && held(c),
        true,
    );
    assert_eq!(city.pin, None);
    assert!(
        node.pin_attribute(replica + 100, LayerKind::Attribute, 0, None)
            .is_err(),
        "no such replica"
    );
}

/// Column layers follow scans as attribute layers follow predicates: an attribute that
/// scans read often is bought (within the budget) and then read from the layer, with
/// the same answers; an attribute never scanned gets none; a cold one is sold.
#[test]
fn column_layers_are_bought_for_a_scanned_attribute_and_sold_when_it_cools() {
    use puffer_store::{Predicate, Query, ReadOptions, Shard};
    let dir = tempfile::tempdir().unwrap();
    let (node, group, rows) = city_node(dir.path(), 1_000.0);
    // A scan of `n`: the sum of the column read against the rows written (n = row number).
    let scan = || {
        let columns = group
            .execute(|shard| {
                shard.columns(&Query {
                    predicate: Predicate::All,
                    projection: Some(vec!["n".into()]),
                    limit: None,
                    read: ReadOptions::default(),
                })
            })
            .unwrap()
            .unwrap();
        let sum: i64 = (0..columns.rows)
            .map(|row| match columns.columns[0].value(row) {
                Some(puffer_store::Value::Int(n)) => n,
                other => panic!("row {row}: {other:?}"),
            })
            .sum();
        let n = rows.len() as i64;
        assert_eq!((columns.rows as i64, sum), (n, n * (n - 1) / 2));
    };
    let n_layer = |node: &AdaptiveNode<Shard>| {
        node.status().replicas[0]
            .column_layers
            .iter()
            .find(|a| a.layers.attribute == 1)
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        scan();
        std::thread::sleep(Duration::from_millis(30));
        node.tick();
        if let Some(n) = n_layer(&node) {
            if n.target && n.layers.segments_held == n.layers.segments {
                assert!(n.layers.held_bytes > 0, "{n:?}");
                assert!(n.rows_per_second > 1_000.0, "{n:?}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "never bought: {:?}",
            n_layer(&node)
        );
    }
    scan();
    let demand = group.replicas()[0].pool().replica().column_demand();
    assert!(
        demand.iter().any(|d| d.attribute == 1 && d.layered > 0),
        "the scans read the layer: {demand:?}"
    );
    // `city` was never scanned: no column layer.
    assert!(node.status().replicas[0]
        .column_layers
        .iter()
        .all(|c| c.layers.attribute == 1));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        node.tick();
        let n = n_layer(&node).unwrap();
        if !n.target {
            assert_eq!(n.layers.held_bytes, 0, "{n:?}");
            break;
        }
        assert!(Instant::now() < deadline, "never sold: {n:?}");
    }
    scan();
}

#[test]
fn a_replica_ticked_before_its_first_segment_gets_the_layers_that_segment_was_built_with() {
    let dir = tempfile::tempdir().unwrap();
    let options = puffer_store::ShardOptions {
        background: false,
        ..puffer_store::ShardOptions::default()
    };
    let built_levels = options.index.levels;
    assert!(
        built_levels > 1,
        "the test needs segments built with layers"
    );
    let (shard, _) = city_shard_in_log_tables(dir.path(), options);
    // No layer manager: layers change only by hand, as in a benchmark that fixes them.
    let node = AdaptiveNode::start(NodeConfig {
        automatic: false,
        ..config()
    })
    .unwrap();
    let group = serve_one(&node, shard);
    for _ in 0..3 {
        node.tick();
    }
    let layers = |node: &AdaptiveNode<puffer_store::Shard>| node.status().replicas[0].layers;
    assert_eq!(layers(&node), 1, "no segment: one base layer");
    group.execute(|shard| shard.compact_all()).unwrap().unwrap();
    node.tick();
    assert_eq!(
        layers(&node),
        built_levels,
        "the first segment's layers, not the one layer the replica had without it"
    );
}
