//! `--rows`: the rows a search reads, counted exactly in memory, against the model's
//! estimate ([`model::objects_read`]), class by class, in every configuration an
//! earlier run measured (`<out>/model_accuracy.csv`). Nothing is timed.
//!
//! The count is the store's plan taken per region: a search goes where the model
//! routes it (the store routes the same way), asks the regions its equalities fall in
//! (the store's grids, planned here from the same records), and in each region reads
//! the rows of the constraint that finds the fewest there, stopping once the region has
//! found a page of matches. The store plans per segment rather than per region, which
//! can only read fewer (a sum of minimums is at most the minimum of sums): with one or
//! two segments a region after compaction, the two are close, and `--decompose`
//! prints what the shards counted for comparison. Searches are drawn as the clients draw
//! them ([`super::workload::Operations`]): a listing with all of the class's attributes,
//! uniformly, and its values.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use anyhow::Context;
use puffer_adapt::hyperspace::grid::{Condition, Coordinate, Grid};
use puffer_adapt::hyperspace::{
    self as model, predicted_throughput_ops_per_s, rank_configurations, route_search, Calibration,
    Configuration, RowProbe, SearchRoute, SearchRows, SearchShape,
};
use puffer_node::layout::shard_of;
use puffer_node::subspace::{coordinate, plan_grid};
use puffer_store::{Record, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::repredict::{read_rows, split_row};
use super::workload::{
    listings_with, median, parse_label, profile, workloads, Mix, Workload, MIXES, PAGE_ROWS,
};
use super::{
    candidates_and_heuristics, config_error, data, model_configuration, write_csv, Bench, TABLE,
};
use crate::stats::round;

/// Searches of one class drawn to count the rows they read.
const DRAWN_SEARCHES: usize = 400;

/// A value as a map key (floats by their exact bits, through their debug form).
fn value_key(value: &Value) -> String {
    format!("{value:?}")
}

/// Where the records lie in one routed subspace: each record's region, and the grid.
struct Placement {
    /// Per record, its region (the key subspace: its shard).
    region_of: Vec<u32>,
    /// The subspace's grid and attributes (`None`: the key subspace).
    grid: Option<(Grid, Vec<String>)>,
    /// Regions in all.
    regions: u32,
}

impl Placement {
    fn key(records: &[Record], shards: u32) -> Placement {
        Placement {
            region_of: records.iter().map(|r| shard_of(&r.key, shards)).collect(),
            grid: None,
            regions: shards,
        }
    }

    fn subspace(bench: &Bench, attributes: &[String], regions: u32) -> anyhow::Result<Placement> {
        let schema = bench.db.table(TABLE)?.schema();
        let grid = plan_grid(&schema, attributes, regions, bench.records.iter())?;
        let region_of = bench
            .records
            .iter()
            .map(|record| {
                let coordinates: Vec<Coordinate<'_>> = attributes
                    .iter()
                    .map(|a| record.values.get(a).map_or(Coordinate::Missing, coordinate))
                    .collect();
                grid.region_of(&coordinates) as u32
            })
            .collect();
        Ok(Placement {
            region_of,
            regions: grid.regions() as u32,
            grid: Some((grid, attributes.to_vec())),
        })
    }

    /// The regions a search fixing `values` asks.
    fn asked(&self, values: &[(&str, &Value)]) -> Vec<u32> {
        let Some((grid, attributes)) = &self.grid else {
            return (0..self.regions).collect();
        };
        let conditions: Vec<Condition<'_>> = attributes
            .iter()
            .map(|a| match values.iter().find(|(name, _)| name == a) {
                Some((_, value)) => Condition::OneOf(vec![coordinate(value)]),
                None => Condition::Any,
            })
            .collect();
        grid.regions_matching(&conditions)
            .into_iter()
            .map(|r| r as u32)
            .collect()
    }
}

/// Records by attribute and value.
type ValueIndex = HashMap<(String, String), Vec<usize>>;

fn value_index(records: &[Record], attributes: &[&str]) -> ValueIndex {
    let mut index: ValueIndex = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        for &attribute in attributes {
            if let Some(value) = record.values.get(attribute) {
                index
                    .entry((attribute.to_string(), value_key(value)))
                    .or_default()
                    .push(i);
            }
        }
    }
    index
}

/// Rows one search fixing `values` reads in `placement`: per region asked, the rows of
/// the constraint finding the fewest there, cut to the page's share where the region
/// holds more matches than a page.
fn rows_read(
    placement: &Placement,
    index: &ValueIndex,
    records: &[Record],
    values: &[(&str, &Value)],
) -> f64 {
    let asked = placement.asked(values);
    let mut per_region: BTreeMap<u32, (Vec<u64>, u64)> = asked
        .iter()
        .map(|&r| (r, (vec![0; values.len()], 0)))
        .collect();
    for (c, (attribute, value)) in values.iter().enumerate() {
        let Some(having) = index.get(&(attribute.to_string(), value_key(value))) else {
            continue;
        };
        for &record in having {
            if let Some((counts, matches)) = per_region.get_mut(&placement.region_of[record]) {
                counts[c] += 1;
                // Counted once, with the first constraint's rows.
                if c == 0
                    && values
                        .iter()
                        .all(|(a, v)| records[record].values.get(*a) == Some(*v))
                {
                    *matches += 1;
                }
            }
        }
    }
    per_region
        .values()
        .map(|(counts, matches)| {
            let fewest = counts.iter().copied().min().unwrap_or(0) as f64;
            if *matches > PAGE_ROWS as u64 {
                fewest * PAGE_ROWS as f64 / *matches as f64
            } else {
                fewest
            }
        })
        .sum()
}

/// The exact counts behind a [`RowProbe`], from every record rather than a sample:
/// what the model would charge a search if its estimate of the shares were exact.
struct ExactProbes<'r> {
    records: &'r [Record],
    index: &'r ValueIndex,
    /// Every attribute some workload searches (the free attributes a probe counts).
    searched: Vec<&'static str>,
    /// Per attribute and value, the distinct values of each searched attribute among
    /// the records holding it, and the share of the table holding those.
    candidate_free: HashMap<(String, String), FreeValues>,
    /// Per searched attribute, the records without it.
    missing: HashMap<&'static str, usize>,
}

/// Per attribute, distinct values and the share of the table holding them.
type FreeValues = (
    BTreeMap<model::AttributeId, u32>,
    BTreeMap<model::AttributeId, f64>,
);

impl ExactProbes<'_> {
    /// Distinct values of each searched attribute not in `fixed` among `having`.
    fn distinct_free(&self, having: &[usize], fixed: &[(&str, &Value)]) -> FreeValues {
        let objects = self.records.len() as f64;
        let mut values = BTreeMap::new();
        let mut shares = BTreeMap::new();
        for a in self
            .searched
            .iter()
            .filter(|a| !fixed.iter().any(|(f, _)| f == *a))
        {
            let distinct: std::collections::HashSet<Option<String>> = having
                .iter()
                .map(|&r| self.records[r].values.get(*a).map(value_key))
                .collect();
            // Records without the attribute hold no value of it: counted apart.
            let held: usize = distinct
                .iter()
                .map(|value| match value {
                    Some(v) => self
                        .index
                        .get(&(a.to_string(), v.clone()))
                        .map_or(0, Vec::len),
                    None => self.missing.get(a).copied().unwrap_or(0),
                })
                .sum();
            values.insert(data::id(a), (distinct.len() as u32).max(1));
            shares.insert(data::id(a), (held as f64 / objects).min(1.0));
        }
        (values, shares)
    }

    /// Per searched attribute not in `fixed`, the shares of its most common values
    /// among `matching`.
    fn value_shares(
        &self,
        matching: &[usize],
        fixed: &[(&str, &Value)],
    ) -> BTreeMap<model::AttributeId, Vec<f64>> {
        self.searched
            .iter()
            .filter(|a| !fixed.iter().any(|(f, _)| f == *a))
            .map(|a| {
                let mut counts: HashMap<Option<String>, usize> = HashMap::new();
                for &r in matching {
                    *counts
                        .entry(self.records[r].values.get(*a).map(value_key))
                        .or_default() += 1;
                }
                let counts = counts.into_values().collect();
                (
                    data::id(a),
                    model::most_common_shares(counts, matching.len()),
                )
            })
            .collect()
    }

    fn probe(&mut self, values: &[(&str, &Value)]) -> RowProbe {
        let objects = self.records.len() as f64;
        let having = |attribute: &str, value: &Value| -> &[usize] {
            self.index
                .get(&(attribute.to_string(), value_key(value)))
                .map_or(&[][..], Vec::as_slice)
        };
        let (first, value) = values[0];
        let matching: Vec<usize> = having(first, value)
            .iter()
            .copied()
            .filter(|&r| {
                values
                    .iter()
                    .all(|(a, v)| self.records[r].values.get(*a) == Some(*v))
            })
            .collect();
        let attribute_shares = values
            .iter()
            .map(|(a, v)| (data::id(a), having(a, v).len() as f64 / objects))
            .collect();
        let mut candidate_free_values = BTreeMap::new();
        let mut candidate_free_shares = BTreeMap::new();
        for (a, v) in values {
            let key = (a.to_string(), value_key(v));
            if !self.candidate_free.contains_key(&key) {
                // Over every searched attribute: the model skips the search's own.
                let free = self.distinct_free(having(a, v), &[]);
                self.candidate_free.insert(key.clone(), free);
            }
            let (distinct, shares) = self.candidate_free[&key].clone();
            candidate_free_values.insert(data::id(a), distinct);
            candidate_free_shares.insert(data::id(a), shares);
        }
        RowProbe {
            matched_share: matching.len() as f64 / objects,
            attribute_shares,
            free_values: self.distinct_free(&matching, values).0,
            candidate_free_values,
            candidate_free_shares,
            free_value_shares: self.value_shares(&matching, values),
        }
    }
}

/// Runs `--rows` over the workloads asked for.
pub(super) fn rows(bench: &Bench) -> anyhow::Result<()> {
    let out = &bench.args.out_dir;
    let mut sampled: Vec<(String, String)> = Vec::new();
    for row in read_rows(&out.join("model_accuracy.csv"))? {
        let (workload, configuration, _) =
            split_row(&row).with_context(|| format!("model_accuracy.csv: row {row:?}"))?;
        let entry = (workload.to_string(), configuration.to_string());
        if !sampled.contains(&entry) {
            sampled.push(entry);
        }
    }
    let objects = bench.records.len() as u64;
    let searched: Vec<&'static str> = {
        let mut all: Vec<&str> = workloads()
            .iter()
            .flat_map(|w| w.searches.iter().flat_map(|(a, _)| a.iter().copied()))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let index = value_index(&bench.records, &searched);
    let mut placements: HashMap<Vec<String>, Placement> = HashMap::new();
    placements.insert(
        Vec::new(),
        Placement::key(&bench.records, bench.args.shards),
    );
    let mut rows = Vec::new();
    let mut summaries = Vec::new();
    let (mut error_sum, mut exact_error_sum, mut error_count) = (0.0, 0.0, 0usize);
    let mut exact = ExactProbes {
        records: &bench.records,
        index: &index,
        searched: searched.clone(),
        candidate_free: HashMap::new(),
        missing: searched
            .iter()
            .map(|a| {
                let without = bench
                    .records
                    .iter()
                    .filter(|r| !r.values.contains_key(*a))
                    .count();
                (*a, without)
            })
            .collect(),
    };
    for (w, workload) in workloads().into_iter().enumerate() {
        if !bench
            .args
            .workloads
            .iter()
            .any(|name| name == workload.name)
        {
            continue;
        }
        // The mix changes only the frequencies: the rows are the workload's.
        let searches_only = Mix {
            name: "searches",
            search_share: 1.0,
        };
        let estimated = bench.with_rows(profile(&workload, searches_only))?;
        time_ranking(bench, &workload)?;
        let drawn = workload
            .searches
            .iter()
            .enumerate()
            .map(|(k, (attributes, _))| {
                draw_class(
                    &bench.records,
                    &mut exact,
                    attributes,
                    7_000 + 100 * w as u64 + k as u64,
                )
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let labels: Vec<&String> = {
            let mut labels: Vec<&String> = sampled
                .iter()
                .filter(|(w, _)| w.split('-').next() == Some(workload.name))
                .map(|(_, c)| c)
                .collect();
            labels.sort();
            labels.dedup();
            labels
        };
        for shown in labels {
            let subspaces = parse_label(shown, bench.args.regions)
                .with_context(|| format!("model_accuracy.csv: {}: {shown:?}", workload.name))?;
            let configuration = model_configuration(&subspaces, bench.args.shards)?;
            let (mut charged_sum, mut counted_sum, mut weights) = (0.0, 0.0, 0.0);
            for (((attributes, weight), search), drawn) in workload
                .searches
                .iter()
                .zip(&estimated.searches)
                .zip(&drawn)
            {
                let route = route_search(&configuration, &search.shape).map_err(config_error)?;
                let routed: Vec<String> = match route.subspace_index.checked_sub(1) {
                    None => Vec::new(),
                    Some(i) => subspaces[i].0.clone(),
                };
                if !placements.contains_key(&routed) {
                    let placement = Placement::subspace(bench, &routed, bench.args.regions)?;
                    placements.insert(routed.clone(), placement);
                }
                let placement = &placements[&routed];
                let charged = model::objects_read(
                    &configuration,
                    &route,
                    &search.shape,
                    search.rows.as_ref(),
                    objects,
                );
                let routed_class = Routed {
                    configuration: &configuration,
                    route: &route,
                    shape: &search.shape,
                    placement,
                };
                let (counted, exactly) = count_class(&bench.records, &index, &routed_class, drawn);
                let class = attributes.join("+");
                rows.push(format!(
                    "{},\"{shown}\",{class},\"{}\",{},{charged:.1},{exactly:.1},{counted:.1}",
                    workload.name,
                    routed.join(","),
                    route.regions_contacted,
                ));
                if counted > 0.0 {
                    error_sum += (charged - counted).abs() / counted;
                    exact_error_sum += (exactly - counted).abs() / counted;
                    error_count += 1;
                }
                charged_sum += weight * charged;
                counted_sum += weight * counted;
                weights += weight;
                eprintln!(
                    "{} {shown}: {class:<28} on ({}) {} regions: {charged:>6.1} charged ({exactly:>6.1} from exact shares), {counted:>6.1} read",
                    workload.name,
                    routed.join(","),
                    route.regions_contacted
                );
            }
            summaries.push(json!({
                "workload": workload.name,
                "configuration": shown,
                "rows_charged_per_search": round(charged_sum / weights, 1),
                "rows_read_per_search": round(counted_sum / weights, 1),
            }));
        }
    }
    if summaries.is_empty() {
        anyhow::bail!(
            "{} holds no configuration of workloads {:?}: nothing to count",
            out.join("model_accuracy.csv").display(),
            bench.args.workloads
        );
    }
    write_csv(
        &out.join("rows.csv"),
        "workload,configuration,class,routed_subspace,regions_asked,rows_charged,rows_charged_exact_shares,rows_read",
        &rows,
    )?;
    let mean_error = error_sum / error_count.max(1) as f64;
    let exact_mean_error = exact_error_sum / error_count.max(1) as f64;
    eprintln!(
        "rows charged against rows read: mean relative error {:.1} % ({:.1} % from exact shares) over {error_count} classes and configurations",
        mean_error * 100.0,
        exact_mean_error * 100.0
    );
    println!(
        "{}",
        json!({
            "experiment": "hyperspace-rows",
            "mean_relative_error": round(mean_error, 4),
            "mean_relative_error_exact_shares": round(exact_mean_error, 4),
            "configurations": summaries,
        })
    );
    Ok(())
}

/// Times the model's ranking of the configurator's candidates for `workload`'s
/// read-heavy mix (as a configurator pass ranks them), against predicting each
/// candidate alone (every search's cost worked out anew for each), alternated, three
/// times each: the medians, printed.
fn time_ranking(bench: &Bench, workload: &Workload) -> anyhow::Result<()> {
    let profile = bench.with_rows(profile(workload, MIXES[0]))?;
    let (candidates, _) = candidates_and_heuristics(bench, &profile)?;
    // A calibration as the experiment fits it (its values do not change the work).
    let calibration = Calibration {
        beta_s_per_object: 1.1e-5,
        region_cost_s: 7e-5,
        fan_out_cost_s: 3.2e-5,
        condition_cost_s: 0.0,
        sent_row_cost_s: 0.0,
        write_rate_cost_s2: 4.3e-7,
        catch_up_cost_s2: 0.0,
        fresh_window_s: 1.0,
        region_upkeep_s_per_s: 0.0,
        upkeep_half_rate_per_s: 0.0,
        alpha: 0.7,
        max_throughput_ops_per_s: 23_000.0,
        update_fixed_cost_s: 1.7e-5,
        objects: bench.records.len() as u64,
    };
    let (mut ranked_s, mut alone_s) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let started = Instant::now();
        let ranked =
            rank_configurations(&candidates, &profile, &calibration).map_err(config_error)?;
        ranked_s.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        for candidate in &candidates {
            predicted_throughput_ops_per_s(candidate, &profile, &calibration)
                .map_err(config_error)?;
        }
        alone_s.push(started.elapsed().as_secs_f64());
        std::hint::black_box(ranked);
    }
    eprintln!(
        "{}-RH: ranked {} candidates in {:.0} ms (median of 3; each predicted alone: {:.0} ms)",
        workload.name,
        candidates.len(),
        median(&mut ranked_s) * 1e3,
        median(&mut alone_s) * 1e3
    );
    Ok(())
}

/// Where one class of searches goes and what the model is asked of it.
struct Routed<'a> {
    configuration: &'a Configuration,
    route: &'a SearchRoute,
    shape: &'a SearchShape,
    placement: &'a Placement,
}

/// One search drawn as the clients draw them: its values, and its exact row probe.
struct Drawn<'r> {
    values: Vec<(&'static str, &'r Value)>,
    rows: SearchRows,
}

/// [`DRAWN_SEARCHES`] searches of a class over `attributes`, drawn from `seed`: the same
/// for every configuration, so that their probes are built once.
fn draw_class<'r>(
    records: &'r [Record],
    exact: &mut ExactProbes<'_>,
    attributes: &[&'static str],
    seed: u64,
) -> anyhow::Result<Vec<Drawn<'r>>> {
    let having = listings_with(records.len(), attributes, |i, a| {
        records[i].values.contains_key(a)
    })?;
    let mut rng = StdRng::seed_from_u64(seed);
    Ok((0..DRAWN_SEARCHES)
        .map(|_| {
            let listing = &records[having[rng.gen_range(0..having.len())]];
            let values: Vec<(&'static str, &Value)> = attributes
                .iter()
                .map(|a| (*a, &listing.values[*a]))
                .collect();
            let rows = SearchRows {
                page_rows: Some(PAGE_ROWS as u64),
                probes: vec![exact.probe(&values)],
            };
            Drawn { values, rows }
        })
        .collect())
}

/// Rows a search of a class reads where `routed` says, and the rows the model charges
/// it given exact shares, each the mean over its `drawn` searches.
fn count_class(
    records: &[Record],
    index: &ValueIndex,
    routed: &Routed<'_>,
    drawn: &[Drawn<'_>],
) -> (f64, f64) {
    let objects = records.len() as u64;
    let (mut read, mut charged) = (0.0, 0.0);
    for search in drawn {
        read += rows_read(routed.placement, index, records, &search.values);
        charged += model::objects_read(
            routed.configuration,
            routed.route,
            routed.shape,
            Some(&search.rows),
            objects,
        );
    }
    let searches = drawn.len().max(1) as f64;
    (read / searches, charged / searches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(key: &str, values: &[(&str, Value)]) -> Record {
        Record {
            key: key.as_bytes().to_vec(),
            values: values
                .iter()
                .map(|(a, v)| (a.to_string(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn rows_read_takes_the_fewest_in_each_region() {
        let city = |c: &str| Value::String(c.as_bytes().to_vec());
        // Two regions (the key subspace's shards, placed by hand): in region 0 the
        // city's rows are fewer, in region 1 the price's.
        let records = vec![
            listing("a", &[("city", city("x")), ("price", Value::Int(1))]),
            listing("b", &[("city", city("y")), ("price", Value::Int(1))]),
            listing("c", &[("city", city("y")), ("price", Value::Int(1))]),
            listing("d", &[("city", city("x")), ("price", Value::Int(2))]),
            listing("e", &[("city", city("x")), ("price", Value::Int(3))]),
            listing("f", &[("city", city("x")), ("price", Value::Int(1))]),
        ];
        let placement = Placement {
            region_of: vec![0, 0, 0, 1, 1, 1],
            grid: None,
            regions: 2,
        };
        let index = value_index(&records, &["city", "price"]);
        let (x, one) = (city("x"), Value::Int(1));
        let values = [("city", &x), ("price", &one)];
        // Region 0: city x 1 row, price 1 3 rows -> 1; region 1: city x 3, price 1 1
        // -> 1. The minimum of the sums would be 4.
        assert_eq!(rows_read(&placement, &index, &records, &values), 2.0);
        // A brute-force count over the regions agrees.
        let brute: u64 = (0..2)
            .map(|region| {
                values
                    .iter()
                    .map(|(a, v)| {
                        records
                            .iter()
                            .zip(&placement.region_of)
                            .filter(|(r, &at)| at == region && r.values.get(*a) == Some(*v))
                            .count() as u64
                    })
                    .min()
                    .unwrap()
            })
            .sum();
        assert_eq!(brute, 2);
    }
}
