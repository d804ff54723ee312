//! The node's side of choosing subspaces (the policy is
//! [`puffer_adapt::hyperspace`]): what the profiler is fed from the queries served (a
//! search's shape, an update's changed attributes), the configurator's settings and
//! the state it shows (profile, ranking, last reconfiguration).
//!
//! Attributes are the schema's attribute ids, so a shape stays valid while attributes
//! are added (ids are never reused).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::time::Duration;

use puffer_adapt::hyperspace::{
    AttributeId, AttributeSet, Calibration, Configuration, Constraint, Profiler, ProfilerConfig,
    SearchShape, Subspace, MAX_IN_VALUES, RANGE_FRACTION_DENOMINATOR,
};
use puffer_query::{QueryError, Result};
use puffer_store::{Predicate, Record, Schema, Value, WriteOp};
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
    pub(crate) view: TableTuningView,
}

impl TableTuning {
    pub(crate) fn new(config: ProfilerConfig) -> Result<TableTuning> {
        Ok(TableTuning {
            profiler: Profiler::new(config).map_err(config_error)?,
            numbers: HashMap::new(),
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
        alpha: measured.alpha,
        max_throughput_ops_per_s: measured.max_throughput_ops_per_s,
        objects: objects.max(1),
    }
}

/// The model's parameters as measured on this machine by `puffer-bench hyperspace
/// --calibrate` (never assumed).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct MeasuredCalibration {
    /// `β`: seconds per object a search scans.
    pub beta_s_per_object: f64,
    /// `α`: a moved copy's cost against one overwritten in place.
    pub alpha: f64,
    /// `T_max`: updates per second with a chain of length 1.
    pub max_throughput_ops_per_s: f64,
}

impl MeasuredCalibration {
    /// Checks the parameters (as the model would).
    pub fn check(&self) -> Result<()> {
        calibration(self, 1).check().map_err(config_error)
    }
}
