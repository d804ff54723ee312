//! Record boundaries: where each record of a segment's text starts, and the text length.
//!
//! Starts are non-decreasing and the first is 0; a record may be empty, so consecutive
//! starts may be equal. Record `r` spans `start[r] .. start[r + 1]`, the last record
//! `start[n - 1] .. text length`. Without records the text is empty.
//!
//! Starts are kept in groups of [`RECORDS_PER_GROUP`]: each group stores its first start
//! (the base) whole and every start as `start - base` bit-packed at the group's width,
//! which is just wide enough for its largest value. A lookup binary searches the bases,
//! then the packed values of one group.
//!
//! # Byte layout
//!
//! Integers are little-endian. `n` is the record count, `g = ceil(n / 64)` the group count
//! and `W` the packed word count.
//!
//! | offset    | size  | field                                                        |
//! |-----------|-------|--------------------------------------------------------------|
//! | 0         | 8     | record count `n`, u64                                        |
//! | 8         | 8     | text length in bytes, u64                                    |
//! | 16        | 8 `g` | group bases, u64 each                                        |
//! | 16 + 8 g  | 8 `g` | group first words: index of each group's first packed word, u64 |
//! | 16 + 16 g | `g`   | group bit widths, u8 each, 0 ..= 64                          |
//! | 16 + 17 g | 8 `W` | packed words, u64 each, to the end of the bytes              |
//!
//! Group `i` holds records `64 i ..` (the last group may hold fewer, `c`). Its values
//! `start - base` are packed least significant bit first at `w` bits each from bit 0 of
//! its first word, over `ceil(c w / 64)` words; a value may straddle two words. The first
//! group's first word is 0 and each next group's is the previous plus its word count,
//! so the packed words can be found without summing the widths.

use std::ops::Range;

/// Records per group, each group with its own base and bit width.
pub const RECORDS_PER_GROUP: u64 = 64;

/// Bytes of the header: record count, text length.
const HEADER_LEN: usize = 16;
/// Bytes of one group's table entries: base, first word, bit width.
const GROUP_ENTRY_LEN: usize = 17;

/// Encodes record starts and the text length; see the module doc for the layout.
pub fn encode_bounds(starts: &[u64], text_len: u64) -> Result<Vec<u8>, String> {
    match starts.first() {
        None if text_len != 0 => {
            return Err(format!(
                "record bounds: no records but a text of {text_len} bytes"
            ))
        }
        Some(&first) if first != 0 => {
            return Err(format!(
                "record bounds: the first record starts at {first}, expected 0"
            ))
        }
        _ => {}
    }
    for (record, pair) in starts.windows(2).enumerate() {
        if pair[1] < pair[0] {
            return Err(format!(
                "record bounds: record {} starts at {} before record {record} at {}",
                record + 1,
                pair[1],
                pair[0]
            ));
        }
    }
    if let Some(&last) = starts.last().filter(|&&last| last > text_len) {
        return Err(format!(
            "record bounds: record {} starts at {last} past the end of the {text_len}-byte text",
            starts.len() - 1
        ));
    }

    let groups: Vec<&[u64]> = starts.chunks(RECORDS_PER_GROUP as usize).collect();
    let width_bits: Vec<u64> = groups
        .iter()
        .map(|group| u64::from(u64::BITS - (group[group.len() - 1] - group[0]).leading_zeros()))
        .collect();
    let mut out = Vec::with_capacity(HEADER_LEN + GROUP_ENTRY_LEN * groups.len());
    out.extend_from_slice(&(starts.len() as u64).to_le_bytes());
    out.extend_from_slice(&text_len.to_le_bytes());
    for group in &groups {
        out.extend_from_slice(&group[0].to_le_bytes());
    }
    let mut first_word = 0u64;
    for (group, &width) in groups.iter().zip(&width_bits) {
        out.extend_from_slice(&first_word.to_le_bytes());
        first_word += word_count(group.len() as u64, width);
    }
    out.extend(width_bits.iter().map(|&width| width as u8));
    // A group of equal starts has width 0 and no words.
    for (group, &width) in groups
        .iter()
        .zip(&width_bits)
        .filter(|(_, &width)| width > 0)
    {
        let mut words = vec![0u64; word_count(group.len() as u64, width) as usize];
        for (index, &start) in group.iter().enumerate() {
            let value = start - group[0];
            let bit = index * width as usize;
            let shift = bit % 64;
            words[bit / 64] |= value << shift;
            if shift + width as usize > 64 {
                words[bit / 64 + 1] |= value >> (64 - shift);
            }
        }
        out.extend(words.iter().flat_map(|word| word.to_le_bytes()));
    }
    Ok(out)
}

/// Words that `count` values of `width` bits take.
fn word_count(count: u64, width: u64) -> u64 {
    (count * width).div_ceil(64)
}

/// A read-only view of encoded record boundaries.
#[derive(Clone, Debug)]
pub struct RecordBounds {
    bytes: Vec<u8>,
    record_count: u64,
    text_len: u64,
    group_count: u64,
    packed_start: usize,
}

impl RecordBounds {
    /// Validates the header, the group table and the packed length, in O(groups).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, String> {
        if bytes.len() < HEADER_LEN {
            return Err(format!(
                "record bounds: {} bytes is shorter than the {HEADER_LEN}-byte header",
                bytes.len()
            ));
        }
        let record_count = read_le(&bytes, 0, 8)?;
        let text_len = read_le(&bytes, 8, 8)?;
        if record_count == 0 && text_len != 0 {
            return Err(format!(
                "record bounds: no records but a text of {text_len} bytes"
            ));
        }
        let group_count = record_count.div_ceil(RECORDS_PER_GROUP);
        let packed_start = usize::try_from(group_count)
            .ok()
            .and_then(|count| count.checked_mul(GROUP_ENTRY_LEN))
            .and_then(|table_len| table_len.checked_add(HEADER_LEN))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| {
                format!(
                    "record bounds: group table of {group_count} groups past the end of {} bytes",
                    bytes.len()
                )
            })?;
        let bounds = Self {
            bytes,
            record_count,
            text_len,
            group_count,
            packed_start,
        };

        let mut previous_base = 0;
        let mut expected_first_word = 0u64;
        for group in 0..group_count {
            let base = bounds.base(group)?;
            let (first_word, width) = (bounds.first_word(group)?, bounds.width_bits(group)?);
            if group == 0 && base != 0 {
                return Err(format!("record bounds: group 0 base {base}, expected 0"));
            }
            if base < previous_base {
                return Err(format!(
                    "record bounds: group {group} base {base} is before group {} base {previous_base}",
                    group - 1
                ));
            }
            if base > text_len {
                return Err(format!(
                    "record bounds: group {group} base {base} past the end of the {text_len}-byte text"
                ));
            }
            if width > 64 {
                return Err(format!(
                    "record bounds: group {group} bit width {width} is over 64"
                ));
            }
            if first_word != expected_first_word {
                return Err(format!(
                    "record bounds: group {group} first word {first_word}, expected {expected_first_word}"
                ));
            }
            previous_base = base;
            // At most 64 words a group, so this cannot overflow before the length check.
            expected_first_word += word_count(bounds.records_in_group(group), width);
        }
        let packed_len = bounds.bytes.len() - packed_start;
        if expected_first_word.checked_mul(8) != Some(packed_len as u64) {
            return Err(format!(
                "record bounds: {packed_len} bytes of packed words, expected {expected_first_word} words"
            ));
        }
        Ok(bounds)
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.record_count
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Length of the segment's text in bytes.
    pub fn text_len(&self) -> u64 {
        self.text_len
    }

    /// Bytes held, the encoded bounds.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The text range of `record`: its start to the next record's start, or to the text
    /// length for the last record.
    pub fn range(&self, record: u64) -> Result<Range<u64>, String> {
        if record >= self.record_count {
            return Err(format!(
                "record bounds: record {record} out of range for {} records",
                self.record_count
            ));
        }
        let start = self.start(record)?;
        let end = if record + 1 < self.record_count {
            self.start(record + 1)?
        } else {
            self.text_len
        };
        if start > end {
            return Err(format!(
                "record bounds: record {record} starts at {start} after its end {end}"
            ));
        }
        Ok(start..end)
    }

    /// The record whose range contains `offset`, `None` past the text. Of records starting
    /// at the same offset, all but the last are empty, so it is the last.
    pub fn record_at(&self, offset: u64) -> Result<Option<u64>, String> {
        if offset >= self.text_len {
            return Ok(None);
        }
        // The last group with base <= offset holds the last record starting at or before
        // it: the next group's first record starts after the offset.
        let groups_at_or_before =
            partition_point(self.group_count, |group| Ok(self.base(group)? <= offset))?;
        let group = groups_at_or_before.checked_sub(1).ok_or_else(|| {
            format!("record bounds: no group starts at or before offset {offset}")
        })?;
        let delta_limit = offset
            .checked_sub(self.base(group)?)
            .ok_or_else(|| format!("record bounds: group {group} base is after offset {offset}"))?;
        let records_at_or_before = partition_point(self.records_in_group(group), |index| {
            Ok(self.delta(group, index)? <= delta_limit)
        })?;
        let index = records_at_or_before.checked_sub(1).ok_or_else(|| {
            format!("record bounds: group {group} first record starts after its base")
        })?;
        Ok(Some(group * RECORDS_PER_GROUP + index))
    }

    fn records_in_group(&self, group: u64) -> u64 {
        RECORDS_PER_GROUP.min(self.record_count.saturating_sub(group * RECORDS_PER_GROUP))
    }

    fn start(&self, record: u64) -> Result<u64, String> {
        let group = record / RECORDS_PER_GROUP;
        let delta = self.delta(group, record % RECORDS_PER_GROUP)?;
        self.base(group)?
            .checked_add(delta)
            .filter(|&start| start <= self.text_len)
            .ok_or_else(|| {
                format!(
                    "record bounds: record {record} starts past the end of the {}-byte text",
                    self.text_len
                )
            })
    }

    /// Packed value `index` of `group`: its start minus the group's base.
    fn delta(&self, group: u64, index: u64) -> Result<u64, String> {
        let width = self.width_bits(group)?;
        match width {
            0 => return Ok(0),
            65.. => {
                return Err(format!(
                    "record bounds: group {group} bit width {width} is over 64"
                ))
            }
            _ => {}
        }
        let bit = index * width;
        let word = self.first_word(group)?.saturating_add(bit / 64);
        let shift = bit % 64;
        let mut value = self.word(word)? >> shift;
        if shift + width > 64 {
            value |= self.word(word.saturating_add(1))? << (64 - shift);
        }
        // A width of 64 starts every value at bit 0 of a word and needs no mask.
        Ok(if width == 64 {
            value
        } else {
            value & ((1 << width) - 1)
        })
    }

    // Positions saturate rather than overflow: a saturated position is past the end and
    // `read_le` refuses it.

    fn base(&self, group: u64) -> Result<u64, String> {
        read_le(&self.bytes, table_position(0, group.saturating_mul(8)), 8)
    }

    fn first_word(&self, group: u64) -> Result<u64, String> {
        let column_start = self.group_count.saturating_mul(8);
        read_le(
            &self.bytes,
            table_position(column_start, group.saturating_mul(8)),
            8,
        )
    }

    fn width_bits(&self, group: u64) -> Result<u64, String> {
        let column_start = self.group_count.saturating_mul(16);
        read_le(&self.bytes, table_position(column_start, group), 1)
    }

    fn word(&self, word: u64) -> Result<u64, String> {
        let position = (self.packed_start as u64).saturating_add(word.saturating_mul(8));
        read_le(&self.bytes, position, 8)
    }
}

/// Position of the entry at `entry_offset` in the group table column at `column_start`.
fn table_position(column_start: u64, entry_offset: u64) -> u64 {
    (HEADER_LEN as u64)
        .saturating_add(column_start)
        .saturating_add(entry_offset)
}

/// Reads a little-endian integer of `width` bytes, at most 8, at `position`.
fn read_le(bytes: &[u8], position: u64, width: usize) -> Result<u64, String> {
    usize::try_from(position)
        .ok()
        .and_then(|start| bytes.get(start..start.checked_add(width)?))
        .map(|field| {
            let mut le_bytes = [0; 8];
            le_bytes[..field.len()].copy_from_slice(field);
            u64::from_le_bytes(le_bytes)
        })
        .ok_or_else(|| {
            format!(
                "record bounds: {width} bytes at {position} past the end of {} bytes",
                bytes.len()
            )
        })
}

/// `slice::partition_point` over `0..len` for a predicate that fails on malformed bytes.
fn partition_point(
    len: u64,
    mut is_before: impl FnMut(u64) -> Result<bool, String>,
) -> Result<u64, String> {
    let (mut low, mut high) = (0, len);
    while low < high {
        let middle = low + (high - low) / 2;
        if is_before(middle)? {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    Ok(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_width_deltas_round_trip() {
        let starts = [0, 0, 1, u64::MAX - 1, u64::MAX];
        let bounds = RecordBounds::from_bytes(encode_bounds(&starts, u64::MAX).unwrap()).unwrap();
        assert_eq!(bounds.width_bits(0).unwrap(), 64);
        assert_eq!(bounds.range(0).unwrap(), 0..0);
        assert_eq!(bounds.range(2).unwrap(), 1..u64::MAX - 1);
        assert_eq!(bounds.range(4).unwrap(), u64::MAX..u64::MAX);
        assert_eq!(bounds.record_at(0).unwrap(), Some(1));
        assert_eq!(bounds.record_at(u64::MAX - 2).unwrap(), Some(2));
        assert_eq!(bounds.record_at(u64::MAX - 1).unwrap(), Some(3));
        assert_eq!(bounds.record_at(u64::MAX).unwrap(), None);
    }

    #[test]
    fn equal_deltas_take_zero_bits_and_no_words() {
        let starts = vec![0; 130];
        let bytes = encode_bounds(&starts, 9).unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + 3 * GROUP_ENTRY_LEN);
        let bounds = RecordBounds::from_bytes(bytes).unwrap();
        assert_eq!(bounds.record_at(5).unwrap(), Some(129));
        assert_eq!(bounds.range(129).unwrap(), 0..9);
        assert_eq!(bounds.range(64).unwrap(), 0..0);
    }

    #[test]
    fn invalid_input_is_refused() {
        assert_eq!(
            encode_bounds(&[], 3).unwrap_err(),
            "record bounds: no records but a text of 3 bytes"
        );
        assert_eq!(
            encode_bounds(&[1], 3).unwrap_err(),
            "record bounds: the first record starts at 1, expected 0"
        );
        assert_eq!(
            encode_bounds(&[0, 5, 4], 9).unwrap_err(),
            "record bounds: record 2 starts at 4 before record 1 at 5"
        );
        assert_eq!(
            encode_bounds(&[0, 10], 9).unwrap_err(),
            "record bounds: record 1 starts at 10 past the end of the 9-byte text"
        );
    }
}
