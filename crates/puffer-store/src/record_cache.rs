//! A bounded cache of record texts extracted from a shard's segments.
//!
//! Extracting a record from a compressed segment walks the index once per byte (about
//! 0.1 us a byte), and under skewed reads the same few records are extracted over and
//! over. Segments are immutable, so the text of record `r` of segment `s` never changes:
//! an entry can only go stale by its segment being dropped, and then no one asks for it
//! again and it ages out. Visibility (deletions, newer versions) is decided before the
//! cache is asked, so it never changes an answer, only its cost.
//!
//! The bound is in bytes (text plus a fixed per-entry overhead); the eviction policy is
//! quick_cache's (CLOCK-Pro-like, resistant to one-off scans such as a search that
//! touches many cold records once).

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// What an entry costs beyond its text: the key, the `Arc` header, the slot.
const ENTRY_OVERHEAD_BYTES: u64 = 64;

/// Texts larger than this are not cached: one huge record would push out many hot ones.
const MAX_CACHED_TEXT_BYTES: usize = 64 << 10;

/// Independently locked partitions. Fixed rather than quick_cache's default (4 per core):
/// each partition gets its share of the bound, and an entry must fit in one, so the
/// largest cached record must not depend on the machine. A replica is served by a few
/// threads, which four partitions keep apart well enough.
const PARTITIONS: usize = 4;

/// Cache key: (segment id, record number in the segment).
type SlotKey = (u64, u64);

#[derive(Clone)]
struct TextWeighter;

impl Weighter<SlotKey, Arc<[u8]>> for TextWeighter {
    fn weight(&self, _key: &SlotKey, text: &Arc<[u8]>) -> u64 {
        text.len() as u64 + ENTRY_OVERHEAD_BYTES
    }
}

/// Record texts of one shard's segments, at most `capacity_bytes` of them.
pub struct RecordCache {
    cache: Cache<SlotKey, Arc<[u8]>, TextWeighter>,
    /// Largest text kept: at most a quarter of a partition, at most 64 KiB.
    max_text_bytes: usize,
}

/// Counters of a record cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCacheStats {
    /// Bytes held (texts plus per-entry overhead).
    pub bytes: u64,
    /// The bound on `bytes`.
    pub capacity_bytes: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
}

impl std::ops::AddAssign for RecordCacheStats {
    fn add_assign(&mut self, other: RecordCacheStats) {
        self.bytes += other.bytes;
        self.capacity_bytes += other.capacity_bytes;
        self.entries += other.entries;
        self.hits += other.hits;
        self.misses += other.misses;
    }
}

impl RecordCache {
    /// A cache of at most `capacity_bytes`; `None` for 0 (caching off).
    pub fn new(capacity_bytes: u64) -> Option<Arc<RecordCache>> {
        if capacity_bytes == 0 {
            return None;
        }
        // The estimate only sizes the tables up front; 256 bytes is a typical record.
        let estimated_entries = (capacity_bytes / 256).clamp(16, 1 << 20) as usize;
        let options = quick_cache::OptionsBuilder::new()
            .shards(PARTITIONS)
            .estimated_items_capacity(estimated_entries)
            .weight_capacity(capacity_bytes)
            .build()
            .expect("both capacities are set");
        // quick_cache merges partitions that would hold fewer than 32 entries (small
        // caches): the bound below assumes the smallest share, so it holds either way.
        let partition_bytes = capacity_bytes / PARTITIONS as u64;
        let max_text_bytes = (partition_bytes / 4)
            .saturating_sub(ENTRY_OVERHEAD_BYTES)
            .min(MAX_CACHED_TEXT_BYTES as u64) as usize;
        Some(Arc::new(RecordCache {
            cache: Cache::with_options(
                options,
                TextWeighter,
                Default::default(),
                Default::default(),
            ),
            max_text_bytes,
        }))
    }

    /// The text of `record` of segment `segment`, if cached.
    pub fn get(&self, segment: u64, record: u64) -> Option<Arc<[u8]>> {
        self.cache.get(&(segment, record))
    }

    /// Remembers the text of `record` of segment `segment` (unless it is too large).
    pub fn insert(&self, segment: u64, record: u64, text: Arc<[u8]>) {
        if text.len() <= self.max_text_bytes {
            self.cache.insert((segment, record), text);
        }
    }

    /// Largest text [`RecordCache::insert`] keeps.
    pub fn max_text_bytes(&self) -> usize {
        self.max_text_bytes
    }

    pub fn stats(&self) -> RecordCacheStats {
        RecordCacheStats {
            bytes: self.cache.weight(),
            capacity_bytes: self.cache.capacity(),
            entries: self.cache.len() as u64,
            hits: self.cache.hits(),
            misses: self.cache.misses(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn text(seed: u64, len: usize) -> Arc<[u8]> {
        (0..len)
            .map(|i| (seed as usize * 31 + i) as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn zero_capacity_means_no_cache() {
        assert!(RecordCache::new(0).is_none());
    }

    #[test]
    fn answers_match_what_was_inserted_and_the_bound_holds() {
        let capacity = 20_000;
        let cache = RecordCache::new(capacity).expect("cache");
        let mut model: BTreeMap<(u64, u64), Arc<[u8]>> = BTreeMap::new();
        for i in 0..2_000u64 {
            let (segment, record) = (i % 3, i / 3);
            let value = text(i, 50 + (i as usize * 7) % 300);
            cache.insert(segment, record, value.clone());
            model.insert((segment, record), value);
            let stats = cache.stats();
            assert!(stats.bytes <= capacity, "{} > {capacity}", stats.bytes);
        }
        let mut hits = 0;
        for (&(segment, record), value) in &model {
            if let Some(found) = cache.get(segment, record) {
                assert_eq!(&found, value, "segment {segment} record {record}");
                hits += 1;
            }
        }
        // Evicted entries are absent, never wrong; some recent ones must still be there.
        assert!(hits > 10, "only {hits} entries survived");
        assert!(hits < model.len(), "nothing was evicted");
        let stats = cache.stats();
        assert_eq!(stats.hits, hits as u64);
        assert_eq!(stats.entries as usize, hits);
    }

    #[test]
    fn oversized_texts_are_not_kept_and_the_largest_kept_one_fits() {
        for capacity in [1_000, 64 << 10, 1 << 20, 4 << 20, 64 << 20] {
            let cache = RecordCache::new(capacity).expect("cache");
            let max = cache.max_text_bytes();
            assert!(max <= MAX_CACHED_TEXT_BYTES);
            cache.insert(1, 1, text(1, max + 1));
            cache.insert(1, 2, text(2, max));
            assert!(cache.get(1, 1).is_none(), "capacity {capacity}");
            assert_eq!(cache.get(1, 2), Some(text(2, max)), "capacity {capacity}");
        }
        // A roomy cache keeps records up to 64 KiB, whatever the machine's cores.
        let roomy = RecordCache::new(4 << 20).expect("cache");
        assert_eq!(roomy.max_text_bytes(), MAX_CACHED_TEXT_BYTES);
    }
}
