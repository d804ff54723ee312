//! The key directory and the record bounds against plain sorted-`Vec` oracles, plus
//! truncated and corrupted bytes, which must fail or answer but never panic.

use std::collections::BTreeSet;

use proptest::collection::vec;
use proptest::prelude::*;
use puffer_store::bounds::{encode_bounds, RecordBounds};
use puffer_store::keydir::{encode_keys, KeyDirectory};
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------
// Key directory
// ---------------------------------------------------------------------------------------

/// Key counts around the 16-key block boundaries, and some random ones.
fn key_count() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(15),
        Just(16),
        Just(17),
        Just(33),
        0..120usize,
    ]
}

/// Short keys of any bytes (the empty key included), or keys cut from one long prefix
/// plus a short suffix, so neighbours share long prefixes.
fn key_set() -> impl Strategy<Value = BTreeSet<Vec<u8>>> {
    let short_keys =
        key_count().prop_flat_map(|count| distinct_keys(vec(any::<u8>(), 0..10), count));
    let shared_prefix_keys =
        (vec(any::<u8>(), 0..300), key_count()).prop_flat_map(|(prefix, count)| {
            let key = (0..=prefix.len(), vec(any::<u8>(), 0..4)).prop_map(move |(cut, suffix)| {
                let mut key = prefix[..cut].to_vec();
                key.extend(suffix);
                key
            });
            distinct_keys(key, count)
        });
    prop_oneof![short_keys, shared_prefix_keys]
}

/// Up to `count` distinct keys (fewer only if the draws repeat a lot). Keys are drawn
/// with spares and kept in the order drawn: a set strategy of exact size would reject
/// every draw that repeats a key.
fn distinct_keys(
    key: impl Strategy<Value = Vec<u8>>,
    count: usize,
) -> impl Strategy<Value = BTreeSet<Vec<u8>>> {
    vec(key, count + count / 2 + 4).prop_map(move |drawn| {
        let mut keys = BTreeSet::new();
        for key in drawn {
            if keys.len() == count {
                break;
            }
            keys.insert(key);
        }
        keys
    })
}

fn encode_set(keys: &BTreeSet<Vec<u8>>) -> Vec<u8> {
    let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    encode_keys(&borrowed).unwrap()
}

/// Checks every method against the sorted keys, for the keys, their neighbours and `probes`.
fn check_directory(keys: &BTreeSet<Vec<u8>>, probes: &[Vec<u8>]) {
    let sorted: Vec<Vec<u8>> = keys.iter().cloned().collect();
    let bytes = encode_set(keys);
    let byte_count = bytes.len();
    let directory = KeyDirectory::from_bytes(bytes).unwrap();
    assert_eq!(directory.len(), sorted.len() as u64);
    assert_eq!(directory.is_empty(), sorted.is_empty());
    assert_eq!(directory.byte_len(), byte_count);

    for (rank, key) in sorted.iter().enumerate() {
        assert_eq!(
            directory.rank(key).unwrap(),
            Some(rank as u64),
            "key {key:?}"
        );
        assert_eq!(directory.lower_bound(key).unwrap(), rank as u64);
        assert_eq!(&directory.key(rank as u64).unwrap(), key);
    }
    assert!(directory.key(sorted.len() as u64).is_err());
    assert!(directory.key(u64::MAX).is_err());

    let iterated: Vec<Vec<u8>> = directory.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(iterated, sorted);

    let neighbours = sorted.iter().flat_map(|key| {
        let mut longer = key.clone();
        longer.push(0);
        let mut shorter = key.clone();
        shorter.pop();
        let mut bumped = key.clone();
        if let Some(last) = bumped.last_mut() {
            *last = last.wrapping_add(1);
        }
        [longer, shorter, bumped]
    });
    for probe in probes.iter().cloned().chain(neighbours) {
        let expected_lower_bound = sorted.partition_point(|key| key < &probe) as u64;
        let expected_rank = sorted.binary_search(&probe).ok().map(|rank| rank as u64);
        assert_eq!(
            directory.lower_bound(&probe).unwrap(),
            expected_lower_bound,
            "probe {probe:?}"
        );
        assert_eq!(
            directory.rank(&probe).unwrap(),
            expected_rank,
            "probe {probe:?}"
        );
    }
}

/// Calls every method on whatever `from_bytes` accepts, and says whether it did; only a
/// panic or a hang fails.
fn exercise_directory(bytes: Vec<u8>, probes: &[&[u8]]) -> bool {
    let Ok(directory) = KeyDirectory::from_bytes(bytes) else {
        return false;
    };
    let key_count = directory.len().min(200);
    for rank in 0..key_count {
        let _ = directory.key(rank);
    }
    for probe in probes {
        let _ = directory.rank(probe);
        let _ = directory.lower_bound(probe);
    }
    let _ = directory.iter().take(200).count();
    true
}

proptest! {
    #[test]
    fn key_directory_matches_the_sorted_keys(
        keys in key_set(),
        probes in vec(vec(any::<u8>(), 0..10), 0..30),
    ) {
        check_directory(&keys, &probes);
    }

    #[test]
    fn corrupted_key_directory_never_panics(
        keys in key_set(),
        corruptions in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode_set(&keys);
        for (position, value) in corruptions {
            let position = position.index(bytes.len());
            bytes[position] = value;
        }
        let probes: Vec<&[u8]> = keys.iter().map(Vec::as_slice).chain([&b"zz"[..], b""]).collect();
        exercise_directory(bytes, &probes);
    }
}

#[test]
fn keys_of_every_byte_value() {
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    keys.insert(Vec::new());
    for byte in 0..=255u8 {
        keys.insert(vec![byte]);
        keys.insert(vec![byte, byte]);
        keys.insert(vec![0, byte, 255]);
        keys.insert(vec![255; 1 + byte as usize]);
    }
    keys.insert(vec![0; 300]);
    let probes: Vec<Vec<u8>> = (0..=255u8).map(|byte| vec![byte, 0, 0]).collect();
    check_directory(&keys, &probes);
}

#[test]
fn empty_and_single_key_directories() {
    check_directory(&BTreeSet::new(), &[Vec::new(), b"a".to_vec()]);
    check_directory(&BTreeSet::from([Vec::new()]), &[b"a".to_vec()]);
    check_directory(
        &BTreeSet::from([b"m".to_vec()]),
        &[Vec::new(), b"a".to_vec(), b"z".to_vec()],
    );
}

#[test]
fn unsorted_or_duplicate_keys_are_refused() {
    assert_eq!(
        encode_keys(&[b"a", b"c", b"b"]).unwrap_err(),
        "key directory: key 2 is not greater than key 1"
    );
    assert_eq!(
        encode_keys(&[b"a", b"a"]).unwrap_err(),
        "key directory: key 1 is not greater than key 0"
    );
    assert!(encode_keys(&[b"", b""]).is_err());
    // Out of order across a block boundary too.
    let mut keys: Vec<Vec<u8>> = (0..20u8).map(|n| vec![n]).collect();
    keys.swap(15, 16);
    let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    assert_eq!(
        encode_keys(&borrowed).unwrap_err(),
        "key directory: key 16 is not greater than key 15"
    );
}

fn small_key_set() -> BTreeSet<Vec<u8>> {
    (0..40u32)
        .map(|n| format!("item-{:03}", n * 3).into_bytes())
        .chain([Vec::new()])
        .collect()
}

#[test]
fn every_truncation_of_a_key_directory_fails() {
    for keys in [
        small_key_set(),
        BTreeSet::new(),
        BTreeSet::from([b"x".to_vec()]),
    ] {
        let bytes = encode_set(&keys);
        for len in 0..bytes.len() {
            let error = KeyDirectory::from_bytes(bytes[..len].to_vec()).unwrap_err();
            assert!(error.starts_with("key directory: "), "{error}");
        }
    }
}

#[test]
fn every_single_byte_corruption_of_a_key_directory_never_panics() {
    let keys = small_key_set();
    let probes: Vec<&[u8]> = keys.iter().map(Vec::as_slice).chain([&b"zz"[..]]).collect();
    let bytes = encode_set(&keys);
    let mut accepted_count = 0;
    for position in 0..bytes.len() {
        for value in [0x00, 0x01, 0x7f, 0x80, 0xff, bytes[position] ^ 0x01] {
            let mut corrupted = bytes.clone();
            corrupted[position] = value;
            accepted_count += usize::from(exercise_directory(corrupted, &probes));
        }
    }
    // `from_bytes` does not decode keys, so corrupted key bytes reach the lookups.
    assert!(accepted_count > bytes.len(), "{accepted_count} accepted");
}

#[test]
fn print_key_directory_bytes_per_key() {
    let mut decimal: Vec<Vec<u8>> = (0..100_000u32)
        .map(|n| n.to_string().into_bytes())
        .collect();
    decimal.sort();
    let mut rng = rand::rngs::StdRng::seed_from_u64(26_000);
    let mut ids = BTreeSet::new();
    while ids.len() < 26_000 {
        ids.insert(format!("{:08}", rng.gen_range(0..100_000_000u32)).into_bytes());
    }
    let ids: Vec<Vec<u8>> = ids.into_iter().collect();
    for (name, keys) in [("\"0\"..\"99999\"", &decimal), ("random 8-digit ids", &ids)] {
        let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let bytes = encode_keys(&borrowed).unwrap();
        let raw_len: usize = keys.iter().map(Vec::len).sum();
        let directory = KeyDirectory::from_bytes(bytes).unwrap();
        assert_eq!(
            directory.key(keys.len() as u64 - 1).unwrap(),
            keys[keys.len() - 1]
        );
        eprintln!(
            "key directory, {} keys {name}: {} bytes, {:.2} bytes per key (raw keys {:.2} bytes per key)",
            keys.len(),
            directory.byte_len(),
            directory.byte_len() as f64 / keys.len() as f64,
            raw_len as f64 / keys.len() as f64,
        );
    }
}

// ---------------------------------------------------------------------------------------
// Record bounds
// ---------------------------------------------------------------------------------------

/// Record counts around the 64-record group boundaries, and some random ones.
fn record_count() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(63),
        Just(64),
        Just(65),
        Just(1000),
        0..200usize,
    ]
}

/// Record lengths: many empty, many short, some long, some of any size (which need
/// bit widths up to 64); a length that would overflow the text is made empty.
fn record_starts() -> impl Strategy<Value = (Vec<u64>, u64)> {
    let record_len = prop_oneof![
        3 => Just(0u64),
        5 => 0..8u64,
        1 => 0..1u64 << 20,
        1 => any::<u64>(),
    ];
    record_count()
        .prop_flat_map(move |count| vec(record_len.clone(), count))
        .prop_map(|lengths| {
            let mut starts = Vec::with_capacity(lengths.len());
            let mut text_len = 0u64;
            for len in lengths {
                starts.push(text_len);
                text_len = text_len.checked_add(len).unwrap_or(text_len);
            }
            (starts, text_len)
        })
}

/// The record containing `offset`, by the oracle: the last record starting at or before it.
fn expected_record_at(starts: &[u64], text_len: u64, offset: u64) -> Option<u64> {
    (offset < text_len).then(|| starts.partition_point(|&start| start <= offset) as u64 - 1)
}

fn check_bounds(starts: &[u64], text_len: u64, probes: &[u64]) {
    let bytes = encode_bounds(starts, text_len).unwrap();
    let byte_count = bytes.len();
    let bounds = RecordBounds::from_bytes(bytes).unwrap();
    assert_eq!(bounds.len(), starts.len() as u64);
    assert_eq!(bounds.is_empty(), starts.is_empty());
    assert_eq!(bounds.text_len(), text_len);
    assert_eq!(bounds.byte_len(), byte_count);

    for (record, &start) in starts.iter().enumerate() {
        let end = starts.get(record + 1).copied().unwrap_or(text_len);
        assert_eq!(
            bounds.range(record as u64).unwrap(),
            start..end,
            "record {record}"
        );
    }
    assert!(bounds.range(starts.len() as u64).is_err());
    assert!(bounds.range(u64::MAX).is_err());

    let check_offset = |offset: u64| {
        assert_eq!(
            bounds.record_at(offset).unwrap(),
            expected_record_at(starts, text_len, offset),
            "offset {offset}"
        );
    };
    if text_len <= 4096 {
        (0..=text_len + 1).for_each(check_offset);
    } else {
        let around_starts = starts
            .iter()
            .flat_map(|&start| [start.saturating_sub(1), start, start.saturating_add(1)]);
        let around_end = [text_len - 1, text_len, u64::MAX];
        around_starts.chain(around_end).for_each(check_offset);
    }
    probes.iter().copied().for_each(check_offset);
}

/// Calls every method on whatever `from_bytes` accepts, and says whether it did; only a
/// panic or a hang fails.
fn exercise_bounds(bytes: Vec<u8>, probes: &[u64]) -> bool {
    let Ok(bounds) = RecordBounds::from_bytes(bytes) else {
        return false;
    };
    for record in 0..bounds.len().min(300) {
        let _ = bounds.range(record);
    }
    for &offset in probes {
        let _ = bounds.record_at(offset);
    }
    true
}

proptest! {
    #[test]
    fn record_bounds_match_the_starts(
        (starts, text_len) in record_starts(),
        probes in vec(any::<u64>(), 0..20),
    ) {
        let probes: Vec<u64> = probes
            .iter()
            .map(|&probe| if text_len == 0 { probe } else { probe % text_len })
            .collect();
        check_bounds(&starts, text_len, &probes);
    }

    #[test]
    fn corrupted_record_bounds_never_panic(
        (starts, text_len) in record_starts(),
        corruptions in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        probes in vec(any::<u64>(), 0..20),
    ) {
        let mut bytes = encode_bounds(&starts, text_len).unwrap();
        for (position, value) in corruptions {
            let position = position.index(bytes.len());
            bytes[position] = value;
        }
        let probes: Vec<u64> = starts.iter().copied().chain(probes).collect();
        exercise_bounds(bytes, &probes);
    }
}

#[test]
fn record_bounds_of_empty_records() {
    check_bounds(&[], 0, &[0, 1, u64::MAX]);
    check_bounds(&[0], 0, &[0, 1]);
    check_bounds(&[0, 0, 0], 0, &[0]);
    check_bounds(&[0, 0, 0, 5, 5, 5, 9], 9, &[]);
    let mut starts = vec![0; 64];
    starts.extend(vec![7; 70]);
    check_bounds(&starts, 7, &[]);
}

/// Starts of 130 records whose groups take 0, 3 and 64 bits.
fn mixed_width_starts() -> (Vec<u64>, u64) {
    let mut starts = vec![0; 64];
    starts.extend((0..64).map(|n| 10 + n / 10));
    starts.extend([100, u64::MAX - 5]);
    (starts, u64::MAX)
}

#[test]
fn every_truncation_of_record_bounds_fails() {
    let (starts, text_len) = mixed_width_starts();
    for (starts, text_len) in [(starts, text_len), (vec![], 0), (vec![0], 3)] {
        let bytes = encode_bounds(&starts, text_len).unwrap();
        for len in 0..bytes.len() {
            let error = RecordBounds::from_bytes(bytes[..len].to_vec()).unwrap_err();
            assert!(error.starts_with("record bounds: "), "{error}");
        }
    }
}

#[test]
fn every_single_byte_corruption_of_record_bounds_never_panics() {
    let (starts, text_len) = mixed_width_starts();
    check_bounds(&starts, text_len, &[]);
    let bytes = encode_bounds(&starts, text_len).unwrap();
    let probes: Vec<u64> = starts
        .iter()
        .flat_map(|&start| [start, start.saturating_add(1)])
        .collect();
    let mut accepted_count = 0;
    for position in 0..bytes.len() {
        for value in [0x00, 0x01, 0x40, 0x41, 0x80, 0xff, bytes[position] ^ 0x01] {
            let mut corrupted = bytes.clone();
            corrupted[position] = value;
            accepted_count += usize::from(exercise_bounds(corrupted, &probes));
        }
    }
    // `from_bytes` does not decode the packed values, so corrupted ones reach the lookups.
    assert!(accepted_count > 100, "{accepted_count} accepted");
}
