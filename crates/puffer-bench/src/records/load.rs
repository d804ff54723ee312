//! Loading the table: writer threads putting SCUs, a monitor of the watermarks, the
//! freshness lag of each stage, then the compaction into one segment.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use puffer_store::{Predicate, ReadOptions, Shard, ShardStats, StoreError, WriteOp};
use serde_json::json;

use super::queries::{check_get, Mismatches};
use super::table::Table;
use crate::stats::{peak_rss_bytes, quantile_us, round};

pub(super) const WRITER_THREADS: usize = 4;
const OVERLOAD_BACKOFF: Duration = Duration::from_millis(10);
const WATERMARK_POLL: Duration = Duration::from_millis(1);
/// How long after the last acknowledgement the monitor waits for the compressed stage.
const COMPRESSION_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------
// Load: writer threads, and a monitor of the watermarks.

/// An SCU: the rows it puts. Each writer builds a batch's records just before writing
/// it, as `puffer load` does (their building is timed too): values by attribute id
/// (`WriteOp::PutFields`), the way a loader that resolved the columns once writes.
/// Records built long before would be cold in the cache when the store validates them.
struct Batch {
    rows: Range<u32>,
}

fn put_ops(table: &Table, rows: Range<u32>) -> Vec<WriteOp> {
    rows.map(|row| WriteOp::PutFields(table.rows[row as usize].to_fields()))
        .collect()
}

/// One acknowledged SCU.
pub(super) struct Ack {
    seq: u64,
    acked_at: Instant,
    /// Time from the acknowledgement until a read confirmed the SCU visible (None if it
    /// was not).
    log_lag: Option<Duration>,
}

#[derive(Default)]
struct WriterReport {
    acks: Vec<Ack>,
    overloaded_retries: u64,
    problems: Vec<String>,
}

/// When each watermark first showed each value, as polled.
#[derive(Default)]
struct WatermarkLog {
    sorted: Vec<(u64, Instant)>,
    compressed: Vec<(u64, Instant)>,
    slowest_poll: Duration,
    timed_out: bool,
}

pub(super) struct LoadReport {
    /// Peak RSS once the rows are parsed, before the first write:
    /// the benchmark's own share of `peak_rss_bytes`.
    pub(super) peak_rss_before_writes_bytes: u64,
    /// From the first write until the last acknowledgement.
    pub(super) elapsed: Duration,
    pub(super) acks: Vec<Ack>,
    pub(super) overloaded_retries: u64,
    pub(super) problems: Vec<String>,
    watermarks: WatermarkLog,
}

/// Writes the rows in SCUs of `batch_rows` puts from WRITER_THREADS threads while a
/// monitor records the watermarks, until every SCU is in the compressed stage (or the
/// monitor gives up).
pub(super) fn load(shard: &Shard, table: &Table, batch_rows: usize) -> anyhow::Result<LoadReport> {
    let per_writer = deal_batches(table, batch_rows);
    let peak_rss_before_writes_bytes = peak_rss_bytes();
    // u64::MAX: still loading; then the last SCU's seq (0 after a failure: stop now).
    let target = AtomicU64::new(u64::MAX);
    let started = Instant::now();
    let (reports, watermarks) = std::thread::scope(|scope| {
        let monitor = scope.spawn(|| watch_watermarks(shard, &target));
        let writers: Vec<_> = per_writer
            .into_iter()
            .map(|batches| scope.spawn(move || write_batches(shard, table, batches)))
            .collect();
        let reports: anyhow::Result<Vec<WriterReport>> = writers
            .into_iter()
            .map(|writer| writer.join().expect("a writer thread panicked"))
            .collect();
        let last_seq = reports.as_ref().ok().and_then(|reports| {
            let acks = reports.iter().flat_map(|r| &r.acks);
            acks.map(|ack| ack.seq).max()
        });
        target.store(last_seq.unwrap_or(0), Ordering::SeqCst);
        (
            reports,
            monitor.join().expect("the monitor thread panicked"),
        )
    });
    let mut load = LoadReport {
        peak_rss_before_writes_bytes,
        elapsed: Duration::ZERO,
        acks: Vec::new(),
        overloaded_retries: 0,
        problems: Vec::new(),
        watermarks,
    };
    for report in reports? {
        load.acks.extend(report.acks);
        load.overloaded_retries += report.overloaded_retries;
        load.problems.extend(report.problems);
    }
    let acked = load
        .acks
        .iter()
        .map(|ack| ack.acked_at.duration_since(started));
    load.elapsed = acked.max().unwrap_or_default();
    Ok(load)
}

/// The SCUs, dealt round-robin to the writers, each writer's in row order.
fn deal_batches(table: &Table, batch_rows: usize) -> Vec<Vec<Batch>> {
    let mut per_writer: Vec<Vec<Batch>> = (0..WRITER_THREADS).map(|_| Vec::new()).collect();
    let row_count = table.rows.len() as u32;
    for (i, start) in (0..row_count).step_by(batch_rows).enumerate() {
        let rows = start..row_count.min(start.saturating_add(batch_rows as u32));
        per_writer[i % WRITER_THREADS].push(Batch { rows });
    }
    per_writer
}

/// One writer: its batches in order, each retried after a pause while the store says
/// it is overloaded.
fn write_batches(
    shard: &Shard,
    table: &Table,
    batches: Vec<Batch>,
) -> anyhow::Result<WriterReport> {
    let mut report = WriterReport::default();
    for batch in batches {
        let first_row = batch.rows.start;
        let mut ops = put_ops(table, batch.rows.clone());
        let seq = loop {
            match shard.write(ops) {
                Ok(seq) => break seq,
                Err(StoreError::Overloaded(_)) => {
                    report.overloaded_retries += 1;
                    std::thread::sleep(OVERLOAD_BACKOFF);
                    // The failed write consumed the operations.
                    ops = put_ops(table, batch.rows.clone());
                }
                Err(e) => return Err(e).with_context(|| format!("writing rows {:?}", batch.rows)),
            }
        };
        let acked_at = Instant::now();
        let log_lag = read_back(shard, table, first_row, seq, &mut report.problems)
            .then(|| acked_at.elapsed());
        report.acks.push(Ack {
            seq,
            acked_at,
            log_lag,
        });
    }
    Ok(report)
}

/// Reads an SCU's first record right after its acknowledgement: the read's snapshot
/// (the published watermark) must include the SCU and the record must be there.
fn read_back(shard: &Shard, table: &Table, row: u32, seq: u64, problems: &mut Vec<String>) -> bool {
    let key = &table.rows[row as usize].key;
    let problem = match shard.get(key, ReadOptions::default()) {
        Err(e) => Some(format!("read-back of SCU {seq}: {e}")),
        Ok((_, info)) if info.snapshot < seq => Some(format!(
            "read-back of SCU {seq}: the snapshot read was {}",
            info.snapshot
        )),
        Ok((found, _)) => check_get(table, row, found.as_ref())
            .map(|problem| format!("read-back of SCU {seq}: {problem}")),
    };
    match problem {
        Some(problem) => {
            problems.push(problem);
            false
        }
        None => true,
    }
}

/// Polls the watermarks every WATERMARK_POLL until the compressed stage holds SCU
/// `target` (set once the load is acknowledged), or COMPRESSION_TIMEOUT after that.
fn watch_watermarks(shard: &Shard, target: &AtomicU64) -> WatermarkLog {
    let mut log = WatermarkLog::default();
    let mut target_known_at: Option<Instant> = None;
    loop {
        let target_seq = target.load(Ordering::SeqCst);
        let started = Instant::now();
        let marks = shard.watermarks();
        let ended = Instant::now();
        log.slowest_poll = log.slowest_poll.max(ended - started);
        // watermarks() reads the stage set before it takes the manifest lock, which a
        // compaction holds while it builds a segment: the sorted watermark is as of the
        // poll's start, the compressed one as of its end.
        note_rise(&mut log.sorted, marks.sorted, started);
        note_rise(&mut log.compressed, marks.compressed, ended);
        if target_seq != u64::MAX {
            if marks.compressed >= target_seq {
                return log;
            }
            if started.duration_since(*target_known_at.get_or_insert(started)) > COMPRESSION_TIMEOUT
            {
                log.timed_out = true;
                return log;
            }
        }
        std::thread::sleep(WATERMARK_POLL);
    }
}

fn note_rise(history: &mut Vec<(u64, Instant)>, mark: u64, at: Instant) {
    if history.last().is_none_or(|(last, _)| mark > *last) {
        history.push((mark, at));
    }
}

/// Per SCU, the time from its acknowledgement until `history` first showed it (zero if
/// already then); None for SCUs it never showed.
fn stage_lags(acks: &[Ack], history: &[(u64, Instant)]) -> Vec<Option<Duration>> {
    acks.iter()
        .map(|ack| {
            let first = history.partition_point(|(mark, _)| *mark < ack.seq);
            history
                .get(first)
                .map(|(_, at)| at.saturating_duration_since(ack.acked_at))
        })
        .collect()
}

/// p50 and p99 of each stage's lag in milliseconds, and how many SCUs it never showed.
pub(super) fn freshness(load: &LoadReport) -> serde_json::Value {
    let stages = [
        ("log", load.acks.iter().map(|ack| ack.log_lag).collect()),
        ("sorted", stage_lags(&load.acks, &load.watermarks.sorted)),
        (
            "compressed",
            stage_lags(&load.acks, &load.watermarks.compressed),
        ),
    ];
    let (mut p50, mut p99, mut unreached) = (json!({}), json!({}), json!({}));
    for (stage, lags) in stages {
        let mut reached: Vec<Duration> = lags.iter().flatten().copied().collect();
        unreached[stage] = json!(lags.len() - reached.len());
        p50[stage] = json!(round(quantile_us(&mut reached, 0.5) / 1e3, 3));
        p99[stage] = json!(round(quantile_us(&mut reached, 0.99) / 1e3, 3));
    }
    json!({
        "freshness_lag_p50_ms": p50,
        "freshness_lag_p99_ms": p99,
        "freshness_unreached_scus": unreached,
        "freshness_timed_out": load.watermarks.timed_out,
        "watermarks_poll_max_ms": round(load.watermarks.slowest_poll.as_secs_f64() * 1e3, 3),
    })
}

// ---------------------------------------------------------------------------------
// Compaction and footprint.

pub(super) struct Compaction {
    pub(super) seconds: f64,
    pub(super) stats: ShardStats,
}

/// Compacts everything into one segment, then checks the record count.
pub(super) fn compact(
    shard: &Shard,
    table: &Table,
    mismatches: &mut Mismatches,
) -> anyhow::Result<Compaction> {
    let started = Instant::now();
    shard.compact_all()?;
    let seconds = started.elapsed().as_secs_f64();
    let stats = shard.stats()?;
    let (count, _) = shard.count(&Predicate::All, ReadOptions::default())?;
    if count != table.rows.len() as u64 {
        mismatches.record(format!(
            "count(All) after compact_all: expected {}, got {count}",
            table.rows.len()
        ));
    }
    Ok(Compaction { seconds, stats })
}
