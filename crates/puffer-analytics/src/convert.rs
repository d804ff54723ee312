//! Column reads to Arrow and Arrow to values: the types of a PufferDB table as DataFusion
//! sees them, and an answer's columns as the API's values.
//!
//! | PufferDB     | Arrow                          |
//! |--------------|--------------------------------|
//! | key          | `Utf8`, never null             |
//! | `string`     | `Utf8`                         |
//! | `int`        | `Int64`                        |
//! | `float`      | `Float64`                      |
//! | `bool`       | `Boolean`                      |
//! | `timestamp`  | `Timestamp(Microsecond, UTC)`  |
//!
//! A record without an attribute has NULL in its column. Strings that are not UTF-8
//! are shown lossily (as the JSON API shows them).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, StringArray, StringBuilder,
    TimestampMicrosecondArray,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Float64Type, Int64Type, Schema as ArrowSchema, SchemaRef, TimeUnit,
    TimestampMicrosecondType, UInt64Type,
};
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use puffer_query::{QueryError, Result};
use puffer_store::{AttrType, Column, ColumnData, ColumnsResult, Schema, Value};

/// The time zone timestamps are shown in (they are stored as UTC microseconds).
const UTC: &str = "UTC";

/// The Arrow type of an attribute of type `kind`.
fn arrow_type(kind: AttrType) -> DataType {
    match kind {
        AttrType::String => DataType::Utf8,
        AttrType::Int => DataType::Int64,
        AttrType::Float => DataType::Float64,
        AttrType::Bool => DataType::Boolean,
        AttrType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
    }
}

/// The Arrow schema of a table: its key column, then its attributes.
pub fn arrow_schema(schema: &Schema) -> SchemaRef {
    let key = Field::new(&schema.key, DataType::Utf8, false);
    let attributes = schema
        .attributes
        .iter()
        .map(|a| Field::new(&a.name, arrow_type(a.attr_type), true));
    Arc::new(ArrowSchema::new(
        std::iter::once(key).chain(attributes).collect::<Vec<_>>(),
    ))
}

/// A column read's answer as one batch of `projected` (the table's Arrow schema
/// projected to the columns asked, in the order asked): each column's values become an
/// Arrow array without a copy, strings are checked to be UTF-8 (and shown lossily where
/// they are not).
pub fn batch_of(result: ColumnsResult, projected: &SchemaRef) -> Result<RecordBatch> {
    let rows = result.rows;
    let columns = result
        .columns
        .into_iter()
        .map(array_of)
        .collect::<Result<Vec<_>>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(projected.clone(), columns, &options).map_err(|e| {
        QueryError::Invalid(format!(
            "a column read does not fit its table's schema: {e}"
        ))
    })
}

fn array_of(column: Column) -> Result<ArrayRef> {
    let nulls = if column.valid.iter().all(|&v| v) {
        None
    } else {
        Some(NullBuffer::from(column.valid))
    };
    Ok(match (column.attr_type, column.data) {
        (AttrType::Timestamp, ColumnData::Ints(values)) => {
            Arc::new(TimestampMicrosecondArray::new(values.into(), nulls).with_timezone(UTC))
        }
        (_, ColumnData::Ints(values)) => Arc::new(Int64Array::new(values.into(), nulls)),
        (_, ColumnData::Floats(values)) => Arc::new(Float64Array::new(values.into(), nulls)),
        (_, ColumnData::Bools(values)) => {
            Arc::new(BooleanArray::new(BooleanBuffer::from(values), nulls))
        }
        (_, ColumnData::Bytes { ends, bytes }) => {
            let too_long = || {
                QueryError::Limit(format!(
                    "column {} holds {} bytes of strings in one scan; at most {} fit",
                    column.name,
                    bytes.len(),
                    i32::MAX
                ))
            };
            let mut offsets = Vec::with_capacity(ends.len() + 1);
            offsets.push(0i32);
            for &end in &ends {
                offsets.push(i32::try_from(end).map_err(|_| too_long())?);
            }
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            match StringArray::try_new(
                offsets.clone(),
                Buffer::from_vec(bytes.clone()),
                nulls.clone(),
            ) {
                Ok(array) => Arc::new(array),
                // Not UTF-8 somewhere: shown lossily, as the JSON API shows it.
                Err(_) => {
                    let mut builder = StringBuilder::with_capacity(ends.len(), bytes.len());
                    for (row, window) in offsets.windows(2).enumerate() {
                        if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                            builder.append_null();
                        } else {
                            let value = &bytes[window[0] as usize..window[1] as usize];
                            builder.append_value(String::from_utf8_lossy(value));
                        }
                    }
                    Arc::new(builder.finish())
                }
            }
        }
    })
}

/// The rows of `batches`, each a value (or NULL) per column: integers, floats,
/// booleans, strings and timestamps as themselves; dates as timestamps at midnight
/// UTC; decimals as floats; any other type as its text.
pub fn rows_of(batches: &[RecordBatch]) -> Result<Vec<Vec<Option<Value>>>> {
    let mut rows = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .map(|c| values_of(c.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        for row in 0..batch.num_rows() {
            rows.push(columns.iter().map(|c| c[row].clone()).collect());
        }
    }
    Ok(rows)
}

/// `array` cast to `to`.
fn cast_to(array: &dyn Array, to: &DataType) -> Result<ArrayRef> {
    cast(array, to).map_err(|e| {
        QueryError::Invalid(format!(
            "an answer column of type {} cannot be shown as {to}: {e}",
            array.data_type()
        ))
    })
}

/// One column's values.
fn values_of(array: &dyn Array) -> Result<Vec<Option<Value>>> {
    let unsigned = matches!(
        array.data_type(),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64
    );
    // One place says which type becomes which kind of value: `kind_of_type`.
    Ok(match kind_of_type(array.data_type()) {
        None => vec![None; array.len()],
        Some(AttrType::Bool) => array
            .as_boolean()
            .iter()
            .map(|b| b.map(Value::Bool))
            .collect(),
        Some(AttrType::Int) if unsigned => cast_to(array, &DataType::UInt64)?
            .as_primitive::<UInt64Type>()
            .iter()
            // Past i64's range (rare: sums of counts), a float keeps the magnitude.
            .map(|x| x.map(|x| i64::try_from(x).map_or(Value::Float(x as f64), Value::Int)))
            .collect(),
        Some(AttrType::Int) => cast_to(array, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .iter()
            .map(|x| x.map(Value::Int))
            .collect(),
        Some(AttrType::Float) => cast_to(array, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|x| x.map(Value::Float))
            .collect(),
        Some(AttrType::Timestamp) => {
            cast_to(array, &DataType::Timestamp(TimeUnit::Microsecond, None))?
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .map(|x| x.map(Value::Timestamp))
                .collect()
        }
        Some(AttrType::String) => cast_to(array, &DataType::Utf8)?
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(|s| Value::String(s.as_bytes().to_vec())))
            .collect(),
    })
}

/// Rows per record batch of an Arrow IPC answer written whole by [`ipc_stream`]: a
/// reader gets the first batch before the whole answer is decoded, and no batch is too
/// large for 32-bit string offsets unless its strings are.
pub const IPC_BATCH_ROWS: usize = 65_536;

/// The type a column of `rows` is written as in Arrow: the type of its values, a
/// string where they differ in type, `None` (written as `Utf8`) where it holds only
/// NULLs.
pub fn kind_of_values<'v>(mut values: impl Iterator<Item = &'v Value>) -> Option<AttrType> {
    let first = values.next().map(Value::attr_type)?;
    match values.all(|v| v.attr_type() == first) {
        true => Some(first),
        false => Some(AttrType::String),
    }
}

/// The type an answer column of Arrow type `data_type` is written as, its values being
/// what [`rows_of`] makes of them: integers of any width as `Int64` (an unsigned one
/// past its range fails to be written), floats and decimals as `Float64`, dates and
/// timestamps as timestamps, NULLs only as `Utf8`, anything else as its text.
pub fn kind_of_type(data_type: &DataType) -> Option<AttrType> {
    Some(match data_type {
        DataType::Null => return None,
        DataType::Boolean => AttrType::Bool,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => AttrType::Int,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => AttrType::Float,
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => AttrType::Timestamp,
        _ => AttrType::String,
    })
}

/// An answer written as an Arrow IPC stream (the format `pyarrow.ipc.open_stream`
/// reads) a batch at a time: the schema first, each batch of rows as it comes, the end
/// marker last. What is written so far is taken with [`IpcWriter::take_bytes`], so an
/// answer can be sent while it is written.
pub struct IpcWriter {
    writer: StreamWriter<Vec<u8>>,
    schema: SchemaRef,
    columns: Vec<String>,
    kinds: Vec<Option<AttrType>>,
}

fn ipc_failed(e: datafusion::arrow::error::ArrowError) -> QueryError {
    QueryError::Invalid(format!("an Arrow IPC stream: {e}"))
}

impl IpcWriter {
    /// A stream of `columns`, each of its kind (`None`: NULLs only, written as `Utf8`),
    /// every field nullable; its schema is written.
    pub fn new(columns: &[String], kinds: Vec<Option<AttrType>>) -> Result<Self> {
        let fields: Vec<Field> = columns
            .iter()
            .zip(&kinds)
            .map(|(name, kind)| {
                Field::new(name, arrow_type(kind.unwrap_or(AttrType::String)), true)
            })
            .collect();
        let schema: SchemaRef = Arc::new(ArrowSchema::new(fields));
        let writer = StreamWriter::try_new(Vec::new(), &schema).map_err(ipc_failed)?;
        Ok(IpcWriter {
            writer,
            schema,
            columns: columns.to_vec(),
            kinds,
        })
    }

    /// Writes `rows` (a value or NULL per column) as one record batch. A value of
    /// another type than its column's is written as text in a string column, and
    /// refused in any other.
    pub fn write_rows(&mut self, rows: &[Vec<Option<Value>>]) -> Result<()> {
        let arrays = self
            .kinds
            .iter()
            .enumerate()
            .map(|(c, kind)| {
                let kind = kind.unwrap_or(AttrType::String);
                let mut column = Column::new(self.columns[c].clone(), kind);
                for row in rows {
                    match row.get(c).and_then(Option::as_ref) {
                        Some(value) if value.attr_type() == kind => column.push(Some(value)),
                        Some(value) if kind == AttrType::String => {
                            column.push_string(text_of(value).as_bytes())
                        }
                        Some(value) => {
                            return Err(QueryError::Invalid(format!(
                                "answer column {} is written as {}, and holds the {} {}",
                                self.columns[c],
                                kind.name(),
                                value.attr_type().name(),
                                text_of(value)
                            )))
                        }
                        None => column.push(None),
                    }
                }
                array_of(column)
            })
            .collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(ipc_failed)?;
        self.writer.write(&batch).map_err(ipc_failed)
    }

    /// The bytes written since the last call.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.get_mut())
    }

    /// Writes the end marker; the bytes written since the last [`take_bytes`](Self::take_bytes).
    pub fn finish(mut self) -> Result<Vec<u8>> {
        self.writer.finish().map_err(ipc_failed)?;
        self.writer.into_inner().map_err(ipc_failed)
    }
}

/// An answer's rows as one Arrow IPC stream, in batches of [`IPC_BATCH_ROWS`] rows:
/// each column typed by its values ([`kind_of_values`]; integers `Int64`, floats
/// `Float64`, booleans `Boolean`, timestamps `Timestamp(Microsecond, UTC)`, strings and
/// columns whose values differ in type `Utf8`, a column of NULLs only `Utf8`).
pub fn ipc_stream(columns: &[String], rows: &[Vec<Option<Value>>]) -> Result<Vec<u8>> {
    let kinds = (0..columns.len())
        .map(|c| kind_of_values(rows.iter().filter_map(|row| row.get(c)?.as_ref())))
        .collect();
    let mut writer = IpcWriter::new(columns, kinds)?;
    let mut stream = writer.take_bytes();
    for chunk in rows.chunks(IPC_BATCH_ROWS) {
        writer.write_rows(chunk)?;
        stream.append(&mut writer.take_bytes());
    }
    stream.append(&mut writer.finish()?);
    Ok(stream)
}

/// An Arrow IPC stream read back: its schema and its batches (for clients and tests
/// that check what was written).
pub fn read_ipc_stream(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    use datafusion::arrow::ipc::reader::StreamReader;
    let failed = |e: datafusion::arrow::error::ArrowError| {
        QueryError::Invalid(format!("reading an Arrow IPC stream: {e}"))
    };
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(failed)?;
    let schema = reader.schema();
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(failed)?;
    Ok((schema, batches))
}

/// A value as text, for a column whose values differ in type (which DataFusion's
/// answers never have: each of its columns has one type).
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => String::from_utf8_lossy(s).into_owned(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Timestamp(micros) => puffer_store::timestamp::format_timestamp_micros(*micros),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::ipc::reader::StreamReader;

    /// An IPC stream reads back (with Arrow's own reader) as the rows written: every
    /// type, NULLs, a column of NULLs only, one mixing types (as text), over several
    /// batches.
    #[test]
    fn an_ipc_stream_reads_back_as_the_rows_written() {
        let columns: Vec<String> = ["s", "i", "f", "b", "t", "none", "mixed"]
            .map(String::from)
            .to_vec();
        let rows: Vec<Vec<Option<Value>>> = (0..IPC_BATCH_ROWS as i64 + 10)
            .map(|i| {
                let some = |v: Value| (i % 7 != 3).then_some(v);
                vec![
                    some(Value::String(format!("v{i}é").into_bytes())),
                    some(Value::Int(i * -3)),
                    some(Value::Float(i as f64 / 4.0)),
                    some(Value::Bool(i % 2 == 0)),
                    some(Value::Timestamp(i * 1_000_001)),
                    None,
                    Some(if i % 2 == 0 {
                        Value::Int(i)
                    } else {
                        Value::str("x")
                    }),
                ]
            })
            .collect();
        let stream = ipc_stream(&columns, &rows).unwrap();
        let reader = StreamReader::try_new(std::io::Cursor::new(stream), None).unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(batches.len(), 2);
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["s", "i", "f", "b", "t", "none", "mixed"]);
        assert_eq!(
            schema.field(4).data_type(),
            &arrow_type(AttrType::Timestamp)
        );
        assert_eq!(schema.field(6).data_type(), &DataType::Utf8);
        let back = rows_of(&batches).unwrap();
        let expected: Vec<Vec<Option<Value>>> = rows
            .iter()
            .map(|row| {
                let mut row = row.clone();
                row[6] = row[6]
                    .as_ref()
                    .map(|v| Value::String(text_of(v).into_bytes()));
                row
            })
            .collect();
        assert_eq!(back, expected);
    }
}
