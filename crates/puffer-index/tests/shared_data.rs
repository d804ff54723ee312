//! Real-data checks on the project's shared corpora (`../shared/data/text/*.xz`):
//! a prefix of each corpus is indexed and sampled queries are compared with a naive
//! scan. Skips, saying why, where the data or the `xz` tool is absent (a user's checkout
//! has no `../shared`).

mod common;
use common::naive_search;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use puffer_index::{BuildOptions, TextIndex};

/// Bytes of each corpus that are indexed: enough for realistic statistics, small
/// enough for a debug-profile test.
const PREFIX_BYTES: usize = 2 << 20;

fn corpus_prefix(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/text")
        .join(name);
    if !path.exists() {
        eprintln!(
            "skipping {name}: {} is absent (the shared data sets are not part of a checkout)",
            path.display()
        );
        return None;
    }
    // Read only the prefix from a streaming decompression, then stop it.
    let mut child = match Command::new("xz")
        .arg("-dc")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("skipping {name}: cannot run xz: {e}");
            return None;
        }
    };
    let mut text = Vec::with_capacity(PREFIX_BYTES);
    let read = child
        .stdout
        .take()
        .expect("piped stdout")
        .take(PREFIX_BYTES as u64)
        .read_to_end(&mut text);
    let _ = child.kill();
    let _ = child.wait();
    match read {
        Ok(_) if text.len() >= 4096 => Some(text),
        Ok(_) => {
            eprintln!("skipping {name}: xz produced only {} bytes", text.len());
            None
        }
        Err(e) => {
            eprintln!("skipping {name}: reading from xz failed: {e}");
            None
        }
    }
}

fn check_corpus(name: &str) {
    let Some(text) = corpus_prefix(name) else {
        return;
    };
    let index = TextIndex::build_with(&text, &BuildOptions::default(), &mut |_, _| {}).unwrap();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..40 {
        // Long enough that a pattern has at most thousands of occurrences in 2 MB.
        let len = 8 + (next() % 8) as usize;
        let start = (next() % (text.len() - len) as u64) as usize;
        let pattern = &text[start..start + len];
        let expected = naive_search(&text, pattern);
        assert_eq!(
            index.count(pattern).unwrap(),
            expected.len() as u64,
            "{name}: count {pattern:?}"
        );
        assert_eq!(
            index.search(pattern, Some(50)).unwrap(),
            expected[..expected.len().min(50)],
            "{name}: search {pattern:?}"
        );
        let offset = next() % (text.len() as u64 - 300);
        assert_eq!(
            index.extract(offset, 300).unwrap(),
            &text[offset as usize..offset as usize + 300],
            "{name}: extract at {offset}"
        );
    }
}

#[test]
fn dna_prefix_matches_naive_scan() {
    check_corpus("dna.50MB.xz");
}

#[test]
fn english_prefix_matches_naive_scan() {
    check_corpus("english.40MB.xz");
}

#[test]
fn proteins_prefix_matches_naive_scan() {
    check_corpus("proteins.9MB.xz");
}

#[test]
fn sources_prefix_matches_naive_scan() {
    check_corpus("sources.50MB.xz");
}
