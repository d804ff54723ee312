//! Records to Arrow and Arrow to values: the types of a PufferDB table as DataFusion
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
    Array, ArrayRef, AsArray, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, Float64Type, Int64Type, Schema as ArrowSchema, SchemaRef, TimeUnit,
    TimestampMicrosecondType, UInt64Type,
};
use datafusion::arrow::record_batch::RecordBatch;
use puffer_query::{QueryError, Result};
use puffer_store::{AttrType, Record, Schema, Value};

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

/// `records` as one batch of the columns of `projected` (a projection of the table's
/// Arrow schema).
pub fn batch_of(records: &[Record], projected: &SchemaRef, schema: &Schema) -> Result<RecordBatch> {
    let columns = projected
        .fields()
        .iter()
        .map(|field| column_of(records, field.name(), schema))
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(projected.clone(), columns)
        .map_err(|e| QueryError::Invalid(format!("records do not fit their table's schema: {e}")))
}

fn column_of(records: &[Record], name: &str, schema: &Schema) -> Result<ArrayRef> {
    if name == schema.key {
        let mut keys = StringBuilder::with_capacity(records.len(), records.len() * 8);
        for record in records {
            keys.append_value(String::from_utf8_lossy(&record.key));
        }
        return Ok(Arc::new(keys.finish()));
    }
    let kind = schema
        .attributes
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.attr_type)
        .ok_or_else(|| QueryError::Invalid(format!("no column {name:?} in the table")))?;
    let values = records.iter().map(|r| r.values.get(name));
    let mismatch = |record: &Record| {
        QueryError::Invalid(format!(
            "record {:?} holds a value of another type than {} in column {name:?}",
            String::from_utf8_lossy(&record.key),
            kind.name()
        ))
    };
    // Each arm fills one builder: a missing value is NULL, a value of another type an
    // error (the store validates records, so it would be a bug, not an answer).
    macro_rules! build {
        ($builder:expr, $variant:ident, $convert:expr) => {{
            let mut builder = $builder;
            for (record, value) in records.iter().zip(values) {
                match value {
                    None => builder.append_null(),
                    Some(Value::$variant(x)) => builder.append_value($convert(x)),
                    Some(_) => return Err(mismatch(record)),
                }
            }
            Arc::new(builder.finish()) as ArrayRef
        }};
    }
    Ok(match kind {
        AttrType::String => build!(
            StringBuilder::with_capacity(records.len(), records.len() * 16),
            String,
            |x: &Vec<u8>| String::from_utf8_lossy(x).into_owned()
        ),
        AttrType::Int => build!(
            Int64Builder::with_capacity(records.len()),
            Int,
            |x: &i64| *x
        ),
        AttrType::Float => build!(
            Float64Builder::with_capacity(records.len()),
            Float,
            |x: &f64| *x
        ),
        AttrType::Bool => build!(
            BooleanBuilder::with_capacity(records.len()),
            Bool,
            |x: &bool| *x
        ),
        AttrType::Timestamp => build!(
            TimestampMicrosecondBuilder::with_capacity(records.len()).with_timezone(UTC),
            Timestamp,
            |x: &i64| *x
        ),
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
