//! Every query checked against a naive scan of the text, for every layer configuration.

mod common;
use common::{check_pattern_queries, naive_range, naive_search, naive_wildcard};
use proptest::prelude::*;
use puffer_index::{BuildOptions, Construction, TextIndex};

/// Patterns: substrings of the text (so most hit) and the given extra ones.
fn patterns_for(text: &[u8], seed: u64, extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = extra.iter().filter(|p| !p.is_empty()).cloned().collect();
    let mut x = seed | 1;
    for _ in 0..12 {
        if text.is_empty() {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let start = (x % text.len() as u64) as usize;
        let len = 1 + ((x >> 20) % 9) as usize;
        out.push(text[start..(start + len).min(text.len())].to_vec());
    }
    out
}

fn check_queries(index: &TextIndex, text: &[u8], patterns: &[Vec<u8>], label: &str) {
    check_pattern_queries(index, text, patterns, 2, label);
    let n = text.len() as u64;
    for (offset, len) in [
        (0, n),
        (n / 3, 17),
        (n.saturating_sub(5), 40),
        (n, 3),
        (n / 2, 0),
        (n / 7, 1000),
    ] {
        let got = index.extract(offset, len).unwrap();
        let end = (offset + len).min(n) as usize;
        assert_eq!(
            got,
            &text[offset as usize..end],
            "{label}: extract {offset}+{len}"
        );
    }
    assert!(index.extract(n + 1, 1).is_err());
    for pair in patterns.windows(2) {
        let (lo, hi) = (&pair[0], &pair[1]);
        let expected = naive_range(text, lo, hi);
        assert_eq!(
            index.range_search(lo, hi, None).unwrap(),
            expected,
            "{label}: range {lo:?}..{hi:?}"
        );
        assert_eq!(
            index.range_count(lo, hi).unwrap(),
            expected.len() as u64,
            "{label}: range_count {lo:?}..{hi:?}"
        );
        for gap in [0u64, 3, 50] {
            let expected = naive_wildcard(text, lo, hi, gap);
            assert_eq!(
                index.wildcard_search(lo, hi, gap, None).unwrap(),
                expected,
                "{label}: wildcard {lo:?} {gap} {hi:?}"
            );
            for limit in [0, 2] {
                assert_eq!(
                    index.wildcard_search(lo, hi, gap, Some(limit)).unwrap(),
                    expected[..expected.len().min(limit)],
                    "{label}: wildcard {lo:?} {gap} {hi:?} limit {limit}"
                );
            }
        }
    }
    assert_eq!(
        index.range_search(b"", b"", None).unwrap(),
        (0..n).collect::<Vec<_>>(),
        "{label}: full range"
    );
}

/// Builds with small rates so that every layer matters, then walks through every layer
/// configuration with both construction modes, checking all queries in each.
fn check_all_configurations(text: &[u8], extra: &[Vec<u8>]) {
    let options = BuildOptions {
        sa_rate: 2,
        isa_rate: 4,
        levels: 3,
        psi_block_len: 8,
        threads: 1,
    };
    let index = TextIndex::build_with(text, &options, &mut |_, _| {}).unwrap();
    let patterns = patterns_for(text, text.len() as u64 * 7919 + 3, extra);
    check_queries(&index, text, &patterns, "all layers");
    index.drop_layer().unwrap();
    check_queries(&index, text, &patterns, "two layers");
    index.drop_layer().unwrap();
    assert_eq!(index.layer_count(), 1);
    assert!(index.drop_layer().is_err(), "base layer must stay");
    check_queries(&index, text, &patterns, "base only");
    index.add_layer(Construction::Opportunistic).unwrap();
    check_queries(&index, text, &patterns, "opportunistic, filling");
    check_queries(&index, text, &patterns, "opportunistic, partly filled");
    index.add_layer(Construction::Opportunistic).unwrap();
    check_queries(&index, text, &patterns, "two opportunistic");
    index.drop_layer().unwrap();
    index.drop_layer().unwrap();
    index.add_layer(Construction::Dedicated).unwrap();
    index.wait_for_layer_build();
    assert_eq!(index.layer_count(), 2);
    check_queries(&index, text, &patterns, "dedicated");
    index.add_layer(Construction::Dedicated).unwrap();
    index.wait_for_layer_build();
    assert_eq!(index.layer_count(), 3);
    assert!(
        index.add_layer(Construction::Opportunistic).is_err(),
        "no fourth layer"
    );
    check_queries(&index, text, &patterns, "dedicated, all layers");
}

fn fibonacci(len: usize) -> Vec<u8> {
    let (mut a, mut b) = (b"a".to_vec(), b"ab".to_vec());
    while b.len() < len {
        let next = [b.clone(), a].concat();
        a = b;
        b = next;
    }
    b.truncate(len);
    b
}

#[test]
fn adversarial_texts() {
    let all_bytes: Vec<u8> = (0..=255u8)
        .chain((0..=255u8).rev())
        .chain(0..=255u8)
        .collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("one byte", b"x".to_vec()),
        ("repeated byte", vec![b'a'; 300]),
        ("repeated zero", vec![0u8; 129]),
        ("repeated 0xff", vec![0xffu8; 77]),
        ("fibonacci", fibonacci(400)),
        ("all 256 values", all_bytes),
        ("periodic", b"abcabcabcabcabcabcabcabcabcabcab".repeat(5)),
    ];
    let extra = vec![
        b"a".to_vec(),
        b"aa".to_vec(),
        b"ab".to_vec(),
        vec![0u8, 0],
        vec![0xff],
        b"zz".to_vec(),
        b"aba".to_vec(),
    ];
    for (name, text) in cases {
        eprintln!("case {name}");
        check_all_configurations(&text, &extra);
    }
}

/// `range_count` is the length of `range_search` without a limit, for bounds that hit,
/// miss, cross (lo > hi), are empty, or run past the text.
#[test]
fn range_count_matches_range_search() {
    let texts: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"x".to_vec(),
        b"ab ac ad b".to_vec(),
        b"mississippi".to_vec(),
        vec![b'a'; 50],
        fibonacci(300),
        (0..=255u8).collect(),
    ];
    let bounds: [&[u8]; 10] = [
        b"",
        b"a",
        b"ab",
        b"ac",
        b"b",
        b"i",
        b"ss",
        b"zzz",
        &[0u8],
        &[0xff, 0xff],
    ];
    for text in &texts {
        let index = TextIndex::build(text).unwrap();
        for lo in bounds {
            for hi in bounds {
                let located = index.range_search(lo, hi, None).unwrap();
                assert_eq!(located, naive_range(text, lo, hi), "range {lo:?}..{hi:?}");
                assert_eq!(
                    index.range_count(lo, hi).unwrap(),
                    located.len() as u64,
                    "range_count {lo:?}..{hi:?} on {text:?}"
                );
            }
        }
        let too_long = vec![b'a'; puffer_index::MAX_PATTERN_BYTES + 1];
        assert!(index.range_count(&too_long, b"a").is_err());
        assert!(index.range_count(b"a", &too_long).is_err());
    }
}

#[test]
fn empty_patterns_are_refused() {
    let index = TextIndex::build(b"hello").unwrap();
    assert!(index.count(b"").is_err());
    assert!(index.search(b"", None).is_err());
    assert!(index.wildcard_search(b"", b"l", 1, None).is_err());
}

fn text_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b')], 0..400),
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'c'), Just(b'g'), Just(b't')],
            0..400
        ),
        proptest::collection::vec(any::<u8>(), 0..400),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn random_texts_match_naive_scan(
        text in text_strategy(),
        extra in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 1..4), 0..4),
    ) {
        check_all_configurations(&text, &extra);
    }

    /// Runs of entries in any order locate to the suffix array's slices, concatenated.
    #[test]
    fn locate_runs_match_the_suffix_array(
        text in text_strategy(),
        cuts in proptest::collection::vec(any::<u16>(), 0..12),
    ) {
        let mut suffixes: Vec<u64> = (0..text.len() as u64).collect();
        suffixes.sort_by_key(|&i| &text[i as usize..]);
        // Entry 0 is the sentinel; entries 1..=n are the suffixes in order.
        let entries = text.len() as u64 + 1;
        // Runs from pairs of cut points, in the order drawn (often out of entry order).
        let runs: Vec<(u64, u64)> = cuts
            .chunks(2)
            .map(|pair| {
                let a = 1 + u64::from(pair[0]) % entries;
                let b = 1 + u64::from(*pair.last().unwrap()) % entries;
                (a.min(b), a.max(b))
            })
            .collect();
        let expected: Vec<u64> = runs
            .iter()
            .flat_map(|&(start, end)| suffixes[start as usize - 1..end as usize - 1].to_vec())
            .collect();
        for options in [
            BuildOptions::default(),
            BuildOptions { sa_rate: 4, isa_rate: 8, levels: 2, psi_block_len: 16, threads: 1 },
        ] {
            let index = TextIndex::build_with(&text, &options, &mut |_, _| {}).unwrap();
            prop_assert_eq!(index.locate_runs(&runs).unwrap(), expected.clone());
            prop_assert!(index.locate_runs(&[(0, 1)]).is_err());
            prop_assert!(index.locate_runs(&[(1, entries + 1)]).is_err());
        }
    }
}

/// Several long runs of one byte: inside them the entries of consecutive positions can
/// be a constant (even) stride apart and skip every sampled entry for the whole run, so
/// locating relies on walks sharing their paths. Every answer against a naive scan.
#[test]
fn long_runs_locate_exactly() {
    let mut text = Vec::new();
    let mut x: u64 = 7;
    for run in [20_000usize, 15_000, 20_000, 3] {
        text.extend(std::iter::repeat_n(b'N', run));
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(b"ACGT"[(x % 4) as usize]);
        }
    }
    text.extend(b"abababababababababababababababab".repeat(400));
    for options in [
        BuildOptions::default(),
        BuildOptions {
            sa_rate: 4,
            isa_rate: 8,
            levels: 2,
            psi_block_len: 16,
            threads: 1,
        },
    ] {
        let index = TextIndex::build_with(&text, &options, &mut |_, _| {}).unwrap();
        for pattern in [
            &b"NNNNNNNN"[..],
            b"NNNA",
            b"NC",
            b"abab",
            b"babababa",
            b"Nab",
        ] {
            let expected = naive_search(&text, pattern);
            assert_eq!(
                index.search(pattern, None).unwrap(),
                expected,
                "search {pattern:?}"
            );
        }
        assert_eq!(
            index.range_search(b"N", b"NNNN", None).unwrap(),
            naive_range(&text, b"N", b"NNNN")
        );
    }
}
