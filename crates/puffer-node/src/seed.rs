//! Seeding a fresh data directory with shards copied from elsewhere (a cluster node
//! that loads published segments instead of replaying the whole log).
//!
//! A seeded directory holds, for each table, the files of one shard snapshot per shard
//! (its `MANIFEST`, segment and deletions files, copied into every replica's directory)
//! and a database log that starts after SCU `start_after`. Each shard holds every SCU
//! that touches it up to at least `start_after` (its checkpoint, or a later SCU when no
//! SCU since touched it); shards further along skip the SCUs they hold when the log is
//! followed from there. Until the database has followed past the furthest shard, a read
//! could see one shard ahead of another: the caller serves nothing before that.
//!
//! Seeding is all or nothing: a `SEEDING` marker is written first and removed last, and
//! a directory found with the marker has its tables and log removed so that it can be
//! seeded again.

use std::path::{Path, PathBuf};

use puffer_store::fs::{Fs, RealFs};
use puffer_store::wal::LogWriter;
use puffer_store::StoreError;

use crate::catalog::TableEntry;
use crate::table::{replica_dirs, write_new_table_file};
use puffer_query::{QueryError, Result};

/// The marker of a seeding in progress.
pub const SEEDING_MARKER: &str = "SEEDING";

/// Whether `dir` may be seeded: it holds no database yet (no log and no tables), or
/// only what an interrupted seeding left.
pub fn is_fresh(dir: &Path) -> bool {
    dir.join(SEEDING_MARKER).exists() || (!dir.join("log").exists() && !dir.join("tables").exists())
}

/// Removes what an interrupted seeding of `dir` left (its tables, its log and the
/// marker), so that `dir` is fresh again; nothing if no seeding was interrupted there.
pub fn clear_interrupted(dir: &Path) -> Result<()> {
    let marker = dir.join(SEEDING_MARKER);
    if !marker.exists() {
        return Ok(());
    }
    for leftover in ["tables", "log"] {
        let path = dir.join(leftover);
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    std::fs::remove_file(&marker).map_err(|e| StoreError::io(&marker, e))?;
    RealFs.sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    Ok(())
}

/// A seeding of one data directory in progress.
pub struct Seed {
    dir: PathBuf,
    /// Per table added: its name and its replicas' directories per shard.
    tables: Vec<(String, Vec<Vec<PathBuf>>)>,
}

impl Seed {
    /// Starts seeding `dir`, which must be fresh ([`is_fresh`]); what an interrupted
    /// seeding left is removed first.
    pub fn begin(dir: &Path) -> Result<Seed> {
        if !is_fresh(dir) {
            return Err(QueryError::Invalid(format!(
                "{} already holds a database; only a fresh data directory is seeded",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let fs = RealFs;
        let marker = dir.join(SEEDING_MARKER);
        puffer_store::fs::write_file_atomic(&fs, &marker, b"seeding\n")
            .map_err(|e| StoreError::io(&marker, e))?;
        for leftover in ["tables", "log"] {
            let path = dir.join(leftover);
            if path.exists() {
                std::fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
            }
        }
        Ok(Seed {
            dir: dir.to_path_buf(),
            tables: Vec::new(),
        })
    }

    /// Adds table `entry`: its directories, empty until [`Seed::shard_file`] fills them.
    pub fn table(&mut self, entry: &TableEntry) -> Result<()> {
        self.table_holding(entry, None)
    }

    /// Adds table `entry` holding only the shards `held` (ascending; `None`: every
    /// shard), as a cluster's data-only node holds those placed on it.
    pub fn table_holding(&mut self, entry: &TableEntry, held: Option<&[u32]>) -> Result<()> {
        entry.layout.validate()?;
        if let Some(held) = held {
            if !held.windows(2).all(|w| w[0] < w[1])
                || held.iter().any(|&s| s >= entry.layout.shards)
            {
                return Err(QueryError::Invalid(format!(
                    "shards {held:?} are not ascending shards of table {:?}",
                    entry.name
                )));
            }
        }
        let path = self.dir.join("tables").join(&entry.name);
        write_new_table_file(&path, entry, held.map(<[u32]>::to_vec))?;
        let mut dirs = replica_dirs(&path, entry.layout);
        for (shard, shard_dirs) in dirs.iter_mut().enumerate() {
            if held.is_some_and(|held| !held.contains(&(shard as u32))) {
                shard_dirs.clear(); // not held: no directory, nothing to fill
            }
            for dir in shard_dirs.iter() {
                std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
            }
        }
        self.tables.push((entry.name.clone(), dirs));
        Ok(())
    }

    /// Writes file `name` of shard `shard` of table `table` (added before) into every
    /// replica's directory of the shard. `name` is a plain file name.
    pub fn shard_file(&self, table: &str, shard: u32, name: &str, bytes: &[u8]) -> Result<()> {
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(QueryError::Invalid(format!(
                "{name:?} is not a shard file name"
            )));
        }
        let replicas = self
            .tables
            .iter()
            .find(|(t, _)| t == table)
            .and_then(|(_, dirs)| dirs.get(shard as usize))
            .filter(|dirs| !dirs.is_empty())
            .ok_or_else(|| {
                QueryError::Invalid(format!(
                    "table {table:?} has no shard {shard} in this seeding"
                ))
            })?;
        let fs = RealFs;
        for dir in replicas {
            let path = dir.join(name);
            puffer_store::fs::write_file_atomic(&fs, &path, bytes)
                .map_err(|e| StoreError::io(&path, e))?;
        }
        Ok(())
    }

    /// Finishes: every shard held of every table added must have its `MANIFEST`; the log
    /// starts after SCU `start_after`. Then the marker goes.
    pub fn finish(self, start_after: u64) -> Result<()> {
        for (table, dirs) in &self.tables {
            if let Some(missing) = dirs.iter().flatten().find(|d| !d.join("MANIFEST").exists()) {
                return Err(QueryError::Invalid(format!(
                    "seeding table {table:?}: {} got no MANIFEST",
                    missing.display()
                )));
            }
        }
        let fs = RealFs;
        let log_dir = self.dir.join("log");
        fs.create_dir_all(&log_dir)
            .map_err(|e| StoreError::io(&log_dir, e))?;
        // An empty log file named by its first SCU: numbering continues from there.
        drop(LogWriter::create(&fs, &log_dir, start_after + 1)?);
        fs.sync_dir(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        let marker = self.dir.join(SEEDING_MARKER);
        std::fs::remove_file(&marker).map_err(|e| StoreError::io(&marker, e))?;
        fs.sync_dir(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::TableEntry;
    use crate::TableLayout;
    use puffer_store::Schema;

    fn entry() -> TableEntry {
        TableEntry {
            name: "rooms".into(),
            uid: 9,
            layout: TableLayout {
                shards: 2,
                replicas: 2,
            },
            schema: Schema::new("id", Vec::new()).unwrap(),
            partition: None,
            chunk_of: None,
            subspace_of: None,
        }
    }

    #[test]
    fn an_interrupted_seeding_leaves_nothing_that_opens() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert!(is_fresh(&data));
        let mut seed = Seed::begin(&data).unwrap();
        seed.table(&entry()).unwrap();
        seed.shard_file("rooms", 0, "MANIFEST", b"not finished")
            .unwrap();
        assert!(seed.shard_file("rooms", 2, "MANIFEST", b"x").is_err());
        assert!(seed.shard_file("rooms", 0, "../escape", b"x").is_err());
        drop(seed); // the process died here
        assert!(data.join("tables").exists() && is_fresh(&data));
        clear_interrupted(&data).unwrap();
        assert!(!data.join("tables").exists() && !data.join(SEEDING_MARKER).exists());
        assert!(is_fresh(&data));
    }

    #[test]
    fn a_finished_seeding_needs_every_manifest_and_starts_the_log_after_its_scu() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut seed = Seed::begin(&data).unwrap();
        seed.table(&entry()).unwrap();
        seed.shard_file("rooms", 0, "MANIFEST", b"m0").unwrap();
        // Shard 1 has no manifest: refused, and the directory stays seedable.
        assert!(seed.finish(41).is_err());
        assert!(is_fresh(&data));
        let mut seed = Seed::begin(&data).unwrap();
        seed.table(&entry()).unwrap();
        seed.shard_file("rooms", 0, "MANIFEST", b"m0").unwrap();
        seed.shard_file("rooms", 1, "MANIFEST", b"m1").unwrap();
        seed.finish(41).unwrap();
        assert!(!is_fresh(&data));
        // Every replica got the file; the log starts at SCU 42.
        for (shard, replica) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
            let path = data.join(format!(
                "tables/rooms/shard-{shard}-replica-{replica}/MANIFEST"
            ));
            assert_eq!(
                std::fs::read(path).unwrap(),
                format!("m{shard}").into_bytes()
            );
        }
        let files = puffer_store::wal::list_files(&data.join("log")).unwrap();
        assert_eq!(
            files.iter().map(|(first, _)| *first).collect::<Vec<_>>(),
            vec![42]
        );
        assert!(
            Seed::begin(&data).is_err(),
            "a seeded directory is seeded once"
        );
    }

    #[test]
    fn a_seeding_holding_some_shards_makes_and_needs_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let mut seed = Seed::begin(&data).unwrap();
        assert!(seed.table_holding(&entry(), Some(&[1, 0])).is_err());
        assert!(seed.table_holding(&entry(), Some(&[2])).is_err());
        seed.table_holding(&entry(), Some(&[1])).unwrap();
        assert!(
            seed.shard_file("rooms", 0, "MANIFEST", b"m0").is_err(),
            "shard 0 is not held"
        );
        seed.shard_file("rooms", 1, "MANIFEST", b"m1").unwrap();
        seed.finish(7).unwrap();
        assert!(!data.join("tables/rooms/shard-0-replica-0").exists());
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(data.join("tables/rooms/TABLE.json")).unwrap())
                .unwrap();
        assert_eq!(file["held"], serde_json::json!([1]), "{file}");
    }
}
