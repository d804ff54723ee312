//! The log stage: acknowledged SCUs in memory, queryable at once. Records are kept
//! parsed (predicates are evaluated on values) and flattened (the text later becomes a
//! sorted batch); a small n-gram index narrows scans for patterns of 3 bytes or more.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::codec;
use crate::schema::StoredRecord;
use crate::stage::Deletions;

/// Key -> record number (ahash: fast, and randomized against crafted keys).
pub type KeyMap = ahash::AHashMap<Vec<u8>, u64>;

/// The trigram index records blocks of this many consecutive records, not single
/// records: neighbouring records share most trigrams (markers, common words), so the
/// index costs a fraction of the pushes, and a candidate block is cheap to verify.
const GRAM_BLOCK_RECORDS: u64 = 16;

/// Buckets of the trigram index (trigrams are hashed into them; collisions only add
/// candidates, which verification removes).
const GRAM_BUCKETS: usize = 1 << 16;

/// The records of one log-stage table.
pub struct MemInner {
    /// SCU that wrote each record.
    pub seqs: Vec<u64>,
    /// Records, in the order written.
    pub records: Vec<StoredRecord>,
    /// Flattened text of all records (no final marker).
    pub text: Vec<u8>,
    /// Start of each record in `text`.
    pub starts: Vec<u64>,
    /// Key -> newest record with that key in this table.
    pub keys: KeyMap,
    grams: Vec<Vec<u32>>,
    /// Last SCU applied to this table (0 if none).
    pub last_seq: u64,
    key_bytes: u64,
}

/// A log-stage table: appended to by the committer, read by queries, frozen when full.
pub struct MemTable {
    inner: RwLock<MemInner>,
    /// Deletion marks, shared with the sorted batch this table becomes.
    pub deletions: Arc<Deletions>,
    /// First SCU this table may hold.
    pub first_seq: u64,
}

fn gram_bucket(gram: &[u8]) -> usize {
    let x = (gram[0] as u32) | (gram[1] as u32) << 8 | (gram[2] as u32) << 16;
    (x.wrapping_mul(0x9E37_79B1) >> 16) as usize & (GRAM_BUCKETS - 1)
}

impl MemTable {
    /// An empty table for SCUs from `first_seq` on.
    pub fn new(first_seq: u64) -> MemTable {
        MemTable {
            inner: RwLock::new(MemInner {
                seqs: Vec::new(),
                records: Vec::new(),
                text: Vec::new(),
                starts: Vec::new(),
                keys: KeyMap::default(),
                grams: Vec::new(),
                last_seq: 0,
                key_bytes: 0,
            }),
            deletions: Arc::new(Deletions::default()),
            first_seq,
        }
    }

    /// Read access to the records.
    pub fn read(&self) -> RwLockReadGuard<'_, MemInner> {
        self.inner.read().expect("memtable lock")
    }

    /// Appends a record written by SCU `seq`, with its flattened text
    /// ([`codec::push_record`]); returns its number.
    pub fn append(&self, seq: u64, record: StoredRecord, text: Vec<u8>) -> u64 {
        let mut inner = self.inner.write().expect("memtable lock");
        let number = inner.records.len() as u64;
        let start = inner.text.len();
        inner.starts.push(start as u64);
        inner.text.extend_from_slice(&text);
        if inner.grams.is_empty() {
            inner.grams = vec![Vec::new(); GRAM_BUCKETS];
        }
        let MemInner { text, grams, .. } = &mut *inner;
        for gram in text[start..].windows(3) {
            let bucket = &mut grams[gram_bucket(gram)];
            let block = (number / GRAM_BLOCK_RECORDS) as u32;
            if bucket.last() != Some(&block) {
                bucket.push(block);
            }
        }
        inner.key_bytes += record.key.len() as u64;
        inner.keys.insert(record.key.clone(), number);
        inner.seqs.push(seq);
        inner.records.push(record);
        inner.last_seq = seq;
        number
    }

    /// Notes that SCU `seq` was applied (it may have written nothing here).
    pub fn note_applied(&self, seq: u64) {
        self.inner.write().expect("memtable lock").last_seq = seq;
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.read().records.len() as u64
    }

    /// Whether it holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of flattened text.
    pub fn text_bytes(&self) -> u64 {
        self.read().text.len() as u64
    }

    /// Approximate bytes held in memory.
    pub fn memory_bytes(&self) -> u64 {
        let inner = self.read();
        let postings: usize = inner.grams.iter().map(|g| g.capacity() * 4 + 24).sum();
        (inner.text.len() * 2 + inner.starts.len() * 24 + postings) as u64
            + inner.key_bytes * 2
            + inner.records.len() as u64 * 64
            + self.deletions.memory_bytes()
    }
}

impl MemInner {
    /// Records whose text may contain `pattern` (a superset), or `None` when the
    /// pattern is too short for the trigram index.
    pub fn candidates(&self, pattern: &[u8]) -> Option<Vec<u64>> {
        // A record's last value is followed by the next record's marker, not its own.
        let pattern = pattern.strip_suffix(&[codec::MARK]).unwrap_or(pattern);
        if pattern.len() < 3 || self.grams.is_empty() {
            return None;
        }
        let mut lists: Vec<&Vec<u32>> = pattern
            .windows(3)
            .map(|g| &self.grams[gram_bucket(g)])
            .collect();
        lists.sort_by_key(|l| l.len());
        let mut blocks: Vec<u32> = lists[0].clone();
        for list in &lists[1..] {
            if blocks.is_empty() {
                break;
            }
            blocks.retain(|b| list.binary_search(b).is_ok());
        }
        let records = self.records.len() as u64;
        Some(
            blocks
                .into_iter()
                .flat_map(|b| {
                    let first = b as u64 * GRAM_BLOCK_RECORDS;
                    first..(first + GRAM_BLOCK_RECORDS).min(records)
                })
                .collect(),
        )
    }
}
