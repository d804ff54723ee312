//! The log stage: acknowledged SCUs in memory, queryable at once. Records are kept
//! parsed (predicates are evaluated on values) and flattened (the text later becomes a
//! sorted batch); a small n-gram index narrows scans for patterns of 3 bytes or more.

use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard};

use crate::codec;
use crate::schema::StoredRecord;
use crate::stage::Deletions;

/// Key -> record number (ahash: fast, and randomized against crafted keys).
pub type KeyMap = ahash::AHashMap<Vec<u8>, u64>;

/// Trigrams are hashed into this many bits.
const GRAM_BITS: usize = 1 << 16;
/// A block of the trigram index closes after this much text...
const GRAM_BLOCK_TEXT_BYTES: usize = 16 << 10;
/// ... or this many records.
const GRAM_BLOCK_MAX_RECORDS: u64 = 256;

/// The trigram index of a run of consecutive records: one bit per trigram hash present
/// in any of them. Setting bits in one 8 KB set stays in the L1 cache, unlike posting
/// lists; a query tests each block's bits and verifies the records of the blocks that
/// have them all (collisions and trigrams from different records only add candidates).
///
/// The bits are computed by the first query that needs them, not by the committer:
/// appending is on the write path's one serial thread, and a table loaded in bulk and
/// sealed before anyone searches it never pays for them. The last block, which may
/// still grow, has no bits; queries verify all its records (at most
/// `GRAM_BLOCK_TEXT_BYTES` of text, or `GRAM_BLOCK_MAX_RECORDS` records).
struct GramBlock {
    first_record: u64,
    text_bytes: usize,
    bits: OnceLock<Box<[u64]>>,
}

impl GramBlock {
    fn new(first_record: u64) -> GramBlock {
        GramBlock {
            first_record,
            text_bytes: 0,
            bits: OnceLock::new(),
        }
    }

    /// The block's bits, computed from its text on first use.
    fn bits(&self, text: &[u8]) -> &[u64] {
        self.bits.get_or_init(|| {
            let mut bits = vec![0u64; GRAM_BITS / 64].into_boxed_slice();
            for gram in text.windows(3) {
                let bit = gram_bucket(gram);
                bits[bit / 64] |= 1 << (bit % 64);
            }
            bits
        })
    }
}

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
    grams: Vec<GramBlock>,
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
    (x.wrapping_mul(0x9E37_79B1) >> 16) as usize & (GRAM_BITS - 1)
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
        let full = inner.grams.last().is_none_or(|block| {
            block.text_bytes >= GRAM_BLOCK_TEXT_BYTES
                || number - block.first_record >= GRAM_BLOCK_MAX_RECORDS
        });
        if full {
            inner.grams.push(GramBlock::new(number));
        }
        let added = inner.text.len() - start;
        inner.grams.last_mut().expect("a block exists").text_bytes += added;
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
        let computed = inner.grams.iter().filter(|b| b.bits.get().is_some());
        let postings = inner.grams.len() * 32 + computed.count() * (GRAM_BITS / 8);
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
        let wanted: Vec<usize> = pattern.windows(3).map(gram_bucket).collect();
        let records = self.records.len() as u64;
        let mut out = Vec::new();
        for (i, block) in self.grams.iter().enumerate() {
            let Some(next) = self.grams.get(i + 1) else {
                // The last block may still grow: all its records are candidates.
                out.extend(block.first_record..records);
                break;
            };
            let start = self.starts[block.first_record as usize] as usize;
            let end = self.starts[next.first_record as usize] as usize;
            let bits = block.bits(&self.text[start..end]);
            if wanted
                .iter()
                .all(|&bit| bits[bit / 64] & (1 << (bit % 64)) != 0)
            {
                out.extend(block.first_record..next.first_record);
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Value;

    #[test]
    fn trigram_candidates_include_every_record_with_the_pattern() {
        let table = MemTable::new(1);
        let mut seed = 7u64;
        let mut texts = Vec::new();
        for i in 0..2000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 60) as usize * 40 + 1;
            let value: Vec<u8> = (0..len)
                .map(|j| b"abcdefgh"[((seed >> (j % 50)) as usize + j * 7) % 8])
                .collect();
            let record = StoredRecord {
                key: format!("k{i}").into_bytes(),
                fields: vec![(0, Value::String(value))],
            };
            let mut text = Vec::new();
            codec::push_record(&mut text, &record);
            texts.push(text.clone());
            table.append(i + 1, record, text);
        }
        let inner = table.read();
        assert!(inner.grams.len() > 3, "several index blocks");
        for pattern in [
            &b"abc"[..],
            b"hgfe",
            b"aaaa",
            b"dcbahg",
            b"\x01\x10abc",
            b"zzz",
        ] {
            let candidates = inner.candidates(pattern).expect("patterns of 3+ bytes");
            for (record, text) in texts.iter().enumerate() {
                let has = text.windows(pattern.len()).any(|w| w == pattern);
                if has {
                    assert!(
                        candidates.contains(&(record as u64)),
                        "{pattern:?} in {record}"
                    );
                }
            }
            if pattern == b"zzz" {
                let open_block = inner.grams.last().unwrap().first_record;
                assert!(
                    candidates.iter().all(|&r| r >= open_block),
                    "absent trigrams select nothing outside the open block"
                );
            }
        }
        assert!(inner.candidates(b"ab").is_none());
    }
}
