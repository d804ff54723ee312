//! Records flattened into searchable text (Succinct section 2.1), with values in an
//! order-preserving encoding so that per-attribute predicates become searches.
//!
//! A record's text is its fields in attribute order, each `MARK id value`:
//! - `MARK` (0x01) starts every field and never occurs anywhere else;
//! - `id` is one byte, `0x10 + attribute id`;
//! - `value` is the encoded value with bytes 0x00, 0x01, 0x02 escaped as `0x02 0x40+b`.
//!
//! A stage's text is its records concatenated, then one final `MARK`, so every value is
//! followed by a `MARK`. Hence `MARK id enc(v) MARK` occurs once per record whose attribute
//! `id` equals `v`, `MARK id enc(p)` once per record whose value starts with `p`, and since
//! the escaping keeps byte order and `MARK` sorts below every value byte, the suffixes
//! `MARK id enc(x) ...` are in the order of `x`: a range predicate is a suffix-array range.
//! The key is not in the text (segments keep keys in their key directory).
//!
//! Value encodings (all order-preserving within a type, all free of 0x00..0x02):
//! - string: the bytes, escaped;
//! - bool: `f` or `t`;
//! - int and timestamp: one lead byte giving sign and digit count, then decimal digits:
//!   `x >= 0`: lead `'A' + digits`, the digits with trailing zeros dropped (the `MARK`
//!   after them sorts below `'0'`, so order holds); `x < 0`: lead `'A' - digits`, then
//!   each digit `d` as `'9' - d`, all of them;
//! - float: zero is 0x81; `x > 0` is a lead byte for the decimal exponent `e`
//!   (`0x83 + e + 60` for `-60 <= e <= 60`; 0x82 or 0xFC followed by three digits of `e + 400`
//!   outside that), then the shortest round-trip mantissa digits; `x < 0` mirrors it below
//!   0x80 (lead `0x7E - (e + 60)`, 0x7F or 0x05 followed by three digits of `599 - e`),
//!   the digits complemented, then `'~'` (which sorts above every complemented digit).

use crate::schema::{AttrType, StoredRecord, Value};

/// Starts every field; occurs nowhere else in a stage's text.
pub const MARK: u8 = 0x01;
/// Escapes 0x00, 0x01 and 0x02 inside values.
pub const ESCAPE: u8 = 0x02;
/// Attribute ids are stored as `ID_BASE + id`.
pub const ID_BASE: u8 = 0x10;

/// The byte that names attribute `id` in the text.
pub fn id_byte(id: u16) -> u8 {
    ID_BASE + id as u8
}

/// Appends `bytes` escaped.
fn push_escaped(out: &mut Vec<u8>, mut bytes: &[u8]) {
    // Bytes needing an escape are rare: copy the runs between them whole.
    while let Some(at) = bytes.iter().position(|&b| b <= ESCAPE) {
        out.extend_from_slice(&bytes[..at]);
        out.push(ESCAPE);
        out.push(0x40 + bytes[at]);
        bytes = &bytes[at + 1..];
    }
    out.extend_from_slice(bytes);
}

/// `bytes` escaped, as a search pattern for a substring of a value.
pub fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    push_escaped(&mut out, bytes);
    out
}

/// Appends the order-preserving encoding of `value` (escaped, ready for the text).
pub fn push_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(bytes) => push_escaped(out, bytes),
        Value::Bool(b) => out.push(if *b { b't' } else { b'f' }),
        Value::Int(x) | Value::Timestamp(x) => push_int(out, *x),
        Value::Float(x) => push_float(out, *x),
    }
}

/// Decimal digits of `x` into the end of `buf`; returns where they start.
fn decimal_digits(mut x: u64, buf: &mut [u8; 20]) -> usize {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            return at;
        }
    }
}

fn push_int(out: &mut Vec<u8>, x: i64) {
    let mut buf = [0u8; 20];
    let start = decimal_digits(x.unsigned_abs(), &mut buf);
    let digits = &buf[start..];
    let count = digits.len() as u8;
    if x >= 0 {
        out.push(b'A' + count);
        let significant = digits.iter().rposition(|&d| d != b'0').map_or(0, |p| p + 1);
        out.extend_from_slice(&digits[..significant]);
    } else {
        out.push(b'A' - count);
        out.extend(digits.iter().map(|d| b'9' - d + b'0'));
    }
}

/// Shortest round-trip decimal digits (no trailing zeros) and exponent of `x > 0`.
fn decimal_parts(x: f64) -> (String, i32) {
    let formatted = format!("{x:e}");
    let (mantissa, exponent) = formatted
        .split_once('e')
        .expect("the e format always has an exponent");
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let digits = digits.trim_end_matches('0').to_string();
    let exponent = exponent
        .parse::<i32>()
        .expect("the e format exponent is an integer");
    (
        if digits.is_empty() {
            "0".into()
        } else {
            digits
        },
        exponent,
    )
}

const FLOAT_ZERO: u8 = 0x81;

fn push_float(out: &mut Vec<u8>, x: f64) {
    if x == 0.0 {
        out.push(FLOAT_ZERO);
        return;
    }
    let (digits, e) = decimal_parts(x.abs());
    if x > 0.0 {
        if (-60..=60).contains(&e) {
            out.push((0x83 + e + 60) as u8);
        } else {
            out.push(if e < -60 { 0x82 } else { 0xFC });
            out.extend_from_slice(format!("{:03}", e + 400).as_bytes());
        }
        out.extend_from_slice(digits.as_bytes());
    } else {
        if (-60..=60).contains(&e) {
            out.push((0x7E - (e + 60)) as u8);
        } else {
            out.push(if e < -60 { 0x7F } else { 0x05 });
            out.extend_from_slice(format!("{:03}", 599 - e).as_bytes());
        }
        out.extend(digits.bytes().map(|d| b'9' - d + b'0'));
        out.push(b'~');
    }
}

/// Appends the text of `record` (its fields; not its key).
pub fn push_record(out: &mut Vec<u8>, record: &StoredRecord) {
    for (id, value) in &record.fields {
        out.push(MARK);
        out.push(id_byte(*id));
        push_value(out, value);
    }
}

/// One field found in a record's text: its attribute id and the byte range of its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpan {
    /// Attribute id.
    pub id: u16,
    /// Value bytes (encoded), relative to the record text's start.
    pub value: std::ops::Range<usize>,
}

/// Splits a record's text into fields; `Err` says what is malformed.
pub fn field_spans(text: &[u8]) -> Result<Vec<FieldSpan>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    if text[0] != MARK {
        return Err("record text does not start with a field marker".into());
    }
    let mut spans = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let id_at = at + 1;
        let Some(&id) = text.get(id_at) else {
            return Err("record text ends inside a field marker".into());
        };
        if id < ID_BASE {
            return Err(format!("bad attribute byte 0x{id:02x} at {id_at}"));
        }
        let start = id_at + 1;
        let end = text[start..]
            .iter()
            .position(|&b| b == MARK)
            .map_or(text.len(), |p| start + p);
        spans.push(FieldSpan {
            id: (id - ID_BASE) as u16,
            value: start..end,
        });
        at = end;
    }
    Ok(spans)
}

/// Where an occurrence of an escaped pattern starts, judged from the text before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At a character of attribute `id`'s value.
    Value(u16),
    /// At a field's attribute byte, or at the second byte of an escape pair: not the
    /// start of a value substring.
    NotValue,
    /// The bytes given hold no field marker, so they do not reach back far enough.
    Unknown,
}

/// Where an occurrence starting right after `before` lies; `before` must reach back to
/// the marker of the field the occurrence is in for the answer to be known.
pub fn place_after(before: &[u8]) -> Result<Place, String> {
    let Some(mark_at) = before.iter().rposition(|&b| b == MARK) else {
        return Ok(Place::Unknown);
    };
    let Some(&id) = before.get(mark_at + 1) else {
        return Ok(Place::NotValue);
    };
    if id < ID_BASE {
        return Err(format!(
            "bad attribute byte 0x{id:02x} after a field marker"
        ));
    }
    // An escape byte only ever starts a pair, so an occurrence right after one begins
    // inside the pair. The attribute byte itself is never an escape byte.
    if mark_at + 2 < before.len() && before.last() == Some(&ESCAPE) {
        return Ok(Place::NotValue);
    }
    Ok(Place::Value((id - ID_BASE) as u16))
}

/// Whether an escaped pattern starting with `first` could match at the second byte of
/// an escape pair (whose second bytes are `0x40 ..= 0x42`).
pub fn may_split_escape(first: u8) -> bool {
    (0x40..=0x42).contains(&first)
}

fn unescape(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == ESCAPE {
            match bytes.get(i + 1) {
                Some(&e) if (0x40..=0x42).contains(&e) => out.push(e - 0x40),
                _ => return Err("bad escape sequence in a value".into()),
            }
            i += 2;
        } else if b < ESCAPE {
            return Err(format!("unescaped byte 0x{b:02x} in a value"));
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

/// Decodes an encoded string value, borrowing it when it holds no escape pair.
pub fn decode_string(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    if bytes.iter().all(|&b| b > ESCAPE) {
        Ok(std::borrow::Cow::Borrowed(bytes))
    } else {
        unescape(bytes).map(std::borrow::Cow::Owned)
    }
}

/// Decodes one encoded value of type `attr_type`.
pub fn decode_value(attr_type: AttrType, bytes: &[u8]) -> Result<Value, String> {
    match attr_type {
        AttrType::String => Ok(Value::String(unescape(bytes)?)),
        AttrType::Bool => match bytes {
            b"t" => Ok(Value::Bool(true)),
            b"f" => Ok(Value::Bool(false)),
            _ => Err("bad bool encoding".into()),
        },
        AttrType::Int => decode_int(bytes).map(Value::Int),
        AttrType::Timestamp => decode_int(bytes).map(Value::Timestamp),
        AttrType::Float => decode_float(bytes).map(Value::Float),
    }
}

fn decode_int(bytes: &[u8]) -> Result<i64, String> {
    let bad = || "bad integer encoding".to_string();
    let (&lead, digits) = bytes.split_first().ok_or_else(bad)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    // Digits are accumulated in place (no string to parse): every get and every
    // verified match decodes all of a record's integers.
    fn accumulate(digits: impl Iterator<Item = u64>) -> Option<u64> {
        digits
            .into_iter()
            .try_fold(0u64, |acc, d| acc.checked_mul(10)?.checked_add(d))
    }
    if lead > b'A' {
        let count = (lead - b'A') as usize;
        if digits.len() > count || count > 20 {
            return Err(bad());
        }
        // The trailing zeros of the magnitude are left out of the encoding.
        let padded = digits
            .iter()
            .map(|d| u64::from(d - b'0'))
            .chain(std::iter::repeat_n(0, count - digits.len()));
        let magnitude = accumulate(padded).ok_or_else(bad)?;
        i64::try_from(magnitude).map_err(|_| bad())
    } else {
        let count = b'A'.checked_sub(lead).ok_or_else(bad)? as usize;
        if digits.len() != count || count == 0 {
            return Err(bad());
        }
        // A negative number's digits are stored as their nines' complements.
        let magnitude = accumulate(digits.iter().map(|d| u64::from(b'9' - d))).ok_or_else(bad)?;
        0i64.checked_sub_unsigned(magnitude).ok_or_else(bad)
    }
}

fn decode_float(bytes: &[u8]) -> Result<f64, String> {
    let bad = || "bad float encoding".to_string();
    let (&lead, rest) = bytes.split_first().ok_or_else(bad)?;
    if lead == FLOAT_ZERO && rest.is_empty() {
        return Ok(0.0);
    }
    let three = |rest: &[u8]| -> Result<(i32, Vec<u8>), String> {
        let field = rest.get(..3).ok_or_else(bad)?;
        let value = std::str::from_utf8(field)
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .ok_or_else(bad)?;
        Ok((value, rest[3..].to_vec()))
    };
    let (negative, e, digits) = if lead >= 0x82 {
        let (e, digits) = match lead {
            0x82 | 0xFC => {
                let (v, d) = three(rest)?;
                (v - 400, d)
            }
            _ => (lead as i32 - 0x83 - 60, rest.to_vec()),
        };
        (false, e, digits)
    } else {
        let body = rest.strip_suffix(b"~").ok_or_else(bad)?;
        let (e, digits) = match lead {
            0x7F | 0x05 => {
                let (v, d) = three(body)?;
                (599 - v, d)
            }
            _ => (0x7E - lead as i32 - 60, body.to_vec()),
        };
        let digits = digits
            .iter()
            .map(|d| b'9'.wrapping_sub(*d) + b'0')
            .collect();
        (true, e, digits)
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let text = format!(
        "{}{}.{}e{e}",
        if negative { "-" } else { "" },
        digits[0] as char,
        String::from_utf8_lossy(&digits[1..])
    );
    text.parse::<f64>().map_err(|_| bad())
}

/// Parses a record's text into fields, using `types` (by attribute id) to decode values.
pub fn decode_record(
    key: Vec<u8>,
    text: &[u8],
    types: &[AttrType],
) -> Result<StoredRecord, String> {
    let mut fields = Vec::new();
    for span in field_spans(text)? {
        let attr_type = types
            .get(span.id as usize)
            .ok_or_else(|| format!("attribute id {} is not in the schema", span.id))?;
        let value = decode_value(*attr_type, &text[span.value.clone()])
            .map_err(|e| format!("attribute id {}: {e}", span.id))?;
        fields.push((span.id, value));
    }
    Ok(StoredRecord { key, fields })
}

/// `MARK id`: the start of attribute `id`'s field.
pub fn field_start(id: u16) -> Vec<u8> {
    vec![MARK, id_byte(id)]
}

/// `MARK id enc(v) MARK`: the pattern of an equality predicate.
pub fn equals_pattern(id: u16, value: &Value) -> Vec<u8> {
    let mut p = field_start(id);
    push_value(&mut p, value);
    p.push(MARK);
    p
}

/// `MARK id enc(v)`: the pattern of a prefix predicate, or a range bound.
pub fn value_prefix_pattern(id: u16, value: &Value) -> Vec<u8> {
    let mut p = field_start(id);
    push_value(&mut p, value);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        push_value(&mut out, v);
        out.push(MARK);
        out
    }

    #[test]
    fn ints_keep_order_and_round_trip() {
        let mut xs = vec![
            i64::MIN,
            i64::MIN + 1,
            -1_000_000,
            -101,
            -100,
            -99,
            -10,
            -9,
            -1,
            0,
            1,
            9,
            10,
            11,
            100,
            101,
            1_435_708_800_000_000,
            i64::MAX,
        ];
        xs.sort();
        for pair in xs.windows(2) {
            assert!(
                enc(&Value::Int(pair[0])) < enc(&Value::Int(pair[1])),
                "{pair:?}"
            );
        }
        for x in xs {
            let e = enc(&Value::Int(x));
            assert_eq!(
                decode_value(AttrType::Int, &e[..e.len() - 1]),
                Ok(Value::Int(x))
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn any_int_round_trips(x in proptest::num::i64::ANY) {
            let e = enc(&Value::Int(x));
            proptest::prop_assert_eq!(
                decode_value(AttrType::Int, &e[..e.len() - 1]),
                Ok(Value::Int(x))
            );
        }
    }

    #[test]
    fn out_of_range_int_encodings_are_errors() {
        // 20 digits past i64 and past u64, a positive magnitude of 2^63, 21 digits.
        let nines = format!("{}{}", (b'A' + 20) as char, "9".repeat(20));
        let two_63 = format!("{}9223372036854775808", (b'A' + 19) as char);
        let long = format!("{}1", (b'A' + 21) as char);
        let negative_nines = format!("{}{}", (b'A' - 20) as char, "0".repeat(20));
        for bad in [nines, two_63, long, negative_nines] {
            assert!(
                decode_value(AttrType::Int, bad.as_bytes()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn floats_keep_order_and_round_trip() {
        let mut xs = vec![
            -f64::MAX,
            -1e300,
            -1e61,
            -52.3676,
            -52.3,
            -52.0,
            -5.0,
            -1e-5,
            -2e-300,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            1e-70,
            1e-5,
            0.1,
            5.2,
            5.23,
            52.0,
            52.3,
            1e61,
            f64::MAX,
        ];
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for pair in xs.windows(2) {
            assert!(
                enc(&Value::Float(pair[0])) < enc(&Value::Float(pair[1])),
                "{pair:?}"
            );
        }
        for x in xs {
            let e = enc(&Value::Float(x));
            assert_eq!(
                decode_value(AttrType::Float, &e[..e.len() - 1]),
                Ok(Value::Float(x))
            );
        }
    }

    #[test]
    fn strings_escape_and_keep_order() {
        let all: Vec<u8> = (0..=255).collect();
        let e = escape(&all);
        assert!(!e.contains(&MARK) && !e.contains(&0));
        assert_eq!(unescape(&e), Ok(all));
        let mut xs: Vec<Vec<u8>> = vec![vec![], vec![0], vec![1], vec![2], vec![3], b"a".to_vec()];
        xs.push(vec![b'a', 0]);
        xs.push(vec![b'a', 2, 0]);
        xs.push(b"ab".to_vec());
        xs.sort();
        for pair in xs.windows(2) {
            assert!(
                enc(&Value::String(pair[0].clone())) < enc(&Value::String(pair[1].clone())),
                "{pair:?}"
            );
        }
    }

    #[test]
    fn records_split_into_fields() {
        let record = StoredRecord {
            key: b"k".to_vec(),
            fields: vec![
                (0, Value::String(vec![1, 2, 0, b'x'])),
                (3, Value::Int(-7)),
                (4, Value::Bool(true)),
            ],
        };
        let mut text = Vec::new();
        push_record(&mut text, &record);
        let types = [
            AttrType::String,
            AttrType::Int,
            AttrType::Int,
            AttrType::Int,
            AttrType::Bool,
        ];
        assert_eq!(decode_record(b"k".to_vec(), &text, &types), Ok(record));
        assert!(decode_record(vec![], &text[1..], &types).is_err());
    }

    /// Every offset of a record's text against the field layout: value characters
    /// (escape pairs counted as one) are `Value`, attribute bytes and second bytes of
    /// escape pairs are `NotValue`, offsets before the first marker are `Unknown`.
    #[test]
    fn place_after_agrees_with_the_field_layout() {
        let record = StoredRecord {
            key: b"k".to_vec(),
            fields: vec![
                (0, Value::String(b"ab\x01A\x02\x00".to_vec())),
                (3, Value::Int(-42)),
                (40, Value::String(Vec::new())),
                (41, Value::String(b"@AB\x02B".to_vec())),
            ],
        };
        let mut text = b"xyz".to_vec();
        let first_field = text.len();
        push_record(&mut text, &record);
        let mut expected = vec![Place::Unknown; first_field + 1];
        for span in field_spans(&text[first_field..]).unwrap() {
            let (start, end) = (first_field + span.value.start, first_field + span.value.end);
            expected.push(Place::NotValue); // the attribute byte
            let mut at = start;
            while at < end {
                expected.push(Place::Value(span.id));
                if text[at] == ESCAPE {
                    expected.push(Place::NotValue);
                    at += 1;
                }
                at += 1;
            }
            if end < text.len() {
                expected.push(Place::NotValue); // the next marker (never searched for)
            }
        }
        assert_eq!(expected.len(), text.len());
        for offset in first_field + 1..text.len() {
            let place = place_after(&text[..offset]).unwrap();
            if text[offset] == MARK {
                continue; // escaped patterns never start at a marker
            }
            assert_eq!(place, expected[offset], "offset {offset} of {text:?}");
        }
        assert_eq!(place_after(b"ab").unwrap(), Place::Unknown);
        assert!(place_after(&[MARK, 0x03, b'a']).is_err());
    }
}
