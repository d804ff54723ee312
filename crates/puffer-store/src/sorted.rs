//! The sorted stage: a sealed log table with an uncompressed suffix array over its text.
//! Fast to build (one libsais call), larger than a segment; queries use the same
//! text-search path as segments.

use std::sync::Arc;

use crate::codec::{self, Place, MARK};
use crate::error::{Result, StoreError};
use crate::memtable::{KeyMap, MemTable};
use crate::schema::{AttrType, StoredRecord};
use crate::stage::{Deletions, TextStage};

/// A sealed batch of records with a suffix array.
pub struct SortedBatch {
    /// Records' text, then one final marker.
    text: Vec<u8>,
    /// Suffix array of `text` (entry order = suffix order).
    sa: Vec<u32>,
    starts: Vec<u64>,
    keys: Vec<Vec<u8>>,
    key_index: KeyMap,
    deletions: Arc<Deletions>,
    /// First SCU the batch may hold.
    pub first_seq: u64,
    /// Last SCU the batch holds.
    pub last_seq: u64,
    /// When the batch was sealed (microseconds since the epoch).
    pub sealed_micros: u64,
}

impl SortedBatch {
    /// Seals a frozen log table: copies its text and builds the suffix array.
    pub fn from_memtable(table: &MemTable, now_micros: u64) -> Result<SortedBatch> {
        let inner = table.read();
        let mut text = Vec::with_capacity(inner.text.len() + 1);
        text.extend_from_slice(&inner.text);
        text.push(MARK);
        if text.len() >= i32::MAX as usize {
            return Err(StoreError::InvalidBatch(format!(
                "a log table of {} bytes is too large to seal",
                text.len()
            )));
        }
        let sa: Vec<u32> = libsais::SuffixArrayConstruction::for_text(&text)
            .in_owned_buffer32()
            .single_threaded()
            .run()
            .map_err(|e| StoreError::InvalidBatch(format!("suffix array failed: {e:?}")))?
            .into_vec()
            .into_iter()
            .map(|x| x as u32)
            .collect();
        Ok(SortedBatch {
            text,
            sa,
            starts: inner.starts.clone(),
            keys: inner.records.iter().map(|r| r.key.clone()).collect(),
            key_index: inner.keys.clone(),
            deletions: table.deletions.clone(),
            first_seq: table.first_seq,
            last_seq: inner.last_seq,
            sealed_micros: now_micros,
        })
    }

    /// Bytes of record text.
    pub fn text_bytes(&self) -> u64 {
        self.text.len() as u64
    }

    /// Approximate bytes held in memory.
    pub fn memory_bytes(&self) -> u64 {
        let key_bytes: usize = self.keys.iter().map(|k| k.len() * 2 + 64).sum();
        (self.text.len() + self.sa.len() * 4 + self.starts.len() * 8 + key_bytes) as u64
            + self.deletions.memory_bytes()
    }

    /// First entry whose suffix compares `>= bound` (or, with `past`, is greater and
    /// does not start with `bound`).
    fn partition(&self, bound: &[u8], past: bool) -> u64 {
        self.sa.partition_point(|&pos| {
            let suffix = &self.text[pos as usize..];
            let head = &suffix[..suffix.len().min(bound.len())];
            if past {
                head <= bound
            } else {
                suffix < bound
            }
        }) as u64
    }

    fn range_of(&self, record: u64) -> Result<std::ops::Range<usize>> {
        let start = *self.starts.get(record as usize).ok_or_else(|| {
            StoreError::InvalidQuery(format!("record {record} is not in this batch"))
        })?;
        let end = self
            .starts
            .get(record as usize + 1)
            .copied()
            .unwrap_or(self.text.len() as u64 - 1);
        Ok(start as usize..end as usize)
    }
}

impl TextStage for SortedBatch {
    fn record_count(&self) -> u64 {
        self.starts.len() as u64
    }
    fn entries_matching(&self, pattern: &[u8]) -> Result<(u64, u64)> {
        Ok((
            self.partition(pattern, false),
            self.partition(pattern, true),
        ))
    }
    fn first_entry_at_least(&self, bound: &[u8]) -> Result<u64> {
        Ok(self.partition(bound, false))
    }
    fn first_entry_past(&self, bound: &[u8]) -> Result<u64> {
        Ok(self.partition(bound, true))
    }
    fn locate(&self, runs: &[(u64, u64)]) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for &(start, end) in runs {
            let entries = self.sa.get(start as usize..end as usize).ok_or_else(|| {
                StoreError::InvalidQuery(format!("entries {start}..{end} out of range"))
            })?;
            out.extend(entries.iter().map(|&p| p as u64));
        }
        Ok(out)
    }
    fn record_at(&self, offset: u64) -> Result<u64> {
        let after = self.starts.partition_point(|&s| s <= offset);
        Ok(after.saturating_sub(1) as u64)
    }
    fn record_text(&self, record: u64) -> Result<Vec<u8>> {
        Ok(self.text[self.range_of(record)?].to_vec())
    }
    fn key(&self, record: u64) -> Result<Vec<u8>> {
        self.keys.get(record as usize).cloned().ok_or_else(|| {
            StoreError::InvalidQuery(format!("record {record} is not in this batch"))
        })
    }
    fn find_key(&self, key: &[u8]) -> Result<Option<u64>> {
        Ok(self.key_index.get(key).copied())
    }
    fn deletions(&self) -> &Deletions {
        &self.deletions
    }
    fn record(&self, record: u64, types: &[AttrType]) -> Result<StoredRecord> {
        let key = self.key(record)?;
        let range = self.range_of(record)?;
        codec::decode_record(key, &self.text[range], types)
            .map_err(|e| StoreError::InvalidQuery(format!("sorted batch record {record}: {e}")))
    }
    fn value_attribute_at(&self, offset: u64, _may_split_escape: bool) -> Result<Option<u16>> {
        let range = self.range_of(self.record_at(offset)?)?;
        let before = self.text.get(range.start..offset as usize).ok_or_else(|| {
            StoreError::InvalidQuery(format!("offset {offset} is past the batch's text"))
        })?;
        match codec::place_after(before) {
            Ok(Place::Value(id)) => Ok(Some(id)),
            Ok(Place::NotValue) => Ok(None),
            Ok(Place::Unknown) => Err(StoreError::InvalidQuery(format!(
                "sorted batch: no field marker before offset {offset}"
            ))),
            Err(e) => Err(StoreError::InvalidQuery(format!(
                "sorted batch at offset {offset}: {e}"
            ))),
        }
    }
}
