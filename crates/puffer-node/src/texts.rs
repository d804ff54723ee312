//! The database's text files: each indexed once (puffer-index), kept compressed in
//! `texts/<name>.pidx`, listed in the catalog, and queried without decompressing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use puffer_index::TextIndex;
use puffer_query::Result;
use puffer_store::StoreError;

use crate::catalog::{Catalog, TextEntry};
use crate::layout::check_table_name;

/// What [`Texts::add`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    /// The text was indexed, saved and listed.
    New(TextEntry),
    /// A text of that name exists; nothing changed.
    Exists,
}

/// The text files of a database.
pub struct Texts {
    dir: PathBuf,
    catalog: Arc<dyn Catalog>,
    indexes: RwLock<BTreeMap<String, TextIndex>>,
    /// Held while a text is added, so that two adds of one name cannot both win.
    adding: Mutex<()>,
}

impl Texts {
    /// Opens every text the catalog lists, from `dir`.
    pub fn open(dir: &Path, catalog: Arc<dyn Catalog>) -> Result<Texts> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let mut indexes = BTreeMap::new();
        for entry in catalog.texts()? {
            let path = file_of(dir, &entry.name);
            if !path.exists() {
                return Err(StoreError::corrupt(
                    &path,
                    format!(
                        "the catalog lists text {:?}, whose index is missing",
                        entry.name
                    ),
                )
                .into());
            }
            let index = TextIndex::open(&path).map_err(StoreError::from)?;
            indexes.insert(entry.name, index);
        }
        Ok(Texts {
            dir: dir.to_path_buf(),
            catalog,
            indexes: RwLock::new(indexes),
            adding: Mutex::new(()),
        })
    }

    /// The text called `name`.
    pub fn get(&self, name: &str) -> Option<TextIndex> {
        self.read().get(name).cloned()
    }

    /// Every text's name, ascending.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Indexes `text` and keeps it as `name`: the index file is written (atomically)
    /// first, the catalog entry makes it exist. The caller bounds `text`'s size (the
    /// build needs about 5.5 bytes of memory per byte of text).
    pub fn add(&self, name: &str, text: &[u8]) -> Result<Added> {
        check_table_name(name).map_err(|_| {
            puffer_query::QueryError::Invalid(format!(
                "text names follow table-name rules; got {name:?}"
            ))
        })?;
        // Adds are rare and long (an index build); one at a time keeps names unique.
        let _adding = self.adding.lock().unwrap_or_else(PoisonError::into_inner);
        if self.read().contains_key(name) {
            return Ok(Added::Exists);
        }
        let index = TextIndex::build(text).map_err(StoreError::from)?;
        let path = file_of(&self.dir, name);
        index.save(&path).map_err(StoreError::from)?;
        let entry = TextEntry {
            name: name.to_string(),
            text_bytes: index.text_len(),
            index_bytes: std::fs::metadata(&path)
                .map_err(|e| StoreError::io(&path, e))?
                .len(),
        };
        self.catalog.put_text(&entry)?;
        self.indexes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), index);
        Ok(Added::New(entry))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, TextIndex>> {
        // The map is only ever changed by one insert, which cannot be left half done.
        self.indexes.read().unwrap_or_else(PoisonError::into_inner)
    }
}

fn file_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pidx"))
}
