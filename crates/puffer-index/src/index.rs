//! [`TextIndex`]: the public face of the compressed index, and its layer control.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::bits::{self, SharedBytes};
use crate::build::{build_parts, BuildOptions, BuildPhase};
use crate::error::{IndexError, Result};
use crate::lsa::{Layer, LayeredSampledArray};
use crate::psi::Psi;
use crate::query::QueryView;

/// Longest pattern a query accepts.
pub const MAX_PATTERN_BYTES: usize = 1 << 16;

/// How a new sample layer is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Construction {
    /// A background thread computes the whole layer; queries use it once complete.
    Dedicated,
    /// The layer is allocated at once and filled by the values queries compute.
    Opportunistic,
}

/// A match of [`TextIndex::wildcard_search`]: `text[start..start+len]` begins with the
/// prefix and ends with the suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WildcardMatch {
    /// Offset of the prefix.
    pub start: u64,
    /// Bytes from the prefix start to the suffix end.
    pub len: u64,
}

/// Footprint of one layer of one sampled array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerFootprint {
    /// 0 = base.
    pub level: u32,
    /// Sampling rate of the layer.
    pub rate: u64,
    /// Bytes held.
    pub bytes: u64,
    /// Values the layer holds when complete.
    pub entries: u64,
    /// Values present now.
    pub filled_entries: u64,
}

/// Exact footprint of every component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Text length.
    pub text_bytes: u64,
    /// Psi block headers.
    pub psi_headers_bytes: u64,
    /// Psi superblock offsets.
    pub psi_superblocks_bytes: u64,
    /// Psi coded gaps.
    pub psi_stream_bytes: u64,
    /// Column tables, code and decode table.
    pub psi_tables_bytes: u64,
    /// SA layers that exist.
    pub sa_layers: Vec<LayerFootprint>,
    /// ISA layers that exist.
    pub isa_layers: Vec<LayerFootprint>,
}

impl Footprint {
    /// Psi total.
    pub fn psi_bytes(&self) -> u64 {
        self.psi_headers_bytes
            + self.psi_superblocks_bytes
            + self.psi_stream_bytes
            + self.psi_tables_bytes
    }

    /// Everything.
    pub fn total_bytes(&self) -> u64 {
        self.psi_bytes()
            + self.sa_layers.iter().map(|l| l.bytes).sum::<u64>()
            + self.isa_layers.iter().map(|l| l.bytes).sum::<u64>()
    }
}

pub(crate) struct Core {
    pub text_len: u64,
    pub psi: Psi,
    pub sa: LayeredSampledArray,
    pub isa: LayeredSampledArray,
    control: Mutex<LayerControl>,
}

#[derive(Default)]
struct LayerControl {
    pending: Option<PendingBuild>,
}

struct PendingBuild {
    level: u32,
    cancel: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// A compressed, queryable index over a byte string. Cheap to clone (shared).
#[derive(Clone)]
pub struct TextIndex {
    core: Arc<Core>,
}

impl TextIndex {
    /// Builds an index of `text` with default options.
    pub fn build(text: &[u8]) -> Result<TextIndex> {
        Self::build_with(text, &BuildOptions::default(), &mut |_, _| {})
    }

    /// Builds an index; `progress(phase, fraction)` is called along the way.
    pub fn build_with(
        text: &[u8],
        options: &BuildOptions,
        progress: &mut dyn FnMut(BuildPhase, f64),
    ) -> Result<TextIndex> {
        let parts = build_parts(text, options, progress)?;
        let sa_layers = parts.sa_layers.into_iter().map(Some).collect();
        let isa_layers = parts.isa_layers.into_iter().map(Some).collect();
        Ok(Self::from_components(
            parts.text_len,
            parts.psi,
            LayeredSampledArray::new(parts.sa_shape, sa_layers),
            LayeredSampledArray::new(parts.isa_shape, isa_layers),
        ))
    }

    pub(crate) fn from_components(
        text_len: u64,
        psi: Psi,
        sa: LayeredSampledArray,
        isa: LayeredSampledArray,
    ) -> Self {
        TextIndex {
            core: Arc::new(Core {
                text_len,
                psi,
                sa,
                isa,
                control: Mutex::new(LayerControl::default()),
            }),
        }
    }

    /// The Psi array, for development probes and benchmarks.
    #[doc(hidden)]
    pub fn psi_for_probe(&self) -> &Psi {
        &self.core.psi
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    /// Opens an index file by memory-mapping it; every section's checksum is verified.
    pub fn open(path: impl AsRef<Path>) -> Result<TextIndex> {
        crate::format::open(path.as_ref())
    }

    /// Writes the index (its complete layers) to `path` atomically (temporary file, fsync, rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        crate::format::save(self, path.as_ref())
    }

    /// Writes the index file format to `out` (no temporary file, no fsync: the caller
    /// owns durability); returns the bytes written.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> Result<u64> {
        crate::format::write_to(self, out)
    }

    fn view(&self) -> QueryView<'_> {
        QueryView {
            psi: &self.core.psi,
            sa: &self.core.sa,
            isa: &self.core.isa,
            sa_layers: self.core.sa.view(),
            isa_layers: self.core.isa.view(),
            text_len: self.core.text_len,
        }
    }

    /// Length of the indexed text.
    pub fn text_len(&self) -> u64 {
        self.core.text_len
    }

    fn check_pattern(pattern: &[u8], what: &str) -> Result<()> {
        if pattern.is_empty() {
            return Err(IndexError::InvalidArgument(format!(
                "{what} must not be empty"
            )));
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(IndexError::InvalidArgument(format!(
                "{what} is {} bytes; the limit is {MAX_PATTERN_BYTES}",
                pattern.len()
            )));
        }
        Ok(())
    }

    /// `text[offset..offset+len]`, cut at the end of the text. `offset` may equal the length.
    pub fn extract(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        if offset > self.core.text_len {
            return Err(IndexError::InvalidArgument(format!(
                "offset {offset} is past the end of the text ({} bytes)",
                self.core.text_len
            )));
        }
        let len = len.min(self.core.text_len - offset);
        Ok(self.view().extract(offset, len))
    }

    /// Number of occurrences of `pattern`.
    pub fn count(&self, pattern: &[u8]) -> Result<u64> {
        Self::check_pattern(pattern, "pattern")?;
        let (start, end) = self.view().suffix_range(pattern);
        Ok(end - start)
    }

    /// Half-open range of suffix-array entries whose suffixes start with `pattern`.
    /// Entry 0 is the empty sentinel suffix, so a non-empty pattern never includes it.
    pub fn suffix_range(&self, pattern: &[u8]) -> Result<(u64, u64)> {
        Self::check_pattern(pattern, "pattern")?;
        Ok(self.view().suffix_range(pattern))
    }

    /// First suffix-array entry whose suffix is `>= bound` (never the sentinel entry 0).
    pub fn first_entry_at_least(&self, bound: &[u8]) -> Result<u64> {
        Self::check_bound(bound)?;
        Ok(self.view().lower_bound(bound).max(1))
    }

    /// First suffix-array entry whose suffix is `> bound` and does not start with `bound`.
    pub fn first_entry_past(&self, bound: &[u8]) -> Result<u64> {
        Self::check_bound(bound)?;
        Ok(self.view().upper_bound(bound).max(1))
    }

    /// Number of suffix-array entries (text length + 1, the sentinel included).
    pub fn entries(&self) -> u64 {
        self.core.text_len + 1
    }

    /// Text offsets of suffix-array entries `start..end`, in entry order (not sorted).
    pub fn locate(&self, start: u64, end: u64) -> Result<Vec<u64>> {
        self.locate_runs(&[(start, end)])
    }

    /// Text offsets of the entries of each run `start..end`, runs in the order given and
    /// entries in order within each; one lockstep locate for all of them.
    pub fn locate_runs(&self, runs: &[(u64, u64)]) -> Result<Vec<u64>> {
        for &(start, end) in runs {
            if start > end || end > self.entries() || (start == 0 && end > 0) {
                return Err(IndexError::InvalidArgument(format!(
                    "entry range {start}..{end} is not within 1..{}",
                    self.entries()
                )));
            }
        }
        self.view().locate_runs(runs).map_err(inconsistent_index)
    }

    fn check_bound(bound: &[u8]) -> Result<()> {
        if bound.len() > MAX_PATTERN_BYTES {
            return Err(IndexError::InvalidArgument(format!(
                "a bound of {} bytes exceeds {MAX_PATTERN_BYTES} bytes",
                bound.len()
            )));
        }
        Ok(())
    }

    /// Offsets of all occurrences, ascending; with `limit`, only the smallest `limit`.
    pub fn search(&self, pattern: &[u8], limit: Option<usize>) -> Result<Vec<u64>> {
        Self::check_pattern(pattern, "pattern")?;
        let view = self.view();
        let (start, end) = view.suffix_range(pattern);
        let offsets = view.locate_range(start, end).map_err(inconsistent_index)?;
        Ok(sorted_limited(offsets, limit))
    }

    /// Offsets `j` whose suffix is `>= lo` and whose first `hi.len()` bytes are `<= hi`
    /// (lexicographic byte order), ascending; with `limit`, only the smallest `limit`.
    pub fn range_search(&self, lo: &[u8], hi: &[u8], limit: Option<usize>) -> Result<Vec<u64>> {
        let view = self.view();
        let Some((start, end)) = Self::range_entries(&view, lo, hi)? else {
            return Ok(Vec::new());
        };
        let offsets = view.locate_range(start, end).map_err(inconsistent_index)?;
        Ok(sorted_limited(offsets, limit))
    }

    /// Number of offsets [`TextIndex::range_search`] finds for `lo` and `hi` (without a
    /// limit), counted without locating them.
    pub fn range_count(&self, lo: &[u8], hi: &[u8]) -> Result<u64> {
        let view = self.view();
        Ok(Self::range_entries(&view, lo, hi)?.map_or(0, |(start, end)| end - start))
    }

    /// The non-empty half-open entry range of `range_search(lo, hi)`, or `None`.
    fn range_entries(view: &QueryView<'_>, lo: &[u8], hi: &[u8]) -> Result<Option<(u64, u64)>> {
        for (bound, name) in [(lo, "lower bound"), (hi, "upper bound")] {
            if bound.len() > MAX_PATTERN_BYTES {
                return Err(IndexError::InvalidArgument(format!(
                    "{name} exceeds {MAX_PATTERN_BYTES} bytes"
                )));
            }
        }
        // Entry 0 is the sentinel (empty) suffix, never a text offset.
        let start = view.lower_bound(lo).max(1);
        let end = view.upper_bound(hi);
        Ok((start < end).then_some((start, end)))
    }

    /// Matches of `prefix`, then at most `max_gap` bytes, then `suffix`
    /// (`suffix` starts at or after the prefix ends), ascending by (start, len); with
    /// `limit`, only the first `limit` of that order.
    pub fn wildcard_search(
        &self,
        prefix: &[u8],
        suffix: &[u8],
        max_gap: u64,
        limit: Option<usize>,
    ) -> Result<Vec<WildcardMatch>> {
        Self::check_pattern(prefix, "prefix")?;
        Self::check_pattern(suffix, "suffix")?;
        let prefixes = self.search(prefix, None)?;
        let suffixes = self.search(suffix, None)?;
        let limit = limit.unwrap_or(usize::MAX);
        let mut matches = Vec::new();
        if limit == 0 {
            return Ok(matches);
        }
        'outer: for &p in &prefixes {
            let earliest = p + prefix.len() as u64;
            let first = suffixes.partition_point(|&s| s < earliest);
            for &s in &suffixes[first..] {
                if s - earliest > max_gap {
                    break;
                }
                matches.push(WildcardMatch {
                    start: p,
                    len: s + suffix.len() as u64 - p,
                });
                if matches.len() >= limit {
                    break 'outer;
                }
            }
        }
        Ok(matches)
    }

    /// Number of layers that exist (base included).
    pub fn layer_count(&self) -> u32 {
        self.core.sa.view().depth()
    }

    /// Number of layers the index can have.
    pub fn max_layers(&self) -> u32 {
        self.core.sa.shape().levels
    }

    /// Adds the next layer below the existing ones to both sampled arrays; returns its level.
    /// Dedicated construction returns at once and publishes the layer when done
    /// ([`TextIndex::wait_for_layer_build`] waits for it).
    pub fn add_layer(&self, construction: Construction) -> Result<u32> {
        let mut control = self.core.control.lock().expect("layer control poisoned");
        reap_finished(&mut control);
        if let Some(pending) = &control.pending {
            return Err(IndexError::Layer(format!(
                "layer {} is still being built",
                pending.level
            )));
        }
        let level = self.layer_count();
        if level >= self.max_layers() {
            return Err(IndexError::Layer(format!(
                "all {} layers already exist",
                self.max_layers()
            )));
        }
        match construction {
            Construction::Opportunistic => {
                for (lsa, is_isa) in [(&self.core.sa, false), (&self.core.isa, true)] {
                    let shape = lsa.shape();
                    let layer = Layer::filling(level, shape.layer_entries(level), shape.width);
                    if is_isa {
                        // ISA[n] = 0 (the sentinel suffix sorts first); no walk ever reaches
                        // position n, so store it now or the layer could never complete.
                        if let Some((slot_level, k)) = shape.slot(self.core.text_len) {
                            if slot_level == level {
                                layer.offer(k, 0);
                            }
                        }
                    }
                    lsa.publish(level, Some(Arc::new(layer)));
                }
            }
            Construction::Dedicated => {
                let cancel = Arc::new(AtomicBool::new(false));
                let index = self.clone();
                let cancel_flag = cancel.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("puffer-layer-{level}"))
                    .spawn(move || index.build_layer_dedicated(level, &cancel_flag))
                    .map_err(|e| IndexError::Layer(format!("cannot start builder thread: {e}")))?;
                control.pending = Some(PendingBuild {
                    level,
                    cancel,
                    handle,
                });
            }
        }
        Ok(level)
    }

    fn build_layer_dedicated(&self, level: u32, cancel: &AtomicBool) {
        let view = self.view();
        let cancelled = || cancel.load(Ordering::Relaxed);
        let Some((sa_values, isa_values)) = view.compute_layer(level, &cancelled) else {
            return;
        };
        drop(view);
        // Publish under the control lock so a concurrent drop cannot interleave.
        let _control = self.core.control.lock().expect("layer control poisoned");
        if cancel.load(Ordering::Relaxed) || self.layer_count() != level {
            return;
        }
        for (lsa, values) in [(&self.core.sa, sa_values), (&self.core.isa, isa_values)] {
            let shape = lsa.shape();
            let packed = bits::pack(values.iter().copied(), shape.width);
            let layer = Layer::frozen(
                level,
                values.len() as u64,
                shape.width,
                SharedBytes::from_vec(packed),
            );
            lsa.publish(level, Some(Arc::new(layer)));
        }
    }

    /// Blocks until a dedicated layer build (if any) has finished or been cancelled.
    pub fn wait_for_layer_build(&self) {
        let pending = self
            .core
            .control
            .lock()
            .expect("layer control poisoned")
            .pending
            .take();
        if let Some(pending) = pending {
            let _ = pending.handle.join();
        }
    }

    /// Drops the deepest layer (or cancels a dedicated build in progress); returns its level.
    /// Memory is released when the last query that may read the layer finishes.
    pub fn drop_layer(&self) -> Result<u32> {
        let pending = {
            let mut control = self.core.control.lock().expect("layer control poisoned");
            reap_finished(&mut control);
            match control.pending.take() {
                Some(pending) => {
                    // Under the lock: the builder checks the flag under the same lock before
                    // it publishes, so after this it cannot publish any more.
                    pending.cancel.store(true, Ordering::Relaxed);
                    pending
                }
                None => {
                    let depth = self.layer_count();
                    if depth <= 1 {
                        return Err(IndexError::Layer("the base layer cannot be dropped".into()));
                    }
                    let level = depth - 1;
                    self.core.sa.publish(level, None);
                    self.core.isa.publish(level, None);
                    return Ok(level);
                }
            }
        };
        let _ = pending.handle.join();
        // The build may have published just before the flag was set: drop it then.
        let _control = self.core.control.lock().expect("layer control poisoned");
        if self.layer_count() > pending.level {
            self.core.sa.publish(pending.level, None);
            self.core.isa.publish(pending.level, None);
        }
        Ok(pending.level)
    }

    /// Bytes a layer at `level` takes in both sampled arrays when built by `construction`
    /// (an opportunistic layer also carries its filled-bitmap), whether it exists or not.
    pub fn layer_bytes(&self, level: u32, construction: Construction) -> u64 {
        [&self.core.sa, &self.core.isa]
            .iter()
            .map(|lsa| {
                let shape = lsa.shape();
                if level >= shape.levels {
                    return 0;
                }
                let entries = shape.layer_entries(level);
                match construction {
                    Construction::Dedicated => bits::packed_len_bytes(entries, shape.width) as u64,
                    Construction::Opportunistic => {
                        let words = (entries * shape.width as u64).div_ceil(64) + 1;
                        (words + entries.div_ceil(64)) * 8
                    }
                }
            })
            .sum()
    }

    /// Whether a dedicated build is running.
    pub fn layer_build_pending(&self) -> bool {
        let mut control = self.core.control.lock().expect("layer control poisoned");
        reap_finished(&mut control);
        control.pending.is_some()
    }

    /// Exact footprint of every component and layer.
    pub fn footprint(&self) -> Footprint {
        let psi = self.core.psi.footprint();
        let layers = |lsa: &LayeredSampledArray| -> Vec<LayerFootprint> {
            let view = lsa.view();
            view.layers
                .iter()
                .flatten()
                .map(|layer| LayerFootprint {
                    level: layer.level,
                    rate: lsa.shape().rate(layer.level),
                    bytes: layer.bytes(),
                    entries: layer.entries,
                    filled_entries: layer.filled_entries(),
                })
                .collect()
        };
        Footprint {
            text_bytes: self.core.text_len,
            psi_headers_bytes: psi.headers_bytes,
            psi_superblocks_bytes: psi.superblocks_bytes,
            psi_stream_bytes: psi.stream_bytes,
            psi_tables_bytes: psi.tables_bytes,
            sa_layers: layers(&self.core.sa),
            isa_layers: layers(&self.core.isa),
        }
    }
}

fn reap_finished(control: &mut LayerControl) {
    if control
        .pending
        .as_ref()
        .is_some_and(|p| p.handle.is_finished())
    {
        if let Some(pending) = control.pending.take() {
            let _ = pending.handle.join();
        }
    }
}

fn inconsistent_index(detail: String) -> IndexError {
    IndexError::Corrupt {
        path: "(index in memory)".into(),
        section: "psi".into(),
        detail,
    }
}

fn sorted_limited(mut offsets: Vec<u64>, limit: Option<usize>) -> Vec<u64> {
    match limit {
        Some(k) if k < offsets.len() => {
            if k > 0 {
                offsets.select_nth_unstable(k - 1);
            }
            offsets.truncate(k);
            offsets.sort_unstable();
        }
        _ => offsets.sort_unstable(),
    }
    offsets
}
