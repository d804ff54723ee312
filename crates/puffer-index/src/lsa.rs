//! Layered Sampled Arrays (BlowFish §3.1).
//!
//! An LSA stands for an array `A[0..len)` of which only the values at multiples of
//! the target rate `r` can be stored. They are split into `levels` layers: layer 0
//! (the base) holds the multiples of `r * 2^(levels-1)`; layer `l >= 1` holds the odd
//! multiples of `r * 2^(levels-1-l)`, so each layer is as large as all layers above it.
//! A lookup finds the layer an index belongs to from its trailing zeros and asks that
//! layer, whatever layers exist: it is agnostic of the current configuration.
//!
//! The set of existing layers is an immutable [`LayerSet`] published through an
//! `ArcSwap`: a query loads it once and keeps it for its whole run. Dropping a layer
//! publishes a set without it; the layer's memory is freed when the last query that
//! loaded an older set finishes (reference counting: no reader can touch freed memory).
//! A layer being filled opportunistically uses atomic words and a filled bitmap, so
//! queries can store values they computed while other queries read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::bits::{self, packed_get, SharedBytes};

/// How a layer's values are held.
pub enum LayerStorage {
    /// Complete and immutable (built, or loaded from a file).
    Frozen(SharedBytes),
    /// Being filled by queries: packed values in atomic words, plus a filled bitmap.
    Filling {
        /// Packed values; a value's bits are only meaningful once its filled bit is set.
        words: Box<[AtomicU64]>,
        /// One bit per entry, set (with release ordering) after the value is written.
        filled: Box<[AtomicU64]>,
        /// Entries filled so far.
        filled_count: AtomicU64,
    },
}

/// One layer of an LSA.
pub struct Layer {
    /// 0 for the base layer.
    pub level: u32,
    /// Number of values the layer holds.
    pub entries: u64,
    /// Bits per value.
    pub width: u32,
    /// The values.
    pub storage: LayerStorage,
}

impl Layer {
    /// A complete layer from packed bytes.
    pub fn frozen(level: u32, entries: u64, width: u32, bytes: SharedBytes) -> Layer {
        Layer {
            level,
            entries,
            width,
            storage: LayerStorage::Frozen(bytes),
        }
    }

    /// An empty layer to be filled by queries.
    pub fn filling(level: u32, entries: u64, width: u32) -> Layer {
        let words = (entries * width as u64).div_ceil(64) as usize + 1;
        let filled = entries.div_ceil(64) as usize;
        Layer {
            level,
            entries,
            width,
            storage: LayerStorage::Filling {
                words: (0..words).map(|_| AtomicU64::new(0)).collect(),
                filled: (0..filled).map(|_| AtomicU64::new(0)).collect(),
                filled_count: AtomicU64::new(0),
            },
        }
    }

    /// The value at `k`, if present.
    #[inline(always)]
    pub fn get(&self, k: u64) -> Option<u64> {
        match &self.storage {
            LayerStorage::Frozen(bytes) => Some(packed_get(bytes, k, self.width)),
            LayerStorage::Filling { words, filled, .. } => {
                let bit = filled[(k / 64) as usize].load(Ordering::Acquire) >> (k % 64) & 1;
                if bit == 0 {
                    return None;
                }
                let pos = k * self.width as u64;
                let (word, shift) = ((pos / 64) as usize, (pos % 64) as u32);
                let mut value = words[word].load(Ordering::Relaxed) >> shift;
                if shift + self.width > 64 {
                    value |= words[word + 1].load(Ordering::Relaxed) << (64 - shift);
                }
                Some(value & bits::low_mask(self.width))
            }
        }
    }

    /// Stores a computed value into a filling layer (no effect on a frozen one).
    /// Concurrent stores of the same entry write the same bits, so OR-ing is safe.
    #[inline]
    pub fn offer(&self, k: u64, value: u64) {
        if let LayerStorage::Filling {
            words,
            filled,
            filled_count,
        } = &self.storage
        {
            let mask = 1u64 << (k % 64);
            if filled[(k / 64) as usize].load(Ordering::Relaxed) & mask != 0 {
                return;
            }
            let pos = k * self.width as u64;
            let (word, shift) = ((pos / 64) as usize, (pos % 64) as u32);
            words[word].fetch_or(value << shift, Ordering::Relaxed);
            if shift + self.width > 64 {
                words[word + 1].fetch_or(value >> (64 - shift), Ordering::Relaxed);
            }
            if filled[(k / 64) as usize].fetch_or(mask, Ordering::Release) & mask == 0 {
                filled_count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether every value is present.
    pub fn is_complete(&self) -> bool {
        match &self.storage {
            LayerStorage::Frozen(_) => true,
            LayerStorage::Filling { filled_count, .. } => {
                filled_count.load(Ordering::Relaxed) == self.entries
            }
        }
    }

    /// Values present.
    pub fn filled_entries(&self) -> u64 {
        match &self.storage {
            LayerStorage::Frozen(_) => self.entries,
            LayerStorage::Filling { filled_count, .. } => filled_count.load(Ordering::Relaxed),
        }
    }

    /// Exact bytes held by the layer's storage.
    pub fn bytes(&self) -> u64 {
        match &self.storage {
            LayerStorage::Frozen(bytes) => bytes.len() as u64,
            LayerStorage::Filling { words, filled, .. } => {
                ((words.len() + filled.len()) * 8) as u64
            }
        }
    }

    /// The values packed (for saving); `None` unless complete.
    pub fn packed_bytes(&self) -> Option<Vec<u8>> {
        match &self.storage {
            LayerStorage::Frozen(bytes) => Some(bytes.to_vec()),
            LayerStorage::Filling { .. } if self.is_complete() => Some(bits::pack(
                (0..self.entries).map(|k| self.get(k).expect("complete")),
                self.width,
            )),
            LayerStorage::Filling { .. } => None,
        }
    }
}

/// The layers that exist at one moment; immutable once published.
pub struct LayerSet {
    /// Indexed by level; `None` where the layer does not exist.
    pub layers: Vec<Option<Arc<Layer>>>,
    /// Whether some layer is still being filled by queries.
    pub any_filling: bool,
}

impl LayerSet {
    /// Bitmap of existing levels (bit `l` = layer `l` exists).
    pub fn exists_bitmap(&self) -> u64 {
        self.layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some())
            .fold(0, |acc, (i, _)| acc | 1 << i)
    }

    /// Number of contiguous existing levels from the base.
    pub fn depth(&self) -> u32 {
        self.layers.iter().take_while(|l| l.is_some()).count() as u32
    }
}

/// Shape of an LSA: which indices live in which layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsaShape {
    /// Length of the emulated array.
    pub len: u64,
    /// log2 of the densest rate.
    pub target_rate_log2: u32,
    /// Number of layers, base included.
    pub levels: u32,
    /// Bits per value.
    pub width: u32,
}

impl LsaShape {
    /// Sampling rate of layer `level`.
    pub fn rate(&self, level: u32) -> u64 {
        1u64 << (self.target_rate_log2 + self.levels - 1 - level)
    }

    /// Number of values in layer `level`.
    pub fn layer_entries(&self, level: u32) -> u64 {
        let multiples = self.len.div_ceil(self.rate(level));
        if level == 0 {
            multiples
        } else {
            multiples / 2
        }
    }

    /// (level, position within that layer) of index `i`, if `i` can be sampled at all.
    #[inline(always)]
    pub fn slot(&self, i: u64) -> Option<(u32, u64)> {
        if i & ((1u64 << self.target_rate_log2) - 1) != 0 {
            return None;
        }
        let k = i >> self.target_rate_log2;
        let top = self.levels - 1;
        let zeros = if k == 0 {
            top
        } else {
            k.trailing_zeros().min(top)
        };
        let level = top - zeros;
        let shift = self.target_rate_log2 + zeros;
        let within = if level == 0 {
            i >> shift
        } else {
            (i >> shift) >> 1
        };
        Some((level, within))
    }

    /// The index stored at position `k` of layer `level`.
    pub fn index_of(&self, level: u32, k: u64) -> u64 {
        let rate = self.rate(level);
        if level == 0 {
            k * rate
        } else {
            (2 * k + 1) * rate
        }
    }
}

/// A layered sampled array.
pub struct LayeredSampledArray {
    shape: LsaShape,
    current: ArcSwap<LayerSet>,
}

impl LayeredSampledArray {
    /// An LSA whose existing layers are `layers` (index = level; the base must exist).
    pub fn new(shape: LsaShape, layers: Vec<Option<Arc<Layer>>>) -> Self {
        debug_assert!(layers.len() == shape.levels as usize && layers[0].is_some());
        let any_filling = layers.iter().flatten().any(|l| !l.is_complete());
        LayeredSampledArray {
            shape,
            current: ArcSwap::from_pointee(LayerSet {
                layers,
                any_filling,
            }),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &LsaShape {
        &self.shape
    }

    /// The current layer set; hold it for the duration of a query.
    pub fn view(&self) -> Arc<LayerSet> {
        self.current.load_full()
    }

    /// Publishes a set with `layer` at `level` (`None` removes it).
    pub fn publish(&self, level: u32, layer: Option<Arc<Layer>>) {
        let old = self.current.load_full();
        let mut layers = old.layers.clone();
        layers[level as usize] = layer;
        let any_filling = layers.iter().flatten().any(|l| !l.is_complete());
        self.current.store(Arc::new(LayerSet {
            layers,
            any_filling,
        }));
    }

    /// `A[i]` if it is stored in the layers of `view`.
    #[inline(always)]
    pub fn get(&self, view: &LayerSet, i: u64) -> Option<u64> {
        let (level, k) = self.shape.slot(i)?;
        view.layers[level as usize].as_ref()?.get(k)
    }

    /// Offers a computed `A[i] = value` to a layer that is being filled.
    #[inline]
    pub fn offer(&self, view: &LayerSet, i: u64, value: u64) {
        if let Some((level, k)) = self.shape.slot(i) {
            if let Some(layer) = view.layers[level as usize].as_ref() {
                layer.offer(k, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(len: u64) -> LsaShape {
        LsaShape {
            len,
            target_rate_log2: 2,
            levels: 3,
            width: 12,
        }
    }

    #[test]
    fn slots_partition_the_sampled_indices() {
        let s = shape(1000);
        let mut seen = vec![vec![false; 1000]; 3];
        for i in 0..1000u64 {
            match s.slot(i) {
                None => assert!(i % 4 != 0),
                Some((level, k)) => {
                    assert_eq!(s.index_of(level, k), i);
                    assert!(k < s.layer_entries(level), "i={i} level={level} k={k}");
                    assert!(!seen[level as usize][k as usize]);
                    seen[level as usize][k as usize] = true;
                }
            }
        }
        for level in 0..3 {
            let count = seen[level as usize].iter().filter(|&&b| b).count() as u64;
            assert_eq!(count, s.layer_entries(level));
        }
    }

    #[test]
    fn filling_layer_stores_and_reads_values() {
        let layer = Layer::filling(1, 300, 37);
        for k in (0..300u64).step_by(3) {
            layer.offer(k, (k * 0x1234_5679) & bits::low_mask(37));
        }
        for k in 0..300u64 {
            let expected = (k % 3 == 0).then_some((k * 0x1234_5679) & bits::low_mask(37));
            assert_eq!(layer.get(k), expected);
        }
        assert_eq!(layer.filled_entries(), 100);
        assert!(!layer.is_complete());
    }

    #[test]
    fn dropped_layer_is_freed_after_last_view() {
        let s = shape(100);
        let base = Arc::new(Layer::filling(0, s.layer_entries(0), 12));
        let lsa = LayeredSampledArray::new(s, vec![Some(base), None, None]);
        let extra = Arc::new(Layer::filling(1, s.layer_entries(1), 12));
        let weak = Arc::downgrade(&extra);
        lsa.publish(1, Some(extra));
        let held = lsa.view();
        lsa.publish(1, None);
        assert!(weak.upgrade().is_some(), "a reader still holds the layer");
        assert_eq!(held.depth(), 2);
        drop(held);
        assert!(
            weak.upgrade().is_none(),
            "memory released once no reader holds it"
        );
        assert_eq!(lsa.view().depth(), 1);
    }
}
