//! Psi (Succinct's NextCharIdx): `psi[i] = ISA[SA[i] + 1]`, stored compressed.
//!
//! Entries are grouped by column (the first character of their suffix); within a column
//! Psi is strictly increasing, so each column is cut into blocks of `block_len` entries
//! and every block stores its first value in a header and the remaining gaps in a
//! Huffman-coded bit stream (see [`crate::huffman`]): gaps of one, which dominate on
//! real text, are coded as runs. Headers pack `(first_value, bit offset relative to its
//! superblock)`; superblocks hold absolute bit offsets. Column-wise rank (`count_less`)
//! binary-searches block headers first.
//!
//! A block with a successor in its column is coded in two halves: the first half
//! forward from the block's header, the second half backward from the next block's
//! header (its steps written last first, bits reversed, so that the next block's bit
//! offset is where reading starts). A lookup then decodes at most half a block (except
//! in the last block of a column, read forward only), from whichever header is nearer,
//! for about the same number of bits: the gap into the next block's first value is
//! coded instead of the gap into the middle entry, and a run that ends a half is coded
//! without its length (the reader knows how much is left), which pays for splitting the
//! runs that cross the middle.

use crate::bits::{self, peek_bits, BitWriter, SharedBytes};
use crate::huffman::{self, HuffmanDecoder, HuffmanEncoder, Step, NUM_SYMBOLS};

/// Number of Huffman code contexts.
pub const CODE_CONTEXTS: usize = 2;

/// Number of columns: the sentinel column 0, then one per byte value (`1 + byte`).
pub const NUM_COLUMNS: usize = 257;

/// The column of a byte.
#[inline(always)]
pub fn column_of_byte(byte: u8) -> usize {
    byte as usize + 1
}

/// Layout parameters of an encoded Psi, stored in the file's meta section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PsiLayout {
    /// Entries (`n + 1`).
    pub entries: u64,
    /// Entries per block.
    pub block_len: u64,
    /// Blocks per superblock.
    pub superblock_blocks: u64,
    /// Bits of a block's first value.
    pub value_width: u32,
    /// Bits of a block's relative bit offset.
    pub offset_width: u32,
    /// Bits used in the stream.
    pub stream_bits: u64,
    /// `column_starts[c]` = first entry of column `c`; `column_starts[257]` = entries.
    pub column_starts: Vec<u64>,
    /// `column_first_block[c]` = first block of column `c`; last element = total blocks.
    pub column_first_block: Vec<u64>,
    /// Huffman code length per symbol, per context: 0 = at a block start or after a
    /// gap, 1 = after a run (where a run cannot follow, since runs are maximal).
    pub code_lengths: [[u8; NUM_SYMBOLS]; CODE_CONTEXTS],
}

impl PsiLayout {
    /// Total number of blocks.
    pub fn blocks(&self) -> u64 {
        *self.column_first_block.last().expect("non-empty")
    }

    /// Width of one packed header.
    pub fn header_width(&self) -> u32 {
        self.value_width + self.offset_width
    }

    /// Number of superblocks.
    pub fn superblocks(&self) -> u64 {
        self.blocks().div_ceil(self.superblock_blocks)
    }

    /// Checks internal consistency (used when loading a file).
    pub fn validate(&self) -> Result<(), String> {
        if self.column_starts.len() != NUM_COLUMNS + 1
            || self.column_first_block.len() != NUM_COLUMNS + 1
        {
            return Err("column tables have the wrong length".into());
        }
        if !(2..=4096).contains(&self.block_len)
            || !self.block_len.is_power_of_two()
            || !self.superblock_blocks.is_power_of_two()
        {
            return Err(format!(
                "bad block parameters {} / {}",
                self.block_len, self.superblock_blocks
            ));
        }
        if self.header_width() > bits::MAX_PACKED_WIDTH_BITS || self.value_width == 0 {
            return Err("header widths out of range".into());
        }
        if self.column_starts[0] != 0 || self.column_starts[NUM_COLUMNS] != self.entries {
            return Err("column starts do not cover all entries".into());
        }
        let mut blocks = 0u64;
        for c in 0..NUM_COLUMNS {
            let size = self.column_starts[c + 1]
                .checked_sub(self.column_starts[c])
                .ok_or("column starts decrease")?;
            if self.column_first_block[c] != blocks {
                return Err(format!("column {c} starts at the wrong block"));
            }
            blocks += size.div_ceil(self.block_len);
        }
        if self.column_first_block[NUM_COLUMNS] != blocks {
            return Err("block count mismatch".into());
        }
        for lengths in &self.code_lengths {
            huffman::validate_lengths(lengths)?;
        }
        Ok(())
    }
}

/// The compressed Psi array.
pub struct Psi {
    layout: PsiLayout,
    headers: SharedBytes,
    superblocks: SharedBytes,
    stream: SharedBytes,
    decoders: [HuffmanDecoder; CODE_CONTEXTS],
    /// log2 of the block length (a power of two: lookups shift instead of dividing).
    block_shift: u32,
    /// log2 of the blocks per superblock.
    superblock_shift: u32,
    /// `column_hint[i >> hint_shift]` = the column of the first entry in that bucket.
    column_hint: Box<[u16]>,
    hint_shift: u32,
    /// Both contexts' lookup tables back to back, so the next table is selected by
    /// the previous entry's run bit without another pointer load.
    tables: Box<[u32]>,
    /// Like `tables`, but an entry covers every whole symbol that fits in the window
    /// (see [`multi_tables`]); it cuts the dependent lookups of a typical decode to a few.
    multi_tables: Box<[u32]>,
    header_mask: u64,
}

/// Decoding state inside one block: the value so far, the bit position and a local
/// window of the stream, the code context, and the entries still to skip.
struct BlockCursor {
    /// Reading the stream backward (a block's second half, from the next header).
    backward: bool,
    value: u64,
    pos: u64,
    window: u64,
    avail: u32,
    context_offset: usize,
    remaining: u64,
}

/// Where the decode of one Psi entry starts: a block header, how many entries to move
/// from its value, and in which direction.
#[derive(Clone, Copy, Default, Debug)]
pub struct Lookup {
    header_block: u64,
    steps: u64,
    backward: bool,
}

/// Byte sizes of Psi's parts.
#[derive(Clone, Debug, Default)]
pub struct PsiFootprint {
    /// Packed block headers.
    pub headers_bytes: u64,
    /// Superblock offsets.
    pub superblocks_bytes: u64,
    /// Huffman-coded gap stream.
    pub stream_bytes: u64,
    /// Column tables, code lengths and the decode table.
    pub tables_bytes: u64,
}

impl Psi {
    /// Assembles a Psi from its parts; sizes must have been validated.
    pub fn from_parts(
        layout: PsiLayout,
        headers: SharedBytes,
        superblocks: SharedBytes,
        stream: SharedBytes,
    ) -> Result<Psi, String> {
        layout.validate()?;
        let need_headers = bits::packed_len_bytes(layout.blocks(), layout.header_width());
        if headers.len() != need_headers {
            return Err(format!(
                "headers are {} bytes, expected {need_headers}",
                headers.len()
            ));
        }
        if superblocks.len() != layout.superblocks() as usize * 8 {
            return Err("superblock table has the wrong size".into());
        }
        if stream.len() != bits::packed_len_bytes(layout.stream_bits, 1) {
            return Err("stream has the wrong size".into());
        }
        let mut decoders = [
            HuffmanDecoder::new(&layout.code_lengths[0]),
            HuffmanDecoder::new(&layout.code_lengths[1]),
        ];
        let tables: Box<[u32]> = decoders
            .iter_mut()
            .flat_map(|d| d.take_table().into_vec())
            .collect();
        let header_mask = bits::low_mask(layout.header_width());
        let (column_hint, hint_shift) = column_hints(&layout.column_starts);
        let psi = Psi {
            block_shift: layout.block_len.trailing_zeros(),
            superblock_shift: layout.superblock_blocks.trailing_zeros(),
            layout,
            headers,
            superblocks,
            stream,
            multi_tables: multi_tables(&tables),
            tables,
            column_hint,
            hint_shift,
            decoders,
            header_mask,
        };
        // Every block must start inside the stream, and no earlier than the block before
        // it (a second half is read backward from the next block's start): a header that
        // breaks either is refused here, not found out by a decode.
        let mut previous_pos = 0;
        for block in 0..psi.layout.blocks() {
            let (first, pos) = psi.block_header(block);
            if pos > psi.layout.stream_bits || first >= psi.layout.entries || pos < previous_pos {
                return Err(format!("block {block} header out of range"));
            }
            previous_pos = pos;
        }
        Ok(psi)
    }

    /// The layout (parameters and column tables).
    pub fn layout(&self) -> &PsiLayout {
        &self.layout
    }

    /// The raw sections, for writing a file.
    pub fn sections(&self) -> (&[u8], &[u8], &[u8]) {
        (&self.headers, &self.superblocks, &self.stream)
    }

    /// Exact byte footprint.
    pub fn footprint(&self) -> PsiFootprint {
        PsiFootprint {
            headers_bytes: self.headers.len() as u64,
            superblocks_bytes: self.superblocks.len() as u64,
            stream_bytes: self.stream.len() as u64,
            tables_bytes: (self.layout.column_starts.len() * 8
                + self.layout.column_first_block.len() * 8
                + NUM_SYMBOLS * CODE_CONTEXTS
                + self
                    .decoders
                    .iter()
                    .map(HuffmanDecoder::heap_bytes)
                    .sum::<usize>()
                + self.tables.len() * 4
                + self.multi_tables.len() * 4
                + self.column_hint.len() * 2) as u64,
        }
    }

    /// Number of entries (`n + 1`).
    pub fn entries(&self) -> u64 {
        self.layout.entries
    }

    /// First entry of column `c` (`c` in `0..=257`).
    #[inline(always)]
    pub fn column_start(&self, c: usize) -> u64 {
        self.layout.column_starts[c]
    }

    /// The column holding entry `i`.
    #[inline(always)]
    pub fn column_of(&self, i: u64) -> usize {
        let mut c = usize::from(self.column_hint[(i >> self.hint_shift) as usize]);
        // Usually zero or one step: few columns start inside one bucket.
        while self.layout.column_starts[c + 1] <= i {
            c += 1;
        }
        c
    }

    #[inline(always)]
    fn block_header(&self, block: u64) -> (u64, u64) {
        let raw =
            peek_bits(&self.headers, block * self.layout.header_width() as u64) & self.header_mask;
        let first = raw & bits::low_mask(self.layout.value_width);
        let relative = raw >> self.layout.value_width;
        let superblock = block >> self.superblock_shift;
        let base = bits::read_u64_le(&self.superblocks, superblock as usize * 8);
        (first, base + relative)
    }

    /// Where the decode of entry `i` starts: the first half of a block (and all of the
    /// last block of a column) is read forward from the block's header; the second half
    /// of any other block backward from the next block's header.
    #[inline(always)]
    fn locate_entry(&self, i: u64) -> Lookup {
        let c = self.column_of(i);
        let offset = i - self.layout.column_starts[c];
        let block = self.layout.column_first_block[c] + (offset >> self.block_shift);
        let k = offset & (self.layout.block_len - 1);
        if k >= self.layout.block_len / 2 && block + 1 < self.layout.column_first_block[c + 1] {
            Lookup {
                header_block: block + 1,
                steps: self.layout.block_len - k,
                backward: true,
            }
        } else {
            Lookup {
                header_block: block,
                steps: k,
                backward: false,
            }
        }
    }

    /// The stream window at `pos` in reading order: forward from `pos`, or backward from
    /// just before `pos`; and how many of its bits are valid.
    #[inline(always)]
    fn window(&self, backward: bool, pos: u64) -> (u64, u32) {
        if backward {
            (
                bits::peek_bits_rev(&self.stream, pos),
                bits::peek_bits_rev_valid(pos),
            )
        } else {
            (peek_bits(&self.stream, pos), 64 - (pos & 7) as u32)
        }
    }

    /// One step (a gap or a run) at `pos`, read in the given direction.
    #[inline(always)]
    fn decode_step(&self, backward: bool, context: usize, pos: u64) -> Step {
        // A bit pattern that is no code can only come from a corrupt stream, which the
        // section checksum rejects at load; fall back to a unit step to stay in bounds.
        let window = self.window(backward, pos).0 as usize & ((1 << huffman::TABLE_BITS) - 1);
        let entry = self.tables[(context << huffman::TABLE_BITS) | window];
        let step = if entry & huffman::ENTRY_SLOW == 0 {
            Some(HuffmanDecoder::full_step(entry))
        } else if backward {
            self.decoders[context].slow_step_by(
                |offset| bits::peek_bits_rev(&self.stream, pos.saturating_sub(offset)),
                entry,
            )
        } else {
            self.decoders[context].slow_step(&self.stream, pos, entry)
        };
        step.unwrap_or(Step {
            bits: 1,
            delta: 1,
            count: 1,
        })
    }

    /// A cursor at the header a lookup starts from.
    #[inline(always)]
    fn cursor(&self, lookup: Lookup) -> BlockCursor {
        let (value, pos) = self.block_header(lookup.header_block);
        let (window, avail) = self.window(lookup.backward, pos);
        BlockCursor {
            backward: lookup.backward,
            value,
            pos,
            window,
            avail,
            context_offset: 0,
            remaining: lookup.steps,
        }
    }

    /// Moves a cursor by one decoded step (`bits` read, value changed by `delta`).
    #[inline(always)]
    fn advance_cursor(cursor: &mut BlockCursor, bits: u32, delta: u64) {
        if cursor.backward {
            // Positions saturate and values wrap: even a crafted stream cannot make a
            // backward read leave the buffer or overflow.
            cursor.value = cursor.value.wrapping_sub(delta);
            cursor.pos = cursor.pos.saturating_sub(u64::from(bits));
        } else {
            cursor.value = cursor.value.wrapping_add(delta);
            cursor.pos += u64::from(bits);
        }
    }

    /// One multi-symbol lookup: decodes every whole symbol in the window when the entry
    /// is a fast one that does not overshoot the target. Returns false, leaving the
    /// cursor as it was, when the cursor is done or the entry needs the single-symbol
    /// path.
    ///
    /// A local bit window is refilled only when fewer bits remain than an entry may
    /// consume, so the loop-carried dependency is one table load and a shift.
    #[inline(always)]
    fn multi_step(&self, cursor: &mut BlockCursor) -> bool {
        if cursor.remaining == 0 {
            return false;
        }
        if cursor.avail < huffman::TABLE_BITS {
            (cursor.window, cursor.avail) = self.window(cursor.backward, cursor.pos);
        }
        let table_mask = (1usize << huffman::TABLE_BITS) - 1;
        let entry =
            self.multi_tables[cursor.context_offset | (cursor.window as usize & table_mask)];
        let (bits, count) = (entry & 15, u64::from((entry >> 4) & 0x1FFF));
        if entry & huffman::ENTRY_SLOW != 0 || count > cursor.remaining {
            return false;
        }
        cursor.context_offset = (((entry >> 30) & 1) as usize) << huffman::TABLE_BITS;
        Self::advance_cursor(cursor, bits, u64::from((entry >> 17) & 0x1FFF));
        cursor.remaining -= count;
        cursor.window >>= bits;
        cursor.avail -= bits;
        true
    }

    /// Runs a cursor to its target and returns the value there: multi-symbol steps where
    /// they apply, single symbols where an entry is slow or would overshoot.
    /// A target inside a run of ones leaves the cursor at the run's start (with
    /// `remaining` still counting into it), so a later target can continue from there.
    #[inline(always)]
    fn run_cursor(&self, cursor: &mut BlockCursor) -> u64 {
        while cursor.remaining > 0 {
            if self.multi_step(cursor) {
                continue;
            }
            let step = self.decode_step(
                cursor.backward,
                cursor.context_offset >> huffman::TABLE_BITS,
                cursor.pos,
            );
            if step.count > cursor.remaining {
                // Inside a run of ones.
                return if cursor.backward {
                    cursor.value.wrapping_sub(cursor.remaining)
                } else {
                    cursor.value.wrapping_add(cursor.remaining)
                };
            }
            cursor.context_offset = usize::from(step.delta == step.count) << huffman::TABLE_BITS;
            Self::advance_cursor(cursor, step.bits, step.delta);
            cursor.remaining -= step.count;
            cursor.avail = 0; // the window no longer matches `pos`: refill
        }
        cursor.value
    }

    /// The value a lookup leads to.
    #[inline(always)]
    fn decode(&self, lookup: Lookup) -> u64 {
        self.run_cursor(&mut self.cursor(lookup))
    }

    /// Two lookups decoded in one loop: each decode is a chain of dependent table
    /// loads, so running two chains side by side overlaps their latencies.
    #[inline(always)]
    fn decode_two(&self, a: Lookup, b: Lookup) -> (u64, u64) {
        let mut first = self.cursor(a);
        let mut second = self.cursor(b);
        while self.multi_step(&mut first) & self.multi_step(&mut second) {}
        (self.run_cursor(&mut first), self.run_cursor(&mut second))
    }

    /// Lookups `group` (same header, same direction, steps nondecreasing in the order
    /// given) decoded by one pass of one cursor.
    #[inline(always)]
    fn decode_group(
        &self,
        lookups: &[Lookup],
        indices: &mut [u64],
        group: impl Iterator<Item = usize>,
    ) {
        let mut cursor: Option<BlockCursor> = None;
        let mut at = 0;
        for u in group {
            let cursor = cursor.get_or_insert_with(|| {
                at = lookups[u].steps;
                self.cursor(lookups[u])
            });
            cursor.remaining += lookups[u].steps - at;
            at = lookups[u].steps;
            indices[u] = self.run_cursor(cursor);
        }
    }

    /// `psi[i]`.
    #[inline]
    pub fn get(&self, i: u64) -> u64 {
        self.decode(self.locate_entry(i))
    }

    /// Replaces every `indices[j]` by `psi[indices[j]]`, overlapping the memory
    /// accesses of independent lookups (prefetch all headers, then all streams, then decode).
    pub fn advance_all(&self, indices: &mut [u64], scratch: &mut Vec<Lookup>) {
        // A software pipeline: lookup `j` prefetches its header, lookup `j - HEADER_AHEAD`
        // reads its (now cached) header and prefetches its stream bits, and lookup
        // `j - DECODE_AHEAD` decodes. Spacing the prefetches keeps the misses in flight
        // within what the memory system tracks, while each has time to arrive.
        const STREAM_AHEAD: usize = 16;
        const DECODE_AHEAD: usize = 32;
        let n = indices.len();
        scratch.clear();
        scratch.resize(n, Lookup::default());
        // Lookups before `group_end` were decoded with an earlier group.
        let mut group_end = 0usize;
        let mut waiting: Option<usize> = None;
        for j in 0..n + DECODE_AHEAD {
            if j < n {
                let lookup = self.locate_entry(indices[j]);
                let block = lookup.header_block;
                prefetch(
                    &self.headers,
                    (block * self.layout.header_width() as u64 / 8) as usize,
                );
                prefetch(
                    &self.superblocks,
                    ((block >> self.superblock_shift) * 8) as usize,
                );
                scratch[j] = lookup;
            }
            if let Some(t) = j.checked_sub(STREAM_AHEAD).filter(|&t| t < n) {
                let lookup = scratch[t];
                let (_, pos) = self.block_header(lookup.header_block);
                // Decoding `steps` entries reads a few bits each: fetch the next line too
                // when the walk through the block likely crosses into it.
                let far = lookup.steps > 16;
                if lookup.backward {
                    // The first bits read are the ones just before `pos`.
                    let last_byte = (pos.saturating_sub(1) / 8) as usize;
                    prefetch(&self.stream, last_byte);
                    if far {
                        prefetch(&self.stream, last_byte.saturating_sub(64));
                    }
                } else {
                    let first_byte = (pos / 8) as usize;
                    prefetch(&self.stream, first_byte);
                    if far {
                        prefetch(&self.stream, first_byte + 64);
                    }
                }
            }
            if let Some(t) = j.checked_sub(DECODE_AHEAD).filter(|&t| t < n) {
                if t < group_end {
                    continue; // decoded with its group
                }
                // Consecutive lookups from one header in one direction, in the order of
                // their steps (walks that start from one suffix range stay together for a
                // few steps): one pass of one cursor serves them all. Entries in the
                // back half of a block come in increasing order, so their steps from the
                // next header decrease.
                let first = scratch[t];
                let mut end = t + 1;
                let mut last_steps = first.steps;
                while end < n.min(j + 1)
                    && scratch[end].header_block == first.header_block
                    && scratch[end].backward == first.backward
                    && (if first.backward {
                        scratch[end].steps <= last_steps
                    } else {
                        scratch[end].steps >= last_steps
                    })
                {
                    last_steps = scratch[end].steps;
                    end += 1;
                }
                if end - t > 1 {
                    if first.backward {
                        self.decode_group(scratch, indices, (t..end).rev());
                    } else {
                        self.decode_group(scratch, indices, t..end);
                    }
                    group_end = end;
                    continue;
                }
                // A lone lookup waits for a partner: two decodes run side by side.
                match waiting.take() {
                    Some(other) => {
                        let (a, b) = self.decode_two(scratch[other], scratch[t]);
                        indices[other] = a;
                        indices[t] = b;
                    }
                    None => waiting = Some(t),
                }
            }
        }
        if let Some(t) = waiting {
            indices[t] = self.decode(scratch[t]);
        }
    }

    /// Number of entries of column `c` whose value is `< bound`.
    pub fn count_less(&self, c: usize, bound: u64) -> u64 {
        self.count_less_pair(c, bound, bound).0
    }

    /// Number of entries of column `c` below `low` and below `high` (`low <= high`).
    /// The second search gallops from the first one's block: in backward search the
    /// two bounds are usually close.
    pub fn count_less_pair(&self, c: usize, low: u64, high: u64) -> (u64, u64) {
        debug_assert!(low <= high);
        let start = self.layout.column_starts[c];
        let size = self.layout.column_starts[c + 1] - start;
        if size == 0 || high == 0 {
            return (0, 0);
        }
        let first_block = self.layout.column_first_block[c];
        let blocks = size.div_ceil(self.layout.block_len);
        let below = |block: u64, bound: u64| self.block_header(first_block + block).0 < bound;
        // Blocks whose first value is below `low`: binary search over the column.
        let low_blocks = partition(0, blocks, |b| below(b, low));
        // The same for `high`, galloping from `low_blocks`.
        let mut step = 1u64;
        let mut lo = low_blocks;
        while lo + step <= blocks && below(lo + step - 1, high) {
            lo += step;
            step *= 2;
        }
        let high_blocks = partition(lo, (lo + step).min(blocks + 1) - 1, |b| below(b, high));
        let rank = |blocks_below: u64, bound: u64| -> u64 {
            if blocks_below == 0 {
                return 0;
            }
            let block = blocks_below - 1;
            let block_entries = (size - block * self.layout.block_len).min(self.layout.block_len);
            let has_next = blocks_below < blocks;
            block * self.layout.block_len
                + self.count_less_in_block(first_block + block, block_entries, has_next, bound)
        };
        let low_rank = rank(low_blocks, low);
        let high_rank = if high == low {
            low_rank
        } else {
            rank(high_blocks, high)
        };
        (low_rank, high_rank)
    }

    /// Entries of `block` below `bound`, given that its first value is below `bound`
    /// and (when `has_next`) the next block's first value is not. The half that likely
    /// holds `bound` (by where it falls between the two first values) is read first;
    /// the other only when the bound is past it.
    fn count_less_in_block(
        &self,
        block: u64,
        block_entries: u64,
        has_next: bool,
        bound: u64,
    ) -> u64 {
        if !has_next {
            return self.count_below_forward(block, block_entries, bound).0;
        }
        let half = self.layout.block_len / 2;
        let first = self.block_header(block).0;
        let next_first = self.block_header(block + 1).0;
        if bound - first > (next_first - first) / 2 {
            let (above, all_above) = self.count_above_backward(block + 1, half, bound);
            if !all_above {
                return self.layout.block_len - above;
            }
            self.count_below_forward(block, half, bound).0
        } else {
            let (below, all_below) = self.count_below_forward(block, half, bound);
            if !all_below {
                return below;
            }
            self.layout.block_len - self.count_above_backward(block + 1, half, bound).0
        }
    }

    /// Of the first `entries` entries of `block` (read forward; the first is below
    /// `bound`), how many are below `bound`, and whether all are.
    fn count_below_forward(&self, block: u64, entries: u64, bound: u64) -> (u64, bool) {
        let (mut value, mut pos) = self.block_header(block);
        debug_assert!(value < bound);
        let mut counted = 1u64;
        let mut context = 0usize;
        while counted < entries {
            let step = self.decode_step(false, context, pos);
            context = usize::from(step.delta == step.count);
            if step.delta == step.count {
                // A run of +1 steps: values value+1 ..= value+count (a run through
                // the end of the part covers what is left of it).
                let count = step.count.min(entries - counted);
                let below = (bound - 1 - value).min(count);
                counted += below;
                if below < count {
                    return (counted, false);
                }
                value += count;
            } else {
                if value + step.delta >= bound {
                    return (counted, false);
                }
                value += step.delta;
                counted += 1;
            }
            pos += u64::from(step.bits);
        }
        (counted.min(entries), true)
    }

    /// Of the `entries` entries before block `next_block` (the second half of the block
    /// before it, read backward from its first value, which is at least `bound`), how
    /// many are at least `bound`, and whether all are.
    fn count_above_backward(&self, next_block: u64, entries: u64, bound: u64) -> (u64, bool) {
        let (mut value, mut pos) = self.block_header(next_block);
        let (mut seen, mut at_or_above) = (0u64, 0u64);
        let mut context = 0usize;
        while seen < entries {
            let step = self.decode_step(true, context, pos);
            context = usize::from(step.delta == step.count);
            let count = step.count.min(entries - seen);
            if step.delta == step.count {
                // Entries below: value-1 ..= value-count; those >= bound are the first
                // `value - bound` of them.
                let above = value.saturating_sub(bound).min(count);
                at_or_above += above;
                if above < count {
                    return (at_or_above, false);
                }
                value -= count;
            } else {
                match value.checked_sub(step.delta) {
                    Some(below) if below >= bound => {
                        value = below;
                        at_or_above += 1;
                    }
                    _ => return (at_or_above, false),
                }
            }
            seen += count;
            pos = pos.saturating_sub(u64::from(step.bits));
        }
        (at_or_above, true)
    }
}

/// Multi-symbol entries: bits 0..4 = bits used, 4..17 = entries covered, 17..30 = value
/// increase, bit 30 = context after, bit 31 = slow (the first symbol needs the slow path).
/// An entry holds as many whole symbols as fit in the window: each further symbol's
/// code and mantissa must lie within the window's remaining bits (its entry then does
/// not depend on bits past the window).
fn multi_tables(tables: &[u32]) -> Box<[u32]> {
    let size = 1usize << huffman::TABLE_BITS;
    let mut out = vec![0u32; tables.len()].into_boxed_slice();
    for context in 0..tables.len() / size {
        for window in 0..size {
            let first = tables[context * size + window];
            if first & huffman::ENTRY_SLOW != 0 {
                out[context * size + window] = huffman::ENTRY_SLOW;
                continue;
            }
            let one = HuffmanDecoder::full_step(first);
            let (mut bits, mut count, mut delta) = (one.bits, one.count, one.delta);
            let mut context_after = (first >> 30) & 1;
            // An end-of-part run ends an entry: what follows it belongs to another part.
            while count < huffman::END_RUN_COUNT {
                let next = tables[context_after as usize * size + (window >> bits)];
                if next & huffman::ENTRY_SLOW != 0 {
                    break;
                }
                let step = HuffmanDecoder::full_step(next);
                // Nor is one added after other symbols: the entry's count would then
                // exceed anything a reader has left, and readers would never take it.
                let fits = step.count < huffman::END_RUN_COUNT
                    && bits + step.bits <= huffman::TABLE_BITS
                    && count + step.count < 1 << 13
                    && delta + step.delta < 1 << 13;
                if !fits {
                    break;
                }
                bits += step.bits;
                count += step.count;
                delta += step.delta;
                context_after = (next >> 30) & 1;
            }
            debug_assert!(bits < 16);
            out[context * size + window] =
                bits | ((count as u32) << 4) | ((delta as u32) << 17) | (context_after << 30);
        }
    }
    out
}

/// Buckets of consecutive entries, each mapped to the column of its first entry.
const COLUMN_HINT_BUCKETS: u64 = 4096;

fn column_hints(column_starts: &[u64]) -> (Box<[u16]>, u32) {
    let entries = *column_starts.last().expect("non-empty");
    let shift = 64 - (entries / COLUMN_HINT_BUCKETS).leading_zeros();
    let buckets = (entries >> shift) + 1;
    let hints = (0..buckets)
        .map(|b| (column_starts.partition_point(|&s| s <= b << shift) - 1) as u16)
        .collect();
    (hints, shift)
}

/// First `b` in `lo..hi` for which `pred(b)` is false, given `pred` is true then false.
fn partition(mut lo: u64, mut hi: u64, pred: impl Fn(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[inline(always)]
fn prefetch(bytes: &[u8], byte_pos: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(byte) = bytes.get(byte_pos) {
        // SAFETY: prefetching is a hint; the pointer is in bounds and never dereferenced.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                byte as *const u8 as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, byte_pos);
}

/// Per-column encoder state.
#[derive(Clone, Default)]
struct ColumnState {
    entries: u64,
    /// The last value pushed (to check that values increase).
    prev: u64,
    /// The last value whose gap is coded forward (or the block's first value).
    coded_prev: u64,
    run: u64,
    after_run: bool,
    /// Values of the current block's second half, held until it is known whether
    /// another block follows in the column (then they are coded backward from its first
    /// value) or not (then forward, like the first half).
    second_half: Vec<u64>,
    writer: BitWriter,
    /// (first value, local bit offset) per block.
    blocks: Vec<(u64, u64)>,
}

/// Builds a [`Psi`] from the values of each column, fed in increasing order.
/// Used in two passes: [`PsiBuilder::count`] for symbol statistics, then
/// [`PsiBuilder::encode`] once the code is fixed.
pub struct PsiBuilder {
    block_len: u64,
    columns: Vec<ColumnState>,
    freqs: [[u64; NUM_SYMBOLS]; CODE_CONTEXTS],
    code_lengths: [[u8; NUM_SYMBOLS]; CODE_CONTEXTS],
    encoders: Option<[HuffmanEncoder; CODE_CONTEXTS]>,
    /// Steps of one backward half in reading order, then their (code, length,
    /// mantissa, length); both reused.
    back_steps: Vec<(usize, u64, u32)>,
    back_codes: Vec<(u64, u32, u64, u32)>,
}

impl PsiBuilder {
    /// A builder for blocks of `block_len` entries.
    pub fn new(block_len: u64) -> Self {
        PsiBuilder {
            block_len,
            columns: vec![ColumnState::default(); NUM_COLUMNS],
            freqs: [[0; NUM_SYMBOLS]; CODE_CONTEXTS],
            code_lengths: [[0; NUM_SYMBOLS]; CODE_CONTEXTS],
            encoders: None,
            back_steps: Vec::new(),
            back_codes: Vec::new(),
        }
    }

    fn emit(&mut self, c: usize, symbol: usize, mantissa: u64, mantissa_bits: u32) {
        let context = usize::from(self.columns[c].after_run);
        self.columns[c].after_run = huffman::is_run(symbol);
        match &self.encoders {
            None => self.freqs[context][symbol] += 1,
            Some(encoders) => {
                let (code, len) = encoders[context].code(symbol);
                let writer = &mut self.columns[c].writer;
                writer.push(u64::from(code), len);
                writer.push(mantissa, mantissa_bits);
            }
        }
    }

    /// Codes a pending run: with its length before a gap step, or (`at_part_end`) as a
    /// run through the end of the part, whose length the reader knows.
    fn flush_run(&mut self, c: usize, at_part_end: bool) {
        let run = self.columns[c].run;
        if run > 0 {
            let (symbol, mantissa, bits) = if at_part_end {
                (huffman::END_RUN_SYMBOL, 0, 0)
            } else {
                huffman::run_symbol(run)
            };
            self.emit(c, symbol, mantissa, bits);
            self.columns[c].run = 0;
        }
    }

    /// Codes the gap into `value` forward.
    fn code_forward(&mut self, c: usize, value: u64) {
        let gap = value - self.columns[c].coded_prev;
        self.columns[c].coded_prev = value;
        if gap == 1 {
            self.columns[c].run += 1;
        } else {
            self.flush_run(c, false);
            let (symbol, mantissa, bits) = huffman::gap_symbol(gap);
            self.emit(c, symbol, mantissa, bits);
        }
    }

    /// Codes the held second half of column `c`'s current block backward from
    /// `next_first`, the first value of the block after it: the steps, in reading order
    /// from `next_first` down, are written last step first with every bit reversed, so
    /// a reader starting at the next block's bit offset and going down meets them in
    /// order, each code before its mantissa.
    fn code_second_half_backward(&mut self, c: usize, next_first: u64) {
        self.flush_run(c, true);
        let mut steps = std::mem::take(&mut self.back_steps);
        steps.clear();
        let half = std::mem::take(&mut self.columns[c].second_half);
        let mut above = next_first;
        let mut run = 0u64;
        for &value in half.iter().rev() {
            let gap = above - value;
            above = value;
            if gap == 1 {
                run += 1;
                continue;
            }
            if run > 0 {
                steps.push(huffman::run_symbol(run));
                run = 0;
            }
            steps.push(huffman::gap_symbol(gap));
        }
        if run > 0 {
            steps.push((huffman::END_RUN_SYMBOL, 0, 0));
        }
        let mut after_run = false;
        let mut coded = std::mem::take(&mut self.back_codes);
        coded.clear();
        for &(symbol, mantissa, mantissa_bits) in &steps {
            let context = usize::from(after_run);
            after_run = huffman::is_run(symbol);
            match &self.encoders {
                None => self.freqs[context][symbol] += 1,
                Some(encoders) => {
                    let (code, len) = encoders[context].code(symbol);
                    coded.push((u64::from(code), len, mantissa, mantissa_bits));
                }
            }
        }
        let writer = &mut self.columns[c].writer;
        for &(code, len, mantissa, mantissa_bits) in coded.iter().rev() {
            writer.push(
                bits::reverse_low_bits(mantissa, mantissa_bits),
                mantissa_bits,
            );
            writer.push(bits::reverse_low_bits(code, len), len);
        }
        self.back_steps = steps;
        self.back_codes = coded;
        let mut half = half;
        half.clear();
        self.columns[c].second_half = half;
    }

    /// Ends column `c`'s last block: its held second half is coded forward.
    fn end_column(&mut self, c: usize) {
        let half = std::mem::take(&mut self.columns[c].second_half);
        for &value in &half {
            self.code_forward(c, value);
        }
        self.flush_run(c, true);
    }

    /// Feeds the next value of column `c`.
    #[inline]
    pub fn push(&mut self, c: usize, value: u64) {
        let state = &mut self.columns[c];
        let position = state.entries;
        state.entries += 1;
        debug_assert!(
            position == 0 || value > state.prev,
            "psi must increase within a column"
        );
        state.prev = value;
        let k = position & (self.block_len - 1);
        if k == 0 {
            if position > 0 {
                self.code_second_half_backward(c, value);
            }
            let state = &mut self.columns[c];
            state.after_run = false;
            state.coded_prev = value;
            if self.encoders.is_some() {
                let local = state.writer.len_bits();
                state.blocks.push((value, local));
            }
        } else if k < self.block_len / 2 {
            self.code_forward(c, value);
        } else {
            state.second_half.push(value);
        }
    }

    /// Ends the counting pass and fixes the code; the next pass must feed the same values.
    pub fn start_encoding(&mut self) {
        for c in 0..NUM_COLUMNS {
            self.end_column(c);
        }
        self.code_lengths = [
            huffman::code_lengths(&self.freqs[0]),
            huffman::code_lengths(&self.freqs[1]),
        ];
        self.encoders = Some([
            HuffmanEncoder::new(&self.code_lengths[0]),
            HuffmanEncoder::new(&self.code_lengths[1]),
        ]);
        for state in &mut self.columns {
            *state = ColumnState::default();
        }
    }

    /// Ends the encoding pass and assembles the Psi.
    pub fn finish(mut self) -> Psi {
        assert!(
            self.encoders.is_some(),
            "finish called before start_encoding"
        );
        for c in 0..NUM_COLUMNS {
            self.end_column(c);
        }
        let mut column_starts = Vec::with_capacity(NUM_COLUMNS + 1);
        let mut column_first_block = Vec::with_capacity(NUM_COLUMNS + 1);
        let (mut entries, mut blocks) = (0u64, 0u64);
        let mut stream = BitWriter::new();
        let mut block_table: Vec<(u64, u64)> = Vec::new();
        for state in &self.columns {
            column_starts.push(entries);
            column_first_block.push(blocks);
            entries += state.entries;
            blocks += state.blocks.len() as u64;
            let base = stream.len_bits();
            block_table.extend(
                state
                    .blocks
                    .iter()
                    .map(|&(first, local)| (first, base + local)),
            );
            stream.append(&state.writer);
        }
        column_starts.push(entries);
        column_first_block.push(blocks);
        let stream_bits = stream.len_bits();
        let value_width = bits::width_for(entries.saturating_sub(1));
        // The superblock size with the smallest total (relative offsets in every header
        // plus one absolute offset per superblock) among those whose headers fit a peek.
        let offset_width_for = |superblock_blocks: u64| -> u32 {
            let max_relative = block_table
                .chunks(superblock_blocks as usize)
                .map(|chunk| chunk.last().map_or(0, |last| last.1 - chunk[0].1))
                .max()
                .unwrap_or(0);
            bits::width_for(max_relative)
        };
        let blocks_total = block_table.len() as u64;
        let superblock_blocks = [1u64, 2, 4, 8, 16, 32, 64, 128, 256]
            .into_iter()
            .filter(|&sb| value_width + offset_width_for(sb) <= bits::MAX_PACKED_WIDTH_BITS)
            .min_by_key(|&sb| {
                blocks_total * u64::from(offset_width_for(sb)) + blocks_total.div_ceil(sb) * 64
            })
            .unwrap_or(1);
        let offset_width = offset_width_for(superblock_blocks);
        let superblock_offsets: Vec<u64> = block_table
            .chunks(superblock_blocks as usize)
            .map(|chunk| chunk[0].1)
            .collect();
        let header_width = value_width + offset_width;
        let headers = bits::pack(
            block_table.iter().enumerate().map(|(b, &(first, pos))| {
                first | ((pos - superblock_offsets[b / superblock_blocks as usize]) << value_width)
            }),
            header_width,
        );
        let mut superblocks = Vec::with_capacity(superblock_offsets.len() * 8);
        for offset in &superblock_offsets {
            superblocks.extend_from_slice(&offset.to_le_bytes());
        }
        let layout = PsiLayout {
            entries,
            block_len: self.block_len,
            superblock_blocks,
            value_width,
            offset_width,
            stream_bits,
            column_starts,
            column_first_block,
            code_lengths: self.code_lengths,
        };
        Psi::from_parts(
            layout,
            SharedBytes::from_vec(headers),
            SharedBytes::from_vec(superblocks),
            SharedBytes::from_vec(stream.into_padded_bytes()),
        )
        .expect("a freshly built psi is consistent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Columns of strictly increasing values below `entries`, mixing runs of +1 (coded
    /// as run steps) with small and large gaps, built through both passes.
    fn columns_strategy() -> impl Strategy<Value = (Vec<Vec<u64>>, u64)> {
        (
            prop::collection::vec((0usize..4, 0usize..300, any::<u64>()), 1..6),
            0u32..7,
        )
            .prop_map(|(specs, block_log2)| {
                let mut columns = vec![Vec::new(); NUM_COLUMNS];
                for (slot, (kind, size, seed)) in specs.into_iter().enumerate() {
                    let mut x = seed | 1;
                    let mut value = x % 7;
                    for _ in 0..size {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        columns[1 + slot * 40].push(value);
                        value += match (kind, x % 8) {
                            (0, _) => 1,
                            (1, 0..=5) => 1,
                            (2, _) => 1 + x % 3,
                            _ => 1 + (x >> 8) % 64,
                        };
                    }
                }
                // Entries must exceed every value: count them all, then pad the sentinel column.
                let max = columns.iter().flatten().max().copied().unwrap_or(0);
                let total: u64 = columns.iter().map(|c| c.len() as u64).sum();
                let pad = (max + 1).saturating_sub(total);
                columns[0] = (0..pad.max(1)).collect();
                (columns, 2u64 << block_log2)
            })
    }

    fn build(columns: &[Vec<u64>], block_len: u64) -> Psi {
        let mut builder = PsiBuilder::new(block_len);
        for (c, values) in columns.iter().enumerate() {
            values.iter().for_each(|&v| builder.push(c, v));
        }
        builder.start_encoding();
        for (c, values) in columns.iter().enumerate() {
            values.iter().for_each(|&v| builder.push(c, v));
        }
        builder.finish()
    }

    /// Checks every entry (alone and batched) and every rank against the plain values.
    fn check_against_plain(psi: &Psi, columns: &[Vec<u64>]) {
        let plain: Vec<u64> = columns.iter().flatten().copied().collect();
        assert_eq!(psi.entries(), plain.len() as u64);
        for (i, &want) in plain.iter().enumerate() {
            assert_eq!(psi.get(i as u64), want, "entry {i}");
        }
        let mut indices: Vec<u64> = (0..plain.len() as u64).rev().collect();
        psi.advance_all(&mut indices, &mut Vec::new());
        assert!(indices.iter().eq(plain.iter().rev()), "batched lookups");
        for (c, values) in columns.iter().enumerate() {
            for bound in values.iter().flat_map(|&v| [v, v + 1]) {
                let want = values.partition_point(|&v| v < bound) as u64;
                assert_eq!(psi.count_less(c, bound), want, "column {c} bound {bound}");
            }
        }
    }

    /// The limits of a run that ends a part: with 4096-entry blocks, a last block whose
    /// entries after the first are one run (4095 entries, as many as the run reports),
    /// and a single end-of-part run among many gaps, whose code is then longer than a
    /// table lookup resolves (the slow path).
    #[test]
    fn end_of_part_runs_at_their_limits() {
        let block_len = 4096u64;
        let mut columns = vec![Vec::new(); NUM_COLUMNS];
        // Column 1: three blocks and a bit of varied gaps; the first block's first half
        // ends in a run.
        let (mut value, mut x) = (0u64, 0x2545_F491_4F6C_DD1Du64);
        for i in 0..3 * block_len + 100 {
            columns[1].push(value);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let in_run = (block_len / 2 - 40..block_len / 2).contains(&(i + 1));
            // Gaps whose octave is geometric: a skewed code, deep enough that the two
            // end-of-part runs get codes longer than a table lookup.
            let octave = (x >> 8).trailing_zeros().min(12);
            value += if in_run {
                1
            } else {
                (2 + (x >> 40) % 2) << octave
            };
        }
        // Column 2: one block of 4096 entries, 1 then a run of 4095.
        let start = value + 10;
        columns[2] = (start..start + block_len).collect();
        // Enough entries that every value is below their number, in two columns of gaps
        // of two (odd and even values): no runs anywhere else.
        let entries = start + block_len;
        let rest = entries - columns[1].len() as u64 - block_len;
        columns[0] = (0..rest / 2).map(|j| 2 * j + 1).collect();
        columns[3] = (0..rest - rest / 2).map(|j| 2 * j).collect();
        let psi = build(&columns, block_len);
        let end_run_code = psi.layout.code_lengths[0][huffman::END_RUN_SYMBOL]
            .max(psi.layout.code_lengths[1][huffman::END_RUN_SYMBOL]);
        assert!(
            u32::from(end_run_code) > huffman::TABLE_BITS,
            "the rare end-of-part run should take the slow path (code length {end_run_code})"
        );
        check_against_plain(&psi, &columns);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every entry, one by one and in batches (in order, reversed: the back halves
        /// of blocks are read from the next block's header), and every column rank,
        /// against the plain values.
        #[test]
        fn entries_and_ranks_match_the_plain_values((columns, block_len) in columns_strategy()) {
            let psi = build(&columns, block_len);
            let plain: Vec<u64> = columns.iter().flatten().copied().collect();
            prop_assert_eq!(psi.entries(), plain.len() as u64);
            for (i, &want) in plain.iter().enumerate() {
                prop_assert_eq!(psi.get(i as u64), want, "entry {} block_len {}", i, block_len);
            }
            let mut scratch = Vec::new();
            for order in [false, true] {
                let mut indices: Vec<u64> = (0..plain.len() as u64).collect();
                if order {
                    indices.reverse();
                }
                let want: Vec<u64> = indices.iter().map(|&i| plain[i as usize]).collect();
                psi.advance_all(&mut indices, &mut scratch);
                prop_assert_eq!(indices, want);
            }
            for (c, values) in columns.iter().enumerate() {
                let probes = values.iter().flat_map(|&v| [v, v + 1]).chain([0, 1, u64::MAX / 2]);
                for bound in probes {
                    let want = values.iter().filter(|&&v| v < bound).count() as u64;
                    prop_assert_eq!(psi.count_less(c, bound), want, "column {} bound {}", c, bound);
                    let high = bound.saturating_add(5);
                    let want_high = values.iter().filter(|&&v| v < high).count() as u64;
                    prop_assert_eq!(psi.count_less_pair(c, bound, high), (want, want_high));
                }
            }
        }
    }
}
