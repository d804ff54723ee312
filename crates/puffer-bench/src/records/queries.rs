//! Queries on the compacted shard: cases drawn from random rows, the oracle's answers
//! by a scan of the table, latency measurement and the bookkeeping of disagreements.

use std::collections::HashSet;
use std::ops::Bound;
use std::time::{Duration, Instant};

use aho_corasick::AhoCorasick;
use puffer_store::schema::display_key;
use puffer_store::{AttrType, Predicate, Query, ReadOptions, Record, SearchResult, Shard, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::table::Table;
use super::RecordsArgs;
pub(super) use crate::oracle::Mismatches;
use crate::oracle::{order, within};
use crate::stats::{quantile_us, round};

const SEARCH_LIMIT: usize = 10;
const RANGE_COUNT_QUERIES: usize = 50;
/// Equality queries skip free-text columns, whose values are (nearly) unique.
const EQ_MAX_AVERAGE_VALUE_BYTES: f64 = 40.0;
const SLOWEST_SHOWN: usize = 3;

// ---------------------------------------------------------------------------------
// Queries and their oracle.

/// A condition on one attribute.
#[derive(Clone)]
enum Condition {
    Eq(Value),
    Contains(Vec<u8>),
    Range(Bound<Value>, Bound<Value>),
}

#[derive(Clone)]
struct Case {
    column: usize,
    condition: Condition,
}

impl Case {
    fn predicate(&self, table: &Table) -> Predicate {
        let name = table.attributes[self.column].name.clone();
        match &self.condition {
            Condition::Eq(value) => Predicate::Eq(name, value.clone()),
            Condition::Contains(needle) => Predicate::Contains(name, needle.clone()),
            Condition::Range(lower, upper) => Predicate::Range {
                attribute: name,
                lower: lower.clone(),
                upper: upper.clone(),
            },
        }
    }

    fn label(&self, table: &Table) -> String {
        let name = &table.attributes[self.column].name;
        match &self.condition {
            Condition::Eq(value) => format!("{name} = {}", show(value)),
            Condition::Contains(needle) => {
                format!("{name} contains {:?}", String::from_utf8_lossy(needle))
            }
            Condition::Range(lower, upper) => {
                let (open, low) = match lower {
                    Bound::Included(v) => ("[", show(v)),
                    Bound::Excluded(v) => ("(", show(v)),
                    Bound::Unbounded => ("(", "-inf".into()),
                };
                let (close, high) = match upper {
                    Bound::Included(v) => ("]", show(v)),
                    Bound::Excluded(v) => (")", show(v)),
                    Bound::Unbounded => (")", "+inf".into()),
                };
                format!("{name} in {open}{low}, {high}{close}")
            }
        }
    }
}

/// A case with the oracle's answer (ascending row numbers), computed before timing.
struct Planned {
    case: Case,
    matches: Vec<u32>,
}

fn plan(table: &Table, cases: Vec<Case>) -> anyhow::Result<Vec<Planned>> {
    cases
        .into_iter()
        .map(|case| {
            let matches = oracle_matches(table, &case)?;
            Ok(Planned { case, matches })
        })
        .collect()
}

/// The rows satisfying `case`, by a scan of every row.
fn oracle_matches(table: &Table, case: &Case) -> anyhow::Result<Vec<u32>> {
    let finder = match &case.condition {
        Condition::Contains(needle) => Some(AhoCorasick::new([needle])?),
        _ => None,
    };
    let holds = |value: &Value| match (&case.condition, value) {
        // Floats are finite with -0.0 made 0.0, so `==` is the store's equality.
        (Condition::Eq(wanted), _) => value == wanted,
        (Condition::Contains(_), Value::String(bytes)) => {
            finder.as_ref().is_some_and(|f| f.is_match(bytes))
        }
        (Condition::Contains(_), _) => false,
        (Condition::Range(lower, upper), _) => within(value, lower, upper),
    };
    Ok(table.rows_with(case.column, holds))
}

/// Columns eligible for a kind of query, each with the rows it can draw values from.
type Candidates = Vec<(usize, Vec<u32>)>;

/// Draws query cases from random rows.
struct Sampler<'t> {
    table: &'t Table,
    rng: StdRng,
    eq_columns: Candidates,
    contains_columns: Candidates,
    range_columns: Candidates,
}

impl<'t> Sampler<'t> {
    fn new(table: &'t Table, seed: u64) -> Sampler<'t> {
        let candidates = |eligible: &dyn Fn(usize) -> bool, keep: &dyn Fn(&Value) -> bool| {
            (0..table.attributes.len())
                .filter(|&column| eligible(column))
                .map(|column| (column, table.rows_with(column, keep)))
                .filter(|(_, rows)| !rows.is_empty())
                .collect()
        };
        let attr_type = |column: usize| table.attributes[column].attr_type;
        Sampler {
            table,
            rng: StdRng::seed_from_u64(seed),
            eq_columns: candidates(
                &|column| table.average_bytes[column] < EQ_MAX_AVERAGE_VALUE_BYTES,
                &|_| true,
            ),
            // A needle is 4 to 8 bytes cut from a value, so values need 4 bytes.
            contains_columns: candidates(
                &|column| attr_type(column) == AttrType::String,
                &|v| matches!(v, Value::String(bytes) if bytes.len() >= 4),
            ),
            range_columns: candidates(
                &|column| {
                    matches!(
                        attr_type(column),
                        AttrType::Int | AttrType::Float | AttrType::Timestamp
                    )
                },
                &|_| true,
            ),
        }
    }

    fn row(&mut self) -> u32 {
        self.rng.gen_range(0..self.table.rows.len() as u32)
    }

    fn eq_case(&mut self) -> Option<Case> {
        let (column, row) = pick(&mut self.rng, &self.eq_columns)?;
        let value = self.table.value(row, column)?.clone();
        Some(Case {
            column,
            condition: Condition::Eq(value),
        })
    }

    fn contains_case(&mut self) -> Option<Case> {
        // Cuts can fail on runs of multi-byte characters; a few draws always succeed
        // in practice.
        for _ in 0..100 {
            let (column, row) = pick(&mut self.rng, &self.contains_columns)?;
            let Some(Value::String(bytes)) = self.table.value(row, column) else {
                continue;
            };
            if let Some(needle) = cut_needle(bytes, &mut self.rng) {
                return Some(Case {
                    column,
                    condition: Condition::Contains(needle),
                });
            }
        }
        None
    }

    fn range_case(&mut self) -> Option<Case> {
        let (column, first) = pick(&mut self.rng, &self.range_columns)?;
        let (_, rows) = self.range_columns.iter().find(|(c, _)| *c == column)?;
        let second = rows[self.rng.gen_range(0..rows.len())];
        let a = self.table.value(first, column)?.clone();
        let b = self.table.value(second, column)?.clone();
        let (low, high) = if order(&a, &b).is_gt() {
            (b, a)
        } else {
            (a, b)
        };
        // Both kinds of bound, as they are found by different probes.
        let lower = random_bound(&mut self.rng, low);
        let upper = random_bound(&mut self.rng, high);
        Some(Case {
            column,
            condition: Condition::Range(lower, upper),
        })
    }
}

/// A random column of `candidates` and a random row with a value in it.
fn pick(rng: &mut StdRng, candidates: &Candidates) -> Option<(usize, u32)> {
    if candidates.is_empty() {
        return None;
    }
    let (column, rows) = &candidates[rng.gen_range(0..candidates.len())];
    Some((*column, rows[rng.gen_range(0..rows.len())]))
}

fn random_bound(rng: &mut StdRng, value: Value) -> Bound<Value> {
    if rng.gen_bool(0.5) {
        Bound::Included(value)
    } else {
        Bound::Excluded(value)
    }
}

/// 4 to 8 bytes of `text` on character boundaries (the length is cut back to the last
/// whole character), or None if the draw fell short of 4 bytes.
fn cut_needle(text: &[u8], rng: &mut StdRng) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    if text.len() < 4 {
        return None;
    }
    let len = rng.gen_range(4..=8).min(text.len());
    let mut start = rng.gen_range(0..=text.len() - len);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = start + len;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (end - start >= 4).then(|| text.as_bytes()[start..end].to_vec())
}

/// A value for messages: strings quoted and cut, timestamps in microseconds.
fn show(value: &Value) -> String {
    match value {
        Value::String(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            let cut: String = text.chars().take(48).collect();
            let more = if cut.len() < text.len() { "..." } else { "" };
            format!("{cut:?}{more}")
        }
        Value::Int(x) => x.to_string(),
        Value::Float(x) => format!("{x:?}"),
        Value::Bool(x) => x.to_string(),
        Value::Timestamp(micros) => format!("{micros}us"),
    }
}

fn show_present(value: Option<&Value>) -> String {
    value.map_or_else(|| "absent".to_string(), show)
}

/// What is wrong with `found` as the answer to a get of `row`'s key.
pub(super) fn check_get(table: &Table, row: u32, found: Option<&Record>) -> Option<String> {
    let expected = &table.rows[row as usize];
    let key = display_key(&expected.key);
    let Some(record) = found else {
        return Some(format!("get {key}: not found"));
    };
    let mut differences: Vec<String> = table
        .attributes
        .iter()
        .zip(&expected.values)
        .filter(|(attribute, value)| record.values.get(&attribute.name) != value.as_ref())
        .map(|(attribute, value)| {
            format!(
                "{}: expected {}, got {}",
                attribute.name,
                show_present(value.as_ref()),
                show_present(record.values.get(&attribute.name))
            )
        })
        .collect();
    if record.key != expected.key {
        differences.insert(0, format!("came back as key {}", display_key(&record.key)));
    }
    (!differences.is_empty()).then(|| format!("get {key}: {}", differences.join("; ")))
}

/// What is wrong with `result` as a keys-only, first-SEARCH_LIMIT answer to `planned`.
fn check_first_ten(table: &Table, planned: &Planned, result: &SearchResult) -> Option<String> {
    let total = planned.matches.len();
    let (rows, truncated) = (total.min(SEARCH_LIMIT), total > SEARCH_LIMIT);
    if result.rows.len() != rows || result.truncated != truncated {
        return Some(format!(
            "expected {rows} rows (truncated {truncated}; {total} match), got {} (truncated {})",
            result.rows.len(),
            result.truncated
        ));
    }
    let mut seen = HashSet::new();
    for record in &result.rows {
        let key = display_key(&record.key);
        if !seen.insert(&record.key) {
            return Some(format!("key {key} returned twice"));
        }
        if !record.values.is_empty() {
            return Some(format!(
                "key {key} came with values; the projection was empty"
            ));
        }
        let Some(&row) = table.row_of_key.get(&record.key) else {
            return Some(format!("key {key} is not in the table"));
        };
        if planned.matches.binary_search(&row).is_err() {
            let value = show_present(table.value(row, planned.case.column));
            return Some(format!("key {key} does not match (its value: {value})"));
        }
    }
    None
}

/// Runs every case once to warm up (page faults, caches), then again timed. `run`
/// times only the store's call and describes any disagreement with the oracle.
fn measure<C>(
    cases: &[C],
    mismatches: &mut Mismatches,
    mut run: impl FnMut(&C) -> (Duration, Option<String>),
) -> Vec<Duration> {
    for case in cases {
        run(case);
    }
    cases
        .iter()
        .map(|case| {
            let (took, problem) = run(case);
            if let Some(problem) = problem {
                mismatches.record(problem);
            }
            took
        })
        .collect()
}

fn measure_gets(
    shard: &Shard,
    table: &Table,
    rows: &[u32],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(rows, mismatches, |&row| {
        let key = &table.rows[row as usize].key;
        let started = Instant::now();
        let answer = shard.get(key, ReadOptions::default());
        let took = started.elapsed();
        let problem = match answer {
            Ok((found, _)) => check_get(table, row, found.as_ref()),
            Err(e) => Some(format!("get {}: {e}", display_key(key))),
        };
        (took, problem)
    })
}

fn measure_first_ten(
    shard: &Shard,
    table: &Table,
    planned: &[Planned],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(planned, mismatches, |planned| {
        let query = Query {
            predicate: planned.case.predicate(table),
            projection: Some(Vec::new()),
            limit: Some(SEARCH_LIMIT),
            read: ReadOptions::default(),
        };
        let started = Instant::now();
        let answer = shard.search(&query);
        let took = started.elapsed();
        let problem = match answer {
            Ok(result) => check_first_ten(table, planned, &result),
            Err(e) => Some(e.to_string()),
        };
        let label = planned.case.label(table);
        (
            took,
            problem.map(|p| format!("search {label} limit {SEARCH_LIMIT}: {p}")),
        )
    })
}

fn measure_counts(
    shard: &Shard,
    table: &Table,
    planned: &[Planned],
    mismatches: &mut Mismatches,
) -> Vec<Duration> {
    measure(planned, mismatches, |planned| {
        let predicate = planned.case.predicate(table);
        let started = Instant::now();
        let answer = shard.count(&predicate, ReadOptions::default());
        let took = started.elapsed();
        let expected = planned.matches.len() as u64;
        let problem = match answer {
            Ok((got, _)) if got == expected => None,
            Ok((got, _)) => Some(format!("expected {expected}, got {got}")),
            Err(e) => Some(e.to_string()),
        };
        let label = planned.case.label(table);
        (took, problem.map(|p| format!("count {label}: {p}")))
    })
}

/// Latency figures of one kind of query.
pub(super) struct KindLatency {
    pub(super) name: &'static str,
    pub(super) queries: usize,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    /// The slowest queries, for finding where the store is slow.
    pub(super) slowest: serde_json::Value,
}

fn summarize(
    name: &'static str,
    mut times: Vec<Duration>,
    label: impl Fn(usize) -> String,
) -> KindLatency {
    let mut by_time: Vec<usize> = (0..times.len()).collect();
    by_time.sort_by_key(|&i| std::cmp::Reverse(times[i]));
    let slowest = by_time
        .iter()
        .take(SLOWEST_SHOWN)
        .map(|&i| json!({"query": label(i), "us": round(times[i].as_secs_f64() * 1e6, 1)}))
        .collect();
    KindLatency {
        name,
        queries: times.len(),
        p50_us: round(quantile_us(&mut times, 0.5), 2),
        p99_us: round(quantile_us(&mut times, 0.99), 2),
        slowest,
    }
}

/// Labels a planned case by its index, with its number of matches.
fn planned_label<'a>(table: &'a Table, planned: &'a [Planned]) -> impl Fn(usize) -> String + 'a {
    move |i| {
        let p = &planned[i];
        format!("{} ({} match)", p.case.label(table), p.matches.len())
    }
}

fn draw<T>(count: usize, mut next: impl FnMut() -> Option<T>) -> Vec<T> {
    (0..count).map_while(|_| next()).collect()
}

/// Every kind of query on the compacted shard, each checked against the oracle.
pub(super) fn measure_queries(
    shard: &Shard,
    table: &Table,
    args: &RecordsArgs,
    mismatches: &mut Mismatches,
) -> anyhow::Result<Vec<KindLatency>> {
    let mut sampler = Sampler::new(table, args.seed);
    let n = args.queries;
    let get_rows = draw(n, || Some(sampler.row()));
    let eq_first = plan(table, draw(n, || sampler.eq_case()))?;
    let eq_count = plan(table, draw(n, || sampler.eq_case()))?;
    let contains = plan(table, draw(n, || sampler.contains_case()))?;
    let range_first = plan(table, draw(n, || sampler.range_case()))?;
    let range_count = plan(table, draw(RANGE_COUNT_QUERIES, || sampler.range_case()))?;

    let label_row =
        |i: usize| format!("get {}", display_key(&table.rows[get_rows[i] as usize].key));
    let label_of = |planned| planned_label(table, planned);
    Ok(vec![
        summarize(
            "get",
            measure_gets(shard, table, &get_rows, mismatches),
            label_row,
        ),
        summarize(
            "search_eq_first10",
            measure_first_ten(shard, table, &eq_first, mismatches),
            label_of(&eq_first),
        ),
        summarize(
            "count_eq",
            measure_counts(shard, table, &eq_count, mismatches),
            label_of(&eq_count),
        ),
        summarize(
            "search_contains",
            measure_first_ten(shard, table, &contains, mismatches),
            label_of(&contains),
        ),
        summarize(
            "search_range",
            measure_first_ten(shard, table, &range_first, mismatches),
            label_of(&range_first),
        ),
        summarize(
            "count_range",
            measure_counts(shard, table, &range_count, mismatches),
            label_of(&range_count),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needles_respect_character_boundaries() {
        let mut rng = StdRng::seed_from_u64(7);
        let text = "香港中文大學 über naïve".as_bytes();
        for _ in 0..1000 {
            if let Some(needle) = cut_needle(text, &mut rng) {
                assert!((4..=8).contains(&needle.len()));
                assert!(std::str::from_utf8(&needle).is_ok());
            }
        }
    }
}
