//! `--decompose`: where, in a workload's own mix, the model's prediction of a
//! configuration goes wrong, operation kind by operation kind.
//!
//! Every configuration an earlier run measured (`<out>/model_accuracy.csv`) is built
//! again and its workload run, each operation timed by its kind (a search class, or the
//! update). With the clients sharing the machine's cores, an operation's latency is its
//! own work times a queueing factor common to all kinds; scaled so that the kinds' costs,
//! weighted by how often each ran, add up to `1 / T` ([`kind_costs_s`]), each kind's
//! measured cost stands beside the model's cost of it (equation 2 with the write term
//! at the predicted throughput, equation 4 for the update), whose weighted sum is the
//! model's `1 / T`. The difference, weighted by the kind's share, is its part of the
//! prediction's miss. The scaling holds for work done on the cores; an update also
//! waits for its batch's commit, which the scaling counts as work, so updates come out
//! dearer and searches cheaper than they are, the more so the more the mix updates.
//! Each kind's CPU on its client's thread is printed beside it: all of a search that
//! asks one region (the first region is read on the asking thread), none of the
//! commit's. After each run, 400 searches of the mix run one after another and the
//! shards count the rows they find, beside the model's rows weighted by class, and
//! then each class's searches alone (100 each) beside the model's rows for the class;
//! the records in segments of the table and each subspace (deleted versions included)
//! are printed too. `--diagnose` measures one class alone on compacted regions; this measures
//! every class where the workload runs: amid its updates, beside its other classes, on
//! the regions those leave behind.

use std::collections::BTreeMap;

use anyhow::Context;
use puffer_adapt::hyperspace::{
    self as model, predicted_throughput_ops_per_s, route_search, Calibration, Configuration,
    WorkloadProfile,
};
use serde_json::json;

use super::repredict::{read_rows, split_row};
use super::workload::{
    kind_costs_s, parse_label, profile, workloads, KindTime, Mix, Workload, MIXES, UPDATED,
};
use super::{
    config_error, model_configuration, rows_found_per_search, table_and_subspace_stats, write_csv,
    Bench, COUNTED_SEARCHES,
};
use crate::stats::round;

/// What the model says of one kind of operation.
struct ModelKind {
    /// Seconds of the machine one operation of the kind takes.
    cost_s: f64,
    /// Regions a search asks (for the update: 0).
    regions_asked: u64,
    /// Rows a search reads (for the update: 0).
    rows_read: f64,
}

/// What the model says of each kind of `profile`'s operations in `configuration`, in
/// [`super::workload::Operations`]' order (its search classes, then the update), and
/// its predicted throughput: the kinds' costs weighted by the profile's frequencies add
/// up to the model's `1 / T`.
fn model_kinds(
    configuration: &Configuration,
    profile: &WorkloadProfile,
    calibration: &Calibration,
) -> anyhow::Result<(f64, Vec<ModelKind>)> {
    let predicted = predicted_throughput_ops_per_s(configuration, profile, calibration)
        .map_err(config_error)?;
    let total: f64 = profile.searches.iter().map(|s| s.frequency).sum::<f64>()
        + profile.updates.iter().map(|u| u.frequency).sum::<f64>();
    let update_share = profile.updates.iter().map(|u| u.frequency).sum::<f64>() / total;
    // The share of the table written in the last τ seconds.
    let fresh = -(-update_share * predicted * calibration.fresh_window_s
        / calibration.objects as f64)
        .exp_m1();
    let mut costs = Vec::with_capacity(profile.searches.len() + 1);
    for search in &profile.searches {
        let alone = model::search_cost_s(
            configuration,
            &search.shape,
            search.rows.as_ref(),
            calibration,
        )
        .map_err(config_error)?;
        let route = route_search(configuration, &search.shape).map_err(config_error)?;
        let reads = model::search_reads(
            configuration,
            &route,
            &search.shape,
            search.rows.as_ref(),
            calibration.objects,
        );
        // The page's rows found in log tables and sorted batches cost no β.
        let fresh_rows = model::fresh_page_rows(&reads.pages, fresh);
        costs.push(ModelKind {
            cost_s: alone - fresh_rows * calibration.beta_s_per_object
                + (calibration.write_rate_cost_s2 * reads.exposure + calibration.catch_up_cost_s2)
                    * predicted
                    * update_share,
            regions_asked: route.regions_contacted,
            rows_read: reads.read,
        });
    }
    // The workload's updates, each of `UPDATED` equally often: their mean cost.
    let updates: f64 = profile.updates.iter().map(|u| u.frequency).sum();
    let mut update_cost = 0.0;
    for update in &profile.updates {
        let cost = model::update_cost_s(configuration, &update.attributes, calibration)
            .map_err(config_error)?;
        update_cost += cost * update.frequency / updates.max(f64::MIN_POSITIVE);
    }
    // The written regions' upkeep, a share of every second, is the updates': spread
    // over the updates of a second.
    let updates_per_s = update_share * predicted;
    let upkeep_s = if updates_per_s > 0.0 {
        model::upkeep_share(
            &model::tables_written(configuration, &profile.value_spreads),
            updates_per_s,
            calibration.region_upkeep_s_per_s,
            calibration.upkeep_half_rate_per_s,
        ) / updates_per_s
    } else {
        0.0
    };
    costs.push(ModelKind {
        cost_s: update_cost + upkeep_s,
        regions_asked: 0,
        rows_read: 0.0,
    });
    Ok((predicted, costs))
}

/// Searches of one class run alone to count the rows each finds.
const COUNTED_CLASS_SEARCHES: u64 = 100;

/// Rows one search of each of `workload`'s classes finds, each class run alone
/// ([`COUNTED_CLASS_SEARCHES`] searches, no update between them) on the regions the
/// timed run left behind: the measured side of the model's rows, class by class.
fn rows_found_per_class(bench: &Bench, workload: &Workload, seed: u64) -> anyhow::Result<Vec<f64>> {
    let searches_only = Mix {
        name: "searches",
        search_share: 1.0,
    };
    workload
        .searches
        .iter()
        .enumerate()
        .map(|(k, (attributes, _))| {
            let class = Workload {
                name: workload.name,
                searches: vec![(attributes.clone(), 1.0)],
            };
            rows_found_per_search(
                bench,
                &bench.operations(&class, searches_only, &UPDATED)?,
                seed + k as u64,
                COUNTED_CLASS_SEARCHES,
            )
        })
        .collect()
}

/// The kinds' names: each search class's attributes, then "update".
fn kind_names(workload: &Workload) -> Vec<String> {
    workload
        .searches
        .iter()
        .map(|(attributes, _)| attributes.join("+"))
        .chain(std::iter::once("update".to_string()))
        .collect()
}

/// Runs `--decompose` over the workloads asked for; `calibrations` predicts each
/// workload (by letter) and `fallback` those without one of their own.
pub(super) fn decompose(
    bench: &Bench,
    fallback: &Calibration,
    calibrations: &BTreeMap<String, Calibration>,
) -> anyhow::Result<()> {
    let out = &bench.args.out_dir;
    let mut sampled: Vec<(String, String)> = Vec::new();
    for row in read_rows(&out.join("model_accuracy.csv"))? {
        let (workload, configuration, _) =
            split_row(&row).with_context(|| format!("model_accuracy.csv: row {row:?}"))?;
        sampled.push((workload.to_string(), configuration.to_string()));
    }
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    for workload in workloads() {
        if !bench.args.workloads.iter().any(|w| w == workload.name) {
            continue;
        }
        let calibration = calibrations.get(workload.name).unwrap_or(fallback);
        let names = kind_names(&workload);
        for mix in MIXES {
            let name = format!("{}-{}", workload.name, mix.name);
            let labels: Vec<&String> = sampled
                .iter()
                .filter(|(w, _)| *w == name)
                .map(|(_, c)| c)
                .collect();
            if labels.is_empty() {
                continue;
            }
            let profile = bench.with_rows(profile(&workload, mix))?;
            for (position, shown) in labels.into_iter().enumerate() {
                let subspaces = parse_label(shown, bench.args.regions)
                    .with_context(|| format!("model_accuracy.csv: {name}: {shown:?}"))?;
                let configuration = model_configuration(&subspaces, bench.args.shards)?;
                let (predicted, model_kinds) = model_kinds(&configuration, &profile, calibration)?;
                bench.configure(&subspaces)?;
                let run = bench.measure_kinds(
                    bench.operations(&workload, mix, &UPDATED)?,
                    900 + position as u64,
                )?;
                let (measured, kinds) = (run.ops_per_s, run.kinds);
                let measured_costs = kind_costs_s(&kinds, measured);
                let operations: u64 = kinds.iter().map(|k| k.operations).sum();
                // What a search of the mix reads, counted by the shards, against the
                // model's rows weighted by how often each class is searched.
                let found = rows_found_per_search(
                    bench,
                    &bench.operations(&workload, mix, &UPDATED)?,
                    950 + position as u64,
                    COUNTED_SEARCHES,
                )?;
                let class_found =
                    rows_found_per_class(bench, &workload, 1_000 + 100 * position as u64)?;
                let searches: f64 = profile.searches.iter().map(|s| s.frequency).sum();
                let charged: f64 = profile
                    .searches
                    .iter()
                    .zip(&model_kinds)
                    .map(|(s, k)| s.frequency / searches * k.rows_read)
                    .sum();
                // Records in segments, deleted versions included, over the table and
                // each subspace: beyond the listings, the versions updates left behind
                // until a merge, which searches find and skip.
                let segment_records: Vec<u64> = table_and_subspace_stats(&bench.db)?
                    .iter()
                    .map(|stats| stats.segment_records)
                    .collect();
                eprintln!(
                    "{name}: {shown}: measured {measured:.0} ops/s, predicted {predicted:.0}; rows a search: {found:.1} found, {charged:.1} charged; records in segments (table, subspaces): {segment_records:?}"
                );
                let mut kinds_json = Vec::new();
                for (k, kind_name) in names.iter().enumerate() {
                    let KindTime {
                        operations: ran, ..
                    } = kinds[k];
                    let share = ran as f64 / operations.max(1) as f64;
                    let model_kind = &model_kinds[k];
                    let (measured_s, model_s) = (measured_costs[k], model_kind.cost_s);
                    // Its part of the miss: what it took beyond the model's cost, per
                    // operation of the workload.
                    let miss_us = share * (measured_s - model_s) * 1e6;
                    // The update finds no rows of its own.
                    let found = class_found.get(k).copied().unwrap_or(0.0);
                    eprintln!(
                        "  {kind_name:<28} {:>5.1} %  latency {:>8.0} us  CPU {:>6.0} us  cost {:>6.0} us, model {:>6.0} us  ({:+.0} us of the miss), {} regions, {:.0} rows ({found:.0} found)",
                        share * 100.0,
                        kinds[k].mean_latency_s() * 1e6,
                        kinds[k].mean_cpu_s() * 1e6,
                        measured_s * 1e6,
                        model_s * 1e6,
                        miss_us,
                        model_kind.regions_asked,
                        model_kind.rows_read,
                    );
                    rows.push(format!(
                        "{name},\"{shown}\",{kind_name},{:.4},{:.1},{:.1},{:.1},{:.1},{},{:.1},{found:.1},{measured:.1},{predicted:.1}",
                        share,
                        kinds[k].mean_latency_s() * 1e6,
                        kinds[k].mean_cpu_s() * 1e6,
                        measured_s * 1e6,
                        model_s * 1e6,
                        model_kind.regions_asked,
                        model_kind.rows_read,
                    ));
                    kinds_json.push(json!({
                        "kind": kind_name,
                        "share": round(share, 4),
                        "client_cpu_us": round(kinds[k].mean_cpu_s() * 1e6, 1),
                        "cost_us": round(measured_s * 1e6, 1),
                        "model_cost_us": round(model_s * 1e6, 1),
                        "rows_charged": round(model_kind.rows_read, 1),
                        "rows_found": round(found, 1),
                    }));
                }
                summaries.push(json!({
                    "workload": name,
                    "configuration": shown,
                    "rows_found_per_search": round(found, 1),
                    "rows_charged_per_search": round(charged, 1),
                    "segment_records": segment_records,
                    "measured_ops_per_s": round(measured, 1),
                    "predicted_ops_per_s": round(predicted, 1),
                    "kinds": kinds_json,
                }));
            }
        }
    }
    if summaries.is_empty() {
        anyhow::bail!(
            "{} holds no configuration of workloads {:?}: nothing to decompose",
            out.join("model_accuracy.csv").display(),
            bench.args.workloads
        );
    }
    bench.configure(&Vec::new())?;
    write_csv(
        &out.join("decompose.csv"),
        "workload,configuration,kind,share,latency_us,client_cpu_us,cost_us,model_cost_us,regions_asked,rows_read,rows_found,measured_ops_per_s,predicted_ops_per_s",
        &rows,
    )?;
    println!(
        "{}",
        json!({"experiment": "hyperspace-decompose", "configurations": summaries})
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::data;
    use super::*;
    use puffer_adapt::hyperspace::{RowProbe, SearchRows};

    #[test]
    fn the_model_kind_costs_add_up_to_its_prediction() {
        let workload = &workloads()[2];
        // Balanced: searches and updates both weigh, and the write and catch-up terms
        // are not 0. Without rows (none estimated here) the model charges whole
        // regions, but for the first class (a locality and a price, one region of
        // (locality,price)): 1,300 matches there and a page of 100, so the fresh rows
        // spare it part of its page.
        let mut profile = profile(workload, MIXES[1]);
        assert_eq!(workload.searches[0].0, ["locality", "price"]);
        profile.searches[0].rows = Some(SearchRows {
            page_rows: Some(100),
            probes: vec![RowProbe {
                matched_share: 0.05,
                attribute_shares: BTreeMap::from([
                    (data::id("locality"), 0.2),
                    (data::id("price"), 0.1),
                ]),
                free_values: BTreeMap::new(),
                candidate_free_values: BTreeMap::new(),
                candidate_free_shares: BTreeMap::new(),
                free_value_shares: BTreeMap::new(),
            }],
        });
        let calibration = Calibration {
            beta_s_per_object: 1e-6,
            region_cost_s: 5e-5,
            fan_out_cost_s: 2e-5,
            condition_cost_s: 0.0,
            sent_row_cost_s: 0.0,
            write_rate_cost_s2: 3e-7,
            catch_up_cost_s2: 2e-7,
            fresh_window_s: 5.0,
            region_upkeep_s_per_s: 1e-3,
            upkeep_half_rate_per_s: 200.0,
            alpha: 0.5,
            max_throughput_ops_per_s: 20_000.0,
            update_fixed_cost_s: 2e-5,
            objects: 26_000,
        };
        let subspaces = parse_label("(locality,price) (postcode)", 16).unwrap();
        let configuration = model_configuration(&subspaces, 4).unwrap();
        let (predicted, kinds) = model_kinds(&configuration, &profile, &calibration).unwrap();
        let costs: Vec<f64> = kinds.iter().map(|k| k.cost_s).collect();
        let total: f64 = profile.searches.iter().map(|s| s.frequency).sum::<f64>()
            + profile.updates.iter().map(|u| u.frequency).sum::<f64>();
        let weighted: f64 = profile
            .searches
            .iter()
            .map(|s| s.frequency)
            .chain(std::iter::once(
                profile.updates.iter().map(|u| u.frequency).sum::<f64>(),
            ))
            .zip(&costs)
            .map(|(f, c)| f / total * c)
            .sum();
        assert!(
            (weighted * predicted - 1.0).abs() < 1e-9,
            "weighted cost {weighted} s against 1/T {}",
            1.0 / predicted
        );
        assert_eq!(costs.len(), workload.searches.len() + 1);
        // The regions' upkeep is charged: without it the prediction is faster.
        let no_upkeep = Calibration {
            region_upkeep_s_per_s: 0.0,
            ..calibration
        };
        let (faster, _) = model_kinds(&configuration, &profile, &no_upkeep).unwrap();
        assert!(faster > predicted, "{faster} against {predicted}");
        // The fresh rows are charged: without them the prediction is slower.
        let stale = Calibration {
            fresh_window_s: 0.0,
            ..calibration
        };
        let (without, _) = model_kinds(&configuration, &profile, &stale).unwrap();
        assert!(predicted > without, "{predicted} against {without}");
    }
}
