//! SQLite (bundled with rusqlite) with an FTS5 `trigram` index, case-sensitive.
//!
//! Text: one FTS5 table, one row per line (rowid = line number). Records: a table of
//! every attribute (rowid = row), B-tree indexes on the equality and range attributes,
//! and an external-content FTS5 table over the contains attributes (the text is not
//! stored twice). Substrings of 3 characters or more are a quoted FTS5 phrase, which
//! the trigram tokenizer answers as a substring; shorter ones (a 3-byte pattern can be
//! one or two characters) are a GLOB. After loading: `optimize`, `ANALYZE` (records)
//! and `VACUUM`.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use puffer_store::{AttrType, Value};
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection};
use serde_json::json;

use super::corpus::{lines, Corpus};
use super::measure::{Answer, Engine, Sizes};
use super::records::{Condition, RecordQuery, RecordTable};

const STATEMENT_CACHE: usize = 64;

/// An FTS5 query matching `pattern` as one phrase (double quotes doubled).
pub(super) fn fts_phrase(pattern: &str) -> String {
    format!("\"{}\"", pattern.replace('"', "\"\""))
}

/// A GLOB pattern matching text that contains `pattern`: `*`, `?` and `[` are made
/// literal as one-character classes.
pub(super) fn glob_contains(pattern: &str) -> String {
    let mut glob = String::with_capacity(pattern.len() + 2);
    glob.push('*');
    for c in pattern.chars() {
        match c {
            '*' | '?' | '[' => {
                glob.push('[');
                glob.push(c);
                glob.push(']');
            }
            _ => glob.push(c),
        }
    }
    glob.push('*');
    glob
}

/// Whether FTS5's trigram tokenizer can answer `pattern` from its index (it needs 3
/// characters).
fn trigram_searchable(pattern: &str) -> bool {
    pattern.chars().count() >= 3
}

fn utf8(bytes: &[u8]) -> anyhow::Result<&str> {
    std::str::from_utf8(bytes).context("SQLite is given UTF-8 text only")
}

fn open(path: &Path) -> anyhow::Result<Connection> {
    let connection =
        Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(connection)
}

fn rows(connection: &Connection, sql: &str, parameters: &[SqlValue]) -> anyhow::Result<Vec<u32>> {
    let mut statement = connection.prepare_cached(sql)?;
    let found = statement.query_map(params_from_iter(parameters), |row| row.get::<_, i64>(0))?;
    let mut out = Vec::new();
    for row in found {
        out.push(row? as u32);
    }
    Ok(out)
}

/// Sizes of the database file, and SQLite's heap (its page cache lives there).
fn sizes(connection: &Connection, path: &Path) -> anyhow::Result<Sizes> {
    let disk_bytes = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    let page_size: i64 = connection.query_row("PRAGMA page_size", [], |row| row.get(0))?;
    let cache_size: i64 = connection.query_row("PRAGMA cache_size", [], |row| row.get(0))?;
    // SAFETY: sqlite3_memory_used only reads SQLite's global memory statistics.
    let heap_bytes = unsafe { rusqlite::ffi::sqlite3_memory_used() }.max(0) as u64;
    Ok(Sizes {
        disk_bytes,
        memory_bytes: heap_bytes,
        memory_note: format!(
            "SQLite heap after the queries, page cache included (cache_size {cache_size}: {}); the rest is read through the OS page cache",
            if cache_size < 0 { format!("{} KiB", -cache_size) } else { format!("{cache_size} pages") }
        ),
        details: json!({
            "page_size": page_size,
            "cache_size": cache_size,
            "heap_bytes": heap_bytes,
            "version": rusqlite::version(),
        }),
    })
}

// ---------------------------------------------------------------------------------
// Text corpus.

pub(super) struct SqliteText {
    connection: Connection,
    path: PathBuf,
}

/// Loads the corpus into `work_dir/text.sqlite`; returns the engine and the load seconds.
pub(super) fn load_text(corpus: &Corpus, work_dir: &Path) -> anyhow::Result<(SqliteText, f64)> {
    let path = work_dir.join("text.sqlite");
    let mut connection = open(&path)?;
    let started = Instant::now();
    connection.execute_batch(
        "CREATE VIRTUAL TABLE t USING fts5(line, tokenize = 'trigram case_sensitive 1')",
    )?;
    let transaction = connection.transaction()?;
    {
        let mut insert = transaction.prepare("INSERT INTO t (rowid, line) VALUES (?1, ?2)")?;
        for (number, line) in lines(&corpus.text).enumerate() {
            insert.execute(params![number as i64, utf8(line)?])?;
        }
    }
    transaction.commit()?;
    connection.execute_batch("INSERT INTO t (t) VALUES ('optimize'); VACUUM;")?;
    let load_seconds = started.elapsed().as_secs_f64();
    Ok((SqliteText { connection, path }, load_seconds))
}

impl Engine<Vec<u8>> for SqliteText {
    fn answer(&mut self, pattern: &Vec<u8>) -> anyhow::Result<Answer> {
        let pattern = utf8(pattern)?;
        let found = if trigram_searchable(pattern) {
            let phrase = SqlValue::Text(fts_phrase(pattern));
            rows(
                &self.connection,
                "SELECT rowid FROM t WHERE t MATCH ?1",
                &[phrase],
            )?
        } else {
            let glob = SqlValue::Text(glob_contains(pattern));
            rows(
                &self.connection,
                "SELECT rowid FROM t WHERE line GLOB ?1",
                &[glob],
            )?
        };
        Ok(Answer::Rows(found))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        sizes(&self.connection, &self.path)
    }
}

// ---------------------------------------------------------------------------------
// Records.

pub(super) struct SqliteRecords {
    connection: Connection,
    path: PathBuf,
    /// Which contains attributes the FTS5 table holds.
    fts_columns: Vec<usize>,
}

fn sql_type(attr_type: AttrType) -> &'static str {
    match attr_type {
        AttrType::Int | AttrType::Bool | AttrType::Timestamp => "INTEGER",
        AttrType::Float => "REAL",
        AttrType::String => "TEXT",
    }
}

fn sql_value(value: &Value) -> SqlValue {
    match value {
        Value::Int(x) | Value::Timestamp(x) => SqlValue::Integer(*x),
        Value::Bool(x) => SqlValue::Integer(i64::from(*x)),
        Value::Float(x) => SqlValue::Real(*x),
        Value::String(bytes) => SqlValue::Text(String::from_utf8_lossy(bytes).into_owned()),
    }
}

/// Loads the table into `work_dir/records.sqlite` (columns `k` for the key and `c<id>`
/// for each attribute); returns the engine and the load seconds.
pub(super) fn load_records(
    table: &RecordTable,
    work_dir: &Path,
) -> anyhow::Result<(SqliteRecords, f64)> {
    let path = work_dir.join("records.sqlite");
    let mut connection = open(&path)?;
    let attributes = &table.table.schema.attributes;
    let started = Instant::now();
    let columns: Vec<String> = attributes
        .iter()
        .enumerate()
        .map(|(id, a)| format!("c{id} {}", sql_type(a.attr_type)))
        .collect();
    connection.execute_batch(&format!(
        "CREATE TABLE r (rid INTEGER PRIMARY KEY, k TEXT NOT NULL, {})",
        columns.join(", ")
    ))?;
    let placeholders: Vec<String> = (0..attributes.len() + 2)
        .map(|i| format!("?{}", i + 1))
        .collect();
    let transaction = connection.transaction()?;
    {
        let mut insert = transaction.prepare(&format!(
            "INSERT INTO r VALUES ({})",
            placeholders.join(", ")
        ))?;
        for (number, row) in table.table.rows.iter().enumerate() {
            let mut values = Vec::with_capacity(attributes.len() + 2);
            values.push(SqlValue::Integer(number as i64));
            values.push(SqlValue::Text(
                String::from_utf8_lossy(&row.key).into_owned(),
            ));
            values.extend(
                row.values
                    .iter()
                    .map(|v| v.as_ref().map_or(SqlValue::Null, sql_value)),
            );
            insert.execute(params_from_iter(values))?;
        }
    }
    transaction.commit()?;
    let mut btree_columns = table.eq_columns.clone();
    btree_columns.extend(&table.range_columns);
    btree_columns.sort_unstable();
    btree_columns.dedup();
    for column in &btree_columns {
        connection.execute_batch(&format!("CREATE INDEX r_c{column} ON r (c{column})"))?;
    }
    let fts_columns = table.contains_columns.clone();
    if !fts_columns.is_empty() {
        let names: Vec<String> = fts_columns.iter().map(|c| format!("c{c}")).collect();
        connection.execute_batch(&format!(
            "CREATE VIRTUAL TABLE f USING fts5({}, content = 'r', content_rowid = 'rid', tokenize = 'trigram case_sensitive 1');
             INSERT INTO f (f) VALUES ('rebuild');
             INSERT INTO f (f) VALUES ('optimize');",
            names.join(", ")
        ))?;
    }
    connection.execute_batch("ANALYZE; VACUUM;")?;
    let load_seconds = started.elapsed().as_secs_f64();
    Ok((
        SqliteRecords {
            connection,
            path,
            fts_columns,
        },
        load_seconds,
    ))
}

/// `sql` with the query's LIMIT, if it has one.
fn limited(sql: &str, limit: Option<usize>) -> String {
    match limit {
        Some(limit) => format!("{sql} LIMIT {limit}"),
        None => sql.to_string(),
    }
}

impl Engine<RecordQuery> for SqliteRecords {
    fn answer(&mut self, query: &RecordQuery) -> anyhow::Result<Answer> {
        let column = query.column;
        let limit = query.limit;
        let found = match &query.condition {
            Condition::Contains(needle) => {
                let needle = utf8(needle)?;
                if trigram_searchable(needle) && self.fts_columns.contains(&column) {
                    let filter = SqlValue::Text(format!("c{column} : {}", fts_phrase(needle)));
                    rows(
                        &self.connection,
                        &limited("SELECT rowid FROM f WHERE f MATCH ?1", limit),
                        &[filter],
                    )?
                } else {
                    let glob = SqlValue::Text(glob_contains(needle));
                    rows(
                        &self.connection,
                        &limited(&format!("SELECT rid FROM r WHERE c{column} GLOB ?1"), limit),
                        &[glob],
                    )?
                }
            }
            Condition::Eq(value) => rows(
                &self.connection,
                &limited(&format!("SELECT rid FROM r WHERE c{column} = ?1"), limit),
                &[sql_value(value)],
            )?,
            Condition::Range(lower, upper) => {
                let (sql, parameters) = range_sql(column, lower, upper);
                rows(&self.connection, &limited(&sql, limit), &parameters)?
            }
        };
        Ok(Answer::Rows(found))
    }

    fn sizes(&mut self) -> anyhow::Result<Sizes> {
        sizes(&self.connection, &self.path)
    }
}

/// `SELECT rid ... WHERE` the column lies between the bounds, and the parameters.
fn range_sql(column: usize, lower: &Bound<Value>, upper: &Bound<Value>) -> (String, Vec<SqlValue>) {
    let mut conditions = vec![format!("c{column} IS NOT NULL")];
    let mut parameters = Vec::new();
    for (bound, included, excluded) in [(lower, ">=", ">"), (upper, "<=", "<")] {
        let (operator, value) = match bound {
            Bound::Included(value) => (included, value),
            Bound::Excluded(value) => (excluded, value),
            Bound::Unbounded => continue,
        };
        parameters.push(sql_value(value));
        conditions.push(format!("c{column} {operator} ?{}", parameters.len()));
    }
    (
        format!("SELECT rid FROM r WHERE {}", conditions.join(" AND ")),
        parameters,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FTS5 phrases and GLOB patterns, checked against a naive substring test on
    /// lines with every character the escapes care about.
    #[test]
    fn phrases_and_globs_match_exactly_the_lines_containing_the_pattern() {
        let lines = [
            "say \"hi\" now",
            "a*b?c[d]e",
            "SAY HI",
            "x_%\\y",
            "ab",
            "naïve café",
        ];
        let connection = Connection::open_in_memory().unwrap();
        connection
            .execute_batch(
                "CREATE VIRTUAL TABLE t USING fts5(line, tokenize = 'trigram case_sensitive 1')",
            )
            .unwrap();
        for (i, line) in lines.iter().enumerate() {
            connection
                .execute(
                    "INSERT INTO t (rowid, line) VALUES (?1, ?2)",
                    params![i as i64, line],
                )
                .unwrap();
        }
        let patterns = [
            "\"hi\"", "*b?", "c[d]", "[d", "SAY", "say", "_%\\", "ab", "b", "ï", "ve c", "\"", "?",
        ];
        for pattern in patterns {
            let mut expected: Vec<u32> = (0..lines.len() as u32)
                .filter(|&i| lines[i as usize].contains(pattern))
                .collect();
            expected.sort_unstable();
            let mut by_glob = rows(
                &connection,
                "SELECT rowid FROM t WHERE line GLOB ?1",
                &[SqlValue::Text(glob_contains(pattern))],
            )
            .unwrap();
            by_glob.sort_unstable();
            assert_eq!(by_glob, expected, "GLOB {pattern:?}");
            if trigram_searchable(pattern) {
                let mut by_match = rows(
                    &connection,
                    "SELECT rowid FROM t WHERE t MATCH ?1",
                    &[SqlValue::Text(fts_phrase(pattern))],
                )
                .unwrap();
                by_match.sort_unstable();
                assert_eq!(by_match, expected, "MATCH {pattern:?}");
            }
        }
    }
}
