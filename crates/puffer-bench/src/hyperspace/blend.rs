//! `--diagnose-blend`: whether search classes cost more mixed than each alone.
//!
//! The model charges a workload the sum of its classes' costs, each weighted by its
//! frequency, and the calibration measures one class at a time. Workload C mixes 14
//! classes that route to two or three subspaces, and has been predicted too fast in
//! every run since 2026-11-30, by 12 to 23 %. If a mix costs more than its parts (the
//! regions of several subspaces competing for the caches, say), the calibration cannot
//! see it. So, on one configuration and at one share of updates, every class of C runs
//! alone and then several mixes of them run, all in rounds of a new random order each;
//! with the same share of updates everywhere, the additive model predicts a mix from
//! its classes alone exactly: `1 / T_mix = Σ_k w_k / T_k` ([`additive_ops_per_s`]).
//! The measured mix over that prediction, round by round (the parts and the mix run
//! minutes apart at most), is the excess the model misses. The process's CPU per
//! operation, mix against parts, says whether the excess is work (more CPU an
//! operation) or cores left idle (the same CPU, less of it a second). The
//! calibration's runs are measured in the same rounds, in one random order with the
//! classes and blends, and the model fitted on them (`<out>/calibration-blend.json`)
//! predicts every class and blend: where a class alone is mispredicted, the miss is in
//! that class's cost, not in the mixing.

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use puffer_adapt::hyperspace::predicted_throughput_ops_per_s;
use rand::seq::SliceRandom;

use super::calibration::Calibrator;
use super::workload::{label, median, profile, workloads, Mix, Workload, UPDATED};
use super::{config_error, measure_in_rounds, model_configuration, write_csv, Bench, Subspaces};
use crate::stats::round;

/// The configuration the classes run on: the one the configurator chose for C at its
/// read-heavy and balanced mixes in every run since `c2`, where each class of C asks
/// one region of (locality), (postcode) or (region).
fn configuration(regions: u32) -> Subspaces {
    ["locality", "postcode", "region"]
        .iter()
        .map(|a| (vec![a.to_string()], regions))
        .collect()
}

/// One run of a round: a calibration run, or a class or blend (by index into the
/// items measured).
#[derive(Clone, Copy)]
enum Item {
    Calibration(usize),
    Measured(usize),
}

/// Searches' share of the operations in every run: C's read-heavy mix.
const SEARCH_SHARE: f64 = 0.9;

/// A blend of classes: its name and each class's weight, by index into C's classes.
struct Blend {
    name: &'static str,
    weights: Vec<(usize, f64)>,
}

/// The blends measured, over C's classes in [`workloads`]' order: the three that route
/// to (locality), the three that route to (postcode), one of each (one subspace against
/// two), the six most frequent, and all of C (`c_weights`: C's weights, by class).
fn blends(c_weights: &[f64]) -> Vec<Blend> {
    vec![
        Blend {
            name: "locality classes",
            weights: vec![(0, 1.0), (1, 1.0), (2, 1.0)],
        },
        Blend {
            name: "postcode classes",
            weights: vec![(3, 1.0), (4, 1.0), (5, 1.0)],
        },
        Blend {
            name: "locality+price with postcode+price",
            weights: vec![(0, 2.0), (3, 1.0)],
        },
        Blend {
            name: "C's six most frequent",
            weights: vec![(0, 2.0), (1, 2.0), (2, 2.0), (3, 1.0), (4, 1.0), (5, 1.0)],
        },
        Blend {
            name: "all of C",
            weights: c_weights.iter().copied().enumerate().collect(),
        },
    ]
}

/// The throughput the additive model predicts for a blend (`weights` by class, any
/// positive scale) from each class's throughput alone at the same share of updates:
/// the harmonic mean weighted by the classes' shares. `None` where a weight is not
/// positive and finite, a class has no throughput (or not a positive one), or there
/// is no class.
pub(super) fn additive_ops_per_s(weights: &[(usize, f64)], alone_ops_per_s: &[f64]) -> Option<f64> {
    let total: f64 = weights.iter().map(|(_, w)| w).sum();
    if weights.is_empty() || !(total.is_finite() && total > 0.0) {
        return None;
    }
    let mut seconds_per_op = 0.0;
    for &(class, weight) in weights {
        let alone = *alone_ops_per_s.get(class)?;
        if !(weight.is_finite() && weight > 0.0 && alone.is_finite() && alone > 0.0) {
            return None;
        }
        seconds_per_op += weight / total / alone;
    }
    Some(1.0 / seconds_per_op)
}

/// Runs `--diagnose-blend` (see the module's comment): `<out>/blend.csv` holds every
/// run of a class or blend (the calibration's runs go to `calibration-blend.json`), and
/// the table and the JSON each one's median against the model and each blend's excess.
pub(super) fn diagnose_blend(bench: &Bench) -> anyhow::Result<()> {
    let c = workloads()
        .into_iter()
        .find(|w| w.name == "C")
        .expect("workload C is defined");
    let weights: Vec<f64> = c.searches.iter().map(|(_, w)| *w).collect();
    let blends = blends(&weights);
    let subspaces = configuration(bench.args.regions);
    let shown = label(&subspaces);
    let mix = Mix {
        name: "blend",
        search_share: SEARCH_SHARE,
    };
    // Items: C's classes alone, then the blends.
    let mut items: Vec<(String, Workload)> = c
        .searches
        .iter()
        .map(|(attributes, _)| {
            (
                attributes.join("+"),
                Workload {
                    name: "blend",
                    searches: vec![(attributes.clone(), 1.0)],
                },
            )
        })
        .collect();
    for blend in &blends {
        items.push((
            blend.name.to_string(),
            Workload {
                name: "blend",
                searches: blend
                    .weights
                    .iter()
                    .map(|&(k, w)| (c.searches[k].0.clone(), w))
                    .collect(),
            },
        ));
    }
    // The calibration's runs in the same rounds, in one random order with the
    // classes and blends: the parameters that predict them are fitted on runs of the
    // same minutes (between processes, the same runs moved by 11 to 15 % together).
    let mut calibrator = Calibrator::new(bench);
    let calibration_runs = calibrator.runs();
    let mut order: Vec<Item> = (0..calibration_runs)
        .map(Item::Calibration)
        .chain((0..items.len()).map(Item::Measured))
        .collect();
    let mut rng = StdRng::seed_from_u64(bench.args.seed ^ 0xb1e4d);
    order.shuffle(&mut rng);
    // Each run's process CPU, in cores, by item and round.
    let mut cores = vec![Vec::new(); items.len()];
    let mut csv = Vec::new();
    let runs = measure_in_rounds(
        bench.args.rounds,
        order.len(),
        &mut rng,
        |k, round, position| {
            let i = match order[k] {
                Item::Calibration(i) => return calibrator.measure(bench, i, round),
                Item::Measured(i) => i,
            };
            let (name, workload) = &items[i];
            bench.configure(&subspaces)?;
            let (measured, rates) = bench.measure_with_cpu(
                &format!("blend: {name} on {shown}"),
                bench.operations(workload, mix, &UPDATED)?,
                2_000 + 100 * round as u64 + i as u64,
            )?;
            let all = rates.map(|r| r.all);
            cores[i].extend(all);
            eprintln!(
                "blend round {} ({}/{}): {name}: {measured:.0} ops/s, {} cores",
                round + 1,
                position + 1,
                order.len(),
                all.map_or("?".to_string(), |c| format!("{c:.2}"))
            );
            csv.push(format!(
                "{round},{position},\"{name}\",{measured:.1},{}",
                all.map_or(String::new(), |c| format!("{c:.3}"))
            ));
            Ok(measured)
        },
    )?;
    let mut calibration_rounds = vec![Vec::new(); calibration_runs];
    let mut throughputs = vec![Vec::new(); items.len()];
    for (item, rounds) in order.iter().zip(runs) {
        match *item {
            Item::Calibration(i) => calibration_rounds[i] = rounds,
            Item::Measured(i) => throughputs[i] = rounds,
        }
    }
    let measured_calibration = calibrator.fit_and_write(
        bench,
        calibration_rounds,
        &bench.args.out_dir.join("calibration-blend.json"),
    )?;
    let fitted =
        puffer_node::hyperspace::calibration(&measured_calibration, bench.records.len() as u64);
    let configuration = model_configuration(&subspaces, bench.args.shards)?;
    let mut model_ops_per_s = Vec::with_capacity(items.len());
    for (_, workload) in &items {
        let profile = bench.with_rows(profile(workload, mix))?;
        model_ops_per_s.push(
            predicted_throughput_ops_per_s(&configuration, &profile, &fitted)
                .map_err(config_error)?,
        );
    }
    bench.configure(&Vec::new())?;
    write_csv(
        &bench.args.out_dir.join("blend.csv"),
        "round,position,item,ops_per_s,cpu_cores",
        &csv,
    )?;
    let classes = c.searches.len();
    let medians: Vec<f64> = throughputs.iter().map(|t| median(&mut t.clone())).collect();
    let median_cores: Vec<Option<f64>> = cores
        .iter()
        .map(|c| (!c.is_empty()).then(|| median(&mut c.clone())))
        .collect();
    println!(
        "\nclasses of C alone on {shown}, {:.0} % searches ({} rounds)",
        SEARCH_SHARE * 100.0,
        bench.args.rounds
    );
    // The model's error on an item: predicted over measured, less 1.
    let model_error = |i: usize| model_ops_per_s[i] / medians[i] - 1.0;
    println!(
        "{:<34} {:>10} {:>10} {:>8} {:>7}",
        "class", "ops/s", "model", "error", "cores"
    );
    for (k, (name, _)) in items.iter().enumerate().take(classes) {
        println!(
            "{:<34} {:>10.0} {:>10.0} {:>7.1}% {:>7}",
            name,
            medians[k],
            model_ops_per_s[k],
            model_error(k) * 100.0,
            median_cores[k].map_or("?".to_string(), |c| format!("{c:.2}"))
        );
    }
    println!(
        "\n{:<34} {:>10} {:>10} {:>9} {:>9} {:>10} {:>8} {:>7} {:>7}",
        "blend", "measured", "additive", "excess", "by round", "model", "error", "cores", "parts"
    );
    let mut summaries = Vec::new();
    for (b, blend) in blends.iter().enumerate() {
        let i = classes + b;
        let predicted = additive_ops_per_s(&blend.weights, &medians[..classes]);
        // Round by round: the blend against its parts measured in the same round.
        let mut by_round: Vec<f64> = (0..bench.args.rounds)
            .filter_map(|r| {
                let alone: Vec<f64> = throughputs[..classes].iter().map(|t| t[r]).collect();
                let additive = additive_ops_per_s(&blend.weights, &alone)?;
                Some(additive / throughputs[i][r] - 1.0)
            })
            .collect();
        let excess_by_round = median(&mut by_round);
        // The parts' CPU a second, as the additive model would have the blend run: each
        // class's CPU an operation, weighted by the operations' shares, at the blend's
        // predicted throughput.
        let parts_cores = predicted.and_then(|p| {
            let total: f64 = blend.weights.iter().map(|(_, w)| w).sum();
            let mut per_op = 0.0;
            for &(k, w) in &blend.weights {
                per_op += w / total * median_cores[k]? / medians[k];
            }
            Some(per_op * p)
        });
        let excess = predicted.map(|p| p / medians[i] - 1.0);
        println!(
            "{:<34} {:>10.0} {:>10} {:>8} {:>8.1}% {:>10.0} {:>7.1}% {:>7} {:>7}",
            blend.name,
            medians[i],
            predicted.map_or("?".to_string(), |p| format!("{p:.0}")),
            excess.map_or("?".to_string(), |e| format!("{:.1}%", e * 100.0)),
            excess_by_round * 100.0,
            model_ops_per_s[i],
            model_error(i) * 100.0,
            median_cores[i].map_or("?".to_string(), |c| format!("{c:.2}")),
            parts_cores.map_or("?".to_string(), |c| format!("{c:.2}")),
        );
        summaries.push(json!({
            "blend": blend.name,
            "measured_ops_per_s": round(medians[i], 1),
            "additive_ops_per_s": predicted.map(|p| round(p, 1)),
            "excess": excess.map(|e| round(e, 4)),
            "excess_median_by_round": round(excess_by_round, 4),
            "excess_by_round": by_round.iter().map(|e| round(*e, 4)).collect::<Vec<_>>(),
            "cpu_cores": median_cores[i].map(|c| round(c, 3)),
            "parts_cpu_cores_at_additive": parts_cores.map(|c| round(c, 3)),
            "model_ops_per_s": round(model_ops_per_s[i], 1),
            "model_error": round(model_error(i), 4),
        }));
    }
    println!(
        "{}",
        json!({
            "experiment": "hyperspace-diagnose-blend",
            "configuration": shown,
            "search_share": SEARCH_SHARE,
            "rounds": bench.args.rounds,
            "calibration": measured_calibration,
            "classes_alone": (0..classes).map(|k| json!({
                "class": items[k].0,
                "ops_per_s": round(medians[k], 1),
                "model_ops_per_s": round(model_ops_per_s[k], 1),
                "model_error": round(model_error(k), 4),
                "cpu_cores": median_cores[k].map(|c| round(c, 3)),
            })).collect::<Vec<_>>(),
            "blends": summaries,
        })
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_additive_prediction_is_the_weighted_harmonic_mean_of_the_parts() {
        // Classes costing 1 ms and 4 ms an operation, two of the first to one of the
        // second: (2 · 1 + 1 · 4) / 3 = 2 ms an operation, 500 ops/s.
        let alone = [1000.0, 250.0, 7.0];
        let blended = additive_ops_per_s(&[(0, 2.0), (1, 1.0)], &alone).unwrap();
        assert!((blended - 500.0).abs() < 1e-9, "{blended}");
        // The weights' scale does not matter; a class alone is itself.
        let scaled = additive_ops_per_s(&[(0, 20.0), (1, 10.0)], &alone).unwrap();
        assert!((scaled - blended).abs() < 1e-9);
        assert_eq!(additive_ops_per_s(&[(2, 3.0)], &alone), Some(7.0));
    }

    #[test]
    fn the_additive_prediction_refuses_what_it_cannot_weigh() {
        let alone = [1000.0, 0.0];
        assert_eq!(additive_ops_per_s(&[], &alone), None);
        assert_eq!(additive_ops_per_s(&[(1, 1.0)], &alone), None);
        assert_eq!(additive_ops_per_s(&[(5, 1.0)], &alone), None);
        assert_eq!(additive_ops_per_s(&[(0, -1.0), (0, 2.0)], &alone), None);
        assert_eq!(additive_ops_per_s(&[(0, f64::NAN)], &alone), None);
    }

    #[test]
    fn every_blend_names_classes_of_c() {
        let weights: Vec<f64> = workloads()
            .into_iter()
            .find(|w| w.name == "C")
            .unwrap()
            .searches
            .iter()
            .map(|(_, w)| *w)
            .collect();
        let classes = weights.len();
        for blend in blends(&weights) {
            assert!(!blend.weights.is_empty(), "{}", blend.name);
            assert!(
                blend.weights.iter().all(|&(k, w)| k < classes && w > 0.0),
                "{}",
                blend.name
            );
        }
    }
}
