//! Open-loop load on an adaptive node, phase by phase, and the time series it leaves.
//!
//! The generator submits queries at the phase's request rate whether or not earlier ones
//! were answered (as clients of a shared store do); a full queue refuses, and the node
//! counts the refusal as a request that arrived. Every answer is checked.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use puffer_node::serving::{AdaptiveNode, ReplicaHistoryRow, ShardGroup};
use puffer_store::Shard;

use super::workload::{run_query, SharedTerms, TermSampler};

/// A stretch of constant request rate.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub seconds: f64,
    pub rate_per_second: f64,
}

/// One replica's sample, labelled for the CSV.
#[derive(Clone, Debug)]
pub struct SeriesRow {
    pub replica: usize,
    pub row: ReplicaHistoryRow,
}

/// Mismatches found by the workers (bounded: the first 100 are kept).
#[derive(Default)]
pub struct Mismatches {
    pub count: u64,
    pub first: Vec<String>,
}

/// Drives `phases` against `group`; returns the series of every replica (time from the
/// start of the first phase) and the phase start times.
pub fn drive(
    node: &AdaptiveNode<Shard>,
    group: &Arc<ShardGroup<Shard>>,
    terms: &SharedTerms,
    sampler: &mut TermSampler,
    phases: &[Phase],
    mismatches: &Arc<Mutex<Mismatches>>,
) -> (Vec<SeriesRow>, Vec<f64>) {
    let node_start_seconds = node.status().uptime_seconds;
    let started = Instant::now();
    let mut phase_starts = Vec::new();
    let mut elapsed_phases = 0.0;
    for phase in phases {
        phase_starts.push(elapsed_phases);
        let phase_start = started + Duration::from_secs_f64(elapsed_phases);
        let phase_end = phase_start + Duration::from_secs_f64(phase.seconds);
        let interval = 1.0 / phase.rate_per_second.max(1e-3);
        let mut sent = 0u64;
        loop {
            let now = Instant::now();
            if now >= phase_end {
                break;
            }
            let due = ((now - phase_start).as_secs_f64() / interval) as u64;
            while sent < due {
                submit(group, terms, sampler.next(), mismatches);
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        elapsed_phases += phase.seconds;
    }
    let mut series = Vec::new();
    for slot in group.replicas() {
        for mut row in node.history(slot.id, node_start_seconds) {
            row.t_seconds -= node_start_seconds;
            series.push(SeriesRow {
                replica: slot.replica,
                row,
            });
        }
    }
    series.sort_by(|a, b| {
        a.row
            .t_seconds
            .total_cmp(&b.row.t_seconds)
            .then(a.replica.cmp(&b.replica))
    });
    (series, phase_starts)
}

fn submit(
    group: &Arc<ShardGroup<Shard>>,
    terms: &SharedTerms,
    term: usize,
    mismatches: &Arc<Mutex<Mismatches>>,
) {
    let slot = group.route();
    let replica = slot.replica;
    let for_job = group.clone();
    let terms = terms.clone();
    let mismatches = mismatches.clone();
    // A refusal (queue full) is counted by the pool; nothing else to do here.
    let _ = slot.pool().spawn(move |shard, queue_length| {
        if let Err(message) = run_query(shard, &terms[term]) {
            let mut m = mismatches.lock().expect("mismatch list poisoned");
            m.count += 1;
            if m.first.len() < 100 {
                m.first.push(message);
            }
        }
        // The response carries the queue length back to the scheduler.
        for_job.report(replica, queue_length);
    });
}

/// Sums replicas per sample time: (t, request/s, response/s, max averaged queue, footprint).
pub fn totals(series: &[SeriesRow]) -> Vec<(f64, f64, f64, f64, u64)> {
    let mut out: Vec<(f64, f64, f64, f64, u64)> = Vec::new();
    let mut last_t = f64::NEG_INFINITY;
    for s in series {
        // Rows of one tick share (nearly) one time.
        if s.row.t_seconds - last_t > 0.01 || out.is_empty() {
            out.push((s.row.t_seconds, 0.0, 0.0, 0.0, 0));
            last_t = s.row.t_seconds;
        }
        let total = out.last_mut().expect("pushed above");
        total.1 += s.row.request_per_second;
        total.2 += s.row.response_per_second;
        total.3 = total.3.max(s.row.averaged_queue);
        total.4 += s.row.footprint_bytes;
    }
    out
}

/// Seconds from `step_seconds` until the response rate matches the request rate (within
/// 5%, over 1 s windows) and the averaged queue is under `high_mark` for good, up to
/// `end_seconds`: the end of the last unsettled window after the step (0 if none);
/// `None` if the last window before `end_seconds` is still unsettled.
pub fn adapt_seconds(
    series: &[SeriesRow],
    step_seconds: f64,
    end_seconds: f64,
    high_mark: f64,
) -> Option<f64> {
    let totals = totals(series);
    let settled = |from: f64, to: f64| {
        let rows: Vec<_> = totals.iter().filter(|r| r.0 >= from && r.0 < to).collect();
        let request: f64 = rows.iter().map(|r| r.1).sum();
        let response: f64 = rows.iter().map(|r| r.2).sum();
        let queue = rows.iter().map(|r| r.3).fold(0.0, f64::max);
        rows.is_empty() || (response >= 0.95 * request && queue < high_mark)
    };
    let mut last_unsettled_end = None;
    let mut t = step_seconds;
    while t + 1.0 <= end_seconds {
        if !settled(t, t + 1.0) {
            last_unsettled_end = Some(t + 1.0);
        }
        t += 1.0;
    }
    match last_unsettled_end {
        None => Some(0.0),
        Some(end) if end + 1.0 > end_seconds => None,
        Some(end) => Some(end - step_seconds),
    }
}
