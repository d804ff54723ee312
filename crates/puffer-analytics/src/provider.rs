//! A PufferDB table as a DataFusion table provider, read at one snapshot.
//!
//! A scan is one column read of the store (`puffer_store::columns`): the columns
//! DataFusion asks for (from column layers where segments hold them, the fields
//! extracted from the text where not) and the filters the store evaluates on the compressed
//! text, pushed as its predicate: exact where the store evaluates the whole filter as
//! SQL does, inexact (DataFusion applies it again) where it evaluates only part (see
//! [`crate::filters`]). A scan that asks for no column (a `COUNT(*)` under exact
//! filters) is a store count, which extracts no record; a limit DataFusion passes
//! (no filter of its own left above the scan) is the search's.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::Session;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use puffer_node::{Database, ReadAnswer, ReadRequest, Wait};
use puffer_query::QueryError;
use puffer_store::{
    AggregateQuery, AggregateResult, Predicate, Query, ReadOptions, Schema, SnapshotInfo,
    StoreError,
};

use crate::convert;
use crate::filters::{all_of, predicate_of};
use crate::AnalyticsOptions;

/// What the scans of one query saw, merged into the answer's snapshot: every scan
/// reads the same snapshot; the oldest age and any log read are reported.
#[derive(Debug, Default)]
pub struct SnapshotSeen {
    age: std::time::Duration,
    read_log: bool,
}

impl SnapshotSeen {
    fn add(&mut self, info: &SnapshotInfo) {
        self.age = self.age.max(info.age);
        self.read_log |= info.read_log;
    }

    /// The answer's snapshot: `at`, with what the scans reported of it.
    pub fn info(&self, at: u64) -> SnapshotInfo {
        SnapshotInfo {
            snapshot: at,
            age: self.age,
            read_log: self.read_log,
        }
    }
}

/// Fewest rows worth a partition of their own (smaller scans stay whole).
const MIN_PARTITION_ROWS: usize = 8192;

/// One table of the database, as DataFusion sees it for one query.
#[derive(Clone)]
pub struct PufferTable {
    db: Arc<Database>,
    name: String,
    schema: Arc<Schema>,
    arrow: SchemaRef,
    at: u64,
    max_scan_rows: usize,
    /// Partitions a scan's rows are split into (DataFusion's target partitions).
    partitions: usize,
    seen: Arc<Mutex<SnapshotSeen>>,
}

impl fmt::Debug for PufferTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PufferTable")
            .field("name", &self.name)
            .field("at", &self.at)
            .finish()
    }
}

impl PufferTable {
    /// Table `name` (schema `schema`) of `db`, read at snapshot `at`; what its scans
    /// see of the snapshot goes to `seen`.
    pub fn new(
        db: Arc<Database>,
        name: &str,
        schema: Arc<Schema>,
        at: u64,
        options: &AnalyticsOptions,
        seen: &Arc<Mutex<SnapshotSeen>>,
    ) -> PufferTable {
        PufferTable {
            arrow: convert::arrow_schema(&schema),
            db,
            name: name.to_string(),
            schema,
            at,
            max_scan_rows: options.max_scan_rows,
            partitions: options.target_partitions,
            seen: seen.clone(),
        }
    }

    /// The table's schema in the store.
    pub fn store_schema(&self) -> Arc<Schema> {
        self.schema.clone()
    }

    /// Most records one scan (or aggregate) of it may read.
    pub fn max_scan_rows(&self) -> usize {
        self.max_scan_rows
    }

    /// The store's aggregates for `query` (see [`crate::aggregates`]), refused where
    /// more records match than a scan may read.
    pub fn aggregate(&self, query: &AggregateQuery) -> Result<AggregateResult, QueryError> {
        let request = ReadRequest::Aggregate {
            query: query.clone(),
        };
        let ReadAnswer::Aggregate(result) = self.read(&request)? else {
            return Err(unexpected(&self.name));
        };
        // Each shard stops one record past the bound; together they may pass it too.
        let rows = if result.truncated {
            self.max_scan_rows.saturating_add(1)
        } else {
            result.rows
        };
        self.check_scan_rows(rows)?;
        Ok(result)
    }

    /// Reads at exactly the query's snapshot.
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions {
            freshness: None,
            min_snapshot: 0,
            at: Some(self.at),
        }
    }

    /// The store's answer to `request`, on this thread (the query runs on a thread
    /// that may wait: see [`crate::run`]).
    fn read(&self, request: &ReadRequest) -> Result<ReadAnswer, QueryError> {
        let answer = self
            .db
            .read(&self.name, request, Wait::Allowed)?
            .ok_or_else(|| {
                StoreError::Unavailable("a read allowed to wait got no answer".into())
            })?;
        self.seen
            .lock()
            .expect("snapshot lock")
            .add(answer.snapshot());
        Ok(answer)
    }

    fn scan_batch(
        &self,
        projection: Option<&Vec<usize>>,
        predicate: Predicate,
        limit: Option<usize>,
    ) -> Result<(RecordBatch, SchemaRef), QueryError> {
        let projected = match projection {
            Some(columns) => Arc::new(self.arrow.project(columns).map_err(|e| {
                QueryError::Invalid(format!("a scan of {} asked for no column: {e}", self.name))
            })?),
            None => self.arrow.clone(),
        };
        if projected.fields().is_empty() {
            let request = ReadRequest::Count {
                predicate,
                read: self.read_options(),
            };
            let ReadAnswer::Count { count, .. } = self.read(&request)? else {
                return Err(unexpected(&self.name));
            };
            // A count holds no record, so max_scan_rows does not bound it.
            let rows = usize::try_from(count).unwrap_or(usize::MAX);
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            let batch = RecordBatch::try_new_with_options(projected.clone(), vec![], &options)
                .map_err(|e| QueryError::Invalid(e.to_string()))?;
            return Ok((batch, projected));
        }
        let columns: Vec<String> = projected
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let request = ReadRequest::Columns {
            query: Query {
                predicate,
                projection: Some(columns),
                // One past the bound tells a scan that fits from one that does not.
                limit: Some(
                    limit
                        .unwrap_or(usize::MAX)
                        .min(self.max_scan_rows.saturating_add(1)),
                ),
                read: self.read_options(),
            },
        };
        let ReadAnswer::Columns(result) = self.read(&request)? else {
            return Err(unexpected(&self.name));
        };
        // A shard answers at most `puffer_store::shard::MAX_RESULT_ROWS` rows: cut short
        // of the limit asked, the scan was larger than a shard may answer.
        let cut_short = result.truncated && limit.is_none_or(|limit| result.rows < limit);
        self.check_scan_rows(if cut_short {
            self.max_scan_rows.saturating_add(1)
        } else {
            result.rows
        })?;
        let batch = convert::batch_of(result, &projected)?;
        Ok((batch, projected))
    }

    fn check_scan_rows(&self, rows: usize) -> Result<(), QueryError> {
        if rows > self.max_scan_rows {
            return Err(QueryError::Limit(format!(
                "a scan of table {} reads more than {} records (max_scan_rows): narrow it with a WHERE the store can evaluate",
                self.name, self.max_scan_rows
            )));
        }
        Ok(())
    }
}

fn unexpected(table: &str) -> QueryError {
    QueryError::Store(StoreError::Unavailable(format!(
        "a read of table {table} got an answer of another kind"
    )))
}

#[async_trait]
impl TableProvider for PufferTable {
    fn schema(&self) -> SchemaRef {
        self.arrow.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|filter| match predicate_of(filter, &self.schema) {
                Some(pushed) if pushed.exact => TableProviderFilterPushDown::Exact,
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // DataFusion passes a limit only where none of its own filters stands above
        // the scan (every filter pushed exactly): the first rows found will do.
        let pushed: Vec<Predicate> = filters
            .iter()
            .filter_map(|f| predicate_of(f, &self.schema))
            .map(|pushed| pushed.predicate)
            .collect();
        let predicate = all_of(pushed);
        let (batch, projected) = self
            .scan_batch(projection, predicate, limit)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        // Halves (and so on) for the partitions DataFusion aggregates in parallel.
        let rows = batch.num_rows();
        let parts = if rows < MIN_PARTITION_ROWS {
            1
        } else {
            self.partitions.clamp(1, rows / MIN_PARTITION_ROWS)
        };
        let partitions: Vec<Vec<RecordBatch>> = (0..parts)
            .map(|i| {
                let start = rows * i / parts;
                vec![batch.slice(start, rows * (i + 1) / parts - start)]
            })
            .collect();
        let plan = MemorySourceConfig::try_new_exec(&partitions, projected, None)?;
        Ok(plan)
    }
}
