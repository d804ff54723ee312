//! The file system a shard writes through: a small trait, the real implementation, and
//! one that fails on purpose after N operations (for fault-injection tests).
//!
//! Reads (`read`, `list`, and memory-mapping segment files) go straight to the OS: the
//! faults worth testing are the ones that leave files half-written or unsynced.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A file open for appending.
pub trait FsFile: Send {
    /// Appends all of `bytes`.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes everything written so far durable (fsync).
    fn sync(&mut self) -> std::io::Result<()>;
    /// Cuts the file to `len` bytes and writes on from there (a log's failed append is
    /// taken back so). Layers that cannot say `Unsupported`, and the caller gives up.
    fn truncate(&mut self, _len: u64) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this file system layer cannot truncate",
        ))
    }
}

/// The mutating file operations of a shard.
pub trait Fs: Send + Sync {
    /// Creates (or truncates) a file for writing.
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn FsFile>>;
    /// Renames a file, replacing the target.
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Makes a directory's entries durable (fsync of the directory).
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> std::io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(File);

impl FsFile for RealFile {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.write_all(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        use std::io::Seek;
        self.0.set_len(len)?;
        self.0.seek(std::io::SeekFrom::Start(len)).map(|_| ())
    }
}

impl Fs for RealFs {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn FsFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(RealFile(file)))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)
    }
}

/// Wraps [`RealFs`] and fails every mutating operation after the first `budget` ones
/// (writes, syncs, renames, directory syncs, removals, creations all count).
#[derive(Clone)]
pub struct FaultyFs {
    state: Arc<FaultState>,
}

struct FaultState {
    remaining: AtomicU64,
    tripped: AtomicBool,
}

impl FaultyFs {
    /// Allows `budget` operations, then fails all later ones.
    pub fn new(budget: u64) -> FaultyFs {
        FaultyFs {
            state: Arc::new(FaultState {
                remaining: AtomicU64::new(budget),
                tripped: AtomicBool::new(false),
            }),
        }
    }

    /// Whether a fault has been injected.
    pub fn tripped(&self) -> bool {
        self.state.tripped.load(Ordering::SeqCst)
    }

    fn spend(&self, what: &str, path: &Path) -> std::io::Result<()> {
        let allowed = self
            .state
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| r.checked_sub(1))
            .is_ok();
        if allowed {
            Ok(())
        } else {
            self.state.tripped.store(true, Ordering::SeqCst);
            Err(std::io::Error::other(format!(
                "injected fault: {what} {}",
                path.display()
            )))
        }
    }
}

struct FaultyFile {
    inner: RealFile,
    fs: FaultyFs,
    path: PathBuf,
}

impl FsFile for FaultyFile {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if let Err(e) = self.fs.spend("write", &self.path) {
            // A failed write may still have written part of the bytes.
            let _ = self.inner.write_all(&bytes[..bytes.len() / 2]);
            return Err(e);
        }
        self.inner.write_all(bytes)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.fs.spend("fsync", &self.path)?;
        self.inner.sync()
    }
}

impl Fs for FaultyFs {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn FsFile>> {
        self.spend("create", path)?;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(FaultyFile {
            inner: RealFile(file),
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.spend("rename", from)?;
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.spend("directory fsync", dir)?;
        File::open(dir)?.sync_all()
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.spend("remove", path)?;
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.spend("create directory", dir)?;
        std::fs::create_dir_all(dir)
    }
}

/// Writes `bytes` to `path` durably: temporary name, fsync, rename, directory fsync.
pub fn write_file_atomic(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_file_atomic_with(fs, path, &mut |file| file.write_all(bytes))
}

/// Like [`write_file_atomic`], with the content produced by `fill`.
pub fn write_file_atomic_with(
    fs: &dyn Fs,
    path: &Path,
    fill: &mut dyn FnMut(&mut dyn FsFile) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = fs.create(&tmp)?;
    if let Err(e) = fill(file.as_mut()).and_then(|()| file.sync()) {
        // Most often a full disk: the half-written file would only hold on to space.
        drop(file);
        let _ = fs.remove(&tmp);
        return Err(e);
    }
    drop(file);
    fs.rename(&tmp, path)?;
    fs.sync_dir(dir)
}

/// Adapts an [`FsFile`] to `std::io::Write` (for serializers that want one).
pub struct FsWriter<'a>(pub &'a mut dyn FsFile);

impl Write for FsWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
