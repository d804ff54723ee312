//! The index file format (version 2), documented byte by byte in `docs/format.md`.
//!
//! A 64-byte header, a section table, then 8-byte aligned sections, each with its own
//! CRC-32. Opening maps the file and verifies every checksum and every structural
//! invariant before the first query; sections are used in place, never copied.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bits::{self, SharedBytes};
use crate::error::{IndexError, Result};
use crate::huffman::NUM_SYMBOLS;
use crate::index::TextIndex;
use crate::lsa::{Layer, LayeredSampledArray, LsaShape};
use crate::psi::{Psi, PsiLayout, CODE_CONTEXTS, NUM_COLUMNS};

/// File magic.
pub const MAGIC: [u8; 8] = *b"PUFFERIX";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;
const HEADER_BYTES: usize = 64;
const SECTION_ENTRY_BYTES: usize = 32;
const MAX_SECTIONS: usize = 64;

const KIND_META: u32 = 1;
const KIND_PSI_HEADERS: u32 = 2;
const KIND_PSI_SUPERBLOCKS: u32 = 3;
const KIND_PSI_STREAM: u32 = 4;
const KIND_SA_LAYER: u32 = 5;
const KIND_ISA_LAYER: u32 = 6;

fn section_name(kind: u32, aux: u32) -> String {
    match kind {
        KIND_META => "meta".into(),
        KIND_PSI_HEADERS => "psi.headers".into(),
        KIND_PSI_SUPERBLOCKS => "psi.superblocks".into(),
        KIND_PSI_STREAM => "psi.stream".into(),
        KIND_SA_LAYER => format!("sa.layer{aux}"),
        KIND_ISA_LAYER => format!("isa.layer{aux}"),
        other => format!("unknown kind {other}"),
    }
}

struct SectionEntry {
    kind: u32,
    aux: u32,
    offset: u64,
    len: u64,
    crc: u32,
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn encode_meta(psi: &PsiLayout, sa: &LsaShape, isa: &LsaShape) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [
        psi.entries,
        psi.block_len,
        psi.superblock_blocks,
        u64::from(psi.value_width),
        u64::from(psi.offset_width),
        psi.stream_bits,
    ] {
        put_u64(&mut out, v);
    }
    for shape in [sa, isa] {
        for v in [
            shape.len,
            u64::from(shape.target_rate_log2),
            u64::from(shape.levels),
            u64::from(shape.width),
        ] {
            put_u64(&mut out, v);
        }
    }
    for &v in psi
        .column_starts
        .iter()
        .chain(psi.column_first_block.iter())
    {
        put_u64(&mut out, v);
    }
    for lengths in &psi.code_lengths {
        out.extend_from_slice(lengths);
    }
    out
}

const META_BYTES: usize = 6 * 8 + 8 * 8 + 2 * (NUM_COLUMNS + 1) * 8 + NUM_SYMBOLS * CODE_CONTEXTS;

fn decode_meta(bytes: &[u8]) -> std::result::Result<(PsiLayout, LsaShape, LsaShape), String> {
    if bytes.len() != META_BYTES {
        return Err(format!("is {} bytes, expected {META_BYTES}", bytes.len()));
    }
    let word = |i: usize| bits::read_u64_le(bytes, i * 8);
    let small = |i: usize, what: &str, max: u64| -> std::result::Result<u32, String> {
        let v = word(i);
        if v > max {
            return Err(format!("{what} = {v} is out of range"));
        }
        Ok(v as u32)
    };
    let shape = |at: usize, name: &str| -> std::result::Result<LsaShape, String> {
        let shape = LsaShape {
            len: word(at),
            target_rate_log2: small(at + 1, &format!("{name} rate"), 20)?,
            levels: small(at + 2, &format!("{name} levels"), 8)?,
            width: small(
                at + 3,
                &format!("{name} width"),
                u64::from(bits::MAX_PACKED_WIDTH_BITS),
            )?,
        };
        if shape.levels == 0 || shape.width == 0 {
            return Err(format!("{name} has no levels or zero width"));
        }
        Ok(shape)
    };
    let sa = shape(6, "sa")?;
    let isa = shape(10, "isa")?;
    let tables = 14;
    let column_starts = (0..=NUM_COLUMNS).map(|c| word(tables + c)).collect();
    let column_first_block = (0..=NUM_COLUMNS)
        .map(|c| word(tables + NUM_COLUMNS + 1 + c))
        .collect();
    let mut code_lengths = [[0u8; NUM_SYMBOLS]; CODE_CONTEXTS];
    for (context, lengths) in code_lengths.iter_mut().enumerate() {
        let at = META_BYTES - NUM_SYMBOLS * (CODE_CONTEXTS - context);
        lengths.copy_from_slice(&bytes[at..at + NUM_SYMBOLS]);
    }
    let psi = PsiLayout {
        entries: word(0),
        block_len: word(1),
        superblock_blocks: word(2),
        value_width: small(3, "value width", 56)?,
        offset_width: small(4, "offset width", 56)?,
        stream_bits: word(5),
        column_starts,
        column_first_block,
        code_lengths,
    };
    psi.validate()?;
    if sa.len != psi.entries || isa.len != psi.entries || sa.levels != isa.levels {
        return Err("sampled array shapes disagree with psi".into());
    }
    Ok((psi, sa, isa))
}

/// Distinguishes temporary files of concurrent saves within one process.
static SAVE_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The file image of an index: header plus section table, then the sections.
struct FileImage {
    head: Vec<u8>,
    sections: Vec<(u32, u32, Vec<u8>)>,
    entries: Vec<SectionEntry>,
}

impl FileImage {
    fn write(&self, out: &mut dyn Write) -> std::io::Result<u64> {
        out.write_all(&self.head)?;
        let mut written = self.head.len() as u64;
        for ((_, _, bytes), e) in self.sections.iter().zip(&self.entries) {
            out.write_all(&vec![0u8; (e.offset - written) as usize])?;
            out.write_all(bytes)?;
            written = e.offset + bytes.len() as u64;
        }
        Ok(written)
    }
}

/// Writes the file image of `index` to `out`; returns the bytes written.
pub fn write_to(index: &TextIndex, out: &mut dyn Write) -> Result<u64> {
    image(index).write(out).map_err(|source| IndexError::Io {
        path: PathBuf::from("(stream)"),
        source,
    })
}

fn image(index: &TextIndex) -> FileImage {
    let core = index.core();
    let (headers, superblocks, stream) = core.psi.sections();
    let mut sections: Vec<(u32, u32, Vec<u8>)> = vec![
        (
            KIND_META,
            0,
            encode_meta(core.psi.layout(), core.sa.shape(), core.isa.shape()),
        ),
        (KIND_PSI_HEADERS, 0, headers.to_vec()),
        (KIND_PSI_SUPERBLOCKS, 0, superblocks.to_vec()),
        (KIND_PSI_STREAM, 0, stream.to_vec()),
    ];
    // Only complete layers, contiguous from the base, are written.
    let (sa_view, isa_view) = (core.sa.view(), core.isa.view());
    for level in 0..core.sa.shape().levels as usize {
        let pair = (
            sa_view.layers[level].as_ref(),
            isa_view.layers[level].as_ref(),
        );
        let (Some(sa_layer), Some(isa_layer)) = pair else {
            break;
        };
        let (Some(sa_bytes), Some(isa_bytes)) = (sa_layer.packed_bytes(), isa_layer.packed_bytes())
        else {
            break;
        };
        sections.push((KIND_SA_LAYER, level as u32, sa_bytes));
        sections.push((KIND_ISA_LAYER, level as u32, isa_bytes));
    }
    let table_end = HEADER_BYTES + sections.len() * SECTION_ENTRY_BYTES;
    let mut offset = table_end.next_multiple_of(8) as u64;
    let mut entries = Vec::new();
    for (kind, aux, bytes) in &sections {
        entries.push(SectionEntry {
            kind: *kind,
            aux: *aux,
            offset,
            len: bytes.len() as u64,
            crc: crc32fast::hash(bytes),
        });
        offset = (offset + bytes.len() as u64).next_multiple_of(8);
    }
    let mut head = Vec::with_capacity(table_end);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    put_u64(&mut head, core.text_len);
    head.extend_from_slice(&[0u8; 4]); // header CRC, filled below
    head.resize(HEADER_BYTES, 0);
    for e in &entries {
        head.extend_from_slice(&e.kind.to_le_bytes());
        head.extend_from_slice(&e.aux.to_le_bytes());
        put_u64(&mut head, e.offset);
        put_u64(&mut head, e.len);
        head.extend_from_slice(&e.crc.to_le_bytes());
        head.extend_from_slice(&[0u8; 4]);
    }
    let crc = crc32fast::hash(&head);
    head[24..28].copy_from_slice(&crc.to_le_bytes());
    FileImage {
        head,
        sections,
        entries,
    }
}

/// Writes `index` to `path` through a temporary file, fsync, rename and directory fsync.
pub fn save(index: &TextIndex, path: &Path) -> Result<()> {
    let io = |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    };
    let image = image(index);
    let file_name = path.file_name().ok_or_else(|| {
        IndexError::InvalidArgument(format!("{} is not a file path", path.display()))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        SAVE_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let write = || -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(File::create(&tmp)?);
        image.write(&mut file)?;
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// Opens and verifies an index file.
pub fn open(path: &Path) -> Result<TextIndex> {
    let io = |source| IndexError::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |section: &str, detail: String| IndexError::Corrupt {
        path: path.to_path_buf(),
        section: section.to_string(),
        detail,
    };
    let file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    if file_len < HEADER_BYTES as u64 {
        return Err(corrupt(
            "header",
            format!("file is {file_len} bytes, shorter than the {HEADER_BYTES}-byte header"),
        ));
    }
    // SAFETY: the map is read-only; index files are written once (temp + rename) and never
    // modified in place, so the bytes do not change under us.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let all = SharedBytes::from_owner(Arc::new(map));
    if all[0..8] != MAGIC {
        return Err(corrupt(
            "header",
            "bad magic: not a PufferDB index file".into(),
        ));
    }
    let version = u32::from_le_bytes(all[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(IndexError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let count = u32::from_le_bytes(all[12..16].try_into().expect("4 bytes")) as usize;
    if count > MAX_SECTIONS {
        return Err(corrupt(
            "header",
            format!("{count} sections exceed the limit of {MAX_SECTIONS}"),
        ));
    }
    let table_end = HEADER_BYTES + count * SECTION_ENTRY_BYTES;
    if (table_end as u64) > file_len {
        return Err(corrupt("header", format!("section table ends at {table_end}, past the end of the file ({file_len} bytes): truncated")));
    }
    let mut head = all[..table_end].to_vec();
    let stored_crc = u32::from_le_bytes(head[24..28].try_into().expect("4 bytes"));
    head[24..28].fill(0);
    if crc32fast::hash(&head) != stored_crc {
        return Err(corrupt("header", "header checksum mismatch".into()));
    }
    let text_len = bits::read_u64_le(&all, 16);
    let mut entries = Vec::with_capacity(count);
    for k in 0..count {
        let at = HEADER_BYTES + k * SECTION_ENTRY_BYTES;
        let e = SectionEntry {
            kind: u32::from_le_bytes(all[at..at + 4].try_into().expect("4 bytes")),
            aux: u32::from_le_bytes(all[at + 4..at + 8].try_into().expect("4 bytes")),
            offset: bits::read_u64_le(&all, at + 8),
            len: bits::read_u64_le(&all, at + 16),
            crc: u32::from_le_bytes(all[at + 24..at + 28].try_into().expect("4 bytes")),
        };
        let name = section_name(e.kind, e.aux);
        let end = e.offset.checked_add(e.len).filter(|&end| end <= file_len);
        if end.is_none() {
            return Err(corrupt(
                &name,
                format!(
                    "spans {}..{}+{}, past the end of the file ({file_len} bytes): truncated",
                    e.offset, e.offset, e.len
                ),
            ));
        }
        let bytes = &all[e.offset as usize..(e.offset + e.len) as usize];
        if crc32fast::hash(bytes) != e.crc {
            return Err(corrupt(&name, "checksum mismatch".into()));
        }
        entries.push(e);
    }
    let find = |kind: u32, aux: u32| -> Result<SharedBytes> {
        let mut found = entries.iter().filter(|e| e.kind == kind && e.aux == aux);
        let e = found
            .next()
            .ok_or_else(|| corrupt(&section_name(kind, aux), "missing".into()))?;
        if found.next().is_some() {
            return Err(corrupt(&section_name(kind, aux), "appears twice".into()));
        }
        Ok(all.slice(e.offset as usize, e.len as usize))
    };
    let (layout, sa_shape, isa_shape) =
        decode_meta(&find(KIND_META, 0)?).map_err(|d| corrupt("meta", d))?;
    if layout.entries != text_len + 1 {
        return Err(corrupt(
            "meta",
            "entry count disagrees with the text length".into(),
        ));
    }
    let psi = Psi::from_parts(
        layout,
        find(KIND_PSI_HEADERS, 0)?,
        find(KIND_PSI_SUPERBLOCKS, 0)?,
        find(KIND_PSI_STREAM, 0)?,
    )
    .map_err(|d| corrupt("psi", d))?;
    let load_layers = |kind: u32, shape: &LsaShape| -> Result<Vec<Option<Arc<Layer>>>> {
        let mut layers = vec![None; shape.levels as usize];
        for level in 0..shape.levels {
            if !entries.iter().any(|e| e.kind == kind && e.aux == level) {
                if level == 0 {
                    return Err(corrupt(&section_name(kind, 0), "missing base layer".into()));
                }
                break;
            }
            let bytes = find(kind, level)?;
            let layer_entries = shape.layer_entries(level);
            if bytes.len() != bits::packed_len_bytes(layer_entries, shape.width) {
                return Err(corrupt(
                    &section_name(kind, level),
                    "size disagrees with the sampled array shape".into(),
                ));
            }
            // Every stored value must be a valid index or position.
            for k in 0..layer_entries {
                if bits::packed_get(&bytes, k, shape.width) >= shape.len {
                    return Err(corrupt(
                        &section_name(kind, level),
                        format!("value {k} out of range"),
                    ));
                }
            }
            layers[level as usize] = Some(Arc::new(Layer::frozen(
                level,
                layer_entries,
                shape.width,
                bytes,
            )));
        }
        Ok(layers)
    };
    let sa_layers = load_layers(KIND_SA_LAYER, &sa_shape)?;
    let isa_layers = load_layers(KIND_ISA_LAYER, &isa_shape)?;
    if sa_layers.iter().filter(|l| l.is_some()).count()
        != isa_layers.iter().filter(|l| l.is_some()).count()
    {
        return Err(corrupt(
            "sa.layer",
            "SA and ISA have different layer counts".into(),
        ));
    }
    Ok(TextIndex::from_components(
        text_len,
        psi,
        LayeredSampledArray::new(sa_shape, sa_layers),
        LayeredSampledArray::new(isa_shape, isa_layers),
    ))
}
