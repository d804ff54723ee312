//! `puffer-analytics`: the SQL PufferDB's own subset does not take (GROUP BY, HAVING,
//! aggregates, ORDER BY, DISTINCT, joins, subqueries, CTEs, time buckets, CASE and the
//! usual scalar functions), planned and run by Apache DataFusion over the database's
//! tables.
//!
//! Every table of the database is a DataFusion table provider ([`provider`]): the
//! store answers the scan, with the columns asked and the filters it can evaluate on
//! the compressed text pushed into its search ([`filters`]); DataFusion does the rest.
//! The whole query reads one snapshot, chosen once from its freshness bound, and the
//! answer reports it. Writes and DDL never come here: the database's own statements
//! handle them, and the engine is told to refuse any.

pub mod aggregates;
pub mod compare;
pub mod convert;
pub mod filters;
pub mod provider;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use datafusion::arrow::datatypes::SchemaRef;
pub use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use puffer_node::{Answer, Database};
use puffer_query::{QueryError, Result};
use puffer_store::{ReadOptions, SnapshotInfo, StoreError};

use crate::provider::{PufferTable, SnapshotSeen};

/// How many times a query is planned and run again when a replica sealed past the
/// snapshot chosen for it before its scans read (each try chooses anew).
const MAX_SNAPSHOT_TRIES: usize = 5;

/// Bounds on one analytics query: what it may read, hold and answer.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalyticsOptions {
    /// Most records one table scan may read; a query needing more is refused
    /// (`limit_exceeded`) rather than held in memory.
    pub max_scan_rows: usize,
    /// Most rows an answer holds; more are cut, and the answer says `truncated`.
    pub max_result_rows: usize,
    /// Most bytes the engine's operators (hash tables of joins and groups, sorts) may
    /// hold at once; past it the query fails with `limit_exceeded`.
    pub memory_limit_bytes: usize,
    /// Streams of work one query is split into (threads it may keep busy).
    pub target_partitions: usize,
    /// Whether aggregations the store can compute are pushed into it
    /// ([`aggregates`]); off, DataFusion aggregates the scanned columns itself.
    pub push_aggregates: bool,
}

impl Default for AnalyticsOptions {
    fn default() -> Self {
        AnalyticsOptions {
            max_scan_rows: 2_000_000,
            max_result_rows: 100_000,
            memory_limit_bytes: 1 << 30,
            target_partitions: 2,
            push_aggregates: true,
        }
    }
}

/// Whether `error`, from parsing `text` as PufferDB's own SQL, means the analytics
/// engine should run it instead: the statement is a query (not a write or DDL) that
/// uses a construct outside the subset.
pub fn takes(error: &QueryError, text: &str) -> bool {
    matches!(error, QueryError::Unsupported { .. }) && is_query(text)
}

/// Whether `text` begins as a query does: `SELECT`, `WITH`, `VALUES` or a parenthesis
/// (comments and whitespace skipped).
pub fn is_query(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    if rest.starts_with('(') {
        return true;
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    matches!(word.as_str(), "SELECT" | "WITH" | "VALUES")
}

/// An answer as the engine computed it: Arrow record batches, not yet values (an
/// answer is sent from them a batch at a time, never held whole as values or text).
#[derive(Debug)]
pub struct Batches {
    /// The answer's column names, as [`column_names`] makes them.
    pub columns: Vec<String>,
    /// The batches' schema (known where there is no batch).
    pub schema: SchemaRef,
    /// Its rows, at most `max_result_rows` of them.
    pub batches: Vec<RecordBatch>,
    /// Whether more rows were cut.
    pub truncated: bool,
    /// The snapshot the query read.
    pub snapshot: SnapshotInfo,
}

impl Batches {
    /// The rows.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// Runs query `text` (it may end in `FRESHNESS s`, which overrides `freshness`) on
/// `db`, every table read at one snapshot; the answer as values.
pub fn run(
    db: &Arc<Database>,
    text: &str,
    freshness: Option<Duration>,
    options: &AnalyticsOptions,
) -> Result<Answer> {
    let answer = run_batches(db, text, freshness, options)?;
    Ok(Answer::Computed {
        rows: convert::rows_of(&answer.batches)?,
        columns: answer.columns,
        truncated: answer.truncated,
        snapshot: answer.snapshot,
    })
}

/// [`run`], the answer as the engine's record batches.
pub fn run_batches(
    db: &Arc<Database>,
    text: &str,
    freshness: Option<Duration>,
    options: &AnalyticsOptions,
) -> Result<Batches> {
    if text.len() > puffer_query::sql::MAX_SQL_BYTES {
        return Err(QueryError::Limit(format!(
            "the SQL text is {} bytes; the limit is {}",
            text.len(),
            puffer_query::sql::MAX_SQL_BYTES
        )));
    }
    let (query, written) = puffer_query::sql::split_freshness(text)?;
    let mut read = ReadOptions {
        freshness: written.or(freshness),
        min_snapshot: 0,
        at: None,
    };
    let runtime = query_runtime()?;
    let mut tries = 0;
    loop {
        let at = db.choose_snapshot(read)?;
        match runtime.block_on(run_at(db, &query, at, options)) {
            // A replica sealed past `at` (on a cluster node, a data node ahead of
            // another when `at` was chosen): choose again, at least at its seal.
            Err(QueryError::Store(StoreError::SnapshotGone { sealed, .. }))
                if tries + 1 < MAX_SNAPSHOT_TRIES =>
            {
                read.min_snapshot = read.min_snapshot.max(sealed);
                tries += 1;
            }
            answer => return answer,
        }
    }
}

/// The plan query `text` runs by, after DataFusion's optimizer (and PufferDB's rule):
/// where the scans, pushed filters and pushed aggregates are. Planned at the newest
/// snapshot (on a cluster node, chosen through the broker); no table is read.
pub fn explain(db: &Arc<Database>, text: &str, options: &AnalyticsOptions) -> Result<String> {
    plan_text(db, text, options, Plan::Logical)
}

/// The physical plan query `text` runs by, with the statistics each operator reports
/// to DataFusion's physical optimizer (which orders joins and picks their build sides
/// by them): a PufferDB scan reports its exact row count, byte size and each column's
/// NULL count, taken from the rows the store answered. Planning reads the tables (the
/// scans are read when planned), at the newest snapshot.
pub fn explain_physical(
    db: &Arc<Database>,
    text: &str,
    options: &AnalyticsOptions,
) -> Result<String> {
    plan_text(db, text, options, Plan::Physical)
}

/// Which plan [`plan_text`] shows.
enum Plan {
    /// The optimized logical plan.
    Logical,
    /// The physical plan, with statistics.
    Physical,
}

/// The plan of query `text`, planned at the newest snapshot, as text.
fn plan_text(
    db: &Arc<Database>,
    text: &str,
    options: &AnalyticsOptions,
    plan: Plan,
) -> Result<String> {
    let (query, _) = puffer_query::sql::split_freshness(text)?;
    let at = db.choose_snapshot(ReadOptions::default())?;
    query_runtime()?.block_on(async {
        let context = session(db, at, options, &Arc::default())?;
        let frame = context
            .sql_with_options(&query, only_queries())
            .await
            .map_err(|e| error_of(e, &query))?;
        Ok(match plan {
            Plan::Logical => frame
                .into_optimized_plan()
                .map_err(|e| error_of(e, &query))?
                .display_indent()
                .to_string(),
            Plan::Physical => {
                let physical = frame
                    .create_physical_plan()
                    .await
                    .map_err(|e| error_of(e, &query))?;
                let shown = datafusion::physical_plan::displayable(physical.as_ref())
                    .set_show_statistics(true)
                    .indent(true)
                    .to_string();
                shown
            }
        })
    })
}

/// The runtime a query's plan runs on (the calling thread's own).
fn query_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| StoreError::Unavailable(format!("no runtime for the query: {e}")).into())
}

/// DataFusion told to refuse DDL, DML and statements.
fn only_queries() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

/// A session over every table of `db` (subspaces excepted) read at snapshot `at`, what
/// the scans see of it going to `seen`.
fn session(
    db: &Arc<Database>,
    at: u64,
    options: &AnalyticsOptions,
    seen: &Arc<Mutex<SnapshotSeen>>,
) -> Result<SessionContext> {
    let config = SessionConfig::new()
        .with_target_partitions(options.target_partitions.max(1))
        .with_information_schema(false)
        // Column and table names are matched as written, as PufferDB's own SQL does
        // (CSV headers keep their case).
        .set_bool("datafusion.sql_parser.enable_ident_normalization", false)
        // Where the planner can say which part of the text an error is about, it does.
        .set_bool("datafusion.sql_parser.collect_spans", true);
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_limit(options.memory_limit_bytes, 1.0)
        .build_arc()
        .map_err(|e| error_of(e, ""))?;
    let context = SessionContext::new_with_config_rt(config, runtime);
    if options.push_aggregates {
        context.add_optimizer_rule(Arc::new(aggregates::PushAggregates));
    }
    for name in db.table_names() {
        let table = db.table(&name)?;
        if table.subspace_of().is_some() {
            continue; // a subspace's copies are read through its table
        }
        let provider = PufferTable::new(db.clone(), &name, table.schema(), at, options, seen);
        context
            .register_table(name.as_str(), Arc::new(provider))
            .map_err(|e| error_of(e, ""))?;
    }
    Ok(context)
}

/// One try of [`run_batches`]: `query` planned and run with every table read at
/// snapshot `at`.
async fn run_at(
    db: &Arc<Database>,
    query: &str,
    at: u64,
    options: &AnalyticsOptions,
) -> Result<Batches> {
    let seen = Arc::new(Mutex::new(SnapshotSeen::default()));
    let context = session(db, at, options, &seen)?;
    let frame = context
        .sql_with_options(query, only_queries())
        .await
        .map_err(|e| error_of(e, query))?;
    // One row past the largest answer tells a cut answer from a full one.
    let frame = frame
        .limit(0, Some(options.max_result_rows.saturating_add(1)))
        .map_err(|e| error_of(e, query))?;
    let columns = column_names(frame.schema());
    let schema = frame.schema().inner().clone();
    let mut batches = frame.collect().await.map_err(|e| error_of(e, query))?;
    let truncated = cut(&mut batches, options.max_result_rows);
    let snapshot = seen.lock().expect("snapshot lock").info(at);
    Ok(Batches {
        columns,
        schema,
        batches,
        truncated,
        snapshot,
    })
}

/// Cuts `batches` to their first `max_rows` rows (empty batches dropped); whether any
/// were cut.
fn cut(batches: &mut Vec<RecordBatch>, max_rows: usize) -> bool {
    let mut kept = 0usize;
    let mut truncated = false;
    batches.retain_mut(|batch| {
        let room = max_rows - kept;
        if batch.num_rows() > room {
            truncated = true;
            *batch = batch.slice(0, room);
        }
        kept += batch.num_rows();
        batch.num_rows() > 0
    });
    truncated
}

/// The answer's column names: each as the query names it, qualified by its table
/// where two share a name (`SELECT a.id, b.id ...`), so rows can be objects.
fn column_names(schema: &datafusion::common::DFSchema) -> Vec<String> {
    let names: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
    schema
        .iter()
        .map(|(qualifier, field)| {
            let shared = names.iter().filter(|n| **n == field.name()).count() > 1;
            match qualifier {
                Some(table) if shared => format!("{table}.{}", field.name()),
                _ => field.name().clone(),
            }
        })
        .collect()
}

/// `error` placed at `at` in the query's text, where the planner said where it is and
/// the error does not say so already.
fn placed(error: QueryError, at: Option<datafusion::common::Location>) -> QueryError {
    let Some(at) = at.filter(|at| at.line > 0) else {
        return error;
    };
    match error {
        QueryError::Unsupported {
            construct, line: 0, ..
        } => QueryError::Unsupported {
            construct,
            line: at.line,
            column: at.column,
        },
        QueryError::Invalid(message) => QueryError::Invalid(format!(
            "{message} (at line {}, column {})",
            at.line, at.column
        )),
        other => other,
    }
}

/// A DataFusion error as the query layer's: PufferDB's own errors (raised in a scan)
/// come back as they were; the engine's are sorted into syntax errors (placed where
/// the parser says), unsupported constructs, exceeded limits and invalid queries.
fn error_of(error: DataFusionError, text: &str) -> QueryError {
    match error {
        DataFusionError::External(inner) => match inner.downcast::<QueryError>() {
            Ok(ours) => *ours,
            Err(other) => QueryError::Invalid(other.to_string()),
        },
        DataFusionError::Context(_, inner) => error_of(*inner, text),
        DataFusionError::Diagnostic(diagnostic, inner) => placed(
            error_of(*inner, text),
            diagnostic.span.map(|span| span.start),
        ),
        DataFusionError::Collection(mut errors) if !errors.is_empty() => {
            error_of(errors.swap_remove(0), text)
        }
        DataFusionError::Shared(inner) => match Arc::try_unwrap(inner) {
            Ok(inner) => error_of(inner, text),
            Err(shared) => QueryError::Invalid(shared.to_string()),
        },
        DataFusionError::SQL(inner, _) => {
            puffer_query::sql::syntax_error_from_message(&inner.to_string(), text)
        }
        DataFusionError::NotImplemented(what) => QueryError::Unsupported {
            construct: what,
            line: 0,
            column: 0,
        },
        DataFusionError::ResourcesExhausted(what) => {
            QueryError::Limit(format!("the query needs more memory than allowed: {what}"))
        }
        DataFusionError::Plan(message) if message.starts_with("table '") => {
            // "table 'x' not found": the name as written, without the catalog's prefix.
            let name = message.split('\'').nth(1).unwrap_or_default();
            let name = name.rsplit('.').next().unwrap_or(name);
            QueryError::UnknownTable(name.to_string())
        }
        DataFusionError::Plan(message) if message.contains("not supported") => {
            QueryError::Unsupported {
                construct: message,
                line: 0,
                column: 0,
            }
        }
        other => QueryError::Invalid(other.strip_backtrace()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    /// Batches of the numbers 0.. in batches of the sizes given.
    fn batches(sizes: &[usize]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut next = 0i64;
        sizes
            .iter()
            .map(|&size| {
                let values: Vec<i64> = (next..next + size as i64).collect();
                next += size as i64;
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))])
                    .unwrap()
            })
            .collect()
    }

    fn numbers(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    /// Cutting keeps the first rows, in order, says whether any went, and leaves no
    /// empty batch: against the numbers' own prefix.
    #[test]
    fn cut_keeps_the_first_rows_and_says_whether_any_went() {
        let shapes: [&[usize]; 5] = [&[], &[0], &[3], &[2, 0, 5, 1], &[4, 4, 4]];
        for sizes in shapes {
            let total: usize = sizes.iter().sum();
            for max in 0..=total + 1 {
                let mut kept = batches(sizes);
                let truncated = cut(&mut kept, max);
                let want: Vec<i64> = (0..total.min(max) as i64).collect();
                assert_eq!(numbers(&kept), want, "{sizes:?} cut at {max}");
                assert_eq!(truncated, total > max, "{sizes:?} cut at {max}");
                assert!(kept.iter().all(|b| b.num_rows() > 0), "{sizes:?} at {max}");
            }
        }
    }
}
