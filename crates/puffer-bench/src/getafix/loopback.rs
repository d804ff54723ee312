//! `puffer-bench getafix-cluster`: Getafix against Scarlett and uniform replication on a
//! real cluster on loopback, measured end to end through a broker.
//!
//! Per policy a fresh cluster: one etcd, a leader node (coordinator, ingest, indexer:
//! it numbers the SCUs and publishes segments, and holds no placed replica), data-only
//! nodes that hold what the coordinator places on them, and a broker, each a `puffer
//! serve` process. Wikiticker is loaded into a table partitioned by hour (each chunk a
//! segment of one shard). Closed-loop clients then send the paper's synthetic workload
//! through the broker: a count over the hours ending at the latest, the interval's
//! length Zipfian. Every second the broker's `/v1/admin/placement` is sampled for the
//! replicas of every chunk. Reported per policy: replicas per segment (median and p99
//! over the samples after the warm-up), total replicas, queries a second, query latency
//! (mean, median, p99) after the warm-up, and the load imbalance: the busiest data
//! node's CPU time over the mean (from `/proc/<pid>/stat`).
//!
//! What it can show on this machine: every process shares the same 2 cores, so more
//! replicas add no CPU, and a query's latency is the same whichever node serves it.
//! What differs between policies is the storage they spend and how evenly the data
//! nodes' load is spread, which is what Getafix plans for.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use puffer_cluster::etcd::LocalEtcd;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};

use super::sim::{mean, quantile, ZipfPrefix};
use crate::stats::round;

/// Options of `puffer-bench getafix-cluster`.
#[derive(clap::Args, Debug)]
pub struct LoopbackArgs {
    /// Druid's wikiticker sample (JSON lines, gzip).
    #[arg(
        long,
        default_value = "../shared/data/wikiticker-2015-09-12-sampled.json.gz"
    )]
    input: PathBuf,
    /// Data-only nodes.
    #[arg(long, default_value_t = 3)]
    data_nodes: usize,
    /// Clients sending queries one after another, at once.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Seconds of queries per policy, warm-up included.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    /// Seconds at the start of a run left out of the figures (popularity planning).
    #[arg(long, default_value_t = 12)]
    warmup_seconds: u64,
    /// The coordinator's popularity window, seconds.
    #[arg(long, default_value_t = 3)]
    window_seconds: u64,
    /// Zipf skew of a query's length in hours.
    #[arg(long, default_value_t = 1.0)]
    interval_skew: f64,
    /// Longest query, in hours.
    #[arg(long, default_value_t = 24)]
    max_hours: usize,
    /// Uniform replication factors run (each at most the data nodes).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    uniform: Vec<usize>,
    /// The policies run, among getafix, scarlett and uniform-K (default: all).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Random seed of the clients.
    #[arg(long, default_value_t = 11)]
    seed: u64,
    /// Where the CSV goes.
    #[arg(long, default_value = "target/bench/getafix")]
    out_dir: PathBuf,
}

/// A policy and the `puffer serve` flags that choose it.
struct Policy {
    name: String,
    flags: Vec<String>,
}

/// A `puffer serve` child, killed when dropped.
struct Node {
    child: Child,
    base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// Starts `puffer serve` with its data under `dir` and its log in `logs`.
    fn start(
        puffer: &Path,
        dir: &Path,
        logs: &Path,
        name: &str,
        args: &[String],
    ) -> anyhow::Result<Node> {
        let port = puffer_cluster::etcd::local::free_port()?;
        let data = dir.join(name);
        std::fs::create_dir_all(logs)?;
        let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
        let mut child = Command::new(puffer)
            .arg("serve")
            .args(args)
            .args(["--node-id", name, "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", puffer.display()))?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("reading the node's first line")?;
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("node {name} printed {line:?} instead of its address"))?
            .to_string();
        Ok(Node { child, base })
    }
}

fn get(url: &str) -> anyhow::Result<Value> {
    Ok(ureq::get(url)
        .timeout(Duration::from_secs(10))
        .call()?
        .into_json()?)
}

fn post(url: &str, body: &Value) -> anyhow::Result<Value> {
    match ureq::post(url)
        .timeout(Duration::from_secs(30))
        .send_json(body)
    {
        Ok(answer) => Ok(answer.into_json()?),
        Err(ureq::Error::Status(code, answer)) => {
            bail!("{code}: {}", answer.into_string().unwrap_or_default())
        }
        Err(e) => Err(e.into()),
    }
}

fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(value) = done() {
            return Ok(value);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{what} did not happen within {} s", limit.as_secs())
}

/// The wikiticker rows as records of the bench's table (a few columns), and the newest
/// hour they hold (as the start of it, `YYYY-MM-DDTHH`).
fn read_rows(input: &Path) -> anyhow::Result<Vec<Value>> {
    let file =
        std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file).read_to_string(&mut text)?;
    let mut rows = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let row: Value = serde_json::from_str(line).with_context(|| format!("line {}", n + 1))?;
        let text_of = |field: &str| row[field].as_str().unwrap_or("").to_string();
        // The sample's day (a few stray rows of other days would each make a chunk).
        if !text_of("time").starts_with("2015-09-12") {
            continue;
        }
        rows.push(json!({
            "id": format!("r{n:06}"),
            "time": text_of("time"),
            "channel": text_of("channel"),
            "page": text_of("page"),
            "user": text_of("user"),
            "added": row["added"].as_i64().unwrap_or(0),
            "deleted": row["deleted"].as_i64().unwrap_or(0),
        }));
    }
    Ok(rows)
}

/// Hours (`YYYY-MM-DDTHH`) the rows fall in, ascending.
fn hours_of(rows: &[Value]) -> Vec<String> {
    let mut hours: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r["time"]
                .as_str()
                .and_then(|t| t.get(..13))
                .map(str::to_string)
        })
        .collect();
    hours.sort_unstable();
    hours.dedup();
    hours
}

/// The hour after `hour` (`YYYY-MM-DDTHH`), as a timestamp literal.
fn hour_end(hour: &str) -> anyhow::Result<String> {
    let start = format!("{hour}:00:00Z");
    let micros = puffer_store::timestamp::parse_timestamp_micros(&start)
        .with_context(|| format!("hour {hour:?}"))?;
    Ok(puffer_store::timestamp::format_timestamp_micros(
        micros + 3_600_000_000,
    ))
}

/// Per chunk of `wiki`: its replicas, from a placement view.
fn chunk_replicas(view: &Value) -> Vec<u64> {
    view["shards"]
        .as_array()
        .map(|shards| {
            shards
                .iter()
                .filter(|s| s["table"].as_str().is_some_and(|t| t.starts_with("wiki__")))
                .filter_map(|s| s["replicas"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

struct RunOutcome {
    policy: String,
    latencies_ms: Vec<f64>,
    failed: u64,
    replicas_per_segment: Vec<f64>,
    total_replicas: Vec<f64>,
    segments: usize,
    /// Seconds measured (after the warm-up).
    measured_s: f64,
    /// CPU seconds each data node used while measured: the load the plan spreads.
    data_node_cpu_s: Vec<f64>,
}

impl RunOutcome {
    fn json(&self) -> Value {
        json!({
            "policy": self.policy,
            "segments": self.segments,
            "queries": self.latencies_ms.len(),
            "queries_per_s": round(self.latencies_ms.len() as f64 / self.measured_s.max(1e-9), 1),
            "data_node_cpu_s": self.data_node_cpu_s.iter().map(|&s| round(s, 2)).collect::<Vec<_>>(),
            // The busiest data node's CPU over the mean: 1 is perfectly balanced.
            "load_imbalance": round(
                self.data_node_cpu_s.iter().copied().fold(0.0, f64::max)
                    / mean(&self.data_node_cpu_s).max(1e-9),
                3,
            ),
            "failed": self.failed,
            "replicas_per_segment_median": quantile(&self.replicas_per_segment, 0.5),
            "replicas_per_segment_p99": quantile(&self.replicas_per_segment, 0.99),
            "total_replicas_median": quantile(&self.total_replicas, 0.5),
            "latency_mean_ms": round(mean(&self.latencies_ms), 3),
            "latency_p50_ms": round(quantile(&self.latencies_ms, 0.5), 3),
            "latency_p99_ms": round(quantile(&self.latencies_ms, 0.99), 3),
        })
    }
}

fn run_policy(
    args: &LoopbackArgs,
    puffer: &Path,
    rows: &[Value],
    hours: &[String],
    policy: &Policy,
) -> anyhow::Result<RunOutcome> {
    let dir = tempfile::tempdir()?;
    // Each node's log, kept after the run.
    let logs = args.out_dir.join("logs").join(&policy.name);
    let etcd = LocalEtcd::start(&dir.path().join("etcd"))?;
    let deep = dir.path().join("deep");
    let common = |roles: &str| -> Vec<String> {
        let mut flags: Vec<String> = [
            "--etcd",
            &etcd.endpoint(),
            "--deep-storage",
            deep.to_str().unwrap_or_default(),
            "--lease-ttl-s",
            "2",
            "--release-grace-s",
            "1",
            "--publish-interval-s",
            "1",
            // A third of the 3 s window, as Getafix's 20 s polls of 60 s windows.
            "--routing-poll-s",
            "1",
            "--roles",
            roles,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        flags.extend(policy.flags.iter().cloned());
        flags
    };
    let with_rpc = |roles: &str| -> anyhow::Result<Vec<String>> {
        let mut flags = common(roles);
        flags.push("--rpc-listen".into());
        flags.push(format!(
            "127.0.0.1:{}",
            puffer_cluster::etcd::local::free_port()?
        ));
        Ok(flags)
    };
    let leader = Node::start(
        puffer,
        dir.path(),
        &logs,
        "lead",
        &with_rpc("coordinator,ingest,indexer")?,
    )?;
    wait_for(Duration::from_secs(20), "the leader's election", || {
        get(&format!("{}/v1/admin/cluster", leader.base))
            .ok()
            .filter(|s| s["leads_ingest"] == json!(true))
    })?;
    let mut data = Vec::new();
    for n in 0..args.data_nodes {
        data.push(Node::start(
            puffer,
            dir.path(),
            &logs,
            &format!("d{n}"),
            &with_rpc("data")?,
        )?);
    }
    let broker = Node::start(puffer, dir.path(), &logs, "broker", &with_rpc("broker")?)?;
    let table = json!({"name": "wiki", "key": "id", "shards": 1,
        "attributes": [
            {"name": "time", "type": "timestamp"}, {"name": "channel", "type": "string"},
            {"name": "page", "type": "string"}, {"name": "user", "type": "string"},
            {"name": "added", "type": "int"}, {"name": "deleted", "type": "int"}],
        "partition_by": {"attribute": "time", "granularity": "hour"}});
    post(&format!("{}/v1/tables", leader.base), &table)?;
    for batch in rows.chunks(1000) {
        post(
            &format!("{}/v1/tables/wiki/records", leader.base),
            &Value::Array(batch.to_vec()),
        )?;
    }
    // Ready once every chunk is placed and the broker counts every row.
    let total = rows.len() as u64;
    let mut seen = String::from("nothing yet");
    let ready = wait_for(
        Duration::from_secs(120),
        "every chunk placed and readable",
        || {
            let view = match get(&format!("{}/v1/admin/placement", broker.base)) {
                Ok(view) => view,
                Err(e) => {
                    seen = format!("placement: {e}");
                    return None;
                }
            };
            let replicas = chunk_replicas(&view);
            seen = format!("{} of {} chunks placed", replicas.len(), hours.len());
            (replicas.len() >= hours.len() && replicas.iter().all(|&r| r >= 1)).then_some(())?;
            let answer = post(
                &format!("{}/v1/sql", broker.base),
                &json!({"query": "SELECT COUNT(*) FROM wiki"}),
            );
            seen = match &answer {
                Ok(answer) => format!(
                    "all placed; the broker counts {} of {total}",
                    answer["count"]
                ),
                Err(e) => format!("all placed; the broker's count failed: {e}"),
            };
            (answer.ok()?["count"].as_u64() == Some(total)).then_some(())
        },
    );
    if let Err(e) = ready {
        let holding: Vec<String> = data
            .iter()
            .map(|node| {
                get(&format!("{}/v1/admin/cluster", node.base))
                    .map(|s| {
                        format!(
                            "published {}, log tail {}, holding {}",
                            s["published"], s["log_tail"], s["holding"]
                        )
                    })
                    .unwrap_or_else(|e| e.to_string())
            })
            .collect();
        let members = get(&format!("{}/v1/admin/cluster", broker.base))
            .map(|s| format!("{}; its routing: {}", s["members"], s["reads"]))
            .unwrap_or_else(|e| e.to_string());
        bail!("{e} (last seen: {seen}; the data nodes' holding: {holding:?}; members seen by the broker: {members})");
    }

    // The workload: a count over the hours ending at the latest.
    let latest = hours.last().context("no hours")?.clone();
    let end = hour_end(&latest)?;
    let starts: Vec<String> = hours
        .iter()
        .rev()
        .take(args.max_hours)
        .map(|h| format!("{h}:00:00Z"))
        .collect();
    let interval = Arc::new(ZipfPrefix::new(starts.len(), args.interval_skew));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let warmup = Duration::from_secs(args.warmup_seconds);
    let samples: Arc<Mutex<(Vec<f64>, u64)>> = Arc::new(Mutex::new((Vec::new(), 0)));
    let mut clients = Vec::new();
    for client in 0..args.clients {
        let (stop, samples, interval) = (stop.clone(), samples.clone(), interval.clone());
        let (starts, end, url) = (
            starts.clone(),
            end.clone(),
            format!("{}/v1/sql", broker.base),
        );
        let seed = args.seed + client as u64;
        clients.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            while !stop.load(Ordering::Relaxed) {
                let hours = interval.draw(starts.len(), &mut rng);
                let sql = format!(
                    "SELECT COUNT(*) FROM wiki WHERE time >= '{}' AND time < '{end}' \
                     AND channel = '#en.wikipedia'",
                    starts[hours]
                );
                let asked = Instant::now();
                let answered = post(&url, &json!({"query": sql})).is_ok();
                let ms = asked.elapsed().as_secs_f64() * 1e3;
                if started.elapsed() >= warmup {
                    let mut samples = samples.lock().unwrap_or_else(|e| e.into_inner());
                    if answered {
                        samples.0.push(ms);
                    } else {
                        samples.1 += 1;
                    }
                }
            }
        }));
    }
    let (mut per_segment, mut totals) = (Vec::new(), Vec::new());
    let mut segments = 0;
    let cpu_of = |node: &Node| crate::stats::cpu_time(&node.child.id().to_string());
    let mut cpu_at_start: Option<Vec<Duration>> = None;
    while started.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(Duration::from_secs(1));
        if started.elapsed() < warmup {
            continue;
        }
        cpu_at_start.get_or_insert_with(|| data.iter().map(cpu_of).collect());
        if let Ok(view) = get(&format!("{}/v1/admin/placement", broker.base)) {
            let replicas = chunk_replicas(&view);
            segments = replicas.len();
            totals.push(replicas.iter().sum::<u64>() as f64);
            per_segment.extend(replicas.iter().map(|&r| r as f64));
        }
    }
    let (measured_s, data_node_cpu_s) = match &cpu_at_start {
        // Queries count from the warm-up's end; CPU from the first look after it.
        Some(cpu_before) => (
            started.elapsed().saturating_sub(warmup).as_secs_f64(),
            data.iter()
                .zip(cpu_before)
                .map(|(node, before)| cpu_of(node).saturating_sub(*before).as_secs_f64())
                .collect(),
        ),
        None => (0.0, Vec::new()),
    };
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.join();
    }
    let (mut latencies_ms, failed) =
        std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    ensure!(
        !latencies_ms.is_empty(),
        "{}: no query answered after the warm-up",
        policy.name
    );
    latencies_ms.sort_by(f64::total_cmp);
    per_segment.sort_by(f64::total_cmp);
    totals.sort_by(f64::total_cmp);
    drop((broker, data, leader));
    Ok(RunOutcome {
        policy: policy.name.clone(),
        latencies_ms,
        failed,
        replicas_per_segment: per_segment,
        total_replicas: totals,
        segments,
        measured_s,
        data_node_cpu_s,
    })
}

/// Runs every policy in turn and prints the table and the JSON.
pub fn run(args: &LoopbackArgs) -> anyhow::Result<()> {
    ensure!(
        args.input.exists(),
        "input {} not found (the shared data folder is ../shared/data)",
        args.input.display()
    );
    if LocalEtcd::binary().is_none() {
        bail!("no etcd binary: install Debian's etcd-server (or set PUFFER_ETCD_BIN)");
    }
    ensure!(
        (2..=8).contains(&args.data_nodes),
        "--data-nodes takes 2 to 8"
    );
    ensure!((1..=64).contains(&args.clients), "--clients takes 1 to 64");
    ensure!(
        args.seconds > args.warmup_seconds + 2 && args.seconds <= 3600,
        "--seconds is more than the warm-up plus 2, at most 3600"
    );
    ensure!(
        (1..=600).contains(&args.window_seconds),
        "--window-seconds takes 1 to 600"
    );
    ensure!(
        (1..=1000).contains(&args.max_hours),
        "--max-hours takes 1 to 1000"
    );
    ensure!(
        args.uniform
            .iter()
            .all(|&k| (1..=args.data_nodes).contains(&k)),
        "--uniform takes factors from 1 to the data nodes"
    );
    let puffer = std::env::current_exe()?
        .parent()
        .context("the bench's directory")?
        .join("puffer");
    if !puffer.exists() {
        bail!(
            "{} not found: build it first (cargo build --release -p puffer)",
            puffer.display()
        );
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let rows = read_rows(&args.input)?;
    let hours = hours_of(&rows);
    let window = args.window_seconds.to_string();
    let flags = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut policies = vec![
        Policy {
            name: "getafix".into(),
            flags: flags(&[
                "--popularity-window-s",
                &window,
                "--segment-replicas",
                "1",
                "--joint-work-budget",
                "0",
            ]),
        },
        Policy {
            name: "scarlett".into(),
            flags: flags(&[
                "--popularity-window-s",
                &window,
                "--segment-replicas",
                "1",
                "--placement-policy",
                "scarlett",
                "--joint-work-budget",
                "0",
            ]),
        },
    ];
    for &k in &args.uniform {
        policies.push(Policy {
            name: format!("uniform-{k}"),
            flags: flags(&[
                "--popularity-window-s",
                "0",
                "--segment-replicas",
                &k.to_string(),
            ]),
        });
    }
    if !args.policies.is_empty() {
        let known: Vec<String> = policies.iter().map(|p| p.name.clone()).collect();
        if let Some(unknown) = args.policies.iter().find(|p| !known.contains(p)) {
            bail!("--policies: no policy {unknown:?}; there are {known:?}");
        }
        policies.retain(|p| args.policies.contains(&p.name));
    }
    println!(
        "Getafix on a loopback cluster: {} data nodes, a broker, {} rows of wikiticker in {} \
         hourly chunks; {} clients, {} s per policy ({} s warm-up), {} s windows",
        args.data_nodes,
        rows.len(),
        hours.len(),
        args.clients,
        args.seconds,
        args.warmup_seconds,
        args.window_seconds
    );
    let mut outcomes = Vec::new();
    for policy in &policies {
        eprintln!("running {} ...", policy.name);
        outcomes.push(run_policy(args, &puffer, &rows, &hours, policy)?);
    }
    println!(
        "\n{:<12} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7}",
        "policy",
        "segments",
        "repl p50",
        "repl p99",
        "total",
        "queries/s",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "imbalance",
        "failed"
    );
    let mut csv = String::from(
        "policy,segments,queries,queries_per_s,failed,replicas_per_segment_median,\
         replicas_per_segment_p99,total_replicas_median,latency_mean_ms,latency_p50_ms,\
         latency_p99_ms,load_imbalance\n",
    );
    for outcome in &outcomes {
        let j = outcome.json();
        // JSON values print their text only: widths apply to strings.
        let cell = |name: &str| j[name].to_string();
        println!(
            "{:<12} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8} {:>10} {:>7}",
            outcome.policy,
            cell("segments"),
            cell("replicas_per_segment_median"),
            cell("replicas_per_segment_p99"),
            cell("total_replicas_median"),
            cell("queries_per_s"),
            cell("latency_mean_ms"),
            cell("latency_p50_ms"),
            cell("latency_p99_ms"),
            cell("load_imbalance"),
            cell("failed")
        );
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}\n",
            outcome.policy,
            j["segments"],
            j["queries"],
            j["queries_per_s"],
            j["failed"],
            j["replicas_per_segment_median"],
            j["replicas_per_segment_p99"],
            j["total_replicas_median"],
            j["latency_mean_ms"],
            j["latency_p50_ms"],
            j["latency_p99_ms"],
            j["load_imbalance"]
        ));
    }
    let csv_path = args.out_dir.join("loopback.csv");
    std::fs::write(&csv_path, csv)?;
    println!("(CSV: {})", csv_path.display());
    println!(
        "{}",
        json!({
            "experiment": "getafix-cluster",
            "data_nodes": args.data_nodes,
            "clients": args.clients,
            "seconds": args.seconds,
            "warmup_seconds": args.warmup_seconds,
            "window_seconds": args.window_seconds,
            "rows": rows.len(),
            "hours": hours.len(),
            "policies": outcomes.iter().map(RunOutcome::json).collect::<Vec<_>>(),
        })
    );
    Ok(())
}
