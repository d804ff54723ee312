//! `--refit`'s second half: every configuration an earlier run measured
//! (`<out>/model_accuracy.csv` and `<out>/oracles.csv`), predicted again with the
//! parameters just fitted, against the throughput measured then.
//!
//! It tells in minutes what a change to the model does to its error on measurements
//! already made, where measuring again takes over an hour. A form chosen this way is
//! fitted to those measurements: only a new run says how it predicts.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use puffer_adapt::hyperspace::{
    pick_among_ties, rank_configurations, Calibration, RankedConfiguration, DEFAULT_TIE_MARGIN,
};
use serde_json::json;

use super::workload::{kendall_tau, label, profile, workloads, MIXES};
use super::{candidates_and_heuristics, config_error, subspaces_of, Bench};
use crate::stats::round;

/// One row of `model_accuracy.csv`.
struct Sampled {
    workload: String,
    configuration: String,
    predicted_ops_per_s: f64,
    measured_ops_per_s: f64,
}

/// Splits a row `name,"configuration",a,b,...` (the only quoted field) into the name,
/// the configuration and the fields after it.
pub(super) fn split_row(row: &str) -> Option<(&str, &str, Vec<&str>)> {
    let (name, rest) = row.split_once(",\"")?;
    let (configuration, rest) = rest.split_once("\",")?;
    Some((name, configuration, rest.split(',').collect()))
}

pub(super) fn read_rows(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(text.lines().skip(1).map(str::to_string).collect())
}

/// `calibration` predicts every workload but those `per_workload` (by letter) has a
/// calibration of their own for (an `--interleave` run's `calibration-<W>.json`).
pub(super) fn repredict(
    bench: &Bench,
    calibration: &Calibration,
    per_workload: &BTreeMap<String, Calibration>,
) -> anyhow::Result<()> {
    let out = &bench.args.out_dir;
    let mut sampled = Vec::new();
    // Every configuration measured, per workload: the sample's and the oracles'.
    let mut measured: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for row in read_rows(&out.join("model_accuracy.csv"))? {
        let (workload, configuration, fields) =
            split_row(&row).with_context(|| format!("model_accuracy.csv: row {row:?}"))?;
        let number = |k: usize| -> anyhow::Result<f64> {
            fields
                .get(k)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("model_accuracy.csv: row {row:?}, field {}", k + 3))
        };
        let s = Sampled {
            workload: workload.to_string(),
            configuration: configuration.to_string(),
            predicted_ops_per_s: number(0)?,
            measured_ops_per_s: number(1)?,
        };
        measured
            .entry(s.workload.clone())
            .or_default()
            .insert(s.configuration.clone(), s.measured_ops_per_s);
        sampled.push(s);
    }
    // oracles.csv: workload,oracle,"configuration",ops/s.
    for row in read_rows(&out.join("oracles.csv"))? {
        let parsed = row.split_once(',').and_then(|(workload, rest)| {
            let (_, configuration, fields) = split_row(rest)?;
            Some((
                workload,
                configuration,
                fields.first()?.parse::<f64>().ok()?,
            ))
        });
        let (workload, configuration, ops) =
            parsed.with_context(|| format!("oracles.csv: row {row:?}"))?;
        measured
            .entry(workload.to_string())
            .or_default()
            .insert(configuration.to_string(), ops);
    }
    let mut summaries = Vec::new();
    let mut all_signed: Vec<f64> = Vec::new();
    for workload in workloads() {
        let calibration = per_workload.get(workload.name).unwrap_or(calibration);
        for mix in MIXES {
            let name = format!("{}-{}", workload.name, mix.name);
            let rows: Vec<&Sampled> = sampled.iter().filter(|s| s.workload == name).collect();
            if rows.is_empty() {
                continue;
            }
            let profile = bench.with_rows(profile(&workload, mix))?;
            let (mut all, heuristics) = candidates_and_heuristics(bench, &profile)?;
            all.extend(heuristics.into_iter().map(|(_, c)| c));
            let ranked = rank_configurations(&all, &profile, calibration).map_err(config_error)?;
            let predicted: BTreeMap<String, f64> = ranked
                .iter()
                .map(|r| {
                    (
                        label(&subspaces_of(&r.configuration)),
                        r.predicted_throughput_ops_per_s,
                    )
                })
                .collect();
            let mut pairs = Vec::new();
            for row in &rows {
                let new = *predicted
                    .get(&row.configuration)
                    .with_context(|| format!("{name}: {} is not a candidate", row.configuration))?;
                eprintln!(
                    "{name}: {}: predicted {:.0} then, {new:.0} now, measured {:.0} ops/s",
                    row.configuration, row.predicted_ops_per_s, row.measured_ops_per_s
                );
                pairs.push((new, row.measured_ops_per_s));
            }
            let signed: Vec<f64> = pairs.iter().map(|(p, m)| (p - m) / m).collect();
            all_signed.extend(&signed);
            let mae = signed.iter().map(|e| e.abs()).sum::<f64>() / signed.len() as f64;
            let mean_signed = signed.iter().sum::<f64>() / signed.len() as f64;
            let (p, m): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
            let known = &measured[&name];
            let best_measured = known.values().copied().fold(0.0, f64::max);
            let top = label(&subspaces_of(&ranked[0].configuration));
            let top_measured = known.get(&top).copied();
            summaries.push(json!({
                "workload": name,
                "mean_abs_error": round(mae, 3),
                "mean_signed_error": round(mean_signed, 3),
                "kendall_tau": round(kendall_tau(&p, &m), 3),
                "model_top": top,
                "model_top_measured_ops_per_s": top_measured,
                "best_measured_ops_per_s": best_measured,
                "model_top_within_5_percent_of_best": top_measured.map(|t| t >= 0.95 * best_measured),
                "tie_picks": tie_picks(&ranked, known),
            }));
        }
    }
    println!(
        "\n{:<7} {:>7} {:>7} {:>6} {:>45} {:>9} {:>9}",
        "load", "MAE", "signed", "tau", "model's top", "ops/s", "best"
    );
    for s in &summaries {
        println!(
            "{:<7} {:>7} {:>7} {:>6} {:>45} {:>9} {:>9}",
            s["workload"].as_str().unwrap_or(""),
            s["mean_abs_error"],
            s["mean_signed_error"],
            s["kendall_tau"],
            s["model_top"].as_str().unwrap_or(""),
            s["model_top_measured_ops_per_s"],
            s["best_measured_ops_per_s"],
        );
    }
    println!(
        "\n{:<7} {:>6} {:>45} {:>9} {:>9}",
        "load", "tie", "pick", "predicted", "ops/s"
    );
    for s in &summaries {
        for pick in s["tie_picks"].as_array().into_iter().flatten() {
            println!(
                "{:<7} {:>6} {:>45} {:>9} {:>9}",
                s["workload"].as_str().unwrap_or(""),
                pick["tie_margin"],
                pick["configuration"].as_str().unwrap_or(""),
                pick["predicted_ops_per_s"],
                pick["measured_ops_per_s"],
            );
        }
    }
    let n = all_signed.len().max(1) as f64;
    println!(
        "{}",
        json!({
            "experiment": "hyperspace-refit",
            "calibration": format!("{:?}", calibration),
            "mean_abs_error": round(all_signed.iter().map(|e| e.abs()).sum::<f64>() / n, 3),
            "mean_signed_error": round(all_signed.iter().sum::<f64>() / n, 3),
            "workloads": summaries,
        })
    );
    Ok(())
}

/// Tie margins `tie_picks` tries.
const TIE_MARGINS: [f64; 4] = [0.0, 0.025, DEFAULT_TIE_MARGIN, 0.10];

/// What the configurator would build at each of [`TIE_MARGINS`] (the fewest copies among
/// the candidates predicted within the margin of the best), with its throughput where
/// the earlier run measured it (`known`, by label).
fn tie_picks(ranked: &[RankedConfiguration], known: &BTreeMap<String, f64>) -> serde_json::Value {
    let picks: Vec<serde_json::Value> = TIE_MARGINS
        .iter()
        .filter_map(|&margin| {
            let pick = pick_among_ties(ranked, margin)?;
            let shown = label(&subspaces_of(&pick.configuration));
            Some(json!({
                "tie_margin": margin,
                "configuration": shown,
                "predicted_ops_per_s": round(pick.predicted_throughput_ops_per_s, 1),
                "measured_ops_per_s": known.get(&shown),
            }))
        })
        .collect();
    json!(picks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_row_finds_the_quoted_configuration() {
        let (name, configuration, fields) =
            split_row("A-RH,\"(locality) (region,price)\",3942.0,4327.0,model-best").unwrap();
        assert_eq!(name, "A-RH");
        assert_eq!(configuration, "(locality) (region,price)");
        assert_eq!(fields, vec!["3942.0", "4327.0", "model-best"]);
        assert!(split_row("A-RH,key only,1,2").is_none());
    }
}
