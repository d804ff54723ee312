//! `puffer-bench layer-shift` (issue 20): the query mix moves from one attribute to
//! another, and the adaptive node's attribute layers follow it.
//!
//! A table (default: hotel bookings) is loaded into one shard, compacted, and served by
//! an adaptive node with its default settings (automatic, memory budget 1 GiB), its
//! sample layers pinned at the 4 the segment was built with. It runs twice: without
//! attribute layers, then with them. Client
//! threads send equality searches (keys only, every matching row) on attribute `--first`
//! for `--phase-seconds`, then on `--then` for as long. Values are drawn uniformly from
//! those present; every answer's row count is checked against a count of the parsed
//! rows. Each second the run records queries answered, their median latency and the
//! node's attribute layers. It reports when each attribute's layers were complete and
//! when the first one's were sold, relative to the shift, and the throughput before and
//! after. A CSV of the timeline goes to `--out-dir`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use puffer_node::serving::{AdaptiveNode, NewReplica, NodeConfig};
use puffer_query::import::{read_table, KeySource};
use puffer_store::{Predicate, Query, ReadOptions, Shard, ShardOptions, Value};
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::stats::{dataset_label, quantile_us, round};

/// Rows an answer holds at most (the store's bound); larger answers are cut there.
const MAX_RESULT_ROWS: usize = puffer_store::shard::MAX_RESULT_ROWS;

#[derive(clap::Args)]
pub struct LayerShiftArgs {
    /// CSV / JSON-lines input (gzip allowed).
    #[arg(long, default_value = "../shared/data/hotel_bookings.csv.gz")]
    input: PathBuf,
    /// The attribute queried first.
    #[arg(long, default_value = "arrival_date_month")]
    first: String,
    /// The attribute queried after the shift.
    #[arg(long, default_value = "country")]
    then: String,
    /// Seconds of each phase.
    #[arg(long, default_value_t = 60)]
    phase_seconds: u64,
    /// Client threads.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Where the timeline CSV goes.
    #[arg(long, default_value = "target/bench/layers")]
    out_dir: PathBuf,
    /// Random seed of the values asked.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// One second of the run.
struct Second {
    t_seconds: f64,
    queries: u64,
    p50_us: f64,
    first_held: bool,
    then_held: bool,
}

pub fn run(args: &LayerShiftArgs) -> anyhow::Result<()> {
    ensure!(
        args.phase_seconds >= 5,
        "--phase-seconds must be at least 5"
    );
    ensure!(
        (1..=64).contains(&args.clients),
        "--clients must be 1 to 64"
    );
    ensure!(
        args.input.is_file(),
        "input {} is not a file",
        args.input.display()
    );
    let table = read_table(std::slice::from_ref(&args.input), KeySource::RowNumber)
        .map_err(|e| anyhow::anyhow!("reading {}: {}", args.input.display(), e.message()))?;
    let attribute_id = |name: &str| -> anyhow::Result<u16> {
        table
            .schema
            .attributes
            .iter()
            .position(|a| a.name == name)
            .map(|i| i as u16)
            .with_context(|| format!("no attribute {name:?} in {}", args.input.display()))
    };
    let (first, then) = (attribute_id(&args.first)?, attribute_id(&args.then)?);
    ensure!(first != then, "--first and --then must differ");
    // The oracle: rows per value of each attribute.
    let counts = |id: u16| -> Vec<(Value, usize)> {
        let mut by_value: HashMap<String, (Value, usize)> = HashMap::new();
        for row in &table.rows {
            if let Some(value) = &row.values[id as usize] {
                by_value
                    .entry(format!("{value:?}"))
                    .or_insert_with(|| (value.clone(), 0))
                    .1 += 1;
            }
        }
        let mut values: Vec<(Value, usize)> = by_value.into_values().collect();
        values.sort_by_key(|(v, _)| format!("{v:?}"));
        values
    };
    let phases = [
        (args.first.clone(), Arc::new(counts(first))),
        (args.then.clone(), Arc::new(counts(then))),
    ];
    for (name, values) in &phases {
        ensure!(!values.is_empty(), "attribute {name:?} has no values");
    }

    let dir = tempfile::Builder::new()
        .prefix("puffer-bench-layer-shift-")
        .tempdir()?;
    let shard = Shard::open(dir.path(), table.schema.clone(), ShardOptions::default())?;
    crate::loading::put_rows(&shard, &table, 2000)?;
    shard.compact_all()?;
    let segments = shard.segments().len();
    shard.close();
    eprintln!("layer-shift: {} rows in {segments} segment(s)", table.len());
    // Without attribute layers first, then with them, each on the shard as opened.
    let mut runs = Vec::new();
    for enabled in [false, true] {
        let shard = Shard::open(dir.path(), table.schema.clone(), ShardOptions::default())?;
        runs.push(drive(args, shard, enabled, &phases, (first, then))?);
    }
    let [without, with] = <[Run; 2]>::try_from(runs).map_err(|_| anyhow::anyhow!("two runs"))?;
    let Run {
        timeline,
        failures,
        settings,
    } = &with;
    let failures: Vec<String> = without.failures.iter().chain(failures).cloned().collect();

    // When the layers came and went, relative to each phase's start.
    let shift = args.phase_seconds as f64;
    let first_bought = timeline.iter().find(|s| s.first_held).map(|s| s.t_seconds);
    let then_bought = timeline
        .iter()
        .find(|s| s.then_held && s.t_seconds > shift)
        .map(|s| s.t_seconds - shift);
    let first_sold = timeline
        .iter()
        .find(|s| s.t_seconds > shift && !s.first_held)
        .map(|s| s.t_seconds - shift);
    // Throughput and median latency over each phase's last 10 seconds, per run.
    let settled = |timeline: &[Second], phase_start: f64| {
        let seconds: Vec<&Second> = timeline
            .iter()
            .filter(|s| {
                s.t_seconds > phase_start + shift - 10.0 && s.t_seconds <= phase_start + shift
            })
            .collect();
        let rate =
            seconds.iter().map(|s| s.queries).sum::<u64>() as f64 / seconds.len().max(1) as f64;
        let mut medians: Vec<f64> = seconds
            .iter()
            .filter(|s| s.queries > 0)
            .map(|s| s.p50_us)
            .collect();
        medians.sort_by(f64::total_cmp);
        (rate, medians.get(medians.len() / 2).copied().unwrap_or(0.0))
    };
    let figures = [
        (settled(&without.timeline, 0.0), settled(timeline, 0.0)),
        (settled(&without.timeline, shift), settled(timeline, shift)),
    ];

    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let csv_path = args.out_dir.join("layer-shift.csv");
    let mut csv = String::from(
        "t_s,queries_without_layers,p50_us_without_layers,queries,p50_us,first_held,then_held\n",
    );
    for (s, w) in timeline.iter().zip(&without.timeline) {
        csv.push_str(&format!(
            "{},{},{:.1},{},{:.1},{},{}\n",
            s.t_seconds,
            w.queries,
            w.p50_us,
            s.queries,
            s.p50_us,
            s.first_held as u8,
            s.then_held as u8
        ));
    }
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;

    let show = |v: Option<f64>| v.map_or("never".to_string(), |s| format!("{s:.0} s"));
    println!(
        "layer-shift on {}: {} rows, {} clients, {} s per phase, without attribute layers then with them",
        dataset_label(std::slice::from_ref(&args.input)),
        table.len(),
        args.clients,
        args.phase_seconds
    );
    println!(
        "buy at {} rows/s, sell below {:.0}, hold {} s, rates over the last {} s",
        settings.buy_rows_per_second,
        settings.buy_rows_per_second * settings.sell_fraction,
        settings.hold_seconds,
        settings.window_seconds
    );
    println!("phase                   layers complete   queries/s without -> with (last 10 s)   p50 us without -> with");
    for (i, name) in [&args.first, &args.then].into_iter().enumerate() {
        let ((q0, p0), (q1, p1)) = figures[i];
        let complete = if i == 0 { first_bought } else { then_bought };
        println!(
            "{}: {:<20} {:>14}   {:>12.0} -> {:<12.0}             {:>10.0} -> {:<10.0}",
            i + 1,
            name,
            show(complete),
            q0,
            q1,
            p0,
            p1
        );
    }
    println!(
        "{}'s layers sold {} after the shift; answers checked: {} wrong",
        args.first,
        show(first_sold),
        failures.len()
    );
    for failure in failures.iter().take(5) {
        println!("  wrong: {failure}");
    }
    let phase_json = |i: usize| {
        let ((q0, p0), (q1, p1)) = figures[i];
        json!({
            "queries_per_s_last_10s_without_layers": round(q0, 1),
            "queries_per_s_last_10s": round(q1, 1),
            "p50_us_last_10s_without_layers": round(p0, 1),
            "p50_us_last_10s": round(p1, 1),
        })
    };
    println!(
        "{}",
        json!({
            "experiment": "layer-shift",
            "dataset": dataset_label(std::slice::from_ref(&args.input)),
            "rows": table.len(),
            "segments": segments,
            "clients": args.clients,
            "phase_seconds": args.phase_seconds,
            "first": args.first,
            "then": args.then,
            "settings": settings,
            "first_layers_complete_s": first_bought,
            "then_layers_complete_after_shift_s": then_bought,
            "first_layers_sold_after_shift_s": first_sold,
            "first_phase": phase_json(0),
            "second_phase": phase_json(1),
            "wrong_answers": failures.len(),
            "timeline_csv": csv_path.display().to_string(),
        })
    );
    ensure!(failures.is_empty(), "{} answers were wrong", failures.len());
    Ok(())
}

/// A phase: the attribute queried, and each of its values with its row count.
type Phase = (String, Arc<Vec<(Value, usize)>>);

/// What one run of both phases saw.
struct Run {
    timeline: Vec<Second>,
    failures: Vec<String>,
    settings: puffer_adapt::attributes::AttributeConfig,
}

/// Both phases against a node serving `shard`, attribute layers `enabled` or not.
fn drive(
    args: &LayerShiftArgs,
    shard: Shard,
    enabled: bool,
    phases: &[Phase; 2],
    (first, then): (u16, u16),
) -> anyhow::Result<Run> {
    let mut config = NodeConfig::default();
    config.attributes.enabled = enabled;
    let settings = config.attributes.clone();
    let node = AdaptiveNode::start(config)?;
    let group = node.add_shard(
        "t",
        0,
        vec![NewReplica {
            replica: shard,
            memory_limit_bytes: None,
        }],
    )?;
    // Sample layers pinned where the segment was built (4): the sample-layer manager
    // would otherwise give an idle replica's layers back, and the runs would compare
    // sample layers as much as attribute layers.
    let replica = group.replicas()[0].id;
    node.set_layers(replica, puffer_index::BuildOptions::default().levels)?;
    eprintln!(
        "layer-shift: attribute layers {}; {} s on {:?}, then {} s on {:?}",
        if enabled { "on" } else { "off" },
        args.phase_seconds,
        args.first,
        args.phase_seconds,
        args.then
    );

    let phase = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let timeline = std::thread::scope(|scope| -> anyhow::Result<Vec<Second>> {
        for client in 0..args.clients {
            let (phase, stop, latencies, failures) = (
                phase.clone(),
                stop.clone(),
                latencies.clone(),
                failures.clone(),
            );
            let (phases, group) = (&phases, &group);
            let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed + client as u64);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (name, values) = &phases[phase.load(Ordering::Relaxed)];
                    let (value, expected) = values[rng.gen_range(0..values.len())].clone();
                    let query = Query {
                        predicate: Predicate::Eq(name.clone(), value.clone()),
                        projection: Some(Vec::new()),
                        limit: Some(MAX_RESULT_ROWS),
                        read: ReadOptions::default(),
                    };
                    let asked = Instant::now();
                    let answer = group.execute(move |shard| shard.search(&query));
                    let took = asked.elapsed();
                    match answer {
                        Ok(Ok(result)) if result.rows.len() == expected.min(MAX_RESULT_ROWS) => {
                            latencies.lock().expect("latencies").push(took)
                        }
                        Ok(Ok(result)) => failures.lock().expect("failures").push(format!(
                            "{name} = {value:?}: {} rows, expected {expected}",
                            result.rows.len()
                        )),
                        Ok(Err(e)) => failures.lock().expect("failures").push(e.to_string()),
                        // Overloaded: the queue was full; the client asks again.
                        Err(_) => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
            });
        }
        let mut timeline = Vec::new();
        for second in 1..=2 * args.phase_seconds {
            if second == args.phase_seconds + 1 {
                phase.store(1, Ordering::Relaxed);
            }
            let due = started + Duration::from_secs(second);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let mut taken = std::mem::take(&mut *latencies.lock().expect("latencies"));
            let status = node.status();
            let held = |id: u16| {
                status.replicas[0].attribute_layers.iter().any(|a| {
                    a.layers.attribute == id
                        && a.target
                        && a.layers.segments_held == a.layers.segments
                })
            };
            timeline.push(Second {
                t_seconds: second as f64,
                queries: taken.len() as u64,
                p50_us: if taken.is_empty() {
                    0.0
                } else {
                    quantile_us(&mut taken, 0.5)
                },
                first_held: held(first),
                then_held: held(then),
            });
        }
        stop.store(true, Ordering::Relaxed);
        Ok(timeline)
    })?;
    node.shutdown();
    let failures = failures.lock().expect("failures").clone();
    Ok(Run {
        timeline,
        failures,
        settings,
    })
}
