//! The catalog in one file of the data directory, `CATALOG`:
//!
//! ```text
//! puffer-catalog 1 <crc32 of the body, 8 hex digits> <body bytes>\n
//! <body: JSON {"tables": {...}, "texts": {...}, "segments": [...]}>
//! ```
//!
//! Every change rewrites the file whole (a temporary file, fsync, rename, fsync of the
//! directory), so a crash leaves the old catalog or the new one; the checksum and the
//! length catch a file damaged afterwards, which is reported, never read as a smaller
//! catalog. The file is small: table and text entries, and one line per segment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use puffer_query::Result;
use puffer_store::fs::{write_file_atomic, Fs, RealFs};
use puffer_store::StoreError;

use super::memory::{CatalogState, StateCatalog, Storage};
use super::{TableEntry, TextEntry};

/// The catalog file's name in the data directory.
pub const CATALOG_FILE: &str = "CATALOG";
const MAGIC: &str = "puffer-catalog";
const FORMAT: u32 = 1;
/// Largest catalog file read (a full catalog of the maximum size is far below).
const MAX_CATALOG_FILE_BYTES: u64 = 256 << 20;

/// The catalog file of a data directory, where a [`FileCatalog`] keeps its state.
pub struct CatalogFile {
    path: PathBuf,
    fs: Arc<dyn Fs>,
}

impl std::fmt::Debug for CatalogFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Storage for CatalogFile {
    fn write(&self, state: &CatalogState) -> Result<()> {
        write_file_atomic(self.fs.as_ref(), &self.path, &encode(state))
            .map_err(|e| StoreError::io(&self.path, e).into())
    }

    fn reread(&self) -> Option<CatalogState> {
        decode(&std::fs::read(&self.path).ok()?).ok()
    }
}

/// A catalog kept in a file.
pub type FileCatalog = StateCatalog<CatalogFile>;

impl FileCatalog {
    /// Opens the catalog in `dir`; `None` if the directory holds none yet.
    pub fn open(dir: &Path) -> Result<Option<FileCatalog>> {
        FileCatalog::open_with(dir, Arc::new(RealFs))
    }

    /// [`FileCatalog::open`] writing through `fs` (fault injection in tests).
    pub fn open_with(dir: &Path, fs: Arc<dyn Fs>) -> Result<Option<FileCatalog>> {
        let path = dir.join(CATALOG_FILE);
        let bytes = match std::fs::metadata(&path) {
            Ok(meta) if meta.len() > MAX_CATALOG_FILE_BYTES => {
                return Err(StoreError::corrupt(
                    &path,
                    format!(
                        "{} bytes; a catalog file has at most {MAX_CATALOG_FILE_BYTES}",
                        meta.len()
                    ),
                )
                .into())
            }
            Ok(_) => std::fs::read(&path).map_err(|e| StoreError::io(&path, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e).into()),
        };
        let state = decode(&bytes).map_err(|why| StoreError::corrupt(&path, why))?;
        Ok(Some(StateCatalog::with(state, CatalogFile { path, fs })))
    }

    /// Creates an empty catalog in `dir` (replacing none: `dir` must hold no catalog).
    pub fn create(dir: &Path) -> Result<FileCatalog> {
        FileCatalog::create_with(dir, Arc::new(RealFs))
    }

    /// [`FileCatalog::create`] writing through `fs`.
    pub fn create_with(dir: &Path, fs: Arc<dyn Fs>) -> Result<FileCatalog> {
        FileCatalog::create_listing(dir, fs, &[], &[])
    }

    /// Creates the catalog of a data directory that had none (made before catalogs
    /// existed), listing `tables` and `texts`, in one write: a crash leaves no catalog
    /// or all of it.
    pub fn create_listing(
        dir: &Path,
        fs: Arc<dyn Fs>,
        tables: &[TableEntry],
        texts: &[TextEntry],
    ) -> Result<FileCatalog> {
        let path = dir.join(CATALOG_FILE);
        if path.exists() {
            return Err(StoreError::InvalidSetting(format!(
                "{} already holds a catalog",
                dir.display()
            ))
            .into());
        }
        let mut state = CatalogState::default();
        for table in tables {
            state.create_table(table)?;
        }
        for text in texts {
            state.put_text(text)?;
        }
        let file = CatalogFile { path, fs };
        file.write(&state)?;
        Ok(StateCatalog::with(state, file))
    }
}

fn encode(state: &CatalogState) -> Vec<u8> {
    let body = serde_json::to_vec(state).expect("the catalog serializes");
    let mut out = format!(
        "{MAGIC} {FORMAT} {:08x} {}\n",
        crc32fast::hash(&body),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

fn decode(bytes: &[u8]) -> std::result::Result<CatalogState, String> {
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not text")?;
    let body = &bytes[newline + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    let [magic, format, crc, length] = fields[..] else {
        return Err(format!("header {header:?} does not have four fields"));
    };
    if magic != MAGIC {
        return Err(format!("not a catalog (header {header:?})"));
    }
    if format != FORMAT.to_string() {
        return Err(format!(
            "catalog format {format}; this version reads {FORMAT}"
        ));
    }
    let length: usize = length
        .parse()
        .map_err(|_| format!("bad length {length:?}"))?;
    if length != body.len() {
        return Err(format!(
            "the body has {} bytes; the header says {length}",
            body.len()
        ));
    }
    let crc = u32::from_str_radix(crc, 16).map_err(|_| format!("bad checksum {crc:?}"))?;
    if crc != crc32fast::hash(body) {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("body: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn a_damaged_file_is_reported_not_read_as_a_smaller_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = FileCatalog::create(dir.path()).unwrap();
        catalog
            .put_text(&TextEntry {
                name: "book".into(),
                text_bytes: 10,
                index_bytes: 20,
            })
            .unwrap();
        let path = dir.path().join(CATALOG_FILE);
        let good = std::fs::read(&path).unwrap();
        // Flip each byte of the body in turn, and cut the file short.
        let body_start = good.iter().position(|&b| b == b'\n').unwrap() + 1;
        for at in [body_start, body_start + 5, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            std::fs::write(&path, &bad).unwrap();
            let error = FileCatalog::open(dir.path()).expect_err("refused");
            assert!(
                matches!(
                    error,
                    puffer_query::QueryError::Store(StoreError::Corrupt { .. })
                ),
                "{error}"
            );
        }
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        assert!(FileCatalog::open(dir.path()).is_err());
        std::fs::write(&path, &good).unwrap();
        let reopened = FileCatalog::open(dir.path()).unwrap().unwrap();
        assert_eq!(reopened.texts().unwrap().len(), 1);
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A budget of file operations: the creation spends some, then writes fail.
        for budget in 0..12 {
            let dir = dir.path().join(format!("b{budget}"));
            std::fs::create_dir_all(&dir).unwrap();
            let fs = Arc::new(puffer_store::fs::FaultyFs::new(budget));
            let Ok(catalog) = FileCatalog::create_with(&dir, fs.clone()) else {
                continue;
            };
            let entry = TextEntry {
                name: "t".into(),
                text_bytes: 1,
                index_bytes: 1,
            };
            let put = catalog.put_text(&entry);
            let on_disk = FileCatalog::open(&dir).unwrap().unwrap().texts().unwrap();
            match put {
                Ok(()) => {
                    assert_eq!(catalog.texts().unwrap(), vec![entry.clone()]);
                    assert_eq!(on_disk, vec![entry]);
                }
                // Not acknowledged: the file holds the old catalog or the new one, and the
                // catalog answers what the file holds.
                Err(_) => {
                    assert!(
                        on_disk.is_empty() || on_disk == vec![entry],
                        "budget {budget}"
                    );
                    assert_eq!(catalog.texts().unwrap(), on_disk, "budget {budget}");
                }
            }
        }
    }
}
