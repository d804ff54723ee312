//! The node's side of choosing subspaces (the policy is
//! [`puffer_adapt::hyperspace`]): what the profiler is fed from the queries served (a
//! search's shape, an update's changed attributes), the configurator's settings and
//! the state it shows (profile, ranking, last reconfiguration).
//!
//! Attributes are the schema's attribute ids, so a shape stays valid while attributes
//! are added (ids are never reused).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::time::Duration;

use puffer_adapt::hyperspace::grid::bytes_hash;
use puffer_adapt::hyperspace::{
    most_common_shares, AttributeId, AttributeSet, Calibration, Configuration, Constraint,
    Profiler, ProfilerConfig, RowProbe, SearchRows, SearchShape, Subspace, ValueSpread,
    MAX_IN_VALUES, MAX_ROW_PROBES, MAX_SPREAD_VALUES, RANGE_FRACTION_DENOMINATOR,
};
use puffer_query::{QueryError, Result};
use puffer_store::{AttrType, Predicate, Record, Schema, Value, WriteOp};
use serde::Serialize;

/// How the database profiles its tables and chooses their subspaces.
#[derive(Clone, Debug)]
pub struct HyperspaceOptions {
    /// Whether the configurator applies what it decides (builds and drops subspaces);
    /// off, it only profiles tables that have subspaces and ranks configurations.
    pub auto: bool,
    /// The profiler's window.
    pub profiler: ProfilerConfig,
    /// Regions of each subspace the configurator builds.
    pub regions: u32,
    /// How much more predicted throughput a configuration needs to replace the
    /// current one (a fraction).
    pub switch_margin: f64,
    /// How far below the best a configuration may be predicted and still tie with it
    /// (a fraction); of the ties, the one with the fewest copies is built.
    pub tie_margin: f64,
    /// How often the configurator looks at each table.
    pub interval: Duration,
    /// Most attributes per candidate subspace, and most subspaces per configuration.
    pub max_subspace_attributes: usize,
    /// Most subspaces the configurator gives a table.
    pub max_subspaces: usize,
}

impl Default for HyperspaceOptions {
    fn default() -> HyperspaceOptions {
        HyperspaceOptions {
            auto: false,
            profiler: ProfilerConfig {
                bucket_width_ms: 1000,
                window_buckets: 60,
                max_tracked_sets: 256,
            },
            regions: crate::subspace::DEFAULT_REGIONS,
            switch_margin: puffer_adapt::hyperspace::DEFAULT_SWITCH_MARGIN,
            tie_margin: puffer_adapt::hyperspace::DEFAULT_TIE_MARGIN,
            interval: Duration::from_secs(10),
            max_subspace_attributes: 3,
            max_subspaces: 4,
        }
    }
}

/// A configuration as shown: each subspace's attribute names and regions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigurationView {
    /// The subspaces besides the key subspace.
    pub subspaces: Vec<SubspaceView>,
}

/// One subspace of a [`ConfigurationView`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubspaceView {
    /// Its attributes.
    pub attributes: Vec<String>,
    /// Its regions.
    pub regions: u32,
}

/// A ranked candidate as shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankedView {
    /// The configuration.
    pub configuration: ConfigurationView,
    /// Its predicted operations per second.
    pub predicted_ops_per_s: f64,
}

/// A reconfiguration the configurator made.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reconfiguration {
    /// When it began (ms since the Unix epoch).
    pub started_unix_ms: u64,
    /// How long building and dropping took.
    pub duration_ms: u64,
    /// The configuration before.
    pub from: ConfigurationView,
    /// The configuration after.
    pub to: ConfigurationView,
    /// Predicted throughput after over before, minus 1.
    pub predicted_gain: f64,
    /// Whether it finished (else why not).
    pub error: Option<String>,
}

/// One table's profile as shown: operations in the window by shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProfileView {
    /// Searches: the constrained attributes and how (`eq`, `in`, `range`) and count.
    pub searches: Vec<(BTreeMap<String, String>, u64)>,
    /// Updates: the changed attributes and count.
    pub updates: Vec<(Vec<String>, u64)>,
}

/// What the configurator shows of one table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TableTuningView {
    /// The operations profiled in the window.
    pub profile: ProfileView,
    /// The current configuration's predicted throughput, if it was ranked.
    pub current_predicted_ops_per_s: Option<f64>,
    /// The candidates, best first (at most [`MAX_RANKING_SHOWN`]).
    pub ranking: Vec<RankedView>,
    /// The last decision, in words.
    pub decision: Option<String>,
    /// The last reconfiguration.
    pub last_reconfiguration: Option<Reconfiguration>,
}

/// Candidates shown of a ranking.
pub const MAX_RANKING_SHOWN: usize = 10;

/// A table's profiler and what the configurator last made of it.
pub(crate) struct TableTuning {
    pub(crate) profiler: Profiler,
    /// Values of numeric attributes at a sample of records, sorted: a range's width as
    /// a fraction of its attribute.
    pub(crate) numbers: HashMap<AttributeId, Vec<f64>>,
    /// The page (limit) the last search of each shape asked for (`None`: all rows);
    /// at most [`MAX_PAGES_TRACKED`] shapes, forgotten all at once beyond.
    pub(crate) pages: HashMap<SearchShape, Option<u64>>,
    /// On a cluster node that does not lead: the searches served since they were last
    /// sent to the leader, in a window of their own as long as the profile's (so a
    /// send carries no search older than the leader's window), as bounded as it.
    pub(crate) unsent: Profiler,
    pub(crate) view: TableTuningView,
}

/// Most shapes whose page a table's tuning remembers (as many as the profiler tracks,
/// four times over: shapes it has forgotten may come back).
pub(crate) const MAX_PAGES_TRACKED: usize = 1024;

impl TableTuning {
    pub(crate) fn new(config: ProfilerConfig) -> Result<TableTuning> {
        Ok(TableTuning {
            profiler: Profiler::new(config).map_err(config_error)?,
            numbers: HashMap::new(),
            pages: HashMap::new(),
            unsent: Profiler::new(config).map_err(config_error)?,
            view: TableTuningView::default(),
        })
    }
}

/// A policy's refusal as the database's.
pub(crate) fn config_error(e: puffer_adapt::ConfigError) -> QueryError {
    QueryError::Invalid(format!("{}: {}", e.setting, e.reason))
}

/// The shape of a search with `predicate` on a table with `schema`: each attribute a
/// conjunction fixes (an equality, an `IN`, a range; the narrowest when several), the
/// key likewise. Conditions under `OR` or `NOT` fix nothing. `numbers` gives a range's
/// width (the share of sampled values inside it; the whole dimension without a sample).
pub(crate) fn search_shape(
    predicate: &Predicate,
    schema: &Schema,
    numbers: &HashMap<AttributeId, Vec<f64>>,
) -> SearchShape {
    let mut shape = SearchShape::default();
    let mut conjuncts = vec![predicate];
    while let Some(p) = conjuncts.pop() {
        let (name, constraint) = match p {
            Predicate::And(parts) => {
                conjuncts.extend(parts);
                continue;
            }
            Predicate::Eq(name, _) => (name, Constraint::Equality),
            Predicate::In(name, values) => {
                let values = values.len().clamp(1, MAX_IN_VALUES as usize) as u32;
                (name, Constraint::In { values })
            }
            Predicate::Range {
                attribute,
                lower,
                upper,
            } => {
                let id = schema.id_of(attribute);
                let sample = id.and_then(|id| numbers.get(&id));
                (attribute, range_constraint(lower, upper, sample))
            }
            _ => continue,
        };
        if *name == schema.key {
            shape.key = Some(
                shape
                    .key
                    .map_or(constraint, |kept| narrower(kept, constraint)),
            );
        } else if let Some(id) = schema.id_of(name) {
            let kept = shape.attributes.get(&id).copied().unwrap_or(constraint);
            shape.attributes.insert(id, narrower(kept, constraint));
        }
    }
    shape
}

/// The narrower of two constraints on one attribute: an equality, then the fewer `IN`
/// values, then the narrower range (an `IN` of one value is an equality).
fn narrower(a: Constraint, b: Constraint) -> Constraint {
    let width = |c: Constraint| match c {
        Constraint::Equality => 0u64,
        Constraint::In { values } => u64::from(values),
        Constraint::Range { fraction_ppm } => u64::from(MAX_IN_VALUES) + u64::from(fraction_ppm),
    };
    if width(b) < width(a) {
        b
    } else {
        a
    }
}

/// A range's constraint: the share of `sample` (sorted) inside it, at least one
/// millionth; the whole dimension without a sample or with bounds that are not numbers.
fn range_constraint(
    lower: &Bound<Value>,
    upper: &Bound<Value>,
    sample: Option<&Vec<f64>>,
) -> Constraint {
    let whole = Constraint::Range {
        fraction_ppm: RANGE_FRACTION_DENOMINATOR,
    };
    let Some(sample) = sample.filter(|s| !s.is_empty()) else {
        return whole;
    };
    let number = |v: &Value| match v {
        Value::Int(i) | Value::Timestamp(i) => Some(*i as f64),
        Value::Float(x) => Some(*x),
        _ => None,
    };
    let below = |bound: &Bound<Value>| -> Option<usize> {
        Some(match bound {
            Bound::Unbounded => 0,
            Bound::Included(v) => {
                let x = number(v)?;
                sample.partition_point(|s| *s < x)
            }
            Bound::Excluded(v) => {
                let x = number(v)?;
                sample.partition_point(|s| *s <= x)
            }
        })
    };
    let above = |bound: &Bound<Value>| -> Option<usize> {
        Some(match bound {
            Bound::Unbounded => sample.len(),
            Bound::Included(v) => {
                let x = number(v)?;
                sample.partition_point(|s| *s <= x)
            }
            Bound::Excluded(v) => {
                let x = number(v)?;
                sample.partition_point(|s| *s < x)
            }
        })
    };
    let (Some(first), Some(end)) = (below(lower), above(upper)) else {
        return whole;
    };
    let inside = end.saturating_sub(first) as u64;
    let ppm = inside * u64::from(RANGE_FRACTION_DENOMINATOR) / sample.len() as u64;
    Constraint::Range {
        fraction_ppm: (ppm as u32).clamp(1, RANGE_FRACTION_DENOMINATOR),
    }
}

/// Probes a search shape gets from a [`RowSample`] (at most the model's bound).
pub const ROW_PROBES: usize = 256;
const _: () = assert!(ROW_PROBES <= MAX_ROW_PROBES);

/// Matching records a probe counts the distinct values of free attributes in.
pub const MAX_FREE_VALUE_RECORDS: usize = 256;

/// Sampled records of a table, each searched attribute's value as a comparable key:
/// what [`RowSample::search_rows`] counts.
pub struct RowSample {
    records: usize,
    /// Records of the table the sample was drawn from (at least `records`).
    table_records: u64,
    /// Per attribute, each record's value (`None`: the record lacks it).
    values: HashMap<AttributeId, Vec<Option<String>>>,
    /// Per hashed attribute (a string or a boolean), how many sampled records hold
    /// each value, by the value's hash as the grid takes it (`None`: lacking it).
    hash_counts: BTreeMap<AttributeId, HashMap<Option<u64>, usize>>,
}

impl RowSample {
    /// The values of `attributes` (ids of `schema`) in `records`, a sample of a table of
    /// `table_records` records (taken as `records.len()` if fewer: the table shrank
    /// since).
    pub fn new(
        records: &[Record],
        table_records: u64,
        schema: &Schema,
        attributes: &AttributeSet,
    ) -> RowSample {
        let values = attributes
            .iter()
            .filter_map(|&id| {
                let name = &schema.attributes.get(usize::from(id))?.name;
                let column = records
                    .iter()
                    .map(|record| record.values.get(name).map(value_key))
                    .collect();
                Some((id, column))
            })
            .collect();
        let hash_counts = attributes
            .iter()
            .filter_map(|&id| {
                let attribute = schema.attributes.get(usize::from(id))?;
                if !matches!(attribute.attr_type, AttrType::String | AttrType::Bool) {
                    return None;
                }
                let mut counts: HashMap<Option<u64>, usize> = HashMap::new();
                for record in records {
                    let hash = record
                        .values
                        .get(&attribute.name)
                        .and_then(|value| bytes_hash(crate::subspace::coordinate(value)));
                    *counts.entry(hash).or_default() += 1;
                }
                Some((id, counts))
            })
            .collect();
        RowSample {
            records: records.len(),
            table_records: table_records.max(records.len() as u64),
            values,
            hash_counts,
        }
    }

    /// Per hashed attribute of the sample, how its values spread over the records (the
    /// model's [`ValueSpread`]: which regions of a subspace cutting it are written):
    /// the [`MAX_SPREAD_VALUES`] most common values' shares of the sampled records, the
    /// others counted. Numbers are cut at their quantiles and spread evenly: none.
    pub fn value_spreads(&self) -> BTreeMap<AttributeId, ValueSpread> {
        let records = self.records.max(1) as f64;
        self.hash_counts
            .iter()
            .map(|(&id, counts)| {
                let mut counted: Vec<(Option<u64>, usize)> =
                    counts.iter().map(|(&hash, &count)| (hash, count)).collect();
                // The most common first; equal counts by hash, so a sample spreads the
                // same way every time.
                counted.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let other_values = counted.len().saturating_sub(MAX_SPREAD_VALUES) as u64;
                counted.truncate(MAX_SPREAD_VALUES);
                let hashed_shares = counted
                    .into_iter()
                    .map(|(hash, count)| (hash, count as f64 / records))
                    .collect();
                (
                    id,
                    ValueSpread {
                        hashed_shares,
                        other_values,
                    },
                )
            })
            .collect()
    }

    /// The share of the table's records that `sampled` of the sampled records stand
    /// for, one of them the probe's own record: that one is in the table for certain,
    /// and the others are a sample of the table's other records, so the table holds
    /// `1 + (sampled − 1)(N − 1)/(n − 1)` such records of its `N`. Scaling all of
    /// `sampled` by `N / n` counted the probe's record `N / n` times: the 26,458
    /// listings sampled every 7th, a value held by one listing was estimated at 7, and
    /// every search fixing a rare value (a price) was charged about 6 rows too many.
    /// Exact when the sample is the whole table.
    fn share_with_probe(&self, sampled: usize) -> f64 {
        if sampled == 0 {
            return 0.0;
        }
        let table = self.table_records as f64;
        let others = if self.records > 1 {
            (sampled - 1) as f64 * (table - 1.0) / (self.records - 1) as f64
        } else {
            0.0
        };
        ((1.0 + others) / table).min(1.0)
    }

    /// What searches of `shape` asking for `page_rows` find, estimated from the sample:
    /// up to [`ROW_PROBES`] sampled records that have every attribute the search fixes
    /// by value (equality or `IN`), evenly spaced, each taken as one search with its
    /// values (values are asked as often as records hold them). Per probe:
    /// - an equality's share is that of the sampled records with the probe's value,
    ///   the probe's own record counted once in the table (see `share_with_probe`);
    ///   an `IN` of `n` values, `n` times that; a range's, its width (the share of
    ///   sampled values inside it);
    /// - the matched share is that of the sampled records with all the probe's values
    ///   (counted as above), times the `IN` counts and the ranges' widths (taken as
    ///   independent of the rest).
    ///
    /// - per sampled attribute the search leaves free, the distinct values (a missing
    ///   value is one) among the sampled records with all the probe's values (the
    ///   first [`MAX_FREE_VALUE_RECORDS`] of them) with the shares of its most common
    ///   values among them (at most [`puffer_adapt::hyperspace::MAX_FREE_VALUE_SHARES`]), and, per attribute
    ///   fixed by value, among the sampled records with that attribute's value (the
    ///   first as many) with the share of the sample holding those values.
    ///
    /// When no sampled record has them all (or the sample is empty), one probe says the
    /// search finds nothing. An attribute the sample lacks (not in the set it was made
    /// with) counts as found in no record.
    pub fn search_rows(&self, shape: &SearchShape, page_rows: Option<u64>) -> SearchRows {
        let mut valued: Vec<(AttributeId, f64)> = Vec::new();
        let mut ranges: Vec<(AttributeId, f64)> = Vec::new();
        for (&id, &constraint) in &shape.attributes {
            match constraint {
                Constraint::Equality => valued.push((id, 1.0)),
                Constraint::In { values } => valued.push((id, f64::from(values))),
                Constraint::Range { fraction_ppm } => ranges.push((
                    id,
                    f64::from(fraction_ppm) / f64::from(RANGE_FRACTION_DENOMINATOR),
                )),
            }
        }
        let range_share: f64 = ranges.iter().map(|(_, share)| share).product();
        let column = |id: AttributeId| self.values.get(&id);
        let has_all = |record: usize| {
            valued
                .iter()
                .all(|(id, _)| column(*id).is_some_and(|values| values[record].is_some()))
        };
        let having: Vec<usize> = (0..self.records).filter(|&r| has_all(r)).collect();
        if having.is_empty() {
            let attribute_shares = valued
                .iter()
                .map(|(id, _)| (*id, 0.0))
                .chain(ranges.iter().copied())
                .collect();
            return SearchRows {
                page_rows,
                probes: vec![RowProbe {
                    matched_share: 0.0,
                    attribute_shares,
                    free_values: BTreeMap::new(),
                    candidate_free_values: BTreeMap::new(),
                    candidate_free_shares: BTreeMap::new(),
                    free_value_shares: BTreeMap::new(),
                }],
            };
        }
        // Records by value, per valued attribute, and by all their values together.
        let mut by_value: Vec<HashMap<&str, Vec<usize>>> = vec![HashMap::new(); valued.len()];
        for (records, (id, _)) in by_value.iter_mut().zip(&valued) {
            for (record, value) in column(*id).into_iter().flatten().enumerate() {
                if let Some(value) = value {
                    records.entry(value.as_str()).or_default().push(record);
                }
            }
        }
        let tuple = |record: usize| -> Vec<&str> {
            valued
                .iter()
                .filter_map(|(id, _)| column(*id)?[record].as_deref())
                .collect()
        };
        let mut by_tuple: HashMap<Vec<&str>, Vec<usize>> = HashMap::new();
        for &record in &having {
            by_tuple.entry(tuple(record)).or_default().push(record);
        }
        // Sampled attributes the search leaves free (a subspace may cut them).
        let free: Vec<(AttributeId, &Vec<Option<String>>)> = self
            .values
            .iter()
            .filter(|(id, _)| !shape.attributes.contains_key(id))
            .map(|(id, column)| (*id, column))
            .collect();
        // Per free attribute, how many sampled records hold each value.
        let free_counts: Vec<HashMap<Option<&str>, usize>> = free
            .iter()
            .map(|(_, column)| {
                let mut counts: HashMap<Option<&str>, usize> = HashMap::new();
                for value in column.iter() {
                    *counts.entry(value.as_deref()).or_default() += 1;
                }
                counts
            })
            .collect();
        // Per free attribute, the distinct values among the first of `records`, and
        // the share of the sample holding them.
        let distinct_free =
            |records: &[usize]| -> (BTreeMap<AttributeId, u32>, BTreeMap<AttributeId, f64>) {
                let counted = &records[..records.len().min(MAX_FREE_VALUE_RECORDS)];
                let mut values = BTreeMap::new();
                let mut shares = BTreeMap::new();
                for ((id, column), counts) in free.iter().zip(&free_counts) {
                    let distinct: HashSet<Option<&str>> =
                        counted.iter().map(|&r| column[r].as_deref()).collect();
                    let held: usize = distinct
                        .iter()
                        .map(|v| counts.get(v).copied().unwrap_or(0))
                        .sum();
                    values.insert(*id, (distinct.len() as u32).max(1));
                    shares.insert(*id, (held as f64 / self.records.max(1) as f64).min(1.0));
                }
                (values, shares)
            };
        // Per free attribute, the shares of its most common values among the first of
        // `records` (a probe's matches).
        let value_shares = |records: &[usize]| -> BTreeMap<AttributeId, Vec<f64>> {
            let counted = &records[..records.len().min(MAX_FREE_VALUE_RECORDS)];
            free.iter()
                .map(|(id, column)| {
                    let mut counts: HashMap<Option<&str>, usize> = HashMap::new();
                    for &r in counted {
                        *counts.entry(column[r].as_deref()).or_default() += 1;
                    }
                    let counts = counts.into_values().collect();
                    (*id, most_common_shares(counts, counted.len()))
                })
                .collect()
        };
        let in_factor: f64 = valued.iter().map(|(_, values)| values).product();
        let probes = ROW_PROBES.min(having.len());
        let probes = (0..probes)
            .map(|i| {
                let record = having[i * having.len() / probes];
                let values = tuple(record);
                let attribute_shares = valued
                    .iter()
                    .zip(&by_value)
                    .zip(&values)
                    .map(|(((id, in_values), records), value)| {
                        let found = records.get(value).map_or(0, Vec::len);
                        (*id, (in_values * self.share_with_probe(found)).min(1.0))
                    })
                    .chain(ranges.iter().copied())
                    .collect();
                let matching = by_tuple.get(&values).map_or(&[][..], Vec::as_slice);
                // The first records only: a count matters only while it is below a
                // dimension's parts, and probes of popular values would otherwise
                // read thousands of records each.
                let mut candidate_free_values = BTreeMap::new();
                let mut candidate_free_shares = BTreeMap::new();
                for (((id, _), records), value) in valued.iter().zip(&by_value).zip(&values) {
                    let having = records.get(value).map_or(&[][..], Vec::as_slice);
                    let (distinct, shares) = distinct_free(having);
                    candidate_free_values.insert(*id, distinct);
                    candidate_free_shares.insert(*id, shares);
                }
                let together = self.share_with_probe(matching.len());
                RowProbe {
                    matched_share: (together * in_factor * range_share).min(1.0),
                    attribute_shares,
                    free_values: distinct_free(matching).0,
                    candidate_free_values,
                    candidate_free_shares,
                    free_value_shares: value_shares(matching),
                }
            })
            .collect();
        SearchRows { page_rows, probes }
    }
}

/// A value as a key that compares as the value does (floats by their exact digits).
fn value_key(value: &Value) -> String {
    format!("{value:?}")
}

/// The attributes (ids of `schema`) whose values `op` changes in a record that was
/// `before`: all it sets for a new record, those that differ (or appear or vanish)
/// for a replaced one, every one the record had for a delete. `None` for a schema
/// change.
pub(crate) fn changed_attributes(
    op: &WriteOp,
    before: Option<&Record>,
    schema: &Schema,
) -> Option<AttributeSet> {
    let id = |name: &str| schema.id_of(name);
    let after: BTreeMap<AttributeId, &Value> = match op {
        WriteOp::Put(record) => record
            .values
            .iter()
            .filter_map(|(name, value)| Some((id(name)?, value)))
            .collect(),
        WriteOp::PutFields(fields) => fields.fields.iter().map(|(id, v)| (*id, v)).collect(),
        WriteOp::Delete(_) => BTreeMap::new(),
        WriteOp::AddAttribute(_) => return None,
    };
    let before: BTreeMap<AttributeId, &Value> = before
        .map(|record| {
            record
                .values
                .iter()
                .filter_map(|(name, value)| Some((id(name)?, value)))
                .collect()
        })
        .unwrap_or_default();
    let ids: BTreeSet<AttributeId> = after.keys().chain(before.keys()).copied().collect();
    Some(
        ids.into_iter()
            .filter(|id| after.get(id) != before.get(id))
            .collect(),
    )
}

/// The configuration of subspaces over `subspaces` (attribute names and regions) on a
/// table of `key_regions` shards of `replicas` replicas, in the model's terms.
pub(crate) fn configuration_of(
    subspaces: &[(Vec<String>, u32)],
    schema: &Schema,
    key_regions: u32,
    replicas: u32,
) -> Result<Configuration> {
    let mut model = Vec::with_capacity(subspaces.len());
    for (attributes, regions) in subspaces {
        let ids = attributes
            .iter()
            .map(|name| {
                schema.id_of(name).ok_or_else(|| {
                    QueryError::Invalid(format!("the table has no attribute {name:?}"))
                })
            })
            .collect::<Result<Vec<AttributeId>>>()?;
        model.push(Subspace::new(ids, *regions).map_err(config_error)?);
    }
    Configuration::new(model, key_regions, replicas).map_err(config_error)
}

/// A model configuration as names.
pub(crate) fn view_of(configuration: &Configuration, schema: &Schema) -> ConfigurationView {
    ConfigurationView {
        subspaces: configuration
            .subspaces()
            .iter()
            .map(|s| SubspaceView {
                attributes: names(s.attributes(), schema),
                regions: s.regions(),
            })
            .collect(),
    }
}

/// Attribute ids as names (an id the schema lacks as `#id`).
pub(crate) fn names(ids: &[AttributeId], schema: &Schema) -> Vec<String> {
    ids.iter()
        .map(|&id| {
            schema
                .attributes
                .get(usize::from(id))
                .map_or_else(|| format!("#{id}"), |a| a.name.clone())
        })
        .collect()
}

/// A constraint in words, for the profile's view.
pub(crate) fn constraint_name(constraint: Constraint) -> String {
    match constraint {
        Constraint::Equality => "eq".into(),
        Constraint::In { values } => format!("in {values}"),
        Constraint::Range { fraction_ppm } => {
            format!(
                "range {:.4}",
                f64::from(fraction_ppm) / f64::from(RANGE_FRACTION_DENOMINATOR)
            )
        }
    }
}

/// The calibration of a table of `objects` records from measured parameters.
pub fn calibration(measured: &MeasuredCalibration, objects: u64) -> Calibration {
    Calibration {
        beta_s_per_object: measured.beta_s_per_object,
        region_cost_s: measured.region_cost_s,
        fan_out_cost_s: measured.fan_out_cost_s,
        condition_cost_s: measured.condition_cost_s,
        sent_row_cost_s: measured.sent_row_cost_s,
        write_rate_cost_s2: measured.write_rate_cost_s2,
        catch_up_cost_s2: measured.catch_up_cost_s2,
        fresh_window_s: measured.fresh_window_s,
        region_upkeep_s_per_s: measured.region_upkeep_s_per_s,
        upkeep_half_rate_per_s: measured.upkeep_half_rate_per_s,
        alpha: measured.alpha,
        max_throughput_ops_per_s: measured.max_throughput_ops_per_s,
        // Not measured: equation 4's, the fetch counted as one more hop (an invalid
        // T_max is reported as such by the check).
        update_fixed_cost_s: measured.update_fixed_cost_s.unwrap_or(
            if measured.max_throughput_ops_per_s > 0.0 {
                1.0 / measured.max_throughput_ops_per_s
            } else {
                0.0
            },
        ),
        objects: objects.max(1),
    }
}

/// The model's parameters as measured on this machine by `puffer-bench hyperspace
/// --calibrate` (never assumed).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct MeasuredCalibration {
    /// `β`: seconds per object a search reads (locates and checks).
    pub beta_s_per_object: f64,
    /// Seconds per region a search asks (0 when not measured: the paper's model, which
    /// has no such term).
    #[serde(default)]
    pub region_cost_s: f64,
    /// Seconds per region a search asks beyond the first (0 when not measured).
    #[serde(default)]
    pub fan_out_cost_s: f64,
    /// Seconds per condition of a search per region it asks (0 when not measured: the
    /// paper's model, which has no such term).
    #[serde(default)]
    pub condition_cost_s: f64,
    /// Seconds per row a region sends back to a search (0 when not measured: the
    /// paper's model, which has no such term).
    #[serde(default)]
    pub sent_row_cost_s: f64,
    /// Seconds a search spends per row per second written into the regions it asks
    /// (0 when not measured: the paper's model, which has no such term).
    #[serde(default)]
    pub write_rate_cost_s2: f64,
    /// Seconds a search waits per update per second written through its node, until
    /// the data nodes have applied the node's newest write (0 when not measured: the
    /// paper's model, which has no such term; about 0 embedded).
    #[serde(default)]
    pub catch_up_cost_s2: f64,
    /// Seconds a written row stays where a search reads it without a segment's walks
    /// (log tables, sorted batches): the share of the table written in that window is
    /// read at no cost of `β` (0 when not measured: the paper's model, which has no
    /// such term).
    #[serde(default)]
    pub fresh_window_s: f64,
    /// Seconds of the machine a second that a region written without pause costs
    /// besides its copies: its log table sealed and its sorted batch compacted every
    /// second (0 when not measured: the paper's model, which has no such term).
    #[serde(default)]
    pub region_upkeep_s_per_s: f64,
    /// Copies a second into a region at which its upkeep is half the above (0 when not
    /// measured: the upkeep whatever the copies).
    #[serde(default)]
    pub upkeep_half_rate_per_s: f64,
    /// `α`: a moved copy's cost against one overwritten in place.
    pub alpha: f64,
    /// `T_max`: updates per second with a chain of length 1.
    pub max_throughput_ops_per_s: f64,
    /// Seconds of an update that do not grow with its copies: its fetch and its SCU's
    /// commit (absent when not measured: equation 4's `1 / T_max`).
    #[serde(default)]
    pub update_fixed_cost_s: Option<f64>,
}

impl MeasuredCalibration {
    /// Checks the parameters (as the model would).
    pub fn check(&self) -> Result<()> {
        calibration(self, 1).check().map_err(config_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use puffer_adapt::hyperspace::MAX_FREE_VALUE_SHARES;
    use puffer_adapt::spread::fnv1a64;
    use puffer_store::Attribute;

    fn schema() -> Schema {
        let attribute = |name: &str| Attribute {
            name: name.into(),
            attr_type: AttrType::Int,
        };
        Schema::new("id", vec![attribute("a"), attribute("b"), attribute("c")]).unwrap()
    }

    /// A sample's spreads list its strings and booleans by the hash the grid cuts them
    /// by, with the shares a count of the records gives (the oracle), the most common
    /// first up to the bound and the rest counted; numbers have none.
    #[test]
    fn value_spreads_count_the_hashed_values() {
        let attribute = |name: &str, attr_type| Attribute {
            name: name.into(),
            attr_type,
        };
        let schema = Schema::new(
            "id",
            vec![
                attribute("city", AttrType::String),
                attribute("pool", AttrType::Bool),
                attribute("price", AttrType::Int),
            ],
        )
        .unwrap();
        // City i (of 70) in i + 1 records, a pool in every third, a price in each; the
        // first ten records (all of cities 0 to 3) lack a city.
        let mut records = Vec::new();
        for city in 0..70 {
            for copy in 0..=city {
                let mut record = Record::new(format!("k{city}-{copy}"))
                    .with("pool", Value::Bool(copy % 3 == 0))
                    .with("price", Value::Int(copy));
                if records.len() >= 10 {
                    record = record.with("city", Value::str(&format!("city{city}")));
                }
                records.push(record);
            }
        }
        let total = records.len() as f64;
        let sample = RowSample::new(&records, 10_000, &schema, &AttributeSet::from([0, 1, 2]));
        let spreads = sample.value_spreads();
        assert_eq!(spreads.keys().copied().collect::<Vec<_>>(), [0, 1]);
        // The oracle: every record's value hashed and counted.
        let count = |name: &str| {
            let mut counts: HashMap<Option<u64>, usize> = HashMap::new();
            for record in &records {
                let hash = record.values.get(name).map(|value| match value {
                    Value::String(bytes) => fnv1a64(bytes),
                    Value::Bool(pool) => fnv1a64(&[u8::from(*pool)]),
                    other => panic!("{other:?} is not hashed"),
                });
                *counts.entry(hash).or_default() += 1;
            }
            counts
        };
        for (id, name) in [(0, "city"), (1, "pool")] {
            let counts = count(name);
            let spread = &spreads[&id];
            assert_eq!(
                spread.hashed_shares.len() + spread.other_values as usize,
                counts.len()
            );
            assert!(spread.hashed_shares.len() <= MAX_SPREAD_VALUES);
            for &(hash, share) in &spread.hashed_shares {
                assert_eq!(share, counts[&hash] as f64 / total);
            }
            // The listed are the most common: none left out holds more.
            let least_listed = spread
                .hashed_shares
                .iter()
                .map(|(_, share)| *share)
                .fold(f64::INFINITY, f64::min);
            let listed: HashSet<Option<u64>> =
                spread.hashed_shares.iter().map(|(hash, _)| *hash).collect();
            for (hash, &count) in &counts {
                if !listed.contains(hash) {
                    assert!(count as f64 / total <= least_listed);
                }
            }
        }
        // 66 cities and the records lacking one: 64 listed, 3 more counted.
        assert_eq!(spreads[&0].other_values, 3);
        assert_eq!(spreads[&1].hashed_shares.len(), 2);
    }

    /// Records with values of `a`, `b`, `c` from small ranges (so they repeat), each
    /// missing where the value is `None`.
    fn records(values: &[[Option<i64>; 3]]) -> Vec<Record> {
        values
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut record = Record::new(format!("k{i}"));
                for (name, value) in ["a", "b", "c"].iter().zip(row) {
                    if let Some(v) = value {
                        record = record.with(name, Value::Int(*v));
                    }
                }
                record
            })
            .collect()
    }

    proptest! {
        /// Every probe's shares are what a scan of the sample counts for the values of
        /// some sampled record that has all the search's attributes (samples smaller
        /// than [`MAX_FREE_VALUE_RECORDS`], so every match is counted).
        #[test]
        fn probes_count_what_a_scan_of_the_sample_counts(
            rows in proptest::collection::vec(
                proptest::array::uniform3(proptest::option::weighted(0.8, 0..4i64)),
                0..150,
            ),
            searched in proptest::collection::btree_set(0u16..3, 1..=3),
            in_values in 1u32..4,
            use_in in any::<bool>(),
            range_ppm in 1u32..=1_000_000,
            use_range in any::<bool>(),
        ) {
            let schema = schema();
            let records = records(&rows);
            // The sample is the whole table: every share is a plain count.
            let sample = RowSample::new(
                &records,
                records.len() as u64,
                &schema,
                &AttributeSet::from([0, 1, 2]),
            );
            let mut shape = SearchShape::equalities(searched.iter().copied());
            let first = *searched.iter().next().unwrap();
            if use_in {
                shape.attributes.insert(first, Constraint::In { values: in_values });
            }
            let last = *searched.iter().next_back().unwrap();
            if use_range && last != first {
                shape.attributes.insert(last, Constraint::Range { fraction_ppm: range_ppm });
            }
            let estimate = sample.search_rows(&shape, Some(7));
            prop_assert_eq!(estimate.page_rows, Some(7));
            prop_assert!(!estimate.probes.is_empty() && estimate.probes.len() <= ROW_PROBES);
            let name = |id: u16| ["a", "b", "c"][usize::from(id)];
            let valued: Vec<u16> = shape
                .attributes
                .iter()
                .filter(|(_, c)| !matches!(c, Constraint::Range { .. }))
                .map(|(id, _)| *id)
                .collect();
            let having: Vec<&Record> = records
                .iter()
                .filter(|r| valued.iter().all(|id| r.values.contains_key(name(*id))))
                .collect();
            let n = records.len().max(1) as f64;
            let width = f64::from(range_ppm) / 1e6;
            let factor = |id: u16| match shape.attributes[&id] {
                Constraint::In { values } => f64::from(values),
                _ => 1.0,
            };
            let ranged = |id: u16| matches!(shape.attributes[&id], Constraint::Range { .. });
            if having.is_empty() {
                prop_assert_eq!(estimate.probes.len(), 1);
                prop_assert_eq!(estimate.probes[0].matched_share, 0.0);
                for (id, share) in &estimate.probes[0].attribute_shares {
                    prop_assert_eq!(*share, if ranged(*id) { width } else { 0.0 });
                }
                return Ok(());
            }
            prop_assert_eq!(estimate.probes.len(), having.len().min(ROW_PROBES));
            for probe in &estimate.probes {
                // Some record with all the values gives exactly these shares.
                let explained = having.iter().any(|source| {
                    let same = |r: &Record, id: u16| r.values.get(name(id)) == source.values.get(name(id));
                    let shares_match = valued.iter().all(|&id| {
                        let found = records.iter().filter(|r| same(r, id)).count() as f64;
                        let expected = (factor(id) * found / n).min(1.0);
                        (probe.attribute_shares[&id] - expected).abs() < 1e-12
                    });
                    let together = records
                        .iter()
                        .filter(|r| valued.iter().all(|&id| same(r, id)))
                        .count() as f64;
                    let range_factor = if shape.attributes.keys().any(|id| ranged(*id)) { width } else { 1.0 };
                    let in_factor: f64 = valued.iter().map(|&id| factor(id)).product();
                    let matched = (together / n * in_factor * range_factor).min(1.0);
                    let free_match = (0u16..3)
                        .filter(|id| !shape.attributes.contains_key(id))
                        .all(|id| {
                            let distinct: Vec<Option<&Value>> = {
                                let mut seen = Vec::new();
                                for r in records.iter().filter(|r| valued.iter().all(|&v| same(r, v))) {
                                    let value = r.values.get(name(id));
                                    if !seen.contains(&value) {
                                        seen.push(value);
                                    }
                                }
                                seen
                            };
                            // The matches' most common values' shares (fewer matches
                            // here than the records counted).
                            let matches: Vec<&Record> = records
                                .iter()
                                .filter(|r| valued.iter().all(|&v| same(r, v)))
                                .collect();
                            let mut counts: Vec<usize> = distinct
                                .iter()
                                .map(|d| matches.iter().filter(|r| r.values.get(name(id)) == *d).count())
                                .collect();
                            counts.sort_unstable_by(|a, b| b.cmp(a));
                            let shares: Vec<f64> = counts
                                .iter()
                                .take(MAX_FREE_VALUE_SHARES)
                                .map(|&c| c as f64 / matches.len() as f64)
                                .collect();
                            let shares_agree = probe.free_value_shares.get(&id).is_some_and(|got| {
                                got.len() == shares.len()
                                    && got.iter().zip(&shares).all(|(a, b)| (a - b).abs() < 1e-12)
                            });
                            probe.free_values.get(&id) == Some(&(distinct.len().max(1) as u32))
                                && shares_agree
                        });
                    // Per attribute fixed by value, the free attributes' distinct values
                    // among the first records with its value alone.
                    let candidate_free_match = valued.iter().all(|&v| {
                        let having: Vec<&Record> = records
                            .iter()
                            .filter(|r| same(r, v))
                            .take(MAX_FREE_VALUE_RECORDS)
                            .collect();
                        (0u16..3)
                            .filter(|id| !shape.attributes.contains_key(id))
                            .all(|id| {
                                let mut seen = Vec::new();
                                for r in &having {
                                    let value = r.values.get(name(id));
                                    if !seen.contains(&value) {
                                        seen.push(value);
                                    }
                                }
                                // The share of the table holding those values.
                                let held = records
                                    .iter()
                                    .filter(|r| seen.contains(&r.values.get(name(id))))
                                    .count() as f64
                                    / n;
                                let share_agrees = probe
                                    .candidate_free_shares
                                    .get(&v)
                                    .and_then(|f| f.get(&id))
                                    .is_some_and(|got| (got - held).abs() < 1e-12);
                                probe.candidate_free_values.get(&v).and_then(|f| f.get(&id))
                                    == Some(&(seen.len().max(1) as u32))
                                    && share_agrees
                            })
                    });
                    shares_match
                        && free_match
                        && candidate_free_match
                        && (probe.matched_share - matched).abs() < 1e-12
                });
                prop_assert!(explained, "probe {:?} matches no sampled record", probe);
                for (id, share) in &probe.attribute_shares {
                    if ranged(*id) {
                        prop_assert_eq!(*share, width);
                    }
                }
            }
        }
    }

    #[test]
    fn free_values_are_counted_in_the_first_matches() {
        // 1,000 records with a = 1; b cycles through 3 values, c is distinct each time.
        let rows: Vec<[Option<i64>; 3]> =
            (0..1000).map(|i| [Some(1), Some(i % 3), Some(i)]).collect();
        let records = records(&rows);
        let sample = RowSample::new(
            &records,
            records.len() as u64,
            &schema(),
            &AttributeSet::from([0, 1, 2]),
        );
        let estimate = sample.search_rows(&SearchShape::equalities([0]), None);
        for probe in &estimate.probes {
            assert_eq!(probe.matched_share, 1.0);
            assert_eq!(probe.free_values[&1], 3);
            assert_eq!(probe.free_values[&2], MAX_FREE_VALUE_RECORDS as u32);
        }
    }

    #[test]
    fn an_empty_sample_finds_nothing() {
        let sample = RowSample::new(&[], 100, &schema(), &AttributeSet::from([0, 1]));
        let estimate = sample.search_rows(&SearchShape::equalities([0, 1]), None);
        assert_eq!(estimate.probes.len(), 1);
        assert_eq!(estimate.probes[0].matched_share, 0.0);
        assert_eq!(
            estimate.probes[0].attribute_shares,
            BTreeMap::from([(0, 0.0), (1, 0.0)])
        );
    }

    #[test]
    fn a_probe_counts_its_own_record_once() {
        // A sample of 4 records of a table of 400: a = 1, 1, 2, 3.
        let rows: Vec<[Option<i64>; 3]> = [1, 1, 2, 3]
            .iter()
            .map(|&a| [Some(a), None, None])
            .collect();
        let sample = RowSample::new(&records(&rows), 400, &schema(), &AttributeSet::from([0]));
        let estimate = sample.search_rows(&SearchShape::equalities([0]), None);
        assert_eq!(estimate.probes.len(), 4);
        let shares: Vec<f64> = estimate
            .probes
            .iter()
            .map(|probe| probe.attribute_shares[&0])
            .collect();
        // By hand: a value sampled once is its probe's own record, 1 of 400; one sampled
        // twice is that record and 1 of the 3 other sampled records, a third of the
        // table's 399 others: 1 + 133 = 134 records.
        let expected = [134.0 / 400.0, 134.0 / 400.0, 1.0 / 400.0, 1.0 / 400.0];
        for (share, expected) in shares.iter().zip(expected) {
            assert!((share - expected).abs() < 1e-12, "{shares:?}");
        }
        for probe in &estimate.probes {
            assert_eq!(probe.matched_share, probe.attribute_shares[&0]);
        }
    }

    /// Over random samples, the records a probe's value is estimated to have in the
    /// table average what the table holds (counted by a scan), where scaling the
    /// sampled count by `table / sample` (the probe's own record `table / sample` times)
    /// averages far above it on a table of mostly rare values.
    #[test]
    fn probe_counts_are_unbiased_over_random_samples() {
        use rand::rngs::StdRng;
        use rand::seq::index::sample as sample_indices;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(19);
        // 3,000 records; values from 1 to 1,000 with a long tail: most held by a few
        // records, a handful by hundreds.
        let table: Vec<i64> = (0..3000)
            .map(|_| (1000f64.powf(rng.gen::<f64>())) as i64)
            .collect();
        let mut held: HashMap<i64, usize> = HashMap::new();
        for value in &table {
            *held.entry(*value).or_default() += 1;
        }
        let (sample_size, table_size) = (300usize, table.len() as f64);
        let (mut truth, mut estimated, mut scaled, mut probes) = (0.0, 0.0, 0.0, 0usize);
        for _ in 0..200 {
            let chosen = sample_indices(&mut rng, table.len(), sample_size);
            let rows: Vec<[Option<i64>; 3]> = chosen
                .iter()
                .map(|i| [Some(table[i]), None, None])
                .collect();
            let sampled = records(&rows);
            let sample = RowSample::new(
                &sampled,
                table.len() as u64,
                &schema(),
                &AttributeSet::from([0]),
            );
            let estimate = sample.search_rows(&SearchShape::equalities([0]), None);
            // The probes are the sampled records, evenly spaced: find each one's value.
            for (i, probe) in estimate.probes.iter().enumerate() {
                let value = rows[i * sample_size / estimate.probes.len()][0].unwrap();
                let in_sample = rows.iter().filter(|r| r[0] == Some(value)).count();
                truth += held[&value] as f64;
                estimated += probe.attribute_shares[&0] * table_size;
                scaled += in_sample as f64 * table_size / sample_size as f64;
                probes += 1;
            }
        }
        let (truth, estimated, scaled) = (
            truth / probes as f64,
            estimated / probes as f64,
            scaled / probes as f64,
        );
        assert!(
            (estimated - truth).abs() < 0.03 * truth,
            "estimated {estimated:.1} records a probe, the table holds {truth:.1}"
        );
        assert!(
            scaled - truth > 5.0,
            "scaling by table/sample should overcount by about 9: {scaled:.1} against {truth:.1}"
        );
    }
}
