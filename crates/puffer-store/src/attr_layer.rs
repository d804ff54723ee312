//! Attribute layers: the record number of every suffix-array entry of one attribute's
//! fields, so that an answer of thousands of rows is a backward search and a slice read
//! instead of one Psi walk per row.
//!
//! In a segment's text every field is `MARK id value`, so the suffixes that start at
//! attribute `id`'s fields are exactly the entries of pattern `MARK id`: one contiguous
//! interval of the suffix array, in value order. An equality, IN, prefix or range
//! predicate on the attribute is a sub-interval of it (see `query::leaf_probes`). The
//! layer stores, for each entry of the interval, the record whose field it is, bit-packed
//! at `ceil(log2(records))` bits: about 2 bytes per record holding the attribute on a
//! segment of 26,458 records.
//!
//! Like the sample layers of `puffer-index` (BlowFish), attribute layers are added and
//! dropped at run time while queries run: a segment's set of layers is an immutable list
//! swapped atomically, a query keeps the layer it loaded, and a dropped layer's memory
//! goes when the last query holding it ends. They are built whole, by a dedicated pass
//! (one locate of the interval), because a layer answers a range only if it holds every
//! entry of it; queries are the same with or without them. They live in memory only: a
//! reopened or compacted segment gets them again from the replica's target set
//! (`puffer-node`), which is cheaper than keeping files in step (see docs/layers.md).
//!
//! [`AttributeDemand`] counts, per attribute, the rows that attribute predicates found by
//! walks and by layers: what the layer manager weighs against a layer's bytes.

use std::sync::atomic::{AtomicU64, Ordering};

use puffer_index::bits::{packed_get, width_for, BitWriter};

use crate::schema::MAX_ATTRIBUTES;

/// One attribute's layer in one segment: entries `first_entry..end_entry` (every entry of
/// the pattern `MARK id`) mapped to record numbers.
#[derive(Debug)]
pub struct AttributeLayer {
    attribute: u16,
    first_entry: u64,
    end_entry: u64,
    width_bits: u32,
    /// The record numbers, packed, with the read padding of `puffer_index::bits`.
    packed: Vec<u8>,
}

impl AttributeLayer {
    /// A layer from the record of each entry of `first_entry..`, in entry order;
    /// `records` is the segment's record count (every value is below it).
    pub fn from_records(
        attribute: u16,
        first_entry: u64,
        records: u64,
        entry_records: impl IntoIterator<Item = u64>,
    ) -> AttributeLayer {
        let width_bits = width_for(records.saturating_sub(1)).max(1);
        let mut writer = BitWriter::new();
        let mut entries = 0u64;
        for record in entry_records {
            debug_assert!(record < records.max(1), "record {record} of {records}");
            writer.push(record, width_bits);
            entries += 1;
        }
        AttributeLayer {
            attribute,
            first_entry,
            end_entry: first_entry + entries,
            width_bits,
            packed: writer.into_padded_bytes(),
        }
    }

    /// The attribute.
    pub fn attribute(&self) -> u16 {
        self.attribute
    }

    /// Whether the layer holds every entry of `start..end`.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        self.first_entry <= start && end <= self.end_entry
    }

    /// The record of `entry` (which the layer must cover).
    #[inline]
    pub fn record(&self, entry: u64) -> u64 {
        debug_assert!(self.covers(entry, entry + 1));
        packed_get(&self.packed, entry - self.first_entry, self.width_bits)
    }

    /// Bytes held.
    pub fn byte_len(&self) -> u64 {
        self.packed.len() as u64 + std::mem::size_of::<Self>() as u64
    }

    /// Bytes a layer of `entries` entries over `records` records takes (what
    /// [`AttributeLayer::byte_len`] will say once built).
    pub fn bytes_for(entries: u64, records: u64) -> u64 {
        let width_bits = width_for(records.saturating_sub(1)).max(1);
        puffer_index::bits::packed_len_bytes(entries, width_bits) as u64
            + std::mem::size_of::<Self>() as u64
    }
}

/// Rows that attribute predicates found in a shard's segments since it opened, per
/// attribute: by Psi walks (no layer) and from attribute layers.
pub struct AttributeDemand {
    walked: [AtomicU64; MAX_ATTRIBUTES],
    layered: [AtomicU64; MAX_ATTRIBUTES],
}

/// Rows found for one attribute (see [`AttributeDemand`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttributeRows {
    /// The attribute.
    pub attribute: u16,
    /// Rows located by walks along Psi.
    pub walked: u64,
    /// Rows read from an attribute layer.
    pub layered: u64,
}

impl Default for AttributeDemand {
    fn default() -> Self {
        AttributeDemand {
            walked: std::array::from_fn(|_| AtomicU64::new(0)),
            layered: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl AttributeDemand {
    /// Counts `rows` found for `attribute`, from a layer or by walks.
    pub fn record(&self, attribute: u16, rows: u64, from_layer: bool) {
        let counters = if from_layer {
            &self.layered
        } else {
            &self.walked
        };
        if let Some(counter) = counters.get(attribute as usize) {
            counter.fetch_add(rows, Ordering::Relaxed);
        }
    }

    /// Every attribute with rows found, ascending.
    pub fn rows(&self) -> Vec<AttributeRows> {
        (0..MAX_ATTRIBUTES)
            .filter_map(|i| {
                let walked = self.walked[i].load(Ordering::Relaxed);
                let layered = self.layered[i].load(Ordering::Relaxed);
                (walked + layered > 0).then_some(AttributeRows {
                    attribute: i as u16,
                    walked,
                    layered,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_reads_back_what_it_was_built_from() {
        let records = 1000u64;
        let entry_records: Vec<u64> = (0..777).map(|i| (i * 7919) % records).collect();
        let layer = AttributeLayer::from_records(3, 40, records, entry_records.clone());
        assert_eq!(layer.attribute(), 3);
        assert!(layer.covers(40, 817));
        assert!(!layer.covers(39, 50));
        assert!(!layer.covers(40, 818));
        for (i, &record) in entry_records.iter().enumerate() {
            assert_eq!(layer.record(40 + i as u64), record);
        }
        assert_eq!(layer.byte_len(), AttributeLayer::bytes_for(777, records));
    }

    #[test]
    fn demand_counts_per_attribute_and_source() {
        let demand = AttributeDemand::default();
        demand.record(2, 10, false);
        demand.record(2, 5, true);
        demand.record(7, 1, false);
        demand.record(u16::MAX, 1, false);
        assert_eq!(
            demand.rows(),
            vec![
                AttributeRows {
                    attribute: 2,
                    walked: 10,
                    layered: 5
                },
                AttributeRows {
                    attribute: 7,
                    walked: 1,
                    layered: 0
                }
            ]
        );
    }
}
