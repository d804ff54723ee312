//! LazyBase's consistency experiment against a running server: rows `a` and `b` of a
//! sharded, replicated table (in different shards) and a counter `c` in a one-shard
//! table with several replicas; one writer sets (a, b, c) = (i, -i, i) as one SCU over
//! both tables (`POST /v1/batches`); readers alternate an `IN` query over a and b and a
//! GET of c. A violation is a read with a + b != 0 (half an SCU), or a snapshot, pair
//! or counter smaller than the same reader saw before (monotonic reads).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::stats::{quantile_us, round};

/// Options of `puffer-bench consistency`.
#[derive(clap::Args, Debug)]
pub struct ConsistencyArgs {
    /// The server, e.g. http://127.0.0.1:7878.
    #[arg(long)]
    url: String,
    /// Seconds of measurement.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Reader threads.
    #[arg(long, default_value_t = 3)]
    readers: usize,
    /// Shards of the pair table (a and b must land in different shards: at least 2).
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Replicas of each shard of the pair table and of the counter table.
    #[arg(long, default_value_t = 2)]
    replicas: u32,
}

#[derive(Default)]
struct ReaderTally {
    sql_reads: u64,
    get_reads: u64,
    half_pairs: u64,
    went_back: u64,
    examples: Vec<String>,
    latencies: Vec<Duration>,
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

fn post(agent: &ureq::Agent, url: &str, body: &Value) -> anyhow::Result<Value> {
    let response = agent
        .post(url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string());
    match response {
        Ok(response) => Ok(response.into_json()?),
        Err(ureq::Error::Status(status, response)) => {
            bail!("{url}: status {status}: {}", response.into_string()?)
        }
        Err(e) => bail!("{url}: {e}"),
    }
}

/// Runs the experiment and prints the table and the JSON line.
pub fn run(args: &ConsistencyArgs) -> anyhow::Result<()> {
    if args.shards < 2 || args.readers == 0 || args.seconds == 0 {
        bail!("--shards must be at least 2, --readers and --seconds at least 1");
    }
    let base = args.url.trim_end_matches('/').to_string();
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let (pairs, counter) = (format!("pairs_{suffix}"), format!("counter_{suffix}"));
    // Keys whose shards differ (fnv1a64 mod shards, as the server places them).
    let keys = (0..1000).map(|i| format!("k{i}")).collect::<Vec<_>>();
    let a = keys[0].clone();
    let b = keys
        .iter()
        .find(|k| {
            puffer_node::table::shard_of(k.as_bytes(), args.shards)
                != puffer_node::table::shard_of(a.as_bytes(), args.shards)
        })
        .context("no two keys in different shards")?
        .clone();
    let admin = agent();
    for (name, shards) in [(&pairs, args.shards), (&counter, 1)] {
        post(
            &admin,
            &format!("{base}/v1/tables"),
            &json!({"name": name, "key": "id", "attributes": [{"name": "v", "type": "int"}],
                    "shards": shards, "replicas": args.replicas}),
        )?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let (written, write_latencies, tallies) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| -> anyhow::Result<(i64, Vec<Duration>)> {
            let agent = agent();
            let mut i = 0i64;
            let mut latencies = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let batch = json!({"operations": [
                    {"table": pairs, "put": {"id": a, "v": i}},
                    {"table": pairs, "put": {"id": b, "v": -i}},
                    {"table": counter, "put": {"id": "c", "v": i}},
                ]});
                let sent = Instant::now();
                post(&agent, &format!("{base}/v1/batches"), &batch)?;
                latencies.push(sent.elapsed());
            }
            Ok((i, latencies))
        });
        let tally = Arc::new(Mutex::new(ReaderTally::default()));
        let readers: Vec<_> = (0..args.readers)
            .map(|_| {
                let (stop, tally) = (stop.clone(), tally.clone());
                let (base, pairs, counter, a, b) = (&base, &pairs, &counter, &a, &b);
                scope.spawn(move || read(base, pairs, counter, a, b, &stop, &tally))
            })
            .collect();
        std::thread::sleep(Duration::from_secs(args.seconds));
        stop.store(true, Ordering::SeqCst);
        let written = writer.join().expect("writer panicked");
        for reader in readers {
            reader.join().expect("reader panicked")?;
        }
        let (written, latencies) = written?;
        let tally = Arc::try_unwrap(tally)
            .ok()
            .expect("readers are done")
            .into_inner()
            .expect("tally lock");
        anyhow::Ok((written, latencies, tally))
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    report(args, elapsed, written, write_latencies, tallies);
    for name in [&pairs, &counter] {
        let _ = admin.delete(&format!("{base}/v1/tables/{name}")).call();
    }
    Ok(())
}

fn read(
    base: &str,
    pairs: &str,
    counter: &str,
    a: &str,
    b: &str,
    stop: &AtomicBool,
    tally: &Mutex<ReaderTally>,
) -> anyhow::Result<()> {
    let agent = agent();
    let sql = json!({"query": format!("SELECT id, v FROM {pairs} WHERE id IN ('{a}', '{b}')")});
    let (mut last_snapshot, mut last_pair, mut last_counter) = (0u64, 0i64, 0i64);
    let mut turn = 0u64;
    let mut local = ReaderTally::default();
    while !stop.load(Ordering::SeqCst) {
        turn += 1;
        let sent = Instant::now();
        let mut problems = Vec::new();
        let snapshot = if turn.is_multiple_of(2) {
            let body = post(&agent, &format!("{base}/v1/sql"), &sql)?;
            let rows = body["rows"].as_array().cloned().unwrap_or_default();
            let value = |key: &str| {
                rows.iter()
                    .find(|r| r["id"] == key)
                    .and_then(|r| r["v"].as_i64())
                    .unwrap_or(0)
            };
            let (va, vb) = (value(a), value(b));
            if va + vb != 0 {
                local.half_pairs += 1;
                problems.push(format!("a={va} b={vb}"));
            }
            if va < last_pair {
                local.went_back += 1;
                problems.push(format!("pair {last_pair} -> {va}"));
            }
            last_pair = va;
            local.sql_reads += 1;
            body["snapshot"]["seq"].as_u64().unwrap_or(0)
        } else {
            let answer = agent
                .get(&format!("{base}/v1/tables/{counter}/records/c"))
                .call();
            let body: Value = match answer {
                Ok(response) => response.into_json()?,
                Err(ureq::Error::Status(404, response)) => response.into_json()?,
                Err(e) => bail!("get: {e}"),
            };
            let value = body["record"]["v"].as_i64().unwrap_or(0);
            if value < last_counter {
                local.went_back += 1;
                problems.push(format!("counter {last_counter} -> {value}"));
            }
            last_counter = value;
            local.get_reads += 1;
            body["snapshot"]["seq"].as_u64().unwrap_or(0)
        };
        if snapshot < last_snapshot {
            local.went_back += 1;
            problems.push(format!("snapshot {last_snapshot} -> {snapshot}"));
        }
        last_snapshot = snapshot;
        local.latencies.push(sent.elapsed());
        if local.examples.len() < 5 {
            local.examples.extend(problems);
        }
    }
    let mut tally = tally.lock().expect("tally lock");
    tally.sql_reads += local.sql_reads;
    tally.get_reads += local.get_reads;
    tally.half_pairs += local.half_pairs;
    tally.went_back += local.went_back;
    tally.latencies.extend(local.latencies);
    for example in local.examples {
        if tally.examples.len() < 5 {
            tally.examples.push(example);
        }
    }
    Ok(())
}

fn report(
    args: &ConsistencyArgs,
    elapsed: f64,
    written: i64,
    mut write_latencies: Vec<Duration>,
    mut tally: ReaderTally,
) {
    let reads = tally.sql_reads + tally.get_reads;
    let violations = tally.half_pairs + tally.went_back;
    let figures = json!({
        "experiment": "consistency",
        "url": args.url,
        "seconds": round(elapsed, 2),
        "shards": args.shards,
        "replicas": args.replicas,
        "readers": args.readers,
        "scus_written": written,
        "scus_per_s": round(written as f64 / elapsed, 1),
        "write_p50_us": round(quantile_us(&mut write_latencies, 0.5), 1),
        "write_p99_us": round(quantile_us(&mut write_latencies, 0.99), 1),
        "reads": reads,
        "sql_reads": tally.sql_reads,
        "get_reads": tally.get_reads,
        "reads_per_s": round(reads as f64 / elapsed, 1),
        "read_p50_us": round(quantile_us(&mut tally.latencies, 0.5), 1),
        "read_p99_us": round(quantile_us(&mut tally.latencies, 0.99), 1),
        "half_pair_violations": tally.half_pairs,
        "monotonic_violations": tally.went_back,
        "violations": violations,
        "examples": tally.examples,
    });
    println!(
        "consistency experiment against {} ({:.1} s)",
        args.url, elapsed
    );
    println!(
        "  SCUs written     {written:>10}  ({:.0}/s)",
        written as f64 / elapsed
    );
    println!(
        "  reads            {reads:>10}  ({:.0}/s; {} SQL IN, {} GET)",
        reads as f64 / elapsed,
        tally.sql_reads,
        tally.get_reads
    );
    println!("  half pairs       {:>10}", tally.half_pairs);
    println!("  reads going back {:>10}", tally.went_back);
    println!("{figures}");
}
