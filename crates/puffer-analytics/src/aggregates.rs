//! Aggregates pushed into the store: an optimizer rule that answers an aggregation
//! directly over a PufferDB table from the shards' partial aggregates
//! (`ReadRequest::Aggregate`, `puffer_store::aggregate`) instead of shipping every
//! matching record's columns to DataFusion.
//!
//! The rule rewrites `Aggregate` over a `TableScan` of a PufferDB table when the store
//! can compute all of it: every filter of the scan pushed exactly, no limit, at most one
//! grouping column (an attribute that is not a float, or `date_trunc(unit, t)` of a
//! timestamp attribute, cut in UTC by the store), and only `COUNT(*)`, `COUNT(a)`,
//! `SUM(a)`, `AVG(a)` (of numbers), `MIN(a)` and `MAX(a)` without DISTINCT, FILTER or
//! ORDER BY. The aggregation becomes a scan of the store's answer (one row per group,
//! typed as DataFusion types the aggregation's output) under a projection that names
//! each column as the aggregation did, so the plan above it is unchanged. Each shard
//! aggregates its own records (from column layers where held; a grouped `COUNT(*)` from
//! the suffix array), and on a cluster each data node aggregates its shards before
//! anything crosses the network.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::Session;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column as DfColumn, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{provider_as_source, source_as_provider, TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Aggregate as DfAggregate, Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use puffer_query::QueryError;
use puffer_store::{
    Aggregate, AggregateQuery, AggregateResult, AggregateState, AttrType, TimeBucket, Value,
};

use crate::filters::{all_of, predicate_of};
use crate::provider::PufferTable;

/// The name the store's answer is scanned under (the projection above it renames).
const ANSWER: &str = "__puffer_aggregate";

/// The optimizer rule (see the module's docs).
#[derive(Debug, Default)]
pub struct PushAggregates;

impl OptimizerRule for PushAggregates {
    fn name(&self) -> &str {
        "puffer_push_aggregates"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        match pushed(aggregate)? {
            Some(rewritten) => Ok(Transformed::yes(rewritten)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// The aggregation as a scan of the store's answer, where the store computes all of it.
fn pushed(aggregate: &DfAggregate) -> DfResult<Option<LogicalPlan>> {
    // A scan under an alias (`FROM t AS x`, a CTE) is the same scan: columns are
    // matched by name.
    let input = match aggregate.input.as_ref() {
        LogicalPlan::SubqueryAlias(alias) => alias.input.as_ref(),
        other => other,
    };
    let LogicalPlan::TableScan(scan) = input else {
        return Ok(None);
    };
    if scan.fetch.is_some() {
        return Ok(None);
    }
    let Ok(provider) = source_as_provider(&scan.source) else {
        return Ok(None);
    };
    let Some(table) = provider.downcast_ref::<PufferTable>() else {
        return Ok(None);
    };
    let schema = table.store_schema();
    let attribute_type = |column: &DfColumn| -> Option<AttrType> {
        let id = schema.id_of(&column.name)?;
        Some(schema.attributes[id as usize].attr_type)
    };
    let mut predicates = Vec::with_capacity(scan.filters.len());
    for filter in &scan.filters {
        match predicate_of(filter, &schema) {
            Some(pushed) if pushed.exact => predicates.push(pushed.predicate),
            _ => return Ok(None),
        }
    }
    let (group_by, bucket) = match aggregate.group_expr.as_slice() {
        [] => (None, None),
        [Expr::Column(column)] => match attribute_type(column) {
            Some(AttrType::Float) | None => return Ok(None),
            Some(_) => (Some(column.name.clone()), None),
        },
        [Expr::ScalarFunction(function)] if function.name() == "date_trunc" => {
            match function.args.as_slice() {
                [Expr::Literal(ScalarValue::Utf8(Some(unit)), _), Expr::Column(column)]
                    if attribute_type(column) == Some(AttrType::Timestamp) =>
                {
                    match TimeBucket::of_unit(unit) {
                        Some(bucket) => (Some(column.name.clone()), Some(bucket)),
                        None => return Ok(None),
                    }
                }
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    if aggregate.aggr_expr.len() > puffer_store::aggregate::MAX_AGGREGATES {
        return Ok(None);
    }
    let mut aggregates = Vec::with_capacity(aggregate.aggr_expr.len());
    for expr in &aggregate.aggr_expr {
        let expr = match expr {
            Expr::Alias(alias) => alias.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = expr else {
            return Ok(None);
        };
        if params.distinct
            || params.filter.is_some()
            || !params.order_by.is_empty()
            || params.args.len() != 1
        {
            return Ok(None);
        }
        // AVG and SUM of an integer column come as of the column cast to a float.
        let argument = match &params.args[0] {
            Expr::Cast(cast)
                if matches!(func.name(), "avg" | "sum")
                    && cast.field.data_type() == &DataType::Float64
                    && matches!(cast.expr.as_ref(), Expr::Column(c)
                        if attribute_type(c) == Some(AttrType::Int)) =>
            {
                cast.expr.as_ref()
            }
            other => other,
        };
        let pushed = match (func.name(), argument) {
            ("count", Expr::Literal(value, _)) if !value.is_null() => Aggregate::Rows,
            ("count", Expr::Column(c)) if c.name == schema.key => Aggregate::Rows,
            (name, Expr::Column(c)) => match (name, attribute_type(c)) {
                (_, None) => return Ok(None),
                ("count", Some(_)) => Aggregate::Count(c.name.clone()),
                ("sum", Some(AttrType::Int | AttrType::Float)) => Aggregate::Sum(c.name.clone()),
                ("avg", Some(AttrType::Int | AttrType::Float)) => Aggregate::Avg(c.name.clone()),
                ("min", Some(_)) => Aggregate::Min(c.name.clone()),
                ("max", Some(_)) => Aggregate::Max(c.name.clone()),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        aggregates.push(pushed);
    }
    let query = AggregateQuery {
        predicate: all_of(predicates),
        group_by,
        bucket,
        aggregates,
        max_rows: table.max_scan_rows(),
        read: table.read_options(),
    };
    // The answer's columns c0, c1, ... typed as the aggregation's output.
    let fields: Vec<Field> = aggregate
        .schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            Field::new(
                format!("c{i}"),
                field.data_type().clone(),
                field.is_nullable(),
            )
            .with_metadata(field.metadata().clone())
        })
        .collect();
    let answer = StoreAggregate {
        table: table.clone(),
        query,
        schema: Arc::new(ArrowSchema::new(fields)),
    };
    let renamed: Vec<Expr> = aggregate
        .schema
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            Expr::Column(DfColumn::new(Some(ANSWER), format!("c{i}")))
                .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    let plan = LogicalPlanBuilder::scan(ANSWER, provider_as_source(Arc::new(answer)), None)?
        .project(renamed)?
        .build()?;
    Ok(Some(plan))
}

/// The store's answer to one aggregation, as a table of one row per group.
#[derive(Debug)]
struct StoreAggregate {
    table: PufferTable,
    query: AggregateQuery,
    /// The group column (if any) and each aggregate, as the aggregation types them.
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for StoreAggregate {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let external = |e: QueryError| DataFusionError::External(Box::new(e));
        let result = self.table.aggregate(&self.query).map_err(external)?;
        let batch = batch_of(&self.query, result, &self.schema).map_err(external)?;
        let batch = match projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        };
        let schema = batch.schema();
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            None,
        )?)
    }
}

/// One row per group: the group's value (where grouped), then each aggregate's.
fn batch_of(
    query: &AggregateQuery,
    result: AggregateResult,
    schema: &SchemaRef,
) -> Result<RecordBatch, QueryError> {
    let grouped = usize::from(query.group_by.is_some());
    let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); schema.fields().len()];
    for (value, states) in &result.groups {
        if grouped == 1 {
            columns[0].push(scalar(value.as_ref(), schema.field(0).data_type())?);
        }
        for (i, (aggregate, state)) in query.aggregates.iter().zip(states).enumerate() {
            let data_type = schema.field(grouped + i).data_type();
            columns[grouped + i].push(final_value(aggregate, state, data_type)?);
        }
    }
    let arrays = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(values, field)| {
            if values.is_empty() {
                return Ok(datafusion::arrow::array::new_empty_array(field.data_type()));
            }
            ScalarValue::iter_to_array(values).map_err(|e| QueryError::Invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(result.groups.len()));
    RecordBatch::try_new_with_options(schema.clone(), arrays, &options)
        .map_err(|e| QueryError::Invalid(format!("an aggregate answer does not fit: {e}")))
}

/// An aggregate's value from its merged state, as `data_type` (the type DataFusion
/// gives that aggregate).
fn final_value(
    aggregate: &Aggregate,
    state: &AggregateState,
    data_type: &DataType,
) -> Result<ScalarValue, QueryError> {
    let value = match (aggregate, state) {
        (Aggregate::Rows | Aggregate::Count(_), AggregateState::Count(n)) => {
            Some(Value::Int(i64::try_from(*n).map_err(|_| {
                QueryError::Limit(format!("a count of {n} does not fit 64 bits"))
            })?))
        }
        (_, AggregateState::Sum { values: 0, .. }) => None,
        (Aggregate::Sum(a), AggregateState::Sum { int, float, .. }) => Some(match data_type {
            DataType::Float64 => Value::Float(*float + *int as f64),
            _ => Value::Int(
                i64::try_from(*int)
                    .map_err(|_| QueryError::Limit(format!("SUM({a}) overflows 64 bits")))?,
            ),
        }),
        (Aggregate::Avg(_), AggregateState::Sum { int, float, values }) => {
            Some(Value::Float((*float + *int as f64) / *values as f64))
        }
        (Aggregate::Min(_), AggregateState::Min(value))
        | (Aggregate::Max(_), AggregateState::Max(value)) => value.clone(),
        (aggregate, state) => {
            return Err(QueryError::Invalid(format!(
                "the store answered {aggregate:?} with {state:?}"
            )))
        }
    };
    scalar(value.as_ref(), data_type)
}

/// A store value (`None`: NULL) as a DataFusion scalar of `data_type`.
fn scalar(value: Option<&Value>, data_type: &DataType) -> Result<ScalarValue, QueryError> {
    let wrong = |value: &Value| {
        QueryError::Invalid(format!(
            "the store answered {value:?} where {data_type} was expected"
        ))
    };
    Ok(match (value, data_type) {
        (None, data_type) => {
            ScalarValue::try_from(data_type).map_err(|e| QueryError::Invalid(e.to_string()))?
        }
        (Some(Value::Int(i)), DataType::Int64) => ScalarValue::Int64(Some(*i)),
        (Some(Value::Int(i)), DataType::Float64) => ScalarValue::Float64(Some(*i as f64)),
        (Some(Value::Float(f)), DataType::Float64) => ScalarValue::Float64(Some(*f)),
        (Some(Value::Bool(b)), DataType::Boolean) => ScalarValue::Boolean(Some(*b)),
        (Some(Value::String(s)), DataType::Utf8) => {
            ScalarValue::Utf8(Some(String::from_utf8_lossy(s).into_owned()))
        }
        (Some(Value::Timestamp(t)), DataType::Timestamp(TimeUnit::Microsecond, zone)) => {
            ScalarValue::TimestampMicrosecond(Some(*t), zone.clone())
        }
        (Some(value), _) => return Err(wrong(value)),
    })
}
