//! The records workload: a CSV / JSON-lines table (read by the shared importer, as
//! `puffer-bench records` does), the attributes queried, the queries and the oracle.
//!
//! Attributes queried, chosen from the data (at most [`COLUMNS_PER_KIND`] of each):
//! - equality: strings, integers or booleans of short values (under 40 bytes on
//!   average) with 2 to rows/20 distinct values (a category, a neighbourhood), the most
//!   often present first;
//! - range: integers, floats or timestamps with at least 50 distinct values, the most
//!   often present first;
//! - contains: strings of 16 bytes or more on average, the most bytes first.
//!
//! Query classes: the substring classes of [`super::queries`] on the contains
//! attributes, `eq` and `range`. The answer is the set of matching rows (records).

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::path::PathBuf;

use aho_corasick::AhoCorasick;
use anyhow::Context;
use puffer_query::import::{self, ImportedTable, KeySource};
use puffer_store::{AttrType, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::measure::Planned;
use super::queries::{
    draw_many, most_frequent, mutate, sample_substring, show_pattern, FREQUENT_QUERIES_MAX,
    LENGTH_CLASSES,
};
use crate::oracle::{order, within};

/// Most attributes queried per kind of predicate.
const COLUMNS_PER_KIND: usize = 3;
const EQ_MAX_AVERAGE_BYTES: f64 = 40.0;
const RANGE_MIN_DISTINCT: usize = 50;
const CONTAINS_MIN_AVERAGE_BYTES: f64 = 16.0;
const ABSENT_SOURCE_BYTES: usize = 12;
const FREQUENT_CANDIDATES_PER_QUERY: usize = 64;

/// The table and the attributes its queries use.
pub(super) struct RecordTable {
    pub(super) table: ImportedTable,
    pub(super) row_of_key: HashMap<Vec<u8>, u32>,
    pub(super) eq_columns: Vec<usize>,
    pub(super) range_columns: Vec<usize>,
    pub(super) contains_columns: Vec<usize>,
}

impl RecordTable {
    pub(super) fn value(&self, row: usize, column: usize) -> Option<&Value> {
        self.table.rows[row].values[column].as_ref()
    }

    pub(super) fn attribute_name(&self, column: usize) -> &str {
        &self.table.schema.attributes[column].name
    }

    pub(super) fn attr_type(&self, column: usize) -> AttrType {
        self.table.schema.attributes[column].attr_type
    }

    /// Every column some query uses.
    pub(super) fn queried_columns(&self) -> Vec<usize> {
        let mut columns: Vec<usize> = self
            .eq_columns
            .iter()
            .chain(&self.range_columns)
            .chain(&self.contains_columns)
            .copied()
            .collect();
        columns.sort_unstable();
        columns.dedup();
        columns
    }
}

/// A condition on one attribute.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Condition {
    Eq(Value),
    Range(Bound<Value>, Bound<Value>),
    Contains(Vec<u8>),
}

/// One query: a condition on one attribute.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RecordQuery {
    pub(super) column: usize,
    pub(super) condition: Condition,
    /// LIMIT: any this many matching rows.
    pub(super) limit: Option<usize>,
}

/// The LIMIT of the `len3-limit100` class: the 3-byte substring queries again, asking
/// for any 100 matching rows (what a user paging through results asks).
const LIMITED_ROWS: usize = 100;

/// Reads the inputs as one table and chooses the attributes to query.
pub(super) fn read_records(paths: &[PathBuf], key: Option<&str>) -> anyhow::Result<RecordTable> {
    let key_source = match key {
        Some(column) => KeySource::Column(column.to_string()),
        None => KeySource::RowNumber,
    };
    let table = import::read_table(paths, key_source).context("reading the records")?;
    anyhow::ensure!(!table.rows.is_empty(), "the inputs hold no rows");
    let row_of_key = table
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row.key.clone(), i as u32))
        .collect();
    let profiles = profile_columns(&table);
    let rows = table.rows.len();
    let choose = |eligible: &dyn Fn(&ColumnProfile) -> bool,
                  rank: &dyn Fn(&ColumnProfile) -> f64| {
        let mut columns: Vec<&ColumnProfile> = profiles.iter().filter(|p| eligible(p)).collect();
        columns.sort_by(|a, b| rank(b).total_cmp(&rank(a)).then(a.column.cmp(&b.column)));
        columns
            .iter()
            .take(COLUMNS_PER_KIND)
            .map(|p| p.column)
            .collect::<Vec<usize>>()
    };
    let eq_columns = choose(
        &|p| {
            matches!(
                p.attr_type,
                AttrType::String | AttrType::Int | AttrType::Bool
            ) && p.average_bytes < EQ_MAX_AVERAGE_BYTES
                && (2..=(rows / 20).max(2)).contains(&p.distinct)
        },
        &|p| p.present as f64,
    );
    let range_columns = choose(
        &|p| {
            matches!(
                p.attr_type,
                AttrType::Int | AttrType::Float | AttrType::Timestamp
            ) && p.distinct >= RANGE_MIN_DISTINCT
        },
        &|p| p.present as f64,
    );
    let contains_columns = choose(
        &|p| p.attr_type == AttrType::String && p.average_bytes >= CONTAINS_MIN_AVERAGE_BYTES,
        &|p| p.average_bytes * p.present as f64,
    );
    anyhow::ensure!(
        !(eq_columns.is_empty() && range_columns.is_empty() && contains_columns.is_empty()),
        "no attribute suits equality, range or substring queries"
    );
    Ok(RecordTable {
        table,
        row_of_key,
        eq_columns,
        range_columns,
        contains_columns,
    })
}

struct ColumnProfile {
    column: usize,
    attr_type: AttrType,
    present: usize,
    distinct: usize,
    average_bytes: f64,
}

fn profile_columns(table: &ImportedTable) -> Vec<ColumnProfile> {
    (0..table.schema.attributes.len())
        .map(|column| {
            let values = table
                .rows
                .iter()
                .filter_map(|row| row.values[column].as_ref());
            let distinct: HashSet<String> = values.clone().map(|v| format!("{v:?}")).collect();
            ColumnProfile {
                column,
                attr_type: table.schema.attributes[column].attr_type,
                present: values.count(),
                distinct: distinct.len(),
                average_bytes: table.average_bytes[column],
            }
        })
        .collect()
}

/// A value for messages.
fn show(value: &Value) -> String {
    match value {
        Value::String(bytes) => show_pattern(bytes),
        Value::Int(x) | Value::Timestamp(x) => x.to_string(),
        Value::Float(x) => format!("{x:?}"),
        Value::Bool(x) => x.to_string(),
    }
}

pub(super) fn label(table: &RecordTable, query: &RecordQuery) -> String {
    let name = table.attribute_name(query.column);
    match &query.condition {
        Condition::Eq(value) => format!("{name} = {}", show(value)),
        Condition::Contains(needle) => format!("{name} contains {}", show_pattern(needle)),
        Condition::Range(lower, upper) => {
            let low = match lower {
                Bound::Included(v) => format!("[{}", show(v)),
                Bound::Excluded(v) => format!("({}", show(v)),
                Bound::Unbounded => "(-inf".into(),
            };
            let high = match upper {
                Bound::Included(v) => format!("{}]", show(v)),
                Bound::Excluded(v) => format!("{})", show(v)),
                Bound::Unbounded => "+inf)".into(),
            };
            format!("{name} in {low}, {high}")
        }
    }
}

/// Draws the queries of every class.
struct Sampler<'t> {
    table: &'t RecordTable,
    rng: StdRng,
}

impl Sampler<'_> {
    /// A random row with a value in `column`.
    fn value_of(&mut self, column: usize) -> Option<&Value> {
        let rows = self.table.table.rows.len();
        for _ in 0..100 {
            let row = self.rng.gen_range(0..rows);
            if self.table.value(row, column).is_some() {
                return self.table.value(row, column);
            }
        }
        None
    }

    fn column(&mut self, columns: &[usize]) -> Option<usize> {
        (!columns.is_empty()).then(|| columns[self.rng.gen_range(0..columns.len())])
    }

    /// `len` bytes cut from a value of a contains column.
    fn substring(&mut self, len: usize) -> Option<RecordQuery> {
        let column = self.column(&self.table.contains_columns.clone())?;
        let Some(Value::String(text)) = self.value_of(column).cloned() else {
            return None;
        };
        let needle = sample_substring(&text, len, &mut self.rng)?;
        Some(RecordQuery {
            column,
            condition: Condition::Contains(needle),
            limit: None,
        })
    }

    fn eq(&mut self) -> Option<RecordQuery> {
        let column = self.column(&self.table.eq_columns.clone())?;
        let value = self.value_of(column)?.clone();
        Some(RecordQuery {
            column,
            condition: Condition::Eq(value),
            limit: None,
        })
    }

    fn range(&mut self) -> Option<RecordQuery> {
        let column = self.column(&self.table.range_columns.clone())?;
        let a = self.value_of(column)?.clone();
        let b = self.value_of(column)?.clone();
        let (low, high) = if order(&a, &b).is_gt() {
            (b, a)
        } else {
            (a, b)
        };
        let lower = if self.rng.gen_bool(0.5) {
            Bound::Included(low)
        } else {
            Bound::Excluded(low)
        };
        let upper = if self.rng.gen_bool(0.5) {
            Bound::Included(high)
        } else {
            Bound::Excluded(high)
        };
        Some(RecordQuery {
            column,
            condition: Condition::Range(lower, upper),
            limit: None,
        })
    }
}

/// Draws `count` queries; fewer if the data offers none of this kind.
fn draw_queries(count: usize, mut draw: impl FnMut() -> Option<RecordQuery>) -> Vec<RecordQuery> {
    let mut drawn = Vec::new();
    for _ in 0..count * 100 {
        if drawn.len() == count {
            break;
        }
        if let Some(query) = draw() {
            drawn.push(query);
        }
    }
    drawn
}

/// Every records query, with the oracle's matching rows.
pub(super) fn plan_record_queries(
    table: &RecordTable,
    per_class: usize,
    seed: u64,
) -> anyhow::Result<Vec<Planned<RecordQuery>>> {
    let mut sampler = Sampler {
        table,
        rng: StdRng::seed_from_u64(seed),
    };
    let mut classes: Vec<(&'static str, Vec<RecordQuery>)> = Vec::new();
    for (class, len) in LENGTH_CLASSES {
        classes.push((class, draw_queries(per_class, || sampler.substring(len))));
    }
    if let Some((_, len3)) = classes.iter().find(|(class, _)| *class == "len3") {
        let limited = len3
            .iter()
            .map(|query| RecordQuery {
                limit: Some(LIMITED_ROWS),
                ..query.clone()
            })
            .collect();
        classes.push(("len3-limit100", limited));
    }
    if !table.contains_columns.is_empty() {
        classes.push(("absent", absent_queries(&mut sampler, per_class)?));
        classes.push(("frequent", frequent_queries(&mut sampler, per_class)?));
    }
    classes.push(("eq", draw_queries(per_class, || sampler.eq())));
    classes.push(("range", draw_queries(per_class, || sampler.range())));

    let all: Vec<RecordQuery> = classes
        .iter()
        .flat_map(|(_, queries)| queries.iter().cloned())
        .collect();
    let mut expected = oracle(table, &all)?.into_iter();
    let mut planned = Vec::with_capacity(all.len());
    for (class, queries) in classes {
        for query in queries {
            planned.push(Planned {
                class,
                label: label(table, &query),
                expected: expected.next().unwrap_or_default(),
                at_most: query.limit,
                query,
            });
        }
    }
    Ok(planned)
}

fn absent_queries(sampler: &mut Sampler<'_>, per_class: usize) -> anyhow::Result<Vec<RecordQuery>> {
    let candidates = draw_many(per_class * 4, "absent", || {
        let RecordQuery {
            column, condition, ..
        } = sampler.substring(ABSENT_SOURCE_BYTES)?;
        let Condition::Contains(piece) = condition else {
            return None;
        };
        let needle = mutate(&piece, &mut sampler.rng)?;
        Some(RecordQuery {
            column,
            condition: Condition::Contains(needle),
            limit: None,
        })
    })?;
    let matches = oracle(sampler.table, &candidates)?;
    let mut absent: Vec<RecordQuery> = Vec::new();
    for (candidate, rows) in candidates.into_iter().zip(matches) {
        if rows.is_empty() && absent.len() < per_class && !absent.contains(&candidate) {
            absent.push(candidate);
        }
    }
    Ok(absent)
}

fn frequent_queries(
    sampler: &mut Sampler<'_>,
    per_class: usize,
) -> anyhow::Result<Vec<RecordQuery>> {
    let count = per_class.min(FREQUENT_QUERIES_MAX);
    let candidates = draw_many(count * FREQUENT_CANDIDATES_PER_QUERY, "frequent", || {
        let len = sampler.rng.gen_range(3..=5);
        sampler.substring(len)
    })?;
    let frequency: Vec<u64> = oracle(sampler.table, &candidates)?
        .iter()
        .map(|rows| rows.len() as u64)
        .collect();
    Ok(most_frequent(candidates, &frequency, count))
}

/// For each query, the rows satisfying it (ascending), by a scan of the table: one
/// Aho-Corasick automaton per column for the substring queries.
pub(super) fn oracle(
    table: &RecordTable,
    queries: &[RecordQuery],
) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut found: Vec<Vec<u32>> = vec![Vec::new(); queries.len()];
    let mut needles_by_column: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, query) in queries.iter().enumerate() {
        match &query.condition {
            Condition::Contains(_) => needles_by_column.entry(query.column).or_default().push(i),
            Condition::Eq(wanted) => found[i] = rows_where(table, query.column, |v| v == wanted),
            Condition::Range(lower, upper) => {
                found[i] = rows_where(table, query.column, |v| within(v, lower, upper))
            }
        }
    }
    for (column, query_ids) in needles_by_column {
        let needles: Vec<&[u8]> = query_ids
            .iter()
            .map(|&i| match &queries[i].condition {
                Condition::Contains(needle) => &needle[..],
                _ => &[],
            })
            .collect();
        let automaton = AhoCorasick::new(&needles).context("building the oracle's automaton")?;
        let mut last_row = vec![u32::MAX; needles.len()];
        for row in 0..table.table.rows.len() {
            let Some(Value::String(text)) = table.value(row, column) else {
                continue;
            };
            for m in automaton.find_overlapping_iter(text) {
                let needle = m.pattern().as_usize();
                if last_row[needle] != row as u32 {
                    last_row[needle] = row as u32;
                    found[query_ids[needle]].push(row as u32);
                }
            }
        }
    }
    Ok(found)
}

fn rows_where(table: &RecordTable, column: usize, keep: impl Fn(&Value) -> bool) -> Vec<u32> {
    (0..table.table.rows.len())
        .filter(|&row| table.value(row, column).is_some_and(&keep))
        .map(|row| row as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn queries_are_deterministic_and_the_oracle_agrees_with_a_naive_scan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "id,kind,size,notes").unwrap();
        for i in 0..400 {
            let notes = format!("note {} about item number {} with café", i * 7919 % 1000, i);
            writeln!(
                file,
                "k{i},{},{},\"{notes}\"",
                ["red", "green", "blue"][i % 3],
                i * 13 % 101
            )
            .unwrap();
        }
        drop(file);
        let table = read_records(&[path], Some("id")).unwrap();
        let names = |columns: &[usize]| {
            columns
                .iter()
                .map(|&c| table.attribute_name(c).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&table.eq_columns), vec!["kind"]);
        assert_eq!(names(&table.range_columns), vec!["size"]);
        assert_eq!(names(&table.contains_columns), vec!["notes"]);

        let first = plan_record_queries(&table, 6, 11).unwrap();
        let second = plan_record_queries(&table, 6, 11).unwrap();
        let queries =
            |p: &[Planned<RecordQuery>]| p.iter().map(|q| q.query.clone()).collect::<Vec<_>>();
        assert_eq!(queries(&first), queries(&second));
        for planned in &first {
            let naive: Vec<u32> = (0..table.table.rows.len())
                .filter(|&row| {
                    let Some(value) = table.value(row, planned.query.column) else {
                        return false;
                    };
                    match (&planned.query.condition, value) {
                        (Condition::Eq(wanted), _) => value == wanted,
                        (Condition::Range(lower, upper), _) => within(value, lower, upper),
                        (Condition::Contains(needle), Value::String(text)) => {
                            text.windows(needle.len()).any(|w| w == &needle[..])
                        }
                        (Condition::Contains(_), _) => false,
                    }
                })
                .map(|row| row as u32)
                .collect();
            assert_eq!(planned.expected, naive, "{}", planned.label);
            if planned.class == "absent" {
                assert!(naive.is_empty());
            } else {
                assert!(!naive.is_empty(), "{} {}", planned.class, planned.label);
            }
        }
        for class in ["len3", "len8", "len16", "len32", "eq", "range", "frequent"] {
            assert!(first.iter().any(|q| q.class == class), "{class}");
        }
    }
}
