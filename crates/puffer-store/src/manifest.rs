//! The manifest: which files are live and the last SCU they contain.
//!
//! `MANIFEST` is one line `puffer-manifest 1 <crc32 of the body, 8 hex digits>`, then the
//! body: JSON with the schema, the checkpoint (every SCU up to it is in the listed
//! segments; recovery replays the log after it), the live segments with their deletions
//! files, and the next segment number. It is replaced atomically (temporary file, fsync,
//! rename, directory fsync).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::fs::{write_file_atomic, Fs};
use crate::schema::Schema;

/// File name of the manifest in a shard directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
const HEADER: &str = "puffer-manifest 1 ";

/// A live segment as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// Segment number.
    pub id: u64,
    /// Its deletions file, if records of it were deleted by the checkpoint.
    pub deletions: Option<String>,
}

/// The manifest's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Table schema.
    pub schema: Schema,
    /// Every SCU up to this one is in the segments.
    pub checkpoint: u64,
    /// Live segments, oldest first.
    pub segments: Vec<SegmentEntry>,
    /// Number for the next segment.
    pub next_segment_id: u64,
}

impl Manifest {
    /// Writes the manifest into `dir` durably.
    pub fn store(&self, fs: &dyn Fs, dir: &Path) -> Result<()> {
        let body = serde_json::to_string_pretty(self).expect("manifest serializes");
        let text = format!("{HEADER}{:08x}\n{body}\n", crc32fast::hash(body.as_bytes()));
        let path = dir.join(MANIFEST_FILE);
        write_file_atomic(fs, &path, text.as_bytes()).map_err(|e| StoreError::io(&path, e))
    }

    /// Reads the manifest of `dir`, or `None` if the shard has none yet.
    pub fn load(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let corrupt = |detail: &str| StoreError::corrupt(&path, detail);
        let text = std::str::from_utf8(&bytes).map_err(|_| corrupt("not UTF-8"))?;
        let (first, body) = text
            .split_once('\n')
            .ok_or_else(|| corrupt("no header line"))?;
        let crc_hex = first
            .strip_prefix(HEADER)
            .ok_or_else(|| corrupt("bad header line (unknown format or version)"))?;
        let crc = u32::from_str_radix(crc_hex, 16).map_err(|_| corrupt("bad checksum field"))?;
        let body = body.strip_suffix('\n').unwrap_or(body);
        if !crate::container::checksum_holds(crc32fast::hash(body.as_bytes()), crc) {
            return Err(corrupt("checksum mismatch"));
        }
        let manifest: Manifest = serde_json::from_str(body)
            .map_err(|e| StoreError::corrupt(&path, format!("bad body: {e}")))?;
        Ok(Some(manifest))
    }
}
