//! A text corpus as every engine sees it, and the oracle's answers on it.
//!
//! The documents are the corpus's lines (split on `\n`; a final `\n` ends the last line
//! rather than starting an empty one), because every engine can express them: rows of
//! SQLite and PostgreSQL, lines for ripgrep, and line starts for PufferDB. The answer to
//! a substring query is the set of matching line numbers (0-based). The corpus is
//! prepared once so that every engine holds exactly the same text:
//!
//! - gzip inputs (`.gz`) are decompressed, and `--limit-bytes` keeps whole lines up to
//!   that many bytes;
//! - invalid UTF-8 becomes U+FFFD and NUL bytes become U+FFFD (PostgreSQL's `text`
//!   accepts neither);
//! - lines longer than [`MAX_LINE_BYTES`] (corpora without newlines, such as DNA) are
//!   cut into pieces of at most that size, on character boundaries.

use std::io::Read;
use std::path::Path;

use aho_corasick::AhoCorasick;
use anyhow::Context;

/// Longest line kept whole; longer lines are cut into lines of at most this size.
pub(super) const MAX_LINE_BYTES: usize = 4096;

/// The prepared corpus.
pub(super) struct Corpus {
    pub(super) text: Vec<u8>,
    /// Bytes of the input file (decompressed), before `--limit-bytes`.
    pub(super) file_bytes: u64,
    /// Characters replaced by U+FFFD (invalid UTF-8 sequences and NUL bytes).
    pub(super) replaced: u64,
    /// Line breaks inserted to cut long lines.
    pub(super) breaks_inserted: u64,
    pub(super) lines: usize,
}

/// Reads and prepares `path` (see the module documentation).
pub(super) fn read_corpus(path: &Path, limit_bytes: Option<u64>) -> anyhow::Result<Corpus> {
    let raw = read_maybe_gzip(path)?;
    let file_bytes = raw.len() as u64;
    let kept = match limit_bytes {
        Some(limit) => cut_at_line_end(&raw, limit as usize),
        None => &raw[..],
    };
    let (valid, replaced) = to_utf8_without_nul(kept);
    let (text, breaks_inserted) = cut_long_lines(valid.into_bytes(), MAX_LINE_BYTES);
    anyhow::ensure!(!text.is_empty(), "{} holds no text", path.display());
    let lines = line_count(&text);
    Ok(Corpus {
        text,
        file_bytes,
        replaced,
        breaks_inserted,
        lines,
    })
}

/// The whole file, decompressed if its name ends in `.gz`.
pub(super) fn read_maybe_gzip(path: &Path) -> anyhow::Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    let gzip = path.extension().is_some_and(|e| e == "gz");
    let read = if gzip {
        flate2::read::MultiGzDecoder::new(file).read_to_end(&mut bytes)
    } else {
        std::io::BufReader::new(file).read_to_end(&mut bytes)
    };
    read.with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

/// The longest prefix of `text` of at most `limit` bytes that ends at a line end (or
/// the first `limit` bytes if the first line is longer).
fn cut_at_line_end(text: &[u8], limit: usize) -> &[u8] {
    if text.len() <= limit {
        return text;
    }
    match text[..limit].iter().rposition(|&b| b == b'\n') {
        Some(newline) => &text[..=newline],
        None => &text[..limit],
    }
}

/// `bytes` as UTF-8 with invalid sequences and NUL bytes replaced by U+FFFD, and the
/// number of replacements.
fn to_utf8_without_nul(bytes: &[u8]) -> (String, u64) {
    let mut out = String::with_capacity(bytes.len());
    let mut replaced = 0;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\0' {
                out.push(char::REPLACEMENT_CHARACTER);
                replaced += 1;
            } else {
                out.push(c);
            }
        }
        if !chunk.invalid().is_empty() {
            out.push(char::REPLACEMENT_CHARACTER);
            replaced += 1;
        }
    }
    (out, replaced)
}

/// Whether a line may be cut before byte `i` of UTF-8 `text` (not inside a character).
pub(super) fn is_char_boundary(text: &[u8], i: usize) -> bool {
    i == 0 || i >= text.len() || (text[i] & 0xC0) != 0x80
}

/// `text` (UTF-8) with lines longer than `max` bytes cut into lines of at most `max`
/// bytes, on character boundaries; and the number of line breaks inserted.
fn cut_long_lines(text: Vec<u8>, max: usize) -> (Vec<u8>, u64) {
    let longest = text
        .split(|&b| b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    if longest <= max {
        return (text, 0);
    }
    let mut out = Vec::with_capacity(text.len() + text.len() / max + 1);
    let mut inserted = 0;
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        let mut start = 0;
        while line.len() - start > max {
            let mut end = start + max;
            while !is_char_boundary(line, end) {
                end -= 1;
            }
            out.extend_from_slice(&line[start..end]);
            out.push(b'\n');
            inserted += 1;
            start = end;
        }
        out.extend_from_slice(&line[start..]);
    }
    (out, inserted)
}

/// The lines of `text`: split on `\n`, without the empty "line" after a final `\n`.
pub(super) fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    (!text.is_empty())
        .then_some(body)
        .into_iter()
        .flat_map(|body| body.split(|&b| b == b'\n'))
}

pub(super) fn line_count(text: &[u8]) -> usize {
    lines(text).count()
}

/// For each pattern, the lines containing it (ascending), by running one Aho-Corasick
/// automaton over each line separately.
pub(super) fn matching_lines(text: &[u8], patterns: &[Vec<u8>]) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut found: Vec<Vec<u32>> = vec![Vec::new(); patterns.len()];
    for_each_line_match(text, patterns, |pattern, line| found[pattern].push(line))?;
    Ok(found)
}

/// For each pattern, how many lines contain it.
pub(super) fn matching_line_counts(text: &[u8], patterns: &[Vec<u8>]) -> anyhow::Result<Vec<u64>> {
    let mut counts = vec![0u64; patterns.len()];
    for_each_line_match(text, patterns, |pattern, _| counts[pattern] += 1)?;
    Ok(counts)
}

/// Calls `found(pattern, line)` once for each line containing each pattern, in line
/// order.
fn for_each_line_match(
    text: &[u8],
    patterns: &[Vec<u8>],
    mut found: impl FnMut(usize, u32),
) -> anyhow::Result<()> {
    if patterns.is_empty() {
        return Ok(());
    }
    let automaton = AhoCorasick::new(patterns).context("building the oracle's automaton")?;
    let mut last_line = vec![u32::MAX; patterns.len()];
    for (line_number, line) in lines(text).enumerate() {
        let line_number = line_number as u32;
        for m in automaton.find_overlapping_iter(line) {
            let pattern = m.pattern().as_usize();
            if last_line[pattern] != line_number {
                last_line[pattern] = line_number;
                found(pattern, line_number);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_ripgrep() {
        assert_eq!(line_count(b""), 0);
        assert_eq!(line_count(b"a"), 1);
        assert_eq!(line_count(b"a\n"), 1);
        assert_eq!(line_count(b"a\n\nb"), 3);
        assert_eq!(lines(b"x\ny\n").collect::<Vec<_>>(), vec![&b"x"[..], b"y"]);
    }

    #[test]
    fn matching_lines_agree_with_a_naive_scan() {
        let text = b"banana\nbandana\n\nnab ana\nana";
        let patterns = vec![
            b"ana".to_vec(),
            b"ban".to_vec(),
            b"a\nb".to_vec(),
            b"n".to_vec(),
        ];
        let found = matching_lines(text, &patterns).unwrap();
        for (pattern, lines_found) in patterns.iter().zip(&found) {
            let naive: Vec<u32> = lines(text)
                .enumerate()
                .filter(|(_, line)| line.windows(pattern.len()).any(|w| w == &pattern[..]))
                .map(|(i, _)| i as u32)
                .collect();
            assert_eq!(lines_found, &naive);
        }
        assert_eq!(found[0], vec![0, 1, 3, 4]);
        let counts = matching_line_counts(text, &patterns).unwrap();
        assert_eq!(
            counts,
            found.iter().map(|f| f.len() as u64).collect::<Vec<_>>()
        );
    }

    #[test]
    fn preparation_makes_valid_utf8_with_short_lines() {
        let (text, replaced) = to_utf8_without_nul(b"a\x92b\0c");
        assert_eq!(text, "a\u{FFFD}b\u{FFFD}c");
        assert_eq!(replaced, 2);
        let long = "é".repeat(10);
        let (cut, inserted) = cut_long_lines(format!("x\n{long}").into_bytes(), 5);
        let cut = String::from_utf8(cut).unwrap();
        assert!(cut.lines().all(|line| line.len() <= 5));
        assert_eq!(cut.replace('\n', ""), format!("x{long}"));
        assert_eq!(inserted as usize, cut.matches('\n').count() - 1);
        assert_eq!(cut_at_line_end(b"ab\ncd\nef", 7), b"ab\ncd\n");
    }
}
