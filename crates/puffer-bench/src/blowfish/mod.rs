//! `puffer-bench blowfish`: BlowFish's evaluation (section 4) on one node, time
//! compressed: the same shapes as the paper's Figures 6 to 11 at a scale this machine
//! holds.
//!
//! The table is loaded into a shard and compacted; each replica is a separate copy of
//! the shard directory. First the storage-throughput curve is measured closed-loop on
//! complete layers (the deepest down to the base). Request rates are then set relative
//! to the measured base capacity `c1` (queries per second one thread sustains with one
//! layer), as the paper's are relative to its 2.7K ops/s:
//! - `gradual`: 0.9, 1.3, 1.7, 2.1, 2.5 x c1, one step each `--step-seconds`, then back
//!   to 0.9 x c1 (paper: 2.5K to 6.5K, +1K per step);
//! - `spiked`: 0.9 x c1, then one step of 3x for 60 s, then back;
//! - `replicas`: three replicas, one memory-constrained, rates stepped as in `gradual`
//!   on the cores available (paper 4.2, Figure 10);
//! - `vs-replication`: the storage needed to serve a Zipf load over 100 shards at
//!   rising rates (2.4x to 19.2x their base capacity), by layers versus by selective
//!   replication of the shard as stored at the start, from the measured curve (Figure 11).
//!
//! Each run writes a CSV time series and a PNG of three panels, for dedicated and for
//! opportunistic construction, and the scenario prints one JSON object last.

mod chart;
mod driver;
pub mod workload;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use puffer_adapt::planner::{storage_by_layers, storage_by_replication, zipf_shares, CurveStep};
use puffer_adapt::{ManagerConfig, Marks};
use puffer_index::Construction;
use puffer_node::serving::{AdaptiveNode, NewReplica, NodeConfig};
use puffer_store::Shard;
use serde_json::json;

use crate::stats::round;
use driver::{adapt_seconds, drive, Mismatches, Phase, SeriesRow};
use workload::{prepare, run_query, TermSampler, Workload};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Gradual,
    Spiked,
    Replicas,
    VsReplication,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConstructionArg {
    Dedicated,
    Opportunistic,
    Both,
}

#[derive(clap::Args)]
pub struct BlowfishArgs {
    /// Which experiment.
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// CSV or JSON-lines table (optionally gzip).
    #[arg(long, default_value = "../shared/data/hotel_bookings.csv.gz")]
    input: PathBuf,
    /// Layer construction mode(s) to run.
    #[arg(long, value_enum, default_value = "both")]
    construction: ConstructionArg,
    /// Seconds per rate step (the paper's 30 minutes, compressed).
    #[arg(long, default_value_t = 20.0)]
    step_seconds: f64,
    /// Seconds the spike lasts.
    #[arg(long, default_value_t = 60.0)]
    spike_seconds: f64,
    /// Zipf skew of search terms.
    #[arg(long, default_value_t = 0.99)]
    skew: f64,
    /// Where CSV and PNG files go.
    #[arg(long, default_value = "target/bench/blowfish")]
    out_dir: PathBuf,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Queue sampling period, milliseconds.
    #[arg(long, default_value_t = 100)]
    delta_ms: u64,
    /// Weight of the newest queue sample.
    #[arg(long, default_value_t = 0.2)]
    alpha: f64,
    /// High mark on the averaged queue.
    #[arg(long, default_value_t = 16.0)]
    high_mark: f64,
    /// Low mark on the averaged queue.
    #[arg(long, default_value_t = 1.0)]
    low_mark: f64,
    /// Least seconds between two layer changes of one replica.
    #[arg(long, default_value_t = 1.0)]
    hold_seconds: f64,
    /// Least seconds a replica keeps a layer after its last change before idleness drops it.
    #[arg(long, default_value_t = 5.0)]
    idle_drop_after_seconds: f64,
    /// Bound of each replica's request queue.
    #[arg(long, default_value_t = 512)]
    queue_capacity: usize,
    /// Seconds of closed-loop measurement per layer count.
    #[arg(long, default_value_t = 2.0)]
    calibrate_seconds: f64,
}

/// A point of the curve measured closed-loop on complete layers.
#[derive(Clone, Debug)]
pub struct Measured {
    pub layers: u32,
    pub footprint_bytes: u64,
    pub ops_per_second: f64,
    /// Seconds of single queries, the first [`MAX_SAMPLES`] measured.
    pub samples_seconds: Vec<f64>,
}

/// Most single-query times one point keeps.
const MAX_SAMPLES: usize = 50_000;

pub fn run(args: &BlowfishArgs) -> anyhow::Result<()> {
    ensure!(
        args.input.exists(),
        "input {} not found (the shared data folder is ../shared/data)",
        args.input.display()
    );
    ensure!(
        args.step_seconds >= 2.0 && args.spike_seconds >= 5.0,
        "--step-seconds must be >= 2 and --spike-seconds >= 5"
    );
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let work = tempfile::tempdir()?;
    let started = Instant::now();
    let workload = prepare(&args.input, work.path(), args.seed)?;
    println!(
        "loaded {} rows ({} bytes) from {} in {:.1} s; {} search terms (1..=1000 matches each)",
        workload.rows,
        workload.input_bytes,
        args.input.display(),
        started.elapsed().as_secs_f64(),
        workload.terms.len()
    );
    let curve = calibrate(args, &workload, work.path())?;
    println!("\nstorage-throughput curve (one thread, complete layers):");
    println!("{:>7} {:>16} {:>12}", "layers", "footprint bytes", "ops/s");
    for m in &curve {
        println!(
            "{:>7} {:>16} {:>12.0}",
            m.layers, m.footprint_bytes, m.ops_per_second
        );
    }
    let curve_json: Vec<_> = curve
        .iter()
        .map(|m| json!({"layers": m.layers, "footprint_bytes": m.footprint_bytes, "ops_per_second": round(m.ops_per_second, 1)}))
        .collect();
    let base = &curve[0];
    let mut summary = json!({
        "experiment": "blowfish",
        "scenario": format!("{:?}", args.scenario).to_lowercase(),
        "input": args.input.display().to_string(),
        "rows": workload.rows,
        "curve": curve_json,
        "base_ops_per_second": round(base.ops_per_second, 1),
    });
    if args.scenario == Scenario::VsReplication {
        vs_replication(&curve, &mut summary);
    } else {
        let modes = match args.construction {
            ConstructionArg::Dedicated => vec![Construction::Dedicated],
            ConstructionArg::Opportunistic => vec![Construction::Opportunistic],
            ConstructionArg::Both => vec![Construction::Dedicated, Construction::Opportunistic],
        };
        let mut runs = Vec::new();
        for (n, mode) in modes.into_iter().enumerate() {
            runs.push(run_scenario(
                args,
                &workload,
                &curve,
                mode,
                &work.path().join(format!("run-{n}")),
            )?);
        }
        let worst = |key: &str| {
            runs.iter()
                .map(|r| r[key].as_f64())
                .try_fold(0.0f64, |acc, v| v.map(|v| acc.max(v)))
        };
        summary["adapt_seconds"] = json!(worst("adapt_seconds").map(|v| round(v, 1)));
        summary["peak_storage_ratio"] = json!(worst("peak_storage_ratio").map(|v| round(v, 3)));
        if args.scenario == Scenario::Replicas {
            summary["constrained_queue_max"] = json!(worst("constrained_queue_max"));
        }
        let mismatches: u64 = runs
            .iter()
            .map(|r| r["mismatches"].as_u64().unwrap_or(0))
            .sum();
        summary["mismatches"] = json!(mismatches);
        summary["runs"] = json!(runs);
        ensure!(
            mismatches == 0,
            "{mismatches} answers did not match: {}",
            summary
        );
    }
    println!("{summary}");
    Ok(())
}

fn node_config(
    args: &BlowfishArgs,
    construction: Construction,
    automatic: bool,
) -> anyhow::Result<NodeConfig> {
    Ok(NodeConfig {
        delta: Duration::from_millis(args.delta_ms),
        alpha: args.alpha,
        manager: ManagerConfig {
            marks: Marks::uniform(args.high_mark, args.low_mark)?,
            hold_seconds: args.hold_seconds,
            idle_drop_after_seconds: args.idle_drop_after_seconds,
            drop_headroom: 0.7,
        },
        // The experiments measure what sample layers buy (as without a record cache).
        attributes: puffer_adapt::attributes::AttributeConfig {
            enabled: false,
            ..Default::default()
        },
        memory_budget_bytes: u64::MAX,
        construction,
        queue_capacity: args.queue_capacity,
        workers_per_replica: 1,
        history_len: 1 << 20,
        automatic,
        background: automatic,
    })
}

/// Closed-loop throughput of one thread at every layer count, deepest first (complete
/// layers from the segment files, then dropping one at a time).
fn calibrate(
    args: &BlowfishArgs,
    workload: &Workload,
    work_dir: &Path,
) -> anyhow::Result<Vec<Measured>> {
    measure_curve(
        node_config(args, Construction::Dedicated, false)?,
        workload,
        work_dir,
        args.calibrate_seconds,
        args.skew,
        args.seed,
    )
}

/// Closed-loop throughput of one thread at every layer count of a copy of `workload`'s
/// shard (on an adaptive node configured by `config`, not adapting), and the time of
/// each query; shallowest first.
pub fn measure_curve(
    config: NodeConfig,
    workload: &Workload,
    work_dir: &Path,
    seconds_per_point: f64,
    skew: f64,
    seed: u64,
) -> anyhow::Result<Vec<Measured>> {
    let node = AdaptiveNode::start(NodeConfig {
        automatic: false,
        background: false,
        ..config
    })?;
    let shard = workload.open_copy(&work_dir.join("calibrate"))?;
    let group = node.add_shard(
        "calibrate",
        0,
        vec![NewReplica {
            replica: shard,
            memory_limit_bytes: None,
        }],
    )?;
    let slot = group.replicas()[0].clone();
    let max_layers = node.status().replicas[0].max_layers;
    let terms = Arc::new(workload.terms.clone());
    let mut sampler = TermSampler::new(workload, skew, seed ^ 0xca1);
    let mut curve = Vec::new();
    for layers in (1..=max_layers).rev() {
        node.set_layers(slot.id, layers)?;
        node.tick();
        let deadline = Instant::now() + Duration::from_secs_f64(seconds_per_point);
        let mut done = 0u64;
        let mut samples_seconds = Vec::new();
        let started = Instant::now();
        while Instant::now() < deadline {
            let term = sampler.next();
            let terms = terms.clone();
            let one = Instant::now();
            let answer = slot
                .pool()
                .execute(move |shard: &Shard| run_query(shard, &terms[term]))?;
            if samples_seconds.len() < MAX_SAMPLES {
                samples_seconds.push(one.elapsed().as_secs_f64());
            }
            answer
                .value
                .map_err(|m| anyhow::anyhow!("mismatch while calibrating: {m}"))?;
            done += 1;
        }
        let status = node.status();
        curve.push(Measured {
            layers,
            footprint_bytes: status.replicas[0].footprint_bytes,
            ops_per_second: done as f64 / started.elapsed().as_secs_f64(),
            samples_seconds,
        });
    }
    curve.reverse();
    node.shutdown();
    Ok(curve)
}

fn phases(args: &BlowfishArgs, base_rate: f64, capacity_cap: f64) -> (Vec<Phase>, Vec<usize>) {
    let at = |factor: f64, seconds: f64| Phase {
        seconds,
        rate_per_second: (factor * base_rate).min(capacity_cap),
    };
    match args.scenario {
        Scenario::Spiked => (
            vec![at(0.9, 10.0), at(2.7, args.spike_seconds), at(0.9, 15.0)],
            vec![1],
        ),
        _ => {
            let steps: Vec<Phase> = [0.9, 1.3, 1.7, 2.1, 2.5, 0.9]
                .iter()
                .map(|&f| at(f, args.step_seconds))
                .collect();
            (steps, vec![1, 2, 3, 4])
        }
    }
}

fn run_scenario(
    args: &BlowfishArgs,
    workload: &Workload,
    curve: &[Measured],
    construction: Construction,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let mode = match construction {
        Construction::Dedicated => "dedicated",
        Construction::Opportunistic => "opportunistic",
    };
    let replicas = if args.scenario == Scenario::Replicas {
        3
    } else {
        1
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let parallel = replicas.min(cores) as f64;
    let base_rate = curve[0].ops_per_second * parallel;
    // Rates the deepest layers cannot serve would only measure a saturated queue.
    let capacity_cap = 0.95 * curve.last().expect("curve has points").ops_per_second * parallel;
    let (phases, steps) = phases(args, base_rate, capacity_cap);
    println!(
        "\n{:?} / {mode}: {} replica(s); rates {:?} ops/s",
        args.scenario,
        replicas,
        phases
            .iter()
            .map(|p| p.rate_per_second.round())
            .collect::<Vec<_>>()
    );

    let node = AdaptiveNode::start(node_config(args, construction, true)?)?;
    let mut new_replicas = Vec::new();
    for r in 0..replicas {
        new_replicas.push(NewReplica {
            replica: workload.open_copy(&dir.join(format!("replica-{r}")))?,
            memory_limit_bytes: None,
        });
    }
    // The constrained replica may not grow beyond its base footprint (BlowFish 4.2).
    let base_footprint = curve[0].footprint_bytes;
    if replicas == 3 {
        new_replicas[2].memory_limit_bytes = Some(base_footprint);
    }
    let group = node.add_shard("blowfish", 0, new_replicas)?;
    for slot in group.replicas() {
        node.set_layers(slot.id, 1)?;
        node.unpin(slot.id)?;
    }
    std::thread::sleep(Duration::from_millis(3 * args.delta_ms));
    let terms = Arc::new(workload.terms.clone());
    let mut sampler = TermSampler::new(workload, args.skew, args.seed);
    let mismatches = Arc::new(Mutex::new(Mismatches::default()));
    let (series, phase_starts) = drive(&node, &group, &terms, &mut sampler, &phases, &mismatches);
    node.shutdown();

    let name = format!("{}-{mode}", format!("{:?}", args.scenario).to_lowercase());
    let csv_path = args.out_dir.join(format!("{name}.csv"));
    write_csv(&csv_path, &name, &series, base_footprint)?;
    let png_path = args.out_dir.join(format!("{name}.png"));
    let title = format!(
        "BlowFish {name}: {} replica(s), rates x base capacity {:.0} ops/s",
        replicas, curve[0].ops_per_second
    );
    if let Err(e) = chart::draw(&png_path, &title, &series, base_footprint, replicas) {
        println!("chart not drawn: {e:#}");
    }

    let adapt: Option<f64> = steps
        .iter()
        .map(|&s| {
            let end = phase_starts[s] + phases[s].seconds;
            adapt_seconds(&series, phase_starts[s], end, args.high_mark)
        })
        .try_fold(0.0f64, |acc, v| v.map(|v| acc.max(v)));
    let peak_storage_ratio = series
        .iter()
        .map(|s| s.row.footprint_bytes as f64 / base_footprint as f64)
        .fold(0.0, f64::max);
    let constrained_queue_max = series
        .iter()
        .filter(|s| s.replica == 2)
        .map(|s| s.row.queue_length)
        .max();
    let refused: f64 = series
        .iter()
        .map(|s| s.row.refused_per_second * args.delta_ms as f64 / 1000.0)
        .sum();
    let mismatches = mismatches.lock().expect("mismatch list poisoned");
    for message in mismatches.first.iter().take(10) {
        println!("MISMATCH {message}");
    }
    println!(
        "  adapt_seconds {:?}, peak_storage_ratio {:.3}, refused ~{:.0}, constrained queue max {:?}; {} and {}",
        adapt.map(|a| round(a, 1)),
        peak_storage_ratio,
        refused,
        constrained_queue_max,
        csv_path.display(),
        png_path.display()
    );
    Ok(json!({
        "construction": mode,
        "replicas": replicas,
        "rates_per_second": phases.iter().map(|p| round(p.rate_per_second, 0)).collect::<Vec<_>>(),
        "adapt_seconds": adapt.map(|a| round(a, 1)),
        "peak_storage_ratio": round(peak_storage_ratio, 3),
        "constrained_queue_max": constrained_queue_max,
        "queue_capacity": args.queue_capacity,
        "refused_requests": refused.round(),
        "mismatches": mismatches.count,
        "csv": csv_path.display().to_string(),
        "png": png_path.display().to_string(),
    }))
}

fn write_csv(
    path: &Path,
    name: &str,
    series: &[SeriesRow],
    base_footprint: u64,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(out, "run,t_seconds,replica,layers,footprint_bytes,storage_ratio,queue_length,averaged_queue,request_per_second,response_per_second,refused_per_second")?;
    for s in series {
        let r = &s.row;
        writeln!(
            out,
            "{name},{:.3},{},{},{},{:.4},{},{:.3},{:.1},{:.1},{:.1}",
            r.t_seconds,
            s.replica,
            r.layers,
            r.footprint_bytes,
            r.footprint_bytes as f64 / base_footprint as f64,
            r.queue_length,
            r.averaged_queue,
            r.request_per_second,
            r.response_per_second,
            r.refused_per_second
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Total request rates of the comparison, as multiples of the base capacity of all shards
/// (100 x one base copy's rate): 2.4x to 19.2x, an 8x range like the paper's 100K to 800K.
/// The paper finds 1.6x less storage already at its lowest rate, which needs the storage
/// to be driven by load; below about 2x the base capacity most shards are idle, both
/// schemes store one smallest copy of each, and any ratio tends to 1 (those rates are
/// reported too, as `below_range`).
const RANGE_LOAD_FACTORS: [f64; 8] = [2.4, 3.2, 4.3, 5.7, 7.6, 10.1, 14.4, 19.2];
const BELOW_RANGE_LOAD_FACTORS: [f64; 5] = [0.4, 0.8, 1.2, 1.6, 2.0];

/// Storage for a Zipf load over 100 shards at rising total rates, from the measured curve:
/// by layers (each shard at its cheapest layer count, more copies only where one is not
/// enough) versus selective replication, which adds whole copies of the shard as stored
/// at the start (the base layer, as BlowFish starts a shard; throughput grows linearly
/// with copies, paper 4.3). Two other baselines are reported alongside: copies at the
/// configuration segments are built with (all layers), and the best single static
/// layer count for all shards at each rate (the strictest).
fn vs_replication(curve: &[Measured], summary: &mut serde_json::Value) {
    const SHARDS: usize = 100;
    let steps: Vec<CurveStep> = curve
        .iter()
        .map(|m| CurveStep {
            footprint_bytes: m.footprint_bytes,
            capacity_per_second: m.ops_per_second,
        })
        .collect();
    let (base, built) = (steps[0], *steps.last().expect("curve has points"));
    let shares = zipf_shares(SHARDS, 0.99);
    let base_capacity = SHARDS as f64 * base.capacity_per_second;
    let replicate = |step: &CurveStep, total: f64| -> u64 {
        shares
            .iter()
            .filter_map(|p| storage_by_replication(step, p * total))
            .sum()
    };
    let compare = |factors: &[f64]| {
        let mut ratios: [Vec<f64>; 3] = Default::default();
        let mut rows = Vec::new();
        for &factor in factors {
            let total = factor * base_capacity;
            let by_layers: u64 = shares
                .iter()
                .filter_map(|p| storage_by_layers(&steps, p * total))
                .sum();
            let by_base_copies = replicate(&base, total);
            let by_built_copies = replicate(&built, total);
            let best_static = steps
                .iter()
                .map(|step| replicate(step, total))
                .min()
                .unwrap_or(u64::MAX);
            let row_ratios = [by_base_copies, by_built_copies, best_static]
                .map(|bytes| bytes as f64 / by_layers as f64);
            println!(
                "{:>7.1} {:>12.0} {:>13} {:>13} {:>6.2} {:>13} {:>6.2} {:>13} {:>6.2}",
                factor,
                total,
                by_layers,
                by_base_copies,
                row_ratios[0],
                by_built_copies,
                row_ratios[1],
                best_static,
                row_ratios[2]
            );
            for (list, ratio) in ratios.iter_mut().zip(row_ratios) {
                list.push(round(ratio, 3));
            }
            rows.push(json!({
                "load_factor": factor,
                "total_ops_per_second": round(total, 0),
                "by_layers_bytes": by_layers,
                "by_replication_bytes": by_base_copies,
                "by_built_replication_bytes": by_built_copies,
                "by_best_static_replication_bytes": best_static,
            }));
        }
        (ratios, rows)
    };
    println!(
        "\nstorage (bytes) to serve a Zipf(0.99) load over {SHARDS} shards, from the measured curve;\n\
         load = total rate / ({SHARDS} x one base copy's {:.0} ops/s); ratios = replication / layers",
        base.capacity_per_second
    );
    println!(
        "{:>7} {:>12} {:>13} {:>13} {:>6} {:>13} {:>6} {:>13} {:>6}",
        "load",
        "total ops/s",
        "by layers",
        "base copies",
        "ratio",
        "built copies",
        "ratio",
        "best static",
        "ratio"
    );
    let (below, below_rows) = compare(&BELOW_RANGE_LOAD_FACTORS);
    println!("{:-^100}", " the range ");
    let (ratios, rows) = compare(&RANGE_LOAD_FACTORS);
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    summary["load_factors"] = json!(RANGE_LOAD_FACTORS);
    summary["storage_ratio_vs_replication"] = json!(ratios[0]);
    summary["storage_ratio_vs_replication_min"] = json!(min(&ratios[0]));
    summary["storage_ratio_vs_built_replication"] = json!(ratios[1]);
    summary["storage_ratio_vs_built_replication_min"] = json!(min(&ratios[1]));
    summary["storage_ratio_vs_best_static"] = json!(ratios[2]);
    summary["storage_ratio_vs_best_static_min"] = json!(min(&ratios[2]));
    summary["vs_replication"] = json!(rows);
    summary["below_range"] = json!({
        "load_factors": BELOW_RANGE_LOAD_FACTORS,
        "storage_ratio_vs_replication": below[0],
        "storage_ratio_vs_built_replication": below[1],
        "storage_ratio_vs_best_static": below[2],
        "rows": below_rows,
    });
}
