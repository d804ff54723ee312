//! `--diagnose-noise`: where the spread between runs of one configuration comes from.
//!
//! The same configuration under the same workload measured minutes apart lies up to a
//! third apart (B-BAL's `(locality) (region)` from 2,670 to 4,414 ops/s in one run,
//! `n84`), while a memory-bound loop on this machine moves about 6 % between 7-second
//! windows. A spread that large decides both verdicts on contenders 5 % apart, so this
//! mode takes it apart: one configuration, one mix, in four phases of [`RUNS`] runs
//! each, every phase's spread (the standard deviation of the runs' logarithms) printed:
//! - `same`: built once, the same operations (seed) every run: the machine and the
//!   store's own background work alone;
//! - `seeds`: built once, new operations each run: adds what the draw of operations
//!   changes;
//! - `rebuilt`: built again before each run (from the key subspace alone), the same
//!   operations: adds what a fresh build changes (the state each configuration of an
//!   experiment is measured in);
//! - `searches`: built once, searches only, the same operations: without the write
//!   pipeline's sealing and compacting.

use serde_json::json;

use super::workload::{label, median, workloads, Mix};
use super::{write_csv, Bench, Subspaces, UPDATED};
use crate::stats::round;

/// Runs in each phase.
const RUNS: usize = 6;

/// The seed of every run of a phase with the same operations.
const SAME_SEED: u64 = 900;

/// The spread of `runs` (ops/s): the standard deviation of their natural logarithms
/// (about the relative spread; 0 for fewer than two runs).
fn log_spread(runs: &[f64]) -> f64 {
    if runs.len() < 2 {
        return 0.0;
    }
    let logs: Vec<f64> = runs.iter().map(|t| t.max(f64::MIN_POSITIVE).ln()).collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let variance = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64;
    variance.sqrt()
}

pub(super) fn diagnose_noise(bench: &Bench) -> anyhow::Result<()> {
    let regions = bench.args.regions;
    let configuration: Subspaces = ["locality", "region"]
        .iter()
        .map(|a| (vec![a.to_string()], regions))
        .collect();
    let shown = label(&configuration);
    let workload = workloads()
        .into_iter()
        .find(|w| w.name == "B")
        .expect("workload B is defined");
    let balanced = Mix {
        name: "BAL",
        search_share: 0.5,
    };
    let searches_only = Mix {
        name: "searches",
        search_share: 1.0,
    };
    let mut rows = Vec::new();
    let mut phases = Vec::new();
    for phase in ["same", "seeds", "rebuilt", "searches"] {
        let mix = if phase == "searches" {
            searches_only
        } else {
            balanced
        };
        bench.configure(&configuration)?;
        let mut runs = Vec::new();
        for run in 0..RUNS {
            if phase == "rebuilt" {
                bench.configure(&Vec::new())?;
                bench.configure(&configuration)?;
            }
            let seed = if phase == "seeds" {
                SAME_SEED + 1 + run as u64
            } else {
                SAME_SEED
            };
            let ops = bench.measure(
                &format!("noise {phase} B-{} {shown}", mix.name),
                bench.operations(&workload, mix, &UPDATED)?,
                seed,
            )?;
            eprintln!("noise {phase} run {}: {ops:.0} ops/s", run + 1);
            rows.push(format!("{phase},{},{seed},{ops:.1}", run + 1));
            runs.push(ops);
        }
        phases.push((phase, runs));
    }
    write_csv(
        &bench.args.out_dir.join("noise.csv"),
        "phase,run,seed,ops_per_s",
        &rows,
    )?;
    println!(
        "B-BAL on {shown}, {RUNS} runs a phase ({:.0} s each):",
        bench.args.seconds
    );
    println!(
        "{:<10} {:>12} {:>10}  runs (ops/s)",
        "phase", "median", "spread"
    );
    let mut summary = Vec::new();
    for (phase, runs) in &phases {
        let spread = log_spread(runs);
        let median = median(&mut runs.clone());
        let shown_runs: Vec<String> = runs.iter().map(|t| format!("{t:.0}")).collect();
        println!(
            "{phase:<10} {median:>12.1} {spread:>10.3}  {}",
            shown_runs.join(" ")
        );
        summary.push(json!({
            "phase": phase,
            "median_ops_per_s": round(median, 1),
            "log_spread": round(spread, 4),
            "runs_ops_per_s": runs.iter().map(|t| round(*t, 1)).collect::<Vec<_>>(),
        }));
    }
    println!(
        "{}",
        json!({"experiment": "hyperspace-noise", "configuration": shown, "phases": summary})
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_spread_against_a_direct_computation() {
        assert_eq!(log_spread(&[]), 0.0);
        assert_eq!(log_spread(&[5.0]), 0.0);
        assert_eq!(log_spread(&[7.0, 7.0, 7.0]), 0.0);
        // e and e^3: logs 1 and 3, mean 2, sample variance 2.
        let spread = log_spread(&[1f64.exp(), 3f64.exp()]);
        assert!((spread - 2f64.sqrt()).abs() < 1e-12, "{spread}");
    }
}
