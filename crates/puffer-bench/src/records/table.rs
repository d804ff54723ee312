//! The inputs as a typed table, read by the shared importer (`puffer_query::import`):
//! CSV / JSON-lines files read as one table (columns the union over files), keys taken
//! out, each column typed by the narrowest type all its values parse as. The table is
//! what the store is given and the oracle's data.

use std::collections::HashMap;
use std::path::PathBuf;

use puffer_query::import::{self, ImportedRow};
use puffer_store::{Attribute, Value};

pub(super) use puffer_query::import::KeySource;

pub(super) struct Table {
    pub(super) key_name: String,
    pub(super) attributes: Vec<Attribute>,
    pub(super) average_bytes: Vec<f64>,
    /// Each row's `key`, and its `values` by attribute id.
    pub(super) rows: Vec<ImportedRow>,
    pub(super) row_of_key: HashMap<Vec<u8>, u32>,
    pub(super) input_bytes: u64,
    pub(super) duplicates_skipped: u64,
}

impl Table {
    pub(super) fn value(&self, row: u32, column: usize) -> Option<&Value> {
        self.rows[row as usize].values[column].as_ref()
    }

    /// Rows whose value in `column` is present and passes `keep`.
    pub(super) fn rows_with(&self, column: usize, keep: impl Fn(&Value) -> bool) -> Vec<u32> {
        (0..self.rows.len() as u32)
            .filter(|&row| self.value(row, column).is_some_and(&keep))
            .collect()
    }
}

pub(super) fn load_table(paths: &[PathBuf], key_source: &KeySource) -> anyhow::Result<Table> {
    let imported = import::read_table(paths, key_source.clone())?;
    let row_of_key = imported
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row.key.clone(), i as u32))
        .collect();
    Ok(Table {
        key_name: imported.schema.key,
        attributes: imported.schema.attributes,
        average_bytes: imported.average_bytes,
        rows: imported.rows,
        row_of_key,
        input_bytes: imported.input_bytes,
        duplicates_skipped: imported.duplicates_skipped,
    })
}
