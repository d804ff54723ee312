//! Canonical, length-limited Huffman code over the Psi gap alphabet, emitted
//! LSB-first, with a table decoder that usually decodes a whole gap (code plus
//! mantissa) in one lookup.
//!
//! The alphabet (see `docs/format.md`):
//! - symbol `2(L-1) + h` in `0..=111`: a gap `g >= 2` with `2^L <= g < 2^(L+1)` whose bit
//!   `L-1` is `h`, followed by the `L-1` low bits of `g` (the mantissa);
//! - symbol `112 + j` in `112..=124`: a run of `r` gaps equal to one, `2^j <= r < 2^(j+1)`,
//!   followed by the `j` low bits of `r`;
//! - symbol `125`: a run of gaps equal to one through the end of the part being coded
//!   (its length is what is left of the part), with no mantissa.

/// Size of the alphabet.
pub const NUM_SYMBOLS: usize = 128;
/// First run symbol.
pub const RUN_SYMBOL_BASE: usize = 112;
/// A run through the end of the coded part: its length is implied.
pub const END_RUN_SYMBOL: usize = 125;
/// Entries (and value increase) a decoded end-of-part run reports: at least what any
/// reader has left to move inside one part (blocks hold at most 4096 entries), so
/// readers stop inside it, or at its end when exactly that many are left.
pub const END_RUN_COUNT: u64 = 4095;
/// Longest code the builder emits.
pub const MAX_CODE_LEN_BITS: u32 = 24;
/// Bits resolved by one table lookup.
pub const TABLE_BITS: u32 = 12;

/// Table entry flag: not a complete step (symbol only, or a code longer than the table).
pub const ENTRY_SLOW: u32 = 1 << 31;
const ENTRY_LONG: u32 = 1 << 30;

/// Mantissa length of a symbol.
#[inline(always)]
pub fn mantissa_bits(symbol: usize) -> u32 {
    if symbol == END_RUN_SYMBOL {
        0
    } else if symbol >= RUN_SYMBOL_BASE {
        (symbol - RUN_SYMBOL_BASE) as u32
    } else {
        (symbol / 2) as u32
    }
}

/// Smallest value a symbol stands for (a gap, or a run length).
#[inline(always)]
pub fn symbol_base(symbol: usize) -> u64 {
    if symbol == END_RUN_SYMBOL {
        END_RUN_COUNT
    } else if symbol >= RUN_SYMBOL_BASE {
        1u64 << (symbol - RUN_SYMBOL_BASE)
    } else {
        (2 + (symbol as u64 & 1)) << (symbol / 2)
    }
}

/// Whether a symbol is a run of gaps equal to one.
#[inline(always)]
pub fn is_run(symbol: usize) -> bool {
    symbol >= RUN_SYMBOL_BASE
}

/// Symbol, mantissa and mantissa length for a gap of at least 2. Each octave
/// `[2^L, 2^(L+1))` is split in two halves by the bit below the leading one, which
/// the code carries: gap distributions fall steeply within an octave.
#[inline]
pub fn gap_symbol(gap: u64) -> (usize, u64, u32) {
    debug_assert!(gap >= 2);
    let level = 63 - gap.leading_zeros();
    let half = (gap >> (level - 1)) & 1;
    let mantissa_len = level - 1;
    let symbol = 2 * mantissa_len as usize + half as usize;
    (
        symbol,
        gap & crate::bits::low_mask(mantissa_len),
        mantissa_len,
    )
}

/// Symbol, mantissa and mantissa length for a run of `run_len >= 1` gaps equal to one.
#[inline]
pub fn run_symbol(run_len: u64) -> (usize, u64, u32) {
    debug_assert!(run_len >= 1);
    let level = 63 - run_len.leading_zeros();
    (
        RUN_SYMBOL_BASE + level as usize,
        run_len - (1u64 << level),
        level,
    )
}

/// Code lengths (0 = unused symbol) from frequencies, limited to [`MAX_CODE_LEN_BITS`].
pub fn code_lengths(freqs: &[u64; NUM_SYMBOLS]) -> [u8; NUM_SYMBOLS] {
    let mut scaled = *freqs;
    loop {
        let lengths = unlimited_code_lengths(&scaled);
        if lengths.iter().all(|&l| u32::from(l) <= MAX_CODE_LEN_BITS) {
            return lengths;
        }
        // Flatten the distribution and retry: keeps every used symbol, shortens the deepest codes.
        for f in scaled.iter_mut() {
            if *f > 0 {
                *f = (*f >> 1) | 1;
            }
        }
    }
}

fn unlimited_code_lengths(freqs: &[u64; NUM_SYMBOLS]) -> [u8; NUM_SYMBOLS] {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut lengths = [0u8; NUM_SYMBOLS];
    let used: Vec<usize> = (0..NUM_SYMBOLS).filter(|&s| freqs[s] > 0).collect();
    if used.len() == 1 {
        lengths[used[0]] = 1;
        return lengths;
    }
    // Nodes: leaves 0..NUM_SYMBOLS, internal nodes after; parent links give depths.
    let mut parent: Vec<usize> = vec![usize::MAX; NUM_SYMBOLS];
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
        used.iter().map(|&s| Reverse((freqs[s], s))).collect();
    while heap.len() > 1 {
        let Reverse((fa, a)) = heap.pop().expect("two nodes");
        let Reverse((fb, b)) = heap.pop().expect("two nodes");
        let node = parent.len();
        parent.push(usize::MAX);
        parent[a] = node;
        parent[b] = node;
        heap.push(Reverse((fa + fb, node)));
    }
    for &s in &used {
        let mut depth = 0u32;
        let mut node = s;
        while parent[node] != usize::MAX {
            node = parent[node];
            depth += 1;
        }
        lengths[s] = depth.min(255) as u8;
    }
    lengths
}

fn reverse_bits(code: u32, len: u32) -> u32 {
    if len == 0 {
        0
    } else {
        code.reverse_bits() >> (32 - len)
    }
}

/// Checks that lengths form a usable prefix code (Kraft sum at most one).
pub fn validate_lengths(lengths: &[u8; NUM_SYMBOLS]) -> Result<(), String> {
    let mut kraft: u64 = 0;
    for (symbol, &len) in lengths.iter().enumerate() {
        let len = u32::from(len);
        if len > MAX_CODE_LEN_BITS {
            return Err(format!(
                "symbol {symbol} has code length {len} > {MAX_CODE_LEN_BITS}"
            ));
        }
        if len > 0 {
            if symbol > END_RUN_SYMBOL {
                return Err(format!("symbol {symbol} is outside the alphabet"));
            }
            kraft += 1u64 << (MAX_CODE_LEN_BITS - len);
        }
    }
    if kraft > 1u64 << MAX_CODE_LEN_BITS {
        return Err("code lengths violate the Kraft inequality".to_string());
    }
    Ok(())
}

/// LSB-first canonical codes for encoding.
pub struct HuffmanEncoder {
    codes: [(u32, u8); NUM_SYMBOLS],
}

impl HuffmanEncoder {
    /// Builds canonical codes from lengths.
    pub fn new(lengths: &[u8; NUM_SYMBOLS]) -> Self {
        let mut codes = [(0u32, 0u8); NUM_SYMBOLS];
        for (symbol, code, len) in canonical_codes(lengths) {
            codes[symbol] = (reverse_bits(code, len), len as u8);
        }
        HuffmanEncoder { codes }
    }

    /// The (LSB-first code, length) of a symbol.
    #[inline]
    pub fn code(&self, symbol: usize) -> (u32, u32) {
        let (code, len) = self.codes[symbol];
        debug_assert!(len > 0, "symbol {symbol} has no code");
        (code, u32::from(len))
    }
}

/// (symbol, MSB-first canonical code, length) in canonical order.
fn canonical_codes(lengths: &[u8; NUM_SYMBOLS]) -> Vec<(usize, u32, u32)> {
    let mut order: Vec<usize> = (0..NUM_SYMBOLS).filter(|&s| lengths[s] > 0).collect();
    order.sort_by_key(|&s| (lengths[s], s));
    let mut out = Vec::with_capacity(order.len());
    let mut code: u32 = 0;
    let mut prev_len: u32 = 0;
    for s in order {
        let len = u32::from(lengths[s]);
        code <<= len - prev_len;
        out.push((s, code, len));
        code += 1;
        prev_len = len;
    }
    out
}

/// One decoded step: how many bits it used, how far the value moves, how many entries it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Bits consumed (code and mantissa).
    pub bits: u32,
    /// Value change over the covered entries (an increase read forward, a decrease read
    /// backward).
    pub delta: u64,
    /// Entries covered (1 for a gap, the run length for a run; [`END_RUN_COUNT`] for a
    /// run through the end of the part, with `delta` the same).
    pub count: u64,
}

/// Table-driven decoder.
pub struct HuffmanDecoder {
    table: Box<[u32]>,
    /// Canonical decoding for codes longer than the table: per length, (first code, first index, count).
    long_first: [(u32, u32, u32); MAX_CODE_LEN_BITS as usize + 1],
    sorted_symbols: Vec<u8>,
}

impl HuffmanDecoder {
    /// Builds the decoder; lengths must have passed [`validate_lengths`].
    pub fn new(lengths: &[u8; NUM_SYMBOLS]) -> Self {
        let codes = canonical_codes(lengths);
        // Full entries: bits 0..5 = bits used, 5..17 = entries covered, 17..30 = value
        // increase, bit 30 = the step was a run (selects the next context's table).
        // Slow entries: flag bit 31; bits 0..5 = code length, 8..16 = symbol (or bit 30: long code).
        let mut table = vec![ENTRY_SLOW | ENTRY_LONG; 1 << TABLE_BITS].into_boxed_slice();
        for &(symbol, code, len) in &codes {
            if len > TABLE_BITS {
                continue;
            }
            let lsb_code = reverse_bits(code, len);
            let mant_len = mantissa_bits(symbol);
            if len + mant_len <= TABLE_BITS {
                for mantissa in 0..(1u32 << mant_len) {
                    let low = lsb_code | (mantissa << len);
                    let total = len + mant_len;
                    let delta = symbol_base(symbol) as u32 + mantissa;
                    let count = if is_run(symbol) { delta } else { 1 };
                    let run_flag = u32::from(is_run(symbol)) << 30;
                    let entry = total | (count << 5) | (delta << 17) | run_flag;
                    let mut t = low;
                    while t < (1 << TABLE_BITS) {
                        table[t as usize] = entry;
                        t += 1 << total;
                    }
                }
            } else {
                let entry = ENTRY_SLOW | len | ((symbol as u32) << 8);
                let mut t = lsb_code;
                while t < (1 << TABLE_BITS) {
                    table[t as usize] = entry;
                    t += 1 << len;
                }
            }
        }
        let mut long_first = [(0u32, 0u32, 0u32); MAX_CODE_LEN_BITS as usize + 1];
        let mut sorted_symbols = Vec::with_capacity(codes.len());
        for (index, &(symbol, code, len)) in codes.iter().enumerate() {
            let slot = &mut long_first[len as usize];
            if slot.2 == 0 {
                *slot = (code, index as u32, 0);
            }
            slot.2 += 1;
            sorted_symbols.push(symbol as u8);
        }
        HuffmanDecoder {
            table,
            long_first,
            sorted_symbols,
        }
    }

    /// Moves the lookup table (`2^TABLE_BITS` entries) out, for a caller that keeps
    /// several tables side by side; [`HuffmanDecoder::step`] must not be used afterwards,
    /// [`HuffmanDecoder::slow_step`] still works.
    pub fn take_table(&mut self) -> Box<[u32]> {
        std::mem::take(&mut self.table)
    }

    /// Heap bytes of the decoder.
    pub fn heap_bytes(&self) -> usize {
        self.table.len() * 4 + self.sorted_symbols.len() + std::mem::size_of_val(&self.long_first)
    }

    /// The table entry for the next bits of `window`.
    #[inline(always)]
    pub fn entry(&self, window: u64) -> u32 {
        self.table[(window & ((1 << TABLE_BITS) - 1)) as usize]
    }

    /// The step of a full (non-slow) entry.
    #[inline(always)]
    pub fn full_step(entry: u32) -> Step {
        Step {
            bits: entry & 31,
            count: u64::from((entry >> 5) & 0xFFF),
            delta: u64::from((entry >> 17) & 0x1FFF),
        }
    }

    /// Decodes one step at `bit_pos` of a padded stream.
    /// Returns `None` on a bit pattern that is no code (only possible on corrupt data).
    #[inline(always)]
    pub fn step(&self, bytes: &[u8], bit_pos: u64) -> Option<Step> {
        let entry = self.entry(crate::bits::peek_bits(bytes, bit_pos));
        if entry & ENTRY_SLOW == 0 {
            Some(Self::full_step(entry))
        } else {
            self.slow_step(bytes, bit_pos, entry)
        }
    }

    /// Decodes a step whose entry is slow: mantissa too long for the table, or a long code.
    #[cold]
    pub fn slow_step(&self, bytes: &[u8], bit_pos: u64, entry: u32) -> Option<Step> {
        self.slow_step_by(
            |offset| crate::bits::peek_bits(bytes, bit_pos + offset),
            entry,
        )
    }

    /// [`HuffmanDecoder::slow_step`] over any bit source: `peek(offset)` returns at least
    /// 57 bits of the step, starting `offset` bits after its first bit, in reading order
    /// (so a stream read backward decodes the same way).
    #[cold]
    pub fn slow_step_by(&self, peek: impl Fn(u64) -> u64, entry: u32) -> Option<Step> {
        let (symbol, code_len) = if entry & ENTRY_LONG == 0 {
            (((entry >> 8) & 0xFF) as usize, entry & 31)
        } else {
            self.decode_long(peek(0))?
        };
        let mant_len = mantissa_bits(symbol);
        // A long mantissa may not fit the first window: read it from its own position.
        let mantissa = peek(u64::from(code_len)) & crate::bits::low_mask(mant_len);
        let value = symbol_base(symbol) + mantissa;
        let count = if is_run(symbol) { value } else { 1 };
        Some(Step {
            bits: code_len + mant_len,
            delta: value,
            count,
        })
    }

    #[cold]
    fn decode_long(&self, window: u64) -> Option<(usize, u32)> {
        let mut code: u32 = 0;
        for len in 1..=MAX_CODE_LEN_BITS {
            code = (code << 1) | ((window >> (len - 1)) & 1) as u32;
            let (first, first_index, count) = self.long_first[len as usize];
            if count > 0 && code >= first && code - first < count {
                let symbol = self.sorted_symbols[(first_index + code - first) as usize] as usize;
                return Some((symbol, len));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::BitWriter;

    #[test]
    fn encode_decode_round_trip_against_input() {
        let mut freqs = [0u64; NUM_SYMBOLS];
        // Skewed distribution with some rare symbols to force long codes.
        let mut steps: Vec<(usize, u64)> = Vec::new();
        let mut x: u64 = 12345;
        for i in 0..20000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let gap_like = if i % 7 == 0 {
                (x >> 20) % 1_000_000 + 2
            } else {
                (x >> 40) % 30 + 2
            };
            if i % 3 == 0 {
                let run = (x >> 33) % 200 + 1;
                let (s, m, _) = run_symbol(run);
                freqs[s] += 1;
                steps.push((s, m));
            } else {
                let (s, m, _) = gap_symbol(gap_like);
                freqs[s] += 1;
                steps.push((s, m));
            }
        }
        freqs[40] = 1; // a very rare symbol
        steps.push((40, 12345));
        let lengths = code_lengths(&freqs);
        validate_lengths(&lengths).unwrap();
        let encoder = HuffmanEncoder::new(&lengths);
        let mut writer = BitWriter::new();
        for &(s, m) in &steps {
            let (code, len) = encoder.code(s);
            writer.push(u64::from(code), len);
            writer.push(m, mantissa_bits(s));
        }
        let bytes = writer.into_padded_bytes();
        let decoder = HuffmanDecoder::new(&lengths);
        let mut pos = 0u64;
        for &(s, m) in &steps {
            let step = decoder.step(&bytes, pos).unwrap();
            let value = symbol_base(s) + m;
            assert_eq!(step.delta, value);
            assert_eq!(step.count, if is_run(s) { value } else { 1 });
            pos += u64::from(step.bits);
        }
    }

    #[test]
    fn lengths_are_limited() {
        let mut freqs = [0u64; NUM_SYMBOLS];
        // Fibonacci frequencies produce maximally deep Huffman trees.
        let (mut a, mut b) = (1u64, 1u64);
        for f in freqs.iter_mut().take(56) {
            *f = a;
            let next = a + b;
            a = b;
            b = next;
        }
        let lengths = code_lengths(&freqs);
        assert!(lengths.iter().all(|&l| u32::from(l) <= MAX_CODE_LEN_BITS));
        assert!(lengths.iter().take(56).all(|&l| l > 0));
        validate_lengths(&lengths).unwrap();
    }
}
