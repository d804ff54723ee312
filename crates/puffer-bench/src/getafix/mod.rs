//! `puffer-bench getafix`: Getafix's evaluation (section 5) on a simulated cluster at
//! the paper's scale, with the real policies and service times measured on the real
//! store.
//!
//! First one hour of wikiticker (Druid's own sample, a day of Wikipedia edits) is
//! loaded into a shard, the time chunk a time-partitioned table would make, and the
//! time of single equality searches on it is measured closed-loop at every layer count
//! (as `puffer-bench blowfish` does). Those times are the simulated nodes' service
//! times; the layer counts' footprints are the joint planner's memory.
//!
//! Then `sim` runs the cluster: 15 and 25 nodes, a history of segments plus one new
//! segment every five windows (the paper's 5-minute segments and 1-minute windows),
//! queries as the paper's synthetic workload (end "Latest", interval Zipfian) at rising
//! rates, given as the share of the cluster's capacity they use. Time is compressed:
//! a window holds `--queries-per-window` queries (the paper's 2,500 queries/s for a
//! minute is 150,000), the broker polls three times a window (20 s of 60) and a load
//! takes a twentieth of a window.
//!
//! Experiments, each a table, a CSV and a PNG under `--out-dir`, and one JSON line last:
//! - `scale` (Figures 10 and 16): Getafix, Scarlett and Getafix with random routing at
//!   each node count and rate: replicas (median and p99 over time), latency (mean, p99);
//! - `tradeoff` (Figure 12): at 15 nodes, uniform replication from factor 1 up, against
//!   Getafix and Scarlett, storage against mean latency;
//! - `same-storage` (Figure 13): uniform replication at the factor whose storage matches
//!   Getafix's (the paper's rule: Getafix's 75th percentile of replicas over segments);
//! - `shifting`: a share of the queries goes to an old segment that changes every ten
//!   windows;
//! - `joint`: Getafix with every segment at the one layer count that serves the load
//!   with the least memory (replicas alone) against the joint planner, at equal rates.

mod chart;
pub mod loopback;
pub mod sim;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use puffer_node::serving::NodeConfig;
use serde_json::json;

use crate::blowfish::workload::prepare;
use crate::blowfish::{measure_curve, Measured};
use crate::stats::round;
use sim::{mean, quantile, simulate, Policy, Routing, ServiceModel, Shape, SimConfig, SimOutcome};

#[derive(clap::Args)]
pub struct GetafixArgs {
    /// Druid's wikiticker sample (JSON lines, gzip).
    #[arg(
        long,
        default_value = "../shared/data/wikiticker-2015-09-12-sampled.json.gz"
    )]
    input: PathBuf,
    /// The hour of 2015-09-12 whose rows make the measured segment.
    #[arg(long, default_value_t = 12)]
    hour: u32,
    /// Seconds of closed-loop measurement per layer count.
    #[arg(long, default_value_t = 1.5)]
    calibrate_seconds: f64,
    /// Node counts simulated.
    #[arg(long, value_delimiter = ',', default_value = "15,25")]
    nodes: Vec<usize>,
    /// Query rates, as shares of the cluster's capacity at the stored layer count.
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.85")]
    loads: Vec<f64>,
    /// Segments present when a run starts (the history).
    #[arg(long, default_value_t = 96)]
    segments: usize,
    /// A new segment every this many windows (the paper's 5-minute segments and 1-minute
    /// windows); 0 for none (a batch workload).
    #[arg(long, default_value_t = 5)]
    new_segment_every: usize,
    /// Windows per run (the paper's 30 minutes of 1-minute windows).
    #[arg(long, default_value_t = 30)]
    windows: usize,
    /// Queries per window.
    #[arg(long, default_value_t = 20_000)]
    queries_per_window: usize,
    /// Zipf skew of a query's end, counted back from the newest segment.
    #[arg(long, default_value_t = 1.2)]
    recency_skew: f64,
    /// Zipf skew of a query's length in segments.
    #[arg(long, default_value_t = 1.0)]
    interval_skew: f64,
    /// Longest query, in segments.
    #[arg(long, default_value_t = 24)]
    max_interval: usize,
    /// Random seed (of the first run of each setting).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Runs per setting, each with its own seed; their queries and samples are pooled.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Where CSV and PNG files go.
    #[arg(long, default_value = "target/bench/getafix")]
    out_dir: PathBuf,
}

/// One run's figures; its samples sorted once, as every quantile reads them.
struct RunRow {
    experiment: &'static str,
    nodes: usize,
    load: f64,
    policy: String,
    outcome: SimOutcome,
    replicas_sorted: Vec<f64>,
    memory_sorted_bytes: Vec<f64>,
}

impl RunRow {
    fn new(
        experiment: &'static str,
        nodes: usize,
        load: f64,
        policy: String,
        mut outcome: SimOutcome,
    ) -> RunRow {
        let sorted = |values: Vec<f64>| {
            let mut values = values;
            values.sort_by(f64::total_cmp);
            values
        };
        outcome.latencies_seconds.sort_by(f64::total_cmp);
        RunRow {
            experiment,
            nodes,
            load,
            policy,
            replicas_sorted: sorted(outcome.replica_samples.iter().map(|&r| r as f64).collect()),
            memory_sorted_bytes: sorted(
                outcome
                    .memory_samples_bytes
                    .iter()
                    .map(|&b| b as f64)
                    .collect(),
            ),
            outcome,
        }
    }

    fn replicas(&self, q: f64) -> f64 {
        quantile(&self.replicas_sorted, q)
    }

    fn memory_bytes(&self, q: f64) -> f64 {
        quantile(&self.memory_sorted_bytes, q)
    }

    fn latency_ms(&self, q: Option<f64>) -> f64 {
        let latencies = &self.outcome.latencies_seconds;
        let seconds = match q {
            None => mean(latencies),
            Some(q) => quantile(latencies, q),
        };
        seconds * 1e3
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "experiment": self.experiment,
            "nodes": self.nodes,
            "load": self.load,
            "policy": self.policy,
            "replicas_median": self.replicas(0.5),
            "replicas_p99": self.replicas(0.99),
            "memory_median_bytes": self.memory_bytes(0.5),
            "latency_mean_ms": round(self.latency_ms(None), 4),
            "latency_p50_ms": round(self.latency_ms(Some(0.5)), 4),
            "latency_p99_ms": round(self.latency_ms(Some(0.99)), 4),
            "queries": self.outcome.latencies_seconds.len(),
            "segment_queries": self.outcome.segment_queries,
            "loads": self.outcome.loads,
            "drops": self.outcome.drops,
            "waited_for_load": self.outcome.waited_for_load,
        })
    }
}

pub fn run(args: &GetafixArgs) -> anyhow::Result<()> {
    ensure!(
        args.input.exists(),
        "input {} not found (the shared data folder is ../shared/data)",
        args.input.display()
    );
    ensure!(
        !args.nodes.is_empty() && args.nodes.iter().all(|&n| (2..=1024).contains(&n)),
        "--nodes takes node counts in 2..=1024"
    );
    ensure!(
        !args.loads.is_empty() && args.loads.iter().all(|&l| l > 0.0 && l < 1.0),
        "--loads takes shares of capacity in (0, 1)"
    );
    ensure!(
        args.segments >= 2 && args.windows >= 10,
        "--segments >= 2 and --windows >= 10"
    );
    ensure!(
        args.queries_per_window >= 1000,
        "--queries-per-window >= 1000"
    );
    ensure!((1..=100).contains(&args.seeds), "--seeds takes 1 to 100");
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;

    let partitioning = measure_partitioning(args)?;
    let service = measure_segment(args)?;
    let stored_step = service.layers_by_step.len() - 1;
    println!("\nservice time of one segment query (one hour of wikiticker, one thread):");
    println!(
        "{:>7} {:>16} {:>14} {:>14}",
        "layers", "footprint bytes", "mean us", "p99 us"
    );
    for step in 0..service.layers_by_step.len() {
        let mut sorted = service.samples_seconds_by_step[step].clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "{:>7} {:>16} {:>14.1} {:>14.1}",
            service.layers_by_step[step],
            service.footprint_bytes_by_step[step],
            service.mean_seconds(step) * 1e6,
            quantile(&sorted, 0.99) * 1e6
        );
    }

    let mut rows: Vec<RunRow> = Vec::new();
    let base = |nodes: usize, load: f64, policy: Policy| -> SimConfig {
        let mut config = SimConfig {
            nodes,
            initial_segments: args.segments,
            new_segment_every_windows: args.new_segment_every,
            windows: args.windows,
            warmup_windows: 5,
            window_seconds: 1.0,
            poll_seconds: 1.0 / 3.0,
            load_delay_seconds: 0.05,
            query_rate_per_second: 1.0,
            recency_skew: args.recency_skew,
            interval_skew: args.interval_skew,
            max_interval_segments: args.max_interval,
            shape: Shape::Latest,
            policy,
            default_step: stored_step,
            work_budget_per_node: load,
            node_capacity_bytes: 0,
            successor_prior: true,
            seed: args.seed,
        };
        // The rate that uses `load` of the nodes' time at the stored layer count; the
        // window is then as long as `queries_per_window` queries take to arrive.
        let per_query = sim::mean_segments_per_query(&config, args.segments)
            * service.mean_seconds(stored_step);
        let rate = load * nodes as f64 / per_query;
        let window = args.queries_per_window as f64 / rate;
        config.query_rate_per_second = rate;
        config.window_seconds = window;
        config.poll_seconds = window / 3.0;
        config.load_delay_seconds = window / 20.0;
        // Room for every segment three times over, spread evenly; GC starts at 80 %.
        let most_segments = (args.segments
            + args
                .windows
                .checked_div(args.new_segment_every)
                .unwrap_or(0)) as u64;
        config.node_capacity_bytes =
            3 * most_segments * service.footprint_bytes_by_step[stored_step] / nodes as u64 + 1;
        config
    };
    let run = |rows: &mut Vec<RunRow>, experiment: &'static str, config: SimConfig, load: f64| {
        run_one(
            rows,
            &args.out_dir,
            &service,
            experiment,
            config,
            load,
            args.seeds,
        )
    };

    // scale (Figures 10 and 16) and same-storage (Figure 13), streaming.
    let uniform_factor = |rows: &[RunRow], getafix: usize, nodes: usize, segments: f64| {
        ((rows[getafix].replicas(0.75) / segments).round() as usize).clamp(1, nodes)
    };
    let new_segments = args
        .windows
        .checked_div(args.new_segment_every)
        .unwrap_or(0);
    let mean_segments = args.segments as f64 + new_segments as f64 / 2.0;
    for &nodes in &args.nodes {
        for &load in &args.loads {
            let getafix = run(
                &mut rows,
                "scale",
                base(nodes, load, Policy::Getafix(Routing::PlanByQueue)),
                load,
            )?;
            let mut no_prior = base(nodes, load, Policy::Getafix(Routing::PlanByQueue));
            no_prior.successor_prior = false;
            run(&mut rows, "scale", no_prior, load)?;
            run(
                &mut rows,
                "scale",
                base(nodes, load, Policy::Getafix(Routing::Plan)),
                load,
            )?;
            run(
                &mut rows,
                "scale",
                base(nodes, load, Policy::Getafix(Routing::Random)),
                load,
            )?;
            run(
                &mut rows,
                "scale",
                base(nodes, load, Policy::Scarlett),
                load,
            )?;
            let factor = uniform_factor(&rows, getafix, nodes, mean_segments);
            run(
                &mut rows,
                "same-storage",
                base(nodes, load, Policy::Uniform(factor)),
                load,
            )?;
        }
    }
    // batch: the history only, no new segment (the paper's batch experiments).
    let (nodes, load) = (args.nodes[0], args.loads[args.loads.len() / 2]);
    let batch = |policy: Policy| SimConfig {
        new_segment_every_windows: 0,
        ..base(nodes, load, policy)
    };
    let getafix = run(
        &mut rows,
        "batch",
        batch(Policy::Getafix(Routing::PlanByQueue)),
        load,
    )?;
    run(
        &mut rows,
        "batch",
        batch(Policy::Getafix(Routing::Random)),
        load,
    )?;
    run(&mut rows, "batch", batch(Policy::Scarlett), load)?;
    let factor = uniform_factor(&rows, getafix, nodes, args.segments as f64);
    run(&mut rows, "batch", batch(Policy::Uniform(factor)), load)?;
    // tradeoff (Figure 12) at the first node count and the middle load.
    let mut previous_mean = f64::INFINITY;
    for factor in 1..=nodes {
        let at = run(
            &mut rows,
            "tradeoff",
            base(nodes, load, Policy::Uniform(factor)),
            load,
        )?;
        let mean_ms = rows[at].latency_ms(None);
        // Past the knee: one more replica of everything bought under 2 % of latency.
        if mean_ms > previous_mean * 0.98 && factor >= 3 {
            break;
        }
        previous_mean = mean_ms;
    }
    // shifting popularity.
    for policy in [
        Policy::Getafix(Routing::PlanByQueue),
        Policy::Scarlett,
        Policy::Getafix(Routing::Random),
    ] {
        let mut config = base(nodes, load, policy);
        config.shape = Shape::Shifting {
            share: 0.3,
            every_windows: 10,
        };
        run(&mut rows, "shifting", config, load)?;
    }
    // joint planner against replicas alone, at the same rate.
    for policy in [Policy::ReplicasAlone, Policy::Joint] {
        run(&mut rows, "joint", base(nodes, load, policy), load)?;
    }

    print_table(&rows);
    let mut summary = summarize(&rows, &service, args);
    summary["time_partitioned"] = partitioning;
    write_summary_csv(&args.out_dir, &rows)?;
    chart::draw_all(&args.out_dir, &rows_for_chart(&rows))?;
    println!("\nCSV and PNG in {}", args.out_dir.display());
    println!("{summary}");
    Ok(())
}

fn run_one(
    rows: &mut Vec<RunRow>,
    out_dir: &Path,
    service: &ServiceModel,
    experiment: &'static str,
    config: SimConfig,
    load: f64,
    seeds: u64,
) -> anyhow::Result<usize> {
    let mut outcome = simulate(&config, service)?;
    for more in 1..seeds {
        let next = simulate(
            &SimConfig {
                seed: config
                    .seed
                    .wrapping_add(more.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                ..config.clone()
            },
            service,
        )?;
        outcome.pool(next);
    }
    let mut policy = config.policy.label();
    if config.policy.is_getafix() && !config.successor_prior {
        policy.push_str("-no-prior");
    }
    let row = RunRow::new(experiment, config.nodes, load, policy, outcome);
    write_series(out_dir, &row)?;
    rows.push(row);
    Ok(rows.len() - 1)
}

/// The whole of wikiticker loaded into a plain table and into one partitioned by hour,
/// alternately in rounds; then counts over random one-hour windows on both, alternated,
/// every answer compared: a time condition reads only the chunk it overlaps.
fn measure_partitioning(args: &GetafixArgs) -> anyhow::Result<serde_json::Value> {
    use puffer_node::{Database, DatabaseOptions, ReadAnswer, ReadRequest, TableLayout, Wait};
    use puffer_store::{Predicate, ReadOptions, Value, WriteOp};
    use std::ops::Bound;
    use std::time::Instant;

    let table = puffer_query::import::read_table(
        std::slice::from_ref(&args.input),
        puffer_query::import::KeySource::RowNumber,
    )
    .map_err(|e| anyhow::anyhow!("reading {}: {}", args.input.display(), e.message()))?;
    let attribute = "time";
    ensure!(
        table
            .schema
            .attributes
            .iter()
            .any(|a| a.name == attribute && a.attr_type == puffer_store::AttrType::Timestamp),
        "{} has no timestamp attribute {attribute:?}",
        args.input.display()
    );
    let work = tempfile::tempdir()?;
    let db = Database::open_with(work.path(), DatabaseOptions::default())?;
    let layout = TableLayout {
        shards: 1,
        replicas: 1,
    };
    db.create_table_partitioned("plain", table.schema.clone(), layout, None)?;
    let partition = puffer_query::TimePartition {
        attribute: attribute.into(),
        granularity: puffer_query::Granularity::Hour,
    };
    db.create_table_partitioned("hourly", table.schema.clone(), layout, Some(partition))?;
    let mut load_seconds = [0.0f64; 2];
    for rows in (0..table.len()).collect::<Vec<_>>().chunks(2000) {
        for (side, name) in ["plain", "hourly"].iter().enumerate() {
            let ops = rows
                .iter()
                .map(|&r| WriteOp::Put(table.record(r)))
                .collect();
            let started = Instant::now();
            db.write_batch(vec![(name.to_string(), ops)])?;
            load_seconds[side] += started.elapsed().as_secs_f64();
        }
    }
    for name in ["plain", "hourly"] {
        db.table(name)?.compact_all()?;
    }
    for (_, chunk) in db.chunks_of("hourly") {
        chunk.compact_all()?;
    }
    let chunks = db.chunks_of("hourly").len();
    let day = puffer_store::timestamp::parse_timestamp_micros("2015-09-12").expect("a date");
    let hour = 3_600_000_000i64;
    // Two kinds of count over a random hour: the time range alone (the plain table's
    // index answers a range directly), and the range with a substring of the comment
    // (the plain table searches every record's comment, the chunk only its own).
    let kinds = ["range", "range_and_contains"];
    let mut micros = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut mismatches = 0u64;
    let mut state = args.seed | 1;
    for _ in 0..200 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let lo = day + (state % (23 * 60)) as i64 * 60_000_000;
        let range = Predicate::Range {
            attribute: attribute.into(),
            lower: Bound::Included(Value::Timestamp(lo)),
            upper: Bound::Excluded(Value::Timestamp(lo + hour)),
        };
        let predicates = [
            range.clone(),
            Predicate::And(vec![
                range,
                Predicate::Contains("comment".into(), b"the".to_vec()),
            ]),
        ];
        for (kind, predicate) in predicates.into_iter().enumerate() {
            let request = ReadRequest::Count {
                predicate,
                read: ReadOptions::default(),
            };
            let mut counts = [0u64; 2];
            for (side, name) in ["plain", "hourly"].iter().enumerate() {
                let started = Instant::now();
                let answer = db.read(name, &request, Wait::Allowed)?;
                micros[kind][side].push(started.elapsed().as_secs_f64() * 1e6);
                if let Some(ReadAnswer::Count { count, .. }) = answer {
                    counts[side] = count;
                }
            }
            mismatches += u64::from(counts[0] != counts[1]);
        }
    }
    ensure!(
        mismatches == 0,
        "{mismatches} counts differ between the plain and the partitioned table"
    );
    for kind in &mut micros {
        for side in kind.iter_mut() {
            side.sort_by(f64::total_cmp);
        }
    }
    let rows = table.len() as f64;
    println!(
        "\ntime-partitioned table ({} rows of {}, {chunks} hour chunks): load {:.0} rows/s plain, {:.0} partitioned",
        table.len(),
        args.input.display(),
        rows / load_seconds[0],
        rows / load_seconds[1],
    );
    let mut counts_json = serde_json::Map::new();
    for (kind, name) in kinds.iter().enumerate() {
        let [plain, partitioned] = &micros[kind];
        println!(
            "  count over one hour, {name}: p50 {:.0} us plain, {:.0} us partitioned (p99 {:.0} / {:.0}); 200, all equal",
            quantile(plain, 0.5),
            quantile(partitioned, 0.5),
            quantile(plain, 0.99),
            quantile(partitioned, 0.99),
        );
        counts_json.insert(
            name.to_string(),
            json!({
                "p50_us_plain": round(quantile(plain, 0.5), 1),
                "p50_us_partitioned": round(quantile(partitioned, 0.5), 1),
                "p99_us_plain": round(quantile(plain, 0.99), 1),
                "p99_us_partitioned": round(quantile(partitioned, 0.99), 1),
            }),
        );
    }
    Ok(json!({
        "rows": table.len(),
        "chunks": chunks,
        "load_rows_per_second_plain": round(rows / load_seconds[0], 0),
        "load_rows_per_second_partitioned": round(rows / load_seconds[1], 0),
        "counts_over_one_hour": counts_json,
    }))
}

/// Loads the hour's rows into a shard and measures a segment query at each layer count.
fn measure_segment(args: &GetafixArgs) -> anyhow::Result<ServiceModel> {
    let work = tempfile::tempdir()?;
    let hour_file = work.path().join("hour.json");
    let prefix = format!("2015-09-12T{:02}", args.hour);
    let rows = {
        let input = std::fs::File::open(&args.input)
            .with_context(|| format!("opening {}", args.input.display()))?;
        let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(input));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&hour_file)?);
        let mut rows = 0usize;
        for line in reader.lines() {
            let line = line.with_context(|| format!("reading {}", args.input.display()))?;
            let row: serde_json::Value = serde_json::from_str(&line)
                .with_context(|| format!("a line of {} is not JSON", args.input.display()))?;
            if row["time"].as_str().is_some_and(|t| t.starts_with(&prefix)) {
                writeln!(out, "{line}")?;
                rows += 1;
            }
        }
        out.flush()?;
        rows
    };
    ensure!(
        rows >= 100,
        "hour {} of {} has only {rows} rows",
        args.hour,
        args.input.display()
    );
    let workload = prepare(&hour_file, work.path(), args.seed)?;
    println!(
        "segment: {} rows of {} ({prefix}h), {} search terms",
        workload.rows,
        args.input.display(),
        workload.terms.len()
    );
    let curve: Vec<Measured> = measure_curve(
        NodeConfig::default(),
        &workload,
        work.path(),
        args.calibrate_seconds,
        0.99,
        args.seed,
    )?;
    Ok(ServiceModel {
        samples_seconds_by_step: curve.iter().map(|m| m.samples_seconds.clone()).collect(),
        footprint_bytes_by_step: curve.iter().map(|m| m.footprint_bytes).collect(),
        layers_by_step: curve.iter().map(|m| m.layers).collect(),
    })
}

fn print_table(rows: &[RunRow]) {
    println!(
        "\n{:<13} {:>5} {:>5} {:<24} {:>9} {:>9} {:>12} {:>10} {:>10}",
        "experiment",
        "nodes",
        "load",
        "policy",
        "repl p50",
        "repl p99",
        "memory p50",
        "mean ms",
        "p99 ms"
    );
    for row in rows {
        println!(
            "{:<13} {:>5} {:>5} {:<24} {:>9} {:>9} {:>12} {:>10.3} {:>10.3}",
            row.experiment,
            row.nodes,
            row.load,
            row.policy,
            row.replicas(0.5),
            row.replicas(0.99),
            row.memory_bytes(0.5),
            row.latency_ms(None),
            row.latency_ms(Some(0.99)),
        );
    }
}

fn find<'a>(
    rows: &'a [RunRow],
    experiment: &str,
    nodes: usize,
    load: f64,
    policy: &str,
) -> Option<&'a RunRow> {
    rows.iter().find(|r| {
        r.experiment == experiment && r.nodes == nodes && r.load == load && r.policy == policy
    })
}

/// The targets' figures: per node count and load, Getafix against each baseline.
fn summarize(rows: &[RunRow], service: &ServiceModel, args: &GetafixArgs) -> serde_json::Value {
    println!(
        "\n{:>9} {:>5} {:>5} {:>22} {:>22} {:>22} {:>22}",
        "run",
        "nodes",
        "load",
        "storage x vs scarlett",
        "mean lat vs scarlett",
        "median lat vs uniform",
        "p99 plan vs random"
    );
    let mut comparisons = Vec::new();
    let mut cases: Vec<(&str, &str, usize, f64)> = Vec::new();
    for &nodes in &args.nodes {
        for &load in &args.loads {
            cases.push(("scale", "same-storage", nodes, load));
        }
    }
    cases.push((
        "batch",
        "batch",
        args.nodes[0],
        args.loads[args.loads.len() / 2],
    ));
    for (experiment, uniform_experiment, nodes, load) in cases {
        let (Some(getafix), Some(scarlett), Some(random)) = (
            find(rows, experiment, nodes, load, "getafix"),
            find(rows, experiment, nodes, load, "scarlett"),
            find(rows, experiment, nodes, load, "getafix-random"),
        ) else {
            continue;
        };
        let uniform = rows.iter().find(|r| {
            r.experiment == uniform_experiment
                && r.nodes == nodes
                && r.load == load
                && r.policy.starts_with("uniform")
        });
        let storage_ratio = scarlett.replicas(0.5) / getafix.replicas(0.5);
        let storage_ratio_p99 = scarlett.replicas(0.99) / getafix.replicas(0.99);
        let mean_vs_scarlett = getafix.latency_ms(None) / scarlett.latency_ms(None) - 1.0;
        let median_vs_uniform =
            uniform.map(|u| 1.0 - getafix.latency_ms(Some(0.5)) / u.latency_ms(Some(0.5)));
        let p99_vs_random = 1.0 - getafix.latency_ms(Some(0.99)) / random.latency_ms(Some(0.99));
        println!(
            "{:>9} {:>5} {:>5} {:>22.2} {:>21.1}% {:>21} {:>21.1}%",
            experiment,
            nodes,
            load,
            storage_ratio,
            100.0 * mean_vs_scarlett,
            median_vs_uniform.map_or("-".into(), |v| format!("{:.1}% lower", 100.0 * v)),
            100.0 * p99_vs_random
        );
        comparisons.push(json!({
            "experiment": experiment,
            "nodes": nodes,
            "load": load,
            "storage_median_scarlett_over_getafix": round(storage_ratio, 3),
            "storage_p99_scarlett_over_getafix": round(storage_ratio_p99, 3),
            "mean_latency_getafix_vs_scarlett": round(mean_vs_scarlett, 4),
            "uniform_factor_same_storage": uniform.map(|u| u.policy.clone()),
            "uniform_replicas_median": uniform.map(|u| u.replicas(0.5)),
            "getafix_replicas_median": getafix.replicas(0.5),
            "median_latency_lower_than_uniform": median_vs_uniform.map(|v| round(v, 4)),
            "p99_latency_lower_than_random_routing": round(p99_vs_random, 4),
        }));
    }
    let joint = match (
        rows.iter()
            .find(|r| r.experiment == "joint" && r.policy == "getafix-replicas-alone"),
        rows.iter()
            .find(|r| r.experiment == "joint" && r.policy == "getafix-joint"),
    ) {
        (Some(alone), Some(joint)) => {
            let saved = 1.0 - joint.memory_bytes(0.5) / alone.memory_bytes(0.5);
            println!(
                "\njoint planner: median memory {:.0} bytes against {:.0} by replicas alone ({:.1}% less); mean latency {:.3} ms against {:.3} ms",
                joint.memory_bytes(0.5),
                alone.memory_bytes(0.5),
                100.0 * saved,
                joint.latency_ms(None),
                alone.latency_ms(None)
            );
            json!({
                "memory_median_bytes_joint": joint.memory_bytes(0.5),
                "memory_median_bytes_replicas_alone": alone.memory_bytes(0.5),
                "memory_saved": round(saved, 4),
                "latency_mean_ms_joint": round(joint.latency_ms(None), 4),
                "latency_mean_ms_replicas_alone": round(alone.latency_ms(None), 4),
            })
        }
        _ => serde_json::Value::Null,
    };
    json!({
        "experiment": "getafix",
        "input": args.input.display().to_string(),
        "segment_hour": args.hour,
        "service": (0..service.layers_by_step.len()).map(|s| json!({
            "layers": service.layers_by_step[s],
            "footprint_bytes": service.footprint_bytes_by_step[s],
            "mean_us": round(service.mean_seconds(s) * 1e6, 2),
        })).collect::<Vec<_>>(),
        "queries_per_window": args.queries_per_window,
        "comparisons": comparisons,
        "joint": joint,
        "runs": rows.iter().map(RunRow::json).collect::<Vec<_>>(),
    })
}

fn write_series(dir: &Path, row: &RunRow) -> anyhow::Result<()> {
    let path = dir.join(format!(
        "series-{}-{}n-{}-{}.csv",
        row.experiment, row.nodes, row.load, row.policy
    ));
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        out,
        "window_end_seconds,replicas,latency_mean_ms,latency_p99_ms"
    )?;
    for &(end, replicas, mean_s, p99_s) in &row.outcome.series {
        writeln!(
            out,
            "{end:.6},{replicas},{:.4},{:.4}",
            mean_s * 1e3,
            p99_s * 1e3
        )?;
    }
    out.flush()?;
    Ok(())
}

fn write_summary_csv(dir: &Path, rows: &[RunRow]) -> anyhow::Result<()> {
    let path = dir.join("runs.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    writeln!(
        out,
        "experiment,nodes,load,policy,replicas_median,replicas_p99,memory_median_bytes,latency_mean_ms,latency_p50_ms,latency_p99_ms"
    )?;
    for row in rows {
        writeln!(
            out,
            "{},{},{},{},{},{},{},{:.4},{:.4},{:.4}",
            row.experiment,
            row.nodes,
            row.load,
            row.policy,
            row.replicas(0.5),
            row.replicas(0.99),
            row.memory_bytes(0.5),
            row.latency_ms(None),
            row.latency_ms(Some(0.5)),
            row.latency_ms(Some(0.99)),
        )?;
    }
    out.flush()?;
    Ok(())
}

/// What the charts draw, one entry per run.
fn rows_for_chart(rows: &[RunRow]) -> Vec<chart::Point> {
    rows.iter()
        .map(|r| chart::Point {
            experiment: r.experiment,
            nodes: r.nodes,
            load: r.load,
            policy: r.policy.clone(),
            replicas_median: r.replicas(0.5),
            replicas_p99: r.replicas(0.99),
            latency_mean_ms: r.latency_ms(None),
            latency_p99_ms: r.latency_ms(Some(0.99)),
            series: r.outcome.series.clone(),
        })
        .collect()
}
