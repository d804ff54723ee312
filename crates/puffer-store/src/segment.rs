//! The compressed stage: immutable segments. A segment is two files:
//! - `seg-NNNNNN.idx`: the compressed index of the records' text (puffer-index format);
//! - `seg-NNNNNN.meta`: a checksummed container (magic `PUFFSEGM`, version 1) with
//!   section 1 = JSON facts (`records`, `text_len`, `max_seq`), section 2 = the key
//!   directory (keys ascending: a record's number is its key's rank), section 3 = the
//!   record boundaries, section 4 = the long-field directory (`fields.rs`; absent in
//!   segments written before it existed, which then place occurrences more slowly);
//!
//! plus, once records in it are deleted, `seg-NNNNNN.del-C`: a container (magic
//! `PUFFSDEL`, version 1) whose section 1 lists the deleted record numbers (u64 LE,
//! ascending) as of checkpoint C. Marks made after the checkpoint live in the log;
//!
//! plus, for each attribute whose layer was ever built here, `seg-NNNNNN.attr-A`
//! (`attr_layer.rs`), loaded instead of built when the layer is wanted again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

use puffer_index::{BuildOptions, TextIndex};
use serde::{Deserialize, Serialize};

use crate::attr_layer::{AttributeLayer, LayerShape};
use crate::bounds::{encode_bounds, RecordBounds};
use crate::codec::{self, Place, MARK};
use crate::column_layer::ColumnLayer;
use crate::container::{decode_sections, encode_sections, find_section};
use crate::error::{Result, StoreError};
use crate::fields::{encode_long_fields, LongFields, LONG_FIELD_MIN_BYTES};
use crate::fs::{write_file_atomic, write_file_atomic_with, Fs, FsWriter, RealFs};
use crate::keydir::{encode_keys, DecodedKeys, KeyDirectory};
use crate::layer_shelf::LayerShelf;
use crate::record_cache::RecordCache;
use crate::schema::{AttrType, StoredRecord};
use crate::stage::{Deletions, TextStage};

const META_MAGIC: [u8; 8] = *b"PUFFSEGM";
const DELETIONS_MAGIC: [u8; 8] = *b"PUFFSDEL";
const VERSION: u32 = 1;
const SECTION_FACTS: u32 = 1;
const SECTION_KEYS: u32 = 2;
const SECTION_BOUNDS: u32 = 3;
const SECTION_LONG_FIELDS: u32 = 4;
const SECTION_DELETED: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Facts {
    records: u64,
    text_len: u64,
    max_seq: u64,
}

/// An immutable compressed segment with its (mutable, versioned) deletion marks.
pub struct Segment {
    /// Segment number (names its files).
    pub id: u64,
    index: TextIndex,
    keys: KeyDirectory,
    bounds: RecordBounds,
    /// `None` for segments written before the directory existed.
    long_fields: Option<LongFields>,
    deletions: Arc<Deletions>,
    /// Last SCU whose records may be in the segment.
    pub max_seq: u64,
    /// Bytes of the index and meta files, as opened (both are immutable).
    file_bytes: u64,
    dir: PathBuf,
    /// The shard's cache of extracted record texts (none: every read extracts).
    record_cache: Option<Arc<RecordCache>>,
    /// Attribute layers held, one per attribute at most.
    attribute_layers: LayerShelf<AttributeLayer>,
    /// Column layers held, one per attribute at most.
    column_layers: LayerShelf<ColumnLayer>,
    /// The keys decoded, held exactly while some attribute layer is: a layer makes a
    /// dense answer cheap enough that decoding its keys from the front-coded directory
    /// becomes most of its cost (without layers the walks dwarf it).
    decoded_keys: ArcSwapOption<DecodedKeys>,
    /// Held while the decoded keys are matched to the attribute layers.
    decoded_keys_sync: Mutex<()>,
    /// Writes the attribute layer files.
    fs: Arc<dyn Fs>,
}

/// Entries located at once while an attribute layer is built (bounds the positions held).
const LAYER_BUILD_CHUNK: u64 = 4096;

/// A record's text and where it came from.
enum Cached {
    /// From the record cache.
    Hit(Arc<[u8]>),
    /// Extracted now, to be cached once it decodes.
    Extracted(Arc<[u8]>),
    /// Extracted now, not to be cached.
    Uncached(Arc<[u8]>),
}

impl Cached {
    fn bytes(&self) -> &[u8] {
        match self {
            Cached::Hit(t) | Cached::Extracted(t) | Cached::Uncached(t) => t,
        }
    }

    fn into_text(self) -> Arc<[u8]> {
        match self {
            Cached::Hit(t) | Cached::Extracted(t) | Cached::Uncached(t) => t,
        }
    }
}

/// The index file of segment `id`.
pub fn index_file_name(id: u64) -> String {
    format!("seg-{id:06}.idx")
}

/// The meta file of segment `id`.
pub fn meta_file_name(id: u64) -> String {
    format!("seg-{id:06}.meta")
}

/// The deletions file of segment `id` as of checkpoint `checkpoint`.
pub fn deletions_file_name(id: u64, checkpoint: u64) -> String {
    format!("seg-{id:06}.del-{checkpoint}")
}

/// The file of segment `id`'s layer of attribute `attribute`.
pub fn attribute_layer_file_name(id: u64, attribute: u16) -> String {
    format!("seg-{id:06}.attr-{attribute}")
}

/// The segment whose attribute layer file `name` is, if it is one.
pub fn attribute_layer_file_segment(name: &str) -> Option<u64> {
    let (segment, attribute) = name.strip_prefix("seg-")?.split_once(".attr-")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(segment) || !digits(attribute) || attribute.parse::<u16>().is_err() {
        return None;
    }
    segment.parse().ok()
}

impl Segment {
    /// Builds a segment from records sorted by key (strictly ascending), writes its
    /// files durably into `dir`, and opens it.
    pub fn build(
        fs: &dyn Fs,
        dir: &Path,
        id: u64,
        records: &[(Vec<u8>, Vec<u8>)],
        max_seq: u64,
        options: &BuildOptions,
    ) -> Result<Segment> {
        let text_len: usize = records.iter().map(|(_, t)| t.len()).sum::<usize>() + 1;
        let mut text = Vec::with_capacity(text_len);
        let mut starts = Vec::with_capacity(records.len());
        for (_, record_text) in records {
            starts.push(text.len() as u64);
            text.extend_from_slice(record_text);
        }
        text.push(MARK);
        let keys: Vec<&[u8]> = records.iter().map(|(k, _)| k.as_slice()).collect();
        let key_bytes = encode_keys(&keys).map_err(StoreError::InvalidBatch)?;
        let bound_bytes =
            encode_bounds(&starts, text.len() as u64 - 1).map_err(StoreError::InvalidBatch)?;
        let long_field_bytes = encode_long_fields(
            records.iter().map(|(_, t)| t.as_slice()),
            text.len() as u64 - 1,
        )
        .map_err(StoreError::InvalidBatch)?;
        let facts = serde_json::to_vec(&Facts {
            records: records.len() as u64,
            text_len: text.len() as u64,
            max_seq,
        })
        .expect("facts serialize");
        let index = TextIndex::build_with(&text, options, &mut |_, _| {})?;
        drop(text);

        let index_path = dir.join(index_file_name(id));
        write_file_atomic_with(fs, &index_path, &mut |file| {
            let mut writer = std::io::BufWriter::with_capacity(1 << 20, FsWriter(file));
            index.write_to(&mut writer).map_err(|e| match e {
                // The stream's own error, whole: a full disk must stay recognisable.
                puffer_index::IndexError::Io { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            })?;
            std::io::Write::flush(&mut writer)
        })
        .map_err(|e| StoreError::io(&index_path, e))?;
        let meta = encode_sections(
            META_MAGIC,
            VERSION,
            &[
                (SECTION_FACTS, &facts),
                (SECTION_KEYS, &key_bytes),
                (SECTION_BOUNDS, &bound_bytes),
                (SECTION_LONG_FIELDS, &long_field_bytes),
            ],
        );
        let meta_path = dir.join(meta_file_name(id));
        write_file_atomic(fs, &meta_path, &meta).map_err(|e| StoreError::io(&meta_path, e))?;
        Segment::open(dir, id, None)
    }

    /// Opens segment `id` in `dir`, with the deletions file named `deletions` if any.
    pub fn open(dir: &Path, id: u64, deletions: Option<&str>) -> Result<Segment> {
        let index_path = dir.join(index_file_name(id));
        let index = TextIndex::open(&index_path)?;
        let index_file_bytes = std::fs::metadata(&index_path)
            .map_err(|e| StoreError::io(&index_path, e))?
            .len();
        let meta_path = dir.join(meta_file_name(id));
        let bytes = std::fs::read(&meta_path).map_err(|e| StoreError::io(&meta_path, e))?;
        let corrupt = |detail: String| StoreError::corrupt(&meta_path, detail);
        let sections = decode_sections(&bytes, META_MAGIC, VERSION).map_err(corrupt)?;
        let facts_range = find_section(&sections, SECTION_FACTS).map_err(corrupt)?;
        let facts: Facts = serde_json::from_slice(&bytes[facts_range])
            .map_err(|e| corrupt(format!("facts section: {e}")))?;
        let keys_range = find_section(&sections, SECTION_KEYS).map_err(corrupt)?;
        let keys = KeyDirectory::from_bytes(bytes[keys_range].to_vec()).map_err(corrupt)?;
        let bounds_range = find_section(&sections, SECTION_BOUNDS).map_err(corrupt)?;
        let bounds = RecordBounds::from_bytes(bytes[bounds_range].to_vec()).map_err(corrupt)?;
        if keys.len() != facts.records
            || bounds.len() != facts.records
            || index.text_len() != facts.text_len
            || bounds.text_len() + 1 != facts.text_len
        {
            return Err(corrupt(format!(
                "sizes disagree: {} records, {} keys, {} bounds; text {} bytes, index {} bytes",
                facts.records,
                keys.len(),
                bounds.len(),
                facts.text_len,
                index.text_len()
            )));
        }
        let long_fields = match find_section(&sections, SECTION_LONG_FIELDS) {
            Ok(range) => Some(
                LongFields::from_bytes(&bytes[range], bounds.text_len())
                    .map_err(|e| corrupt(format!("long-field section: {e}")))?,
            ),
            Err(_) => None,
        };
        let segment = Segment {
            id,
            index,
            keys,
            bounds,
            long_fields,
            deletions: Arc::new(Deletions::default()),
            max_seq: facts.max_seq,
            file_bytes: index_file_bytes + bytes.len() as u64,
            dir: dir.to_path_buf(),
            record_cache: None,
            attribute_layers: LayerShelf::new(),
            column_layers: LayerShelf::new(),
            decoded_keys: ArcSwapOption::empty(),
            decoded_keys_sync: Mutex::new(()),
            fs: Arc::new(RealFs),
        };
        if let Some(name) = deletions {
            for record in read_deletions(&dir.join(name), facts.records)? {
                segment.deletions.mark(record, 0);
            }
        }
        Ok(segment)
    }

    /// The text of `record`: from the record cache, or extracted (and, with `keep`, put
    /// in the cache once it has decoded; see [`Segment::decode`]).
    fn text(&self, record: u64, keep: bool) -> Result<Cached> {
        if let Some(text) = self
            .record_cache
            .as_ref()
            .and_then(|c| c.get(self.id, record))
        {
            // A cached text decoded when it was cached, and attributes keep their types.
            return Ok(Cached::Hit(text));
        }
        let text: Arc<[u8]> = self.record_text(record)?.into();
        Ok(if keep && self.record_cache.is_some() {
            Cached::Extracted(text)
        } else {
            Cached::Uncached(text)
        })
    }

    /// Decodes the text of `record`; a text extracted to be kept is cached once it has
    /// decoded (only texts that decode are ever cached).
    fn decode(&self, record: u64, text: &Cached, types: &[AttrType]) -> Result<StoredRecord> {
        let key = self.key(record)?;
        let decoded = codec::decode_record(key, text.bytes(), types)
            .map_err(|e| self.corrupt_index(format!("record {record}: {e}")))?;
        if let (Cached::Extracted(text), Some(cache)) = (text, &self.record_cache) {
            cache.insert(self.id, record, text.clone());
        }
        Ok(decoded)
    }

    /// The segment reading record texts through `cache` (shared by the shard's segments,
    /// which is why entries are keyed by segment id).
    pub fn with_record_cache(mut self, cache: Option<Arc<RecordCache>>) -> Segment {
        self.record_cache = cache;
        self
    }

    /// The segment writing its layer files through `fs` (the shard's; the operating
    /// system's by default).
    pub fn with_fs(mut self, fs: Arc<dyn Fs>) -> Segment {
        self.fs = fs;
        self
    }

    /// Writes the records deleted as of `checkpoint` to a new deletions file; returns its
    /// name, or `None` when nothing is deleted.
    pub fn write_deletions(&self, fs: &dyn Fs, checkpoint: u64) -> Result<Option<String>> {
        let deleted = self.deletions.deleted_at(checkpoint);
        if deleted.is_empty() {
            return Ok(None);
        }
        let mut body = Vec::with_capacity(deleted.len() * 8);
        for record in deleted {
            body.extend_from_slice(&record.to_le_bytes());
        }
        let bytes = encode_sections(DELETIONS_MAGIC, VERSION, &[(SECTION_DELETED, &body)]);
        let name = deletions_file_name(self.id, checkpoint);
        let path = self.dir.join(&name);
        write_file_atomic(fs, &path, &bytes).map_err(|e| StoreError::io(&path, e))?;
        Ok(Some(name))
    }

    /// Number of records deleted as of `snapshot`.
    pub fn deleted_count(&self, snapshot: u64) -> u64 {
        self.deletions.deleted_at(snapshot).len() as u64
    }

    /// The compressed index (for layer management and footprints).
    pub fn index(&self) -> &TextIndex {
        &self.index
    }

    /// Bytes of the key directory.
    pub fn key_directory_bytes(&self) -> u64 {
        self.keys.byte_len() as u64
    }

    /// Bytes of the segment's index and meta files on disk (deletion marks aside).
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Bytes resident for serving: index footprint, key directory, boundaries, marks.
    pub fn memory_bytes(&self) -> u64 {
        self.index.footprint().total_bytes()
            + self.keys.byte_len() as u64
            + self.bounds.byte_len() as u64
            + self.long_fields.as_ref().map_or(0, |f| f.byte_len() as u64)
            + self.deletions.memory_bytes()
            + self.attribute_layer_bytes()
            + self.column_layer_bytes()
    }

    /// The entries of attribute `attribute`'s fields: every suffix starting `MARK id`.
    fn attribute_entries(&self, attribute: u16) -> Result<(u64, u64)> {
        Ok(self.index.suffix_range(&codec::field_start(attribute))?)
    }

    /// The attribute layer of `attribute`, if the segment holds one.
    pub fn attribute_layer(&self, attribute: u16) -> Option<Arc<AttributeLayer>> {
        self.attribute_layers.get(attribute)
    }

    /// The attributes whose layers the segment holds, ascending.
    pub fn attribute_layer_attributes(&self) -> Vec<u16> {
        self.attribute_layers.attributes()
    }

    /// Bytes of the attribute layers held, with the decoded keys they bring.
    pub fn attribute_layer_bytes(&self) -> u64 {
        self.attribute_layers.bytes() + self.decoded_key_bytes()
    }

    /// Bytes of the decoded keys held (0 without attribute layers).
    pub fn decoded_key_bytes(&self) -> u64 {
        self.decoded_keys
            .load()
            .as_ref()
            .map_or(0, |keys| keys.byte_len())
    }

    /// Bytes a layer of `attribute` would take here. The decoded keys the first layer
    /// brings are not in it: they are one table for all the segment's layers, and
    /// charging each candidate for it would make the manager see several times what
    /// it costs; they are counted in the segment's memory once held.
    pub fn attribute_layer_cost_bytes(&self, attribute: u16) -> Result<u64> {
        let (start, end) = self.attribute_entries(attribute)?;
        Ok(AttributeLayer::bytes_for(end - start, self.record_count()))
    }

    /// Decodes the keys when the segment holds an attribute layer and drops them when it
    /// holds none; called after every change to the layers.
    fn sync_decoded_keys(&self) {
        let _sync = self
            .decoded_keys_sync
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let wanted = !self.attribute_layers.attributes().is_empty();
        let held = self.decoded_keys.load().is_some();
        if wanted && !held {
            // A corrupt directory fails to decode: it stays the one that answers, and
            // reports the corruption to the reads that touch it.
            if let Ok(keys) = DecodedKeys::decode(&self.keys) {
                self.decoded_keys.store(Some(Arc::new(keys)));
            }
        } else if !wanted && held {
            self.decoded_keys.store(None);
        }
    }

    /// Builds the layer of `attribute` (one locate of its entries, in chunks) without
    /// publishing it.
    pub fn build_attribute_layer(&self, attribute: u16) -> Result<AttributeLayer> {
        let (start, end) = self.attribute_entries(attribute)?;
        let mut records = Vec::with_capacity((end - start) as usize);
        let mut at = start;
        while at < end {
            let chunk_end = end.min(at + LAYER_BUILD_CHUNK);
            for offset in self.index.locate(at, chunk_end)? {
                records.push(self.record_at(offset)?);
            }
            at = chunk_end;
        }
        Ok(AttributeLayer::from_records(
            attribute,
            start,
            self.record_count(),
            records,
        ))
    }

    /// What the layer of `attribute` must be here (for checking a layer file).
    fn attribute_layer_shape(&self, attribute: u16) -> Result<LayerShape> {
        let (first_entry, end_entry) = self.attribute_entries(attribute)?;
        Ok(LayerShape {
            attribute,
            first_entry,
            end_entry,
            records: self.record_count(),
        })
    }

    /// Saves `layer` beside the segment (replacing an older file), durably.
    pub fn save_attribute_layer(&self, layer: &AttributeLayer) -> Result<()> {
        let path = self
            .dir
            .join(attribute_layer_file_name(self.id, layer.attribute()));
        write_file_atomic(
            self.fs.as_ref(),
            &path,
            &layer.to_file_bytes(self.record_count()),
        )
        .map_err(|e| StoreError::io(&path, e))
    }

    /// The layer of `attribute` saved beside the segment; `None` when there is no file.
    /// A file that is not this segment's layer of `attribute`, or is damaged, is an
    /// error (`StoreError::Corrupt`).
    pub fn load_attribute_layer(&self, attribute: u16) -> Result<Option<AttributeLayer>> {
        let path = self.dir.join(attribute_layer_file_name(self.id, attribute));
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let shape = self.attribute_layer_shape(attribute)?;
        AttributeLayer::from_file_bytes(&bytes, shape)
            .map(Some)
            .map_err(|detail| StoreError::corrupt(&path, detail))
    }

    /// The layer of `attribute` from its file when that is intact, else built (and then
    /// saved: a save that fails, on a full disk say, only means the next open builds it
    /// again). A damaged file is replaced, not reported: the build gives the right
    /// layer, and the file is only ever a copy of it.
    fn load_or_build_attribute_layer(&self, attribute: u16) -> Result<AttributeLayer> {
        if let Ok(Some(layer)) = self.load_attribute_layer(attribute) {
            return Ok(layer);
        }
        let layer = self.build_attribute_layer(attribute)?;
        let _ = self.save_attribute_layer(&layer);
        Ok(layer)
    }

    /// Publishes `layer` (replacing a layer of the same attribute): queries that start
    /// from now on use it.
    pub fn add_attribute_layer(&self, layer: AttributeLayer) {
        self.attribute_layers.add(layer);
        self.sync_decoded_keys();
    }

    /// Drops the layer of `attribute`; whether there was one. Queries that loaded it
    /// keep it until they end.
    pub fn drop_attribute_layer(&self, attribute: u16) -> bool {
        let dropped = self.attribute_layers.remove(attribute);
        self.sync_decoded_keys();
        dropped
    }

    /// Starts loading (from its file) or building the layer of `attribute` on a thread
    /// of its own, which publishes it when done; false when the segment holds it, is
    /// building it, or failed to.
    pub fn start_attribute_layer(self: &Arc<Self>, attribute: u16) -> bool {
        if !self.attribute_layers.begin(attribute) {
            return false;
        }
        let segment = self.clone();
        self.spawn_build(
            format!("attr-layer-{}-{attribute}", self.id),
            move || {
                let built = segment.load_or_build_attribute_layer(attribute);
                segment
                    .attribute_layers
                    .finish(attribute, built.map_err(|e| e.to_string()));
                segment.sync_decoded_keys();
            },
            |why| self.attribute_layers.finish(attribute, Err(why)),
        )
    }

    /// Attributes whose layer is being built now.
    pub fn attribute_layers_building(&self) -> Vec<u16> {
        self.attribute_layers.building()
    }

    /// Why building a layer of each attribute failed.
    pub fn attribute_layer_failures(&self) -> Vec<(u16, String)> {
        self.attribute_layers.failures()
    }

    /// The column layer of `attribute`, if the segment holds one.
    pub fn column_layer(&self, attribute: u16) -> Option<Arc<ColumnLayer>> {
        self.column_layers.get(attribute)
    }

    /// The attributes whose column layers the segment holds, ascending.
    pub fn column_layer_attributes(&self) -> Vec<u16> {
        self.column_layers.attributes()
    }

    /// Bytes of the column layers held.
    pub fn column_layer_bytes(&self) -> u64 {
        self.column_layers.bytes()
    }

    /// Bytes a column layer of `attribute` would take here, estimated before it is
    /// built: 8 bytes for each record that holds the attribute (what a raw value takes;
    /// packed and dictionary encodings take less, except strings with many long
    /// distinct values) and a presence bit for every record. The layer's
    /// [`ColumnLayer::byte_len`] is exact once built.
    pub fn column_layer_cost_bytes(&self, attribute: u16) -> Result<u64> {
        let (start, end) = self.attribute_entries(attribute)?;
        Ok((end - start) * 8 + self.record_count().div_ceil(8))
    }

    /// Builds the column layer of `attribute` (its field extracted from every record;
    /// `types` the schema's) without publishing it.
    pub fn build_column_layer(&self, attribute: u16, types: &[AttrType]) -> Result<ColumnLayer> {
        let attr_type = *types.get(attribute as usize).ok_or_else(|| {
            StoreError::InvalidQuery(format!("attribute {attribute} is not in the schema"))
        })?;
        let wanted = [attribute];
        let mut values = Vec::with_capacity(self.record_count() as usize);
        for record in 0..self.record_count() {
            let fields = self.record_fields(record, &wanted, types)?;
            values.push(fields.get(attribute).cloned());
        }
        ColumnLayer::from_values(attribute, attr_type, &values).map_err(|why| {
            self.corrupt_meta(format!("column layer of attribute {attribute}: {why}"))
        })
    }

    /// Publishes a column layer (replacing one of the same attribute).
    pub fn add_column_layer(&self, layer: ColumnLayer) {
        self.column_layers.add(layer);
    }

    /// Drops the column layer of `attribute`; whether there was one. Queries that
    /// loaded it keep it until they end.
    pub fn drop_column_layer(&self, attribute: u16) -> bool {
        self.column_layers.remove(attribute)
    }

    /// Starts building the column layer of `attribute` on a thread of its own, which
    /// publishes it when done; false when the segment holds it, is building it, or
    /// failed to.
    pub fn start_column_layer(self: &Arc<Self>, attribute: u16, types: Vec<AttrType>) -> bool {
        if !self.column_layers.begin(attribute) {
            return false;
        }
        let segment = self.clone();
        self.spawn_build(
            format!("col-layer-{}-{attribute}", self.id),
            move || {
                let built = segment.build_column_layer(attribute, &types);
                segment
                    .column_layers
                    .finish(attribute, built.map_err(|e| e.to_string()));
            },
            |why| self.column_layers.finish(attribute, Err(why)),
        )
    }

    /// Attributes whose column layer is being built now.
    pub fn column_layers_building(&self) -> Vec<u16> {
        self.column_layers.building()
    }

    /// Why building a column layer of each attribute failed.
    pub fn column_layer_failures(&self) -> Vec<(u16, String)> {
        self.column_layers.failures()
    }

    /// Runs a layer build on a thread named `name`; whether it started (if not,
    /// `no_thread` is told why).
    fn spawn_build(
        &self,
        name: String,
        build: impl FnOnce() + Send + 'static,
        no_thread: impl FnOnce(String),
    ) -> bool {
        match std::thread::Builder::new().name(name).spawn(build) {
            Ok(_) => true,
            Err(e) => {
                no_thread(format!("no thread for the build: {e}"));
                false
            }
        }
    }

    /// (key, text) of every record live at `snapshot`, in key order.
    pub fn live_records(&self, snapshot: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let text = self.index.extract(0, self.index.text_len())?;
        let mut out = Vec::new();
        for (record, key) in self.keys.iter().enumerate() {
            let key = key.map_err(|e| self.corrupt_meta(e))?;
            let record = record as u64;
            if !self.deletions.live_at(record, snapshot) {
                continue;
            }
            let range = self
                .bounds
                .range(record)
                .map_err(|e| self.corrupt_meta(e))?;
            let slice = text
                .get(range.start as usize..range.end as usize)
                .ok_or_else(|| self.corrupt_meta("record range past the text".into()))?;
            out.push((key, slice.to_vec()));
        }
        Ok(out)
    }

    fn corrupt_index(&self, detail: String) -> StoreError {
        StoreError::corrupt(self.dir.join(index_file_name(self.id)), detail)
    }

    fn corrupt_meta(&self, detail: String) -> StoreError {
        StoreError::corrupt(self.dir.join(meta_file_name(self.id)), detail)
    }
}

fn read_deletions(path: &Path, records: u64) -> Result<Vec<u64>> {
    let bytes = std::fs::read(path).map_err(|e| StoreError::io(path, e))?;
    let corrupt = |detail: String| StoreError::corrupt(path, detail);
    let sections = decode_sections(&bytes, DELETIONS_MAGIC, VERSION).map_err(corrupt)?;
    let range = find_section(&sections, SECTION_DELETED).map_err(corrupt)?;
    let body = &bytes[range];
    if body.len() % 8 != 0 {
        return Err(corrupt("deleted list is not a whole number of u64".into()));
    }
    let list: Vec<u64> = body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    if list.iter().any(|&r| r >= records) {
        return Err(corrupt(format!(
            "deleted record number past the segment's {records} records"
        )));
    }
    Ok(list)
}

impl TextStage for Segment {
    fn record_count(&self) -> u64 {
        self.keys.len()
    }
    fn entries_matching(&self, pattern: &[u8]) -> Result<(u64, u64)> {
        Ok(self.index.suffix_range(pattern)?)
    }
    fn first_entry_at_least(&self, bound: &[u8]) -> Result<u64> {
        Ok(self.index.first_entry_at_least(bound)?)
    }
    fn first_entry_past(&self, bound: &[u8]) -> Result<u64> {
        Ok(self.index.first_entry_past(bound)?)
    }
    fn locate(&self, runs: &[(u64, u64)]) -> Result<Vec<u64>> {
        Ok(self.index.locate_runs(runs)?)
    }
    fn record_at(&self, offset: u64) -> Result<u64> {
        self.bounds
            .record_at(offset)
            .map_err(|e| self.corrupt_meta(e))?
            .ok_or_else(|| self.corrupt_meta(format!("offset {offset} is in no record")))
    }
    fn record_text(&self, record: u64) -> Result<Vec<u8>> {
        let range = self
            .bounds
            .range(record)
            .map_err(|e| self.corrupt_meta(e))?;
        Ok(self.index.extract(range.start, range.end - range.start)?)
    }
    fn key(&self, record: u64) -> Result<Vec<u8>> {
        self.keys.key(record).map_err(|e| self.corrupt_meta(e))
    }
    fn find_key(&self, key: &[u8]) -> Result<Option<u64>> {
        self.keys.rank(key).map_err(|e| self.corrupt_meta(e))
    }
    fn deletions(&self) -> &Deletions {
        &self.deletions
    }
    fn attribute_layer(&self, attribute: u16) -> Option<Arc<AttributeLayer>> {
        Segment::attribute_layer(self, attribute)
    }
    fn column_layer(&self, attribute: u16) -> Option<Arc<ColumnLayer>> {
        Segment::column_layer(self, attribute)
    }
    fn keys(&self, records: &[u64]) -> Result<Vec<Vec<u8>>> {
        match self.decoded_keys.load().as_ref() {
            Some(decoded) => decoded.keys(records),
            None => self.keys.keys(records),
        }
        .map_err(|e| self.corrupt_meta(e))
    }
    fn record(&self, record: u64, types: &[AttrType]) -> Result<StoredRecord> {
        self.decode(record, &self.text(record, false)?, types)
    }
    fn record_kept(&self, record: u64, types: &[AttrType]) -> Result<StoredRecord> {
        self.decode(record, &self.text(record, true)?, types)
    }
    fn record_fields(
        &self,
        record: u64,
        wanted: &[u16],
        types: &[AttrType],
    ) -> Result<StoredRecord> {
        let cached = self
            .record_cache
            .as_ref()
            .and_then(|c| c.get(self.id, record));
        let (Some(long), None) = (&self.long_fields, cached) else {
            return self.record(record, types);
        };
        let range = self
            .bounds
            .range(record)
            .map_err(|e| self.corrupt_meta(e))?;
        let parts = long
            .kept_parts(range, |id_byte| {
                wanted.contains(&u16::from(id_byte.wrapping_sub(codec::ID_BASE)))
            })
            .map_err(|e| self.corrupt_meta(format!("long-field section: {e}")))?;
        let mut text = Vec::new();
        for part in parts {
            text.extend_from_slice(&self.index.extract(part.start, part.end - part.start)?);
        }
        // Not cached: the cache holds whole records.
        self.decode(record, &Cached::Uncached(text.into()), types)
    }
    fn checked_text(&self, record: u64, types: &[AttrType]) -> Result<Arc<[u8]>> {
        let text = self.text(record, true)?;
        // A text read from the index now is checked (and then cached) by decoding it.
        if !matches!(text, Cached::Hit(_)) {
            self.decode(record, &text, types)?;
        }
        Ok(text.into_text())
    }
    fn value_attribute_at_cheaply(
        &self,
        offset: u64,
        may_split_escape: bool,
    ) -> Result<Option<Option<u16>>> {
        let Some(long) = &self.long_fields else {
            return Ok(None);
        };
        let found = long
            .field_at(offset)
            .map_err(|e| self.corrupt_meta(format!("long-field section: {e}")))?;
        let Some((start, id_byte)) = found else {
            return Ok(None);
        };
        let value_start = start + 2;
        if offset < value_start {
            return Ok(Some(None));
        }
        if may_split_escape
            && offset > value_start
            && self.index.extract(offset - 1, 1)? == [codec::ESCAPE]
        {
            return Ok(Some(None));
        }
        Ok(Some(Some((id_byte - codec::ID_BASE) as u16)))
    }
    fn value_attribute_at(&self, offset: u64, may_split_escape: bool) -> Result<Option<u16>> {
        if let Some(placed) = self.value_attribute_at_cheaply(offset, may_split_escape)? {
            return Ok(placed);
        }
        // A short field's marker is fewer than LONG_FIELD_MIN_BYTES bytes back; without
        // the directory (older segments) the window grows until it reaches the marker.
        let mut window = LONG_FIELD_MIN_BYTES;
        loop {
            let from = offset.saturating_sub(window);
            let before = self.index.extract(from, offset - from)?;
            let place = codec::place_after(&before)
                .map_err(|e| self.corrupt_index(format!("before offset {offset}: {e}")))?;
            match place {
                Place::Value(id) => return Ok(Some(id)),
                Place::NotValue => return Ok(None),
                Place::Unknown if from == 0 => {
                    return Err(
                        self.corrupt_index(format!("no field marker before offset {offset}"))
                    )
                }
                Place::Unknown => window = window.saturating_mul(4),
            }
        }
    }
}
