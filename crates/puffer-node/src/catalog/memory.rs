//! A catalog's state, and the one implementation of [`Catalog`] over it
//! ([`StateCatalog`]): in memory only ([`MemoryCatalog`], for tests and databases that
//! live as long as their process), or kept in a [`Storage`] too (the file catalog).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use puffer_query::{QueryError, Result};
use puffer_store::Schema;
use serde::{Deserialize, Serialize};

use super::{checks, Catalog, SegmentEntry, TableEntry, TextEntry};

/// Everything a catalog lists (its fields are the catalog's business).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CatalogState {
    pub(crate) tables: BTreeMap<String, TableEntry>,
    pub(crate) texts: BTreeMap<String, TextEntry>,
    /// Registered segments by (table uid, shard, replica), each list by segment id.
    pub(crate) segments: Vec<SegmentEntry>,
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

    pub fn set_subspace(
        &mut self,
        name: &str,
        uid: u64,
        subspace: &crate::subspace::SubspaceOf,
    ) -> Result<()> {
        match self.tables.get_mut(name) {
            Some(table) if table.uid == uid => {
                checks::subspace(table, subspace)?;
                table.subspace_of = Some(subspace.clone());
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

/// Where a [`StateCatalog`] keeps its state besides memory.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Makes `state` durable; an error means it may or may not have landed.
    fn write(&self, state: &CatalogState) -> Result<()>;
    /// The state as stored now, if it can be read (after a failed write).
    fn reread(&self) -> Option<CatalogState>;
}

/// No storage: the catalog lives as long as its process.
#[derive(Debug, Default)]
pub struct NoStorage;

impl Storage for NoStorage {
    fn write(&self, _state: &CatalogState) -> Result<()> {
        Ok(())
    }

    fn reread(&self) -> Option<CatalogState> {
        None
    }
}

/// A catalog whose state is in memory, kept in `storage` as well.
#[derive(Debug)]
pub struct StateCatalog<S: Storage> {
    state: Mutex<CatalogState>,
    storage: S,
}

/// A catalog in memory only.
pub type MemoryCatalog = StateCatalog<NoStorage>;

impl MemoryCatalog {
    /// An empty catalog.
    pub fn new() -> MemoryCatalog {
        StateCatalog::with(CatalogState::default(), NoStorage)
    }
}

impl Default for MemoryCatalog {
    fn default() -> Self {
        MemoryCatalog::new()
    }
}

impl<S: Storage> StateCatalog<S> {
    pub(crate) fn with(state: CatalogState, storage: S) -> StateCatalog<S> {
        StateCatalog {
            state: Mutex::new(state),
            storage,
        }
    }

    fn state(&self) -> MutexGuard<'_, CatalogState> {
        // Changes are made on a copy and swapped in whole, so a panic while the lock was
        // held cannot have left the state half changed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `change` to a copy, stores the copy (if it differs), and only then makes
    /// it the state. A failed store is not acknowledged but may still have landed (a
    /// file renamed, the directory's fsync failed): the state is then read back from
    /// storage, so that the catalog answers what a restart would find.
    fn change<T>(&self, change: impl FnOnce(&mut CatalogState) -> Result<T>) -> Result<T> {
        let mut state = self.state();
        let mut next = state.clone();
        let answer = change(&mut next)?;
        if next == *state {
            return Ok(answer);
        }
        if let Err(error) = self.storage.write(&next) {
            if let Some(stored) = self.storage.reread() {
                *state = stored;
            }
            return Err(error);
        }
        *state = next;
        Ok(answer)
    }
}

impl<S: Storage> Catalog for StateCatalog<S> {
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

    fn set_subspace(
        &self,
        name: &str,
        uid: u64,
        subspace: &crate::subspace::SubspaceOf,
    ) -> Result<()> {
        self.change(|state| state.set_subspace(name, uid, subspace))
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
