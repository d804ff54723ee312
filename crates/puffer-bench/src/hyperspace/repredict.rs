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
    copies_per_object, pick_among_ties, rank_configurations, Calibration, RankedConfiguration,
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
    let mut order = PairOrder::default();
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
            let predicted: BTreeMap<String, (f64, u32)> = ranked
                .iter()
                .map(|r| {
                    (
                        label(&subspaces_of(&r.configuration)),
                        (
                            r.predicted_throughput_ops_per_s,
                            copies_per_object(&r.configuration),
                        ),
                    )
                })
                .collect();
            // (predicted now, measured, copies per object) of every row.
            let mut pairs = Vec::new();
            for row in &rows {
                let (new, copies) = *predicted
                    .get(&row.configuration)
                    .with_context(|| format!("{name}: {} is not a candidate", row.configuration))?;
                eprintln!(
                    "{name}: {}: predicted {:.0} then, {new:.0} now, measured {:.0} ops/s",
                    row.configuration, row.predicted_ops_per_s, row.measured_ops_per_s
                );
                pairs.push((new, row.measured_ops_per_s, copies));
            }
            let signed: Vec<f64> = pairs.iter().map(|(p, m, _)| (p - m) / m).collect();
            all_signed.extend(&signed);
            order.add(&pairs);
            let mae = signed.iter().map(|e| e.abs()).sum::<f64>() / signed.len() as f64;
            let mean_signed = signed.iter().sum::<f64>() / signed.len() as f64;
            let (p, m): (Vec<f64>, Vec<f64>) = pairs.iter().map(|&(p, m, _)| (p, m)).unzip();
            let known = &measured[&name];
            // The oracles' configurations the sample did not hold: predicted, not scored
            // (the configurator's choice among them is what the verdicts turn on).
            for (configuration, measured_ops_per_s) in known {
                if rows.iter().any(|r| &r.configuration == configuration) {
                    continue;
                }
                if let Some((new, _)) = predicted.get(configuration) {
                    eprintln!(
                        "{name}: {configuration} (oracle): predicted {new:.0} now, \
                         measured {measured_ops_per_s:.0} ops/s"
                    );
                }
            }
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
    println!(
        "\npairs of one workload, by how far apart predicted: measured in the order predicted \
         (all pairs; those whose lower prediction has fewer copies)"
    );
    for (band, counts) in PAIR_BANDS.windows(2).zip(order.counts) {
        println!(
            "  {:>5.1} to {:>5.1} %: {} of {}; {} of {}",
            (band[0] - 1.0) * 100.0,
            (band[1] - 1.0) * 100.0,
            counts.in_order,
            counts.pairs,
            counts.fewer_copies_in_order,
            counts.fewer_copies_pairs,
        );
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
            "pairs_in_predicted_order": order.json(),
        })
    );
    Ok(())
}

/// Bands of the ratio of two predictions (higher over lower) [`PairOrder`] counts in.
const PAIR_BANDS: [f64; 6] = [1.0, 1.025, 1.05, 1.10, 1.20, f64::INFINITY];

/// How often two configurations of one workload were measured in the order predicted,
/// by how far apart they were predicted: the model's resolution, which the tie margin
/// of the configurator stands for. Counted apart: the pairs whose lower prediction
/// stores fewer copies, the ones the tie rule decides.
#[derive(Default)]
struct PairOrder {
    /// Per band of [`PAIR_BANDS`].
    counts: [BandCounts; PAIR_BANDS.len() - 1],
}

#[derive(Default, Clone, Copy, Debug, PartialEq)]
struct BandCounts {
    pairs: usize,
    in_order: usize,
    fewer_copies_pairs: usize,
    fewer_copies_in_order: usize,
}

impl PairOrder {
    /// Every pair of `rows` (one workload's configurations: predicted ops/s, measured
    /// ops/s, copies per object). Of two equal predictions, the first listed is taken
    /// as the higher.
    fn add(&mut self, rows: &[(f64, f64, u32)]) {
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                let (high, low) = if a.0 >= b.0 { (a, b) } else { (b, a) };
                let ratio = high.0 / low.0;
                let Some(band) = PAIR_BANDS
                    .windows(2)
                    .position(|w| w[0] <= ratio && ratio < w[1])
                else {
                    continue;
                };
                let counts = &mut self.counts[band];
                let in_order = usize::from(high.1 > low.1);
                counts.pairs += 1;
                counts.in_order += in_order;
                if low.2 < high.2 {
                    counts.fewer_copies_pairs += 1;
                    counts.fewer_copies_in_order += in_order;
                }
            }
        }
    }

    fn json(&self) -> serde_json::Value {
        let bands: Vec<serde_json::Value> = PAIR_BANDS
            .windows(2)
            .zip(self.counts)
            .map(|(band, counts)| {
                json!({
                    "predicted_apart_from": band[0],
                    "predicted_apart_to": if band[1].is_finite() { json!(band[1]) } else { json!(null) },
                    "pairs": counts.pairs,
                    "in_order": counts.in_order,
                    "lower_with_fewer_copies_pairs": counts.fewer_copies_pairs,
                    "lower_with_fewer_copies_in_order": counts.fewer_copies_in_order,
                })
            })
            .collect();
        json!(bands)
    }
}

/// Tie margins `tie_picks` tries.
const TIE_MARGINS: [f64; 4] = [0.0, 0.025, 0.05, 0.10];

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
    fn pair_order_counts_every_pair_by_band_against_a_naive_count() {
        // (predicted, measured, copies). Within 2.5 %: 101/100 in order, 101/100' not,
        // and the tie 100/100' (the first listed taken as the higher) not. Within 2.5 to
        // 5 %: 101/97 and 100'/97 in order, 100/97 not; 97 has the fewest copies.
        let rows = [
            (101.0, 50.0, 3),
            (100.0, 40.0, 3),
            (97.0, 45.0, 2),
            (100.0, 60.0, 4),
        ];
        let mut order = PairOrder::default();
        order.add(&rows);
        let mut naive = [BandCounts::default(); 5];
        for i in 0..rows.len() {
            for j in i + 1..rows.len() {
                let (h, l) = if rows[i].0 >= rows[j].0 {
                    (rows[i], rows[j])
                } else {
                    (rows[j], rows[i])
                };
                let r = h.0 / l.0;
                let band = [1.025, 1.05, 1.1, 1.2, f64::INFINITY]
                    .iter()
                    .position(|&upper| r < upper)
                    .unwrap();
                let counts = &mut naive[band];
                counts.pairs += 1;
                counts.in_order += usize::from(h.1 > l.1);
                if l.2 < h.2 {
                    counts.fewer_copies_pairs += 1;
                    counts.fewer_copies_in_order += usize::from(h.1 > l.1);
                }
            }
        }
        assert_eq!(order.counts, naive);
        assert_eq!((order.counts[0].pairs, order.counts[0].in_order), (3, 1));
        assert_eq!((order.counts[1].pairs, order.counts[1].in_order), (3, 2));
        // Within 2.5 %, no lower prediction has fewer copies; within 2.5 to 5 %, 97 is
        // the lower of all three pairs, and measured below 101 and 100' but above 100.
        assert_eq!(
            (
                order.counts[0].fewer_copies_pairs,
                order.counts[0].fewer_copies_in_order
            ),
            (0, 0)
        );
        assert_eq!(
            (
                order.counts[1].fewer_copies_pairs,
                order.counts[1].fewer_copies_in_order
            ),
            (3, 2)
        );
    }

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
