//! Query algorithms on the compressed representation: backward search over Psi,
//! locating by interleaved Psi walks to the nearest SA sample, extracting by
//! interleaved walks from ISA samples. Walks feed layers being filled (BlowFish Algorithm 1).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use crate::lsa::{LayerSet, LayeredSampledArray};
use crate::psi::{column_of_byte, Psi};

/// The immutable parts a query needs, plus the layer sets it loaded at its start.
pub(crate) struct QueryView<'a> {
    pub psi: &'a Psi,
    pub sa: &'a LayeredSampledArray,
    pub isa: &'a LayeredSampledArray,
    pub sa_layers: Arc<LayerSet>,
    pub isa_layers: Arc<LayerSet>,
    pub text_len: u64,
}

/// A locate walk longer than this many times the densest sampling rate starts
/// recording its path (random-looking text almost never gets there).
const LONG_WALK_RATES: u64 = 4;

/// Walks processed in lockstep; enough to overlap cache misses, few enough to stay in cache.
const WALK_BATCH: usize = 256;

impl QueryView<'_> {
    /// Half-open range of suffix-array entries whose suffixes start with `pattern`.
    pub fn suffix_range(&self, pattern: &[u8]) -> (u64, u64) {
        let Some((&last, rest)) = pattern.split_last() else {
            return (0, self.psi.entries());
        };
        let c = column_of_byte(last);
        let (mut start, mut end) = (self.psi.column_start(c), self.psi.column_start(c + 1));
        for &byte in rest.iter().rev() {
            if start >= end {
                break;
            }
            let c = column_of_byte(byte);
            let base = self.psi.column_start(c);
            let (below_start, below_end) = self.psi.count_less_pair(c, start, end);
            start = base + below_start;
            end = base + below_end;
        }
        (start, end.max(start))
    }

    /// Number of suffixes (sentinel included) lexicographically smaller than `s`.
    pub fn lower_bound(&self, s: &[u8]) -> u64 {
        let mut rank = 0u64;
        for &byte in s.iter().rev() {
            let c = column_of_byte(byte);
            rank = self.psi.column_start(c) + self.psi.count_less(c, rank);
        }
        rank
    }

    /// Number of suffixes that are smaller than `s` or start with `s`.
    pub fn upper_bound(&self, s: &[u8]) -> u64 {
        let mut rank = self.psi.entries();
        for &byte in s.iter().rev() {
            let c = column_of_byte(byte);
            rank = self.psi.column_start(c) + self.psi.count_less(c, rank);
        }
        rank
    }

    /// Text offsets of suffix-array entries `start..end` (unsorted, in entry order).
    ///
    /// Up to [`WALK_BATCH`] walks along Psi run in lockstep, each until it meets an SA
    /// sample; a finished walk leaves the batch (the others keep their order) and the
    /// next entry of the range takes its place, so the long tail of one walk overlaps
    /// with the start of others.
    ///
    /// Walks are short on most text, but in long runs and periodic stretches the entries
    /// of consecutive positions can be a constant stride apart and skip every sampled
    /// entry for the whole run. So a walk that grows long records the entries it visits;
    /// a walk that reaches an entry another walk already visited stops there and takes
    /// its offset from that walk (they share the rest of the path). Locating all
    /// occurrences inside a run then costs O(occurrences), not O(occurrences x run).
    /// Fails only on an inconsistent index (a walk that never meets a sample).
    pub fn locate_range(&self, start: u64, end: u64) -> Result<Vec<u64>, String> {
        self.locate_runs(&[(start, end)])
    }

    /// Text offsets of the entries of each run `start..end`, runs in the order given
    /// (as [`QueryView::locate_range`] of their concatenation). Walks of all runs share
    /// the lockstep batch, so many short runs cost about what one range of their total
    /// length costs.
    pub fn locate_runs(&self, runs: &[(u64, u64)]) -> Result<Vec<u64>, String> {
        const INCONSISTENT: &str =
            "a locate walk does not reach a sample: psi or the SA samples are inconsistent";
        let filling = self.sa_layers.any_filling || self.isa_layers.any_filling;
        let total: u64 = runs.iter().map(|&(start, end)| end - start).sum();
        let mut out = vec![0u64; total as usize];
        let mut entries = runs.iter().flat_map(|&(start, end)| start..end);
        let mut indices: Vec<u64> = Vec::with_capacity(WALK_BATCH);
        // Per live walk: (slot in `out`, round at which it started).
        let mut walks: Vec<(usize, u64)> = Vec::with_capacity(WALK_BATCH);
        let mut scratch = Vec::with_capacity(WALK_BATCH);
        let mut pending_fills: Vec<(usize, u64, u64)> = Vec::new();
        let long_walk_steps = LONG_WALK_RATES * self.finest_sa_rate();
        // Entries visited by long walks: entry -> (slot, steps at the visit).
        let mut visited: HashMap<u64, (usize, u64)> = HashMap::new();
        // out[slot] = out[target] + delta, for walks that joined another walk's path.
        let mut links: Vec<(usize, usize, i64)> = Vec::new();
        let mut next_slot = 0usize;
        let mut round = 0u64;
        loop {
            while indices.len() < WALK_BATCH {
                let Some(entry) = entries.next() else { break };
                indices.push(entry);
                walks.push((next_slot, round));
                next_slot += 1;
            }
            if indices.is_empty() {
                break;
            }
            // Finished walks are removed keeping the others in order: walks from one
            // suffix range then stay next to each other, and advance_all decodes
            // neighbours in one block together.
            let mut kept = 0;
            for j in 0..indices.len() {
                let (index, (slot, started)) = (indices[j], walks[j]);
                let steps = round - started;
                // Psi is one cycle through all entries and entry 0 is always sampled, so
                // a walk longer than the number of entries can only come from corrupt data.
                if steps > self.psi.entries() {
                    return Err(INCONSISTENT.into());
                }
                if let Some(value) = self.sa.get(&self.sa_layers, index) {
                    out[slot] = value.checked_sub(steps).ok_or(INCONSISTENT)?;
                    continue;
                }
                if filling && self.sa.shape().slot(index).is_some() {
                    pending_fills.push((slot, index, steps));
                }
                if steps >= long_walk_steps {
                    match visited.entry(index) {
                        Entry::Occupied(seen) if seen.get().0 != slot => {
                            let (target, target_steps) = *seen.get();
                            links.push((slot, target, target_steps as i64 - steps as i64));
                            continue;
                        }
                        Entry::Occupied(_) => return Err(INCONSISTENT.into()),
                        Entry::Vacant(vacant) => {
                            vacant.insert((slot, steps));
                        }
                    }
                }
                indices[kept] = index;
                walks[kept] = (slot, started);
                kept += 1;
            }
            indices.truncate(kept);
            walks.truncate(kept);
            self.psi.advance_all(&mut indices, &mut scratch);
            round += 1;
        }
        resolve_links(&mut out, &links).ok_or(INCONSISTENT)?;
        for &(slot, index, steps) in &pending_fills {
            let position = out[slot] + steps;
            self.sa.offer(&self.sa_layers, index, position);
            self.isa.offer(&self.isa_layers, position, index);
        }
        Ok(out)
    }

    /// The densest SA sampling rate among the layers this query sees.
    fn finest_sa_rate(&self) -> u64 {
        let depth = self.sa_layers.depth().max(1);
        self.sa.shape().rate(depth - 1)
    }

    /// The nearest ISA sample at or before `position` in the current layers: (position, entry).
    fn isa_sample_at_or_before(&self, position: u64) -> (u64, u64) {
        let shape = self.isa.shape();
        let mut rate_log2 = shape.target_rate_log2;
        loop {
            let candidate = (position >> rate_log2) << rate_log2;
            if let Some(entry) = self.isa.get(&self.isa_layers, candidate) {
                return (candidate, entry);
            }
            // The base layer always exists, so this ends at its rate at the latest.
            rate_log2 += 1;
        }
    }

    /// Bytes `offset..offset+len` of the text (the caller checked the range).
    pub fn extract(&self, offset: u64, len: u64) -> Vec<u8> {
        let mut out = vec![0u8; len as usize];
        if len == 0 {
            return out;
        }
        let end = offset + len;
        let target_rate = 1u64 << self.isa.shape().target_rate_log2;
        // One walk per available sample in the range, each ending where the next begins.
        let mut starts: Vec<(u64, u64)> = vec![self.isa_sample_at_or_before(offset)];
        let mut position = (offset / target_rate + 1) * target_rate;
        while position < end {
            if let Some(entry) = self.isa.get(&self.isa_layers, position) {
                starts.push((position, entry));
            }
            position += target_rate;
        }
        let filling = self.sa_layers.any_filling || self.isa_layers.any_filling;
        let mut scratch = Vec::with_capacity(WALK_BATCH);
        let (mut indices, mut positions, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for (group_start, group) in starts.chunks(WALK_BATCH).enumerate() {
            let first = group_start * WALK_BATCH;
            indices.clear();
            positions.clear();
            ends.clear();
            for (k, &(from, entry)) in group.iter().enumerate() {
                indices.push(entry);
                positions.push(from);
                ends.push(starts.get(first + k + 1).map_or(end, |next| next.0));
            }
            while !indices.is_empty() {
                let mut j = 0;
                while j < indices.len() {
                    let (index, position) = (indices[j], positions[j]);
                    if position >= offset {
                        out[(position - offset) as usize] = (self.psi.column_of(index) - 1) as u8;
                    }
                    if filling {
                        self.sa.offer(&self.sa_layers, index, position);
                        self.isa.offer(&self.isa_layers, position, index);
                    }
                    if position + 1 < ends[j] {
                        positions[j] = position + 1;
                        j += 1;
                    } else {
                        indices.swap_remove(j);
                        positions.swap_remove(j);
                        ends.swap_remove(j);
                    }
                }
                self.psi.advance_all(&mut indices, &mut scratch);
            }
        }
        out
    }

    /// Fills the values of layer `level` of both arrays by walking the whole text once,
    /// from base-layer ISA samples, many walks in lockstep. Returns `None` if `cancelled`.
    pub fn compute_layer(
        &self,
        level: u32,
        cancelled: &dyn Fn() -> bool,
    ) -> Option<(Vec<u64>, Vec<u64>)> {
        let sa_shape = *self.sa.shape();
        let isa_shape = *self.isa.shape();
        let mut sa_values = vec![0u64; sa_shape.layer_entries(level) as usize];
        let mut isa_values = vec![0u64; isa_shape.layer_entries(level) as usize];
        let base_rate = isa_shape.rate(0);
        let entries = self.text_len + 1;
        let segments = entries.div_ceil(base_rate);
        let mut scratch = Vec::with_capacity(WALK_BATCH);
        let mut indices = Vec::new();
        let mut first_segment = 0u64;
        while first_segment < segments {
            if cancelled() {
                return None;
            }
            let last_segment = (first_segment + WALK_BATCH as u64).min(segments);
            let base_layer = self.isa_layers.layers[0]
                .as_ref()
                .expect("base layer exists");
            let mut walks: Vec<ExtractWalk> = (first_segment..last_segment)
                .map(|s| ExtractWalk {
                    position: s * base_rate,
                    index: base_layer.get(s).expect("base layer is complete"),
                    end: ((s + 1) * base_rate).min(entries),
                })
                .collect();
            while !walks.is_empty() {
                for walk in walks.iter() {
                    if let Some((l, k)) = sa_shape.slot(walk.index) {
                        if l == level {
                            sa_values[k as usize] = walk.position;
                        }
                    }
                    if let Some((l, k)) = isa_shape.slot(walk.position) {
                        if l == level {
                            isa_values[k as usize] = walk.index;
                        }
                    }
                }
                for walk in walks.iter_mut() {
                    walk.position += 1;
                }
                walks.retain(|w| w.position < w.end);
                indices.clear();
                indices.extend(walks.iter().map(|w| w.index));
                self.psi.advance_all(&mut indices, &mut scratch);
                for (walk, &next) in walks.iter_mut().zip(indices.iter()) {
                    walk.index = next;
                }
            }
            first_segment = last_segment;
        }
        Some((sa_values, isa_values))
    }
}

/// Assigns `out[slot] = out[target] + delta` for every link, targets first; a link
/// chain is followed once and each slot is resolved once. `None` on a cycle or an
/// offset out of range (only possible on an inconsistent index).
fn resolve_links(out: &mut [u64], links: &[(usize, usize, i64)]) -> Option<()> {
    if links.is_empty() {
        return Some(());
    }
    let mut link_of: HashMap<usize, (usize, i64)> = links
        .iter()
        .map(|&(slot, target, delta)| (slot, (target, delta)))
        .collect();
    let mut chain = Vec::new();
    for &(first, _, _) in links {
        let mut slot = first;
        while let Some(&(target, delta)) = link_of.get(&slot) {
            chain.push((slot, target, delta));
            if chain.len() > links.len() {
                return None;
            }
            slot = target;
        }
        for &(slot, target, delta) in chain.iter().rev() {
            out[slot] = out[target].checked_add_signed(delta)?;
            link_of.remove(&slot);
        }
        chain.clear();
    }
    Some(())
}

struct ExtractWalk {
    position: u64,
    index: u64,
    end: u64,
}
