//! The index file format: round trips, and every corruption, truncation and foreign file
//! refused with a clean error naming the file (never a panic), checked against the text.

mod common;
use common::{check_pattern_queries, naive_range, word_text, xorshift};
use std::io::{Seek, SeekFrom, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use puffer_index::{BuildOptions, Construction, IndexError, TextIndex, FORMAT_VERSION, MAGIC};

// Layout facts of format version 2 (see `src/format.rs`): a 64-byte header (magic,
// version u32, section count u32, text length u64, header CRC u32 at 24..28), then one
// 32-byte table entry per section (kind u32, aux u32, offset u64, len u64, crc u32, pad).
const HEADER_BYTES: usize = 64;
const ENTRY_BYTES: usize = 32;
const KIND_META: u32 = 1;
const KIND_PSI_HEADERS: u32 = 2;
const KIND_PSI_SUPERBLOCKS: u32 = 3;
const KIND_PSI_STREAM: u32 = 4;
const KIND_SA_LAYER: u32 = 5;
const KIND_ISA_LAYER: u32 = 6;

fn small_options() -> BuildOptions {
    BuildOptions {
        sa_rate: 4,
        isa_rate: 4,
        levels: 4,
        psi_block_len: 32,
        threads: 1,
    }
}

/// Substrings of the text (so they hit) plus a few that do not occur.
fn patterns_for(text: &[u8], seed: u64) -> Vec<Vec<u8>> {
    let mut out = vec![b"zq".to_vec(), vec![0u8], b"fish".to_vec(), b"e".to_vec()];
    let mut x = seed | 1;
    for _ in 0..16 {
        let r = xorshift(&mut x);
        let start = (r % text.len() as u64) as usize;
        let len = 1 + ((r >> 24) % 12) as usize;
        out.push(text[start..(start + len).min(text.len())].to_vec());
    }
    out
}

/// Every query kind against the oracle; `label` names the situation in failures.
fn check_against_text(index: &TextIndex, text: &[u8], label: &str) {
    let patterns = patterns_for(text, text.len() as u64 ^ 0x9e37_79b9);
    check_pattern_queries(index, text, &patterns, 3, label);
    for pair in patterns.windows(2).take(6) {
        let (lo, hi) = (&pair[0], &pair[1]);
        assert_eq!(
            index.range_search(lo, hi, None).unwrap(),
            naive_range(text, lo, hi),
            "{label}: range {lo:?}..{hi:?}"
        );
    }
    let n = text.len() as u64;
    assert_eq!(index.extract(0, n).unwrap(), text, "{label}: whole text");
    for (offset, len) in [(n / 3, 17), (n.saturating_sub(5), 40), (n, 3), (n / 2, 0)] {
        let end = (offset + len).min(n) as usize;
        assert_eq!(
            index.extract(offset, len).unwrap(),
            &text[offset as usize..end],
            "{label}: extract {offset}+{len}"
        );
    }
    assert!(
        index.extract(n + 1, 1).is_err(),
        "{label}: extract past end"
    );
}

struct Section {
    kind: u32,
    aux: u32,
    offset: u64,
    len: u64,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The section table of a valid file, parsed independently of the crate.
fn parse_sections(file: &[u8]) -> Vec<Section> {
    assert_eq!(file[..8], MAGIC);
    assert_eq!(u32_at(file, 8), FORMAT_VERSION);
    let count = u32_at(file, 12) as usize;
    (0..count)
        .map(|k| {
            let at = HEADER_BYTES + k * ENTRY_BYTES;
            Section {
                kind: u32_at(file, at),
                aux: u32_at(file, at + 4),
                offset: u64_at(file, at + 8),
                len: u64_at(file, at + 16),
            }
        })
        .collect()
}

/// Recomputes the header CRC after a deliberate edit of the header or section table.
fn fix_header_crc(file: &mut [u8]) {
    let table_end = HEADER_BYTES + u32_at(file, 12) as usize * ENTRY_BYTES;
    let mut head = file[..table_end].to_vec();
    head[24..28].fill(0);
    let crc = crc32fast::hash(&head);
    file[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// Which part of the file byte `pos` belongs to, for failure messages.
fn region_of(sections: &[Section], pos: usize) -> String {
    if pos < HEADER_BYTES {
        return format!("header byte {pos}");
    }
    let table_end = HEADER_BYTES + sections.len() * ENTRY_BYTES;
    if pos < table_end {
        return format!("table entry {}", (pos - HEADER_BYTES) / ENTRY_BYTES);
    }
    for s in sections {
        if (s.offset..s.offset + s.len).contains(&(pos as u64)) {
            return format!(
                "section kind {} aux {} byte {}",
                s.kind,
                s.aux,
                pos as u64 - s.offset
            );
        }
    }
    GAP.into()
}

const GAP: &str = "gap between sections";

/// The error of opening `path`, with the checks every open error must pass: it names the
/// file and says what was wrong.
fn expect_clean_error(path: &Path, what: &str) -> Result<IndexError, String> {
    match catch_unwind(AssertUnwindSafe(|| TextIndex::open(path))) {
        Err(_) => Err(format!("{what}: open panicked")),
        Ok(Ok(_)) => Err(format!("{what}: open succeeded")),
        Ok(Err(e)) => {
            let message = e.to_string();
            let path_text = path.display().to_string();
            if !message.contains(&path_text) {
                return Err(format!("{what}: error does not name the file: {message}"));
            }
            if !["section", "version", "magic"]
                .iter()
                .any(|w| message.contains(w))
            {
                return Err(format!("{what}: error says nothing useful: {message}"));
            }
            if matches!(e, IndexError::Io { .. }) {
                return Err(format!("{what}: reported as an i/o error: {message}"));
            }
            Ok(e)
        }
    }
}

#[test]
fn round_trip_preserves_answers_footprint_and_layout() {
    let text = word_text(60_000, 11);
    let dir = tempfile::tempdir().unwrap();
    for (name, options) in [
        ("small rates", small_options()),
        ("defaults", BuildOptions::default()),
    ] {
        let index = TextIndex::build_with(&text, &options, &mut |_, _| {}).unwrap();
        let path = dir.path().join(format!("{}.idx", name.replace(' ', "_")));
        index.save(&path).unwrap();
        let reopened = TextIndex::open(&path).unwrap();
        check_against_text(&reopened, &text, &format!("{name}: reopened"));
        assert_eq!(reopened.layer_count(), index.layer_count(), "{name}");
        assert_eq!(reopened.max_layers(), index.max_layers(), "{name}");
        let (before, after) = (index.footprint(), reopened.footprint());
        assert_eq!(after.sa_layers.len(), reopened.layer_count() as usize);
        assert_eq!(after.isa_layers.len(), reopened.layer_count() as usize);
        assert_eq!(before, after, "{name}: footprint changed by the round trip");

        // The file holds exactly the header, the table and the sections the footprint
        // accounts for, each 8-byte aligned, nothing more.
        let file = std::fs::read(&path).unwrap();
        assert_eq!(u64_at(&file, 16), text.len() as u64, "{name}: text length");
        let sections = parse_sections(&file);
        assert_eq!(sections.len(), 4 + 2 * index.layer_count() as usize);
        let mut expected_end = (HEADER_BYTES + sections.len() * ENTRY_BYTES) as u64;
        for s in &sections {
            assert_eq!(s.offset % 8, 0, "{name}: section {} misaligned", s.kind);
            assert_eq!(s.offset, expected_end.next_multiple_of(8), "{name}: gap");
            expected_end = s.offset + s.len;
            let expected_len = match s.kind {
                KIND_META => continue,
                KIND_PSI_HEADERS => after.psi_headers_bytes,
                KIND_PSI_SUPERBLOCKS => after.psi_superblocks_bytes,
                KIND_PSI_STREAM => after.psi_stream_bytes,
                KIND_SA_LAYER => after.sa_layers[s.aux as usize].bytes,
                KIND_ISA_LAYER => after.isa_layers[s.aux as usize].bytes,
                other => panic!("{name}: unknown section kind {other}"),
            };
            assert_eq!(
                s.len, expected_len,
                "{name}: section {} aux {}",
                s.kind, s.aux
            );
        }
        assert_eq!(file.len() as u64, expected_end, "{name}: file size");
        drop(reopened);

        // Saving again over the open file's path replaces it atomically.
        let reopened = TextIndex::open(&path).unwrap();
        reopened.save(&path).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            file,
            "{name}: re-save differs"
        );
        check_against_text(&reopened, &text, &format!("{name}: after re-save"));
    }
}

#[test]
fn saving_keeps_only_complete_layers() {
    let text = word_text(20_000, 5);
    let dir = tempfile::tempdir().unwrap();
    let index = TextIndex::build_with(&text, &small_options(), &mut |_, _| {}).unwrap();
    index.drop_layer().unwrap();
    index.drop_layer().unwrap();
    assert_eq!(index.layer_count(), 2);

    // Two layers saved, two reopened; a dedicated layer added to the mapped index works.
    let path = dir.path().join("two.idx");
    index.save(&path).unwrap();
    let reopened = TextIndex::open(&path).unwrap();
    assert_eq!(reopened.layer_count(), 2);
    assert_eq!(reopened.footprint(), index.footprint());
    reopened.add_layer(Construction::Dedicated).unwrap();
    reopened.wait_for_layer_build();
    assert_eq!(reopened.layer_count(), 3);
    check_against_text(&reopened, &text, "reopened plus dedicated layer");

    // An opportunistic layer just added is empty: it is not saved.
    assert_eq!(index.add_layer(Construction::Opportunistic).unwrap(), 2);
    let fp = index.footprint();
    assert_eq!(fp.sa_layers.len(), 3);
    assert!(fp.sa_layers[2].entries > 0);
    assert!(fp.sa_layers[2].filled_entries < fp.sa_layers[2].entries);
    let path = dir.path().join("opportunistic.idx");
    index.save(&path).unwrap();
    let reopened = TextIndex::open(&path).unwrap();
    assert_eq!(
        reopened.layer_count(),
        2,
        "the incomplete layer must not be saved"
    );
    check_against_text(&reopened, &text, "saved without the incomplete layer");

    // Partly filled by queries: still incomplete, still not saved.
    index.search(b"fish", None).unwrap();
    let fp = index.footprint();
    assert!(fp.sa_layers[2].filled_entries > 0, "queries fill the layer");
    assert!(fp.isa_layers[2].filled_entries < fp.isa_layers[2].entries);
    index.save(&path).unwrap();
    assert_eq!(TextIndex::open(&path).unwrap().layer_count(), 2);
}

/// An opportunistic layer that queries have filled completely is saved like any other.
/// A full extract visits every text position and every suffix-array entry but the
/// sentinel's (whose SA value sits in the base layer), so it should complete the layer,
/// including the ISA value of position `n`, whichever layer `n` falls in.
#[test]
fn opportunistic_layer_filled_by_queries_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    // With isa_rate 4 and 4 levels the layer rates are 32, 16, 8, 4: layer 2 holds the
    // odd multiples of 8. 3001 is in no layer; 3000 = 8 * 375 is in layer 2.
    for n in [3001usize, 3000] {
        let text = word_text(n, 3);
        let index = TextIndex::build_with(&text, &small_options(), &mut |_, _| {}).unwrap();
        index.drop_layer().unwrap();
        assert_eq!(index.layer_count(), 3);
        assert_eq!(index.add_layer(Construction::Opportunistic).unwrap(), 3);
        index.drop_layer().unwrap();
        index.drop_layer().unwrap();
        assert_eq!(index.add_layer(Construction::Opportunistic).unwrap(), 2);
        assert_eq!(index.extract(0, n as u64).unwrap(), text);
        assert_eq!(
            index.range_search(b"", b"", None).unwrap(),
            (0..n as u64).collect::<Vec<_>>()
        );
        let fp = index.footprint();
        for (name, layers) in [("sa", &fp.sa_layers), ("isa", &fp.isa_layers)] {
            let layer = &layers[2];
            assert_eq!(
                layer.filled_entries, layer.entries,
                "n = {n}: {name} layer 2 (rate {}) still incomplete after every position \
                 and every entry was visited",
                layer.rate
            );
        }
        let path = dir.path().join(format!("filled-{n}.idx"));
        index.save(&path).unwrap();
        let reopened = TextIndex::open(&path).unwrap();
        assert_eq!(reopened.layer_count(), 3, "n = {n}: filled layer saved");
        check_against_text(&reopened, &text, &format!("n = {n}: reopened filled layer"));
    }
}

/// A small index file and its text.
fn small_file(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let text = word_text(3_000, 29);
    let options = BuildOptions {
        levels: 3,
        ..small_options()
    };
    let index = TextIndex::build_with(&text, &options, &mut |_, _| {}).unwrap();
    let path = dir.join("original.idx");
    index.save(&path).unwrap();
    let file = std::fs::read(&path).unwrap();
    check_against_text(&TextIndex::open(&path).unwrap(), &text, "small file");
    (text, file)
}

/// Whether the answers of an index that opened despite damage are right, within a time limit.
fn answers_on(index: TextIndex, text: &[u8], what: &str) -> &'static str {
    let (text, what) = (text.to_vec(), what.to_string());
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let right = catch_unwind(AssertUnwindSafe(|| {
            check_against_text(&index, &text, &what)
        }));
        let _ = done.send(right.is_ok());
    });
    match outcome.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(true) => "correct",
        Ok(false) => "WRONG",
        Err(_) => "HANG",
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (text, file) = small_file(dir.path());
    let sections = parse_sections(&file);
    // Every byte if the file is small, else a sample that includes the whole header and table.
    let table_end = HEADER_BYTES + sections.len() * ENTRY_BYTES;
    let positions: Vec<usize> = if file.len() <= 20_000 {
        (0..file.len()).collect()
    } else {
        let step = file.len() / 3_000;
        (0..table_end)
            .chain((table_end..file.len()).step_by(step))
            .collect()
    };
    // One file edited in place (flip, open, flip back): no rewrite per position.
    let path = dir.path().join("flipped.idx");
    std::fs::write(&path, &file).unwrap();
    let mut handle = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut write_byte = |pos: usize, byte: u8| {
        handle.seek(SeekFrom::Start(pos as u64)).unwrap();
        handle.write_all(&[byte]).unwrap();
    };
    let mut failures = Vec::new();
    let mut undetected = Vec::new();
    let mut gap_bytes = 0;
    for &pos in &positions {
        write_byte(pos, file[pos] ^ 0x01);
        let what = format!("byte {pos} ({})", region_of(&sections, pos));
        if what.contains(GAP) {
            // docs/format.md: readers ignore the alignment gaps between sections, which no
            // checksum covers. The file must open and answer exactly as before.
            gap_bytes += 1;
            let outcome = match catch_unwind(AssertUnwindSafe(|| TextIndex::open(&path))) {
                Ok(Ok(index)) => answers_on(index, &text, &what).to_string(),
                Ok(Err(e)) => format!("refused: {e}"),
                Err(_) => "open panicked".to_string(),
            };
            if outcome != "correct" {
                failures.push(format!("{what}: {outcome}"));
            }
            write_byte(pos, file[pos]);
            continue;
        }
        match expect_clean_error(&path, &what) {
            Ok(IndexError::UnsupportedVersion { found, .. }) => {
                assert!((8..12).contains(&pos), "{what}: version error");
                assert_eq!(found, FORMAT_VERSION ^ (1 << (8 * (pos - 8))));
            }
            Ok(IndexError::Corrupt { section, .. }) => {
                if pos < 8 {
                    assert_eq!(section, "header", "{what}");
                }
            }
            Ok(other) => failures.push(format!("{what}: unexpected error kind {other:?}")),
            Err(failure) => {
                if failure.ends_with("open succeeded") {
                    // Not detected: the answers must at least be right (checked for the
                    // first few only, in a thread, as a corrupt index may loop forever).
                    let answers = if undetected.len() < 3 {
                        answers_on(TextIndex::open(&path).unwrap(), &text, &what)
                    } else {
                        "not checked"
                    };
                    undetected.push(format!("{what} (answers {answers})"));
                } else {
                    failures.push(failure);
                }
            }
        }
        write_byte(pos, file[pos]);
    }
    assert_eq!(std::fs::read(&path).unwrap(), file, "every flip was undone");
    eprintln!(
        "checked {} flips of a {}-byte file ({gap_bytes} in gaps); {} undetected",
        positions.len(),
        file.len(),
        undetected.len()
    );
    assert!(
        failures.is_empty(),
        "{} bad outcomes (first 40):\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
    assert!(
        undetected.is_empty(),
        "{} flips opened without error (first 40):\n{}",
        undetected.len(),
        undetected[..undetected.len().min(40)].join("\n")
    );
}

#[test]
fn every_truncation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = small_file(dir.path());
    let lengths: Vec<usize> = if file.len() <= 20_000 {
        (0..file.len()).collect()
    } else {
        (0..4_096)
            .chain((4_096..file.len()).step_by(file.len() / 3_000))
            .collect()
    };
    // One file shrunk step by step, longest first.
    let path = dir.path().join("truncated.idx");
    std::fs::write(&path, &file).unwrap();
    let handle = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut failures = Vec::new();
    for len in lengths.into_iter().rev() {
        handle.set_len(len as u64).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), &file[..len]);
        match expect_clean_error(&path, &format!("truncated to {len} bytes")) {
            Ok(IndexError::Corrupt { .. }) => {}
            Ok(other) => failures.push(format!("truncated to {len}: {other:?}")),
            Err(failure) => failures.push(failure),
        }
    }
    assert!(
        failures.is_empty(),
        "{} bad outcomes (first 40):\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}

#[test]
fn missing_and_foreign_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does-not-exist.idx");
    match TextIndex::open(&missing) {
        Err(IndexError::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("missing file: {:?}", other.map(|_| ())),
    }
    let message = TextIndex::open(&missing).err().unwrap().to_string();
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );

    let mut x = 77u64;
    let random: Vec<u8> = (0..5_000).map(|_| xorshift(&mut x) as u8).collect();
    let foreign = [
        ("random.bin", random),
        ("text.txt", word_text(2_000, 8)),
        ("zeros.bin", vec![0u8; 4_096]),
        (
            "almost-magic.bin",
            [&MAGIC[..7], b"Y", &[0u8; 100][..]].concat(),
        ),
    ];
    for (name, bytes) in foreign {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        match expect_clean_error(&path, name) {
            Ok(IndexError::Corrupt {
                section, detail, ..
            }) => {
                assert_eq!(section, "header", "{name}");
                assert!(detail.contains("magic"), "{name}: {detail}");
            }
            Ok(other) => panic!("{name}: {other:?}"),
            Err(failure) => panic!("{failure}"),
        }
    }
    // Too short to hold a header.
    for len in [0usize, 1, 8, 63] {
        let path = dir.path().join(format!("short-{len}.bin"));
        std::fs::write(&path, &MAGIC.repeat(8)[..len]).unwrap();
        match expect_clean_error(&path, &format!("{len}-byte file")) {
            Ok(IndexError::Corrupt { section, .. }) => assert_eq!(section, "header"),
            Ok(other) => panic!("{len}-byte file: {other:?}"),
            Err(failure) => panic!("{failure}"),
        }
    }
}

/// The version is checked right after the magic and before the header checksum, so a
/// file from another version is reported as such whether or not its checksum is right.
#[test]
fn other_versions_are_refused_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = small_file(dir.path());
    let path = dir.path().join("version.idx");
    for (version, fix_crc) in [
        (99u32, false),
        (99, true),
        (0, false),
        (FORMAT_VERSION + 1, true),
    ] {
        let mut bytes = file.clone();
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        if fix_crc {
            fix_header_crc(&mut bytes);
        }
        std::fs::write(&path, &bytes).unwrap();
        match TextIndex::open(&path) {
            Err(IndexError::UnsupportedVersion {
                path: p,
                found,
                supported,
            }) => {
                assert_eq!(p, path);
                assert_eq!(found, version);
                assert_eq!(supported, FORMAT_VERSION);
            }
            other => panic!("version {version}: {:?}", other.map(|_| ())),
        }
        let message = TextIndex::open(&path).err().unwrap().to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(&version.to_string()), "{message}");
    }
    // A wrong magic is reported before the version.
    let mut bytes = file.clone();
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    bytes[0] = b'X';
    std::fs::write(&path, &bytes).unwrap();
    let message = TextIndex::open(&path).err().unwrap().to_string();
    assert!(message.contains("magic"), "{message}");
}

/// Files whose checksums are all right but whose structure is not: every structural
/// check reports the offending section instead of trusting the table.
#[test]
fn structural_damage_with_valid_checksums_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (text, file) = small_file(dir.path());
    let sections = parse_sections(&file);
    let entry_of = |kind: u32, aux: u32| {
        let k = sections
            .iter()
            .position(|s| s.kind == kind && s.aux == aux)
            .unwrap();
        HEADER_BYTES + k * ENTRY_BYTES
    };
    let path = dir.path().join("structure.idx");
    let expect = |bytes: &[u8], case: &str, section: &str, detail: &str| {
        std::fs::write(&path, bytes).unwrap();
        match expect_clean_error(&path, case) {
            Ok(IndexError::Corrupt {
                section: s,
                detail: d,
                ..
            }) => {
                assert_eq!(s, section, "{case}: {d}");
                assert!(d.contains(detail), "{case}: {d}");
            }
            Ok(other) => panic!("{case}: {other:?}"),
            Err(failure) => panic!("{failure}"),
        }
    };

    let mut bytes = file.clone();
    bytes[16..24].copy_from_slice(&(text.len() as u64 + 1).to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "text length + 1", "meta", "text length");

    let mut bytes = file.clone();
    bytes[12..16].copy_from_slice(&65u32.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "65 sections", "header", "limit");

    let at = entry_of(KIND_PSI_STREAM, 0);
    let mut bytes = file.clone();
    bytes[at + 16..at + 24].copy_from_slice(&(file.len() as u64).to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "stream past the end", "psi.stream", "past the end");

    let mut bytes = file.clone();
    bytes[at + 8..at + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(
        &bytes,
        "stream offset overflows",
        "psi.stream",
        "past the end",
    );

    let at = entry_of(KIND_SA_LAYER, 0);
    let mut bytes = file.clone();
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(
        &bytes,
        "no sa base layer",
        "sa.layer0",
        "missing base layer",
    );

    let at = entry_of(KIND_ISA_LAYER, 1);
    let mut bytes = file.clone();
    bytes[at + 4..at + 8].copy_from_slice(&0u32.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "isa layer 0 twice", "isa.layer0", "twice");

    let at = entry_of(KIND_META, 0);
    let mut bytes = file.clone();
    bytes[at..at + 4].copy_from_slice(&KIND_PSI_HEADERS.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "no meta", "meta", "missing");

    // A layer whose values are all ones (out of range), with its CRC recomputed.
    let at = entry_of(KIND_SA_LAYER, 1);
    let s = sections
        .iter()
        .find(|s| s.kind == KIND_SA_LAYER && s.aux == 1)
        .unwrap();
    let mut bytes = file.clone();
    let range = s.offset as usize..(s.offset + s.len) as usize;
    bytes[range.clone()].fill(0xff);
    let crc = crc32fast::hash(&bytes[range]);
    bytes[at + 24..at + 28].copy_from_slice(&crc.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "sa layer 1 all ones", "sa.layer1", "out of range");

    // A layer one byte short (the length shrunk in the table, CRC recomputed).
    let mut bytes = file.clone();
    let short = s.len - 1;
    bytes[at + 16..at + 24].copy_from_slice(&short.to_le_bytes());
    let crc = crc32fast::hash(&bytes[s.offset as usize..(s.offset + short) as usize]);
    bytes[at + 24..at + 28].copy_from_slice(&crc.to_le_bytes());
    fix_header_crc(&mut bytes);
    expect(&bytes, "sa layer 1 short", "sa.layer1", "size");
}
