//! Queries running while layers are added (both construction modes), dropped and
//! cancelled: every answer is checked against answers precomputed by a naive scan.

mod common;
use common::{naive_range, naive_search, word_text, xorshift};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use puffer_index::{BuildOptions, Construction, Footprint, IndexError, TextIndex};

const OPTIONS: BuildOptions = BuildOptions {
    sa_rate: 4,
    isa_rate: 4,
    levels: 4,
    psi_block_len: 32,
    threads: 1,
};
const QUERY_THREADS: u64 = 3;
const QUERY_BUDGET: Duration = Duration::from_secs(3);
const MAX_ITERATIONS_PER_THREAD: u64 = 50_000;
/// Answers larger than this are left out of the fixed sets, to keep each query cheap.
const MAX_ANSWER: usize = 4_000;

/// Fixed query sets with their answers, computed once by naive scans.
struct Oracle {
    text: Vec<u8>,
    patterns: Vec<(Vec<u8>, Vec<u64>)>,
    extracts: Vec<(u64, u64)>,
    ranges: Vec<(Vec<u8>, Vec<u8>, Vec<u64>)>,
}

impl Oracle {
    fn new(text: Vec<u8>, seed: u64) -> Oracle {
        let n = text.len() as u64;
        let mut x = seed | 1;
        let mut substring = |min: u64, spread: u64| {
            let r = xorshift(&mut x);
            let start = (r % n) as usize;
            let len = (min + (r >> 40) % spread) as usize;
            text[start..(start + len).min(text.len())].to_vec()
        };
        let mut patterns = Vec::new();
        for absent in [&b"zebra"[..], b"fishfish", b"\0", b"sea  sea"] {
            patterns.push((absent.to_vec(), naive_search(&text, absent)));
        }
        while patterns.len() < 40 {
            let pattern = substring(2, 13);
            let expected = naive_search(&text, &pattern);
            if expected.len() <= MAX_ANSWER {
                patterns.push((pattern, expected));
            }
        }
        let mut ranges = Vec::new();
        while ranges.len() < 40 {
            let lo = substring(2, 6);
            let hi = match ranges.len() % 4 {
                0 => lo.clone(),
                1 => {
                    let mut hi = lo.clone();
                    let last = hi.last_mut().unwrap();
                    *last = last.saturating_add(1);
                    hi
                }
                2 => substring(2, 6),
                _ => lo[..lo.len() - 1].to_vec(),
            };
            let expected = naive_range(&text, &lo, &hi);
            if expected.len() <= MAX_ANSWER {
                ranges.push((lo, hi, expected));
            }
        }
        let mut extracts = vec![(0, 300), (n - 10, 10), (n - 3, 100), (n, 5), (n / 2, 0)];
        while extracts.len() < 40 {
            let r = xorshift(&mut x);
            extracts.push((r % n, (r >> 40) % 2_000));
        }
        Oracle {
            text,
            patterns,
            extracts,
            ranges,
        }
    }

    fn extract(&self, offset: u64, len: u64) -> &[u8] {
        let end = (offset + len).min(self.text.len() as u64);
        &self.text[offset as usize..end as usize]
    }
}

/// Failures seen by any thread; the first one stops everybody.
struct Failures {
    list: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl Failures {
    fn report(&self, failure: String) {
        self.list.lock().unwrap().push(failure);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Runs random queries until `deadline` or `iterations`; returns the answers checked.
fn query_loop(
    index: &TextIndex,
    oracle: &Oracle,
    seed: u64,
    (deadline, iterations): (Instant, u64),
    failures: &Failures,
) -> u64 {
    let mut x = seed | 1;
    let mut checked = 0;
    for _ in 0..iterations {
        if Instant::now() >= deadline || failures.stop.load(Ordering::Relaxed) {
            break;
        }
        let r = xorshift(&mut x);
        let pick = (r >> 8) as usize % 40;
        let outcome: Result<(), String> = match r % 5 {
            0 => {
                let (pattern, expected) = &oracle.patterns[pick];
                match index.count(pattern) {
                    Ok(got) if got == expected.len() as u64 => Ok(()),
                    got => Err(format!(
                        "count {pattern:?}: {got:?}, expected {}",
                        expected.len()
                    )),
                }
            }
            1 | 2 => {
                let (pattern, expected) = &oracle.patterns[pick];
                let limit = (r % 5 == 2).then_some((r >> 32) as usize % 6);
                let want = &expected[..expected.len().min(limit.unwrap_or(usize::MAX))];
                match index.search(pattern, limit) {
                    Ok(got) if got == want => Ok(()),
                    got => Err(format!(
                        "search {pattern:?} limit {limit:?}: {got:?}, expected {want:?}"
                    )),
                }
            }
            3 => {
                let (offset, len) = oracle.extracts[pick];
                let want = oracle.extract(offset, len);
                match index.extract(offset, len) {
                    Ok(got) if got == want => Ok(()),
                    got => Err(format!(
                        "extract {offset}+{len}: {got:?}, expected {want:?}"
                    )),
                }
            }
            _ => {
                let (lo, hi, expected) = &oracle.ranges[pick];
                let limit = (r >> 32)
                    .is_multiple_of(3)
                    .then_some((r >> 40) as usize % 10);
                let want = &expected[..expected.len().min(limit.unwrap_or(usize::MAX))];
                match index.range_search(lo, hi, limit) {
                    Ok(got) if got == want => Ok(()),
                    got => Err(format!(
                        "range {lo:?}..{hi:?} limit {limit:?}: {got:?}, expected {want:?}"
                    )),
                }
            }
        };
        match outcome {
            Ok(()) => checked += 1,
            Err(failure) => {
                failures.report(format!(
                    "query thread {seed:#x}, {} layers: {failure}",
                    index.layer_count()
                ));
                break;
            }
        }
    }
    checked
}

/// Footprint of a quiescent index (no build pending) agrees with the layer count and
/// with the rates and sizes the options imply.
fn check_footprint(index: &TextIndex, fp: &Footprint) -> Result<(), String> {
    let depth = index.layer_count() as usize;
    let entries = index.text_len() + 1;
    for (name, layers, rate) in [
        ("sa", &fp.sa_layers, OPTIONS.sa_rate),
        ("isa", &fp.isa_layers, OPTIONS.isa_rate),
    ] {
        if layers.len() != depth {
            return Err(format!(
                "{name}: {} layers, layer_count {depth}",
                layers.len()
            ));
        }
        for (level, layer) in layers.iter().enumerate() {
            let layer_rate = rate << (OPTIONS.levels as usize - 1 - level);
            let multiples = entries.div_ceil(layer_rate);
            let want = if level == 0 { multiples } else { multiples / 2 };
            if layer.level as usize != level
                || layer.rate != layer_rate
                || layer.entries != want
                || layer.filled_entries > layer.entries
                || layer.bytes == 0
            {
                return Err(format!(
                    "{name} layer {level}: {layer:?}, rate {layer_rate}"
                ));
            }
        }
    }
    Ok(())
}

/// What the layer thread did, to check that every path was taken.
#[derive(Debug, Default)]
struct ControlStats {
    opportunistic_added: u64,
    dedicated_built: u64,
    dedicated_cancelled: u64,
    dropped: u64,
    refused_full: u64,
    refused_base: u64,
    refused_pending: u64,
}

/// Adds, drops and cancels layers in both modes until `failures.stop` is set.
fn layer_loop(index: &TextIndex, seed: u64, failures: &Failures) -> ControlStats {
    let mut stats = ControlStats::default();
    let mut x = seed;
    let max = index.max_layers();
    let mut build_time = Duration::from_millis(20);
    let stop = || failures.stop.load(Ordering::Relaxed);
    let result = (|| -> Result<(), String> {
        let pause = |x: &mut u64, max_ms: u64| {
            std::thread::sleep(Duration::from_micros(xorshift(x) % (max_ms * 1000 + 1)))
        };
        // After a successful drop the reported level is the new layer count, whether a
        // built layer was dropped or a dedicated build was cancelled.
        let drop_one = |stats: &mut ControlStats| -> Result<u32, String> {
            let before = index.layer_count();
            let level = index
                .drop_layer()
                .map_err(|e| format!("drop at {before}: {e}"))?;
            stats.dropped += 1;
            if index.layer_count() != level {
                return Err(format!(
                    "drop_layer returned {level} but {} layers exist",
                    index.layer_count()
                ));
            }
            Ok(level)
        };
        while !stop() {
            // Opportunistic layers up to the maximum, then one refusal.
            loop {
                let before = index.layer_count();
                match index.add_layer(Construction::Opportunistic) {
                    Ok(level) if level == before && index.layer_count() == before + 1 => {
                        stats.opportunistic_added += 1;
                    }
                    Ok(level) => return Err(format!("opportunistic add at {before} -> {level}")),
                    Err(IndexError::Layer(_)) if before == max => {
                        stats.refused_full += 1;
                        break;
                    }
                    Err(e) => return Err(format!("opportunistic add at {before}: {e}")),
                }
                pause(&mut x, 5);
            }
            check_footprint(index, &index.footprint())?;
            pause(&mut x, 20);

            // Down to the base, which stays.
            while index.layer_count() > 1 {
                drop_one(&mut stats)?;
                pause(&mut x, 3);
            }
            match index.drop_layer() {
                Err(IndexError::Layer(_)) => stats.refused_base += 1,
                other => return Err(format!("base layer drop: {other:?}")),
            }
            check_footprint(index, &index.footprint())?;

            // Dedicated builds: waited for, refused a second add, or cancelled.
            while index.layer_count() < max && !stop() {
                let before = index.layer_count();
                let started = Instant::now();
                match index.add_layer(Construction::Dedicated) {
                    Ok(level) if level == before => {}
                    other => return Err(format!("dedicated add at {before}: {other:?}")),
                }
                match xorshift(&mut x) % 4 {
                    0 | 1 => {
                        index.wait_for_layer_build();
                        build_time = started.elapsed();
                        if index.layer_count() != before + 1 {
                            return Err(format!("dedicated build of {before} not published"));
                        }
                        stats.dedicated_built += 1;
                    }
                    2 => {
                        match index.add_layer(Construction::Opportunistic) {
                            Err(IndexError::Layer(_)) => stats.refused_pending += 1,
                            // The build finished already: the next level was added.
                            Ok(level) if level == before + 1 => stats.opportunistic_added += 1,
                            other => return Err(format!("add while building: {other:?}")),
                        }
                        drop_one(&mut stats)?;
                    }
                    _ => {
                        // Cancel somewhere within the build, often near its end.
                        let fraction = xorshift(&mut x) % 120;
                        std::thread::sleep(build_time * fraction as u32 / 100);
                        let level = drop_one(&mut stats)?;
                        if level != before {
                            return Err(format!("cancel of {before} returned {level}"));
                        }
                        stats.dedicated_cancelled += 1;
                        if index.layer_build_pending() {
                            return Err("a build is pending after its cancellation".into());
                        }
                    }
                }
            }
            if !index.layer_build_pending() {
                check_footprint(index, &index.footprint())?;
            }
            // Back to two layers, with an opportunistic one on top of a dedicated one.
            while index.layer_count() > 2 {
                drop_one(&mut stats)?;
            }
            if index.layer_count() == 2 && !stop() {
                index
                    .add_layer(Construction::Opportunistic)
                    .map_err(|e| format!("opportunistic on dedicated: {e}"))?;
                stats.opportunistic_added += 1;
                pause(&mut x, 10);
            }
        }
        Ok(())
    })();
    if let Err(failure) = result {
        failures.report(format!("layer thread: {failure}"));
    }
    index.wait_for_layer_build();
    stats
}

#[test]
fn queries_stay_exact_while_layers_change() {
    let oracle = Oracle::new(word_text(200_000, 0x5eed), 0xfeed);
    let index = TextIndex::build_with(&oracle.text, &OPTIONS, &mut |_, _| {}).unwrap();
    assert_eq!(index.max_layers(), OPTIONS.levels);
    let failures = Failures {
        list: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    };
    let checked = AtomicU64::new(0);
    let deadline = Instant::now() + QUERY_BUDGET;
    let stats = std::thread::scope(|scope| {
        let control = scope.spawn(|| layer_loop(&index, 0x1234_5678_9abc_def1, &failures));
        let queries: Vec<_> = (1..=QUERY_THREADS)
            .map(|t| {
                let (index, oracle, failures, checked) = (&index, &oracle, &failures, &checked);
                let seed = t.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                scope.spawn(move || {
                    let budget = (deadline, MAX_ITERATIONS_PER_THREAD);
                    let n = query_loop(index, oracle, seed, budget, failures);
                    checked.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        let joined: Vec<_> = queries.into_iter().map(|q| q.join()).collect();
        // Stop the layer thread even if a query thread panicked.
        failures.stop.store(true, Ordering::Relaxed);
        let stats = control.join();
        for result in joined {
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        }
        stats.unwrap()
    });
    let failures = failures.list.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let checked = checked.into_inner();
    eprintln!("{checked} answers checked; layer operations: {stats:?}");
    assert!(checked >= 300, "only {checked} answers checked");
    assert!(
        stats.opportunistic_added > 0 && stats.dropped > 0,
        "{stats:?}"
    );
    assert!(
        stats.dedicated_built + stats.dedicated_cancelled > 0,
        "{stats:?}"
    );
    assert!(
        stats.refused_full > 0 && stats.refused_base > 0,
        "{stats:?}"
    );

    // Quiescent: the footprint matches the layer count, and every query still agrees.
    assert!(!index.layer_build_pending());
    check_footprint(&index, &index.footprint()).unwrap();
    let budget = (Instant::now() + Duration::from_secs(60), 400);
    let failures = Failures {
        list: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    };
    assert_eq!(query_loop(&index, &oracle, 99, budget, &failures), 400);
    assert!(failures.list.into_inner().unwrap().is_empty());
}

/// Dropping a layer releases exactly the bytes the footprint reported for it, in every
/// construction mode, and adding one adds exactly its bytes.
#[test]
fn dropping_layers_releases_exactly_their_bytes() {
    let oracle = Oracle::new(word_text(40_000, 77), 0xabc);
    let index = TextIndex::build_with(&oracle.text, &OPTIONS, &mut |_, _| {}).unwrap();
    let failures = Failures {
        list: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    };
    let budget = (Instant::now() + Duration::from_secs(60), 200);
    let layer_bytes = |fp: &Footprint, level: u32| {
        fp.sa_layers[level as usize].bytes + fp.isa_layers[level as usize].bytes
    };
    let drop_checked = |label: &str| {
        let before = index.footprint();
        let level = index.drop_layer().unwrap();
        let after = index.footprint();
        assert_eq!(
            before.total_bytes() - after.total_bytes(),
            layer_bytes(&before, level),
            "{label}: drop of layer {level}"
        );
        assert_eq!(after.sa_layers[..], before.sa_layers[..level as usize]);
        assert_eq!(after.isa_layers[..], before.isa_layers[..level as usize]);
        assert_eq!(after.psi_bytes(), before.psi_bytes());
        check_footprint(&index, &after).unwrap();
    };
    let add_checked = |construction: Construction, label: &str| {
        let before = index.footprint();
        let predicted = index.layer_bytes(index.layer_count(), construction);
        let level = index.add_layer(construction).unwrap();
        index.wait_for_layer_build();
        let after = index.footprint();
        assert_eq!(
            after.total_bytes() - before.total_bytes(),
            layer_bytes(&after, level),
            "{label}: add of layer {level}"
        );
        assert_eq!(
            predicted,
            layer_bytes(&after, level),
            "{label}: predicted bytes of layer {level}"
        );
        check_footprint(&index, &after).unwrap();
    };
    let base = {
        let mut fp = index.footprint();
        fp.sa_layers.truncate(1);
        fp.isa_layers.truncate(1);
        fp.total_bytes()
    };

    for _ in 1..OPTIONS.levels {
        drop_checked("built");
    }
    assert_eq!(index.footprint().total_bytes(), base);
    assert_eq!(query_loop(&index, &oracle, 1, budget, &failures), 200);

    // Opportunistic layers, partly filled by queries, then dropped.
    for _ in 1..OPTIONS.levels {
        add_checked(Construction::Opportunistic, "opportunistic");
    }
    assert_eq!(query_loop(&index, &oracle, 2, budget, &failures), 200);
    let filled: u64 = index.footprint().sa_layers[1..]
        .iter()
        .map(|l| l.filled_entries)
        .sum();
    assert!(filled > 0, "queries fill opportunistic layers");
    for _ in 1..OPTIONS.levels {
        drop_checked("opportunistic");
    }
    assert_eq!(index.footprint().total_bytes(), base);

    // Dedicated layers, then dropped.
    for _ in 1..OPTIONS.levels {
        add_checked(Construction::Dedicated, "dedicated");
    }
    assert_eq!(query_loop(&index, &oracle, 3, budget, &failures), 200);
    for _ in 1..OPTIONS.levels {
        drop_checked("dedicated");
    }
    assert_eq!(index.footprint().total_bytes(), base);

    // A cancelled dedicated build leaves nothing behind.
    index.add_layer(Construction::Dedicated).unwrap();
    assert_eq!(index.drop_layer().unwrap(), 1);
    assert_eq!(index.layer_count(), 1);
    assert_eq!(index.footprint().total_bytes(), base);
    assert_eq!(query_loop(&index, &oracle, 4, budget, &failures), 200);
    let failures = failures.list.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Cancelling a dedicated build at any moment, including while it publishes, leaves the
/// layer count where it was before the build started.
#[test]
fn cancelled_dedicated_builds_leave_no_layer() {
    let text = word_text(100_000, 4242);
    let index = TextIndex::build_with(&text, &OPTIONS, &mut |_, _| {}).unwrap();
    index.drop_layer().unwrap();
    let level = index.layer_count();
    let base = index.footprint().total_bytes();
    // The deepest layer is the largest and slowest to publish.
    let started = Instant::now();
    assert_eq!(index.add_layer(Construction::Dedicated).unwrap(), level);
    index.wait_for_layer_build();
    let build_time = started.elapsed();
    assert_eq!(index.drop_layer().unwrap(), level);
    let mut x = 0x0dd_ba11u64;
    for attempt in 0..40 {
        assert_eq!(index.add_layer(Construction::Dedicated).unwrap(), level);
        // Delays spread over 80%..120% of the build time, where publishing happens.
        let percent = 80 + xorshift(&mut x) % 41;
        std::thread::sleep(build_time * percent as u32 / 100);
        assert_eq!(index.drop_layer().unwrap(), level, "attempt {attempt}");
        assert_eq!(
            index.layer_count(),
            level,
            "attempt {attempt}: drop_layer returned {level} after {percent}% of the build \
             time, but the layer exists"
        );
        assert!(!index.layer_build_pending());
        assert_eq!(index.footprint().total_bytes(), base, "attempt {attempt}");
    }
    assert_eq!(index.extract(0, text.len() as u64).unwrap(), text);
}
