//! The HTTP handlers. Store and index work is blocking (fsyncs, index walks): most
//! handlers run it through [`blocking`]. The two hot reads, a get by key and a limited
//! search the index answers by locating one value, are short and bounded: they run on
//! the event loop thread itself when a replica has a free worker slot (sparing the thread
//! hand-offs, which cost more than the read), and through [`blocking`] when it has none.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use puffer_node::{Answer, ReadAnswer, ReadRequest, Table, TableLayout, Wait};
use puffer_query::{Output, Select, Statement};
use puffer_store::{AttrType, Attribute, ReadOptions, Schema, WriteOp};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value as JsonValue};

use crate::answers::{answer_response, rows_response, Format, RowsAnswer};
use crate::auth::{require, Role};
use crate::error::{status_of, ApiError, ErrorCode};
use crate::values::{predicate_from_json, record_from_json, snapshot_json, RawRecordJson};
use crate::AppState;

pub(crate) type Shared = State<Arc<AppState>>;

/// Runs blocking work (fsync waits, index walks) on this worker thread, after handing
/// its other tasks to the rest of the runtime: no thread hop per request, as
/// `spawn_blocking` would cost, and no stalled tasks behind a long query.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::block_in_place(work)
}

fn freshness(seconds: Option<f64>) -> Result<Option<Duration>, ApiError> {
    match seconds {
        None => Ok(None),
        Some(s)
            if s.is_finite() && (0.0..=puffer_query::sql::MAX_FRESHNESS_SECONDS).contains(&s) =>
        {
            Ok(Some(Duration::from_secs_f64(s)))
        }
        Some(s) => Err(ApiError::invalid(format!(
            "freshness_s must be a number of seconds >= 0, got {s}"
        ))),
    }
}

fn describe(db: &puffer_node::Database, name: &str, table: &Table) -> Result<JsonValue, ApiError> {
    let schema = table.schema();
    let stats = table.stats()?;
    let marks = table.watermarks()?;
    let layout = table.layout();
    Ok(json!({
        "name": name,
        "key": schema.key,
        "attributes": schema.attributes,
        "shards": layout.shards,
        "replicas": layout.replicas,
        "stats": {
            "disk_bytes": stats.disk_bytes,
            "memory_bytes": stats.memory_bytes,
            "key_directory_bytes": stats.key_directory_bytes,
            "segment_records": stats.segment_records,
            "segments": stats.segments,
            "sorted_batches": stats.sorted_batches,
            "log_tables": stats.log_tables,
            "record_cache": {
                "bytes": stats.record_cache.bytes,
                "capacity_bytes": stats.record_cache.capacity_bytes,
                "entries": stats.record_cache.entries,
                "hits": stats.record_cache.hits,
                "misses": stats.record_cache.misses,
            },
        },
        "watermarks": {
            "published": marks.published,
            "sorted": marks.sorted,
            "compressed": marks.compressed,
        },
        "partition": table.partition().map(|p| json!({
            "attribute": p.attribute,
            "granularity": p.granularity.name(),
            "chunk_shards": p.chunk_layout.shards,
            "chunk_replicas": p.chunk_layout.replicas,
        })),
        "chunk_of": table.chunk_of().map(|c| json!({
            "table": c.table,
            "start": puffer_store::timestamp::format_timestamp_micros(c.start_micros),
        })),
        "subspace_of": table.subspace_of().map(|s| json!({
            "table": s.table,
            "attributes": s.attributes,
            "ready": s.ready,
        })),
        "subspaces": db.describe_subspaces(name),
    }))
}

/// `{"record", "snapshot"}`: a found record.
#[derive(Serialize)]
struct GetBody<R> {
    record: R,
    snapshot: JsonValue,
}

fn role_for(statement: &Statement) -> Role {
    match statement {
        Statement::Select(_) | Statement::ShowTables | Statement::Describe { .. } => Role::Read,
        Statement::Insert { .. } | Statement::Delete { .. } => Role::Write,
        Statement::CreateTable { .. }
        | Statement::DropTable { .. }
        | Statement::AddSubspace { .. }
        | Statement::DropSubspace { .. } => Role::Admin,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SqlRequest {
    query: String,
    freshness_s: Option<f64>,
    #[serde(default)]
    format: Format,
}

fn check_sizes(state: &AppState, statement: &mut Statement) -> Result<(), ApiError> {
    match statement {
        Statement::Insert { records, .. } if records.len() > state.config.max_batch_records => {
            Err(ApiError::limit(format!(
                "a batch holds at most {} records",
                state.config.max_batch_records
            )))
        }
        Statement::Delete { keys, .. } if keys.len() > state.config.max_batch_records => {
            Err(ApiError::limit(format!(
                "a batch holds at most {} keys",
                state.config.max_batch_records
            )))
        }
        Statement::Select(select) => {
            let max = state.config.max_result_rows;
            match select.limit {
                Some(limit) if limit > max => Err(ApiError::limit(format!(
                    "LIMIT {limit} exceeds the largest answer, {max} rows"
                ))),
                Some(_) => Ok(()),
                None => {
                    select.limit = Some(max);
                    Ok(())
                }
            }
        }
        _ => Ok(()),
    }
}

pub(crate) async fn sql(
    State(state): Shared,
    Extension(role): Extension<Role>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    // Anonymous callers learn nothing, not even whether the SQL parses or a table exists.
    require(role, Role::Read)?;
    let request: SqlRequest = parse_json(&body?)?;
    let bound = freshness(request.freshness_s)?;
    blocking(move || {
        let mut statement = match puffer_query::sql::parse(&request.query, state.db.as_ref()) {
            Err(error) => match analytics(&state, &error, &request.query, bound) {
                Some(answer) => return Ok(rows_response(answer?, request.format)),
                None => return Err(error.into()),
            },
            Ok(statement) => statement,
        };
        require(role, role_for(&statement))?;
        check_sizes(&state, &mut statement)?;
        if let (Statement::Select(select), Some(bound)) = (&mut statement, bound) {
            select.freshness.get_or_insert(bound);
        }
        let schema = match &statement {
            Statement::Select(select) => Some(state.db.table(&select.table)?.schema()),
            _ => None,
        };
        let answer = state.db.execute(statement)?;
        Ok(answer_response(answer, schema.as_deref(), request.format))
    })
    .await
}

/// A query beyond PufferDB's own subset (GROUP BY, ORDER BY, joins, ...) that the
/// subset refused with `error`, planned by DataFusion over the tables at one snapshot;
/// `None` for anything else.
#[cfg(feature = "analytics")]
fn analytics(
    state: &AppState,
    error: &puffer_query::QueryError,
    query: &str,
    freshness: Option<std::time::Duration>,
) -> Option<Result<RowsAnswer, ApiError>> {
    if !puffer_analytics::takes(error, query) {
        return None;
    }
    let options = puffer_analytics::AnalyticsOptions {
        max_result_rows: state.config.max_result_rows,
        ..Default::default()
    };
    let answer = puffer_analytics::run_batches(&state.db, query, freshness, &options);
    Some(answer.map(RowsAnswer::of_batches).map_err(ApiError::from))
}

/// Without the `analytics` feature (the fuzz targets' build) the subset is all.
#[cfg(not(feature = "analytics"))]
fn analytics(
    _state: &AppState,
    _error: &puffer_query::QueryError,
    _query: &str,
    _freshness: Option<std::time::Duration>,
) -> Option<Result<RowsAnswer, ApiError>> {
    None
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::new(ErrorCode::BadJson, format!("bad JSON body: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTable {
    name: String,
    key: String,
    #[serde(default)]
    attributes: Vec<Attribute>,
    /// Shards (default: the server's `[adapt] shards`).
    shards: Option<u32>,
    /// Replicas per shard (default: the server's `[adapt] replicas`).
    replicas: Option<u32>,
    /// Time-partitioned by a timestamp attribute: `{"attribute", "granularity":
    /// "hour" | "day" | "month"}` (shards and replicas are then each chunk's).
    partition_by: Option<puffer_query::TimePartition>,
}

pub(crate) async fn create_table(
    State(state): Shared,
    Extension(role): Extension<Role>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Admin)?;
    let request: CreateTable = parse_json(&body?)?;
    blocking(move || {
        let schema = Schema::new(&request.key, request.attributes)?;
        let defaults = &state.config.adapt;
        let layout = TableLayout {
            shards: request.shards.unwrap_or(defaults.shards),
            replicas: request.replicas.unwrap_or(defaults.replicas),
        };
        state
            .db
            .create_table_partitioned(&request.name, schema, layout, request.partition_by)?;
        let shard = state.db.table(&request.name)?;
        Ok((
            StatusCode::CREATED,
            Json(describe(&state.db, &request.name, &shard)?),
        )
            .into_response())
    })
    .await
}

pub(crate) async fn list_tables(
    State(state): Shared,
    Extension(role): Extension<Role>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    blocking(move || {
        let mut tables = Vec::new();
        for name in state.db.table_names() {
            if let Ok(shard) = state.db.table(&name) {
                tables.push(describe(&state.db, &name, &shard)?);
            }
        }
        Ok(Json(json!({"tables": tables})))
    })
    .await
}

pub(crate) async fn get_table(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    blocking(move || {
        let shard = state.db.table(&table)?;
        Ok(Json(describe(&state.db, &table, &shard)?))
    })
    .await
}

pub(crate) async fn drop_table(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    blocking(move || {
        state.db.drop_table(&table)?;
        Ok(Json(json!({"ok": true})))
    })
    .await
}

/// Records of a batch body: a JSON array, or JSON Lines.
fn batch_records(
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
) -> Result<Vec<JsonValue>, ApiError> {
    let jsonl = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("ndjson") || v.contains("jsonl"));
    let items: Vec<JsonValue> = if jsonl {
        let text = std::str::from_utf8(body)
            .map_err(|_| ApiError::new(ErrorCode::BadJson, "the body is not UTF-8"))?;
        text.lines()
            .filter(|line| !line.trim().is_empty())
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str(line)
                    .map_err(|e| ApiError::new(ErrorCode::BadJson, format!("line {}: {e}", i + 1)))
            })
            .collect::<Result<_, _>>()?
    } else {
        match parse_json::<JsonValue>(body)? {
            JsonValue::Array(items) => items,
            object @ JsonValue::Object(_) => vec![object],
            other => {
                return Err(ApiError::invalid(format!(
                    "a batch is a JSON array of records, not {other}"
                )))
            }
        }
    };
    if items.is_empty() {
        return Err(ApiError::invalid("a batch needs at least one record"));
    }
    if items.len() > limit {
        return Err(ApiError::limit(format!(
            "a batch holds at most {limit} records; got {}",
            items.len()
        )));
    }
    Ok(items)
}

pub(crate) async fn put_records(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Write)?;
    let items = batch_records(&headers, &body?, state.config.max_batch_records)?;
    blocking(move || {
        let shard = state.db.table(&table)?;
        let schema = shard.schema();
        let records = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                record_from_json(item, &schema).map_err(|mut e| {
                    e.code = ErrorCode::InvalidRecord;
                    e.message = format!("record {i}: {}", e.message);
                    e
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let answer = state.db.execute(Statement::Insert { table, records })?;
        Ok(Json(match answer {
            Answer::Written { seq, operations } => json!({"seq": seq, "operations": operations}),
            other => return Err(ApiError::internal(format!("unexpected answer {other:?}"))),
        }))
    })
    .await
}

/// `POST /v1/batches`: one SCU over one or more tables, all or nothing:
/// `{"operations": [{"table": "t", "put": {record}}, {"table": "u", "delete": "key"}, ...]}`,
/// applied in the order given.
pub(crate) async fn put_batch(
    State(state): Shared,
    Extension(role): Extension<Role>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Write)?;
    let body = parse_json::<JsonValue>(&body?)?;
    let Some(items) = body.get("operations").and_then(JsonValue::as_array) else {
        return Err(ApiError::invalid(
            "a batch is {\"operations\": [{\"table\": ..., \"put\": {...}} or {\"table\": ..., \"delete\": key}, ...]}",
        ));
    };
    if items.is_empty() {
        return Err(ApiError::invalid("a batch needs at least one operation"));
    }
    let limit = state.config.max_batch_records;
    if items.len() > limit {
        return Err(ApiError::limit(format!(
            "a batch holds at most {limit} operations; got {}",
            items.len()
        )));
    }
    let items = items.clone();
    blocking(move || {
        let mut parts: Vec<(String, Vec<WriteOp>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let op = batch_operation(&state, i, item)?;
            let table = item["table"].as_str().unwrap_or_default();
            match parts.iter_mut().find(|(name, _)| name == table) {
                Some((_, ops)) => ops.push(op),
                None => parts.push((table.to_string(), vec![op])),
            }
        }
        let operations = items.len();
        let seq = state.db.write_batch(parts)?;
        Ok(Json(json!({"seq": seq, "operations": operations})))
    })
    .await
}

/// One operation of a `POST /v1/batches` body.
fn batch_operation(state: &AppState, i: usize, item: &JsonValue) -> Result<WriteOp, ApiError> {
    let at = |message: String| ApiError::invalid(format!("operation {i}: {message}"));
    let Some(object) = item.as_object() else {
        return Err(at(format!("an operation is an object, not {item}")));
    };
    let Some(table) = object.get("table").and_then(JsonValue::as_str) else {
        return Err(at("it needs \"table\": the table's name".into()));
    };
    match (object.get("put"), object.get("delete")) {
        (Some(record), None) => {
            let schema = state.db.table(table)?.schema();
            let record = record_from_json(record, &schema).map_err(|mut e| {
                e.code = ErrorCode::InvalidRecord;
                e.message = format!("operation {i}: {}", e.message);
                e
            })?;
            Ok(WriteOp::Put(record))
        }
        (None, Some(JsonValue::String(key))) => Ok(WriteOp::Delete(key.as_bytes().to_vec())),
        (None, Some(other)) => Err(at(format!("a delete names a key as a string, not {other}"))),
        _ => Err(at(
            "it needs exactly one of \"put\" (a record) or \"delete\" (a key)".into(),
        )),
    }
}

#[derive(Deserialize)]
pub(crate) struct ReadParams {
    freshness_s: Option<f64>,
}

pub(crate) async fn get_record(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path((table, key)): Path<(String, String)>,
    params: Result<Query<ReadParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Read)?;
    let Query(params) = params?;
    let bound = freshness(params.freshness_s)?;
    let read = ReadOptions {
        freshness: bound,
        min_snapshot: 0,
        at: None,
    };
    let request = ReadRequest::GetRaw {
        key: key.as_bytes().to_vec(),
        read,
    };
    // On the event loop thread if a replica is free now, else on a blocking thread
    // (always, where the read goes to other nodes).
    let answer = match state.db.read(&table, &request, Wait::Never)? {
        Some(answer) => answer,
        None => {
            let name = table.clone();
            blocking(move || {
                state
                    .db
                    .read(&name, &request, Wait::Allowed)?
                    .ok_or_else(|| {
                        ApiError::internal("a read allowed to wait for a replica got no answer")
                    })
            })
            .await?
        }
    };
    let ReadAnswer::Raw {
        record,
        schema,
        snapshot,
    } = answer
    else {
        return Err(ApiError::internal(format!(
            "a read of one record got {answer:?}"
        )));
    };
    get_response(&table, &key, (record, schema, snapshot))
}

fn get_response(
    table: &str,
    key: &str,
    (found, schema, info): puffer_node::RawAnswer,
) -> Result<Response, ApiError> {
    let snapshot = snapshot_json(&info);
    Ok(match found {
        Some(record) => Json(GetBody {
            record: RawRecordJson {
                record: &record,
                schema: &schema,
            },
            snapshot,
        })
        .into_response(),
        None => (
            status_of(ErrorCode::NotFound),
            Json(json!({
                "code": ErrorCode::NotFound,
                "message": format!("no record with key {key:?} in table {table:?}"),
                "retryable": false,
                "record": null,
                "snapshot": snapshot,
            })),
        )
            .into_response(),
    })
}

pub(crate) async fn delete_record(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path((table, key)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Write)?;
    blocking(move || {
        let answer = state.db.execute(Statement::Delete {
            table,
            keys: vec![key.into_bytes()],
        })?;
        match answer {
            Answer::Written { seq, .. } => Ok(Json(json!({"seq": seq}))),
            other => Err(ApiError::internal(format!("unexpected answer {other:?}"))),
        }
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchRequest {
    #[serde(rename = "where")]
    condition: Option<JsonValue>,
    columns: Option<Vec<String>>,
    limit: Option<usize>,
    #[serde(default)]
    count: bool,
    freshness_s: Option<f64>,
    #[serde(default)]
    format: Format,
}

pub(crate) async fn search(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Read)?;
    let request: SearchRequest = parse_json(&body?)?;
    let bound = freshness(request.freshness_s)?;
    let shard = state.db.table(&table)?;
    let schema = shard.schema();
    let predicate = match &request.condition {
        None => puffer_store::Predicate::All,
        Some(json) => predicate_from_json(json, &schema)?,
    };
    let output = match (request.count, request.columns) {
        (true, _) => Output::Count,
        (false, None) => Output::All,
        (false, Some(columns)) => Output::Columns(columns),
    };
    let mut statement = Statement::Select(Select {
        table,
        output,
        predicate,
        limit: request.limit,
        freshness: bound,
    });
    check_sizes(&state, &mut statement)?;
    if let Statement::Select(select) = &statement {
        if short_search(select, &schema.key) {
            if let Some(answer) = state.db.select(select, Wait::Never)? {
                return Ok(answer_response(answer, Some(&schema), request.format));
            }
        }
    }
    blocking(move || {
        let answer = state.db.execute(statement)?;
        Ok(answer_response(answer, Some(&schema), request.format))
    })
    .await
}

/// Most rows a search may ask for and still run on the event loop thread.
const EVENT_LOOP_MAX_ROWS: usize = 100;
/// Most values of an `IN` a search may hold and still run on the event loop thread.
const EVENT_LOOP_MAX_IN_VALUES: usize = 16;

/// Whether a search is short enough for the event loop thread: a few rows found by
/// locating one value (equality, or a short `IN`) of an attribute in the compressed
/// index, whose matches are exact, so the work ends with the limit. Not a count (it may
/// visit every match), a conjunction (it may walk many matches that fail the other
/// conditions), a condition on the key, or anything answered by a scan.
fn short_search(select: &Select, key: &str) -> bool {
    use puffer_store::Predicate as P;
    let located = match &select.predicate {
        P::Eq(attribute, _) => attribute != key,
        P::In(attribute, values) => attribute != key && values.len() <= EVENT_LOOP_MAX_IN_VALUES,
        _ => false,
    };
    located
        && !matches!(select.output, Output::Count)
        && select
            .limit
            .is_some_and(|limit| limit <= EVENT_LOOP_MAX_ROWS)
}

pub(crate) async fn health() -> Json<JsonValue> {
    Json(json!({"status": "ok"}))
}

pub(crate) async fn ready(State(state): Shared) -> Response {
    let names = state.db.table_names();
    let writable = names
        .iter()
        .all(|name| state.db.table(name).is_ok_and(|shard| shard.is_running()));
    if writable {
        Json(json!({"status": "ready", "tables": names.len()})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready"})),
        )
            .into_response()
    }
}

/// The attribute types, for the OpenAPI document.
pub(crate) fn type_names() -> Vec<&'static str> {
    [
        AttrType::String,
        AttrType::Int,
        AttrType::Float,
        AttrType::Bool,
        AttrType::Timestamp,
    ]
    .iter()
    .map(|t| t.name())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answers::AnswerWriter;
    use crate::values::{answer_json, RecordJson, StoredRecordJson};
    use puffer_store::RawRecord;
    use puffer_store::{AttrType, Record, SnapshotInfo, Value};
    use serde_json::Map;

    /// Records with every value type, non-UTF-8 bytes, escapes and non-finite floats.
    fn records() -> Vec<Record> {
        let mut out = Vec::new();
        for i in 0..40i64 {
            let mut record = Record::new(format!("k\"{i}\\\u{e9}").into_bytes());
            record
                .values
                .insert("s".into(), Value::String(vec![b'a', 0xff, b'\n', i as u8]));
            record
                .values
                .insert("n".into(), Value::Int(i * -7_000_000_001));
            let float = [0.5, -0.0, 1e300, f64::NAN, f64::INFINITY][i as usize % 5];
            record
                .values
                .insert("f".into(), Value::Float(float * i as f64));
            record.values.insert("b".into(), Value::Bool(i % 2 == 0));
            if i % 3 == 0 {
                record
                    .values
                    .insert("t".into(), Value::Timestamp(i * 86_400_000_123));
            }
            out.push(record);
        }
        out
    }

    /// The oracle: the JSON tree built field by field, as the answer once was.
    fn record_tree(record: &Record, key_column: &str) -> JsonValue {
        let mut object = Map::new();
        object.insert(
            key_column.to_string(),
            JsonValue::String(String::from_utf8_lossy(&record.key).into_owned()),
        );
        for (name, value) in &record.values {
            let json = match value {
                Value::String(bytes) => {
                    JsonValue::String(String::from_utf8_lossy(bytes).into_owned())
                }
                Value::Int(x) => json!(x),
                Value::Float(x) => json!(x),
                Value::Bool(b) => json!(b),
                Value::Timestamp(micros) => {
                    JsonValue::String(puffer_store::timestamp::format_timestamp_micros(*micros))
                }
            };
            object.insert(name.clone(), json);
        }
        JsonValue::Object(object)
    }

    #[test]
    fn records_written_directly_read_back_as_the_json_tree() {
        let rows = records();
        let snapshot = SnapshotInfo {
            snapshot: 9,
            age: Duration::from_millis(3),
            read_log: true,
        };
        let columns = vec!["id".to_string(), "s".to_string()];
        let want = json!({
            "columns": columns,
            "rows": rows.iter().map(|r| record_tree(r, "id")).collect::<Vec<_>>(),
            "truncated": true,
            "snapshot": snapshot_json(&snapshot),
        });
        let answer = Answer::Rows {
            columns: columns.clone(),
            rows: rows.clone(),
            truncated: true,
            snapshot,
        };
        let schema = Schema::new("id", Vec::new()).unwrap();
        assert_eq!(answer_json(&answer, Some(&schema)), want);
        let rows_answer = RowsAnswer::of(answer, Some(&schema)).ok().unwrap();
        let mut writer = AnswerWriter::new(rows_answer, Format::Json);
        let mut written = Vec::new();
        while let Some(chunk) = writer.next_chunk() {
            written.extend_from_slice(&chunk.unwrap());
        }
        let written: JsonValue = serde_json::from_slice(&written).unwrap();
        assert_eq!(written, want);
        for record in &rows {
            let get = GetBody {
                record: RecordJson {
                    record,
                    key_column: "id",
                },
                snapshot: json!(1),
            };
            let written: JsonValue =
                serde_json::from_slice(&serde_json::to_vec(&get).unwrap()).unwrap();
            assert_eq!(
                written,
                json!({"record": record_tree(record, "id"), "snapshot": 1})
            );
        }
    }

    #[test]
    fn stored_records_written_directly_read_back_as_the_json_tree() {
        let schema = Schema::new(
            "id",
            [
                ("t", AttrType::Timestamp),
                ("s", AttrType::String),
                ("b", AttrType::Bool),
                ("n", AttrType::Int),
                ("f", AttrType::Float),
            ]
            .into_iter()
            .map(|(name, attr_type)| puffer_store::Attribute {
                name: name.into(),
                attr_type,
            })
            .collect(),
        )
        .unwrap();
        for record in records() {
            let mut fields: Vec<(u16, Value)> = record
                .values
                .iter()
                .map(|(name, value)| (schema.id_of(name).unwrap(), value.clone()))
                .collect();
            fields.sort_by_key(|(id, _)| *id);
            // An id the schema does not name is left out, as when naming the record.
            fields.push((99, Value::Int(1)));
            let stored = puffer_store::schema::StoredRecord {
                key: record.key.clone(),
                fields,
            };
            let want = json!({"record": record_tree(&record, "id"), "snapshot": 2});
            let get = GetBody {
                record: StoredRecordJson {
                    record: &stored,
                    schema: &schema,
                },
                snapshot: json!(2),
            };
            let written: JsonValue =
                serde_json::from_slice(&serde_json::to_vec(&get).unwrap()).unwrap();
            assert_eq!(written, want);
            // The same record from a log table and as a segment's text (floats in a
            // text are finite: a store refuses others).
            let mut raws = vec![RawRecord::Stored(stored.clone())];
            if stored.fields.iter().all(|(_, v)| match v {
                Value::Float(x) => x.is_finite(),
                _ => true,
            }) {
                let mut text = Vec::new();
                puffer_store::codec::push_record(&mut text, &stored);
                raws.push(RawRecord::Text {
                    key: stored.key.clone(),
                    text: text.into(),
                });
            }
            for raw in &raws {
                let get = GetBody {
                    record: RawRecordJson {
                        record: raw,
                        schema: &schema,
                    },
                    snapshot: json!(2),
                };
                let written: JsonValue =
                    serde_json::from_slice(&serde_json::to_vec(&get).unwrap()).unwrap();
                assert_eq!(written, want, "{raw:?}");
            }
        }
    }
}
