//! `puffer-bench hyperspace`: the evaluation of "Optimizing Hyperspace Hashing via
//! Analytical Modelling and Adaptation" on the Inside Airbnb listings, embedded (one
//! node, the database in this process) or, with `--cluster`, on a loopback cluster
//! ([`cluster`]: an ingest leader, data nodes and a node without data that the clients
//! use, every one in this process over loopback TCP; calibrated on it, files in
//! `<out>/cluster/`).
//!
//! 1. **Calibration** (`--calibrate`, or when `calibration.json` is missing): `T_max` and
//!    an update's fixed cost from updates on the key subspace alone and with one to three
//!    subspaces left in place, `α` from update runs that move copies in some subspaces
//!    and leave others (equation 5, inverted exactly), `β` and the cost of a
//!    region from search runs asking different numbers of regions and reading different
//!    numbers of rows (equation 2 inverted, the rows estimated as the configurator
//!    estimates them). Written to
//!    `<out>/calibration.json` and given to the database.
//! 2. **Model accuracy** (Table 2, Figure 6): for each of workloads A, B, C at 90/10, 50/50
//!    and 10/90 searches to updates, the model's 5 best candidates and 5 others at random,
//!    each built and measured: the mean absolute error of predicted against measured
//!    throughput, and Kendall's tau of the two rankings. With `--interleave`, the
//!    calibration's runs are measured again with each workload, in the same rounds and
//!    one random order with its configurations, and the workload is predicted with the
//!    parameters fitted on them.
//! 3. **Oracles** (Figures 8 and 9): the configuration the database's own configurator
//!    picks from the profile of the operations it served, against the paper's heuristics
//!    (no subspace, hyperspace, subspaces-all, dominant), each measured.
//! 4. **Adaptation**: workload C running, then B, from the key subspace alone, the
//!    configurator running every 2 s: when it switched, and the throughput before and
//!    after.
//!
//! CSV files go to `<out>/`; one JSON object is printed last.

mod blend;
mod calibration;
mod chart;
mod cluster;
mod confirm;
mod cpu;
pub mod data;
mod decompose;
mod listings;
mod noise;
mod repredict;
mod rows;
mod speed;
pub mod workload;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use puffer_adapt::hyperspace::{
    self as model, candidate_configurations, rank_configurations, route_search, AnalyserConfig,
    Calibration, Configuration, Deployment, WorkloadProfile,
};
use puffer_node::hyperspace::{HyperspaceOptions, MeasuredCalibration};
use puffer_node::serving::NodeConfig;
use puffer_node::{Database, DatabaseOptions, TableLayout};
use puffer_store::WriteOp;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::json;

use crate::stats::round;
use workload::{
    kendall_tau, label, median, profile, run_series, workloads, Mix, Operations, Workload, MIXES,
    PAGE_ROWS, TABLE, UPDATED,
};

#[derive(clap::Args, Clone)]
pub struct HyperspaceArgs {
    /// Inside Airbnb listings files (`<city>-listings.csv.gz`).
    #[arg(long, num_args = 1.., default_values = [
        "../shared/data/airbnb/antwerp-listings.csv.gz",
        "../shared/data/airbnb/boston-listings.csv.gz",
        "../shared/data/airbnb/dublin-listings.csv.gz",
        "../shared/data/airbnb/edinburgh-listings.csv.gz",
        "../shared/data/airbnb/hongkong-listings.csv.gz",
    ])]
    inputs: Vec<PathBuf>,
    /// Measure the model's parameters again (else read `<out>/calibration.json` if it is
    /// there), then go on with the experiments.
    #[arg(long)]
    calibrate: bool,
    /// Only calibrate.
    #[arg(long)]
    calibrate_only: bool,
    /// Measure nothing: fit the parameters again, with this build's model, on the runs
    /// `<out>/calibration.json` holds (written back, the earlier parameters kept
    /// beside them), then predict again every configuration `<out>/model_accuracy.csv`
    /// and `<out>/oracles.csv` hold, against the throughput measured there. A workload
    /// with a `<out>/calibration-<W>.json` (an `--interleave` run) is fitted on that
    /// file's runs and predicted with them.
    #[arg(long, conflicts_with_all = ["calibrate", "calibrate_only"])]
    refit: bool,
    /// Client threads (closed loop).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Seconds measured per configuration (whole seconds; the throughput is the median
    /// second's).
    #[arg(long, default_value_t = 7.0)]
    seconds: f64,
    /// Seconds run before measuring (after a configuration is built).
    #[arg(long, default_value_t = 1.0)]
    warm_seconds: f64,
    /// Regions of every subspace.
    #[arg(long, default_value_t = 16)]
    regions: u32,
    /// Shards of the table itself (the key subspace's regions).
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Configurations sampled per workload: the model's best this many, and as many
    /// others at random.
    #[arg(long, default_value_t = 5)]
    sample: usize,
    /// Times each configuration of a workload is measured (1..=9), in a new random
    /// order each round after the first; its throughput is the median of its rounds.
    /// One run per configuration cannot tell apart configurations a few per cent apart
    /// on a shared machine: the same one measured up to a third apart between runs.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Rounds (0..=9; 0: none) in which the configurator's choice and its contenders
    /// (the configurations measured at 95 % of it or above, the heuristics at 90 % or
    /// above) are measured again after a workload's rounds, a new random order each
    /// round, each compared with the choice by the median of their ratios within a
    /// round: the oracles' verdicts without the bias of the best of many noisy medians
    /// (`<out>/confirmation.csv`).
    #[arg(long, default_value_t = 5)]
    confirm_rounds: usize,
    /// Measure the calibration's runs again with each workload (A, B, C): in every
    /// round, in one random order with the configurations of its three mixes, and
    /// predict them with the parameters fitted on those runs
    /// (`<out>/calibration-<W>.json`). The calibration before (`calibration.json`)
    /// then picks which configurations are measured and is the configurator's. On a
    /// shared machine the same run measured a third apart an hour later: parameters
    /// fitted in one hour and configurations measured in the next differ by that much.
    #[arg(long, conflicts_with_all = ["refit", "diagnose", "diagnose_mix", "decompose", "calibrate_only"])]
    interleave: bool,
    /// Only measure searches of each class alone in a set of configurations, against
    /// the model's search cost (`<out>/search_runs.csv`): where the model's error is.
    #[arg(long)]
    diagnose: bool,
    /// Only measure a few search classes mixed with updates at several shares, to see
    /// what a search costs while records are being written (`<out>/mix_runs.csv`).
    #[arg(long)]
    diagnose_mix: bool,
    /// Only run again every configuration of `<out>/model_accuracy.csv` under its
    /// workload, each operation timed by kind, against the model's cost of each kind
    /// (`<out>/decompose.csv`): which kinds the prediction's miss is in. Predicted with
    /// `<out>/calibration-<W>.json` where an `--interleave` run left one.
    #[arg(long, conflicts_with_all = ["refit", "diagnose", "diagnose_mix", "calibrate_only"])]
    decompose: bool,
    /// Only measure every class of workload C alone and several blends of them, on
    /// one configuration at one share of updates, in `--rounds` rounds of a new random
    /// order each (`<out>/blend.csv`): whether classes cost more mixed than the sum of
    /// their parts, which a calibration of one class at a time cannot see. The
    /// calibration's runs are measured in the same rounds and fitted
    /// (`<out>/calibration-blend.json`) to predict every class and blend.
    #[arg(long, conflicts_with_all = ["refit", "diagnose", "diagnose_mix", "decompose", "interleave", "calibrate", "calibrate_only", "rows"])]
    diagnose_blend: bool,
    /// Only measure one configuration ((locality) (region)) under B-BAL again and again:
    /// built once with the same operations, with new operations, built again before
    /// each run, and searches alone (`<out>/noise.csv`): which of these the spread
    /// between runs of one configuration comes from.
    #[arg(long, conflicts_with_all = ["refit", "diagnose", "diagnose_mix", "decompose", "interleave", "calibrate", "calibrate_only", "rows", "diagnose_blend"])]
    diagnose_noise: bool,
    /// Only count, in memory, the rows each search class reads in every configuration
    /// of `<out>/model_accuracy.csv` (each region reading its fewest constraint's rows),
    /// against the rows the model charges (`<out>/rows.csv`). Nothing is timed.
    #[arg(long, conflicts_with_all = ["refit", "diagnose", "diagnose_mix", "decompose", "interleave", "calibrate", "calibrate_only"])]
    rows: bool,
    /// Only these workloads (of A, B, C), each at every mix.
    #[arg(long, value_delimiter = ',', default_values = ["A", "B", "C"])]
    workloads: Vec<String>,
    /// Bytes of each replica's record cache (0: off, the default). The experiment
    /// measures what subspaces buy; a cache's hit rate depends on how many distinct
    /// pages the mix of classes asks for, which a calibration of one class at a time
    /// cannot see (a locality's page alone ran over three times as fast with it).
    #[arg(long, default_value_t = 0)]
    record_cache_bytes: u64,
    /// Report every run's throughput at one reference speed of the machine: multiplied
    /// by how much slower than at the start a probe thread's fixed work ran over the
    /// run's seconds (see `speed.rs`; both figures are in `<out>/runs.csv` either way).
    /// On a shared machine the same CPU second does more or less work from minute to
    /// minute; this takes that out of comparisons between runs measured apart.
    #[arg(long)]
    speed_normalise: bool,
    /// Skip the adaptation run.
    #[arg(long)]
    skip_adaptation: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run on a loopback cluster (etcd, an ingest leader, data nodes and a node
    /// without data, in this process) instead of one embedded node.
    #[arg(long)]
    cluster: bool,
    /// Data nodes of the loopback cluster.
    #[arg(long, default_value_t = 2)]
    data_nodes: usize,
    /// Where the database lives while the experiment runs (a temporary directory made
    /// in it, removed after); the system's temporary directory when not given. On a
    /// memory file system (`/dev/shm`) the log's fsyncs cost nothing: updates are then
    /// bound by the work the model counts (copies written, moved, compacted), not by a
    /// disk that other tenants of the machine share.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where the CSV files and the charts (PNG) go.
    #[arg(long, default_value = "target/bench/hyperspace")]
    out_dir: PathBuf,
}

/// Most rounds a configuration is measured in (`--rounds`): nine make a run of all
/// workloads last most of a working day.
const MAX_ROUNDS: usize = 9;

/// Seconds of the profiler's window in the experiment (the operations of one
/// configuration's run, not those before it).
const WINDOW_SECONDS: u32 = 5;

/// Subspaces as the database takes them.
type Subspaces = Vec<(Vec<String>, u32)>;

fn subspaces_of(configuration: &Configuration) -> Subspaces {
    configuration
        .subspaces()
        .iter()
        .map(|s| {
            let names = s
                .attributes()
                .iter()
                .map(|&id| data::ATTRIBUTES[usize::from(id)].0.to_string())
                .collect();
            (names, s.regions())
        })
        .collect()
}

struct Bench {
    args: HyperspaceArgs,
    /// Where the clients' operations go: the one node, or the cluster's front node.
    db: Arc<Database>,
    /// The loopback cluster, with `--cluster`.
    cluster: Option<cluster::Loopback>,
    /// The listings, as the table holds them now (see [`listings`]).
    listings: Arc<listings::Listings>,
    /// The listings as loaded (what the table holds before any run; `--rows` counts on
    /// them).
    records: Arc<Vec<puffer_store::Record>>,
    /// How the loaded listings' hashed attributes spread (the regions the calibration
    /// runs' updates write).
    value_spreads:
        BTreeMap<puffer_adapt::hyperspace::AttributeId, puffer_adapt::hyperspace::ValueSpread>,
    /// The machine's speed, measured beside every run.
    speed: speed::SpeedProbe,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn deployment(&self) -> Deployment {
        Deployment {
            subspace_regions: self.args.regions,
            key_regions: self.args.shards,
            replicas: 1,
        }
    }

    /// Where the configurator decides: the one node, or the cluster's ingest leader.
    fn decider(&self) -> &Database {
        self.cluster.as_ref().map_or(&*self.db, |c| &*c.leader)
    }

    /// Every database holding the table's records.
    fn holders(&self) -> Vec<&Database> {
        self.cluster
            .as_ref()
            .map_or_else(|| vec![&*self.db], cluster::Loopback::holders)
    }

    /// On a cluster, waits until every node has what the leader published.
    fn settle(&self) -> anyhow::Result<()> {
        self.cluster
            .as_ref()
            .map_or(Ok(()), cluster::Loopback::settle)
    }

    /// Gives the table `subspaces`, every copy compacted into segments (the steady
    /// state a configuration runs in, not the log tables a build leaves) on every
    /// node holding it.
    fn configure(&self, subspaces: &Subspaces) -> anyhow::Result<f64> {
        let started = Instant::now();
        self.db
            .set_subspaces(TABLE, subspaces)
            .with_context(|| format!("configure {}", label(subspaces)))?;
        self.settle()?;
        for db in self.holders() {
            db.table(TABLE)?.compact_all()?;
            for subspace in db.describe_subspaces(TABLE) {
                db.table(&subspace.name)?.compact_all()?;
            }
        }
        Ok(started.elapsed().as_secs_f64())
    }

    /// One configurator pass, as the database's owner runs it: on a cluster, the
    /// front node sends the searches it served to the leader, which decides.
    fn tune(&self) -> anyhow::Result<()> {
        if self.cluster.is_some() {
            self.db.tune_tables();
        }
        self.decider().tune_table(TABLE)?;
        self.settle()
    }

    /// [`Bench::measure`], with what each kind of operation took (see
    /// [`workload::measure_kinds`]).
    fn measure_kinds(
        &self,
        operations: Operations,
        seed: u64,
    ) -> anyhow::Result<workload::KindRun> {
        workload::measure_kinds(
            &self.db,
            &Arc::new(operations),
            self.args.clients,
            self.args.warm_seconds,
            self.args.seconds,
            seed,
        )
    }

    /// Operations per second of `operations` on the current configuration: the median
    /// second of a run (see [`workload::measure_kinds`]).
    /// Prints what the process's threads spent meanwhile (see [`cpu`]); `what` names
    /// the run in `<out>/runs.csv`.
    fn measure(&self, what: &str, operations: Operations, seed: u64) -> anyhow::Result<f64> {
        Ok(self.measure_with_cpu(what, operations, seed)?.0)
    }

    /// [`Bench::measure`], with the CPU the process's threads spent meanwhile, per
    /// second of the run (`None` where `/proc` cannot be read). The run is added to
    /// `<out>/runs.csv`.
    fn measure_with_cpu(
        &self,
        what: &str,
        operations: Operations,
        seed: u64,
    ) -> anyhow::Result<(f64, Option<cpu::CpuRates>)> {
        let before = cpu::ThreadCpu::sample();
        let refused_before = workload::REFUSED_WRITES.load(Ordering::Relaxed);
        let waits_before = self.cluster.as_ref().map(cluster::Loopback::snapshot_waits);
        let started = Instant::now();
        let mut run = self.measure_kinds(operations, seed)?;
        let seconds = started.elapsed().as_secs_f64();
        let measured_from = started + Duration::from_secs_f64(self.args.warm_seconds.max(0.0));
        let slowdown = self.speed.slowdown(measured_from, Instant::now());
        let raw_ops_per_s = run.ops_per_s;
        if self.args.speed_normalise {
            let slowdown = slowdown.with_context(|| {
                format!("{what}: the speed probe took too few samples over the run")
            })?;
            run.ops_per_s *= slowdown;
            eprintln!(
                "  machine {slowdown:.3} times as slow as at the start: {raw_ops_per_s:.0} ops/s measured, {:.0} reported",
                run.ops_per_s
            );
        }
        let rates = match (before, cpu::ThreadCpu::sample()) {
            (Some(before), Some(after)) => Some(cpu::CpuRates::of(&after.since(&before), seconds)),
            _ => None,
        };
        let refused = workload::REFUSED_WRITES.load(Ordering::Relaxed) - refused_before;
        let stages = stage_counts(self)?;
        if let Some(rates) = &rates {
            eprintln!(
                "  {rates}; writes refused as overloaded {:.0}/s",
                refused as f64 / seconds.max(f64::MIN_POSITIVE)
            );
        }
        let measured = Measured {
            run: &run,
            raw_ops_per_s,
            slowdown,
        };
        if let (Some(cluster), Some(before)) = (&self.cluster, waits_before) {
            let waits = cluster.snapshot_waits().since(&before);
            // Where a run is slow for no CPU it spent: reads waiting on replication.
            eprintln!(
                "  fan-outs waiting for the front's own writes: {} of {} ({:.1} %), {:.2} ms each, {:.3} s/s",
                waits.waited,
                waits.fan_outs,
                100.0 * waits.waited as f64 / waits.fan_outs.max(1) as f64,
                1e3 * waits.waited_s / waits.waited.max(1) as f64,
                waits.waited_s / seconds.max(f64::MIN_POSITIVE),
            );
        }
        self.log_run(what, seed, &measured, rates.as_ref(), stages)?;
        Ok((run.ops_per_s, rates))
    }

    /// Adds a run to `<out>/runs.csv` (see [`run_row`]; written at once: a run that
    /// stops part way keeps every run before). A file left by an earlier build with other
    /// columns is moved aside first rather than appended to under the wrong header.
    fn log_run(
        &self,
        what: &str,
        seed: u64,
        measured: &Measured,
        rates: Option<&cpu::CpuRates>,
        stages: Stages,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.args.out_dir.join("runs.csv");
        let header = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_string));
        if header.as_deref().is_some_and(|h| h != RUNS_HEADER) {
            let aside = self.args.out_dir.join(format!("runs-{}.csv", unix_ms()));
            std::fs::rename(&path, &aside)
                .with_context(|| format!("move {} aside", path.display()))?;
            eprintln!(
                "{} had other columns; moved to {}",
                path.display(),
                aside.display()
            );
        }
        let new = header.as_deref() != Some(RUNS_HEADER);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        if new {
            writeln!(file, "{RUNS_HEADER}")?;
        }
        let cpu_s_per_s = rates.map(|r| r.all);
        writeln!(
            file,
            "{}",
            run_row(unix_ms(), what, seed, measured, cpu_s_per_s, stages)
        )?;
        Ok(())
    }

    /// `profile` with the rows its searches find, estimated as the configurator does
    /// (from a sample of the table), each asking for a page of [`PAGE_ROWS`].
    fn with_rows(&self, mut profile: WorkloadProfile) -> anyhow::Result<WorkloadProfile> {
        self.db
            .estimate_search_rows(TABLE, &mut profile, &|_| Some(PAGE_ROWS as u64))?;
        Ok(profile)
    }

    fn operations(
        &self,
        workload: &Workload,
        mix: Mix,
        updated: &[&'static str],
    ) -> anyhow::Result<Operations> {
        Operations::new(self.listings.clone(), workload, mix, updated)
    }
}

pub fn run(args: &HyperspaceArgs) -> anyhow::Result<()> {
    for input in &args.inputs {
        if !input.exists() {
            anyhow::bail!(
                "{} is missing (the Inside Airbnb listings of ../shared/data/airbnb)",
                input.display()
            );
        }
    }
    for name in &args.workloads {
        if !workloads().iter().any(|w| w.name == name) {
            anyhow::bail!("--workloads: {name:?} is not one of A, B, C");
        }
    }
    if !(1..=MAX_ROUNDS).contains(&args.rounds) {
        anyhow::bail!("--rounds: {} is not in 1..={MAX_ROUNDS}", args.rounds);
    }
    if args.confirm_rounds > MAX_ROUNDS {
        anyhow::bail!(
            "--confirm-rounds: {} is not in 0..={MAX_ROUNDS}",
            args.confirm_rounds
        );
    }
    let mut args = args.clone();
    if args.cluster {
        args.out_dir = args.out_dir.join("cluster");
    }
    let args = &args;
    std::fs::create_dir_all(&args.out_dir)?;
    // Loaded as its updates leave it (see [`listings`]): the table does not drift
    // while the experiment runs.
    let listings = Arc::new(listings::Listings::draw(
        data::load(&args.inputs)?,
        args.seed,
    )?);
    let records = Arc::new(listings.records());
    let dir = match &args.data_dir {
        Some(parent) => tempfile::tempdir_in(parent)
            .with_context(|| format!("a directory in --data-dir {}", parent.display()))?,
        None => tempfile::tempdir()?,
    };
    let options = DatabaseOptions {
        // Layers fixed (the layer manager off): only the subspaces change between runs.
        // Workers per replica as a server has them (one per core): with one, every
        // search of a popular value queues on its region's single thread, a bottleneck
        // of the benchmark's making that no model of the store should have to predict.
        node: NodeConfig {
            automatic: false,
            ..NodeConfig::default()
        },
        hyperspace: HyperspaceOptions {
            auto: true,
            profiler: model::ProfilerConfig {
                bucket_width_ms: 1000,
                window_buckets: WINDOW_SECONDS,
                max_tracked_sets: 256,
            },
            regions: args.regions,
            max_subspace_attributes: 3,
            max_subspaces: 3,
            ..HyperspaceOptions::default()
        },
        shard: puffer_store::ShardOptions {
            record_cache_bytes: args.record_cache_bytes,
            ..puffer_store::ShardOptions::default()
        },
        ..DatabaseOptions::default()
    };
    let (db, cluster) = if args.cluster {
        let cluster = cluster::Loopback::start(dir.path(), &options, args.data_nodes)?;
        (cluster.front.clone(), Some(cluster))
    } else {
        (Arc::new(Database::open_with(dir.path(), options)?), None)
    };
    let bench = Bench {
        args: args.clone(),
        db,
        cluster,
        listings,
        value_spreads: puffer_node::hyperspace::RowSample::new(
            &records,
            records.len() as u64,
            &data::schema(),
            &(0..data::ATTRIBUTES.len() as u16).collect(),
        )
        .value_spreads(),
        records,
        speed: speed::SpeedProbe::start()?,
        _dir: dir,
    };
    let layout = TableLayout {
        shards: args.shards,
        replicas: 1,
    };
    // Loaded through the node that numbers SCUs (on a cluster, the leader).
    let loader = bench.decider();
    loader.create_table_with(TABLE, data::schema(), layout)?;
    let load_started = Instant::now();
    for batch in bench.records.chunks(2000) {
        let ops = batch.iter().cloned().map(WriteOp::Put).collect();
        workload::write_retrying(loader, ops)?;
    }
    bench.configure(&Vec::new())?;
    if args.speed_normalise && !bench.speed.wait_for_reference(Duration::from_secs(60)) {
        anyhow::bail!("--speed-normalise: the speed probe took no reference in 60 s");
    }
    eprintln!(
        "loaded {} listings in {:.1} s{}",
        bench.records.len(),
        load_started.elapsed().as_secs_f64(),
        if args.cluster {
            format!(" (loopback cluster: {} data nodes)", args.data_nodes)
        } else {
            String::new()
        }
    );
    if args.rows {
        return rows::rows(&bench);
    }
    if args.diagnose_blend {
        return blend::diagnose_blend(&bench);
    }
    if args.diagnose_noise {
        return noise::diagnose_noise(&bench);
    }
    let calibration_path = args.out_dir.join("calibration.json");
    let (measured, calibrator) = if args.refit {
        (calibration::refit(&bench, &calibration_path)?, None)
    } else if calibration_path.exists() && !(args.calibrate || args.calibrate_only) {
        (read_calibration(&calibration_path)?, None)
    } else {
        let (measured, calibrator) = calibration::calibrate(&bench, &calibration_path)?;
        (measured, Some(calibrator))
    };
    bench.decider().set_hyperspace_calibration(measured)?;
    print_calibration("calibration", &measured);
    if args.calibrate_only {
        println!(
            "{}",
            json!({"experiment": "hyperspace", "calibration": measured})
        );
        return Ok(());
    }
    let objects = bench.records.len() as u64;
    let model_calibration = puffer_node::hyperspace::calibration(&measured, objects);
    if args.refit {
        // An `--interleave` run predicted each workload with its own calibration.
        let per_workload = per_workload_calibrations(args, objects, |workload, path| {
            let refitted = calibration::refit(&bench, path)?;
            print_calibration(&format!("calibration of workload {workload}"), &refitted);
            Ok(refitted)
        })?;
        return repredict::repredict(&bench, &model_calibration, &per_workload);
    }
    if args.diagnose {
        return diagnose(&bench, &model_calibration);
    }
    if args.diagnose_mix {
        return diagnose_mix(&bench, &model_calibration);
    }
    if args.decompose {
        // As the run that measured them predicted them.
        let per_workload =
            per_workload_calibrations(args, objects, |_, path| read_calibration(path))?;
        return decompose::decompose(&bench, &model_calibration, &per_workload);
    }
    let mut rows = Rows::default();
    let mut summaries = Vec::new();
    let mut rng = StdRng::seed_from_u64(args.seed);
    // Rows counted by the calibration are kept: the same operations find the same rows.
    let mut calibrator = calibrator.unwrap_or_else(|| calibration::Calibrator::new(&bench));
    for workload in workloads() {
        if !args.workloads.iter().any(|name| name == workload.name) {
            continue;
        }
        if args.interleave {
            summaries.extend(evaluate_interleaved(
                &bench,
                &workload,
                &model_calibration,
                &mut calibrator,
                &mut rng,
                &mut rows,
            )?);
            continue;
        }
        for mix in MIXES {
            let name = format!("{}-{}", workload.name, mix.name);
            let summary = evaluate(
                &bench,
                &workload,
                mix,
                &model_calibration,
                &mut rng,
                &mut rows,
            )
            .with_context(|| format!("workload {name}"))?;
            summaries.push(summary);
        }
    }
    write_csv(
        &args.out_dir.join("model_accuracy.csv"),
        "workload,configuration,predicted_ops_per_s,measured_ops_per_s,sampled_as",
        &rows.accuracy,
    )?;
    write_csv(
        &args.out_dir.join("oracles.csv"),
        "workload,oracle,configuration,measured_ops_per_s",
        &rows.oracles,
    )?;
    if args.confirm_rounds > 0 {
        write_csv(
            &args.out_dir.join("confirmation.csv"),
            "workload,configuration,heuristics,median_ops_per_s,automatic_over_this,rounds_ops_per_s",
            &rows.confirmation,
        )?;
    }
    // The charts are drawn from the CSV rows, so they show exactly what the files hold;
    // a machine without a font still gets the files and the figures.
    if let Err(error) = draw_charts(&args.out_dir, &rows.accuracy, &rows.oracles) {
        eprintln!("WARNING: the charts were not drawn: {error:#}");
    }
    let adaptation = if args.skip_adaptation {
        None
    } else {
        Some(adapt(&bench)?)
    };
    print_summary(&summaries, adaptation.as_ref());
    println!(
        "{}",
        json!({
            "experiment": "hyperspace",
            "deployment": if args.cluster { format!("loopback cluster, {} data nodes", args.data_nodes) } else { "embedded".to_string() },
            "dataset": format!("Inside Airbnb, {} listings", bench.records.len()),
            "clients": args.clients,
            "seconds": args.seconds,
            "data_dir": args.data_dir,
            "record_cache_bytes": args.record_cache_bytes,
            "interleave": args.interleave,
            "confirm_rounds": args.confirm_rounds,
            "regions": args.regions,
            "shards": args.shards,
            "calibration": measured,
            "workloads": summaries,
            "adaptation": adaptation,
        })
    );
    Ok(())
}

/// The model's calibration of each workload (by letter) that an `--interleave` run
/// left a file for in `--out-dir` (`calibration-<W>.json`), each read by `read`.
fn per_workload_calibrations(
    args: &HyperspaceArgs,
    objects: u64,
    mut read: impl FnMut(&str, &std::path::Path) -> anyhow::Result<MeasuredCalibration>,
) -> anyhow::Result<BTreeMap<String, Calibration>> {
    let mut per_workload = BTreeMap::new();
    for workload in workloads() {
        let path = args
            .out_dir
            .join(format!("calibration-{}.json", workload.name));
        if path.exists() {
            let measured = read(workload.name, &path)?;
            per_workload.insert(
                workload.name.to_string(),
                puffer_node::hyperspace::calibration(&measured, objects),
            );
        }
    }
    Ok(per_workload)
}

/// The parameters a calibration file (`calibration.json`) holds.
fn read_calibration(path: &std::path::Path) -> anyhow::Result<MeasuredCalibration> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| serde_json::from_value::<MeasuredCalibration>(v["parameters"].clone()).ok())
        .with_context(|| format!("{} does not hold a calibration", path.display()))
}

/// Prints `what`'s parameters on one line.
fn print_calibration(what: &str, measured: &MeasuredCalibration) {
    println!(
        "{what}: beta {:.3e} s/object, region cost {:.3e} s, fan-out cost {:.3e} s, condition cost {:.3e} s, sent row cost {:.3e} s, write rate cost {:.3e} s^2, catch-up cost {:.3e} s^2, fresh window {:.2} s, region upkeep {:.3e} s/s (half at {} copies/s), alpha {:.3}, T_max {:.0} ops/s, update fixed cost {}",
        measured.beta_s_per_object,
        measured.region_cost_s,
        measured.fan_out_cost_s,
        measured.condition_cost_s,
        measured.sent_row_cost_s,
        measured.write_rate_cost_s2,
        measured.catch_up_cost_s2,
        measured.fresh_window_s,
        measured.region_upkeep_s_per_s,
        measured.upkeep_half_rate_per_s,
        measured.alpha,
        measured.max_throughput_ops_per_s,
        measured
            .update_fixed_cost_s
            .map_or("1/T_max (equation 4)".to_string(), |f| format!("{f:.3e} s")),
    );
}

/// Measures each of `count` items `rounds` times (see `--rounds`): in their
/// own order in the first round, in a new random order in each round after, so that a
/// slow minute of the shared machine falls on different items each round. `measure_one`
/// gets the item, the round and its position in the round; the answer holds each
/// item's throughputs, in round order.
fn measure_in_rounds(
    rounds: usize,
    count: usize,
    rng: &mut StdRng,
    mut measure_one: impl FnMut(usize, usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut runs = vec![Vec::with_capacity(rounds); count];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..count).collect();
        if round > 0 {
            order.shuffle(rng);
        }
        for (position, &item) in order.iter().enumerate() {
            runs[item].push(measure_one(item, round, position)?);
        }
    }
    Ok(runs)
}

/// `--diagnose-mix`: one search class at a time mixed with updates (searches 100, 50
/// and 10 % of operations) and updates alone, in a few configurations. A search's cost
/// while records are written is `(1/T − (1 − p) · u) / p`, with `u` the update's cost
/// measured alone in the same configuration; against the search alone it shows what
/// writing adds to reading. The stages the table holds after each run (segments,
/// sorted batches, log tables over all its shards and subspaces) say where.
fn diagnose_mix(bench: &Bench, calibration: &Calibration) -> anyhow::Result<()> {
    let regions = bench.args.regions;
    let sub = |attributes: &[&str]| {
        (
            attributes.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            regions,
        )
    };
    let cases: Vec<(Subspaces, Vec<Vec<&'static str>>)> = vec![
        (Vec::new(), vec![vec!["locality"]]),
        (
            vec![sub(&["locality"]), sub(&["postcode"])],
            vec![vec!["locality", "price"], vec!["postcode", "ratings"]],
        ),
        (
            vec![sub(&["region", "price"])],
            vec![vec!["region", "price"]],
        ),
    ];
    let any = &workloads()[0];
    let mut rows = Vec::new();
    for (c, (subspaces, classes)) in cases.iter().enumerate() {
        bench.configure(subspaces)?;
        let shown = label(subspaces);
        let updates_only = Mix {
            name: "updates",
            search_share: 0.0,
        };
        let updates = bench.measure(
            &format!("diagnose-mix updates on {shown}"),
            bench.operations(any, updates_only, &UPDATED)?,
            700 + c as u64,
        )?;
        let stages = stage_counts(bench)?;
        eprintln!("updates on {shown}: {updates:.0} ops/s; after: {stages}");
        rows.push(format!("updates,\"{shown}\",0,{updates:.1},,,\"{stages}\""));
        let configuration = model_configuration(subspaces, bench.args.shards)?;
        for (k, attributes) in classes.iter().enumerate() {
            let workload = Workload {
                name: "diagnose-mix",
                searches: vec![(attributes.clone(), 1.0)],
            };
            let searches_only = Mix {
                name: "searches",
                search_share: 1.0,
            };
            let search = bench
                .with_rows(profile(&workload, searches_only))?
                .searches
                .remove(0);
            let cost = model::search_cost_s(
                &configuration,
                &search.shape,
                search.rows.as_ref(),
                calibration,
            )
            .map_err(config_error)?;
            for share in [1.0, 0.5, 0.1] {
                // Compacted again, so every share starts from the same stages.
                bench.configure(subspaces)?;
                let mix = Mix {
                    name: "mix",
                    search_share: share,
                };
                let measured = bench.measure(
                    &format!(
                        "diagnose-mix {} on {shown} at {share}",
                        attributes.join("+")
                    ),
                    bench.operations(&workload, mix, &UPDATED)?,
                    800 + (c * 10 + k) as u64,
                )?;
                let stages = stage_counts(bench)?;
                let search_s = (1.0 / measured - (1.0 - share) / updates) / share;
                let class = attributes.join("+");
                eprintln!(
                    "{class} on {shown}, searches {share}: {measured:.0} ops/s; a search {:.0} us (model alone {:.0} us); after: {stages}",
                    search_s * 1e6,
                    cost * 1e6
                );
                rows.push(format!(
                    "{class},\"{shown}\",{share},{measured:.1},{:.1},{:.1},\"{stages}\"",
                    search_s * 1e6,
                    cost * 1e6
                ));
            }
        }
    }
    bench.configure(&Vec::new())?;
    write_csv(
        &bench.args.out_dir.join("mix_runs.csv"),
        "class,configuration,search_share,measured_ops_per_s,search_us,model_search_alone_us,stages",
        &rows,
    )?;
    println!(
        "{}",
        json!({"experiment": "hyperspace-diagnose-mix", "runs": rows.len()})
    );
    Ok(())
}

/// The statistics of the table and of each of its subspaces on `db`.
fn table_and_subspace_stats(db: &Database) -> anyhow::Result<Vec<puffer_store::ShardStats>> {
    let mut names = vec![TABLE.to_string()];
    names.extend(db.describe_subspaces(TABLE).into_iter().map(|s| s.name));
    names
        .iter()
        .map(|name| Ok(db.table(name)?.stats()?))
        .collect()
}

/// Segments, sorted batches and log tables over the table and its subspaces.
fn stage_counts(bench: &Bench) -> anyhow::Result<Stages> {
    let mut stages = Stages::default();
    for db in bench.holders() {
        for stats in table_and_subspace_stats(db)? {
            stages.segments += stats.segments;
            stages.sorted_batches += stats.sorted_batches;
            stages.log_tables += stats.log_tables;
        }
    }
    Ok(stages)
}

/// The stages of the table and its subspaces, summed over their regions (and, on a
/// cluster, over the nodes holding them): what a search of every region would check.
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    segments: usize,
    sorted_batches: usize,
    log_tables: usize,
}

impl std::fmt::Display for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} segments, {} sorted batches, {} log tables",
            self.segments, self.sorted_batches, self.log_tables
        )
    }
}

/// The columns of `<out>/runs.csv`, one row per run ([`run_row`]).
const RUNS_HEADER: &str = "unix_ms,what,seed,ops_per_s,cpu_s_per_s,ops_each_second,segments_after,sorted_batches_after,log_tables_after,raw_ops_per_s,speed_slowdown";

/// A run as `runs.csv` shows it: `run`'s throughput is the one reported (at the
/// reference speed with `--speed-normalise`), `raw_ops_per_s` the one measured, and
/// `slowdown` the machine's over the run (`None` where the probe could not tell).
struct Measured<'r> {
    run: &'r workload::KindRun,
    raw_ops_per_s: f64,
    slowdown: Option<f64>,
}

/// One run as a row of `<out>/runs.csv`: when it ended, what it ran, its seed, the
/// median second's operations, the process's CPU in cores (empty where `/proc` cannot
/// be read), the operations of each second measured (`;` between them), and the
/// stages its regions were left with. Where a configuration's rounds differ, the
/// seconds say whether within a run (a slow second or two) or between runs (every
/// second slower).
fn run_row(
    unix_ms: u64,
    what: &str,
    seed: u64,
    measured: &Measured,
    cpu_s_per_s: Option<f64>,
    stages: Stages,
) -> String {
    let run = measured.run;
    let seconds: Vec<String> = run.per_second.iter().map(u64::to_string).collect();
    format!(
        "{unix_ms},\"{}\",{seed},{:.1},{},\"{}\",{},{},{},{:.1},{}",
        what.replace('"', "\"\""),
        run.ops_per_s,
        cpu_s_per_s.map_or(String::new(), |c| format!("{c:.3}")),
        seconds.join(";"),
        stages.segments,
        stages.sorted_batches,
        stages.log_tables,
        measured.raw_ops_per_s,
        measured
            .slowdown
            .map_or(String::new(), |s| format!("{s:.4}")),
    )
}

/// Rows that attribute predicates found, over the table and its subspaces on every
/// node holding them (see `ShardStats::rows_found`).
fn rows_found(bench: &Bench) -> anyhow::Result<u64> {
    let mut found = 0;
    for db in bench.holders() {
        found += table_and_subspace_stats(db)?
            .iter()
            .map(|stats| stats.rows_found)
            .sum::<u64>();
    }
    Ok(found)
}

/// Searches of a mix run one after another to count the rows each finds.
const COUNTED_SEARCHES: u64 = 400;

/// Rows one search of `operations` finds, counted by the shards over `counted`
/// searches run one after another (with the updates the mix has between them): what a
/// search reads, measured rather than estimated.
fn rows_found_per_search(
    bench: &Bench,
    operations: &Operations,
    seed: u64,
    counted: u64,
) -> anyhow::Result<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let before = rows_found(bench)?;
    let mut searches = 0;
    // A mix of one search in ten runs about ten operations a search; the bound stops
    // a mix without searches.
    for _ in 0..counted * 100 {
        let kind = operations.run_one(&bench.db, &mut rng)?;
        if operations.is_search(kind) {
            searches += 1;
            if searches == counted {
                break;
            }
        }
    }
    if searches == 0 {
        anyhow::bail!("the mix ran no search to count rows of");
    }
    Ok((rows_found(bench)? - before) as f64 / searches as f64)
}

/// `--diagnose`: searches of one class at a time (workload A's classes and C's six
/// most frequent) in nine configurations, each measured against the model's cost, with
/// what the model counts (regions asked, rows read, rows sent) and the rows the
/// searches found (counted by the shards), to `search_runs.csv`: where the model's
/// search cost is wrong, class by class.
fn diagnose(bench: &Bench, calibration: &Calibration) -> anyhow::Result<()> {
    let searches_only = Mix {
        name: "searches",
        search_share: 1.0,
    };
    let regions = bench.args.regions;
    let sub = |attributes: &[&str]| {
        (
            attributes.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            regions,
        )
    };
    let configurations: Vec<Subspaces> = vec![
        Vec::new(),
        vec![sub(&["locality"])],
        vec![sub(&["region"])],
        vec![sub(&["price"])],
        vec![sub(&["postcode"])],
        vec![sub(&["locality", "price"])],
        vec![sub(&["region", "price"])],
        vec![sub(&["locality", "price", "ratings"])],
        vec![sub(&[
            "locality", "region", "price", "ratings", "pets", "pool",
        ])],
    ];
    let all = workloads();
    let mut classes: Vec<Vec<&'static str>> = Vec::new();
    for (attributes, _) in all[0].searches.iter().chain(all[2].searches.iter().take(6)) {
        if !classes.contains(attributes) {
            classes.push(attributes.clone());
        }
    }
    let objects = bench.records.len() as u64;
    let mut rows = Vec::new();
    for (c, subspaces) in configurations.iter().enumerate() {
        bench.configure(subspaces)?;
        let configuration = model_configuration(subspaces, bench.args.shards)?;
        for (k, attributes) in classes.iter().enumerate() {
            let workload = Workload {
                name: "diagnose",
                searches: vec![(attributes.clone(), 1.0)],
            };
            let seed = 500 + (c * 100 + k) as u64;
            let measured = bench.measure(
                &format!("diagnose {}", attributes.join("+")),
                bench.operations(&workload, searches_only, &UPDATED)?,
                seed,
            )?;
            let found = rows_found_per_search(
                bench,
                &bench.operations(&workload, searches_only, &UPDATED)?,
                seed,
                COUNTED_SEARCHES,
            )?;
            let search = bench
                .with_rows(profile(&workload, searches_only))?
                .searches
                .remove(0);
            let route = route_search(&configuration, &search.shape).map_err(config_error)?;
            let read = model::objects_read(
                &configuration,
                &route,
                &search.shape,
                search.rows.as_ref(),
                objects,
            );
            let sent = model::rows_returned(
                &configuration,
                &route,
                &search.shape,
                search.rows.as_ref(),
                objects,
            );
            let cost = model::search_cost_s(
                &configuration,
                &search.shape,
                search.rows.as_ref(),
                calibration,
            )
            .map_err(config_error)?;
            let shown = label(subspaces);
            let class = attributes.join("+");
            eprintln!(
                "{class} on {shown}: {} regions, {read:.0} read ({found:.0} found), {sent:.0} sent: predicted {:.0}, measured {measured:.0} ops/s",
                route.regions_contacted,
                1.0 / cost
            );
            rows.push(format!(
                "{class},\"{shown}\",{},{read:.1},{found:.1},{sent:.1},{:.1},{measured:.1}",
                route.regions_contacted,
                1.0 / cost
            ));
        }
    }
    write_csv(
        &bench.args.out_dir.join("search_runs.csv"),
        "class,configuration,regions_asked,rows_read,rows_found,rows_sent,predicted_ops_per_s,measured_ops_per_s",
        &rows,
    )?;
    println!(
        "{}",
        json!({"experiment": "hyperspace-diagnose", "runs": rows.len()})
    );
    Ok(())
}

fn model_configuration(subspaces: &Subspaces, shards: u32) -> anyhow::Result<Configuration> {
    let model = subspaces
        .iter()
        .map(|(attributes, regions)| {
            model::Subspace::new(attributes.iter().map(|a| data::id(a)), *regions)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(config_error)?;
    Configuration::new(model, shards, 1).map_err(config_error)
}

/// The configuration the database built (`built`) as the candidate of `candidates` it
/// is: the database cuts a subspace into fewer regions than asked where its grid has
/// fewer (three attributes at 16 regions make 12, `3 × 2 × 2`) and counts
/// the subspace asked for as there, so the model's candidate and the choice are one
/// configuration, measured and predicted once. `built` itself when no candidate has the
/// same attributes, each subspace at the regions built or more.
fn as_candidate(built: Configuration, candidates: &[Configuration]) -> Configuration {
    let asked_for = |candidate: &&Configuration| {
        candidate.key_regions() == built.key_regions()
            && candidate.replicas() == built.replicas()
            && candidate.subspaces().len() == built.subspaces().len()
            && candidate
                .subspaces()
                .iter()
                .zip(built.subspaces())
                .all(|(asked, made)| {
                    asked.attributes() == made.attributes() && made.regions() <= asked.regions()
                })
    };
    if candidates.contains(&built) {
        return built;
    }
    candidates.iter().find(asked_for).cloned().unwrap_or(built)
}

/// The paper's heuristics' configurations, each with its name.
type Heuristics = Vec<(&'static str, Configuration)>;

/// The query analyser's candidates for `profile` (as the database's configurator is
/// set up here) and the paper's four heuristics, named.
fn candidates_and_heuristics(
    bench: &Bench,
    profile: &WorkloadProfile,
) -> anyhow::Result<(Vec<Configuration>, Heuristics)> {
    let deployment = bench.deployment();
    let candidates = candidate_configurations(
        profile,
        &AnalyserConfig {
            max_subspace_attributes: 3,
            max_subspaces: 3,
            max_candidates: 4096,
            deployment,
        },
    )
    .map_err(config_error)?;
    let heuristics = vec![
        (
            "no-subspace",
            model::no_subspace(&deployment).map_err(config_error)?,
        ),
        (
            "hyperspace",
            model::hyperspace(profile, &deployment).map_err(config_error)?,
        ),
        (
            "subspaces-all",
            model::subspaces_all(profile, &deployment).map_err(config_error)?,
        ),
        (
            "dominant",
            model::dominant(profile, &deployment).map_err(config_error)?,
        ),
    ];
    Ok((candidates, heuristics))
}

/// What one workload at one mix measures: the model's best configurations, others at
/// random, the heuristics' and the configurator's own choice.
struct Selection {
    name: String,
    profile: WorkloadProfile,
    /// Every configuration ranked: the candidates and the heuristics'.
    all: Vec<Configuration>,
    best: Vec<Configuration>,
    others: Vec<Configuration>,
    heuristics: Heuristics,
    /// The automatic oracle (paper §5.2): the top of the configurator's ranking, from
    /// the profile it observed while serving the workload.
    chosen: Subspaces,
    chosen_configuration: Configuration,
    /// What the configurator deployed, from key only at its switch margin (the
    /// default 10 %): the top, or key only where the top's predicted gain is within
    /// the margin.
    deployed: Subspaces,
    deployed_configuration: Configuration,
    /// The configurator's decision, in its words.
    decision: String,
    /// Each configuration of the above once.
    to_measure: Vec<Configuration>,
}

/// Picks what [`Selection`] holds: the model's ranking with `calibration`, and the
/// configurator's choice after it served the workload.
fn select(
    bench: &Bench,
    workload: &Workload,
    mix: Mix,
    calibration: &Calibration,
    rng: &mut StdRng,
) -> anyhow::Result<Selection> {
    let name = format!("{}-{}", workload.name, mix.name);
    let profile: WorkloadProfile = bench.with_rows(profile(workload, mix))?;
    let (candidates, heuristics) = candidates_and_heuristics(bench, &profile)?;
    let mut all = candidates.clone();
    all.extend(heuristics.iter().map(|(_, c)| c.clone()));
    let ranked = rank_configurations(&all, &profile, calibration).map_err(config_error)?;
    // The model's best, then others at random.
    let best: Vec<Configuration> = ranked
        .iter()
        .take(bench.args.sample)
        .map(|r| r.configuration.clone())
        .collect();
    let mut others: Vec<Configuration> = ranked
        .iter()
        .skip(bench.args.sample)
        .map(|r| r.configuration.clone())
        .collect();
    others.shuffle(rng);
    others.truncate(bench.args.sample);
    // The configurator's own choice: from the profile of the operations served.
    bench.configure(&Vec::new())?;
    let operations = Arc::new(bench.operations(workload, mix, &UPDATED)?);
    run_series(
        &bench.db,
        &operations,
        bench.args.clients,
        f64::from(WINDOW_SECONDS),
        300,
        None,
    )?;
    bench.tune()?;
    let deployed: Subspaces = bench
        .db
        .describe_subspaces(TABLE)
        .into_iter()
        .map(|s| (s.attributes, s.regions))
        .collect();
    let deployed_configuration =
        as_candidate(model_configuration(&deployed, bench.args.shards)?, &all);
    // The paper's automatic oracle is the model's top for the workload, whatever runs
    // before it; the configurator keeps what runs unless the top beats it by its
    // margin, so from key only it deploys the top only where the model predicts a gain
    // over 10 %. Both are measured and judged; the oracle's verdicts are the paper's.
    let status = bench.decider().hyperspace_status(TABLE)?;
    let decision = status.decision.unwrap_or_default();
    let chosen: Subspaces = match status.ranking.first() {
        Some(top) => top
            .configuration
            .subspaces
            .iter()
            .map(|s| (s.attributes.clone(), s.regions))
            .collect(),
        None => anyhow::bail!("{name}: the configurator ranked nothing ({decision})"),
    };
    let chosen_configuration = as_candidate(model_configuration(&chosen, bench.args.shards)?, &all);
    eprintln!(
        "{name}: the configurator's top {}, deployed {} ({decision})",
        label(&chosen),
        label(&deployed)
    );
    let mut to_measure: Vec<Configuration> = Vec::new();
    for configuration in best
        .iter()
        .chain(&others)
        .chain(heuristics.iter().map(|(_, c)| c))
        .chain([&chosen_configuration, &deployed_configuration])
    {
        if !to_measure.contains(configuration) {
            to_measure.push(configuration.clone());
        }
    }
    Ok(Selection {
        name,
        profile,
        all,
        best,
        others,
        heuristics,
        chosen,
        chosen_configuration,
        deployed,
        deployed_configuration,
        decision,
        to_measure,
    })
}

/// The CSV rows a run writes, each file's in the order measured.
#[derive(Default)]
struct Rows {
    /// `model_accuracy.csv`.
    accuracy: Vec<String>,
    /// `oracles.csv`.
    oracles: Vec<String>,
    /// `confirmation.csv` (`--confirm-rounds`).
    confirmation: Vec<String>,
}

/// A model error as the benchmark reports it: the setting, then why.
pub(super) fn config_error(e: puffer_adapt::ConfigError) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", e.setting, e.reason)
}

/// Measures `configuration` once under `workload` at `mix` (the round and the position
/// in it give the operations' seed).
fn measure_configuration(
    bench: &Bench,
    workload: &Workload,
    mix: Mix,
    configuration: &Configuration,
    round: usize,
    position: usize,
) -> anyhow::Result<f64> {
    let subspaces = subspaces_of(configuration);
    bench.configure(&subspaces)?;
    let seed = 100 + (round * 1000 + position) as u64;
    let name = format!("{}-{}", workload.name, mix.name);
    let shown = label(&subspaces);
    let measured = bench.measure(
        &format!("{name} {shown}"),
        bench.operations(workload, mix, &UPDATED)?,
        seed,
    )?;
    eprintln!("{name} round {}: {shown}: {measured:.0} ops/s", round + 1);
    Ok(measured)
}

/// One workload at one mix: its [`Selection`] measured in rounds (see `--rounds`), each
/// configuration's median kept, predicted with `calibration`.
fn evaluate(
    bench: &Bench,
    workload: &Workload,
    mix: Mix,
    calibration: &Calibration,
    rng: &mut StdRng,
    rows: &mut Rows,
) -> anyhow::Result<serde_json::Value> {
    let selection = select(bench, workload, mix, calibration, rng)?;
    let to_measure = &selection.to_measure;
    let measured_runs = measure_in_rounds(
        bench.args.rounds,
        to_measure.len(),
        rng,
        |i, round, position| {
            measure_configuration(bench, workload, mix, &to_measure[i], round, position)
        },
    )?;
    let rounds: BTreeMap<Configuration, Vec<f64>> =
        to_measure.iter().cloned().zip(measured_runs).collect();
    let mut summary = report(bench, &selection, calibration, &rounds, rows)?;
    summary["confirmed"] = confirm_selection(bench, workload, mix, &selection, &rounds, rng, rows)?;
    Ok(summary)
}

/// What `--interleave` measures in one shared order: a calibration run, or
/// configuration `.1` of the mix `.0`'s selection.
#[derive(Clone, Copy)]
enum Item {
    Calibration(usize),
    Configuration(usize, usize),
}

/// `--interleave`: workload `workload` at every mix, each mix's selection picked with
/// `calibration` (the one the configurator holds), then every configuration and every
/// calibration run measured in rounds of one random order, and the configurations
/// predicted with the parameters fitted on this workload's calibration runs
/// (`<out>/calibration-<W>.json`).
fn evaluate_interleaved(
    bench: &Bench,
    workload: &Workload,
    calibration: &Calibration,
    calibrator: &mut calibration::Calibrator,
    rng: &mut StdRng,
    rows: &mut Rows,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut selections = Vec::new();
    for mix in MIXES {
        let name = format!("{}-{}", workload.name, mix.name);
        selections.push(
            select(bench, workload, mix, calibration, rng)
                .with_context(|| format!("workload {name}"))?,
        );
    }
    let mut items: Vec<Item> = (0..calibrator.runs()).map(Item::Calibration).collect();
    for (s, selection) in selections.iter().enumerate() {
        items.extend((0..selection.to_measure.len()).map(|i| Item::Configuration(s, i)));
    }
    // The first round in a random order too: in their own order the calibration's
    // runs would all come first.
    items.shuffle(rng);
    let runs =
        measure_in_rounds(
            bench.args.rounds,
            items.len(),
            rng,
            |k, round, position| match items[k] {
                Item::Calibration(i) => calibrator.measure(bench, i, round),
                Item::Configuration(s, i) => measure_configuration(
                    bench,
                    workload,
                    MIXES[s],
                    &selections[s].to_measure[i],
                    round,
                    position,
                ),
            },
        )?;
    let sizes: Vec<usize> = selections.iter().map(|s| s.to_measure.len()).collect();
    let (calibration_rounds, by_selection) = file_rounds(&items, runs, calibrator.runs(), &sizes);
    let configuration_rounds: Vec<BTreeMap<Configuration, Vec<f64>>> = selections
        .iter()
        .zip(by_selection)
        .map(|(selection, rounds)| selection.to_measure.iter().cloned().zip(rounds).collect())
        .collect();
    let path = bench
        .args
        .out_dir
        .join(format!("calibration-{}.json", workload.name));
    let measured = calibrator.fit_and_write(bench, calibration_rounds, &path)?;
    print_calibration(
        &format!("calibration of workload {}", workload.name),
        &measured,
    );
    let fitted = puffer_node::hyperspace::calibration(&measured, bench.records.len() as u64);
    let mut summaries = Vec::new();
    for ((selection, rounds), mix) in selections.iter().zip(&configuration_rounds).zip(MIXES) {
        let mut summary = report(bench, selection, &fitted, rounds, rows)
            .with_context(|| format!("workload {}", selection.name))?;
        summary["calibration"] = json!(measured);
        summary["confirmed"] =
            confirm_selection(bench, workload, mix, selection, rounds, rng, rows)
                .with_context(|| format!("workload {}", selection.name))?;
        summaries.push(summary);
    }
    Ok(summaries)
}

/// Each item's rounds (`runs`, in `items`' order) filed back: the calibration's runs
/// by index (`calibration_runs` of them), and each selection's configurations by index
/// (`sizes[s]` of selection `s`).
fn file_rounds(
    items: &[Item],
    runs: Vec<Vec<f64>>,
    calibration_runs: usize,
    sizes: &[usize],
) -> (Vec<Vec<f64>>, Vec<Vec<Vec<f64>>>) {
    let mut calibration_rounds = vec![Vec::new(); calibration_runs];
    let mut configuration_rounds: Vec<Vec<Vec<f64>>> =
        sizes.iter().map(|&n| vec![Vec::new(); n]).collect();
    for (item, rounds) in items.iter().zip(runs) {
        match *item {
            Item::Calibration(i) => calibration_rounds[i] = rounds,
            Item::Configuration(s, i) => configuration_rounds[s][i] = rounds,
        }
    }
    (calibration_rounds, configuration_rounds)
}

/// Each configuration's median throughput over its rounds.
fn medians(rounds: &BTreeMap<Configuration, Vec<f64>>) -> BTreeMap<Configuration, f64> {
    rounds
        .iter()
        .map(|(configuration, runs)| (configuration.clone(), median(&mut runs.clone())))
        .collect()
}

/// The rows and the summary of `selection` measured (`rounds`: each configuration's
/// throughputs) and predicted with `calibration`.
fn report(
    bench: &Bench,
    selection: &Selection,
    calibration: &Calibration,
    rounds: &BTreeMap<Configuration, Vec<f64>>,
    rows: &mut Rows,
) -> anyhow::Result<serde_json::Value> {
    let name = &selection.name;
    let predicted: BTreeMap<Configuration, f64> =
        rank_configurations(&selection.all, &selection.profile, calibration)
            .map_err(config_error)?
            .into_iter()
            .map(|r| (r.configuration, r.predicted_throughput_ops_per_s))
            .collect();
    let measured = medians(rounds);
    let mut sampled = Vec::new();
    for (configuration, kind) in selection
        .best
        .iter()
        .map(|c| (c, "model-best"))
        .chain(selection.others.iter().map(|c| (c, "random")))
    {
        let t = measured[configuration];
        let p = predicted[configuration];
        let shown = label(&subspaces_of(configuration));
        let runs = &rounds[configuration];
        eprintln!("{name}: {shown}: predicted {p:.0}, measured {t:.0} ops/s (rounds: {runs:.0?})");
        rows.accuracy
            .push(format!("{name},\"{shown}\",{p:.1},{t:.1},{kind}"));
        sampled.push((p, t));
    }
    let mut heuristic_results = Vec::new();
    for (heuristic, configuration) in &selection.heuristics {
        let t = measured[configuration];
        let shown = label(&subspaces_of(configuration));
        rows.oracles
            .push(format!("{name},{heuristic},\"{shown}\",{t:.1}"));
        heuristic_results.push((heuristic.to_string(), shown, t));
    }
    let chosen_configuration = &selection.chosen_configuration;
    let automatic = measured[chosen_configuration];
    let automatic_label = label(&selection.chosen);
    rows.oracles.push(format!(
        "{name},automatic,\"{automatic_label}\",{automatic:.1}"
    ));
    let deployed = measured[&selection.deployed_configuration];
    let deployed_label = label(&selection.deployed);
    rows.oracles.push(format!(
        "{name},deployed,\"{deployed_label}\",{deployed:.1}"
    ));
    let (best_measured_configuration, best_measured) = measured
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(c, t)| (label(&subspaces_of(c)), *t))
        .expect("something was measured");
    let errors: Vec<f64> = sampled.iter().map(|(p, t)| (p - t).abs() / t).collect();
    let mean_error = errors.iter().sum::<f64>() / errors.len() as f64;
    let (p, t): (Vec<f64>, Vec<f64>) = sampled.iter().copied().unzip();
    let tau = kendall_tau(&p, &t);
    Ok(json!({
        "workload": name,
        "mean_abs_error": round(mean_error, 3),
        "kendall_tau": round(tau, 3),
        "automatic": automatic_label,
        "automatic_ops_per_s": round(automatic, 1),
        "automatic_predicted_ops_per_s": predicted.get(chosen_configuration).map(|p| round(*p, 1)),
        "best_measured": best_measured_configuration,
        "best_measured_ops_per_s": round(best_measured, 1),
        "automatic_within_5_percent_of_best": automatic >= 0.95 * best_measured,
        "heuristics": heuristic_results.iter().map(|(h, c, t)| json!({"heuristic": h, "configuration": c, "ops_per_s": round(*t, 1)})).collect::<Vec<_>>(),
        "automatic_beats_every_heuristic": heuristic_results.iter().all(|(_, _, t)| automatic >= *t),
        "deployed": deployed_label,
        "deployed_ops_per_s": round(deployed, 1),
        "decision": selection.decision,
        "deployed_within_5_percent_of_best": deployed >= 0.95 * best_measured,
        "deployed_beats_every_heuristic": heuristic_results.iter().all(|(_, _, t)| deployed >= *t),
        "configurations_measured": measured.len(),
        "rounds": bench.args.rounds,
    }))
}

/// `--confirm-rounds`: the configurator's choice and its contenders ([`confirm`])
/// measured again under `workload` at `mix`, after `rounds` (each configuration's
/// throughputs so far) picked them. `null` when `--confirm-rounds` is 0.
fn confirm_selection(
    bench: &Bench,
    workload: &Workload,
    mix: Mix,
    selection: &Selection,
    rounds: &BTreeMap<Configuration, Vec<f64>>,
    rng: &mut StdRng,
    rows: &mut Rows,
) -> anyhow::Result<serde_json::Value> {
    if bench.args.confirm_rounds == 0 {
        return Ok(serde_json::Value::Null);
    }
    let measured = medians(rounds);
    let contenders = confirm::contenders(
        &measured,
        &selection.chosen_configuration,
        &selection.heuristics,
    );
    let count = contenders.configurations.len();
    let by_contender = if count == 1 {
        // Nothing came near the choice: the verdicts stand as measured.
        vec![rounds[&selection.chosen_configuration].clone()]
    } else {
        // Even the first round in a random order: the choice would always come first.
        let mut order: Vec<usize> = (0..count).collect();
        order.shuffle(rng);
        let runs = measure_in_rounds(
            bench.args.confirm_rounds,
            count,
            rng,
            |k, round, position| {
                let configuration = &contenders.configurations[order[k]];
                // Rounds numbered after the first measurement's: other operations' seeds.
                let round = bench.args.rounds + round;
                measure_configuration(bench, workload, mix, configuration, round, position)
            },
        )?;
        let mut by_contender = vec![Vec::new(); count];
        for (k, runs) in runs.into_iter().enumerate() {
            by_contender[order[k]] = runs;
        }
        by_contender
    };
    let verdict = confirm::verdict(&contenders, &by_contender);
    let mut shown = Vec::new();
    for ((configuration, names), (rival, runs)) in contenders
        .configurations
        .iter()
        .zip(&contenders.heuristics)
        .zip(verdict.rivals.iter().zip(&by_contender))
    {
        let label = label(&subspaces_of(configuration));
        let runs: Vec<String> = runs.iter().map(|t| format!("{t:.1}")).collect();
        rows.confirmation.push(format!(
            "{},\"{label}\",\"{}\",{:.1},{:.4},\"{}\"",
            selection.name,
            names.join(";"),
            rival.ops_per_s,
            rival.automatic_over_this,
            runs.join(";")
        ));
        eprintln!(
            "{} again: {label}{}: {:.0} ops/s, the choice {:.3} times it",
            selection.name,
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            },
            rival.ops_per_s,
            rival.automatic_over_this
        );
        shown.push(json!({
            "configuration": label,
            "heuristics": names,
            "ops_per_s": round(rival.ops_per_s, 1),
            "automatic_over_this": round(rival.automatic_over_this, 4),
        }));
    }
    Ok(json!({
        "rounds": if count == 1 { 0 } else { bench.args.confirm_rounds },
        "contenders": shown,
        "automatic_within_5_percent_of_best": verdict.within_5_percent_of_best,
        "automatic_beats_every_heuristic": verdict.beats_every_heuristic,
    }))
}

/// Workload C, then B (their best configurations differ), from the key subspace alone,
/// the configurator running every 2 s: every reconfiguration it makes, when.
fn adapt(bench: &Bench) -> anyhow::Result<serde_json::Value> {
    let all = workloads();
    let (c, b) = (&all[2], &all[1]);
    let mix = MIXES[0];
    bench.configure(&Vec::new())?;
    let first = Arc::new(bench.operations(c, mix, &UPDATED)?);
    let second = Arc::new(bench.operations(b, mix, &UPDATED)?);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started_unix_ms = unix_ms();
    let tuner = {
        let (db, stop) = (bench.db.clone(), stop.clone());
        let leader = bench.cluster.as_ref().map(|c| c.leader.clone());
        std::thread::spawn(move || {
            let mut seen: Vec<puffer_node::hyperspace::Reconfiguration> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(2));
                // On a cluster the front node sends its searches, the leader decides.
                db.tune_tables();
                let decider = leader.as_ref().unwrap_or(&db);
                if leader.is_some() {
                    decider.tune_tables();
                    let _ = db.sync_tables();
                }
                if let Ok(status) = decider.hyperspace_status(TABLE) {
                    if let Some(r) = status.last_reconfiguration {
                        if seen.last() != Some(&r) {
                            seen.push(r);
                        }
                    }
                }
            }
            seen
        })
    };
    let (before, after) = (40.0, 40.0);
    let series = run_series(
        &bench.db,
        &first,
        bench.args.clients,
        before + after,
        400,
        Some((before, second)),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reconfigurations = tuner
        .join()
        .map_err(|_| anyhow::anyhow!("the tuner panicked"))?;
    let per_second = series?;
    let switch_unix_ms = started_unix_ms + (before * 1000.0) as u64;
    let shown: Vec<serde_json::Value> = reconfigurations
        .iter()
        .map(|r| {
            let done_ms = (r.started_unix_ms + r.duration_ms) as i64;
            json!({
                "to": label(&r.to.subspaces.iter().map(|s| (s.attributes.clone(), s.regions)).collect::<Vec<_>>()),
                "started_s": round((r.started_unix_ms as i64 - started_unix_ms as i64) as f64 / 1000.0, 1),
                "done_s": round((done_ms - started_unix_ms as i64) as f64 / 1000.0, 1),
                "predicted_gain": round(r.predicted_gain, 3),
                "error": r.error,
            })
        })
        .collect();
    let after_switch = reconfigurations
        .iter()
        .find(|r| r.started_unix_ms >= switch_unix_ms)
        .map(|r| (r.started_unix_ms + r.duration_ms - switch_unix_ms) as f64 / 1000.0);
    let mean = |from: usize, to: usize| -> f64 {
        let part = &per_second[from.min(per_second.len())..to.min(per_second.len())];
        part.iter().sum::<u64>() as f64 / part.len().max(1) as f64
    };
    let total = per_second.len();
    let mut csv = std::fs::File::create(bench.args.out_dir.join("adaptation.csv"))?;
    writeln!(csv, "second,ops,workload")?;
    for (s, n) in per_second.iter().enumerate() {
        writeln!(
            csv,
            "{s},{n},{}",
            if (s as f64) < before { "C" } else { "B" }
        )?;
    }
    Ok(json!({
        "first": "C-RH",
        "then": "B-RH",
        "first_seconds": before,
        "then_seconds": after,
        "first_5_s_ops_per_s": round(mean(0, 5), 1),
        "first_last_10_s_ops_per_s": round(mean(before as usize - 10, before as usize), 1),
        "then_first_5_s_ops_per_s": round(mean(before as usize, before as usize + 5), 1),
        "then_last_10_s_ops_per_s": round(mean(total - 10, total), 1),
        "switched_after_change_s": after_switch.map(|s| round(s, 1)),
        "reconfigurations": shown,
        "configuration_at_end": label(&bench.db.describe_subspaces(TABLE).into_iter().map(|s| (s.attributes, s.regions)).collect::<Vec<_>>()),
    }))
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `model_accuracy.png` and `oracles.png` in `out_dir`, from the rows of the CSV files.
fn draw_charts(
    out_dir: &std::path::Path,
    accuracy_rows: &[String],
    oracle_rows: &[String],
) -> anyhow::Result<()> {
    let points = accuracy_rows
        .iter()
        .map(|row| chart::accuracy_point(row))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bars = oracle_rows
        .iter()
        .map(|row| chart::oracle_bar(row))
        .collect::<anyhow::Result<Vec<_>>>()?;
    chart::draw_accuracy(&out_dir.join("model_accuracy.png"), &points)?;
    chart::draw_oracles(&out_dir.join("oracles.png"), &bars)
}

fn write_csv(path: &std::path::Path, header: &str, rows: &[String]) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    writeln!(file, "{header}")?;
    for row in rows {
        writeln!(file, "{row}")?;
    }
    Ok(())
}

fn print_summary(summaries: &[serde_json::Value], adaptation: Option<&serde_json::Value>) {
    println!(
        "\n{:<7} {:>8} {:>6} {:>30} {:>9} {:>30} {:>9} {:>6} {:>6} {:>8} {:>8}",
        "load",
        "MAE",
        "tau",
        "automatic",
        "ops/s",
        "best measured",
        "ops/s",
        "<=5%",
        "beats",
        "<=5% ag",
        "beats ag"
    );
    for s in summaries {
        println!(
            "{:<7} {:>8} {:>6} {:>30} {:>9} {:>30} {:>9} {:>6} {:>6} {:>8} {:>8}",
            s["workload"].as_str().unwrap_or(""),
            s["mean_abs_error"],
            s["kendall_tau"],
            s["automatic"].as_str().unwrap_or(""),
            s["automatic_ops_per_s"],
            s["best_measured"].as_str().unwrap_or(""),
            s["best_measured_ops_per_s"],
            s["automatic_within_5_percent_of_best"],
            s["automatic_beats_every_heuristic"],
            s["confirmed"]["automatic_within_5_percent_of_best"],
            s["confirmed"]["automatic_beats_every_heuristic"],
        );
    }
    println!("(ag: the choice and its contenders measured again, --confirm-rounds)");
    println!(
        "\n{:<7} {:>30} {:>9} {:>6} {:>6}  configurator's decision (from key only)",
        "load", "deployed", "ops/s", "<=5%", "beats"
    );
    for s in summaries {
        println!(
            "{:<7} {:>30} {:>9} {:>6} {:>6}  {}",
            s["workload"].as_str().unwrap_or(""),
            s["deployed"].as_str().unwrap_or(""),
            s["deployed_ops_per_s"],
            s["deployed_within_5_percent_of_best"],
            s["deployed_beats_every_heuristic"],
            s["decision"].as_str().unwrap_or(""),
        );
    }
    if let Some(a) = adaptation {
        println!(
            "\nadaptation C -> B (RH): C first 5 s {} ops/s, C last 10 s {} ops/s; B first 5 s {} ops/s, B last 10 s {} ops/s; switched {} s after the change; at the end: {}",
            a["first_5_s_ops_per_s"], a["first_last_10_s_ops_per_s"], a["then_first_5_s_ops_per_s"], a["then_last_10_s_ops_per_s"], a["switched_after_change_s"], a["configuration_at_end"]
        );
        for r in a["reconfigurations"].as_array().into_iter().flatten() {
            println!(
                "  reconfiguration to {} from {} s to {} s (predicted gain {})",
                r["to"], r["started_s"], r["done_s"], r["predicted_gain"]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subspace the database cut into fewer regions than asked is the candidate asked
    /// for; one over other attributes, or with more regions than any candidate's, is not.
    #[test]
    fn the_choice_built_is_the_candidate_asked_for() {
        let subspace = |attributes: &[u16], regions| {
            model::Subspace::new(attributes.iter().copied(), regions).unwrap()
        };
        let configuration =
            |subspaces: Vec<model::Subspace>| Configuration::new(subspaces, 4, 1).unwrap();
        let wide = configuration(vec![subspace(&[1, 2, 3], 16)]);
        let pair = configuration(vec![subspace(&[1], 16), subspace(&[2, 3], 16)]);
        let candidates = vec![pair.clone(), wide.clone()];
        // Three dimensions at 16 regions: 3 × 2 × 2, 12 regions built.
        let built_wide = configuration(vec![subspace(&[1, 2, 3], 12)]);
        assert_eq!(as_candidate(built_wide, &candidates), wide);
        assert_eq!(
            as_candidate(
                configuration(vec![subspace(&[1], 16), subspace(&[2, 3], 16)]),
                &candidates
            ),
            pair
        );
        let built_pair = configuration(vec![subspace(&[1], 16), subspace(&[2, 3], 9)]);
        assert_eq!(as_candidate(built_pair, &candidates), pair);
        // Other attributes, more regions, another key subspace: itself.
        let other = configuration(vec![subspace(&[1, 2, 3, 4, 5], 1)]);
        assert_eq!(as_candidate(other.clone(), &candidates), other);
        let more = configuration(vec![subspace(&[1], 32), subspace(&[2, 3], 16)]);
        assert_eq!(as_candidate(more.clone(), &candidates), more);
        let keyed = Configuration::new(vec![subspace(&[1, 2, 3], 12)], 8, 1).unwrap();
        assert_eq!(as_candidate(keyed.clone(), &candidates), keyed);
    }

    /// A row of runs.csv read back by a CSV reader (the `csv` crate, not our
    /// formatting) under the header: every column where the header names it, a name
    /// with commas and quotes kept whole, a missing CPU left empty.
    #[test]
    fn run_rows_read_back_under_their_header() {
        let run = workload::KindRun {
            ops_per_s: 1234.5,
            per_second: vec![1200, 1234, 1300],
            kinds: Vec::new(),
        };
        let stages = Stages {
            segments: 52,
            sorted_batches: 7,
            log_tables: 36,
        };
        let what = r#"B-WH (locality) (region,pets) "again""#;
        let measured = Measured {
            run: &run,
            raw_ops_per_s: 1000.0,
            slowdown: Some(1.2345),
        };
        let unmeasured = Measured {
            slowdown: None,
            ..measured
        };
        let text = format!(
            "{RUNS_HEADER}\n{}\n{}\n",
            run_row(17, what, 9, &measured, Some(1.9), stages),
            run_row(18, "x", 1, &unmeasured, None, Stages::default())
        );
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        let field = |row: &csv::StringRecord, name: &str| {
            let at = header.iter().position(|h| h == name).unwrap();
            row[at].to_string()
        };
        assert!(rows.iter().all(|r| r.len() == header.len()));
        assert_eq!(field(&rows[0], "unix_ms"), "17");
        assert_eq!(field(&rows[0], "what"), what);
        assert_eq!(field(&rows[0], "seed"), "9");
        assert_eq!(field(&rows[0], "ops_per_s"), "1234.5");
        assert_eq!(field(&rows[0], "cpu_s_per_s"), "1.900");
        assert_eq!(field(&rows[0], "ops_each_second"), "1200;1234;1300");
        assert_eq!(field(&rows[0], "segments_after"), "52");
        assert_eq!(field(&rows[0], "sorted_batches_after"), "7");
        assert_eq!(field(&rows[0], "log_tables_after"), "36");
        assert_eq!(field(&rows[0], "raw_ops_per_s"), "1000.0");
        assert_eq!(field(&rows[0], "speed_slowdown"), "1.2345");
        assert_eq!(field(&rows[1], "cpu_s_per_s"), "");
        assert_eq!(field(&rows[1], "segments_after"), "0");
        assert_eq!(field(&rows[1], "speed_slowdown"), "");
    }

    /// Items shuffled, measured in rounds as `--interleave` measures them: every
    /// calibration run and every configuration gets its own throughputs back, in round
    /// order, and none is left without.
    #[test]
    fn interleaved_rounds_are_filed_under_their_own_items() {
        let (calibration_runs, sizes) = (5, vec![3, 0, 4]);
        let mut items: Vec<Item> = (0..calibration_runs).map(Item::Calibration).collect();
        for (s, &n) in sizes.iter().enumerate() {
            items.extend((0..n).map(|i| Item::Configuration(s, i)));
        }
        let mut rng = StdRng::seed_from_u64(7);
        items.shuffle(&mut rng);
        // A throughput that names its item and round: 1000 (s + 1) + i + round / 10 for
        // configuration i of selection s, 500 + i + round / 10 for calibration run i.
        let value = |item: Item, round: usize| match item {
            Item::Calibration(i) => 500.0 + i as f64 + round as f64 / 10.0,
            Item::Configuration(s, i) => 1000.0 * (s + 1) as f64 + i as f64 + round as f64 / 10.0,
        };
        let runs = measure_in_rounds(3, items.len(), &mut rng, |k, round, _| {
            Ok(value(items[k], round))
        })
        .unwrap();
        let (calibration, configurations) = file_rounds(&items, runs, calibration_runs, &sizes);
        for (i, rounds) in calibration.iter().enumerate() {
            let expected: Vec<f64> = (0..3).map(|r| value(Item::Calibration(i), r)).collect();
            assert_eq!(rounds, &expected, "calibration run {i}");
        }
        assert_eq!(configurations.len(), sizes.len());
        for (s, rounds_of) in configurations.iter().enumerate() {
            assert_eq!(rounds_of.len(), sizes[s]);
            for (i, rounds) in rounds_of.iter().enumerate() {
                let expected: Vec<f64> = (0..3)
                    .map(|r| value(Item::Configuration(s, i), r))
                    .collect();
                assert_eq!(rounds, &expected, "selection {s}, configuration {i}");
            }
        }
    }

    /// Against a log of every call: each item measured once per round, the first round
    /// in order, every round a permutation, and each answer filed under its own item in
    /// round order.
    #[test]
    fn measure_in_rounds_measures_every_item_once_a_round_and_files_it_right() {
        let (rounds, count) = (4, 9);
        let mut rng = StdRng::seed_from_u64(7);
        let mut calls: Vec<(usize, usize, usize)> = Vec::new();
        let runs = measure_in_rounds(rounds, count, &mut rng, |item, round, position| {
            calls.push((item, round, position));
            Ok((item * 100 + round) as f64)
        })
        .unwrap();
        assert_eq!(calls.len(), rounds * count);
        for round in 0..rounds {
            let mut items: Vec<usize> = calls
                .iter()
                .filter(|(_, r, _)| *r == round)
                .map(|(item, _, _)| *item)
                .collect();
            if round == 0 {
                assert_eq!(items, (0..count).collect::<Vec<_>>());
            }
            items.sort_unstable();
            assert_eq!(items, (0..count).collect::<Vec<_>>(), "round {round}");
        }
        for (position, (_, _, told)) in calls.iter().enumerate() {
            assert_eq!(*told, position % count);
        }
        for (item, measured) in runs.iter().enumerate() {
            let expected: Vec<f64> = (0..rounds).map(|r| (item * 100 + r) as f64).collect();
            assert_eq!(measured, &expected);
        }
        // Some later round is not in the first round's order (9! orders: a seed that
        // kept all three would be a broken shuffle).
        assert!(calls
            .chunks(count)
            .skip(1)
            .any(|round| round.iter().map(|c| c.0).ne(0..count)));
    }

    #[test]
    fn measure_in_rounds_stops_at_the_first_failure() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut calls = 0;
        let answer = measure_in_rounds(2, 3, &mut rng, |item, _, _| {
            calls += 1;
            if item == 1 {
                anyhow::bail!("run {item} failed");
            }
            Ok(1.0)
        });
        assert!(answer.unwrap_err().to_string().contains("run 1 failed"));
        assert_eq!(calls, 2);
    }
}
