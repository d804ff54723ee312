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
//! entry of it; queries are the same with or without them.
//!
//! A layer built for a segment is also saved beside it (`seg-NNNNNN.attr-A`, see
//! [`AttributeLayer::to_file_bytes`]), and loaded instead of built when the segment is
//! reopened and the layer is wanted again: the six layers `puffer-bench peers` buys on
//! Airbnb loaded in 0.28 ms and took 342 ms to build (docs/layers.md). A segment never
//! changes, so its layer files never go stale; they go with the segment's other files.
//!
//! [`AttributeDemand`] counts, per attribute, the rows that attribute predicates found by
//! walks and by layers: what the layer manager weighs against a layer's bytes.

use std::sync::atomic::{AtomicU64, Ordering};

use puffer_index::bits::{packed_get, packed_len_bytes, width_for, BitWriter};

use crate::container::{decode_sections, encode_sections, find_section};
use crate::schema::MAX_ATTRIBUTES;

const FILE_MAGIC: [u8; 8] = *b"PUFFSATL";
const FILE_VERSION: u32 = 1;
/// Section of the facts: attribute, first entry, end entry, records, width (u64 LE each).
const SECTION_FACTS: u32 = 1;
/// Section of the packed record numbers, read padding included.
const SECTION_PACKED: u32 = 2;
const FACT_COUNT: usize = 5;

/// What a layer file must say to be the layer a segment asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    /// The attribute.
    pub attribute: u16,
    /// The attribute's entries in the segment's suffix array.
    pub first_entry: u64,
    /// One past the last.
    pub end_entry: u64,
    /// The segment's record count.
    pub records: u64,
}

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

    /// The entries the layer holds.
    pub fn entries(&self) -> std::ops::Range<u64> {
        self.first_entry..self.end_entry
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

    /// The layer as the bytes of its file: a checksummed container (magic `PUFFSATL`,
    /// version 1) whose section 1 holds the attribute, the first and end entries, the
    /// segment's record count and the width in bits (u64 LE each), and section 2 the
    /// packed record numbers as held in memory.
    pub fn to_file_bytes(&self, records: u64) -> Vec<u8> {
        let mut facts = Vec::with_capacity(FACT_COUNT * 8);
        for fact in [
            u64::from(self.attribute),
            self.first_entry,
            self.end_entry,
            records,
            u64::from(self.width_bits),
        ] {
            facts.extend_from_slice(&fact.to_le_bytes());
        }
        encode_sections(
            FILE_MAGIC,
            FILE_VERSION,
            &[(SECTION_FACTS, &facts), (SECTION_PACKED, &self.packed)],
        )
    }

    /// The layer a file holds, if it is the layer of `shape` and intact: the checksums,
    /// the facts, the packed length and every record number (below `shape.records`)
    /// are checked, so a file that does not fit is an error, never a wrong answer.
    pub fn from_file_bytes(bytes: &[u8], shape: LayerShape) -> Result<AttributeLayer, String> {
        let sections = decode_sections(bytes, FILE_MAGIC, FILE_VERSION)?;
        let facts = &bytes[find_section(&sections, SECTION_FACTS)?];
        if facts.len() != FACT_COUNT * 8 {
            return Err(format!(
                "facts section of {} bytes, expected {}",
                facts.len(),
                FACT_COUNT * 8
            ));
        }
        let fact =
            |i: usize| u64::from_le_bytes(facts[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let width_bits = width_for(shape.records.saturating_sub(1)).max(1);
        let found = (fact(0), fact(1), fact(2), fact(3), fact(4));
        let wanted = (
            u64::from(shape.attribute),
            shape.first_entry,
            shape.end_entry,
            shape.records,
            u64::from(width_bits),
        );
        if found != wanted {
            return Err(format!(
                "the file is of (attribute, first entry, end entry, records, width) {found:?}, \
                 the segment asks for {wanted:?}"
            ));
        }
        let packed = bytes[find_section(&sections, SECTION_PACKED)?].to_vec();
        let entries = shape.end_entry - shape.first_entry;
        if packed.len() != packed_len_bytes(entries, width_bits) {
            return Err(format!(
                "{} packed bytes for {entries} entries of {width_bits} bits, expected {}",
                packed.len(),
                packed_len_bytes(entries, width_bits)
            ));
        }
        if let Some(entry) =
            (0..entries).find(|&i| packed_get(&packed, i, width_bits) >= shape.records)
        {
            return Err(format!(
                "entry {} names record {} of {}",
                shape.first_entry + entry,
                packed_get(&packed, entry, width_bits),
                shape.records
            ));
        }
        Ok(AttributeLayer {
            attribute: shape.attribute,
            first_entry: shape.first_entry,
            end_entry: shape.end_entry,
            width_bits,
            packed,
        })
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
    fn a_layer_file_reads_back_the_layer_and_refuses_any_other() {
        let records = 1000u64;
        let entry_records: Vec<u64> = (0..777).map(|i| (i * 7919) % records).collect();
        let layer = AttributeLayer::from_records(3, 40, records, entry_records.clone());
        let bytes = layer.to_file_bytes(records);
        let shape = LayerShape {
            attribute: 3,
            first_entry: 40,
            end_entry: 817,
            records,
        };
        let loaded = AttributeLayer::from_file_bytes(&bytes, shape).unwrap();
        for (i, &record) in entry_records.iter().enumerate() {
            assert_eq!(loaded.record(40 + i as u64), record);
        }
        assert_eq!(loaded.byte_len(), layer.byte_len());
        // Another attribute, other entries, another record count: refused.
        for other in [
            LayerShape {
                attribute: 4,
                ..shape
            },
            LayerShape {
                first_entry: 41,
                ..shape
            },
            LayerShape {
                end_entry: 818,
                ..shape
            },
            LayerShape {
                records: 999,
                ..shape
            },
        ] {
            let err = AttributeLayer::from_file_bytes(&bytes, other).unwrap_err();
            assert!(err.contains("the segment asks for"), "{err}");
        }
        // Every flipped bit of the file is caught (checksums), never read as records.
        for bit in (0..bytes.len() * 8).step_by(7) {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            if let Ok(read) = AttributeLayer::from_file_bytes(&flipped, shape) {
                // Only a flip in the alignment padding between sections goes unseen.
                for (i, &record) in entry_records.iter().enumerate() {
                    assert_eq!(read.record(40 + i as u64), record, "bit {bit}");
                }
            }
        }
        assert!(AttributeLayer::from_file_bytes(&bytes[..bytes.len() - 1], shape).is_err());
        assert!(AttributeLayer::from_file_bytes(b"", shape).is_err());
    }

    #[test]
    fn a_layer_file_naming_a_record_past_the_segment_is_refused() {
        // Written for 1024 records (same 10-bit width as 1000), read for 1000.
        let layer = AttributeLayer::from_records(0, 0, 1024, [5, 1010, 7]);
        let bytes = layer.to_file_bytes(1000);
        let shape = LayerShape {
            attribute: 0,
            first_entry: 0,
            end_entry: 3,
            records: 1000,
        };
        let err = AttributeLayer::from_file_bytes(&bytes, shape).unwrap_err();
        assert!(err.contains("names record 1010 of 1000"), "{err}");
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
