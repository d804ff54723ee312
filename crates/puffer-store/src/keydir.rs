//! A compressed, sorted key directory. A segment stores its records in key order, so a
//! key's rank among the segment's keys is its record number: the directory maps a key to
//! its rank and a rank back to its key.
//!
//! Keys are arbitrary byte strings in strictly ascending order, front coded in blocks of
//! [`KEYS_PER_BLOCK`] keys. A lookup binary searches the blocks' first keys, which are
//! stored whole, then decodes one block.
//!
//! # Byte layout
//!
//! Integers are little-endian; a varint is unsigned LEB128 (7 bits a byte, low bits
//! first, the high bit set on every byte but the last, at most 10 bytes). `n` is the key
//! count, `k` the keys per block, `b = ceil(n / k)` the block count and `w` the offset
//! width.
//!
//! | offset          | size        | field                                            |
//! |-----------------|-------------|--------------------------------------------------|
//! | 0               | 8           | key count `n`, u64                               |
//! | 8               | 4           | keys per block `k`, u32, at least 1 (written: 16) |
//! | 12              | 4           | offset width `w` in bytes, u32: 4 or 8           |
//! | 16              | `w (b + 1)` | block offset table, u32 or u64 each              |
//! | 16 + `w (b + 1)`| ...         | block data, to the end of the bytes              |
//!
//! The offset table holds the start of each block, then the end of the last block, as
//! offsets from the start of the block data: it starts at 0, strictly increases (a block
//! is at least one byte) and ends at the length of the block data. The encoder writes
//! 4-byte offsets when the block data fits in a `u32`, which halves the table (a quarter
//! byte per key), and 8-byte offsets otherwise.
//!
//! Block `i` holds keys `i k ..` (the last block may hold fewer):
//! - its first key whole: varint(key length), key bytes;
//! - each following key: varint(length of the prefix shared with the previous key),
//!   varint(suffix length), suffix bytes.

use std::cmp::Ordering;

/// Keys per front-coded block written by [`encode_keys`]: a lookup decodes at most this many.
pub const KEYS_PER_BLOCK: u32 = 16;

/// Bytes of the header: key count, keys per block, offset width.
const HEADER_LEN: usize = 16;

/// Encodes strictly ascending keys as a key directory; see the module doc for the layout.
pub fn encode_keys(sorted_keys: &[&[u8]]) -> Result<Vec<u8>, String> {
    encode_keys_in_blocks(sorted_keys, KEYS_PER_BLOCK, false)
}

/// [`encode_keys`] with a chosen block size; `force_wide_offsets` lets tests cover the
/// 8-byte offsets that otherwise take 4 GiB of keys.
fn encode_keys_in_blocks(
    sorted_keys: &[&[u8]],
    keys_per_block: u32,
    force_wide_offsets: bool,
) -> Result<Vec<u8>, String> {
    let mut block_data = Vec::new();
    let mut block_offsets = Vec::with_capacity(sorted_keys.len() / keys_per_block as usize + 1);
    for (index, &key) in sorted_keys.iter().enumerate() {
        if index > 0 && sorted_keys[index - 1] >= key {
            return Err(format!(
                "key directory: key {index} is not greater than key {}",
                index - 1
            ));
        }
        if index % keys_per_block as usize == 0 {
            block_offsets.push(block_data.len() as u64);
            write_varint(&mut block_data, key.len() as u64);
            block_data.extend_from_slice(key);
        } else {
            let previous = sorted_keys[index - 1];
            let shared_len = previous
                .iter()
                .zip(key.iter())
                .take_while(|(a, b)| a == b)
                .count();
            write_varint(&mut block_data, shared_len as u64);
            write_varint(&mut block_data, (key.len() - shared_len) as u64);
            block_data.extend_from_slice(&key[shared_len..]);
        }
    }
    block_offsets.push(block_data.len() as u64);

    let offset_width: u32 = if force_wide_offsets || block_data.len() > u32::MAX as usize {
        8
    } else {
        4
    };
    let mut out = Vec::with_capacity(
        HEADER_LEN + block_offsets.len() * offset_width as usize + block_data.len(),
    );
    out.extend_from_slice(&(sorted_keys.len() as u64).to_le_bytes());
    out.extend_from_slice(&keys_per_block.to_le_bytes());
    out.extend_from_slice(&offset_width.to_le_bytes());
    for offset in block_offsets {
        // Little-endian: the low `offset_width` bytes are the offset, which fits.
        out.extend_from_slice(&offset.to_le_bytes()[..offset_width as usize]);
    }
    out.extend_from_slice(&block_data);
    Ok(out)
}

/// Reads a little-endian integer of `width` bytes, at most 8, at `position`.
fn read_le(bytes: &[u8], position: usize, width: usize) -> Option<u64> {
    // The offset table's usual width, read without a copy of variable length.
    if width == 4 {
        let field = bytes.get(position..position.checked_add(4)?)?;
        return Some(u64::from(u32::from_le_bytes(field.try_into().ok()?)));
    }
    let field = bytes.get(position..position.checked_add(width)?)?;
    let mut le_bytes = [0; 8];
    le_bytes.get_mut(..width)?.copy_from_slice(field);
    Some(u64::from_le_bytes(le_bytes))
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A read-only view of an encoded key directory.
#[derive(Clone, Debug)]
pub struct KeyDirectory {
    bytes: Vec<u8>,
    key_count: u64,
    keys_per_block: u64,
    block_count: u64,
    offset_width: usize,
    block_data_start: usize,
}

impl KeyDirectory {
    /// Validates the header and the block offset table, in O(blocks) without decoding keys.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, String> {
        if bytes.len() < HEADER_LEN {
            return Err(format!(
                "key directory: {} bytes is shorter than the {HEADER_LEN}-byte header",
                bytes.len()
            ));
        }
        // In bounds: the header length was checked.
        let header_field = |position, width| read_le(&bytes, position, width).unwrap_or(0);
        let key_count = header_field(0, 8);
        let keys_per_block = header_field(8, 4);
        let offset_width = header_field(12, 4);
        if keys_per_block == 0 {
            return Err("key directory: zero keys per block".to_string());
        }
        if offset_width != 4 && offset_width != 8 {
            return Err(format!(
                "key directory: offset width {offset_width} bytes, expected 4 or 8"
            ));
        }
        let block_count = key_count.div_ceil(keys_per_block);
        let block_data_start = block_count
            .checked_add(1)
            .and_then(|entries| entries.checked_mul(offset_width))
            .and_then(|table_len| usize::try_from(table_len).ok())
            .and_then(|table_len| table_len.checked_add(HEADER_LEN))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| {
                format!(
                    "key directory: offset table of {block_count} blocks past the end of {} bytes",
                    bytes.len()
                )
            })?;
        let directory = Self {
            key_count,
            keys_per_block,
            block_count,
            offset_width: offset_width as usize,
            block_data_start,
            bytes,
        };

        let block_data_len = directory.bytes.len() - block_data_start;
        let mut previous_offset = 0;
        for block in 0..=block_count {
            let offset = directory.table_entry(block)?;
            if offset > block_data_len {
                return Err(format!(
                    "key directory: block {block} offset {offset} past the end of {block_data_len} bytes"
                ));
            }
            // Offsets start at 0 and strictly increase: a block holds at least one byte.
            let is_in_order = if block == 0 {
                offset == 0
            } else {
                offset > previous_offset
            };
            if !is_in_order {
                return Err(format!(
                    "key directory: block {block} offset {offset} does not follow the previous offset {previous_offset}"
                ));
            }
            previous_offset = offset;
        }
        if previous_offset != block_data_len {
            return Err(format!(
                "key directory: blocks end at {previous_offset} but the block data holds {block_data_len} bytes"
            ));
        }
        Ok(directory)
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.key_count
    }

    /// Whether the directory holds no keys.
    pub fn is_empty(&self) -> bool {
        self.key_count == 0
    }

    /// Bytes held, the encoded directory.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The rank of `key`, or `None` if absent.
    pub fn rank(&self, key: &[u8]) -> Result<Option<u64>, String> {
        let (rank, found) = self.seek(key)?;
        Ok(found.then_some(rank))
    }

    /// The rank of the first key at or after `key` (the key count if there is none).
    pub fn lower_bound(&self, key: &[u8]) -> Result<u64, String> {
        Ok(self.seek(key)?.0)
    }

    /// The key of rank `rank`.
    pub fn key(&self, rank: u64) -> Result<Vec<u8>, String> {
        if rank >= self.key_count {
            return Err(format!(
                "key directory: rank {rank} out of range for {} keys",
                self.key_count
            ));
        }
        let mut cursor = self.block_cursor(rank / self.keys_per_block)?;
        for _ in 0..=rank % self.keys_per_block {
            cursor.next_key()?;
        }
        Ok(cursor.key)
    }

    /// The keys of `ranks` (ascending, repeats allowed), in their order: each block they
    /// fall in is decoded once, so a run of nearby ranks costs about one key each.
    pub fn keys(&self, ranks: &[u64]) -> Result<Vec<Vec<u8>>, String> {
        if let Some(&rank) = ranks.iter().find(|&&rank| rank >= self.key_count) {
            return Err(format!(
                "key directory: rank {rank} out of range for {} keys",
                self.key_count
            ));
        }
        if let Some(pair) = ranks.windows(2).find(|pair| pair[1] < pair[0]) {
            return Err(format!(
                "key directory: ranks not ascending ({} after {})",
                pair[1], pair[0]
            ));
        }
        let mut out = Vec::with_capacity(ranks.len());
        // One cursor for every block: its key buffer is allocated once.
        let mut cursor = BlockCursor::new(&[], 0);
        let mut i = 0;
        while i < ranks.len() {
            let block = ranks[i] / self.keys_per_block;
            cursor.restart(self.block_bytes(block)?, block);
            // The rank of the key the cursor holds, once it holds one.
            let mut at = block * self.keys_per_block;
            cursor.next_key()?;
            while i < ranks.len() && ranks[i] / self.keys_per_block == block {
                let rank = ranks[i];
                while at < rank {
                    cursor.next_key()?;
                    at += 1;
                }
                out.push(cursor.key.clone());
                i += 1;
            }
        }
        Ok(out)
    }

    /// All keys in ascending order; iteration stops after the first error.
    pub fn iter(&self) -> impl Iterator<Item = Result<Vec<u8>, String>> + '_ {
        (0..self.block_count)
            .map(|block| self.block_keys(block))
            // After an error the rest of the bytes cannot be trusted: stop.
            .scan(false, |failed, block_keys| {
                (!*failed).then(|| {
                    *failed = block_keys.is_err();
                    block_keys
                })
            })
            .flat_map(|block_keys| match block_keys {
                Ok(keys) => keys.into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error)],
            })
    }

    /// All keys of `block`, which must end with its last key.
    fn block_keys(&self, block: u64) -> Result<Vec<Vec<u8>>, String> {
        let mut cursor = self.block_cursor(block)?;
        let keys = (0..self.keys_in_block(block))
            .map(|_| cursor.next_key().map(|()| cursor.key.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let unread_len = cursor.block_bytes.len() - cursor.position;
        if unread_len != 0 {
            return Err(format!(
                "key directory: block {block} has {unread_len} bytes after its last key"
            ));
        }
        Ok(keys)
    }

    /// The lower bound of `key` and whether the key there is `key`.
    fn seek(&self, key: &[u8]) -> Result<(u64, bool), String> {
        // Count the blocks whose first key is <= `key`: the first keys ascend.
        let (mut low, mut high) = (0, self.block_count);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.first_key(middle)? <= key {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let Some(block) = low.checked_sub(1) else {
            return Ok((0, false));
        };
        let block_start_rank = block * self.keys_per_block;
        let keys_in_block = self.keys_in_block(block);
        let mut cursor = self.block_cursor(block)?;
        for index_in_block in 0..keys_in_block {
            cursor.next_key()?;
            match cursor.key.as_slice().cmp(key) {
                Ordering::Less => {}
                Ordering::Equal => return Ok((block_start_rank + index_in_block, true)),
                Ordering::Greater => return Ok((block_start_rank + index_in_block, false)),
            }
        }
        // Every key of the block is below `key` and the next block's first key is above.
        Ok((block_start_rank + keys_in_block, false))
    }

    fn keys_in_block(&self, block: u64) -> u64 {
        self.keys_per_block
            .min(self.key_count.saturating_sub(block * self.keys_per_block))
    }

    /// Entry `block` of the offset table: the block's start, or for `block_count` the end
    /// of the last block.
    fn table_entry(&self, block: u64) -> Result<usize, String> {
        usize::try_from(block)
            .ok()
            .and_then(|block| {
                block
                    .checked_mul(self.offset_width)?
                    .checked_add(HEADER_LEN)
            })
            .and_then(|position| read_le(&self.bytes, position, self.offset_width))
            .and_then(|offset| usize::try_from(offset).ok())
            .ok_or_else(|| {
                format!(
                    "key directory: block {block} offset unreadable in {} bytes",
                    self.bytes.len()
                )
            })
    }

    fn block_bytes(&self, block: u64) -> Result<&[u8], String> {
        let start = self.table_entry(block)?;
        let end = self.table_entry(block + 1)?;
        self.block_data_start
            .checked_add(start)
            .zip(self.block_data_start.checked_add(end))
            .and_then(|(start, end)| self.bytes.get(start..end))
            .ok_or_else(|| {
                format!(
                    "key directory: block {block} range {start}..{end} past the end of {} bytes",
                    self.bytes.len() - self.block_data_start
                )
            })
    }

    /// The first key of `block`, borrowed: the binary search reads it without copying.
    fn first_key(&self, block: u64) -> Result<&[u8], String> {
        let block_bytes = self.block_bytes(block)?;
        let mut cursor = BlockCursor::new(block_bytes, block);
        let key_len = cursor.read_len()?;
        cursor.take(key_len)
    }

    fn block_cursor(&self, block: u64) -> Result<BlockCursor<'_>, String> {
        Ok(BlockCursor::new(self.block_bytes(block)?, block))
    }
}

/// A directory's keys decoded, side by side: a rank's key is a slice, with nothing to
/// decode. About the keys' own bytes plus 4 a key (the front-coded directory is smaller),
/// so a segment holds one only while dense key-only answers are cheap enough otherwise
/// for decoding to dominate them (see `Segment`'s attribute layers).
pub struct DecodedKeys {
    bytes: Vec<u8>,
    /// `ends[rank]` is where key `rank` ends in `bytes`; it starts where the one before
    /// ends (or at 0).
    ends: Vec<u32>,
}

impl DecodedKeys {
    /// Decodes every key of `directory`; an error if a block is corrupt or the keys
    /// exceed the 4 GiB a table of 32-bit ends addresses.
    pub fn decode(directory: &KeyDirectory) -> Result<DecodedKeys, String> {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(usize::try_from(directory.key_count).unwrap_or(0));
        for key in directory.iter() {
            bytes.extend_from_slice(&key?);
            let end = u32::try_from(bytes.len()).map_err(|_| {
                "key directory: keys exceed 4 GiB, too many to decode into a table".to_string()
            })?;
            ends.push(end);
        }
        bytes.shrink_to_fit();
        Ok(DecodedKeys { bytes, ends })
    }

    /// Bytes held.
    pub fn byte_len(&self) -> u64 {
        (self.bytes.len() + self.ends.len() * std::mem::size_of::<u32>()) as u64
    }

    /// The keys of `ranks`, in their order (any order, repeats allowed).
    pub fn keys(&self, ranks: &[u64]) -> Result<Vec<Vec<u8>>, String> {
        ranks
            .iter()
            .map(|&rank| {
                let key = usize::try_from(rank).ok().and_then(|rank| {
                    let start = rank.checked_sub(1).map_or(Some(0), |before| {
                        self.ends.get(before).map(|&end| end as usize)
                    })?;
                    let end = *self.ends.get(rank)? as usize;
                    self.bytes.get(start..end)
                });
                key.map(<[u8]>::to_vec).ok_or_else(|| {
                    format!(
                        "decoded keys: rank {rank} out of range for {} keys",
                        self.ends.len()
                    )
                })
            })
            .collect()
    }
}

/// Decodes the keys of one block in order.
struct BlockCursor<'a> {
    block_bytes: &'a [u8],
    block: u64,
    position: usize,
    keys_decoded: u64,
    key: Vec<u8>,
}

impl<'a> BlockCursor<'a> {
    fn new(block_bytes: &'a [u8], block: u64) -> Self {
        Self {
            block_bytes,
            block,
            position: 0,
            keys_decoded: 0,
            key: Vec::new(),
        }
    }

    /// Starts over at the first key of another block, keeping the key buffer.
    fn restart(&mut self, block_bytes: &'a [u8], block: u64) {
        self.block_bytes = block_bytes;
        self.block = block;
        self.position = 0;
        self.keys_decoded = 0;
    }

    /// Decodes the next key into `self.key`.
    #[inline]
    fn next_key(&mut self) -> Result<(), String> {
        // The common case, read without the general path's checks and loops: a
        // following key whose two lengths fit in a byte each (the shared prefix of sorted
        // keys and the suffix are short).
        if self.keys_decoded > 0 {
            if let Some(&[shared_len, suffix_len]) = self
                .block_bytes
                .get(self.position..self.position + 2)
                .and_then(|lengths| <&[u8; 2]>::try_from(lengths).ok())
            {
                let (shared_len, suffix_len) = (usize::from(shared_len), usize::from(suffix_len));
                let suffix_start = self.position + 2;
                if shared_len < 0x80 && suffix_len < 0x80 && shared_len <= self.key.len() {
                    if let Some(suffix) = self
                        .block_bytes
                        .get(suffix_start..suffix_start + suffix_len)
                    {
                        self.key.truncate(shared_len);
                        self.key.extend_from_slice(suffix);
                        self.position = suffix_start + suffix_len;
                        self.keys_decoded += 1;
                        return Ok(());
                    }
                }
            }
        }
        self.next_key_checked()
    }

    /// [`Self::next_key`] for any key: every length and bound checked, errors named.
    fn next_key_checked(&mut self) -> Result<(), String> {
        if self.keys_decoded == 0 {
            let key_len = self.read_len()?;
            let key = self.take(key_len)?;
            self.key.clear();
            self.key.extend_from_slice(key);
        } else {
            let shared_len = self.read_len()?;
            if shared_len > self.key.len() {
                return Err(format!(
                    "key directory: block {} key {} shares {shared_len} bytes with a previous key of {} bytes",
                    self.block,
                    self.keys_decoded,
                    self.key.len()
                ));
            }
            let suffix_len = self.read_len()?;
            let suffix = self.take(suffix_len)?;
            self.key.truncate(shared_len);
            self.key.extend_from_slice(suffix);
        }
        self.keys_decoded += 1;
        Ok(())
    }

    /// Reads a varint length; lengths above the block's size are caught by `take`.
    fn read_len(&mut self) -> Result<usize, String> {
        // Nearly every length fits in one byte: read it without the loop.
        if let Some(&byte) = self.block_bytes.get(self.position) {
            if byte < 0x80 {
                self.position += 1;
                return Ok(usize::from(byte));
            }
        }
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.block_bytes.get(self.position) else {
                break;
            };
            self.position += 1;
            // The tenth byte carries bit 63 only.
            if shift == 63 && byte > 1 {
                break;
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(usize::try_from(value).unwrap_or(usize::MAX));
            }
        }
        Err(format!(
            "key directory: block {} key {} has a truncated or overlong varint before byte {}",
            self.block, self.keys_decoded, self.position
        ))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        let remaining = self.block_bytes.len() - self.position;
        if len > remaining {
            return Err(format!(
                "key directory: block {} key {} length {len} past the end of the block's {remaining} remaining bytes",
                self.block, self.keys_decoded
            ));
        }
        let bytes = &self.block_bytes[self.position..self.position + len];
        self.position += len;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_keys() -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = (0..200u32)
            .map(|n| format!("user/{:05}", n * 7).into_bytes())
            .collect();
        keys.insert(0, Vec::new());
        keys
    }

    fn check_layout(keys_per_block: u32, force_wide_offsets: bool) {
        let keys = sample_keys();
        let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let bytes = encode_keys_in_blocks(&borrowed, keys_per_block, force_wide_offsets).unwrap();
        let directory = KeyDirectory::from_bytes(bytes).unwrap();
        assert_eq!(directory.len(), keys.len() as u64);
        for (rank, key) in keys.iter().enumerate() {
            assert_eq!(directory.rank(key).unwrap(), Some(rank as u64));
            assert_eq!(&directory.key(rank as u64).unwrap(), key);
        }
        assert_eq!(directory.rank(b"user/00001").unwrap(), None);
        assert_eq!(directory.lower_bound(b"user/00001").unwrap(), 2);
        assert_eq!(directory.lower_bound(b"z").unwrap(), keys.len() as u64);
        let all: Vec<Vec<u8>> = directory.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(all, keys);
        // Batched lookups against one at a time: every third rank, repeats, all of them.
        let n = keys.len() as u64;
        let picks: Vec<u64> = (0..n).step_by(3).chain([n - 1, n - 1]).collect();
        for ranks in [picks, (0..n).collect(), Vec::new(), vec![0, 0, 5]] {
            let expected: Vec<Vec<u8>> = ranks.iter().map(|&r| keys[r as usize].clone()).collect();
            assert_eq!(directory.keys(&ranks).unwrap(), expected, "{ranks:?}");
        }
        assert!(directory.keys(&[3, 2]).is_err(), "ranks out of order");
        assert!(directory.keys(&[n]).is_err(), "rank past the end");
        let decoded = DecodedKeys::decode(&directory).unwrap();
        let ranks: Vec<u64> = (0..n).rev().chain([0, 0, 7]).collect();
        let expected: Vec<Vec<u8>> = ranks.iter().map(|&r| keys[r as usize].clone()).collect();
        assert_eq!(decoded.keys(&ranks).unwrap(), expected);
        assert!(decoded.keys(&[n]).is_err(), "rank past the end");
    }

    /// Lengths of two varint bytes (shared prefixes and suffixes of 128 bytes or more)
    /// take the checked decoding path; short ones the fast path; both agree.
    #[test]
    fn long_shared_prefixes_and_suffixes_decode() {
        let long = "p".repeat(300);
        let mut keys: Vec<Vec<u8>> = (0..40u32)
            .map(|n| match n % 3 {
                0 => format!("{long}{n:03}").into_bytes(),
                1 => format!("{long}{n:03}{}", "s".repeat(200)).into_bytes(),
                _ => format!("{n:03}").into_bytes(),
            })
            .collect();
        keys.sort();
        let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let directory = KeyDirectory::from_bytes(encode_keys(&borrowed).unwrap()).unwrap();
        let all: Vec<Vec<u8>> = directory.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(all, keys);
        let ranks: Vec<u64> = (0..keys.len() as u64).collect();
        assert_eq!(directory.keys(&ranks).unwrap(), keys);
        assert_eq!(
            DecodedKeys::decode(&directory)
                .unwrap()
                .keys(&ranks)
                .unwrap(),
            keys
        );
    }

    #[test]
    fn other_block_sizes_and_wide_offsets_decode() {
        for keys_per_block in [1, 2, 5, 16, 300] {
            check_layout(keys_per_block, false);
            check_layout(keys_per_block, true);
        }
    }

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for value in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut bytes = Vec::new();
            write_varint(&mut bytes, value);
            let mut cursor = BlockCursor::new(&bytes, 0);
            assert_eq!(cursor.read_len().unwrap() as u64, value);
            assert_eq!(cursor.position, bytes.len());
        }
        let overlong = [0xff; 10];
        assert!(BlockCursor::new(&overlong, 0).read_len().is_err());
        let eleven_bytes = [
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x81, 0x00,
        ];
        assert!(BlockCursor::new(&eleven_bytes, 0).read_len().is_err());
        assert!(BlockCursor::new(&[0x80], 0).read_len().is_err());
    }

    #[test]
    fn trailing_bytes_in_a_block_fail_iteration() {
        let bytes = encode_keys(&[b"a", b"b"]).unwrap();
        let mut lengthened = bytes.clone();
        lengthened.push(0);
        // Move the end offset to cover the extra byte.
        let end_position = HEADER_LEN + 4;
        lengthened[end_position] += 1;
        let directory = KeyDirectory::from_bytes(lengthened).unwrap();
        let results: Vec<_> = directory.iter().collect();
        assert_eq!(
            results,
            vec![Err(
                "key directory: block 0 has 1 bytes after its last key".to_string()
            )]
        );
    }
}
