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
    Ok(match array.data_type() {
        DataType::Null => vec![None; array.len()],
        DataType::Boolean => array
            .as_boolean()
            .iter()
            .map(|b| b.map(Value::Bool))
            .collect(),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            cast_to(array, &DataType::Int64)?
                .as_primitive::<Int64Type>()
                .iter()
                .map(|x| x.map(Value::Int))
                .collect()
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            cast_to(array, &DataType::UInt64)?
                .as_primitive::<UInt64Type>()
                .iter()
                // Past i64's range (rare: sums of counts), a float keeps the magnitude.
                .map(|x| x.map(|x| i64::try_from(x).map_or(Value::Float(x as f64), Value::Int)))
                .collect()
        }
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => cast_to(array, &DataType::Float64)?
            .as_primitive::<Float64Type>()
            .iter()
            .map(|x| x.map(Value::Float))
            .collect(),
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
            cast_to(array, &DataType::Timestamp(TimeUnit::Microsecond, None))?
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .map(|x| x.map(Value::Timestamp))
                .collect()
        }
        _ => cast_to(array, &DataType::Utf8)?
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(|s| Value::String(s.as_bytes().to_vec())))
            .collect(),
    })
}
