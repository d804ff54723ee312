//! The configurator on a real database: the profile counts the searches and updates
//! served (shapes and changed attributes, against what the test issued), a pass builds
//! the configuration a brute-force search over the model's candidates finds best, a
//! second pass keeps it, and a shifted workload moves the subspaces along.

use std::collections::{BTreeMap, BTreeSet};

use puffer_adapt::hyperspace::{
    predicted_throughput_ops_per_s, AttributeSet, Calibration, Configuration, SearchFrequency,
    SearchShape, Subspace, UpdateFrequency, WorkloadProfile,
};
use puffer_node::hyperspace::{HyperspaceOptions, MeasuredCalibration, RowSample};
use puffer_node::serving::NodeConfig;
use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, Wait};
use puffer_store::{
    AttrType, Attribute, Predicate, Query, ReadOptions, Record, Schema, Value, WriteOp,
};

const CITIES: [&str; 4] = ["Lisbon", "Porto", "Faro", "Braga"];

fn schema() -> Schema {
    let attribute = |name: &str, attr_type| Attribute {
        name: name.into(),
        attr_type,
    };
    Schema::new(
        "id",
        vec![
            attribute("city", AttrType::String),
            attribute("price", AttrType::Int),
            attribute("rating", AttrType::Int),
        ],
    )
    .unwrap()
}

fn record(key: u32) -> Record {
    Record::new(format!("k{key:04}"))
        .with("city", Value::str(CITIES[key as usize % CITIES.len()]))
        .with("price", Value::Int(i64::from(key % 50) * 10))
        .with("rating", Value::Int(i64::from(key % 5)))
}

const MEASURED: MeasuredCalibration = MeasuredCalibration {
    beta_s_per_object: 2e-3,
    region_cost_s: 1e-4,
    fan_out_cost_s: 0.0,
    condition_cost_s: 0.0,
    sent_row_cost_s: 0.0,
    write_rate_cost_s2: 1e-6,
    catch_up_cost_s2: 0.0,
    fresh_window_s: 2.0,
    region_upkeep_s_per_s: 0.0,
    upkeep_half_rate_per_s: 0.0,
    alpha: 2.0,
    max_throughput_ops_per_s: 4000.0,
    update_fixed_cost_s: None,
};

fn search(db: &Database, predicate: Predicate) {
    let request = ReadRequest::Search {
        query: Query {
            predicate,
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        },
    };
    assert!(matches!(
        db.read("rooms", &request, Wait::Allowed).unwrap(),
        Some(ReadAnswer::Rows(_))
    ));
}

/// The configurator's tie margin here: not its default (0), so that the tie rule is
/// exercised end to end.
const TIE_MARGIN: f64 = 0.05;

fn eq(name: &str, value: Value) -> Predicate {
    Predicate::Eq(name.into(), value)
}

/// The configurator's choice by brute force: every set of at most 2 subspaces over
/// nonempty subsets of `attributes` (ids 0..3 of the schema), each of `regions`, on a
/// key subspace of `shards`, predicted by the model for `profile`; of those within the
/// tie margin of the best, the fewest subspaces. Returns its subspaces and prediction.
fn brute_force_choice(
    profile: &WorkloadProfile,
    calibration: &Calibration,
    shards: u32,
    regions: u32,
) -> (Vec<BTreeSet<u16>>, f64) {
    let subsets: Vec<BTreeSet<u16>> = (1u16..8)
        .map(|mask| (0..3).filter(|b| mask & (1 << b) != 0).collect())
        .collect();
    let mut configurations: Vec<Vec<BTreeSet<u16>>> = vec![Vec::new()];
    for (i, a) in subsets.iter().enumerate() {
        configurations.push(vec![a.clone()]);
        for b in &subsets[i + 1..] {
            configurations.push(vec![a.clone(), b.clone()]);
        }
    }
    let predicted: Vec<(Vec<BTreeSet<u16>>, f64)> = configurations
        .into_iter()
        .map(|subspaces| {
            let configuration = Configuration::new(
                subspaces
                    .iter()
                    .map(|s| Subspace::new(s.iter().copied(), regions).unwrap()),
                shards,
                1,
            )
            .unwrap();
            let t = predicted_throughput_ops_per_s(&configuration, profile, calibration).unwrap();
            (subspaces, t)
        })
        .collect();
    let best = predicted.iter().map(|(_, t)| *t).fold(f64::MIN, f64::max);
    // Every configuration predicted within the tie margin of the best ties with it; the
    // configurator builds the one with the fewest subspaces, then the higher prediction.
    let mut ties: Vec<&(Vec<BTreeSet<u16>>, f64)> = predicted
        .iter()
        .filter(|(_, t)| t * (1.0 + TIE_MARGIN) >= best)
        .collect();
    ties.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then(b.1.total_cmp(&a.1)));
    ties[0].clone()
}

fn current(db: &Database) -> BTreeSet<BTreeSet<String>> {
    db.describe_subspaces("rooms")
        .into_iter()
        .map(|s| s.attributes.into_iter().collect())
        .collect()
}

fn names(ids: &[BTreeSet<u16>]) -> BTreeSet<BTreeSet<String>> {
    let schema = schema();
    ids.iter()
        .map(|s| {
            s.iter()
                .map(|&id| schema.attributes[usize::from(id)].name.clone())
                .collect()
        })
        .collect()
}

#[test]
fn the_configurator_builds_the_model_s_best_configuration_and_follows_a_shift() {
    let dir = tempfile::tempdir().unwrap();
    let options = DatabaseOptions {
        node: NodeConfig {
            workers_per_replica: 1,
            ..NodeConfig::default()
        },
        hyperspace: HyperspaceOptions {
            auto: true,
            tie_margin: TIE_MARGIN,
            ..HyperspaceOptions::default()
        },
        ..DatabaseOptions::default()
    };
    let db = Database::open_with(dir.path(), options).unwrap();
    db.create_table("rooms", schema()).unwrap();
    let records: Vec<WriteOp> = (0..400).map(|k| WriteOp::Put(record(k))).collect();
    db.write_batch(vec![("rooms".into(), records)]).unwrap();
    // Without a calibration it ranks nothing, and says why.
    assert!(!db.tune_table("rooms").unwrap());
    let status = db.hyperspace_status("rooms").unwrap();
    assert!(status.decision.unwrap().contains("no calibration"));
    db.set_hyperspace_calibration(MEASURED).unwrap();
    assert!(db
        .set_hyperspace_calibration(MeasuredCalibration {
            alpha: -1.0,
            ..MEASURED
        })
        .is_err());
    assert!(db
        .set_hyperspace_calibration(MeasuredCalibration {
            update_fixed_cost_s: Some(-1e-3),
            ..MEASURED
        })
        .is_err());

    // Workload 1: searches fixing city and price, updates of rating.
    for i in 0..300u32 {
        search(
            &db,
            Predicate::And(vec![
                eq("city", Value::str(CITIES[i as usize % 4])),
                eq("price", Value::Int(i64::from(i % 50) * 10)),
            ]),
        );
    }
    for i in 0..30u32 {
        let mut changed = record(i);
        changed
            .values
            .insert("rating".into(), Value::Int(i64::from(i % 5) + 1));
        db.write_batch(vec![("rooms".into(), vec![WriteOp::Put(changed)])])
            .unwrap();
    }
    let status = db.hyperspace_status("rooms").unwrap();
    let searches: BTreeMap<String, u64> = status
        .profile
        .searches
        .iter()
        .map(|(shape, n)| (format!("{shape:?}"), *n))
        .collect();
    assert_eq!(
        searches,
        BTreeMap::from([(r#"{"city": "eq", "price": "eq"}"#.to_string(), 300)])
    );
    // The bulk load counted as 400 inserts changing all three; then 30 rating updates.
    let updates: BTreeMap<Vec<String>, u64> = status.profile.updates.iter().cloned().collect();
    assert_eq!(
        updates,
        BTreeMap::from([
            (vec!["city".into(), "price".into(), "rating".into()], 400),
            (vec!["rating".into()], 30),
        ])
    );
    let profile = WorkloadProfile {
        searches: vec![SearchFrequency {
            shape: SearchShape::equalities([0, 1]),
            frequency: 300.0,
            rows: None,
        }],
        updates: vec![
            UpdateFrequency {
                attributes: AttributeSet::from([0, 1, 2]),
                frequency: 400.0,
            },
            UpdateFrequency {
                attributes: AttributeSet::from([2]),
                frequency: 30.0,
            },
        ],
        value_spreads: Default::default(),
    };
    // The rows searches find, from the table as the test wrote it (400 records: the
    // configurator's sample is all of them, in key order).
    let written: Vec<Record> = (0..400u32)
        .map(|k| {
            let mut r = record(k);
            if k < 30 {
                r.values
                    .insert("rating".into(), Value::Int(i64::from(k % 5) + 1));
            }
            r
        })
        .collect();
    let sample = RowSample::new(&written, 400, &schema(), &AttributeSet::from([0, 1, 2]));
    let with_rows = |mut profile: WorkloadProfile| {
        for search in &mut profile.searches {
            search.rows = Some(sample.search_rows(&search.shape, None));
        }
        profile
    };
    let profile = with_rows(profile);
    let calibration = Calibration {
        beta_s_per_object: MEASURED.beta_s_per_object,
        region_cost_s: MEASURED.region_cost_s,
        fan_out_cost_s: MEASURED.fan_out_cost_s,
        condition_cost_s: MEASURED.condition_cost_s,
        sent_row_cost_s: MEASURED.sent_row_cost_s,
        write_rate_cost_s2: MEASURED.write_rate_cost_s2,
        catch_up_cost_s2: MEASURED.catch_up_cost_s2,
        fresh_window_s: MEASURED.fresh_window_s,
        region_upkeep_s_per_s: MEASURED.region_upkeep_s_per_s,
        upkeep_half_rate_per_s: MEASURED.upkeep_half_rate_per_s,
        alpha: MEASURED.alpha,
        max_throughput_ops_per_s: MEASURED.max_throughput_ops_per_s,
        update_fixed_cost_s: 1.0 / MEASURED.max_throughput_ops_per_s,
        objects: 400,
    };
    let regions = HyperspaceOptions::default().regions;
    let (best, _) = brute_force_choice(&profile, &calibration, 1, regions);
    assert!(db.tune_table("rooms").unwrap(), "the first pass switches");
    assert_eq!(current(&db), names(&best));
    assert!(!best.is_empty(), "the model wants a subspace here");
    let status = db.hyperspace_status("rooms").unwrap();
    let done = status.last_reconfiguration.unwrap();
    assert_eq!(done.error, None);
    assert!(done.predicted_gain > 0.1);
    assert!(!status.ranking.is_empty());
    // Nothing changed: the next pass keeps it.
    assert!(!db.tune_table("rooms").unwrap());
    assert!(db
        .hyperspace_status("rooms")
        .unwrap()
        .decision
        .unwrap()
        .contains("current configuration is the best"));

    // Workload 2 joins: ten times as many searches fixing rating and price. (A search
    // fixing one attribute gains nothing from a subspace on a table of one shard: the
    // index finds the same rows in the region as in the table.)
    for i in 0..3000u32 {
        search(
            &db,
            Predicate::And(vec![
                eq("rating", Value::Int(i64::from(i % 5))),
                eq("price", Value::Int(i64::from(i % 50) * 10)),
            ]),
        );
    }
    let shifted = WorkloadProfile {
        searches: vec![
            profile.searches[0].clone(),
            SearchFrequency {
                shape: SearchShape::equalities([1, 2]),
                frequency: 3000.0,
                rows: None,
            },
        ],
        ..profile.clone()
    };
    let shifted = with_rows(shifted);
    let (best_after, _) = brute_force_choice(&shifted, &calibration, 1, regions);
    assert_ne!(best_after, best, "the shift changes the best configuration");
    assert!(db.tune_table("rooms").unwrap(), "the shift is followed");
    assert_eq!(current(&db), names(&best_after));
    // Every record is still found through whichever copy answers.
    for k in [3u32, 77, 391] {
        let r = record(k);
        let rating = if k < 30 {
            Value::Int(i64::from(k % 5) + 1)
        } else {
            r.values["rating"].clone()
        };
        let request = ReadRequest::Count {
            predicate: Predicate::And(vec![
                eq("rating", rating.clone()),
                eq("price", r.values["price"].clone()),
                eq("city", r.values["city"].clone()),
            ]),
            read: ReadOptions::default(),
        };
        let Some(ReadAnswer::Count { count, .. }) =
            db.read("rooms", &request, Wait::Allowed).unwrap()
        else {
            panic!()
        };
        let expected = (0..400u32)
            .filter(|&j| {
                let other = record(j);
                let other_rating = if j < 30 {
                    Value::Int(i64::from(j % 5) + 1)
                } else {
                    other.values["rating"].clone()
                };
                other_rating == rating
                    && other.values["price"] == r.values["price"]
                    && other.values["city"] == r.values["city"]
            })
            .count() as u64;
        assert_eq!(count, expected, "record {k}");
    }
}

/// Keys that start with what groups them (the city) put one city first in key order:
/// the rows a search is estimated to find come from a sample spread over the whole
/// table, so each city's share is its share of the table, not of the first keys.
#[test]
fn search_rows_are_estimated_from_a_sample_spread_over_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(dir.path(), DatabaseOptions::default()).unwrap();
    db.create_table("rooms", schema()).unwrap();
    // 2,500 rooms per city, keyed "<city>-<n>": 10,000 records, so more than the
    // 4,096 sampled; the first 4,096 keys hold two of the four cities.
    let mut ops = Vec::new();
    for city in CITIES {
        for n in 0..2_500u32 {
            ops.push(WriteOp::Put(
                Record::new(format!("{city}-{n:05}"))
                    .with("city", Value::str(city))
                    .with("price", Value::Int(i64::from(n % 50))),
            ));
        }
    }
    db.write_batch(vec![("rooms".into(), ops)]).unwrap();
    let mut profile = WorkloadProfile {
        searches: vec![SearchFrequency {
            shape: SearchShape::equalities([0]),
            frequency: 1.0,
            rows: None,
        }],
        updates: Vec::new(),
        value_spreads: Default::default(),
    };
    db.estimate_search_rows("rooms", &mut profile, &|_| Some(10))
        .unwrap();
    let rows = profile.searches[0].rows.as_ref().expect("rows estimated");
    assert!(!rows.probes.is_empty());
    // The truth, by a scan of what was written: every city holds a quarter.
    for probe in &rows.probes {
        let share = probe.attribute_shares[&0];
        assert!(
            (share - 0.25).abs() < 0.02,
            "a city's share is estimated {share}, the table's is 0.25"
        );
        assert!((probe.matched_share - 0.25).abs() < 0.02, "{probe:?}");
    }
}
