//! Column layers: one attribute's values by record number, so that a scan that
//! aggregates a few attributes reads packed arrays instead of extracting every record
//! from the compressed text (about 10 MB/s, 30 to 50 us a record on the datasets of
//! `puffer-bench analytics`).
//!
//! A layer holds, for each record of one segment, the attribute's value or its
//! absence, encoded by type:
//! - integers and timestamps: frame of reference (the least value) and the offsets
//!   bit-packed at the width of the largest (raw 64-bit values where that exceeds the
//!   56 bits a packed read allows);
//! - booleans: one bit each;
//! - strings and floats: a dictionary of the distinct values, ascending, and each
//!   record's code bit-packed; floats whose distinct values are too many for a
//!   dictionary to be smaller are kept raw;
//! - absence: a bitmap of the records that hold the attribute, left out when all do.
//!
//! Like attribute layers (`attr_layer`), column layers are added and dropped at run
//! time while queries run (a segment's list of layers is swapped whole; a query keeps
//! the layer it loaded), are built whole on a thread of their own from the segment's
//! own fields and are counted in the replica's footprint. Unlike attribute layers they
//! live in memory only (no file is saved): a reopened or compacted segment gets them
//! again from the replica's target set. Deleted
//! records keep their values here; readers check deletions as for every other read.

use puffer_index::bits::{packed_get, width_for, BitWriter};

use crate::columns::{Column, ColumnData};
use crate::schema::{AttrType, Value};

/// Most bits a packed read returns (see `puffer_index::bits`).
const PACKED_WIDTH_MAX_BITS: u32 = 56;

/// One attribute's values in one segment, by record number.
#[derive(Debug)]
pub struct ColumnLayer {
    attribute: u16,
    attr_type: AttrType,
    records: u64,
    /// Bit `r` set: record `r` holds the attribute. `None`: every record does.
    present: Option<Vec<u64>>,
    values: Encoded,
}

#[derive(Debug)]
enum Encoded {
    /// Integers and timestamps: `base + packed[r]` (wrapping).
    Offsets {
        base: i64,
        width_bits: u32,
        packed: Vec<u8>,
    },
    /// Integers and timestamps whose spread needs more than a packed read's bits.
    Raw(Vec<i64>),
    /// Booleans, one bit each.
    Bools(Vec<u8>),
    /// Floats and strings: `dictionary[packed[r]]`.
    Dictionary {
        dictionary: Dictionary,
        width_bits: u32,
        packed: Vec<u8>,
    },
    /// Floats with too many distinct values for a dictionary.
    Floats(Vec<f64>),
}

#[derive(Debug)]
enum Dictionary {
    Floats(Vec<f64>),
    /// Distinct strings, ascending by bytes: string `i` is `bytes[ends[i-1]..ends[i]]`.
    Strings {
        ends: Vec<u32>,
        bytes: Vec<u8>,
    },
}

impl ColumnLayer {
    /// A layer of `attribute` (of type `attr_type`) from the value of each record of a
    /// segment, in record order (`None` where a record omits the attribute). A value of
    /// another type than `attr_type` is refused: a segment's fields decode with its
    /// schema's types, so one means the segment does not hold what it says.
    pub fn from_values(
        attribute: u16,
        attr_type: AttrType,
        values: &[Option<Value>],
    ) -> Result<ColumnLayer, String> {
        let records = values.len() as u64;
        let present = if values.iter().all(Option::is_some) {
            None
        } else {
            let mut bits = vec![0u64; values.len().div_ceil(64)];
            for (r, v) in values.iter().enumerate() {
                if v.is_some() {
                    bits[r / 64] |= 1 << (r % 64);
                }
            }
            Some(bits)
        };
        let wrong = |v: &Value| {
            format!(
                "attribute {attribute} is {} but a record holds a {}",
                attr_type.name(),
                v.attr_type().name()
            )
        };
        let encoded = match attr_type {
            AttrType::Int | AttrType::Timestamp => {
                let mut ints = Vec::with_capacity(values.len());
                for v in values {
                    ints.push(match v {
                        None => None,
                        Some(Value::Int(i) | Value::Timestamp(i))
                            if v.as_ref().map(Value::attr_type) == Some(attr_type) =>
                        {
                            Some(*i)
                        }
                        Some(other) => return Err(wrong(other)),
                    });
                }
                encode_ints(&ints)
            }
            AttrType::Bool => {
                let mut writer = BitWriter::new();
                for v in values {
                    let bit = match v {
                        None => false,
                        Some(Value::Bool(b)) => *b,
                        Some(other) => return Err(wrong(other)),
                    };
                    writer.push(u64::from(bit), 1);
                }
                Encoded::Bools(writer.into_padded_bytes())
            }
            AttrType::Float => {
                let mut floats = Vec::with_capacity(values.len());
                for v in values {
                    floats.push(match v {
                        None => None,
                        Some(Value::Float(f)) => Some(*f),
                        Some(other) => return Err(wrong(other)),
                    });
                }
                encode_floats(&floats)
            }
            AttrType::String => {
                let mut strings: Vec<Option<&[u8]>> = Vec::with_capacity(values.len());
                for v in values {
                    strings.push(match v {
                        None => None,
                        Some(Value::String(s)) => Some(s.as_slice()),
                        Some(other) => return Err(wrong(other)),
                    });
                }
                encode_strings(&strings)?
            }
        };
        Ok(ColumnLayer {
            attribute,
            attr_type,
            records,
            present,
            values: encoded,
        })
    }

    /// The attribute.
    pub fn attribute(&self) -> u16 {
        self.attribute
    }

    /// Records covered (the segment's record count).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Whether record `record` holds the attribute.
    #[inline]
    fn holds(&self, record: u64) -> bool {
        self.present
            .as_ref()
            .is_none_or(|bits| bits[(record / 64) as usize] >> (record % 64) & 1 == 1)
    }

    /// The value of `record` (below [`ColumnLayer::records`]), if it holds one.
    pub fn value(&self, record: u64) -> Option<Value> {
        if !self.holds(record) {
            return None;
        }
        Some(match &self.values {
            Encoded::Offsets { .. } | Encoded::Raw(_) => {
                let i = self.int_at(record);
                match self.attr_type {
                    AttrType::Timestamp => Value::Timestamp(i),
                    _ => Value::Int(i),
                }
            }
            Encoded::Bools(packed) => Value::Bool(packed_get(packed, record, 1) == 1),
            Encoded::Floats(floats) => Value::Float(floats[record as usize]),
            Encoded::Dictionary {
                dictionary,
                width_bits,
                packed,
            } => {
                let code = packed_get(packed, record, *width_bits) as usize;
                match dictionary {
                    Dictionary::Floats(floats) => Value::Float(floats[code]),
                    Dictionary::Strings { ends, bytes } => {
                        Value::String(string_at(ends, bytes, code).to_vec())
                    }
                }
            }
        })
    }

    #[inline]
    fn int_at(&self, record: u64) -> i64 {
        match &self.values {
            Encoded::Offsets {
                base,
                width_bits,
                packed,
            } => base.wrapping_add(packed_get(packed, record, *width_bits) as i64),
            Encoded::Raw(raw) => raw[record as usize],
            _ => 0,
        }
    }

    /// Appends the values of `records` (each below [`ColumnLayer::records`]) to
    /// `column`, which must be of the layer's type.
    pub fn append(&self, records: &[u64], column: &mut Column) {
        column.valid.extend(records.iter().map(|&r| self.holds(r)));
        match (&self.values, &mut column.data) {
            (Encoded::Offsets { .. } | Encoded::Raw(_), ColumnData::Ints(out)) => {
                out.extend(records.iter().map(|&r| self.int_at(r)));
            }
            (Encoded::Bools(packed), ColumnData::Bools(out)) => {
                out.extend(records.iter().map(|&r| packed_get(packed, r, 1) == 1));
            }
            (Encoded::Floats(floats), ColumnData::Floats(out)) => {
                out.extend(records.iter().map(|&r| floats[r as usize]));
            }
            (
                Encoded::Dictionary {
                    dictionary: Dictionary::Floats(floats),
                    width_bits,
                    packed,
                },
                ColumnData::Floats(out),
            ) => {
                // An absent value's code is 0, which an empty dictionary does not hold.
                out.extend(records.iter().map(|&r| {
                    floats
                        .get(packed_get(packed, r, *width_bits) as usize)
                        .copied()
                        .unwrap_or(0.0)
                }));
            }
            (
                Encoded::Dictionary {
                    dictionary: Dictionary::Strings { ends, bytes },
                    width_bits,
                    packed,
                },
                ColumnData::Bytes {
                    ends: out_ends,
                    bytes: out_bytes,
                },
            ) => {
                for &r in records {
                    if self.holds(r) {
                        let code = packed_get(packed, r, *width_bits) as usize;
                        out_bytes.extend_from_slice(string_at(ends, bytes, code));
                    }
                    out_ends.push(out_bytes.len());
                }
            }
            (_, data) => {
                // A caller bug, not a data error: the column was made for another type.
                debug_assert!(false, "a {:?} layer appended to {data:?}", self.attr_type);
                column.valid.truncate(column.valid.len() - records.len());
            }
        }
    }

    /// Bytes held.
    pub fn byte_len(&self) -> u64 {
        let present = self.present.as_ref().map_or(0, |b| b.len() * 8);
        let values = match &self.values {
            Encoded::Offsets { packed, .. } | Encoded::Bools(packed) => packed.len(),
            Encoded::Raw(raw) => raw.len() * 8,
            Encoded::Floats(floats) => floats.len() * 8,
            Encoded::Dictionary {
                dictionary, packed, ..
            } => {
                packed.len()
                    + match dictionary {
                        Dictionary::Floats(floats) => floats.len() * 8,
                        Dictionary::Strings { ends, bytes } => ends.len() * 4 + bytes.len(),
                    }
            }
        };
        (present + values + std::mem::size_of::<Self>()) as u64
    }
}

fn string_at<'a>(ends: &[u32], bytes: &'a [u8], code: usize) -> &'a [u8] {
    let start = if code == 0 { 0 } else { ends[code - 1] } as usize;
    &bytes[start..ends[code] as usize]
}

fn encode_ints(values: &[Option<i64>]) -> Encoded {
    let base = values.iter().flatten().copied().min().unwrap_or(0);
    let spread = values
        .iter()
        .flatten()
        .map(|&v| v.wrapping_sub(base) as u64)
        .max()
        .unwrap_or(0);
    let width_bits = width_for(spread).max(1);
    if width_bits > PACKED_WIDTH_MAX_BITS {
        return Encoded::Raw(values.iter().map(|v| v.unwrap_or(base)).collect());
    }
    let mut writer = BitWriter::new();
    for v in values {
        writer.push(v.unwrap_or(base).wrapping_sub(base) as u64, width_bits);
    }
    Encoded::Offsets {
        base,
        width_bits,
        packed: writer.into_padded_bytes(),
    }
}

fn encode_floats(values: &[Option<f64>]) -> Encoded {
    let mut distinct: Vec<f64> = values.iter().flatten().copied().collect();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup_by(|a, b| a.total_cmp(b).is_eq());
    let width_bits = width_for(distinct.len().saturating_sub(1) as u64).max(1);
    let dictionary_bytes = distinct.len() * 8 + values.len() * width_bits as usize / 8;
    if dictionary_bytes >= values.len() * 8 {
        return Encoded::Floats(values.iter().map(|v| v.unwrap_or(0.0)).collect());
    }
    let mut writer = BitWriter::new();
    for v in values {
        let code = match v {
            Some(f) => distinct
                .binary_search_by(|d| d.total_cmp(f))
                .expect("every value is in the dictionary"),
            None => 0,
        };
        writer.push(code as u64, width_bits);
    }
    Encoded::Dictionary {
        dictionary: Dictionary::Floats(distinct),
        width_bits,
        packed: writer.into_padded_bytes(),
    }
}

fn encode_strings(values: &[Option<&[u8]>]) -> Result<Encoded, String> {
    let mut distinct: Vec<&[u8]> = values.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let total: usize = distinct.iter().map(|s| s.len()).sum();
    if total > u32::MAX as usize {
        return Err(format!(
            "the distinct values hold {total} bytes; a column layer holds at most 4 GiB"
        ));
    }
    let width_bits = width_for(distinct.len().saturating_sub(1) as u64).max(1);
    let mut writer = BitWriter::new();
    for v in values {
        let code = match v {
            Some(s) => distinct
                .binary_search(s)
                .expect("every value is in the dictionary"),
            None => 0,
        };
        writer.push(code as u64, width_bits);
    }
    let mut ends = Vec::with_capacity(distinct.len());
    let mut bytes = Vec::with_capacity(total);
    for s in &distinct {
        bytes.extend_from_slice(s);
        ends.push(bytes.len() as u32);
    }
    Ok(Encoded::Dictionary {
        dictionary: Dictionary::Strings { ends, bytes },
        width_bits,
        packed: writer.into_padded_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value_of(attr_type: AttrType) -> BoxedStrategy<Option<Value>> {
        let value = match attr_type {
            AttrType::Int => prop_oneof![any::<i64>(), -50i64..50]
                .prop_map(Value::Int)
                .boxed(),
            AttrType::Timestamp => (0i64..1 << 40).prop_map(Value::Timestamp).boxed(),
            AttrType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
            AttrType::Float => prop_oneof![
                (-1e6f64..1e6).prop_map(|f| f.round()),
                (-1e6f64..1e6),
                Just(0.5)
            ]
            .prop_map(Value::Float)
            .boxed(),
            AttrType::String => prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..12),
                Just(b"Resort Hotel".to_vec()),
                Just(Vec::new())
            ]
            .prop_map(Value::String)
            .boxed(),
        };
        proptest::option::weighted(0.8, value).boxed()
    }

    fn column_values() -> impl Strategy<Value = (AttrType, Vec<Option<Value>>)> {
        prop_oneof![
            Just(AttrType::Int),
            Just(AttrType::Timestamp),
            Just(AttrType::Bool),
            Just(AttrType::Float),
            Just(AttrType::String)
        ]
        .prop_flat_map(|t| (Just(t), proptest::collection::vec(value_of(t), 0..300)))
    }

    proptest! {
        /// Every record reads back its value (or its absence), one at a time and
        /// appended in any order, whatever the encoding chosen.
        #[test]
        fn a_layer_reads_back_every_value((attr_type, values) in column_values(), seed in any::<u64>()) {
            let layer = ColumnLayer::from_values(7, attr_type, &values).unwrap();
            prop_assert_eq!(layer.records(), values.len() as u64);
            for (r, v) in values.iter().enumerate() {
                prop_assert_eq!(&layer.value(r as u64), v);
            }
            let mut order: Vec<u64> = (0..values.len() as u64).collect();
            order.sort_by_key(|r| r.wrapping_mul(seed | 1) % 1013);
            let mut column = Column::new("c".into(), attr_type);
            layer.append(&order, &mut column);
            prop_assert_eq!(column.len(), order.len());
            for (i, &r) in order.iter().enumerate() {
                prop_assert_eq!(column.value(i), values[r as usize].clone());
            }
        }
    }

    #[test]
    fn encodings_are_compact_where_they_can_be() {
        let n = 10_000usize;
        let hotels: Vec<Option<Value>> = (0..n)
            .map(|i| {
                Some(Value::str(if i % 3 == 0 {
                    "City Hotel"
                } else {
                    "Resort Hotel"
                }))
            })
            .collect();
        let layer = ColumnLayer::from_values(0, AttrType::String, &hotels).unwrap();
        // One bit a record and two dictionary entries.
        assert!(
            layer.byte_len() < (n / 8 + 200) as u64,
            "{}",
            layer.byte_len()
        );
        let years: Vec<Option<Value>> = (0..n)
            .map(|i| Some(Value::Int(2015 + (i % 3) as i64)))
            .collect();
        let layer = ColumnLayer::from_values(0, AttrType::Int, &years).unwrap();
        assert!(
            layer.byte_len() < (n / 4 + 200) as u64,
            "{}",
            layer.byte_len()
        );
        let spread: Vec<Option<Value>> = (0..n)
            .map(|i| Some(Value::Float(i as f64 * 1.37)))
            .collect();
        let layer = ColumnLayer::from_values(0, AttrType::Float, &spread).unwrap();
        assert!(
            layer.byte_len() <= (n * 8 + 200) as u64,
            "{}",
            layer.byte_len()
        );
    }

    /// A segment where no record holds the attribute: every read is an absence.
    #[test]
    fn a_layer_of_absent_values_reads_absences() {
        for attr_type in [
            AttrType::Int,
            AttrType::Timestamp,
            AttrType::Bool,
            AttrType::Float,
            AttrType::String,
        ] {
            let layer = ColumnLayer::from_values(1, attr_type, &[None, None, None]).unwrap();
            let mut column = Column::new("c".into(), attr_type);
            layer.append(&[2, 0, 1], &mut column);
            assert_eq!(column.len(), 3, "{attr_type:?}");
            for row in 0..3 {
                assert_eq!(column.value(row), None, "{attr_type:?}");
                assert_eq!(layer.value(row as u64), None, "{attr_type:?}");
            }
        }
    }

    #[test]
    fn a_value_of_another_type_is_refused() {
        let values = vec![Some(Value::Int(1)), Some(Value::str("x"))];
        let e = ColumnLayer::from_values(3, AttrType::Int, &values).unwrap_err();
        assert!(e.contains("attribute 3 is int"), "{e}");
        let values = vec![Some(Value::Timestamp(1))];
        assert!(ColumnLayer::from_values(3, AttrType::Int, &values).is_err());
    }
}
