//! What every engine shares: the engine trait, answers and their check against the
//! oracle, the timing of queries and the summary per query class.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

pub(super) use crate::oracle::Mismatches;
use crate::stats::{quantile_us, round, status_kb_field_bytes};

/// Resident set size of this process now, in bytes (Linux; 0 elsewhere).
pub(super) fn current_rss_bytes() -> u64 {
    status_kb_field_bytes("/proc/self/status", "VmRSS:")
}

/// Queries whose oracle answer has at most this many rows (lines or records) form the
/// `selective` class: the searches an application shows a page of results for.
pub(super) const SELECTIVE_MAX_ROWS: usize = 100;
/// Queries of each class run once untimed before the timed pass (caches, page faults).
const WARM_UP_PER_CLASS: usize = 10;

/// What an engine found for one query.
pub(super) enum Answer {
    /// The matching rows (line numbers, or record rows), in any order.
    Rows(Vec<u32>),
    /// The matching records' keys, in any order.
    Keys(Vec<Vec<u8>>),
    /// Only how many rows match (ripgrep's `-c`).
    Count(u64),
}

/// One query with the oracle's answer, computed before any engine runs.
pub(super) struct Planned<Q> {
    pub(super) class: &'static str,
    pub(super) query: Q,
    /// Matching rows, ascending.
    pub(super) expected: Vec<u32>,
    /// The query, readable, for mismatch messages.
    pub(super) label: String,
    /// A query with a LIMIT: the answer is any this many of `expected` (all when fewer).
    pub(super) at_most: Option<usize>,
}

/// Sizes an engine reports once its queries have run.
pub(super) struct Sizes {
    pub(super) disk_bytes: u64,
    /// The resident figure the table shows; what it means is in `memory_note`.
    pub(super) memory_bytes: u64,
    pub(super) memory_note: String,
    /// Engine-specific figures (settings, parts of the sizes) for the JSON.
    pub(super) details: serde_json::Value,
}

/// A loaded engine answering queries of type `Q`, one at a time on one thread.
pub(super) trait Engine<Q> {
    /// Whether the engine can express `query` (ripgrep cannot express equality or
    /// ranges on attributes).
    fn supports(&self, _query: &Q) -> bool {
        true
    }

    /// The answer to `query`; this call is what is timed.
    fn answer(&mut self, query: &Q) -> anyhow::Result<Answer>;

    /// Sizes on disk and in memory, after the queries.
    fn sizes(&mut self) -> anyhow::Result<Sizes>;
}

/// Latency figures of one query class on one engine.
pub(super) struct ClassLatency {
    pub(super) class: &'static str,
    pub(super) queries: usize,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    /// The slowest queries (label, microseconds), slowest first.
    pub(super) slowest: Vec<(String, f64)>,
}

/// What is wrong with `answer` as the answer to `planned`, if anything.
/// `row_of_key` turns keys into rows (records only).
pub(super) fn check<Q>(
    planned: &Planned<Q>,
    answer: Answer,
    row_of_key: Option<&HashMap<Vec<u8>, u32>>,
) -> Option<String> {
    let mut rows = match answer {
        Answer::Count(count) => {
            let expected = planned.expected.len() as u64;
            return (count != expected).then(|| format!("expected {expected} rows, got {count}"));
        }
        Answer::Rows(rows) => rows,
        Answer::Keys(keys) => {
            let Some(row_of_key) = row_of_key else {
                return Some("the engine answered with keys, which this data has not".into());
            };
            let mut rows = Vec::with_capacity(keys.len());
            for key in &keys {
                match row_of_key.get(key) {
                    Some(&row) => rows.push(row),
                    None => {
                        let key = String::from_utf8_lossy(key);
                        return Some(format!("key {key:?} is not in the data"));
                    }
                }
            }
            rows
        }
    };
    rows.sort_unstable();
    if let Some(limit) = planned.at_most {
        let wanted = limit.min(planned.expected.len());
        if rows.windows(2).any(|w| w[0] == w[1]) {
            return Some("a row came twice".into());
        }
        if let Some(row) = rows
            .iter()
            .find(|r| planned.expected.binary_search(r).is_err())
        {
            return Some(format!("row {row} does not match"));
        }
        return (rows.len() != wanted)
            .then(|| format!("expected {wanted} rows (LIMIT {limit}), got {}", rows.len()));
    }
    if rows == planned.expected {
        return None;
    }
    let first_difference = rows
        .iter()
        .zip(&planned.expected)
        .position(|(got, want)| got != want)
        .unwrap_or(rows.len().min(planned.expected.len()));
    let show = |list: &[u32]| -> String {
        let part: Vec<String> = list
            .iter()
            .skip(first_difference)
            .take(3)
            .map(|r| r.to_string())
            .collect();
        part.join(",")
    };
    Some(format!(
        "expected {} rows, got {}; first difference at position {first_difference}: expected [{}], got [{}]",
        planned.expected.len(),
        rows.len(),
        show(&planned.expected),
        show(&rows)
    ))
}

/// A query timed once for good when its first timing exceeds this: a stall of a few
/// milliseconds does not move it, and timing the slow classes again would take minutes.
const TIME_ONCE_ABOVE: Duration = Duration::from_millis(100);
/// Slowest queries kept per class for the report.
const SLOWEST_KEPT: usize = 3;

/// Runs the first queries of each class untimed, then every supported query timed in
/// `rounds` passes (each pass over all queries, so a stall of the shared machine hits one
/// pass of a query, not all), and checks each answer. A query's time is the median of
/// its passes (one pass when its first took over [`TIME_ONCE_ABOVE`]). Returns the
/// latency per class (in the order of first appearance), then that of the selective
/// queries.
pub(super) fn measure<Q>(
    engine_name: &str,
    engine: &mut dyn Engine<Q>,
    planned: &[Planned<Q>],
    row_of_key: Option<&HashMap<Vec<u8>, u32>>,
    rounds: usize,
    mismatches: &mut Mismatches,
) -> Vec<ClassLatency> {
    let supported: Vec<&Planned<Q>> = planned
        .iter()
        .filter(|p| engine.supports(&p.query))
        .collect();
    let mut warmed: HashMap<&'static str, usize> = HashMap::new();
    for query in &supported {
        let done = warmed.entry(query.class).or_default();
        if *done < WARM_UP_PER_CLASS {
            *done += 1;
            let _ = engine.answer(&query.query);
        }
    }
    let mut passes: Vec<Vec<Duration>> = vec![Vec::new(); supported.len()];
    let mut wrong = vec![false; supported.len()];
    for round in 0..rounds.max(1) {
        for (i, query) in supported.iter().enumerate() {
            if round > 0 && passes[i][0] > TIME_ONCE_ABOVE {
                continue;
            }
            let started = Instant::now();
            let answer = engine.answer(&query.query);
            let took = started.elapsed();
            passes[i].push(took);
            let problem = match answer {
                Ok(answer) => check(query, answer, row_of_key),
                Err(e) => Some(format!("error: {e:#}")),
            };
            if let (Some(problem), false) = (problem, wrong[i]) {
                wrong[i] = true;
                mismatches.record(format!(
                    "{engine_name} {} {}: {problem}",
                    query.class, query.label
                ));
            }
        }
    }
    let times: Vec<Duration> = passes.iter_mut().map(|t| median(t)).collect();
    let mut classes: Vec<&'static str> = Vec::new();
    for query in &supported {
        if !classes.contains(&query.class) {
            classes.push(query.class);
        }
    }
    let of = |keep: &dyn Fn(&Planned<Q>) -> bool| -> Vec<(&str, Duration)> {
        supported
            .iter()
            .zip(&times)
            .filter(|(query, _)| keep(query))
            .map(|(query, &took)| (query.label.as_str(), took))
            .collect()
    };
    let mut latencies: Vec<ClassLatency> = classes
        .into_iter()
        .map(|class| summarize(class, of(&|q| q.class == class)))
        .collect();
    latencies.push(summarize(
        "selective",
        of(&|q| q.expected.len() <= SELECTIVE_MAX_ROWS),
    ));
    latencies
}

/// The median of `times` (`stats::quantile_us` at one half); zero when empty.
fn median(times: &mut [Duration]) -> Duration {
    Duration::from_secs_f64(quantile_us(times, 0.5) / 1e6)
}

fn summarize(class: &'static str, timed: Vec<(&str, Duration)>) -> ClassLatency {
    let mut slowest = timed.clone();
    slowest.sort_by_key(|&(_, took)| std::cmp::Reverse(took));
    slowest.truncate(SLOWEST_KEPT);
    let mut times: Vec<Duration> = timed.iter().map(|&(_, t)| t).collect();
    ClassLatency {
        class,
        queries: times.len(),
        p50_us: round(quantile_us(&mut times, 0.5), 1),
        p99_us: round(quantile_us(&mut times, 0.99), 1),
        slowest: slowest
            .into_iter()
            .map(|(label, t)| (label.to_string(), round(t.as_secs_f64() * 1e6, 1)))
            .collect(),
    }
}

/// The figures of one engine that ran.
pub(super) struct EngineReport {
    pub(super) name: &'static str,
    pub(super) description: String,
    pub(super) load_seconds: f64,
    pub(super) sizes: Sizes,
    pub(super) latencies: Vec<ClassLatency>,
    pub(super) mismatches: u64,
}

impl EngineReport {
    pub(super) fn to_json(&self, input_bytes: u64) -> serde_json::Value {
        let ratio = |bytes: u64| round(bytes as f64 / input_bytes.max(1) as f64, 4);
        let mut p50 = serde_json::Map::new();
        let mut p99 = serde_json::Map::new();
        let mut queries = serde_json::Map::new();
        let mut slowest = serde_json::Map::new();
        for latency in &self.latencies {
            slowest.insert(latency.class.into(), json!(latency.slowest));
            p50.insert(latency.class.into(), json!(latency.p50_us));
            p99.insert(latency.class.into(), json!(latency.p99_us));
            queries.insert(latency.class.into(), json!(latency.queries));
        }
        json!({
            "engine": self.name,
            "description": self.description,
            "disk_bytes": self.sizes.disk_bytes,
            "bytes_ratio": ratio(self.sizes.disk_bytes),
            "memory_bytes": self.sizes.memory_bytes,
            "memory_ratio": ratio(self.sizes.memory_bytes),
            "memory_note": self.sizes.memory_note,
            "load_seconds": round(self.load_seconds, 2),
            "p50_us": p50,
            "p99_us": p99,
            "queries": queries,
            "slowest_us": slowest,
            "mismatches": self.mismatches,
            "details": self.sizes.details,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_time_is_the_median_of_its_passes_and_the_slowest_are_named() {
        let ms = Duration::from_millis;
        assert_eq!(median(&mut [ms(9), ms(1), ms(5)]), ms(5));
        assert_eq!(median(&mut [ms(7)]), ms(7));
        assert_eq!(median(&mut []), Duration::ZERO);
        let timed: Vec<(&str, Duration)> = (1..=10u64).map(|i| ("q", ms(i))).collect();
        let mut timed = timed;
        timed[3] = ("slow", ms(50));
        timed[7] = ("slower", ms(70));
        let summary = summarize("c", timed);
        assert_eq!(summary.queries, 10);
        let names: Vec<&str> = summary.slowest.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(names, ["slower", "slow", "q"]);
        assert_eq!(summary.slowest[0].1, 70_000.0);
        assert_eq!(summary.slowest[2].1, 10_000.0);
    }

    fn planned(expected: Vec<u32>) -> Planned<()> {
        Planned {
            class: "test",
            query: (),
            expected,
            label: String::new(),
            at_most: None,
        }
    }

    #[test]
    fn answers_are_checked_as_sets_of_rows() {
        let want = planned(vec![1, 5, 9]);
        assert!(check(&want, Answer::Rows(vec![9, 1, 5]), None).is_none());
        assert!(check(&want, Answer::Rows(vec![1, 5]), None).is_some());
        assert!(check(&want, Answer::Rows(vec![1, 5, 9, 9]), None).is_some());
        assert!(check(&want, Answer::Count(3), None).is_none());
        assert!(check(&want, Answer::Count(4), None).is_some());
        let keys: HashMap<Vec<u8>, u32> =
            [(b"a".to_vec(), 1), (b"b".to_vec(), 5), (b"c".to_vec(), 9)].into();
        let found = vec![b"c".to_vec(), b"a".to_vec(), b"b".to_vec()];
        assert!(check(&want, Answer::Keys(found), Some(&keys)).is_none());
        assert!(check(&want, Answer::Keys(vec![b"zz".to_vec()]), Some(&keys)).is_some());
    }

    #[test]
    fn limited_answers_are_any_rows_of_the_answer_up_to_the_limit() {
        let mut want = planned(vec![1, 5, 9, 12]);
        want.at_most = Some(2);
        assert!(check(&want, Answer::Rows(vec![12, 1]), None).is_none());
        assert!(check(&want, Answer::Rows(vec![5, 9]), None).is_none());
        assert!(
            check(&want, Answer::Rows(vec![5]), None).is_some(),
            "too few"
        );
        assert!(
            check(&want, Answer::Rows(vec![1, 5, 9]), None).is_some(),
            "too many"
        );
        assert!(
            check(&want, Answer::Rows(vec![5, 5]), None).is_some(),
            "twice"
        );
        assert!(
            check(&want, Answer::Rows(vec![5, 6]), None).is_some(),
            "not a match"
        );
        want.at_most = Some(10);
        assert!(check(&want, Answer::Rows(vec![1, 5, 9, 12]), None).is_none());
        assert!(
            check(&want, Answer::Rows(vec![1, 5, 9]), None).is_some(),
            "fewer than all"
        );
    }
}
