//! The catalog in memory: for tests and for databases that live only as long as their
//! process. [`CatalogState`] is also what the file catalog keeps and writes.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use puffer_query::{QueryError, Result};
use puffer_store::Schema;
use serde::{Deserialize, Serialize};

use super::{checks, Catalog, SegmentEntry, TableEntry, TextEntry};

/// Everything a catalog lists.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct CatalogState {
    pub tables: BTreeMap<String, TableEntry>,
    pub texts: BTreeMap<String, TextEntry>,
    /// Registered segments by (table uid, shard, replica), each list by segment id.
    pub segments: Vec<SegmentEntry>,
}

impl CatalogState {
    pub fn create_table(&mut self, entry: &TableEntry) -> Result<()> {
        let tables: Vec<&TableEntry> = self.tables.values().collect();
        checks::new_table(entry, &tables)?;
        self.tables.insert(entry.name.clone(), entry.clone());
        Ok(())
    }

    pub fn set_schema(&mut self, name: &str, uid: u64, schema: &Schema) -> Result<()> {
        match self.tables.get_mut(name) {
            Some(table) if table.uid == uid => {
                table.schema = schema.clone();
                Ok(())
            }
            _ => Err(QueryError::UnknownTable(name.to_string())),
        }
    }

    pub fn drop_table(&mut self, name: &str) -> Result<TableEntry> {
        let entry = self
            .tables
            .remove(name)
            .ok_or_else(|| QueryError::UnknownTable(name.to_string()))?;
        self.segments.retain(|s| s.table_uid != entry.uid);
        Ok(entry)
    }

    pub fn put_text(&mut self, entry: &TextEntry) -> Result<()> {
        checks::text(
            entry,
            self.texts.len(),
            self.texts.contains_key(&entry.name),
        )?;
        self.texts.insert(entry.name.clone(), entry.clone());
        Ok(())
    }

    pub fn segments(&self, table_uid: u64) -> Vec<SegmentEntry> {
        let mut found: Vec<SegmentEntry> = self
            .segments
            .iter()
            .filter(|s| s.table_uid == table_uid)
            .cloned()
            .collect();
        found.sort_by_key(|s| (s.shard, s.replica, s.segment));
        found
    }

    pub fn set_segments(
        &mut self,
        table_uid: u64,
        shard: u32,
        replica: u32,
        segments: &[SegmentEntry],
    ) -> Result<()> {
        let table = self
            .tables
            .values()
            .find(|t| t.uid == table_uid)
            .ok_or_else(|| QueryError::UnknownTable(format!("with uid {table_uid}")))?;
        checks::segments(table, shard, replica, segments)?;
        self.segments
            .retain(|s| !(s.table_uid == table_uid && s.shard == shard && s.replica == replica));
        self.segments.extend_from_slice(segments);
        Ok(())
    }
}

/// A catalog in memory.
#[derive(Debug, Default)]
pub struct MemoryCatalog {
    state: Mutex<CatalogState>,
}

impl MemoryCatalog {
    /// An empty catalog.
    pub fn new() -> MemoryCatalog {
        MemoryCatalog::default()
    }

    fn state(&self) -> MutexGuard<'_, CatalogState> {
        // Every change is made on a copy and swapped in whole, so a panic while the
        // lock was held cannot have left the state half changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn change<T>(&self, change: impl FnOnce(&mut CatalogState) -> Result<T>) -> Result<T> {
        let mut state = self.state();
        let mut next = state.clone();
        let answer = change(&mut next)?;
        *state = next;
        Ok(answer)
    }
}

impl Catalog for MemoryCatalog {
    fn tables(&self) -> Result<Vec<TableEntry>> {
        Ok(self.state().tables.values().cloned().collect())
    }

    fn table(&self, name: &str) -> Result<Option<TableEntry>> {
        Ok(self.state().tables.get(name).cloned())
    }

    fn create_table(&self, entry: &TableEntry) -> Result<()> {
        self.change(|state| state.create_table(entry))
    }

    fn set_schema(&self, name: &str, uid: u64, schema: &Schema) -> Result<()> {
        self.change(|state| state.set_schema(name, uid, schema))
    }

    fn drop_table(&self, name: &str) -> Result<TableEntry> {
        self.change(|state| state.drop_table(name))
    }

    fn texts(&self) -> Result<Vec<TextEntry>> {
        Ok(self.state().texts.values().cloned().collect())
    }

    fn put_text(&self, entry: &TextEntry) -> Result<()> {
        self.change(|state| state.put_text(entry))
    }

    fn remove_text(&self, name: &str) -> Result<bool> {
        self.change(|state| Ok(state.texts.remove(name).is_some()))
    }

    fn segments(&self, table_uid: u64) -> Result<Vec<SegmentEntry>> {
        Ok(self.state().segments(table_uid))
    }

    fn set_segments(
        &self,
        table_uid: u64,
        shard: u32,
        replica: u32,
        segments: &[SegmentEntry],
    ) -> Result<()> {
        self.change(|state| state.set_segments(table_uid, shard, replica, segments))
    }
}
