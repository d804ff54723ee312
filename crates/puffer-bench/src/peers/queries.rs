//! Substring queries drawn from the data, and their classes:
//!
//! - `len3`, `len8`, `len16`, `len32`: substrings of that many bytes at random places
//!   (on character boundaries, without a line break);
//! - `absent`: a 12-byte substring with one ASCII letter or digit changed, kept only if
//!   it occurs nowhere: every trigram but a few is common, so trigram indexes must
//!   check candidates;
//! - `frequent`: the most frequent of many random 3- to 5-byte substrings (drawing at
//!   random places favours frequent ones), at most [`FREQUENT_QUERIES_MAX`] of them
//!   since each returns a large part of the data.

use anyhow::bail;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::corpus::{is_char_boundary, matching_line_counts, matching_lines, Corpus};
use super::measure::Planned;

/// The classes of sampled lengths.
pub(super) const LENGTH_CLASSES: [(&str, usize); 4] =
    [("len3", 3), ("len8", 8), ("len16", 16), ("len32", 32)];
/// Most queries of the `frequent` class.
pub(super) const FREQUENT_QUERIES_MAX: usize = 10;
/// Random substrings drawn per frequent query kept.
const FREQUENT_CANDIDATES_PER_QUERY: usize = 64;
const ABSENT_SOURCE_BYTES: usize = 12;
/// Draws before giving up on a sample (a corpus of a few short lines).
const MAX_DRAWS: usize = 10_000;

/// `len` bytes of `text` at a random place, starting and ending on character
/// boundaries and holding no line break; None if a few draws found none.
pub(super) fn sample_substring(text: &[u8], len: usize, rng: &mut StdRng) -> Option<Vec<u8>> {
    if text.len() < len {
        return None;
    }
    for _ in 0..100 {
        let start = rng.gen_range(0..=text.len() - len);
        let end = start + len;
        let piece = &text[start..end];
        if is_char_boundary(text, start) && is_char_boundary(text, end) && !piece.contains(&b'\n') {
            return Some(piece.to_vec());
        }
    }
    None
}

/// A sampled substring with one ASCII letter or digit replaced by another letter
/// (still valid UTF-8); whether it occurs is for the caller to check.
pub(super) fn mutate(piece: &[u8], rng: &mut StdRng) -> Option<Vec<u8>> {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let places: Vec<usize> = (0..piece.len())
        .filter(|&i| piece[i].is_ascii_alphanumeric())
        .collect();
    if places.is_empty() {
        return None;
    }
    let place = places[rng.gen_range(0..places.len())];
    let mut mutated = piece.to_vec();
    while mutated[place] == piece[place] {
        mutated[place] = LETTERS[rng.gen_range(0..LETTERS.len())];
    }
    Some(mutated)
}

/// Draws `count` values from `draw`, failing with `what` if it keeps returning None.
pub(super) fn draw_many<T>(
    count: usize,
    what: &str,
    mut draw: impl FnMut() -> Option<T>,
) -> anyhow::Result<Vec<T>> {
    let mut drawn = Vec::with_capacity(count);
    let mut draws = 0;
    while drawn.len() < count {
        draws += 1;
        if draws > MAX_DRAWS.max(count * 100) {
            bail!(
                "could not draw {count} {what} patterns from the data (got {})",
                drawn.len()
            );
        }
        if let Some(pattern) = draw() {
            drawn.push(pattern);
        }
    }
    Ok(drawn)
}

/// The `frequent` class: of `candidates`, the `count` distinct ones with the largest
/// `frequency` (none that never occurs), most frequent first, ties in drawing order.
pub(super) fn most_frequent<T: PartialEq>(
    candidates: Vec<T>,
    frequency: &[u64],
    count: usize,
) -> Vec<T> {
    let mut ranked: Vec<(u64, T)> = frequency.iter().copied().zip(candidates).collect();
    ranked.sort_by_key(|(frequency, _)| std::cmp::Reverse(*frequency));
    let mut chosen: Vec<T> = Vec::new();
    for (frequency, candidate) in ranked {
        if chosen.len() == count {
            break;
        }
        if frequency > 0 && !chosen.contains(&candidate) {
            chosen.push(candidate);
        }
    }
    chosen
}

/// A pattern for messages.
pub(super) fn show_pattern(pattern: &[u8]) -> String {
    let text = String::from_utf8_lossy(pattern);
    format!("{text:?}")
}

/// Every text query, with the oracle's matching lines.
pub(super) fn plan_text_queries(
    corpus: &Corpus,
    per_class: usize,
    seed: u64,
) -> anyhow::Result<Vec<Planned<Vec<u8>>>> {
    let text = &corpus.text;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut classes: Vec<(&'static str, Vec<Vec<u8>>)> = Vec::new();
    for (class, len) in LENGTH_CLASSES {
        let patterns = draw_many(per_class, class, || sample_substring(text, len, &mut rng))?;
        classes.push((class, patterns));
    }

    let candidates = draw_many(per_class * 4, "absent", || {
        mutate(
            &sample_substring(text, ABSENT_SOURCE_BYTES, &mut rng)?,
            &mut rng,
        )
    })?;
    let counts = matching_line_counts(text, &candidates)?;
    let mut absent: Vec<Vec<u8>> = Vec::new();
    for (candidate, count) in candidates.into_iter().zip(counts) {
        if count == 0 && absent.len() < per_class && !absent.contains(&candidate) {
            absent.push(candidate);
        }
    }
    classes.push(("absent", absent));

    let frequent_count = per_class.min(FREQUENT_QUERIES_MAX);
    let candidates = draw_many(
        frequent_count * FREQUENT_CANDIDATES_PER_QUERY,
        "frequent",
        || {
            let len = rng.gen_range(3..=5);
            sample_substring(text, len, &mut rng)
        },
    )?;
    let counts = matching_line_counts(text, &candidates)?;
    classes.push((
        "frequent",
        most_frequent(candidates, &counts, frequent_count),
    ));

    let all: Vec<Vec<u8>> = classes
        .iter()
        .flat_map(|(_, patterns)| patterns.iter().cloned())
        .collect();
    let mut expected = matching_lines(text, &all)?.into_iter();
    let mut planned = Vec::with_capacity(all.len());
    for (class, patterns) in classes {
        for pattern in patterns {
            planned.push(Planned {
                class,
                label: show_pattern(&pattern),
                expected: expected.next().unwrap_or_default(),
                query: pattern,
                at_most: None,
            });
        }
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(text: &str) -> Corpus {
        Corpus {
            text: text.as_bytes().to_vec(),
            file_bytes: text.len() as u64,
            replaced: 0,
            breaks_inserted: 0,
            lines: super::super::corpus::line_count(text.as_bytes()),
        }
    }

    #[test]
    fn sampling_is_deterministic_and_draws_substrings() {
        let line = "the quick brown fox jumps over the lazy dog; naïve café 香港\n";
        let corpus = corpus(&line.repeat(40));
        let first = plan_text_queries(&corpus, 5, 7).unwrap();
        let second = plan_text_queries(&corpus, 5, 7).unwrap();
        let patterns = |p: &[Planned<Vec<u8>>]| {
            p.iter()
                .map(|q| (q.class, q.query.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(patterns(&first), patterns(&second));
        for query in &first {
            let pattern = &query.query;
            assert!(std::str::from_utf8(pattern).is_ok(), "{pattern:?}");
            assert!(!pattern.contains(&b'\n'));
            let found = line
                .as_bytes()
                .windows(pattern.len())
                .any(|w| w == &pattern[..]);
            if query.class == "absent" {
                assert!(!found && query.expected.is_empty());
            } else {
                assert!(found, "{} {pattern:?}", query.class);
                assert_eq!(query.expected, (0..40).collect::<Vec<u32>>());
            }
            if let Some((_, len)) = LENGTH_CLASSES.iter().find(|(c, _)| *c == query.class) {
                assert_eq!(pattern.len(), *len);
            }
        }
        assert_eq!(first.iter().filter(|q| q.class == "frequent").count(), 5);
    }

    #[test]
    fn most_frequent_keeps_distinct_patterns_by_count() {
        let candidates = vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"a".to_vec(),
            b"c".to_vec(),
            b"d".to_vec(),
        ];
        let chosen = most_frequent(candidates, &[5, 9, 5, 1, 0], 3);
        assert_eq!(chosen, vec![b"b".to_vec(), b"a".to_vec(), b"c".to_vec()]);
    }
}
