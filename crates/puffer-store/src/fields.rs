//! A segment's long fields: where every field of at least [`LONG_FIELD_MIN_BYTES`] text
//! bytes starts and ends, and its attribute.
//!
//! A substring predicate on one attribute finds occurrences anywhere in the records'
//! text; each must then be placed in its field. With this directory an occurrence in a
//! long field is placed by one lookup, and one in a short field by extracting fewer than
//! `LONG_FIELD_MIN_BYTES` bytes before it (back to the field's marker), instead of
//! decoding the whole record. Long fields are few (Inside Airbnb: about 9 of the 67 fields
//! a record has on average, holding about 80 % of the text), so the directory is small.
//!
//! # Byte layout
//!
//! | offset   | size | field                                                          |
//! |----------|------|----------------------------------------------------------------|
//! | 0        | 8    | long field count `n`, u64 LE                                   |
//! | 8        | `n`  | attribute byte of each long field (`0x10 + id`), in text order |
//! | 8 + `n`  | rest | positions in the record-bounds encoding (see `bounds.rs`)      |
//!
//! The positions are `0, s0, e0, s1, e1, ...`: field `i` spans `s_i .. e_i` (its marker
//! to the next marker or the text's end), so `2 n + 1` positions; the leading 0 opens
//! the short stretch before the first long field. The position at or before an offset
//! (the last of equal ones) is then a long field's start exactly when the offset is in
//! that long field.

use crate::bounds::{encode_bounds, RecordBounds};
use crate::codec::{field_spans, ID_BASE};

/// Fields (marker, attribute byte and value) at least this long are in the directory.
pub const LONG_FIELD_MIN_BYTES: u64 = 32;

/// The long-field directory of a segment.
pub struct LongFields {
    id_bytes: Vec<u8>,
    spans: RecordBounds,
}

/// Encodes the directory of a text made of `records` (each a record's text, in order),
/// whose total length is `text_len`.
pub fn encode_long_fields<'a>(
    records: impl Iterator<Item = &'a [u8]>,
    text_len: u64,
) -> Result<Vec<u8>, String> {
    let mut id_bytes = Vec::new();
    let mut positions = vec![0u64];
    let mut record_start = 0u64;
    for text in records {
        for span in field_spans(text)? {
            // The marker and the attribute byte precede the value.
            let start = record_start + span.value.start as u64 - 2;
            let end = record_start + span.value.end as u64;
            if end - start >= LONG_FIELD_MIN_BYTES {
                id_bytes.push(ID_BASE + span.id as u8);
                positions.push(start);
                positions.push(end);
            }
        }
        record_start += text.len() as u64;
    }
    if record_start != text_len {
        return Err(format!(
            "long fields: records hold {record_start} bytes, the text {text_len}"
        ));
    }
    let mut out = Vec::with_capacity(8 + id_bytes.len() + positions.len() * 2);
    out.extend_from_slice(&(id_bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&id_bytes);
    out.extend_from_slice(&encode_bounds(&positions, text_len)?);
    Ok(out)
}

impl LongFields {
    /// Checks the counts against each other and against the text length.
    pub fn from_bytes(bytes: &[u8], text_len: u64) -> Result<LongFields, String> {
        let count_bytes: [u8; 8] = bytes
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or("long fields: shorter than the 8-byte count")?;
        let count = u64::from_le_bytes(count_bytes);
        let ids_end = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_add(8))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| format!("long fields: {count} attribute bytes past the end"))?;
        let id_bytes = bytes[8..ids_end].to_vec();
        if let Some(bad) = id_bytes.iter().find(|&&b| b < ID_BASE) {
            return Err(format!("long fields: bad attribute byte 0x{bad:02x}"));
        }
        let spans = RecordBounds::from_bytes(bytes[ids_end..].to_vec())?;
        if spans.len() != 2 * count + 1 || spans.text_len() != text_len {
            return Err(format!(
                "long fields: {} positions over {} bytes for {count} fields over {text_len} bytes",
                spans.len(),
                spans.text_len()
            ));
        }
        Ok(LongFields { id_bytes, spans })
    }

    /// The long field holding `offset`: its start (the marker) and attribute byte;
    /// `None` when the offset is in a short field or past the text.
    pub fn field_at(&self, offset: u64) -> Result<Option<(u64, u8)>, String> {
        let Some(position) = self.spans.record_at(offset)? else {
            return Ok(None);
        };
        if position % 2 == 0 {
            return Ok(None);
        }
        let start = self.spans.range(position)?.start;
        Ok(Some((start, self.id_bytes[(position / 2) as usize])))
    }

    /// The parts of `range` (a record's text) to read for a record whose long fields
    /// are kept only when `keep` says so of their attribute byte: every short stretch and
    /// every kept long field, adjacent parts joined. Parts start and end at field
    /// boundaries, so their concatenation is a record text of the fields kept.
    pub fn kept_parts(
        &self,
        range: std::ops::Range<u64>,
        keep: impl Fn(u8) -> bool,
    ) -> Result<Vec<std::ops::Range<u64>>, String> {
        let mut parts: Vec<std::ops::Range<u64>> = Vec::new();
        if range.is_empty() {
            return Ok(parts);
        }
        let Some(mut position) = self.spans.record_at(range.start)? else {
            return Err(format!("long fields: offset {} past the text", range.start));
        };
        let mut at = range.start;
        while at < range.end {
            let end = self.spans.range(position)?.end.min(range.end);
            let long = position % 2 == 1;
            if !long || keep(self.id_bytes[(position / 2) as usize]) {
                match parts.last_mut() {
                    Some(last) if last.end == at => last.end = end,
                    _ if at < end => parts.push(at..end),
                    _ => {}
                }
            }
            at = end;
            position += 1;
            if position >= self.spans.len() {
                break;
            }
        }
        if at < range.end {
            return Err(format!(
                "long fields: the spans end at {at}, before the record's end {}",
                range.end
            ));
        }
        Ok(parts)
    }

    /// Number of long fields.
    pub fn len(&self) -> u64 {
        self.id_bytes.len() as u64
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.id_bytes.is_empty()
    }

    /// Bytes held.
    pub fn byte_len(&self) -> usize {
        self.id_bytes.len() + self.spans.byte_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::push_record;
    use crate::schema::{StoredRecord, Value};

    /// Every offset of a text of records with short, long and empty fields is placed in
    /// the same long field (or none) as a walk over the fields says.
    #[test]
    fn field_at_agrees_with_the_fields() {
        let lengths = [0usize, 3, 29, 30, 31, 60, 200, 1, 45];
        let mut texts = Vec::new();
        for r in 0..7 {
            let fields = (0..5u16)
                .map(|a| {
                    let len = lengths[(r * 5 + a as usize) % lengths.len()];
                    (a * 7, Value::String(vec![b'a' + a as u8; len]))
                })
                .collect();
            let mut text = Vec::new();
            push_record(
                &mut text,
                &StoredRecord {
                    key: Vec::new(),
                    fields,
                },
            );
            texts.push(text);
        }
        let total: u64 = texts.iter().map(|t| t.len() as u64).sum();
        let bytes = encode_long_fields(texts.iter().map(|t| t.as_slice()), total).unwrap();
        let fields = LongFields::from_bytes(&bytes, total).unwrap();

        let mut expected = Vec::new();
        for text in &texts {
            let base = expected.len() as u64;
            let spans = field_spans(text).unwrap();
            for span in spans {
                let start = base + span.value.start as u64 - 2;
                let len = span.value.end - span.value.start + 2;
                let long = len as u64 >= LONG_FIELD_MIN_BYTES;
                for _ in 0..len {
                    expected.push(long.then_some((start, ID_BASE + span.id as u8)));
                }
            }
        }
        assert!(!fields.is_empty() && fields.len() < 35);
        for (offset, want) in expected.iter().enumerate() {
            assert_eq!(
                fields.field_at(offset as u64).unwrap(),
                *want,
                "offset {offset}"
            );
        }
        assert_eq!(fields.field_at(total).unwrap(), None);
        assert!(LongFields::from_bytes(&bytes, total + 1).is_err());
        assert!(LongFields::from_bytes(&bytes[..bytes.len() - 8], total).is_err());
        assert!(LongFields::from_bytes(&bytes[..4], total).is_err());

        // The parts kept for a record are its text without the long fields not kept.
        let all: Vec<u8> = texts.concat();
        let mut start = 0u64;
        for text in &texts {
            let end = start + text.len() as u64;
            for kept in [vec![], vec![0u16], vec![7, 28], vec![0, 7, 14, 21, 28]] {
                let keep = |id_byte: u8| kept.contains(&u16::from(id_byte - ID_BASE));
                let parts = fields.kept_parts(start..end, keep).unwrap();
                let read: Vec<u8> = parts
                    .iter()
                    .flat_map(|p| all[p.start as usize..p.end as usize].iter().copied())
                    .collect();
                let mut expected = Vec::new();
                for span in field_spans(text).unwrap() {
                    let field = &text[span.value.start - 2..span.value.end];
                    if (field.len() as u64) < LONG_FIELD_MIN_BYTES || kept.contains(&span.id) {
                        expected.extend_from_slice(field);
                    }
                }
                assert_eq!(read, expected, "record at {start}, keeping {kept:?}");
                assert!(parts.windows(2).all(|w| w[0].end < w[1].start), "{parts:?}");
            }
            start = end;
        }
    }
}
