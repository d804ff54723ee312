//! Oracles and text generators shared by the integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use puffer_index::{TextIndex, WildcardMatch};

pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Words from a fixed vocabulary, so that patterns have many occurrences.
pub fn word_text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "the", "a", "puffer", "fish", "swims", "in", "deep", "blue", "sea", "and", "eats", "small",
        "shrimp", "while", "sharks", "sleep",
    ];
    let mut x = seed | 1;
    let mut text = Vec::with_capacity(len + 16);
    while text.len() < len {
        let r = xorshift(&mut x);
        text.extend_from_slice(WORDS[(r % WORDS.len() as u64) as usize].as_bytes());
        text.push(match (r >> 32) % 20 {
            0 => b'\n',
            1 => b',',
            _ => b' ',
        });
    }
    text.truncate(len);
    text
}

pub fn naive_search(text: &[u8], pattern: &[u8]) -> Vec<u64> {
    if pattern.len() > text.len() {
        return Vec::new();
    }
    (0..=text.len() - pattern.len())
        .filter(|&i| &text[i..i + pattern.len()] == pattern)
        .map(|i| i as u64)
        .collect()
}

pub fn naive_range(text: &[u8], lo: &[u8], hi: &[u8]) -> Vec<u64> {
    (0..text.len())
        .filter(|&j| {
            let suffix = &text[j..];
            suffix >= lo && &suffix[..suffix.len().min(hi.len())] <= hi
        })
        .map(|j| j as u64)
        .collect()
}

pub fn naive_wildcard(
    text: &[u8],
    prefix: &[u8],
    suffix: &[u8],
    max_gap: u64,
) -> Vec<WildcardMatch> {
    let mut out = Vec::new();
    for p in naive_search(text, prefix) {
        for s in naive_search(text, suffix) {
            let earliest = p + prefix.len() as u64;
            if s >= earliest && s - earliest <= max_gap {
                out.push(WildcardMatch {
                    start: p,
                    len: s + suffix.len() as u64 - p,
                });
            }
        }
    }
    out
}

/// `count`, `search` and `search` with a limit of `limit` for every pattern, against
/// the naive scan; `label` names the situation in failures.
pub fn check_pattern_queries(
    index: &TextIndex,
    text: &[u8],
    patterns: &[Vec<u8>],
    limit: usize,
    label: &str,
) {
    assert_eq!(index.text_len(), text.len() as u64, "{label}: text_len");
    for pattern in patterns {
        let expected = naive_search(text, pattern);
        assert_eq!(
            index.count(pattern).unwrap(),
            expected.len() as u64,
            "{label}: count {pattern:?}"
        );
        assert_eq!(
            index.search(pattern, None).unwrap(),
            expected,
            "{label}: search {pattern:?}"
        );
        assert_eq!(
            index.search(pattern, Some(limit)).unwrap(),
            expected[..expected.len().min(limit)].to_vec(),
            "{label}: search limit {limit} {pattern:?}"
        );
    }
}
