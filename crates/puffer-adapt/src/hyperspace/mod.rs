//! Hyperspace hashing with subspaces chosen by an analytical model, after Diegues et al.,
//! "Optimizing Hyperspace Hashing via Analytical Modelling and Adaptation" (the HyperDex
//! configuration model).
//!
//! Objects are hashed into one or more *subspaces*: each subspace is a grid over a few
//! secondary attributes, cut into about `R` regions, and holds a full copy of every
//! object. A search that fixes an attribute of a subspace asks only the regions along that
//! attribute's value; an update rewrites the object in every subspace. More subspaces make
//! searches touch fewer regions and updates walk longer replication chains; this module
//! predicts where that trade-off lands for a measured workload and picks a configuration.
//!
//! One run of the configurator, all of it pure (measurements and time in, decisions out):
//! 1. [`Profiler`] counts the searches' shapes and the updates' attribute sets over a
//!    sliding window of time buckets and gives a [`WorkloadProfile`] (paper §5.1).
//! 2. [`candidate_configurations`] (the query analyser, §5.1) lists configurations built
//!    from the searched attributes: exhaustively while that is small, pruned beyond.
//! 3. [`predicted_throughput_ops_per_s`] evaluates equations 1 to 4 (§3) for one
//!    configuration with a measured [`Calibration`]; [`rank_configurations`] orders the
//!    candidates; [`update_costs_from_runs`] measures `T_max` and an update's fixed
//!    cost, [`alpha_from_update_runs`] is equation 5 (§4.3) and
//!    [`search_costs_from_runs`] the same inversion of equation 2 for `β` and the
//!    per-region cost. A search's cost is charged by the objects it reads: with
//!    [`SearchRows`] (estimated by the caller from a sample of its records), what a
//!    compressed index locates and checks; without, every object of its regions.
//! 4. [`decide`] (the configurator, §5.1) switches only when the best candidate beats the
//!    current configuration by a margin, and then to the fewest copies among the
//!    candidates predicted to tie with the best.
//!
//! The paper's static heuristics are baselines in [`heuristics`]: no-subspace, hyperspace,
//! subspaces-all and dominant (§5.2).
//!
//! Attributes are the caller's `u16` numbers ([`AttributeId`]): small, `Copy` and
//! totally ordered, so sets of them sort the same way everywhere and ties can be broken by
//! them; names belong to the schema, which maps them. The primary key is not an
//! [`AttributeId`]: it has its own one-dimensional subspace that every configuration has
//! and that a [`SearchShape`] constrains through its `key` field.
//!
//! Wherever a rule needs a tie broken, the lower attribute id, the earlier subspace (the
//! key subspace first) or the configuration that sorts first wins, so the same
//! measurements always give the same decisions.

pub mod analyser;
pub mod configurator;
pub mod grid;
pub mod heuristics;
pub mod model;
pub mod profiler;
pub mod regions;

pub use analyser::{candidate_configurations, AnalyserConfig};
pub use configurator::{
    copies_per_object, decide, pick_among_ties, ConfiguratorDecision, DecisionReason, Margins,
    DEFAULT_SWITCH_MARGIN, DEFAULT_TIE_MARGIN,
};
pub use heuristics::{dominant, hyperspace, no_subspace, subspaces_all};
pub use model::{
    alpha_from_update_runs, conditions_of, fresh_page_rows, most_common_shares, objects_read,
    predicted_throughput_ops_per_s, rank_configurations, rows_returned, search_costs_from_runs,
    search_reads, search_run_time_ratio, tables_written, upkeep_share, Calibration, PageRead,
    RankedConfiguration, RowProbe, SearchCosts, SearchFrequency, SearchReads, SearchRows,
    SearchRun, UpdateFrequency, UpdateRun, Upkeep, ValueSpread, WorkloadProfile,
    MAX_FREE_VALUE_SHARES, MAX_ROW_PROBES, MAX_SPREAD_VALUES,
};
pub use model::{
    move_probability, search_cost_s, update_chain_length, update_cost_s, update_costs_from_runs,
    write_exposure, written_exposure, UpdateCosts,
};
pub use profiler::{Profiler, ProfilerConfig};
pub use regions::{
    dimension_parts, parts_per_dimension, regions_contacted, route_search, subspace_grid_regions,
    SearchRoute,
};

use std::collections::{BTreeMap, BTreeSet};

use crate::{config_error, ConfigError};

/// A secondary attribute, numbered by the caller's schema.
pub type AttributeId = u16;

/// A set of secondary attributes, in increasing id order.
pub type AttributeSet = BTreeSet<AttributeId>;

/// Most subspaces a configuration has besides the key subspace: every update walks a
/// chain through all of them, so more than this is never worth its update cost.
pub const MAX_SUBSPACES: usize = 8;

/// Most attributes (dimensions) in one subspace: with `R <= 65536` regions, a ninth
/// dimension would get at most 3 parts, and most dimensions one part, which prunes nothing.
pub const MAX_SUBSPACE_ATTRIBUTES: usize = 8;

/// Most regions a subspace is cut into; region counts and their products with each other
/// then stay far inside `u64`.
pub const MAX_REGIONS: u32 = 65_536;

/// Most copies of an object per subspace (`K = f + 1`).
pub const MAX_REPLICAS: u32 = 16;

/// Most attributes one search or update names: more than any schema this policy serves.
pub const MAX_OPERATION_ATTRIBUTES: usize = 64;

/// Most values an `IN` constraint lists.
pub const MAX_IN_VALUES: u32 = 1 << 20;

/// A range's width is given in millionths of its attribute's hashed dimension.
pub const RANGE_FRACTION_DENOMINATOR: u32 = 1_000_000;

/// How a search constrains one attribute.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Constraint {
    /// `attribute = value`: one part of the dimension.
    Equality,
    /// `attribute IN (v1, .., vn)` with `values` distinct values, `1..=MAX_IN_VALUES`: at
    /// most `values` parts of the dimension.
    In {
        /// Number of distinct values listed.
        values: u32,
    },
    /// A range covering `fraction_ppm / 1_000_000` of the dimension, `1..=1_000_000`,
    /// starting at a part boundary. Kept as an integer so that shapes are exact keys for
    /// the profiler and region counts have no rounding.
    Range {
        /// Width of the range in millionths of the dimension.
        fraction_ppm: u32,
    },
}

impl Constraint {
    fn check(self, attribute: &str) -> Result<(), ConfigError> {
        match self {
            Constraint::Equality => Ok(()),
            Constraint::In { values } if (1..=MAX_IN_VALUES).contains(&values) => Ok(()),
            Constraint::In { values } => Err(config_error(
                "search_shape",
                format!("IN on {attribute} lists {values} values, not 1..={MAX_IN_VALUES}"),
            )),
            Constraint::Range { fraction_ppm }
                if (1..=RANGE_FRACTION_DENOMINATOR).contains(&fraction_ppm) =>
            {
                Ok(())
            }
            Constraint::Range { fraction_ppm } => Err(config_error(
                "search_shape",
                format!(
                    "range on {attribute} covers {fraction_ppm} ppm, \
                     not 1..={RANGE_FRACTION_DENOMINATOR}"
                ),
            )),
        }
    }
}

/// What a search constrains, and how: the predicate's shape without its values. Equation 1
/// only needs the shape, and shapes repeat, so the profiler counts them.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SearchShape {
    /// The constraint on the primary key, if any.
    pub key: Option<Constraint>,
    /// The constraint on each constrained secondary attribute; an attribute absent here is
    /// unconstrained.
    pub attributes: BTreeMap<AttributeId, Constraint>,
}

impl SearchShape {
    /// A search fixing each of `attributes` by equality (the paper's `Q_i`).
    pub fn equalities(attributes: impl IntoIterator<Item = AttributeId>) -> SearchShape {
        SearchShape {
            key: None,
            attributes: attributes
                .into_iter()
                .map(|attribute| (attribute, Constraint::Equality))
                .collect(),
        }
    }

    /// The secondary attributes the search constrains.
    pub fn constrained_attributes(&self) -> AttributeSet {
        self.attributes.keys().copied().collect()
    }

    /// Checks every constraint and the number of attributes.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.attributes.len() > MAX_OPERATION_ATTRIBUTES {
            return Err(config_error(
                "search_shape",
                format!(
                    "{} constrained attributes is more than {MAX_OPERATION_ATTRIBUTES}",
                    self.attributes.len()
                ),
            ));
        }
        if let Some(key) = self.key {
            key.check("the key")?;
        }
        for (attribute, constraint) in &self.attributes {
            constraint.check(&format!("attribute {attribute}"))?;
        }
        Ok(())
    }
}

/// Checks an update's attribute set (the attributes whose values it changes).
pub(crate) fn check_update_attributes(attributes: &AttributeSet) -> Result<(), ConfigError> {
    if attributes.len() > MAX_OPERATION_ATTRIBUTES {
        return Err(config_error(
            "update_attributes",
            format!(
                "{} updated attributes is more than {MAX_OPERATION_ATTRIBUTES}",
                attributes.len()
            ),
        ));
    }
    Ok(())
}

fn check_regions(setting: &'static str, regions: u32) -> Result<(), ConfigError> {
    if !(1..=MAX_REGIONS).contains(&regions) {
        return Err(config_error(
            setting,
            format!("{regions} regions is not in 1..={MAX_REGIONS}"),
        ));
    }
    Ok(())
}

/// A subspace: a non-empty set of secondary attributes, each one a dimension, and the
/// number of regions `R` the subspace is cut into (about `R^(1/d)` parts per dimension,
/// see [`dimension_parts`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subspace {
    attributes: Vec<AttributeId>,
    regions: u32,
    /// Each attribute's parts, fixed by the two fields above: computed once here, as
    /// the model asks for them in its innermost loops (every search class of every
    /// candidate).
    parts: Vec<u32>,
}

impl Subspace {
    /// A subspace over `attributes` (1..=[`MAX_SUBSPACE_ATTRIBUTES`] distinct ids, in any
    /// order) cut into `regions` regions (1..=[`MAX_REGIONS`]).
    pub fn new(
        attributes: impl IntoIterator<Item = AttributeId>,
        regions: u32,
    ) -> Result<Subspace, ConfigError> {
        let mut sorted: Vec<AttributeId> = attributes.into_iter().collect();
        let listed = sorted.len();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != listed {
            return Err(config_error(
                "subspace",
                format!("attributes {sorted:?} are listed more than once"),
            ));
        }
        if sorted.is_empty() || sorted.len() > MAX_SUBSPACE_ATTRIBUTES {
            return Err(config_error(
                "subspace",
                format!(
                    "{} attributes is not in 1..={MAX_SUBSPACE_ATTRIBUTES}",
                    sorted.len()
                ),
            ));
        }
        check_regions("subspace_regions", regions)?;
        let parts = regions::dimension_parts(regions, sorted.len());
        Ok(Subspace {
            attributes: sorted,
            regions,
            parts,
        })
    }

    /// The subspace's attributes, in increasing id order.
    pub fn attributes(&self) -> &[AttributeId] {
        &self.attributes
    }

    /// The number of regions `R` asked for.
    pub fn regions(&self) -> u32 {
        self.regions
    }

    /// Each dimension's attribute and the parts it is cut into
    /// ([`dimension_parts`](regions::dimension_parts)), in increasing id order.
    pub fn dimensions(&self) -> impl Iterator<Item = (AttributeId, u32)> + '_ {
        self.attributes
            .iter()
            .copied()
            .zip(self.parts.iter().copied())
    }

    /// Parts dimension `attribute` is cut into (`None`: not a dimension of the subspace).
    pub fn parts_of(&self, attribute: AttributeId) -> Option<u32> {
        self.attributes
            .binary_search(&attribute)
            .ok()
            .map(|index| self.parts[index])
    }

    /// Whether the subspace has `attribute` as a dimension.
    pub fn contains(&self, attribute: AttributeId) -> bool {
        self.attributes.binary_search(&attribute).is_ok()
    }
}

/// A hyperspace-hashing configuration: the subspaces besides the key subspace, the key
/// subspace's region count, and the copies `K = f + 1` of each object in every subspace.
///
/// The subspaces are kept sorted and distinct, so two configurations with the same
/// subspaces compare equal whatever order they were listed in; index 0 of a search route is
/// the key subspace and index `i + 1` is `subspaces()[i]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Configuration {
    subspaces: Vec<Subspace>,
    key_regions: u32,
    replicas: u32,
}

impl Configuration {
    /// A configuration of at most [`MAX_SUBSPACES`] distinct subspaces, a key subspace of
    /// `key_regions` regions (1..=[`MAX_REGIONS`]) and `replicas` copies per subspace
    /// (1..=[`MAX_REPLICAS`]).
    pub fn new(
        subspaces: impl IntoIterator<Item = Subspace>,
        key_regions: u32,
        replicas: u32,
    ) -> Result<Configuration, ConfigError> {
        let mut sorted: Vec<Subspace> = subspaces.into_iter().collect();
        if sorted.len() > MAX_SUBSPACES {
            return Err(config_error(
                "subspaces",
                format!("{} subspaces is more than {MAX_SUBSPACES}", sorted.len()),
            ));
        }
        sorted.sort();
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(config_error(
                "subspaces",
                format!(
                    "subspace {:?} with {} regions is listed twice",
                    pair[0].attributes, pair[0].regions
                ),
            ));
        }
        check_regions("key_regions", key_regions)?;
        if !(1..=MAX_REPLICAS).contains(&replicas) {
            return Err(config_error(
                "replicas",
                format!("{replicas} copies per subspace is not in 1..={MAX_REPLICAS}"),
            ));
        }
        Ok(Configuration {
            subspaces: sorted,
            key_regions,
            replicas,
        })
    }

    /// The key subspace alone (the paper's no-subspace configuration).
    pub fn key_only(key_regions: u32, replicas: u32) -> Result<Configuration, ConfigError> {
        Configuration::new([], key_regions, replicas)
    }

    /// The subspaces besides the key subspace, sorted.
    pub fn subspaces(&self) -> &[Subspace] {
        &self.subspaces
    }

    /// Regions of the key subspace.
    pub fn key_regions(&self) -> u32 {
        self.key_regions
    }

    /// Copies of each object in every subspace, `K = f + 1`.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }
}

/// What the deployment fixes for every configuration it tries: the regions of each new
/// subspace and of the key subspace, and the copies per subspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deployment {
    /// `R` for every subspace a policy proposes (1..=[`MAX_REGIONS`]).
    pub subspace_regions: u32,
    /// Regions of the key subspace (1..=[`MAX_REGIONS`]).
    pub key_regions: u32,
    /// `K = f + 1` (1..=[`MAX_REPLICAS`]).
    pub replicas: u32,
}

impl Deployment {
    /// A configuration of these subspaces (attribute sets) on this deployment.
    pub fn configuration(
        &self,
        subspaces: impl IntoIterator<Item = AttributeSet>,
    ) -> Result<Configuration, ConfigError> {
        let subspaces = subspaces
            .into_iter()
            .map(|attributes| Subspace::new(attributes, self.subspace_regions))
            .collect::<Result<Vec<Subspace>, ConfigError>>()?;
        Configuration::new(subspaces, self.key_regions, self.replicas)
    }

    fn check(&self) -> Result<(), ConfigError> {
        check_regions("subspace_regions", self.subspace_regions)?;
        Configuration::key_only(self.key_regions, self.replicas).map(|_| ())
    }
}
