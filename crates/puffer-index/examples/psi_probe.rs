//! Micro-probe of Psi access costs (development aid): `cargo run --release -p puffer-index --example psi_probe FILE`.
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let text = std::fs::read(path).unwrap();
    let mut phases = Vec::new();
    let mut last = Instant::now();
    let index = puffer_index::TextIndex::build_with(&text, &Default::default(), &mut |phase, _| {
        phases.push((phase, last.elapsed().as_secs_f64()));
        last = Instant::now();
    })
    .unwrap();
    println!("phases (time spent before each phase start): {phases:?}");
    let psi = index.psi_for_probe();
    let n = psi.entries();
    let mut x = 88172645463325252u64;
    let idx: Vec<u64> = (0..2_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        })
        .collect();
    let t = Instant::now();
    let mut acc = 0u64;
    for &i in &idx {
        acc = acc.wrapping_add(psi.column_of(i) as u64);
    }
    println!(
        "column_of: {:.1} ns",
        t.elapsed().as_nanos() as f64 / idx.len() as f64
    );
    let t = Instant::now();
    for &i in &idx {
        acc = acc.wrapping_add(psi.get(i));
    }
    println!(
        "get: {:.1} ns",
        t.elapsed().as_nanos() as f64 / idx.len() as f64
    );
    for size in [16usize, 32, 64, 128, 256] {
        let mut batch = idx.clone();
        let mut scratch = Vec::new();
        let t = Instant::now();
        for chunk in batch.chunks_mut(size) {
            psi.advance_all(chunk, &mut scratch);
        }
        println!(
            "advance_all batch {size}: {:.1} ns",
            t.elapsed().as_nanos() as f64 / idx.len() as f64
        );
    }
    {
        let base: Vec<u64> = idx[..256].to_vec();
        let mut scratch = Vec::new();
        let t = Instant::now();
        for _ in 0..4000 {
            let mut batch = base.clone();
            psi.advance_all(&mut batch, &mut scratch);
            acc = acc.wrapping_add(batch[7]);
        }
        println!(
            "advance_all hot (same 256): {:.1} ns",
            t.elapsed().as_nanos() as f64 / (4000.0 * 256.0)
        );
    }
    // dependent chain (like one walk)
    let t = Instant::now();
    let mut i = 1u64;
    for _ in 0..1_000_000 {
        i = psi.get(i);
    }
    println!("chain get: {:.1} ns", t.elapsed().as_nanos() as f64 / 1e6);
    let t = Instant::now();
    for j in 0..2_000_000usize {
        acc = acc.wrapping_add(psi.get(idx[j & 15]));
    }
    println!("hot get: {:.1} ns", t.elapsed().as_nanos() as f64 / 2e6);
    println!("{acc} {i}");
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    for line in rollup.lines().filter(|l| l.contains("Huge")) {
        println!("{line}");
    }
}
