//! `puffer-bench answers`: large answers over HTTP, in every format, from one or more
//! `puffer` binaries in alternation (to compare a change with the code before it). The
//! hotel bookings are loaded once into a data directory (`puffer load`); in each round,
//! every query in JSON, JSON Lines, CSV and Arrow is asked of a fresh server of each
//! binary in turn (after one warm-up count), measuring the time to the first byte of
//! the body, the time to its last byte, its size, and the server's peak resident
//! memory during the answer beyond what it held before (the kernel's high-water mark,
//! reset before the request). Every answer
//! is checked: its row count against the expected one, and its rows against the first
//! server's answer in the same format (snapshot ages aside).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};

use crate::served::Served;
use crate::stats::round;

#[derive(clap::Args)]
pub struct AnswersArgs {
    /// The `puffer` binaries to compare, in alternation (default: the one beside this
    /// bench, target/release/puffer).
    #[arg(long = "server", value_name = "PATH")]
    servers: Vec<PathBuf>,
    /// The hotel bookings CSV (gzip allowed); keyed by row number.
    #[arg(long, default_value = "../shared/data/hotel_bookings.csv.gz")]
    bookings: PathBuf,
    /// Rounds; each server answers every query in every format once per round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The queries: the direct path's whole table and a narrow selection, and DataFusion's
/// sorted whole table.
const QUERIES: &[(&str, &str)] = &[
    ("select-all", "SELECT * FROM bookings"),
    (
        "select-narrow",
        "SELECT hotel, arrival_date_year, adr FROM bookings WHERE country = 'PRT'",
    ),
    (
        "order-by-all",
        "SELECT * FROM bookings ORDER BY adr DESC, row_number",
    ),
];

const FORMATS: &[&str] = &["json", "jsonl", "csv", "arrow"];

/// Rows an answer may hold (the server's `max_result_rows`): every booking.
const MAX_RESULT_ROWS: usize = 200_000;

/// One answer as measured.
struct Measured {
    first_byte_ms: f64,
    total_ms: f64,
    bytes: usize,
    peak_extra_bytes: u64,
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

fn ask(
    agent: &ureq::Agent,
    server: &Served,
    query: &str,
    format: &str,
) -> anyhow::Result<Measured> {
    server.reset_peak_memory()?;
    let before = server.status_bytes("VmRSS:");
    let started = Instant::now();
    let response = match agent
        .post(&format!("{}/v1/sql", server.base))
        .send_json(json!({"query": query, "format": format}))
    {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let body = response.into_string().unwrap_or_default();
            bail!("{query} as {format}: {status} {body}")
        }
        Err(error) => return Err(error).with_context(|| format!("{query} as {format}")),
    };
    let headers = response
        .headers_names()
        .into_iter()
        .filter(|name| name.starts_with("x-puffer-") && name != "x-puffer-snapshot-age-ms")
        .filter_map(|name| Some((name.clone(), response.header(&name)?.to_string())))
        .collect();
    let mut reader = response.into_reader();
    let mut body = vec![0u8; 1];
    let first = reader.read(&mut body)?;
    let first_byte = started.elapsed();
    body.truncate(first);
    reader.read_to_end(&mut body)?;
    let total = started.elapsed();
    let peak = server.status_bytes("VmHWM:");
    Ok(Measured {
        first_byte_ms: first_byte.as_secs_f64() * 1000.0,
        total_ms: total.as_secs_f64() * 1000.0,
        bytes: body.len(),
        peak_extra_bytes: peak.saturating_sub(before),
        body,
        headers,
    })
}

/// An answer's rows in a form to compare across servers, and how many there are:
/// JSON rows as values (object keys in any order), CSV as its text, Arrow as its
/// values; snapshot ages left out.
fn rows_of(format: &str, body: &[u8]) -> anyhow::Result<(usize, String)> {
    Ok(match format {
        "json" => {
            let mut answer: Value = serde_json::from_slice(body)?;
            let rows = answer["rows"].take();
            let count = rows.as_array().context("no rows")?.len();
            ensure!(answer["truncated"] == json!(false), "the answer was cut");
            (count, rows.to_string())
        }
        "jsonl" => {
            let text = std::str::from_utf8(body)?;
            let mut lines: Vec<Value> = text
                .lines()
                .map(serde_json::from_str)
                .collect::<Result<_, _>>()?;
            let tail = lines.pop().context("no tail line")?;
            ensure!(tail["truncated"] == json!(false), "the answer was cut");
            (lines.len(), Value::Array(lines).to_string())
        }
        "csv" => {
            let text = String::from_utf8(body.to_vec())?;
            // Rows, not lines: quoted fields may hold line breaks (none do here).
            let count = text.lines().count().saturating_sub(1);
            (count, text)
        }
        "arrow" => {
            let (_, batches) = puffer_analytics::convert::read_ipc_stream(body)?;
            let rows = puffer_analytics::convert::rows_of(&batches)?;
            (rows.len(), format!("{rows:?}"))
        }
        other => bail!("unknown format {other}"),
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n => values[n / 2],
    }
}

pub fn run(args: &AnswersArgs) -> anyhow::Result<()> {
    ensure!((1..=100).contains(&args.rounds), "--rounds takes 1 to 100");
    let beside = std::env::current_exe()?
        .parent()
        .context("the bench's directory")?
        .join("puffer");
    let servers = match args.servers.is_empty() {
        true => vec![beside],
        false => args.servers.clone(),
    };
    for server in &servers {
        ensure!(
            server.exists(),
            "{} not found: build it first (cargo build --release -p puffer)",
            server.display()
        );
    }
    if !args.bookings.exists() {
        bail!(
            "{} not found: the bench needs the hotel bookings (../shared/data)",
            args.bookings.display()
        );
    }
    let data = tempfile::tempdir()?;
    let status = Command::new(&servers[0])
        .args(["load", "bookings", "--key-row-number", "--data"])
        .arg(data.path())
        .arg(&args.bookings)
        .stdout(Stdio::null())
        .status()
        .context("loading the bookings")?;
    ensure!(status.success(), "puffer load failed: {status}");
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build();
    // (server, query, format) -> measurements; and the first server's rows.
    let mut figures: Vec<Vec<Vec<Vec<Measured>>>> = Vec::new();
    let mut expected: Vec<Vec<Option<(usize, String)>>> =
        vec![vec![None; FORMATS.len()]; QUERIES.len()];
    let mut counts: Vec<Option<usize>> = vec![None; QUERIES.len()];
    for _ in &servers {
        figures.push(
            (0..QUERIES.len())
                .map(|_| (0..FORMATS.len()).map(|_| Vec::new()).collect())
                .collect(),
        );
    }
    let env = [("PUFFER_MAX_RESULT_ROWS", MAX_RESULT_ROWS.to_string())];
    for round in 0..args.rounds {
        for (q, (name, query)) in QUERIES.iter().enumerate() {
            for (f, format) in FORMATS.iter().enumerate() {
                for (s, binary) in servers.iter().enumerate() {
                    // A fresh server for each answer: memory an allocator kept from an
                    // earlier answer would hide this one's peak.
                    let server = Served::start(binary, data.path(), &env)?;
                    // The first request pays for opening segments: a warm-up.
                    ask(&agent, &server, "SELECT COUNT(*) FROM bookings", "json")?;
                    let mut measured = ask(&agent, &server, query, format)?;
                    drop(server);
                    let (count, rows) = rows_of(format, &measured.body)
                        .with_context(|| format!("{name} as {format} from {}", binary.display()))?;
                    let want_count = *counts[q].get_or_insert(count);
                    ensure!(
                        count == want_count,
                        "{name} as {format} from {}: {count} rows, another answer had {want_count}",
                        binary.display()
                    );
                    match &expected[q][f] {
                        None => expected[q][f] = Some((count, rows)),
                        Some((_, want)) => ensure!(
                            *want == rows,
                            "{name} as {format} from {} (round {round}): rows differ from {}'s",
                            binary.display(),
                            servers[0].display()
                        ),
                    }
                    measured.body = Vec::new();
                    figures[s][q][f].push(measured);
                }
            }
        }
    }
    println!(
        "{:<8} {:<14} {:<6} {:>8} {:>10} {:>14} {:>10} {:>12}",
        "server", "query", "format", "rows", "MB", "first byte ms", "total ms", "peak +MiB"
    );
    let mut rows_json = Vec::new();
    for (s, binary) in servers.iter().enumerate() {
        for (q, (name, _)) in QUERIES.iter().enumerate() {
            for (f, format) in FORMATS.iter().enumerate() {
                let runs = &figures[s][q][f];
                let first = median(&mut runs.iter().map(|m| m.first_byte_ms).collect::<Vec<_>>());
                let total = median(&mut runs.iter().map(|m| m.total_ms).collect::<Vec<_>>());
                let peak = median(
                    &mut runs
                        .iter()
                        .map(|m| m.peak_extra_bytes as f64 / (1 << 20) as f64)
                        .collect::<Vec<_>>(),
                );
                let megabytes = runs[0].bytes as f64 / 1e6;
                let rows = counts[q].unwrap_or(0);
                println!(
                    "{:<8} {:<14} {:<6} {:>8} {:>10.1} {:>14.1} {:>10.1} {:>12.1}",
                    format!("#{s}"),
                    name,
                    format,
                    rows,
                    megabytes,
                    first,
                    total,
                    peak
                );
                rows_json.push(json!({
                    "server": binary.display().to_string(),
                    "query": name,
                    "format": format,
                    "rows": rows,
                    "bytes": runs[0].bytes,
                    "headers": runs[0].headers.iter().map(|(n, v)| format!("{n}: {v}")).collect::<Vec<_>>(),
                    "first_byte_ms_p50": round(first, 1),
                    "total_ms_p50": round(total, 1),
                    "peak_extra_mib_p50": round(peak, 1),
                }));
            }
        }
    }
    for (s, binary) in servers.iter().enumerate() {
        println!("#{s}: {}", binary.display());
    }
    println!(
        "{}",
        json!({
            "experiment": "answers",
            "bookings": args.bookings.display().to_string(),
            "rounds": args.rounds,
            "answers": rows_json,
        })
    );
    Ok(())
}
