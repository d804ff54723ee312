//! What the stages of a shard have in common: versioned deletion marks, and the
//! text-search interface that sorted batches and compressed segments both offer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::attr_layer::AttributeLayer;
use crate::column_layer::ColumnLayer;
use crate::error::Result;
use crate::schema::{AttrType, StoredRecord};

/// Deletion marks of one stage: record number -> sequence number of the SCU that
/// deleted or replaced it. A reader at snapshot `s` treats a record as deleted only if
/// it was marked at or before `s`, so marks made by newer SCUs do not disturb it.
#[derive(Debug, Default)]
pub struct Deletions {
    marks: RwLock<ahash::AHashMap<u64, u64>>,
    /// Marks made so far (they are never taken back): read without the lock, so that a
    /// reader of a stage without deletions checks nothing per record.
    count: AtomicUsize,
}

impl Deletions {
    /// Marks `record` deleted by SCU `seq` (the first mark wins).
    pub fn mark(&self, record: u64, seq: u64) {
        let mut marks = self.marks.write().expect("deletion marks lock");
        if let std::collections::hash_map::Entry::Vacant(entry) = marks.entry(record) {
            entry.insert(seq);
            self.count.store(marks.len(), Ordering::Release);
        }
    }

    /// Whether no record is marked at all. A reader at snapshot `s` may take this as
    /// "everything is live at `s`": every mark at or before `s` was made before `s` was
    /// published, and marks made since are newer than `s`.
    pub fn none(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// Whether `record` is live at `snapshot`.
    pub fn live_at(&self, record: u64, snapshot: u64) -> bool {
        match self.marks.read().expect("deletion marks lock").get(&record) {
            Some(&seq) => seq > snapshot,
            None => true,
        }
    }

    /// Whether `record` is live now (no mark at all).
    pub fn unmarked(&self, record: u64) -> bool {
        !self
            .marks
            .read()
            .expect("deletion marks lock")
            .contains_key(&record)
    }

    /// Records marked at or before `snapshot`, ascending.
    pub fn deleted_at(&self, snapshot: u64) -> Vec<u64> {
        let marks = self.marks.read().expect("deletion marks lock");
        let mut out: Vec<u64> = marks
            .iter()
            .filter(|(_, &seq)| seq <= snapshot)
            .map(|(&r, _)| r)
            .collect();
        out.sort_unstable();
        out
    }

    /// Marks made after `snapshot`, as (record, seq).
    pub fn marks_after(&self, snapshot: u64) -> Vec<(u64, u64)> {
        let marks = self.marks.read().expect("deletion marks lock");
        marks
            .iter()
            .filter(|(_, &seq)| seq > snapshot)
            .map(|(&r, &s)| (r, s))
            .collect()
    }

    /// Number of marks.
    pub fn len(&self) -> usize {
        self.marks.read().expect("deletion marks lock").len()
    }

    /// Whether there are no marks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes held.
    pub fn memory_bytes(&self) -> u64 {
        (self.len() as u64) * 24
    }
}

/// A stage whose records are searchable as text: suffix-array ranges of patterns,
/// positions of entries, records at positions. Implemented by sorted batches
/// (plain suffix array) and segments (compressed index).
pub trait TextStage: Send + Sync {
    /// Number of records (deleted ones included).
    fn record_count(&self) -> u64;
    /// Suffix-array entries whose suffixes start with `pattern` (non-empty).
    fn entries_matching(&self, pattern: &[u8]) -> Result<(u64, u64)>;
    /// First entry whose suffix is `>= bound`.
    fn first_entry_at_least(&self, bound: &[u8]) -> Result<u64>;
    /// First entry whose suffix is `> bound` and does not start with it.
    fn first_entry_past(&self, bound: &[u8]) -> Result<u64>;
    /// Text offsets of the entries of each run `start..end`, runs in the order given.
    fn locate(&self, runs: &[(u64, u64)]) -> Result<Vec<u64>>;
    /// The record whose text contains `offset`.
    fn record_at(&self, offset: u64) -> Result<u64>;
    /// The text of a record.
    fn record_text(&self, record: u64) -> Result<Vec<u8>>;
    /// The key of a record.
    fn key(&self, record: u64) -> Result<Vec<u8>>;
    /// The record with `key`, if the stage has one (live or not).
    fn find_key(&self, key: &[u8]) -> Result<Option<u64>>;
    /// The deletion marks.
    fn deletions(&self) -> &Deletions;
    /// The attribute layer of `attribute`, if the stage holds one (segments may; sorted
    /// batches locate in O(1) and need none).
    fn attribute_layer(&self, _attribute: u16) -> Option<Arc<AttributeLayer>> {
        None
    }
    /// The column layer of `attribute`, if the stage holds one (segments may).
    fn column_layer(&self, _attribute: u16) -> Option<Arc<ColumnLayer>> {
        None
    }
    /// The keys of `records` (ascending), in their order.
    fn keys(&self, records: &[u64]) -> Result<Vec<Vec<u8>>> {
        records.iter().map(|&r| self.key(r)).collect()
    }
    /// Decodes a record.
    fn record(&self, record: u64, types: &[AttrType]) -> Result<StoredRecord>;
    /// [`TextStage::record`] for a point read or a short answer: the stage may keep the
    /// record's text for the next read (scans and verifications use `record`, so they
    /// do not push hot records out of a cache).
    fn record_kept(&self, record: u64, types: &[AttrType]) -> Result<StoredRecord> {
        self.record(record, types)
    }
    /// Decodes a record with at least the attributes `wanted` (others may come along
    /// where reading them costs nothing more), for answers that ask for a few columns:
    /// a segment skips the long fields not asked for.
    fn record_fields(
        &self,
        record: u64,
        _wanted: &[u16],
        types: &[AttrType],
    ) -> Result<StoredRecord> {
        self.record(record, types)
    }
    /// The text of a record, known to decode with `types` (what [`TextStage::record`]
    /// would decode), for callers that read the fields straight from the text; kept as
    /// [`TextStage::record_kept`] keeps it.
    fn checked_text(&self, record: u64, types: &[AttrType]) -> Result<Arc<[u8]>> {
        self.record(record, types)?;
        Ok(self.record_text(record)?.into())
    }
    /// The attribute whose value holds an occurrence of an escaped pattern starting at
    /// `offset`; `None` when the occurrence starts at a field's attribute byte or inside
    /// an escape pair, where no value substring starts. `may_split_escape`: the pattern
    /// could start inside an escape pair (see [`crate::codec::may_split_escape`]).
    fn value_attribute_at(&self, offset: u64, may_split_escape: bool) -> Result<Option<u16>>;
    /// [`TextStage::value_attribute_at`] where it costs about one lookup; `None` where
    /// it would extract text (a segment's short fields), so callers can place those last.
    fn value_attribute_at_cheaply(
        &self,
        offset: u64,
        may_split_escape: bool,
    ) -> Result<Option<Option<u16>>> {
        self.value_attribute_at(offset, may_split_escape).map(Some)
    }
}
