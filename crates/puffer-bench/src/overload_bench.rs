//! `puffer-bench overload`: a `puffer serve` of its own (target/release/puffer) taken to
//! ten times the requests it serves at once, then back. Three phases of mixed traffic
//! (gets, SQL counts and range searches on a table `t`, one-record puts to a table `w`),
//! each client a thread on a
//! keep-alive connection that sends its next request as soon as it has an answer:
//! 1. normal: as many clients as the server serves at once (its capacity, measured);
//! 2. overload: ten times as many, plus as many slow clients sending bodies a byte a
//!    second; every answer must be 200 or a refusal (429/503 with `Retry-After`, 408 for
//!    the slow bodies), its time and the server's resident memory are recorded;
//! 3. recovery: the normal load again, counted in 250 ms windows from the moment the
//!    overload stopped, until a window serves 90 % of the normal rate.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::served::Served;
use crate::stats::{quantile_us, round};

#[derive(clap::Args)]
pub struct OverloadArgs {
    /// Requests the server serves at once (`max_concurrent_requests`); the normal load has
    /// this many clients and the overload ten times as many.
    #[arg(long, default_value_t = 16)]
    concurrent: usize,
    /// Connections the server holds at once (`max_connections`).
    #[arg(long, default_value_t = 128)]
    connections: usize,
    /// Records in the table the traffic reads and writes.
    #[arg(long, default_value_t = 50_000)]
    records: usize,
    /// Seconds of each of the normal and overload phases.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Longest the recovery phase runs, in seconds.
    #[arg(long, default_value_t = 30)]
    max_recovery_seconds: u64,
    /// Where the server keeps its data (a temporary directory by default).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Overload clients wait as long as a refusal's `Retry-After` says before their next
    /// request (by default they ask again at once, the worst case).
    #[arg(long)]
    honor_retry_after: bool,
}

/// What one phase saw.
#[derive(Default)]
struct Tally {
    served: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
    failures: Mutex<Vec<String>>,
    latencies: Mutex<Vec<Duration>>,
}

/// The server under test, with the bounds `args` give it.
fn start_server(puffer: &Path, data: &Path, args: &OverloadArgs) -> anyhow::Result<Served> {
    let env = [
        (
            "PUFFER_MAX_CONCURRENT_REQUESTS",
            args.concurrent.to_string(),
        ),
        ("PUFFER_MAX_CONNECTIONS", args.connections.to_string()),
        ("PUFFER_BODY_TIMEOUT_S", "5".to_string()),
    ];
    Served::start(puffer, data, &env)
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

/// One request of the mix; its status and whether it carried `Retry-After`, or what
/// went wrong: a transport error, or a 200 whose answer is not the table's. `t` is never
/// written after the load, so every read has one right answer: record `k{i}` is
/// `{city: c{i % 100}, n: i}`.
fn call(
    agent: &ureq::Agent,
    base: &str,
    records: usize,
    rng: &mut StdRng,
) -> Result<(u16, bool), String> {
    let index = rng.gen_range(0..records);
    let key = format!("k{index:07}");
    let city = rng.gen_range(0..100);
    let low = rng.gen_range(0..records);
    let operation = rng.gen_range(0..4);
    let result = match operation {
        0 => agent
            .get(&format!("{base}/v1/tables/t/records/{key}"))
            .call(),
        1 => agent
            .post(&format!("{base}/v1/sql"))
            .send_json(json!({"query": format!("SELECT COUNT(*) FROM t WHERE city = 'c{city}'")})),
        2 => agent.post(&format!("{base}/v1/tables/t/search")).send_json(
            json!({"where": {"range": {"n": {"gte": low, "lt": low + 500}}}, "limit": 100}),
        ),
        // Writes go to a table of their own: on `t` they would grow its log table, and
        // every read's cost with it, so no two phases would see the same server.
        _ => agent
            .post(&format!("{base}/v1/tables/w/records"))
            .send_json(json!([{"id": key, "city": "c1", "n": 1}])),
    };
    let response = match result {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let retry_after = response.header("retry-after").is_some();
            let _ = response.into_string();
            return Ok((status, retry_after));
        }
        Err(e) => return Err(e.to_string()),
    };
    let answer: Value = response.into_json().map_err(|e| format!("not JSON: {e}"))?;
    let loaded = |record: &Value, n: u64| {
        *record == json!({"id": format!("k{n:07}"), "city": format!("c{}", n % 100), "n": n})
    };
    let right = match operation {
        0 => loaded(&answer["record"], index as u64),
        // Records c, c + 100, c + 200, ... below `records`.
        1 => answer["count"] == json!(records.saturating_sub(city).div_ceil(100)),
        // `limit` of the matches, which ones unspecified (there is no ORDER BY).
        2 => answer["rows"].as_array().is_some_and(|rows| {
            let range = low as u64..(low + 500).min(records) as u64;
            rows.len() as u64 == (range.end - range.start).min(100)
                && rows.iter().all(|row| {
                    row["n"]
                        .as_u64()
                        .is_some_and(|n| range.contains(&n) && loaded(row, n))
                })
        }),
        _ => answer["seq"].as_u64().is_some(),
    };
    if !right {
        return Err(format!("operation {operation} answered {answer}"));
    }
    Ok((200, false))
}

/// Starts `clients` threads of mixed traffic counting into `tally` until `stop`.
fn clients(
    count: usize,
    seed: u64,
    base: &str,
    records: usize,
    honor_retry_after: bool,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let (tally, stop, base) = (tally.clone(), stop.clone(), base.to_string());
            thread::spawn(move || {
                let agent = agent();
                let mut rng = StdRng::seed_from_u64(seed + i as u64);
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let outcome = call(&agent, &base, records, &mut rng);
                    latencies.push(started.elapsed());
                    match outcome {
                        Ok((200, _)) => tally.served.fetch_add(1, Ordering::Relaxed),
                        Ok((429 | 503, true)) => {
                            if honor_retry_after {
                                // Every refusal says `Retry-After: 1`.
                                thread::sleep(Duration::from_secs(1));
                            }
                            tally.refused.fetch_add(1, Ordering::Relaxed)
                        }
                        other => {
                            tally
                                .failures
                                .lock()
                                .expect("lock")
                                .push(format!("{other:?}"));
                            0
                        }
                    };
                }
                tally.latencies.lock().expect("lock").extend(latencies);
            })
        })
        .collect()
}

/// Starts `count` threads that send bodies a byte a second until `stop`, counting their
/// 408 answers.
fn slow_clients(
    count: usize,
    authority: &str,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    (0..count)
        .map(|_| {
            let (tally, stop, authority) = (tally.clone(), stop.clone(), authority.to_string());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut stream) = TcpStream::connect(&authority) else {
                        thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(1000)));
                    let head = format!(
                        "POST /v1/sql HTTP/1.1\r\nhost: {authority}\r\ncontent-length: 1000\r\n\r\n"
                    );
                    if stream.write_all(head.as_bytes()).is_err() {
                        continue;
                    }
                    let mut answer = [0u8; 512];
                    loop {
                        if stop.load(Ordering::Relaxed) || stream.write_all(b" ").is_err() {
                            break;
                        }
                        match std::io::Read::read(&mut stream, &mut answer) {
                            Ok(0) => break,
                            Ok(n) => {
                                if answer[..n].starts_with(b"HTTP/1.1 408") {
                                    tally.timed_out.fetch_add(1, Ordering::Relaxed);
                                }
                                break;
                            }
                            Err(_) => {}
                        }
                    }
                }
            })
        })
        .collect()
}

/// Waits until every record loaded is in compressed segments (up to a minute), so that
/// no phase pays for the compaction of the load.
fn wait_compressed(agent: &ureq::Agent, base: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let table: Value = agent
            .get(&format!("{base}/v1/tables/t"))
            .call()?
            .into_json()?;
        let marks = &table["watermarks"];
        if marks["compressed"] == marks["published"] {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the load was not compressed within a minute: {marks}");
        }
        thread::sleep(Duration::from_millis(200));
    }
}

fn join(handles: Vec<thread::JoinHandle<()>>) {
    for handle in handles {
        let _ = handle.join();
    }
}

/// Requests served a second in a phase's tally over `seconds`.
fn rate(tally: &Tally, seconds: f64) -> f64 {
    tally.served.load(Ordering::Relaxed) as f64 / seconds
}

fn latency_ms(tally: &Tally) -> (f64, f64, f64) {
    let mut latencies = tally.latencies.lock().expect("lock");
    let p50 = quantile_us(&mut latencies, 0.5) / 1e3;
    let p99 = quantile_us(&mut latencies, 0.99) / 1e3;
    let max = latencies.iter().max().copied().unwrap_or_default();
    (
        round(p50, 2),
        round(p99, 2),
        round(max.as_secs_f64() * 1e3, 1),
    )
}

pub fn run(args: &OverloadArgs) -> anyhow::Result<()> {
    ensure!(
        (1..=256).contains(&args.concurrent),
        "--concurrent takes 1 to 256"
    );
    ensure!(
        args.connections > args.concurrent,
        "--connections must exceed --concurrent"
    );
    ensure!(
        (1..=10_000_000).contains(&args.records),
        "--records takes 1 to 10,000,000"
    );
    ensure!(
        (1..=3600).contains(&args.seconds),
        "--seconds takes 1 to 3600"
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
    let temporary = tempfile::tempdir()?;
    let data = args.data.clone().unwrap_or_else(|| temporary.path().into());
    let server = start_server(&puffer, &data, args)?;
    let base = server.base.clone();
    let agent = agent();
    agent
        .post(&format!("{base}/v1/sql"))
        .send_json(json!({"query": "CREATE TABLE t (id TEXT PRIMARY KEY, city TEXT, n INT)"}))
        .context("creating the table")?;
    agent
        .post(&format!("{base}/v1/sql"))
        .send_json(json!({"query": "CREATE TABLE w (id TEXT PRIMARY KEY, city TEXT, n INT)"}))
        .context("creating the table of writes")?;
    for chunk in (0..args.records).collect::<Vec<_>>().chunks(10_000) {
        let batch: Vec<Value> = chunk
            .iter()
            .map(|&i| json!({"id": format!("k{i:07}"), "city": format!("c{}", i % 100), "n": i}))
            .collect();
        agent
            .post(&format!("{base}/v1/tables/t/records"))
            .send_json(Value::Array(batch))
            .context("loading the table")?;
    }
    wait_compressed(&agent, &base)?;
    // Warm-up: the same traffic, not counted (caches and the layer manager settle).
    let warmup = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handles = clients(
        args.concurrent,
        9000,
        &base,
        args.records,
        false,
        &warmup,
        &stop,
    );
    thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    join(handles);
    let rss_loaded = server.status_bytes("VmRSS:");
    let seconds = args.seconds as f64;

    // 1. Normal load.
    let normal = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handles = clients(
        args.concurrent,
        1,
        &base,
        args.records,
        false,
        &normal,
        &stop,
    );
    thread::sleep(Duration::from_secs(args.seconds));
    stop.store(true, Ordering::Relaxed);
    join(handles);
    let capacity = rate(&normal, seconds);

    // 2. Ten times the load, and slow bodies.
    let overload = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let authority = base.trim_start_matches("http://").to_string();
    let mut handles = clients(
        args.concurrent * 10,
        1000,
        &base,
        args.records,
        args.honor_retry_after,
        &overload,
        &stop,
    );
    handles.extend(slow_clients(args.concurrent, &authority, &overload, &stop));
    let started = Instant::now();
    let mut rss_peak = 0;
    while started.elapsed() < Duration::from_secs(args.seconds) {
        rss_peak = rss_peak.max(server.status_bytes("VmRSS:"));
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let overload_seconds = started.elapsed().as_secs_f64();
    join(handles);

    // 3. Recovery: the normal load again, from the moment the overload stopped.
    let recovery = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let handles = clients(
        args.concurrent,
        5000,
        &base,
        args.records,
        false,
        &recovery,
        &stop,
    );
    let window = Duration::from_millis(250);
    let mut recovered_after_s = None;
    let mut window_rates = Vec::new();
    let mut last = 0;
    let recovery_started = Instant::now();
    while recovery_started.elapsed() < Duration::from_secs(args.max_recovery_seconds) {
        thread::sleep(window);
        let served = recovery.served.load(Ordering::Relaxed);
        let window_rate = (served - last) as f64 / window.as_secs_f64();
        last = served;
        window_rates.push(round(window_rate, 0));
        if window_rate >= 0.9 * capacity {
            recovered_after_s = Some(round(recovery_started.elapsed().as_secs_f64(), 2));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    join(handles);

    let failures: Vec<String> = [&normal, &overload, &recovery]
        .iter()
        .flat_map(|tally| tally.failures.lock().expect("lock").clone())
        .collect();
    let (normal_p50, normal_p99, normal_max) = latency_ms(&normal);
    let (over_p50, over_p99, over_max) = latency_ms(&overload);
    let offered = (overload.served.load(Ordering::Relaxed)
        + overload.refused.load(Ordering::Relaxed)) as f64
        / overload_seconds;
    let report = json!({
        "experiment": "overload",
        "records": args.records,
        "max_concurrent_requests": args.concurrent,
        "max_connections": args.connections,
        "overload_clients_honor_retry_after": args.honor_retry_after,
        "normal": {"clients": args.concurrent, "served_per_s": round(capacity, 0),
                   "p50_ms": normal_p50, "p99_ms": normal_p99, "max_ms": normal_max},
        "overload": {"clients": args.concurrent * 10, "slow_clients": args.concurrent,
                     "answers_per_s": round(offered, 0),
                     "served_per_s": round(rate(&overload, overload_seconds), 0),
                     "refused": overload.refused.load(Ordering::Relaxed),
                     "slow_bodies_answered_408": overload.timed_out.load(Ordering::Relaxed),
                     "p50_ms": over_p50, "p99_ms": over_p99, "max_ms": over_max,
                     "rss_loaded_mib": rss_loaded >> 20, "rss_peak_mib": rss_peak >> 20},
        "recovered_after_s": recovered_after_s,
        "recovery_served_per_s_by_250ms": window_rates,
        "recovery_refused": recovery.refused.load(Ordering::Relaxed),
        "unexpected_answers": failures.len(),
        "unexpected_examples": failures.iter().take(5).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    println!();
    println!("| phase | clients | served/s | answers/s | p50 ms | p99 ms | max ms | RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| normal | {} | {:.0} | {:.0} | {normal_p50} | {normal_p99} | {normal_max} | {} |",
        args.concurrent,
        capacity,
        capacity,
        rss_loaded >> 20
    );
    println!(
        "| 10x + {} slow | {} | {:.0} | {:.0} | {over_p50} | {over_p99} | {over_max} | {} (peak) |",
        args.concurrent,
        args.concurrent * 10,
        rate(&overload, overload_seconds),
        offered,
        rss_peak >> 20
    );
    println!(
        "recovered to 90 % of the normal rate after: {}; answers neither 200 nor a refusal: {}",
        recovered_after_s.map_or("not within the limit".to_string(), |s| format!("{s} s")),
        failures.len()
    );
    Ok(())
}
