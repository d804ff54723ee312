//! The line directory PufferDB needs to answer in lines: which line holds a text
//! offset. The text index finds occurrences as offsets; the directory turns them into
//! line numbers.
//!
//! Layout: the start of every [`BLOCK_LINES`]-th line as an absolute offset, and the
//! lengths (including the `\n`) of the other lines as LEB128 varints, so a lookup is a
//! binary search over block starts and at most `BLOCK_LINES - 1` varint decodes. About
//! 1.2 bytes per line on lines under 128 bytes.

/// Lines per block of the directory.
const BLOCK_LINES: usize = 64;

pub(super) struct LineDirectory {
    /// Offset of the first line of each block.
    block_starts: Vec<u64>,
    /// Where each block's varints begin in `lengths`.
    block_positions: Vec<u32>,
    /// Lengths of the lines after each block's first, including their `\n`.
    lengths: Vec<u8>,
    lines: usize,
}

impl LineDirectory {
    /// The directory of `text`'s lines (split on `\n`, as in [`super::corpus::lines`]).
    pub(super) fn new(text: &[u8]) -> LineDirectory {
        let mut directory = LineDirectory {
            block_starts: Vec::new(),
            block_positions: Vec::new(),
            lengths: Vec::new(),
            lines: 0,
        };
        let mut previous_start = 0u64;
        let starts = std::iter::once(0).chain(
            text.iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\n' && i + 1 < text.len())
                .map(|(i, _)| i as u64 + 1),
        );
        for start in starts.take(if text.is_empty() { 0 } else { usize::MAX }) {
            if directory.lines.is_multiple_of(BLOCK_LINES) {
                directory.block_starts.push(start);
                directory
                    .block_positions
                    .push(directory.lengths.len() as u32);
            } else {
                push_varint(&mut directory.lengths, start - previous_start);
            }
            previous_start = start;
            directory.lines += 1;
        }
        directory
    }

    /// The line (0-based) holding byte `offset`.
    pub(super) fn line_of(&self, offset: u64) -> u32 {
        let block = self
            .block_starts
            .partition_point(|&start| start <= offset)
            .max(1)
            - 1;
        let mut position = self.block_positions[block] as usize;
        let mut start = self.block_starts[block];
        let mut line = block * BLOCK_LINES;
        let last_line = self.lines.min((block + 1) * BLOCK_LINES) - 1;
        while line < last_line {
            let (length, next) = read_varint(&self.lengths, position);
            if start + length > offset {
                break;
            }
            start += length;
            position = next;
            line += 1;
        }
        line as u32
    }

    /// Bytes held, in memory and as they would be stored.
    pub(super) fn bytes(&self) -> u64 {
        (self.block_starts.len() * 8 + self.block_positions.len() * 4 + self.lengths.len()) as u64
    }
}

fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8], mut position: usize) -> (u64, usize) {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[position];
        position += 1;
        value |= u64::from(byte & 0x7F) << shift;
        if byte < 0x80 {
            return (value, position);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn line_of_agrees_with_counting_newlines() {
        let mut rng = StdRng::seed_from_u64(3);
        for round in 0..20 {
            let len = rng.gen_range(1..3000);
            // Some lines longer than 127 bytes, so that varints take two bytes.
            let newline_odds = if round % 2 == 0 { 0.05 } else { 0.004 };
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.gen_bool(newline_odds) {
                        b'\n'
                    } else {
                        b'x'
                    }
                })
                .collect();
            let directory = LineDirectory::new(&text);
            let mut line = 0u32;
            for (offset, &byte) in text.iter().enumerate() {
                assert_eq!(directory.line_of(offset as u64), line, "offset {offset}");
                if byte == b'\n' {
                    line += 1;
                }
            }
            assert_eq!(directory.lines, super::super::corpus::line_count(&text));
        }
    }
}
