//! Fault injection: a file system that fails every operation after the first N. For many
//! N, a shard ingests SCUs (with seals and compactions) until a write fails; the error is
//! reported, later writes are refused, and after reopening on a healthy file system every
//! acknowledged SCU is present, nothing is partly applied, and nothing is corrupt.
//!
//! The same histories end in a power cut too (`TornFs`): after N operations the power
//! goes, and the disk then holds what a real cut could leave: each file what was synced
//! plus a random prefix of what was not (a torn tail), and each directory its entries as
//! of its last sync plus a prefix of the changes since. Reopening must lose no
//! acknowledged SCU and read no torn record as data.

use crate::common;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::{schema, Model, Rng};
use puffer_store::clock::SystemClock;
use puffer_store::fs::{FaultyFs, Fs, FsFile, RealFs};
use puffer_store::{Predicate, Query, ReadOptions, Record, Shard, ShardOptions, Value, WriteOp};

fn options() -> ShardOptions {
    ShardOptions {
        log_table_max_records: 8,
        max_pending_batches: 1000,
        background: false,
        ..ShardOptions::default()
    }
}

fn contents(shard: &Shard) -> Vec<Record> {
    shard
        .search(&Query {
            predicate: Predicate::All,
            projection: None,
            limit: None,
            read: ReadOptions::default(),
        })
        .expect("scan")
        .rows
}

/// How a history ends: a file system that stops after a number of operations.
trait Fault {
    fn fs(&self) -> Arc<dyn Fs>;
    /// Whether it has stopped.
    fn tripped(&self) -> bool;
    /// After the shard is gone, before it is opened again: what stays on disk.
    fn settle(&self) {}
}

impl Fault for FaultyFs {
    fn fs(&self) -> Arc<dyn Fs> {
        Arc::new(self.clone())
    }
    fn tripped(&self) -> bool {
        FaultyFs::tripped(self)
    }
}

/// Runs one history until `faulty` stops; returns whether it did.
fn run(faulty: &dyn Fault, budget: u64, seed: u64) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut rng = Rng(seed | 1);
    let mut in_flight = None;
    let opened = Shard::open_with(
        dir.path(),
        schema(),
        options(),
        faulty.fs(),
        Arc::new(SystemClock),
    );
    if let Ok(shard) = opened {
        for step in 0..200 {
            let outcome = match rng.below(10) {
                0 => shard.seal().map(|_| ()),
                1 => shard.compact(rng.chance(50)).map(|_| ()),
                _ => {
                    let mut state = model.at(model.last_seq()).clone();
                    let mut ops = Vec::new();
                    for _ in 0..1 + rng.below(3) {
                        let key = common::key(rng.below(20));
                        if rng.chance(20) {
                            state.remove(&key);
                            ops.push(WriteOp::Delete(key));
                        } else {
                            let record = Record::new(key.clone()).with("n", Value::Int(step));
                            state.insert(key, record.clone());
                            ops.push(WriteOp::Put(record));
                        }
                    }
                    match shard.write(ops) {
                        Ok(_) => {
                            model.states.push(state);
                            Ok(())
                        }
                        Err(e) => {
                            // Unacknowledged: it may or may not survive; both are allowed.
                            in_flight = Some(state);
                            Err(e)
                        }
                    }
                }
            };
            if let Err(error) = outcome {
                assert!(
                    faulty.tripped(),
                    "budget {budget}: unexpected error {error}"
                );
                let again = shard.write(vec![WriteOp::Delete(b"k00".to_vec())]);
                assert!(
                    again.is_err(),
                    "budget {budget}: the shard keeps accepting writes after {error}"
                );
                break;
            }
        }
    }
    let tripped = faulty.tripped();
    faulty.settle();
    let reopened = Shard::open_with(
        dir.path(),
        schema(),
        options(),
        Arc::new(RealFs),
        Arc::new(SystemClock),
    )
    .unwrap_or_else(|e| panic!("budget {budget}: reopen failed: {e}"));
    let acked = model.last_seq();
    let found = contents(&reopened);
    let published = reopened.watermarks().published;
    assert!(
        published >= acked,
        "budget {budget}: acknowledged SCU {acked} lost (reopened at {published})"
    );
    let expected: Vec<Record> = model.at(acked).values().cloned().collect();
    if published == acked {
        assert_eq!(found, expected, "budget {budget}: contents after reopen");
    } else {
        // The SCU in flight at the fault became durable although unacknowledged.
        assert_eq!(
            published,
            acked + 1,
            "budget {budget}: more than one unacknowledged SCU"
        );
        let state = in_flight.expect("an SCU was in flight");
        let expected: Vec<Record> = state.into_values().collect();
        assert_eq!(
            found, expected,
            "budget {budget}: contents with the in-flight SCU"
        );
    }
    tripped
}

#[test]
fn faults_lose_nothing_acknowledged() {
    let mut tripped = 0;
    for budget in (0..400).step_by(7) {
        if run(&FaultyFs::new(budget), budget, budget * 31 + 7) {
            tripped += 1;
        }
    }
    assert!(tripped > 40, "faults were injected in {tripped} runs");
}

/// A file system with a power switch (see the module's documentation).
#[derive(Clone)]
struct TornFs {
    power: Arc<Mutex<Power>>,
}

struct Power {
    /// Operations left before the power goes.
    remaining: u64,
    off: bool,
    /// Every file written here: its path now, bytes written, bytes synced.
    files: Vec<Written>,
    /// Directory changes no sync of their directory has made durable yet, oldest first.
    pending: Vec<DirChange>,
    /// Draws the torn lengths and the directory changes kept.
    rng: Rng,
}

struct Written {
    path: PathBuf,
    written: u64,
    synced: u64,
}

enum DirChange {
    Created(PathBuf),
    Renamed {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<Vec<u8>>,
    },
    Removed {
        path: PathBuf,
        content: Vec<u8>,
    },
}

impl DirChange {
    fn dir(&self) -> &Path {
        let path = match self {
            DirChange::Created(path) | DirChange::Removed { path, .. } => path,
            DirChange::Renamed { to, .. } => to,
        };
        path.parent().unwrap_or(Path::new("."))
    }

    /// Undoes it on disk (the directory did not keep it).
    fn undo(self) {
        match self {
            DirChange::Created(path) => {
                let _ = std::fs::remove_file(path);
            }
            DirChange::Renamed { from, to, replaced } => {
                if std::fs::rename(&to, &from).is_ok() {
                    if let Some(content) = replaced {
                        std::fs::write(&to, content).unwrap();
                    }
                }
            }
            DirChange::Removed { path, content } => std::fs::write(path, content).unwrap(),
        }
    }
}

impl TornFs {
    fn new(budget: u64, seed: u64) -> TornFs {
        TornFs {
            power: Arc::new(Mutex::new(Power {
                remaining: budget,
                off: false,
                files: Vec::new(),
                pending: Vec::new(),
                rng: Rng(seed | 1),
            })),
        }
    }

    /// Runs `operation` while the power is on, spending one operation.
    fn on<T>(
        &self,
        what: &str,
        path: &Path,
        operation: impl FnOnce(&mut Power) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut power = self.power.lock().unwrap();
        if power.off || power.remaining == 0 {
            power.off = true;
            return Err(std::io::Error::other(format!(
                "power cut: {what} {}",
                path.display()
            )));
        }
        power.remaining -= 1;
        operation(&mut power)
    }
}

struct TornFile {
    fs: TornFs,
    file: File,
    /// Its index in `Power::files`.
    index: usize,
    path: PathBuf,
}

impl FsFile for TornFile {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let (file, index) = (&mut self.file, self.index);
        self.fs.on("write", &self.path, |power| {
            file.write_all(bytes)?;
            power.files[index].written += bytes.len() as u64;
            Ok(())
        })
    }
    fn sync(&mut self) -> std::io::Result<()> {
        let (file, index) = (&mut self.file, self.index);
        self.fs.on("fsync", &self.path, |power| {
            file.sync_data()?;
            power.files[index].synced = power.files[index].written;
            Ok(())
        })
    }
}

impl Fs for TornFs {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn FsFile>> {
        let (file, index) = self.on("create", path, |power| {
            if let Ok(content) = std::fs::read(path) {
                // Truncating an existing file: undone, it comes back whole.
                power.pending.push(DirChange::Removed {
                    path: path.to_path_buf(),
                    content,
                });
            }
            let file = File::create(path)?;
            power.files.retain(|w| w.path != path);
            power.files.push(Written {
                path: path.to_path_buf(),
                written: 0,
                synced: 0,
            });
            power.pending.push(DirChange::Created(path.to_path_buf()));
            Ok((file, power.files.len() - 1))
        })?;
        Ok(Box::new(TornFile {
            fs: self.clone(),
            file,
            index,
            path: path.to_path_buf(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.on("rename", from, |power| {
            let replaced = std::fs::read(to).ok();
            std::fs::rename(from, to)?;
            for written in &mut power.files {
                if written.path == from {
                    written.path = to.to_path_buf();
                } else if written.path == to {
                    // Replaced: whatever it held is no longer reachable by that name.
                    written.path = PathBuf::new();
                }
            }
            power.pending.push(DirChange::Renamed {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                replaced,
            });
            Ok(())
        })
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.on("directory fsync", dir, |power| {
            File::open(dir)?.sync_all()?;
            power.pending.retain(|change| change.dir() != dir);
            Ok(())
        })
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.on("remove", path, |power| {
            let content = std::fs::read(path)?;
            std::fs::remove_file(path)?;
            power.pending.push(DirChange::Removed {
                path: path.to_path_buf(),
                content,
            });
            Ok(())
        })
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.on("create directory", dir, |_| std::fs::create_dir_all(dir))
    }
}

impl Fault for TornFs {
    fn fs(&self) -> Arc<dyn Fs> {
        Arc::new(self.clone())
    }
    fn tripped(&self) -> bool {
        self.power.lock().unwrap().off
    }
    /// The power cut's leftovers: torn tails, then the directory changes not kept.
    fn settle(&self) {
        let mut power = self.power.lock().unwrap();
        power.off = true;
        let files = std::mem::take(&mut power.files);
        for written in files {
            let unsynced = written.written - written.synced;
            if unsynced == 0 || written.path.as_os_str().is_empty() {
                continue;
            }
            let kept = written.synced + power.rng.below(unsynced + 1);
            if let Ok(file) = std::fs::OpenOptions::new().write(true).open(&written.path) {
                file.set_len(kept).unwrap();
            }
        }
        let pending = std::mem::take(&mut power.pending);
        let kept = power.rng.below(pending.len() as u64 + 1) as usize;
        for change in pending.into_iter().skip(kept).rev() {
            change.undo();
        }
    }
}

#[test]
fn power_cuts_leave_torn_tails_and_lose_nothing_acknowledged() {
    let mut cut = 0;
    for budget in (0..600).step_by(5) {
        for seed in 0..3 {
            if run(
                &TornFs::new(budget, budget * 7 + seed),
                budget,
                budget * 13 + seed,
            ) {
                cut += 1;
            }
        }
    }
    assert!(cut > 200, "the power went in {cut} runs");
}
