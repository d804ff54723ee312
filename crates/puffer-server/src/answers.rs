//! Row answers written as JSON, JSON Lines, CSV or an Arrow IPC stream, a chunk at a
//! time. The rows stay in the form they were computed in (records, values, or the SQL
//! engine's Arrow batches); each chunk of at most [`CHUNK_BYTES`] (or one Arrow batch
//! of [`ARROW_BATCH_ROWS`] rows) is encoded when the connection can take it. So a large
//! answer is never held whole as text, its first bytes leave before its last are
//! written, and a slow reader holds one chunk, not the answer. An answer that fits in
//! one chunk is sent whole, with its length.
//!
//! Everything the headers say (the snapshot, whether rows were cut) is known before the
//! first byte: the answer is complete, only its encoding is streamed. An error while a
//! later chunk is encoded (a bug, not bad input) cuts the connection, so the client
//! sees a broken answer, never a short one that looks whole.

use std::borrow::Cow;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use puffer_node::Answer;
use puffer_store::{AttrType, Record, Schema, SnapshotInfo, Value};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Deserialize;

use crate::error::ApiError;
#[cfg(not(feature = "analytics"))]
use crate::error::ErrorCode;
use crate::values::{answer_json, snapshot_json, RecordJson, ValueJson};

/// Bytes of text a chunk of a streamed answer holds (it ends at the first row past it).
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Rows per record batch of an Arrow answer (each batch is one chunk).
pub const ARROW_BATCH_ROWS: usize = 8192;

/// Output format of row answers.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object.
    #[default]
    Json,
    /// JSON Lines: one row per line, then the snapshot.
    Jsonl,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream (`application/vnd.apache.arrow.stream`), the snapshot in
    /// headers: for clients that read columns (pandas, Polars, DuckDB).
    Arrow,
}

/// An answer's rows, as they were computed.
pub enum Rows {
    /// Records of a table (the direct path's selects and searches).
    Records {
        /// The records.
        records: Vec<Record>,
        /// The name of the table's key column.
        key_column: String,
        /// Each column's type in the table's schema (`None`: not in it).
        column_types: Vec<Option<AttrType>>,
    },
    /// A value (or NULL) per column.
    Values(Vec<Vec<Option<Value>>>),
    /// The SQL engine's record batches.
    #[cfg(feature = "analytics")]
    Batches {
        /// The batches.
        batches: Vec<puffer_analytics::RecordBatch>,
        /// Their schema (known where there is no batch).
        schema: puffer_analytics::SchemaRef,
    },
}

/// A complete answer of rows, ready to be written.
pub struct RowsAnswer {
    /// The column names, in order.
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Rows,
    /// Whether a limit cut rows.
    pub truncated: bool,
    /// The snapshot read.
    pub snapshot: SnapshotInfo,
}

impl RowsAnswer {
    /// A rows answer of the database (`Err`: the answer, which is not rows). Records
    /// need the table's schema (for its key column).
    pub fn of(answer: Answer, schema: Option<&Schema>) -> Result<RowsAnswer, Box<Answer>> {
        match (answer, schema) {
            (
                Answer::Rows {
                    columns,
                    rows,
                    truncated,
                    snapshot,
                },
                Some(schema),
            ) => {
                let column_types = columns
                    .iter()
                    .map(|column| match *column == schema.key {
                        true => Some(AttrType::String),
                        false => schema
                            .id_of(column)
                            .map(|id| schema.attributes[id as usize].attr_type),
                    })
                    .collect();
                Ok(RowsAnswer {
                    columns,
                    rows: Rows::Records {
                        records: rows,
                        key_column: schema.key.clone(),
                        column_types,
                    },
                    truncated,
                    snapshot,
                })
            }
            (
                Answer::Computed {
                    columns,
                    rows,
                    truncated,
                    snapshot,
                },
                _,
            ) => Ok(RowsAnswer {
                columns,
                rows: Rows::Values(rows),
                truncated,
                snapshot,
            }),
            (other, _) => Err(Box::new(other)),
        }
    }

    /// An answer of the SQL engine.
    #[cfg(feature = "analytics")]
    pub fn of_batches(answer: puffer_analytics::Batches) -> RowsAnswer {
        RowsAnswer {
            columns: answer.columns,
            rows: Rows::Batches {
                batches: answer.batches,
                schema: answer.schema,
            },
            truncated: answer.truncated,
            snapshot: answer.snapshot,
        }
    }

    /// How many rows it holds.
    pub fn len(&self) -> usize {
        match &self.rows {
            Rows::Records { records, .. } => records.len(),
            Rows::Values(rows) => rows.len(),
            #[cfg(feature = "analytics")]
            Rows::Batches { batches, .. } => batches.iter().map(|b| b.num_rows()).sum(),
        }
    }

    /// Whether it holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type each column is written as in Arrow.
    #[cfg(feature = "analytics")]
    fn kinds(&self) -> Vec<Option<AttrType>> {
        let columns = 0..self.columns.len();
        match &self.rows {
            // Typed by the schema: no pass over the records.
            Rows::Records { column_types, .. } => column_types.clone(),
            Rows::Values(rows) => columns
                .map(|c| {
                    puffer_analytics::convert::kind_of_values(
                        rows.iter().filter_map(|row| row.get(c)?.as_ref()),
                    )
                })
                .collect(),
            #[cfg(feature = "analytics")]
            Rows::Batches { schema, .. } => schema
                .fields()
                .iter()
                .map(|f| puffer_analytics::convert::kind_of_type(f.data_type()))
                .collect(),
        }
    }
}

/// Some of an answer's rows.
enum Slice<'a> {
    Records(&'a [Record], &'a str),
    Values(Cow<'a, [Vec<Option<Value>>]>),
}

impl Slice<'_> {
    fn len(&self) -> usize {
        match self {
            Slice::Records(records, _) => records.len(),
            Slice::Values(rows) => rows.len(),
        }
    }

    /// Row `row` as a JSON object: a record as [`RecordJson`] writes it, values by
    /// column.
    fn write_json(
        &self,
        row: usize,
        columns: &[String],
        out: &mut Vec<u8>,
    ) -> Result<(), ApiError> {
        let written = match self {
            Slice::Records(records, key_column) => serde_json::to_writer(
                &mut *out,
                &RecordJson {
                    record: &records[row],
                    key_column,
                },
            ),
            Slice::Values(rows) => serde_json::to_writer(
                &mut *out,
                &ValuesRowJson {
                    columns,
                    row: &rows[row],
                },
            ),
        };
        written.map_err(|e| ApiError::internal(format!("writing an answer row as JSON: {e}")))
    }

    /// Row `row` as a CSV line.
    fn write_csv(&self, row: usize, columns: &[String], out: &mut Vec<u8>) {
        for (c, column) in columns.iter().enumerate() {
            if c > 0 {
                out.push(b',');
            }
            match self {
                Slice::Records(records, key_column) => {
                    let record = &records[row];
                    match column == key_column {
                        true => csv_text(&String::from_utf8_lossy(&record.key), out),
                        false => csv_value(record.values.get(column), out),
                    }
                }
                Slice::Values(rows) => csv_value(rows[row].get(c).and_then(Option::as_ref), out),
            }
        }
        out.push(b'\n');
    }

    /// The rows as values by column, for an Arrow batch.
    #[cfg(feature = "analytics")]
    fn values(&self, columns: &[String]) -> Cow<'_, [Vec<Option<Value>>]> {
        match self {
            Slice::Values(rows) => Cow::Borrowed(rows.as_ref()),
            Slice::Records(records, key_column) => Cow::Owned(
                records
                    .iter()
                    .map(|record| {
                        columns
                            .iter()
                            .map(|c| match c == key_column {
                                true => Some(Value::String(record.key.clone())),
                                false => record.values.get(c).cloned(),
                            })
                            .collect()
                    })
                    .collect(),
            ),
        }
    }
}

/// A row of values as a JSON object of its columns, in order.
struct ValuesRowJson<'a> {
    columns: &'a [String],
    row: &'a [Option<Value>],
}

impl Serialize for ValuesRowJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.columns.len()))?;
        for (c, column) in self.columns.iter().enumerate() {
            map.serialize_entry(
                column,
                &self.row.get(c).and_then(Option::as_ref).map(ValueJson),
            )?;
        }
        map.end()
    }
}

/// A CSV field: quoted where it holds a comma, quote or line break.
fn csv_text(text: &str, out: &mut Vec<u8>) {
    if text.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        out.extend_from_slice(text.replace('"', "\"\"").as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
}

/// A value as a CSV field: NULL empty, strings and timestamps as their text, numbers
/// and booleans as JSON writes them (a non-finite float, which JSON shows as `null`,
/// empty).
fn csv_value(value: Option<&Value>, out: &mut Vec<u8>) {
    match value {
        None => {}
        Some(Value::Float(x)) if !x.is_finite() => {}
        Some(Value::String(bytes)) => csv_text(&String::from_utf8_lossy(bytes), out),
        Some(Value::Timestamp(micros)) => out.extend_from_slice(
            puffer_store::timestamp::format_timestamp_micros(*micros).as_bytes(),
        ),
        Some(value) => {
            serde_json::to_writer(&mut *out, &ValueJson(value)).expect("a value always serializes")
        }
    }
}

/// The formats written as text.
#[derive(Clone, Copy)]
enum Text {
    Json,
    Jsonl,
    Csv,
}

/// Where the writer is in the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Head,
    Rows,
    Done,
}

/// An answer written a chunk at a time ([`AnswerWriter::next_chunk`]).
pub struct AnswerWriter {
    answer: RowsAnswer,
    format: Format,
    stage: Stage,
    /// The next row: its batch (for batches; 0 otherwise) and its place there.
    #[cfg_attr(not(feature = "analytics"), allow(dead_code))]
    batch: usize,
    row: usize,
    /// Whether a row was written (JSON separates rows with commas).
    wrote_row: bool,
    /// Bytes of text per chunk ([`CHUNK_BYTES`]).
    chunk_bytes: usize,
    /// Rows per Arrow batch ([`ARROW_BATCH_ROWS`]).
    #[cfg_attr(not(feature = "analytics"), allow(dead_code))]
    arrow_batch_rows: usize,
    #[cfg(feature = "analytics")]
    ipc: Option<puffer_analytics::convert::IpcWriter>,
}

impl AnswerWriter {
    /// A writer of `answer` in `format`.
    pub fn new(answer: RowsAnswer, format: Format) -> AnswerWriter {
        AnswerWriter {
            answer,
            format,
            stage: Stage::Head,
            batch: 0,
            row: 0,
            wrote_row: false,
            chunk_bytes: CHUNK_BYTES,
            arrow_batch_rows: ARROW_BATCH_ROWS,
            #[cfg(feature = "analytics")]
            ipc: None,
        }
    }

    /// The writer with other chunk sizes (at least a byte and a row), so tests can cut
    /// small answers into many chunks.
    #[cfg(test)]
    fn with_chunks(mut self, chunk_bytes: usize, arrow_batch_rows: usize) -> AnswerWriter {
        self.chunk_bytes = chunk_bytes.max(1);
        self.arrow_batch_rows = arrow_batch_rows.max(1);
        self
    }

    /// Whether every chunk was written.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The next up to `max_rows` rows (`None`: none left).
    fn next_rows(&mut self, max_rows: usize) -> Result<Option<Slice<'_>>, ApiError> {
        let start = self.row;
        match &self.answer.rows {
            Rows::Records {
                records,
                key_column,
                ..
            } => {
                let end = records.len().min(start.saturating_add(max_rows));
                self.row = end;
                Ok((start < end).then(|| Slice::Records(&records[start..end], key_column)))
            }
            Rows::Values(rows) => {
                let end = rows.len().min(start.saturating_add(max_rows));
                self.row = end;
                Ok((start < end).then(|| Slice::Values(Cow::Borrowed(&rows[start..end]))))
            }
            #[cfg(feature = "analytics")]
            Rows::Batches { batches, .. } => {
                while batches
                    .get(self.batch)
                    .is_some_and(|b| self.row >= b.num_rows())
                {
                    self.batch += 1;
                    self.row = 0;
                }
                let Some(batch) = batches.get(self.batch) else {
                    return Ok(None);
                };
                let start = self.row;
                let taken = (batch.num_rows() - start).min(max_rows);
                self.row += taken;
                let rows = puffer_analytics::convert::rows_of(&[batch.slice(start, taken)])?;
                Ok(Some(Slice::Values(Cow::Owned(rows))))
            }
        }
    }

    /// The next chunk of the answer (`None`: it was all written).
    pub fn next_chunk(&mut self) -> Option<Result<Bytes, ApiError>> {
        if self.stage == Stage::Done {
            return None;
        }
        let chunk = match self.format {
            Format::Arrow => self.arrow_chunk(),
            Format::Json => self.text_chunk(Text::Json),
            Format::Jsonl => self.text_chunk(Text::Jsonl),
            Format::Csv => self.text_chunk(Text::Csv),
        };
        if chunk.is_err() {
            self.stage = Stage::Done;
        }
        Some(chunk.map(Bytes::from))
    }

    fn text_chunk(&mut self, text: Text) -> Result<Vec<u8>, ApiError> {
        // Grown as written: most answers are small, and a chunk's full size allocated
        // for each of them would cost the hot path for nothing.
        let mut out = Vec::new();
        if self.stage == Stage::Head {
            self.write_head(&mut out)?;
            self.stage = Stage::Rows;
        }
        let columns = std::mem::take(&mut self.answer.columns);
        let written = self.text_rows(text, &columns, &mut out);
        self.answer.columns = columns;
        if written? {
            self.write_tail(&mut out)?;
            self.stage = Stage::Done;
        }
        Ok(out)
    }

    /// Writes rows until `out` holds a chunk's bytes; whether the rows ran out.
    fn text_rows(
        &mut self,
        text: Text,
        columns: &[String],
        out: &mut Vec<u8>,
    ) -> Result<bool, ApiError> {
        // Rows are taken a few at a time: a slice of the engine's batches is converted
        // to values as a whole.
        const ROWS_PER_TAKE: usize = 256;
        while out.len() < self.chunk_bytes {
            let mut wrote_row = self.wrote_row;
            // Never more rows than the chunk has bytes (tests cut chunks of one byte,
            // which then hold one row each).
            let take = ROWS_PER_TAKE.min(self.chunk_bytes);
            let Some(slice) = self.next_rows(take)? else {
                return Ok(true);
            };
            for row in 0..slice.len() {
                match text {
                    Text::Json => {
                        if wrote_row {
                            out.push(b',');
                        }
                        slice.write_json(row, columns, out)?;
                    }
                    Text::Jsonl => {
                        slice.write_json(row, columns, out)?;
                        out.push(b'\n');
                    }
                    Text::Csv => slice.write_csv(row, columns, out),
                }
                wrote_row = true;
            }
            self.wrote_row = wrote_row;
        }
        Ok(false)
    }

    fn write_head(&self, out: &mut Vec<u8>) -> Result<(), ApiError> {
        match self.format {
            Format::Json => {
                out.extend_from_slice(b"{\"columns\":");
                serde_json::to_writer(&mut *out, &self.answer.columns)
                    .map_err(|e| ApiError::internal(format!("writing column names: {e}")))?;
                out.extend_from_slice(b",\"rows\":[");
            }
            Format::Csv => {
                for (c, column) in self.answer.columns.iter().enumerate() {
                    if c > 0 {
                        out.push(b',');
                    }
                    csv_text(column, out);
                }
                out.push(b'\n');
            }
            Format::Jsonl | Format::Arrow => {}
        }
        Ok(())
    }

    fn write_tail(&self, out: &mut Vec<u8>) -> Result<(), ApiError> {
        let tail = serde_json::json!({
            "truncated": self.answer.truncated,
            "snapshot": snapshot_json(&self.answer.snapshot),
        });
        let written = match self.format {
            Format::Json => {
                out.extend_from_slice(b"],\"truncated\":");
                out.extend_from_slice(if self.answer.truncated {
                    b"true"
                } else {
                    b"false"
                });
                out.extend_from_slice(b",\"snapshot\":");
                serde_json::to_writer(&mut *out, &tail["snapshot"]).map(|_| out.push(b'}'))
            }
            Format::Jsonl => serde_json::to_writer(&mut *out, &tail).map(|_| out.push(b'\n')),
            Format::Csv | Format::Arrow => Ok(()),
        };
        written.map_err(|e| ApiError::internal(format!("writing the answer's end: {e}")))
    }

    #[cfg(feature = "analytics")]
    fn arrow_chunk(&mut self) -> Result<Vec<u8>, ApiError> {
        use puffer_analytics::convert::IpcWriter;
        if self.stage == Stage::Head {
            self.ipc = Some(IpcWriter::new(&self.answer.columns, self.answer.kinds())?);
            self.stage = Stage::Rows;
        }
        let columns = std::mem::take(&mut self.answer.columns);
        let batch = self
            .next_rows(self.arrow_batch_rows)
            .map(|slice| slice.map(|s| s.values(&columns).into_owned()));
        self.answer.columns = columns;
        let mut ipc = self
            .ipc
            .take()
            .expect("the Arrow writer is made at the head");
        match batch? {
            Some(rows) => {
                ipc.write_rows(&rows)?;
                let bytes = ipc.take_bytes();
                self.ipc = Some(ipc);
                Ok(bytes)
            }
            None => {
                self.stage = Stage::Done;
                Ok(ipc.finish()?)
            }
        }
    }

    /// Without the `analytics` feature (the fuzz targets' build) there is no Arrow
    /// writer.
    #[cfg(not(feature = "analytics"))]
    fn arrow_chunk(&mut self) -> Result<Vec<u8>, ApiError> {
        Err(ApiError::new(
            ErrorCode::Unsupported,
            "this server was built without Arrow answers (feature `analytics`)".to_string(),
        ))
    }
}

/// The rest of an answer after its first chunk, as an HTTP body.
struct StreamedBody {
    first: Option<Bytes>,
    writer: AnswerWriter,
}

impl http_body::Body for StreamedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        Poll::Ready(this.writer.next_chunk().map(|chunk| match chunk {
            Ok(bytes) => Ok(Frame::data(bytes)),
            Err(error) => {
                // The status and the first bytes are sent: the connection is cut, so
                // the client cannot take what it got for the whole answer.
                report_cut_answer(&error);
                Err(std::io::Error::other(error.to_string()))
            }
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.writer.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn report_cut_answer(error: &ApiError) {
    eprintln!("puffer-server: an answer failed while it was sent: {error}");
}

/// The headers of an answer in `format`.
fn headers(answer: &RowsAnswer, format: Format) -> Vec<(HeaderName, HeaderValue)> {
    let content_type = match format {
        Format::Json => "application/json",
        Format::Jsonl => "application/x-ndjson",
        Format::Csv => "text/csv",
        Format::Arrow => "application/vnd.apache.arrow.stream",
    };
    let mut headers = vec![(header::CONTENT_TYPE, HeaderValue::from_static(content_type))];
    if matches!(format, Format::Csv | Format::Arrow) {
        // These formats have no place for them in the body.
        let snapshot = &answer.snapshot;
        let age_ms = snapshot.age.as_secs_f64() * 1000.0;
        for (name, value) in [
            ("x-puffer-snapshot", snapshot.snapshot.to_string()),
            ("x-puffer-snapshot-age-ms", age_ms.to_string()),
            ("x-puffer-truncated", answer.truncated.to_string()),
        ] {
            let value = HeaderValue::from_str(&value).expect("digits are a header value");
            headers.push((HeaderName::from_static(name), value));
        }
    }
    headers
}

/// An answer of rows in `format`: whole when it fits in one chunk, streamed otherwise.
pub fn rows_response(answer: RowsAnswer, format: Format) -> Response {
    let headers = headers(&answer, format);
    let mut writer = AnswerWriter::new(answer, format);
    let first = match writer.next_chunk() {
        Some(Ok(first)) => first,
        Some(Err(error)) => return error.into_response(),
        None => Bytes::new(),
    };
    let mut response = match writer.is_done() {
        true => Body::from(first).into_response(),
        false => Body::new(StreamedBody {
            first: Some(first),
            writer,
        })
        .into_response(),
    };
    response.headers_mut().extend(headers);
    response
}

/// Any answer of the database in `format` (an answer that is not rows is JSON).
pub fn answer_response(answer: Answer, schema: Option<&Schema>, format: Format) -> Response {
    match RowsAnswer::of(answer, schema) {
        Ok(rows) => rows_response(rows, format),
        Err(other) => axum::Json(answer_json(&other, schema)).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value as Json};

    use super::*;

    fn snapshot() -> SnapshotInfo {
        SnapshotInfo {
            snapshot: 41,
            age: Duration::from_micros(1500),
            read_log: false,
        }
    }

    /// Records with every value type, absent values, non-UTF-8 bytes, CSV's special
    /// characters and non-finite floats.
    fn records(count: i64) -> Vec<Record> {
        (0..count)
            .map(|i| {
                let mut record = Record::new(format!("k,\"{i}\"\u{e9}").into_bytes());
                let values = &mut record.values;
                values.insert("s".into(), Value::String(vec![b'a', 0xff, b'\n', b',']));
                if i % 4 != 1 {
                    values.insert("n".into(), Value::Int(i * -7_000_000_001));
                }
                let float = [0.5, -0.0, 1e300, f64::NAN, f64::INFINITY][i as usize % 5];
                values.insert("f".into(), Value::Float(float * i as f64));
                values.insert("b".into(), Value::Bool(i % 2 == 0));
                if i % 3 == 0 {
                    values.insert("t".into(), Value::Timestamp(i * 86_400_000_123));
                }
                record
            })
            .collect()
    }

    fn columns() -> Vec<String> {
        ["id", "s", "n", "f", "b", "t"].map(String::from).to_vec()
    }

    fn records_answer(count: i64) -> Answer {
        Answer::Rows {
            columns: columns(),
            rows: records(count),
            truncated: count % 2 == 1,
            snapshot: snapshot(),
        }
    }

    /// The same rows as values by column (what the SQL engine answers).
    fn values_answer(count: i64) -> Answer {
        let rows = records(count)
            .into_iter()
            .map(|record| {
                let mut row = vec![Some(Value::String(record.key.clone()))];
                row.extend(columns()[1..].iter().map(|c| record.values.get(c).cloned()));
                row
            })
            .collect();
        Answer::Computed {
            columns: columns(),
            rows,
            truncated: count % 2 == 1,
            snapshot: snapshot(),
        }
    }

    fn schema() -> Schema {
        let attributes = [
            ("s", AttrType::String),
            ("n", AttrType::Int),
            ("f", AttrType::Float),
            ("b", AttrType::Bool),
            ("t", AttrType::Timestamp),
        ]
        .into_iter()
        .map(|(name, attr_type)| puffer_store::Attribute {
            name: name.into(),
            attr_type,
        })
        .collect();
        Schema::new("id", attributes).unwrap()
    }

    /// Every chunk of `answer` in `format`, cut at `chunk_bytes` / `batch_rows`.
    fn chunks(
        answer: RowsAnswer,
        format: Format,
        chunk_bytes: usize,
        batch_rows: usize,
    ) -> Vec<Bytes> {
        let mut writer = AnswerWriter::new(answer, format).with_chunks(chunk_bytes, batch_rows);
        let mut out = Vec::new();
        while let Some(chunk) = writer.next_chunk() {
            out.push(chunk.unwrap());
        }
        assert!(writer.is_done());
        out
    }

    fn joined(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    /// The oracle of CSV: the answer's JSON rows, a field per column, as answers were
    /// written before they were streamed.
    fn csv_oracle(tree: &Json) -> String {
        let field = |text: &str| match text.contains([',', '"', '\n', '\r']) {
            true => format!("\"{}\"", text.replace('"', "\"\"")),
            false => text.to_string(),
        };
        let columns: Vec<&str> = tree["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let mut text = columns
            .iter()
            .map(|c| field(c))
            .collect::<Vec<_>>()
            .join(",")
            + "\n";
        for row in tree["rows"].as_array().unwrap() {
            let line: Vec<String> = columns
                .iter()
                .map(|c| match row.get(c) {
                    None | Some(Json::Null) => String::new(),
                    Some(Json::String(s)) => field(s),
                    Some(other) => other.to_string(),
                })
                .collect();
            text += &(line.join(",") + "\n");
        }
        text
    }

    /// An answer in JSON, JSON Lines and CSV, in one chunk and cut into many, reads
    /// back as the JSON tree of the whole answer says it should.
    fn check_text_formats(make: &dyn Fn() -> RowsAnswer, tree: &Json) {
        for (chunk_bytes, batch_rows) in [(CHUNK_BYTES, ARROW_BATCH_ROWS), (1, 1), (300, 7)] {
            let context = format!("chunks of {chunk_bytes} bytes");
            let json_chunks = chunks(make(), Format::Json, chunk_bytes, batch_rows);
            let written: Json = serde_json::from_slice(&joined(&json_chunks)).unwrap();
            assert_eq!(&written, tree, "{context}");
            let rows = tree["rows"].as_array().unwrap();
            if chunk_bytes == 1 {
                // The head, a row per chunk, the tail.
                assert_eq!(json_chunks.len(), rows.len() + 2, "{context}");
            } else if chunk_bytes == CHUNK_BYTES {
                assert_eq!(json_chunks.len(), 1, "{context}");
            }

            let text = joined(&chunks(make(), Format::Jsonl, chunk_bytes, batch_rows));
            let mut lines: Vec<Json> = std::str::from_utf8(&text)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let tail = lines.pop().unwrap();
            assert_eq!(&lines, rows, "{context}");
            assert_eq!(
                tail,
                json!({"truncated": tree["truncated"], "snapshot": tree["snapshot"]}),
                "{context}"
            );

            let text = joined(&chunks(make(), Format::Csv, chunk_bytes, batch_rows));
            assert_eq!(
                String::from_utf8(text).unwrap(),
                csv_oracle(tree),
                "{context}"
            );
        }
    }

    #[test]
    fn records_and_values_read_back_in_every_text_format_whole_or_in_chunks() {
        for count in [0, 1, 2, 57] {
            let tree = answer_json(&records_answer(count), Some(&schema()));
            let make = || {
                RowsAnswer::of(records_answer(count), Some(&schema()))
                    .ok()
                    .unwrap()
            };
            check_text_formats(&make, &tree);
            let tree = answer_json(&values_answer(count), None);
            let make = || RowsAnswer::of(values_answer(count), None).ok().unwrap();
            check_text_formats(&make, &tree);
        }
    }

    #[test]
    fn answers_that_are_not_rows_stay_json() {
        let answer = Answer::Count {
            count: 7,
            snapshot: snapshot(),
        };
        assert!(RowsAnswer::of(answer, None).is_err());
        // Records without a schema have no key column to be written with.
        assert!(RowsAnswer::of(records_answer(3), None).is_err());
    }

    #[cfg(feature = "analytics")]
    mod arrow {
        use puffer_analytics::convert::{ipc_stream, read_ipc_stream, rows_of};

        use super::*;

        fn values(answer: Answer) -> (Vec<String>, Vec<Vec<Option<Value>>>) {
            match answer {
                Answer::Computed { columns, rows, .. } => (columns, rows),
                _ => unreachable!("values_answer makes computed answers"),
            }
        }

        /// The rows of `values_answer(count)` as the engine's batches of 5 rows, all of
        /// one schema.
        fn batches_answer(count: i64) -> RowsAnswer {
            let (columns, rows) = values(values_answer(count));
            let (schema, whole) = read_ipc_stream(&ipc_stream(&columns, &rows).unwrap()).unwrap();
            let batches = whole
                .iter()
                .flat_map(|batch| {
                    (0..batch.num_rows())
                        .step_by(5)
                        .map(|start| batch.slice(start, 5.min(batch.num_rows() - start)))
                })
                .collect();
            RowsAnswer::of_batches(puffer_analytics::Batches {
                columns,
                schema,
                batches,
                truncated: count % 2 == 1,
                snapshot: snapshot(),
            })
        }

        #[test]
        fn arrow_answers_read_back_as_their_rows_whole_or_in_batches() {
            for count in [0, 1, 57] {
                let (columns, mut want) = values(values_answer(count));
                // Arrow strings are UTF-8: others are shown lossily, as in JSON.
                for value in want.iter_mut().flatten().flatten() {
                    if let Value::String(bytes) = value {
                        *bytes = String::from_utf8_lossy(bytes).into_owned().into_bytes();
                    }
                }
                // What each answer's rows come in: one part, or the engine's batches of
                // 5 rows (an Arrow batch never spans two of them).
                let makers: [(&str, usize, &dyn Fn() -> RowsAnswer); 3] = [
                    ("records", usize::MAX, &|| {
                        RowsAnswer::of(records_answer(count), Some(&schema()))
                            .ok()
                            .unwrap()
                    }),
                    ("values", usize::MAX, &|| {
                        RowsAnswer::of(values_answer(count), None).ok().unwrap()
                    }),
                    ("batches", 5, &|| batches_answer(count)),
                ];
                for (what, part_rows, make) in makers {
                    for batch_rows in [ARROW_BATCH_ROWS, 1, 7] {
                        let context = format!("{count} {what} in batches of {batch_rows}");
                        let written = chunks(make(), Format::Arrow, CHUNK_BYTES, batch_rows);
                        // A chunk per batch (the first with the schema), the end marker.
                        let parts: Vec<usize> = (0..count as usize)
                            .step_by(part_rows.min(count as usize).max(1))
                            .map(|start| part_rows.min(count as usize - start))
                            .collect();
                        let batches: usize = parts.iter().map(|p| p.div_ceil(batch_rows)).sum();
                        assert_eq!(written.len(), batches + 1, "{context}");
                        let (schema, read) = read_ipc_stream(&joined(&written)).unwrap();
                        let names: Vec<&String> =
                            schema.fields().iter().map(|f| f.name()).collect();
                        assert_eq!(names, columns.iter().collect::<Vec<_>>(), "{context}");
                        // Compared as Debug text, in which NaN equals NaN.
                        let read = format!("{:?}", rows_of(&read).unwrap());
                        assert!(read == format!("{want:?}"), "{context}: {read}");
                    }
                }
            }
        }

        #[test]
        fn batches_read_back_in_every_text_format_as_their_values() {
            for count in [0, 1, 2, 57] {
                let tree = answer_json(&values_answer(count), None);
                check_text_formats(&|| batches_answer(count), &tree);
            }
        }
    }
}
