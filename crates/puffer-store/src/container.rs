//! A checksummed multi-section byte container, for the small files of a segment.
//!
//! # Byte layout
//!
//! All integers are little-endian. `n` is the section count.
//!
//! | offset      | size | field                                                  |
//! |-------------|------|--------------------------------------------------------|
//! | 0           | 8    | magic, chosen by the file type                         |
//! | 8           | 4    | version, u32                                           |
//! | 12          | 4    | section count `n`, u32                                 |
//! | 16 + 24 i   | 4    | section `i` kind, u32                                  |
//! | 20 + 24 i   | 4    | section `i` crc32 of its bytes, u32                    |
//! | 24 + 24 i   | 8    | section `i` offset from the start of the file, u64     |
//! | 32 + 24 i   | 8    | section `i` length in bytes, u64                       |
//! | 16 + 24 n   | 4    | header crc32 of bytes `0 .. 16 + 24 n`, u32            |
//! | 20 + 24 n   | ...  | the sections' bytes, in entry order                    |
//!
//! Each section starts at an 8-byte aligned offset (so a reader may view it in place as
//! `u64`s), with zero padding before it, and the file ends where the last section ends.
//!
//! The padding bytes are covered by no crc and the decoder does not read them: a
//! corrupted padding byte goes unnoticed, and is harmless because no section holds it.

use std::ops::Range;

/// Bytes before the section entries: magic, version, section count.
const FIXED_HEADER_LEN: usize = 16;
/// Bytes of one section entry: kind, crc32, offset, length.
const ENTRY_LEN: usize = 24;
/// Bytes of the header crc32.
const CRC_LEN: usize = 4;
/// Alignment of every section's offset.
const SECTION_ALIGN: usize = 8;

/// One decoded section: its kind and where its bytes lie in the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The caller-chosen kind of the section.
    pub kind: u32,
    /// The section's bytes, as a range of the container's bytes.
    pub range: Range<usize>,
}

/// Encodes `sections` (kind, bytes) behind a checksummed header; see the module doc.
///
/// # Panics
///
/// If there are more than `u32::MAX` sections.
pub fn encode_sections(magic: [u8; 8], version: u32, sections: &[(u32, &[u8])]) -> Vec<u8> {
    let section_count = u32::try_from(sections.len()).expect("at most u32::MAX sections");
    let header_len = FIXED_HEADER_LEN + ENTRY_LEN * sections.len() + CRC_LEN;
    let mut out = Vec::with_capacity(
        header_len
            + sections
                .iter()
                .map(|(_, bytes)| bytes.len() + SECTION_ALIGN)
                .sum::<usize>(),
    );
    out.extend_from_slice(&magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&section_count.to_le_bytes());
    let mut offset = header_len.next_multiple_of(SECTION_ALIGN);
    for &(kind, bytes) in sections {
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        offset = (offset + bytes.len()).next_multiple_of(SECTION_ALIGN);
    }
    let header_crc = crc32fast::hash(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    for &(_, bytes) in sections {
        out.resize(out.len().next_multiple_of(SECTION_ALIGN), 0);
        out.extend_from_slice(bytes);
    }
    out
}

/// Decodes and verifies a container written by [`encode_sections`]: magic, version,
/// header crc, the section ranges, and every section's crc.
pub fn decode_sections(bytes: &[u8], magic: [u8; 8], version: u32) -> Result<Vec<Section>, String> {
    let fixed_header = bytes.get(..FIXED_HEADER_LEN).ok_or_else(|| {
        format!(
            "container: {} bytes is shorter than the {FIXED_HEADER_LEN}-byte header",
            bytes.len()
        )
    })?;
    let found_magic = &fixed_header[..8];
    if found_magic != magic {
        return Err(format!(
            "container: magic \"{}\" does not match the expected \"{}\"",
            found_magic.escape_ascii(),
            magic.escape_ascii()
        ));
    }
    let found_version = read_u32(bytes, 8)?;
    if found_version != version {
        return Err(format!(
            "container: unsupported version {found_version}, expected {version}"
        ));
    }
    let section_count = read_u32(bytes, 12)?;
    let entries_end = usize::try_from(section_count)
        .ok()
        .and_then(|count| count.checked_mul(ENTRY_LEN))
        .and_then(|len| len.checked_add(FIXED_HEADER_LEN))
        .filter(|end| {
            end.checked_add(CRC_LEN)
                .is_some_and(|end| end <= bytes.len())
        })
        .ok_or_else(|| {
            format!(
                "container: header of {section_count} sections past the end of {} bytes",
                bytes.len()
            )
        })?;
    let stored_header_crc = read_u32(bytes, entries_end)?;
    let header_crc = crc32fast::hash(&bytes[..entries_end]);
    if !checksum_holds(header_crc, stored_header_crc) {
        return Err(format!(
            "container: header crc32 {stored_header_crc:#010x} does not match the computed {header_crc:#010x}"
        ));
    }

    let mut sections = Vec::with_capacity(section_count as usize);
    let mut previous_end = entries_end + CRC_LEN;
    for index in 0..section_count as usize {
        let entry = FIXED_HEADER_LEN + index * ENTRY_LEN;
        let kind = read_u32(bytes, entry)?;
        let stored_crc = read_u32(bytes, entry + 4)?;
        let offset = read_u64(bytes, entry + 8)?;
        let len = read_u64(bytes, entry + 16)?;
        let name = format!("section {index} (kind {kind})");
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(start, len)| Some(start..start.checked_add(len)?))
            .filter(|range| range.end <= bytes.len())
            .ok_or_else(|| {
                format!(
                    "container: {name} at offset {offset} of {len} bytes past the end of {} bytes",
                    bytes.len()
                )
            })?;
        if range.start < previous_end {
            return Err(format!(
                "container: {name} starts at {} before the end {previous_end} of the header or previous section",
                range.start
            ));
        }
        if range.start % SECTION_ALIGN != 0 {
            return Err(format!(
                "container: {name} offset {} is not {SECTION_ALIGN}-byte aligned",
                range.start
            ));
        }
        let crc = crc32fast::hash(&bytes[range.clone()]);
        if !checksum_holds(crc, stored_crc) {
            return Err(format!(
                "container: {name} crc32 {stored_crc:#010x} does not match the computed {crc:#010x}"
            ));
        }
        previous_end = range.end;
        sections.push(Section { kind, range });
    }
    if previous_end != bytes.len() {
        return Err(format!(
            "container: {} bytes continue past the end {previous_end} of the last section",
            bytes.len()
        ));
    }
    Ok(sections)
}

/// The byte range of the first section of `kind`.
pub fn find_section(sections: &[Section], kind: u32) -> Result<Range<usize>, String> {
    sections
        .iter()
        .find(|section| section.kind == kind)
        .map(|section| section.range.clone())
        .ok_or_else(|| format!("missing section kind {kind}"))
}

fn read_u32(bytes: &[u8], position: usize) -> Result<u32, String> {
    position
        .checked_add(4)
        .and_then(|end| bytes.get(position..end))
        .and_then(|field| field.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| {
            format!(
                "container: 4 bytes at {position} past the end of {} bytes",
                bytes.len()
            )
        })
}

fn read_u64(bytes: &[u8], position: usize) -> Result<u64, String> {
    position
        .checked_add(8)
        .and_then(|end| bytes.get(position..end))
        .and_then(|field| field.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| {
            format!(
                "container: 8 bytes at {position} past the end of {} bytes",
                bytes.len()
            )
        })
}

/// Whether a stored checksum matches the computed one. Fuzz builds (`--cfg fuzzing`)
/// take every checksum as good, so the fuzzer reaches the structural checks behind them
/// (a fuzzer cannot forge CRC-32s): those must refuse what they cannot read, without a
/// panic. Used by every checksummed format of the store.
pub(crate) fn checksum_holds(computed: u32, stored: u32) -> bool {
    cfg!(fuzzing) || computed == stored
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: [u8; 8] = *b"PUFTEST1";
    const VERSION: u32 = 3;

    fn contents<'a>(bytes: &'a [u8], sections: &[Section]) -> Vec<(u32, &'a [u8])> {
        sections
            .iter()
            .map(|section| (section.kind, &bytes[section.range.clone()]))
            .collect()
    }

    /// Sections whose lengths leave padding before the first section and between two.
    fn sample_sections() -> Vec<(u32, Vec<u8>)> {
        vec![
            (1, b"hello".to_vec()),
            (2, Vec::new()),
            (7, (0u8..=255).step_by(19).collect()),
        ]
    }

    fn encode_sample() -> (Vec<u8>, Vec<(u32, Vec<u8>)>) {
        let sections = sample_sections();
        let borrowed: Vec<(u32, &[u8])> = sections
            .iter()
            .map(|(kind, bytes)| (*kind, bytes.as_slice()))
            .collect();
        (encode_sections(MAGIC, VERSION, &borrowed), sections)
    }

    #[test]
    fn round_trip() {
        let (encoded, sections) = encode_sample();
        let decoded = decode_sections(&encoded, MAGIC, VERSION).unwrap();
        let expected: Vec<(u32, &[u8])> = sections
            .iter()
            .map(|(kind, bytes)| (*kind, bytes.as_slice()))
            .collect();
        assert_eq!(contents(&encoded, &decoded), expected);
        for section in &decoded {
            assert_eq!(section.range.start % SECTION_ALIGN, 0);
        }
        assert_eq!(find_section(&decoded, 7).unwrap(), decoded[2].range);
        assert_eq!(
            find_section(&decoded, 9).unwrap_err(),
            "missing section kind 9"
        );
    }

    #[test]
    fn round_trip_without_sections() {
        let encoded = encode_sections(MAGIC, VERSION, &[]);
        assert_eq!(encoded.len(), FIXED_HEADER_LEN + CRC_LEN);
        assert_eq!(decode_sections(&encoded, MAGIC, VERSION).unwrap(), vec![]);
    }

    #[test]
    fn round_trip_random_sections() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let sections: Vec<(u32, Vec<u8>)> = (0..rng.gen_range(0..6))
                .map(|_| {
                    let len = rng.gen_range(0..40);
                    (rng.gen(), (0..len).map(|_| rng.gen()).collect())
                })
                .collect();
            let borrowed: Vec<(u32, &[u8])> = sections
                .iter()
                .map(|(kind, bytes)| (*kind, bytes.as_slice()))
                .collect();
            let encoded = encode_sections(MAGIC, VERSION, &borrowed);
            let decoded = decode_sections(&encoded, MAGIC, VERSION).unwrap();
            assert_eq!(contents(&encoded, &decoded), borrowed);
        }
    }

    #[test]
    fn wrong_magic_and_version_are_named() {
        let (encoded, _) = encode_sample();
        assert_eq!(
            decode_sections(&encoded, *b"PUFOTHER", VERSION).unwrap_err(),
            "container: magic \"PUFTEST1\" does not match the expected \"PUFOTHER\""
        );
        assert_eq!(
            decode_sections(&encoded, MAGIC, 4).unwrap_err(),
            "container: unsupported version 3, expected 4"
        );
    }

    #[test]
    fn corrupt_section_names_kind_and_index() {
        let (mut encoded, _) = encode_sample();
        let decoded = decode_sections(&encoded, MAGIC, VERSION).unwrap();
        encoded[decoded[2].range.start + 1] ^= 0x10;
        let error = decode_sections(&encoded, MAGIC, VERSION).unwrap_err();
        assert!(
            error.starts_with("container: section 2 (kind 7) crc32"),
            "{error}"
        );
    }

    /// Every flipped byte fails the decode, except in padding, which no crc covers: there
    /// the sections must decode unchanged.
    #[test]
    fn every_flipped_byte_fails_or_is_padding() {
        let (encoded, sections) = encode_sample();
        let decoded = decode_sections(&encoded, MAGIC, VERSION).unwrap();
        let expected = contents(&encoded, &decoded);
        let header_end = FIXED_HEADER_LEN + ENTRY_LEN * sections.len() + CRC_LEN;
        let is_padding = |position: usize| {
            position >= header_end
                && !decoded
                    .iter()
                    .any(|section| section.range.contains(&position))
        };
        let padding_count = (0..encoded.len()).filter(|&p| is_padding(p)).count();
        assert!(
            padding_count > 0,
            "the sample must have padding to cover that case"
        );
        for position in 0..encoded.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut corrupted = encoded.clone();
                corrupted[position] ^= flip;
                match decode_sections(&corrupted, MAGIC, VERSION) {
                    Ok(found) => {
                        assert!(
                            is_padding(position),
                            "flip {flip:#x} at {position} went unnoticed"
                        );
                        assert_eq!(contents(&corrupted, &found), expected);
                    }
                    Err(_) => assert!(!is_padding(position), "padding flip at {position} failed"),
                }
            }
        }
    }

    #[test]
    fn every_truncation_and_extension_fails() {
        let (encoded, _) = encode_sample();
        for len in 0..encoded.len() {
            assert!(
                decode_sections(&encoded[..len], MAGIC, VERSION).is_err(),
                "length {len}"
            );
        }
        let mut extended = encoded.clone();
        extended.push(0);
        assert_eq!(
            decode_sections(&extended, MAGIC, VERSION).unwrap_err(),
            format!(
                "container: {} bytes continue past the end {} of the last section",
                extended.len(),
                encoded.len()
            )
        );
        let empty = encode_sections(MAGIC, VERSION, &[]);
        for len in 0..empty.len() {
            assert!(
                decode_sections(&empty[..len], MAGIC, VERSION).is_err(),
                "length {len}"
            );
        }
    }
}
