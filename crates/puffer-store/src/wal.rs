//! The write-ahead log: self-consistent updates (SCUs), their binary encoding, and the
//! log files they are appended to.
//!
//! Log files live in `wal/` and are named by the first sequence number they may hold
//! (`00000000000000000001.wal`). A file is an 8-byte magic `PUFFWAL1` followed by records:
//! `payload_len u32 LE | !payload_len u32 LE | crc32(payload) u32 LE | payload`. A payload is one SCU:
//! `seq u64 | commit_micros u64 | op_count u32 | ops`, each op a tag byte then its fields
//! (`1` put: key, field count u16, fields as `id u16 | value`; `2` delete: key;
//! `3` add attribute: name, type byte). Byte strings are `len u32 | bytes`; values are a
//! type byte then `len u32 | bytes`, `i64 LE`, `f64 bits LE` or one byte.
//!
//! Recovery reads the files in order. In each file, a last record that is cut short (the
//! file ends inside its header or payload) is a write torn by a crash, never acknowledged
//! (acknowledgement waits for the fsync), and is skipped; the next file then starts at that
//! record's sequence number. A complete record that fails its checksum, a length that
//! disagrees with its inverted copy, or a gap in sequence numbers is reported as corruption
//! naming the file: damage is never mistaken for a torn write.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::fs::{Fs, FsFile};
use crate::schema::{AttrType, Attribute, StoredRecord, Value};

const MAGIC: &[u8; 8] = b"PUFFWAL1";
/// Length, inverted length, payload checksum.
const RECORD_HEADER_BYTES: usize = 12;
/// Largest SCU payload accepted, in bytes.
pub const MAX_SCU_BYTES: usize = 64 << 20;

/// One operation of an SCU, validated against the schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Insert or replace the record with this key.
    Put(StoredRecord),
    /// Remove the record with this key (no error if absent).
    Delete(Vec<u8>),
    /// Append an attribute to the schema.
    AddAttribute(Attribute),
}

/// A self-consistent update with its sequence number.
#[derive(Clone, Debug, PartialEq)]
pub struct Scu {
    /// Sequence number: SCUs are numbered 1, 2, 3, ... without gaps.
    pub seq: u64,
    /// When it was written to the log (microseconds since the epoch).
    pub commit_micros: u64,
    /// Operations, applied in order.
    pub ops: Vec<Op>,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn type_byte(t: AttrType) -> u8 {
    match t {
        AttrType::String => 1,
        AttrType::Int => 2,
        AttrType::Float => 3,
        AttrType::Bool => 4,
        AttrType::Timestamp => 5,
    }
}

fn type_of_byte(b: u8) -> Option<AttrType> {
    Some(match b {
        1 => AttrType::String,
        2 => AttrType::Int,
        3 => AttrType::Float,
        4 => AttrType::Bool,
        5 => AttrType::Timestamp,
        _ => return None,
    })
}

/// The operations part of an SCU's payload (count, then each operation). It needs no
/// sequence number, so writers' threads encode it before the committer numbers the SCU.
pub fn encode_ops(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + ops.iter().map(encoded_len_hint).sum::<usize>());
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        match op {
            Op::Put(record) => {
                out.push(1);
                put_bytes(&mut out, &record.key);
                out.extend_from_slice(&(record.fields.len() as u16).to_le_bytes());
                for (id, value) in &record.fields {
                    out.extend_from_slice(&id.to_le_bytes());
                    out.push(type_byte(value.attr_type()));
                    match value {
                        Value::String(b) => put_bytes(&mut out, b),
                        Value::Int(x) | Value::Timestamp(x) => {
                            out.extend_from_slice(&x.to_le_bytes())
                        }
                        Value::Float(x) => out.extend_from_slice(&x.to_bits().to_le_bytes()),
                        Value::Bool(b) => out.push(*b as u8),
                    }
                }
            }
            Op::Delete(key) => {
                out.push(2);
                put_bytes(&mut out, key);
            }
            Op::AddAttribute(attribute) => {
                out.push(3);
                put_bytes(&mut out, attribute.name.as_bytes());
                out.push(type_byte(attribute.attr_type));
            }
        }
    }
    out
}

/// About the bytes `op` takes when encoded (exact for puts of strings).
fn encoded_len_hint(op: &Op) -> usize {
    match op {
        Op::Put(record) => {
            let values: usize = record
                .fields
                .iter()
                .map(|(_, v)| match v {
                    Value::String(b) => 4 + b.len(),
                    _ => 8,
                })
                .sum();
            7 + record.key.len() + 3 * record.fields.len() + values
        }
        Op::Delete(key) => 5 + key.len(),
        Op::AddAttribute(attribute) => 6 + attribute.name.len(),
    }
}

/// Appends one log record (length, its complement, checksum, payload) for the SCU
/// numbered `seq` whose operations encode to `ops` ([`encode_ops`]).
pub fn encode_record_parts(seq: u64, commit_micros: u64, ops: &[u8], out: &mut Vec<u8>) {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&seq.to_le_bytes());
    head[8..].copy_from_slice(&commit_micros.to_le_bytes());
    let payload_len = (head.len() + ops.len()) as u32;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    crc.update(ops);
    out.reserve(12 + payload_len as usize);
    out.extend_from_slice(&payload_len.to_le_bytes());
    out.extend_from_slice(&(!payload_len).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(ops);
}

impl Scu {
    /// Appends this SCU as one log record (length, checksum, payload).
    pub fn encode_record(&self, out: &mut Vec<u8>) {
        encode_record_parts(self.seq, self.commit_micros, &encode_ops(&self.ops), out);
    }
}

/// Decodes the operations part of a payload ([`encode_ops`]); the whole slice must be
/// used. Only called on bytes whose checksum has been verified.
pub fn decode_ops(bytes: &[u8]) -> std::result::Result<Vec<Op>, String> {
    let mut r = Reader { bytes, at: 0 };
    let op_count = r.u32()?;
    let mut ops = Vec::with_capacity(op_count.min(1 << 16) as usize);
    for _ in 0..op_count {
        ops.push(match r.u8()? {
            1 => {
                let key = r.bytes()?.to_vec();
                let field_count = r.u16()?;
                let mut fields = Vec::with_capacity(field_count as usize);
                for _ in 0..field_count {
                    let id = r.u16()?;
                    let t = type_of_byte(r.u8()?).ok_or("unknown value type")?;
                    let value = match t {
                        AttrType::String => Value::String(r.bytes()?.to_vec()),
                        AttrType::Int => Value::Int(r.u64()? as i64),
                        AttrType::Timestamp => Value::Timestamp(r.u64()? as i64),
                        AttrType::Float => Value::Float(f64::from_bits(r.u64()?)),
                        AttrType::Bool => Value::Bool(r.u8()? != 0),
                    };
                    fields.push((id, value));
                }
                Op::Put(StoredRecord { key, fields })
            }
            2 => Op::Delete(r.bytes()?.to_vec()),
            3 => {
                let name = String::from_utf8(r.bytes()?.to_vec())
                    .map_err(|_| "attribute name is not UTF-8")?;
                let attr_type = type_of_byte(r.u8()?).ok_or("unknown attribute type")?;
                Op::AddAttribute(Attribute { name, attr_type })
            }
            tag => return Err(format!("unknown operation tag {tag}")),
        });
    }
    if r.at != bytes.len() {
        return Err("trailing bytes after the last operation".into());
    }
    Ok(ops)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("record cut short at byte {}", self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> std::result::Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// The name of the log file whose first SCU is `first_seq`.
pub fn file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.wal")
}

/// Log files in `dir`, as (first sequence number, path), ascending.
pub fn list_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".wal") {
            if let Ok(first) = stem.parse::<u64>() {
                files.push((first, entry.path()));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every SCU with `seq > after` from the log files in `dir`, in order.
pub fn replay(dir: &Path, after: u64) -> Result<Vec<Scu>> {
    replay_with(dir, after, |seq, commit_micros, body| {
        Ok(Scu {
            seq,
            commit_micros,
            ops: decode_ops(body)?,
        })
    })
}

/// Reads the log files in `dir` in order and decodes, with `decode(seq, commit_micros,
/// body)`, every record with `seq > after` (the body is what followed the sequence
/// number and commit time when the record was written). The framing, the torn-tail
/// rule and the sequence check are the same whatever the body holds, so the node's
/// log of SCUs over many tables uses them too.
pub fn replay_with<T>(
    dir: &Path,
    after: u64,
    mut decode: impl FnMut(u64, u64, &[u8]) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    let files = list_files(dir)?;
    let mut decoded = Vec::new();
    let mut expected_next: Option<u64> = None;
    for (_, path) in &files {
        let bytes = std::fs::read(path).map_err(|e| StoreError::io(path, e))?;
        let corrupt = |detail: String| StoreError::corrupt(path, detail);
        if bytes.len() < MAGIC.len() {
            continue; // created, then a crash before the magic was synced
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("not a log file (bad magic)".into()));
        }
        let mut at = 8;
        while at < bytes.len() {
            let Some(record) = next_record(&bytes, at).map_err(corrupt)? else {
                break; // torn tail: the header or the payload is cut short
            };
            if let Some(next) = expected_next {
                if record.seq != next {
                    return Err(corrupt(format!(
                        "record at byte {at} has sequence number {}, expected {next}",
                        record.seq
                    )));
                }
            }
            // The last number there is has no next: a log that holds it is damaged.
            expected_next = Some(record.seq.checked_add(1).ok_or_else(|| {
                corrupt(format!(
                    "record at byte {at} has the last sequence number there is"
                ))
            })?);
            if record.seq > after {
                decoded.push(
                    decode(record.seq, record.commit_micros, record.body)
                        .map_err(|e| corrupt(format!("record at byte {at}: {e}")))?,
                );
            }
            at = record.end;
        }
    }
    Ok(decoded)
}

/// One record of a log, as read.
#[derive(Debug)]
pub struct LoggedRecord<'a> {
    /// The SCU's number.
    pub seq: u64,
    /// Its commit time.
    pub commit_micros: u64,
    /// What followed the number and time when it was written.
    pub body: &'a [u8],
    /// Where the next record starts.
    pub end: usize,
}

/// The record at byte `at` of `bytes`; `None` if it is cut short (a torn tail), an
/// error if it is damaged.
fn next_record(bytes: &[u8], at: usize) -> std::result::Result<Option<LoggedRecord<'_>>, String> {
    let Some(header) = bytes.get(at..at + RECORD_HEADER_BYTES) else {
        return Ok(None);
    };
    let word = |i: usize| u32::from_le_bytes(header[4 * i..4 * i + 4].try_into().unwrap());
    let (len, len_check, crc) = (word(0), word(1), word(2));
    if len != !len_check {
        return Err(format!("record at byte {at} has a damaged length"));
    }
    let body_start = at + RECORD_HEADER_BYTES;
    let Some(payload) = bytes.get(body_start..body_start + len as usize) else {
        return Ok(None);
    };
    if !crate::container::checksum_holds(crc32fast::hash(payload), crc) {
        return Err(format!("record at byte {at} fails its checksum"));
    }
    let mut head = Reader {
        bytes: payload,
        at: 0,
    };
    let (seq, commit_micros) = head
        .u64()
        .and_then(|seq| Ok((seq, head.u64()?)))
        .map_err(|e| format!("record at byte {at}: {e}"))?;
    Ok(Some(LoggedRecord {
        seq,
        commit_micros,
        body: &payload[head.at..],
        end: body_start + payload.len(),
    }))
}

/// Every record of `bytes`, records as [`encode_record_parts`] writes them back to
/// back (a group shipped elsewhere): whole, numbered consecutively, or an error.
pub fn decode_records(bytes: &[u8]) -> std::result::Result<Vec<LoggedRecord<'_>>, String> {
    let mut records: Vec<LoggedRecord<'_>> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let record = next_record(bytes, at)?
            .ok_or_else(|| format!("the record at byte {at} is cut short"))?;
        if let Some(previous) = records.last() {
            let expected = previous.seq.checked_add(1);
            if expected != Some(record.seq) {
                let expected = expected
                    .map_or("none (the last number there is came before)".into(), |n| {
                        n.to_string()
                    });
                return Err(format!(
                    "record at byte {at} has sequence number {}, expected {expected}",
                    record.seq
                ));
            }
        }
        at = record.end;
        records.push(record);
    }
    Ok(records)
}

/// The log file currently appended to.
pub struct LogWriter {
    file: Box<dyn FsFile>,
    path: PathBuf,
    /// Bytes of the file so far: where a failed append is cut back to.
    len: u64,
    /// First sequence number this file may hold.
    pub first_seq: u64,
}

impl LogWriter {
    /// Creates a new log file for SCUs from `first_seq` on, durably (file and directory).
    pub fn create(fs: &dyn Fs, dir: &Path, first_seq: u64) -> Result<LogWriter> {
        let path = dir.join(file_name(first_seq));
        let io = |e| StoreError::io(&path, e);
        let mut file = fs.create(&path).map_err(io)?;
        file.write_all(MAGIC).map_err(io)?;
        file.sync().map_err(io)?;
        fs.sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
        Ok(LogWriter {
            file,
            path,
            len: MAGIC.len() as u64,
            first_seq,
        })
    }

    /// Appends encoded records and fsyncs them (one fsync for the whole group), then
    /// checks that the file is still the one written to.
    ///
    /// A write refused for want of space is taken back (the file cut to where it was)
    /// and answered [`StoreError::DiskFull`]: the log goes on as if it had not been
    /// tried. Any other failure, and a failed fsync even for want of space (what the
    /// kernel kept of the file is then unknown), is an [`StoreError::Io`] after which
    /// the caller must stop writing.
    pub fn append_durably(&mut self, records: &[u8]) -> Result<()> {
        // Before writing too: a write past a cut end would restore the expected length.
        self.check_in_place()?;
        if let Err(e) = self.file.write_all(records) {
            if crate::error::is_disk_full(&e) && self.file.truncate(self.len).is_ok() {
                return Err(StoreError::io(&self.path, e));
            }
            return Err(StoreError::Io {
                path: self.path.clone(),
                source: e,
            });
        }
        self.file.sync().map_err(|e| StoreError::Io {
            path: self.path.clone(),
            source: e,
        })?;
        self.len += records.len() as u64;
        self.check_in_place()
    }

    /// Fails when the log file was removed, replaced or cut under the process (by a
    /// person or another program): SCUs appended from then on would not be found at
    /// the next open, so none may be acknowledged. Two `stat`s a group commit.
    fn check_in_place(&self) -> Result<()> {
        let found = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(e) => {
                return Err(StoreError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::new(
                        e.kind(),
                        format!("the log file is gone under the server ({e})"),
                    ),
                })
            }
        };
        if found != self.len {
            return Err(StoreError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(format!(
                    "the log file holds {found} bytes where {} were written: it was cut or \
                     replaced under the server",
                    self.len
                )),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(first: u64, count: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for seq in first..first + count {
            encode_record_parts(seq, seq * 10, format!("body {seq}").as_bytes(), &mut out);
        }
        out
    }

    #[test]
    fn shipped_groups_decode_whole_or_not_at_all() {
        let bytes = group(5, 3);
        let records = decode_records(&bytes).unwrap();
        let seen: Vec<(u64, u64, Vec<u8>)> = records
            .iter()
            .map(|r| (r.seq, r.commit_micros, r.body.to_vec()))
            .collect();
        let expected: Vec<(u64, u64, Vec<u8>)> = (5..8)
            .map(|seq| (seq, seq * 10, format!("body {seq}").into_bytes()))
            .collect();
        assert_eq!(seen, expected);
        assert!(decode_records(&[]).unwrap().is_empty());
        // Cut anywhere inside, damaged anywhere, or with a gap: refused.
        for cut in 1..bytes.len() {
            let whole_records = decode_records(&bytes[..cut]);
            let at_boundary = records.iter().any(|r| r.end == cut);
            assert_eq!(whole_records.is_ok(), at_boundary, "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode_records(&bad).is_err(), "flip at {i} passed");
        }
        let mut gap = group(1, 1);
        gap.extend(group(3, 1));
        assert!(decode_records(&gap).unwrap_err().contains("expected 2"));
    }
}
