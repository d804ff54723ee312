//! Bit-level building blocks: shared byte buffers (owned or memory-mapped),
//! fixed-width packed integer arrays and an LSB-first bit writer.
//!
//! All multi-byte values are little-endian. Every packed buffer carries at least
//! [`READ_PADDING_BYTES`] of zero padding at its end so that an unaligned 8-byte
//! read starting at any valid bit position stays inside the buffer.

use std::ops::Deref;
use std::sync::Arc;

/// Zero bytes appended to every packed buffer so 8-byte peeks never run off the end.
pub const READ_PADDING_BYTES: usize = 8;

/// Largest supported packed width: a peek yields at least 57 valid bits.
pub const MAX_PACKED_WIDTH_BITS: u32 = 56;

/// An immutable byte range that shares its owner (a `Vec` or a memory map).
///
/// The range's address is resolved once, when the owner is wrapped: dereferencing is
/// then a pointer and a length, with no call through the owner on the query paths.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn StableBytes>,
    ptr: *const u8,
    len: usize,
}

/// Owners whose bytes never move or change while they live (a `Vec` that is never
/// mutated again, a read-only memory map).
///
/// # Safety
///
/// `as_ref` must return the same bytes, at the same address, for as long as the owner
/// lives, and nothing may change them: [`SharedBytes`] reads them through a pointer
/// taken once.
pub unsafe trait StableBytes: AsRef<[u8]> + Send + Sync {}

// SAFETY: a `Vec` behind an `Arc` is never mutated, so its heap buffer stays put.
unsafe impl StableBytes for Vec<u8> {}
// SAFETY: a read-only map keeps its address until it is unmapped on drop.
unsafe impl StableBytes for memmap2::Mmap {}

// SAFETY: `ptr` points into the bytes of `owner`, which are immutable, never move while
// the owner lives (`StableBytes`), and are kept alive by the `Arc` this value holds.
unsafe impl Send for SharedBytes {}
// SAFETY: as above; the bytes are only ever read.
unsafe impl Sync for SharedBytes {}

impl SharedBytes {
    /// Wraps an owned vector.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        Self::from_owner(Arc::new(bytes))
    }

    /// Wraps a shared owner of bytes (for example a memory map).
    pub fn from_owner(owner: Arc<dyn StableBytes>) -> Self {
        let bytes = (*owner).as_ref();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        SharedBytes { owner, ptr, len }
    }

    /// A sub-range of this buffer; panics only on a programming error (callers validate ranges).
    pub fn slice(&self, start: usize, len: usize) -> Self {
        assert!(
            start <= self.len && len <= self.len - start,
            "slice out of range"
        );
        SharedBytes {
            owner: self.owner.clone(),
            // SAFETY: `start <= self.len` and `len <= self.len - start` (checked without
            // overflow above), so the result stays inside the owner's bytes.
            ptr: unsafe { self.ptr.add(start) },
            len,
        }
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    #[inline(always)]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` lies inside the owner's bytes, which live as long as
        // `self` holds the `Arc` and never change (`StableBytes`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

/// Number of bits needed to store `max_value` (at least 1).
pub fn width_for(max_value: u64) -> u32 {
    (64 - max_value.leading_zeros()).max(1)
}

/// Reads 8 bytes little-endian at `byte_pos`; the caller guarantees padding.
#[inline(always)]
pub fn read_u64_le(bytes: &[u8], byte_pos: usize) -> u64 {
    let chunk: [u8; 8] = bytes[byte_pos..byte_pos + 8].try_into().expect("8 bytes");
    u64::from_le_bytes(chunk)
}

/// Returns at least 57 bits starting at `bit_pos` (LSB-first).
#[inline(always)]
pub fn peek_bits(bytes: &[u8], bit_pos: u64) -> u64 {
    read_u64_le(bytes, (bit_pos >> 3) as usize) >> (bit_pos & 7)
}

/// Reads the stream backward: bit `i` of the result is stream bit `end_bit - 1 - i`, for
/// at least 57 bits (bits before the start of the stream read as zero).
#[inline(always)]
pub fn peek_bits_rev(bytes: &[u8], end_bit: u64) -> u64 {
    let Some(last) = end_bit.checked_sub(1) else {
        return 0;
    };
    let last_byte = (last >> 3) as usize;
    // Eight bytes ending with the one that holds `last`: `last` is bit 56 + (last & 7).
    let word = if last_byte >= 7 {
        read_u64_le(bytes, last_byte - 7)
    } else {
        bytes[..=last_byte]
            .iter()
            .enumerate()
            .fold(0u64, |w, (i, &b)| {
                w | u64::from(b) << (8 * (i + 7 - last_byte))
            })
    };
    (word << (7 - (last & 7))).reverse_bits()
}

/// Number of valid bits [`peek_bits_rev`] returns at `end_bit`.
#[inline(always)]
pub fn peek_bits_rev_valid(end_bit: u64) -> u32 {
    57 + (end_bit.wrapping_sub(1) & 7) as u32
}

/// The low `width` bits of `value` in reverse order (`width` <= 64).
#[inline(always)]
pub fn reverse_low_bits(value: u64, width: u32) -> u64 {
    if width == 0 {
        0
    } else {
        value.reverse_bits() >> (64 - width)
    }
}

/// Mask of the lowest `width` bits (`width` <= 64).
#[inline(always)]
pub fn low_mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Reads element `index` of a packed array of `width`-bit integers.
#[inline(always)]
pub fn packed_get(bytes: &[u8], index: u64, width: u32) -> u64 {
    peek_bits(bytes, index * width as u64) & low_mask(width)
}

/// Bytes a packed array of `count` elements of `width` bits occupies, padding included.
pub fn packed_len_bytes(count: u64, width: u32) -> usize {
    ((count * width as u64).div_ceil(64) * 8) as usize + READ_PADDING_BYTES
}

/// Appends bits LSB-first into 64-bit words.
#[derive(Clone, Default)]
pub struct BitWriter {
    words: Vec<u64>,
    len_bits: u64,
}

impl BitWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bits written so far.
    pub fn len_bits(&self) -> u64 {
        self.len_bits
    }

    /// Appends the low `width` bits of `value` (`width` <= 64).
    #[inline]
    pub fn push(&mut self, value: u64, width: u32) {
        if width == 0 {
            return;
        }
        let value = value & low_mask(width);
        let offset = (self.len_bits & 63) as u32;
        if offset == 0 {
            self.words.push(value);
        } else {
            *self.words.last_mut().expect("non-empty") |= value << offset;
            if offset + width > 64 {
                self.words.push(value >> (64 - offset));
            }
        }
        self.len_bits += width as u64;
    }

    /// Appends all bits of another writer.
    pub fn append(&mut self, other: &BitWriter) {
        let mut remaining = other.len_bits;
        for &word in &other.words {
            let take = remaining.min(64) as u32;
            self.push(word, take);
            remaining -= take as u64;
        }
    }

    /// The written bits as little-endian bytes, with read padding.
    pub fn into_padded_bytes(self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.words.len() * 8 + READ_PADDING_BYTES);
        for word in &self.words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&[0u8; READ_PADDING_BYTES]);
        bytes
    }
}

/// Packs `values` at a fixed `width` into padded little-endian bytes.
pub fn pack(values: impl IntoIterator<Item = u64>, width: u32) -> Vec<u8> {
    let mut writer = BitWriter::new();
    for value in values {
        debug_assert!(width == 64 || value >> width == 0, "value exceeds width");
        writer.push(value, width);
    }
    writer.into_padded_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_stay_inside_their_buffer() {
        let bytes = SharedBytes::from_vec((0u8..16).collect());
        let middle = bytes.slice(4, 8);
        assert_eq!(&*middle, &[4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(&*middle.slice(6, 2), &[10, 11]);
        // A start near usize::MAX must not wrap around the bound check.
        let wrapped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            bytes.slice(usize::MAX - 7, 16)
        }));
        assert!(wrapped.is_err());
        let past_end =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| middle.slice(4, 5)));
        assert!(past_end.is_err());
    }

    #[test]
    fn packed_round_trip_matches_input() {
        for width in [1u32, 3, 7, 13, 26, 33, 56] {
            let values: Vec<u64> = (0..500u64)
                .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) & low_mask(width))
                .collect();
            let bytes = pack(values.iter().copied(), width);
            assert_eq!(bytes.len(), packed_len_bytes(values.len() as u64, width));
            for (i, &v) in values.iter().enumerate() {
                assert_eq!(
                    packed_get(&bytes, i as u64, width),
                    v,
                    "width {width} index {i}"
                );
            }
        }
    }

    #[test]
    fn backward_peeks_read_the_bits_in_reverse() {
        let mut writer = BitWriter::new();
        let mut model = Vec::new();
        for i in 0..300u64 {
            let bit = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) & 1;
            writer.push(bit, 1);
            model.push(bit);
        }
        let bytes = writer.into_padded_bytes();
        for end in 0..=model.len() as u64 {
            let window = peek_bits_rev(&bytes, end);
            let valid = u64::from(peek_bits_rev_valid(end)).min(64);
            for i in 0..valid {
                let want = if i < end {
                    model[(end - 1 - i) as usize]
                } else {
                    0
                };
                assert_eq!((window >> i) & 1, want, "end {end} bit {i}");
            }
        }
        assert_eq!(reverse_low_bits(0b0011, 4), 0b1100);
        assert_eq!(reverse_low_bits(0b1, 1), 0b1);
        assert_eq!(reverse_low_bits(5, 0), 0);
    }

    #[test]
    fn append_concatenates_bits() {
        let mut a = BitWriter::new();
        a.push(0b101, 3);
        let mut b = BitWriter::new();
        for i in 0..100u64 {
            b.push(i, 7);
        }
        a.append(&b);
        let bytes = a.into_padded_bytes();
        assert_eq!(peek_bits(&bytes, 0) & 7, 0b101);
        for i in 0..100u64 {
            assert_eq!(peek_bits(&bytes, 3 + i * 7) & 127, i);
        }
    }
}
