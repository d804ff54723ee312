//! The predictive model (paper §3): a configuration's throughput for a workload profile,
//! from parameters measured on the deployment ([`Calibration`]).
//!
//! As implemented, for a configuration with subspaces `S`, `K` copies per subspace:
//! - Search `Q_i` (equation 2): `cost(Q_i) = regions(Q_i) · c_region + (regions(Q_i) −
//!   1) · c_fan + read(Q_i) · β + sent(Q_i) · γ` seconds, where `regions` is equation
//!   1 in the subspace the search is routed to ([`route_search`](super::route_search))
//!   and `read` the objects the search reads there:
//!   - without row estimates, every object of the regions asked, `regions · O / grid`
//!     (the paper's equation 2; `grid` is the subspace's region count, `R` whenever `R`
//!     is a perfect power);
//!   - with [`SearchRows`] (estimated from a sample of the table), what a compressed
//!     index reads instead of a scan: the candidates of the search's most selective
//!     constraint in the regions asked, cut to the share its page needs (see
//!     [`objects_read`]). A store that scans its regions is the first case; this one
//!     answers from a suffix array, and its cost follows the rows it locates and
//!     checks, not the rows stored.
//!
//!   `c_region` is each region's fixed cost (a request, a backward search per segment);
//!   `c_fan` that of each region beyond the first (handed to another thread or node,
//!   its answer merged: the first is read on the asking thread); `γ` the cost of a row
//!   a region sends back ([`rows_returned`]: decoded whole, named, merged); the paper
//!   has none of them (all 0).
//! - Update `U_j` (equation 4): `cost(U_j) = f + K(1 + |N| + 2α|M|) / T_max` seconds,
//!   with `M` the subspaces of `S` having an attribute `U_j` changes and `N` the others;
//!   the `1` inside is the key subspace (Observation 4 and equation 4). A subspace of
//!   `M` moves the copy only when the new value falls in another region, which a coarse
//!   grid often does not: it is charged `2α` copies by the chance of a move and one
//!   copy written in place otherwise ([`move_probability`], [`update_chain_length`]). `f`
//!   ([`Calibration::update_fixed_cost_s`]) is what an update costs whatever its copies:
//!   the paper's `1/T_max`, the fetch by key before it, counted as one more hop. Here an
//!   update is one SCU carrying every copy, committed once: embedded, `f` comes out
//!   close to the paper's; on a cluster the SCU's round trips through etcd and deep
//!   storage make it several times a copy's cost, and charging every copy a whole
//!   commit had the model refuse subspaces that measured faster
//!   ([`update_costs_from_runs`] measures both). The key never changes in an update.
//! - Workload (equation 3, extended to updates as §3.3 says): with `p` each operation's
//!   share of all operations, `T = 1 / (Σ_i p_i cost(Q_i) + Σ_j p_j cost(U_j))`
//!   operations per second.
//! - Writes seen by searches (not in the paper): a region being written holds the rows
//!   of the last second or so in log tables, which a search checks one by one before
//!   its segments, until its page is found. A search `Q_i` is charged `λ · W_i`, with
//!   `λ` ([`Calibration::write_rate_cost_s2`]) seconds per row per second written into
//!   its regions and `W_i = T · u · e_i` those rows: `u = Σ_j p_j` the updates' share
//!   (each writes the record once into every subspace, in place or moved) and `e_i`
//!   the share of the table in the regions asked, times the share of its candidates the
//!   search reads before its page is full (1 when it is not cut). As `W_i` grows with
//!   `T`, equation 3 becomes `1/T = A + B · T` (`A` as above, `B = λ u Σ_i p_i e_i`),
//!   and `T = 2 / (A + √(A² + 4B))`.
//! - Fresh rows (not in the paper): a region looks for a page in its log tables and
//!   sorted batches before its segments, and finds a row there without a segment's
//!   walks to a sample. Updates rewrite rows all over the table, so at `u T` updates a
//!   second a share `m = 1 − e^(−u T τ / O)` of the table was written in the last `τ`
//!   seconds ([`Calibration::fresh_window_s`]: how long a row stays there, a log
//!   table's second plus a sorted batch's wait for compaction) and lies there. A search
//!   whose page cuts it reads the share `paged` of its candidates in the regions holding
//!   its matches; `min(paged, m)` of them are found fresh, at no cost of `β`, and only
//!   the rest in segments ([`PageRead`]). A page fills from fresh rows long before the
//!   table is fresh: a locality's matches in its region are many times its page. With
//!   `A(T)` falling as `T` rises, `1/T = A(T) + B · T` is solved by bisection between
//!   `T` with no row fresh and `T` with every row fresh. A search no page cuts reads
//!   every candidate wherever it lies: nothing spared (the log tables' rows it checks
//!   are `λ`'s).
//! - Own writes waited for (not in the paper): a node reads its own writes, so on a
//!   cluster a search asked after an update through the same node waits until the data
//!   nodes have applied it, whichever regions it asks (they follow the log in SCU
//!   order). The more updates a second, the likelier a search finds such a wait and
//!   the longer it is: a search is charged `κ · u · T` ([`Calibration::catch_up_cost_s2`],
//!   seconds per update per second), which adds `κ u Σ_i p_i` to `B`. Embedded, the node
//!   applies a write before it acknowledges it, and `κ` is fitted at about 0.
//! - Regions' upkeep (not in the paper): every second a region being written seals its
//!   log table into a sorted batch, and a second later compacts it into a new segment
//!   whose index is built whole. Per copy that work is dearest while a region's copies
//!   a second are few and cheapest once a second's batch is large: the shards' sealing
//!   and compacting threads took 15 to 21 µs of CPU a copy at 100 to 800 copies a
//!   second into a region and 6 µs above 1,600 (`n12`), and the update runs alone,
//!   which fit `T_max`, write 1,500 to 15,000. A region written `w` copies a second
//!   costs `ρ · w / (w + w_½)` of every second ([`Calibration::region_upkeep_s_per_s`],
//!   [`Calibration::upkeep_half_rate_per_s`]; [`upkeep_share`] over the tables an update
//!   writes, [`tables_written`]), and the operations share the rest: `(1 − upkeep(T)) /
//!   T = A(T) + B · T`, solved by bisection. The regions written are those the grid puts
//!   the records in ([`ValueSpread`]: five cities hashed into 16 parts fill five), each
//!   at its share of the copies. Measured embedded (2026-12-06), a search of
//!   a locality and a price amid updates ran 3.6 %, 8.4 % and 20 % slower at 90 %, 50 %
//!   and 10 % searches with a second subspace of 16 regions it never asks; the model
//!   without the term had it 5.6 to 7.5 % faster than measured.
//!
//! Equation 5 as printed, `α = (T_max − T_real − |N| K T_max) / (2|M| K T_real)`, is not
//! the inverse of equation 4 (it charges `|N| K T_max` where equation 4 gives
//! `K (1 + |N|) T_real`); [`alpha_from_update_runs`] inverts equation 4 exactly, so a
//! throughput predicted with the returned `α` reproduces the measured one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{
    check_update_attributes, regions::route_search_unchecked, AttributeId, AttributeSet,
    Configuration, Constraint, SearchRoute, SearchShape, Subspace, MAX_REPLICAS, MAX_SUBSPACES,
    RANGE_FRACTION_DENOMINATOR,
};
use crate::{config_error, ConfigError};

/// Parameters of the deployment, measured on it (§4.3); never assumed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// `β`: seconds a search spends on one object it reads (> 0): scans in the paper,
    /// locates and checks here.
    pub beta_s_per_object: f64,
    /// `c_region`: seconds a search spends on each region it asks, whatever it reads
    /// there (>= 0; the paper has no such term: 0).
    pub region_cost_s: f64,
    /// Seconds a search spends on each region it asks beyond the first (>= 0; the paper
    /// has none: 0): the first is read on the asking thread, each other one is handed
    /// to its replica's workers (or node) and its answer merged.
    pub fan_out_cost_s: f64,
    /// Seconds a search spends on each of its conditions in each region it asks (>= 0;
    /// the paper has none: 0): a region resolves every condition of a conjunction on
    /// each of its stages (log table, sorted batches, segments) to choose the one that
    /// finds the fewest candidates, whatever it then reads.
    pub condition_cost_s: f64,
    /// `γ`: seconds a search spends on each row a region sends back (>= 0; the paper
    /// has no such term: 0): a row found is decoded whole, named, sent and merged,
    /// which costs more than locating and checking a candidate that is left.
    pub sent_row_cost_s: f64,
    /// `λ`: seconds a search spends per row per second written into the regions it asks
    /// (>= 0; the paper has no such term: 0): the rows a region's log tables hold while
    /// it is written, checked before its segments until the page is found.
    pub write_rate_cost_s2: f64,
    /// `κ`: seconds a search waits per update per second written through its node
    /// (>= 0; the paper has no such term: 0): the wait until the data nodes have
    /// applied the node's newest write, which a search must see.
    pub catch_up_cost_s2: f64,
    /// `τ`: seconds a written row stays where a search finds it without a segment's
    /// walks (>= 0; the paper has no such term: 0): log tables and sorted batches hold
    /// it whole and uncompressed, found by a scan or a suffix array, and a region looks
    /// there first. A search cut by its page fills the page from those rows first, and
    /// reads from its segments only what they leave ([`PageRead`]).
    pub fresh_window_s: f64,
    /// `ρ`: seconds of the machine a second that a region written without pause costs
    /// besides its copies (>= 0; the paper has no such term: 0): a written region seals
    /// its log table into a sorted batch every second and compacts it into a segment
    /// whose index is built anew, work that grows with the copies while they are few
    /// and stops growing once a second's batch is large ([`upkeep_share`]).
    pub region_upkeep_s_per_s: f64,
    /// `w_½`: copies a second into a region at which its upkeep is half of `ρ` (>= 0; 0:
    /// `ρ` whatever the copies). Below it a copy costs about `ρ / w_½` more than `T_max`
    /// says; well above it the region costs `ρ` a second.
    pub upkeep_half_rate_per_s: f64,
    /// `α`: cost of rewriting an object in a subspace whose coordinates the update moves
    /// (a delete on the old server and a write on the new), relative to an overwrite in
    /// place (>= 0; the paper measured 2.3).
    pub alpha: f64,
    /// `T_max`: operations per second with a replication chain of length 1 (> 0).
    pub max_throughput_ops_per_s: f64,
    /// `f`: seconds of an update that do not grow with its copies (>= 0): the fetch by
    /// key before it and its SCU's commit. Equation 4 has `1 / T_max`.
    pub update_fixed_cost_s: f64,
    /// `O`: objects stored (>= 1).
    pub objects: u64,
}

impl Calibration {
    /// Checks every parameter.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(self.beta_s_per_object.is_finite() && self.beta_s_per_object > 0.0) {
            return Err(config_error(
                "beta_s_per_object",
                format!("{} is not a finite positive number", self.beta_s_per_object),
            ));
        }
        for (setting, value) in [
            ("region_cost_s", self.region_cost_s),
            ("fan_out_cost_s", self.fan_out_cost_s),
            ("condition_cost_s", self.condition_cost_s),
            ("sent_row_cost_s", self.sent_row_cost_s),
            ("write_rate_cost_s2", self.write_rate_cost_s2),
            ("catch_up_cost_s2", self.catch_up_cost_s2),
            ("fresh_window_s", self.fresh_window_s),
            ("region_upkeep_s_per_s", self.region_upkeep_s_per_s),
            ("upkeep_half_rate_per_s", self.upkeep_half_rate_per_s),
            ("alpha", self.alpha),
            ("update_fixed_cost_s", self.update_fixed_cost_s),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(config_error(
                    setting,
                    format!("{value} is not a finite non-negative number"),
                ));
            }
        }
        if !(self.max_throughput_ops_per_s.is_finite() && self.max_throughput_ops_per_s > 0.0) {
            return Err(config_error(
                "max_throughput_ops_per_s",
                format!(
                    "{} is not a finite positive number",
                    self.max_throughput_ops_per_s
                ),
            ));
        }
        if self.objects == 0 {
            return Err(config_error("objects", "0 objects: nothing to model"));
        }
        Ok(())
    }
}

/// A search shape and how often it occurs.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchFrequency {
    /// What the search constrains.
    pub shape: SearchShape,
    /// Its weight among all operations (any non-negative scale; the model normalises).
    pub frequency: f64,
    /// What searches of this shape find, if estimated; without it the model charges
    /// every object of the regions asked (the paper's equation 2).
    pub rows: Option<SearchRows>,
}

/// Most probes a [`SearchRows`] holds: enough for a mean over a skewed distribution of
/// values, few enough that ranking thousands of candidates stays in milliseconds.
pub const MAX_ROW_PROBES: usize = 256;

/// What searches of one shape find, estimated from a sample of the table's records.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRows {
    /// The most rows one search asks for (its limit; `None`: all of them).
    pub page_rows: Option<u64>,
    /// Searches of the shape as they might be asked, each with the values of one sampled
    /// record (1..=[`MAX_ROW_PROBES`]); the model charges their mean.
    pub probes: Vec<RowProbe>,
}

/// What one search finds, as shares of the table's records (each in `0..=1`).
#[derive(Debug, Clone, PartialEq)]
pub struct RowProbe {
    /// Records matching the whole search.
    pub matched_share: f64,
    /// Per constrained attribute, records matching its constraint alone (an attribute
    /// missing here finds no candidates of its own: the search cannot start from it).
    pub attribute_shares: BTreeMap<AttributeId, f64>,
    /// Per unconstrained attribute, how many distinct values the matching records hold
    /// (>= 1): a subspace dimension the search leaves free holds its matches in at most
    /// that many parts, whatever the regions asked (a city, given its neighbourhood, is
    /// one). An attribute missing here is taken to spread matches over every part.
    pub free_values: BTreeMap<AttributeId, u32>,
    /// Per attribute fixed by value (equality or `IN`), the same count among the
    /// records holding that attribute's value alone: where its candidates lie (a
    /// neighbourhood's rows in one city's regions, a price's in every city's). Missing:
    /// spread over every part.
    pub candidate_free_values: BTreeMap<AttributeId, BTreeMap<AttributeId, u32>>,
    /// Per attribute fixed by value, per unconstrained attribute, the share of the
    /// table holding the values its candidates hold there (the sum over those values,
    /// at most 1): how much of the table lies in the parts its candidates lie in (a
    /// neighbourhood's city holds a third of the listings, not a quarter of a grid cut
    /// by city in four). Missing: the parts' even share.
    pub candidate_free_shares: BTreeMap<AttributeId, BTreeMap<AttributeId, f64>>,
    /// Per unconstrained attribute, the shares of the matching records holding its
    /// most common values, largest first (at most [`MAX_FREE_VALUE_SHARES`], summing to
    /// at most 1; the rest hold its other values): how unevenly the matches fill the
    /// parts of a free dimension, and so how many of them a region's page holds (a
    /// neighbourhood's listings, nine in ten without a pool, fill one part's page and
    /// not the other's). Missing: evenly over [`RowProbe::free_values`]' count.
    pub free_value_shares: BTreeMap<AttributeId, Vec<f64>>,
}

/// Most values of a free attribute whose shares of the matches a [`RowProbe`] keeps.
pub const MAX_FREE_VALUE_SHARES: usize = 8;

/// [`RowProbe::free_value_shares`] of one attribute from how many of `total` matches
/// hold each of its values (`counts`, in any order): the largest shares first, at most
/// [`MAX_FREE_VALUE_SHARES`] of them.
pub fn most_common_shares(mut counts: Vec<usize>, total: usize) -> Vec<f64> {
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.truncate(MAX_FREE_VALUE_SHARES);
    counts
        .into_iter()
        .map(|count| count as f64 / total.max(1) as f64)
        .collect()
}

impl SearchRows {
    fn check(&self) -> Result<(), ConfigError> {
        if self.probes.is_empty() || self.probes.len() > MAX_ROW_PROBES {
            return Err(config_error(
                "search_rows",
                format!(
                    "{} probes is not in 1..={MAX_ROW_PROBES}",
                    self.probes.len()
                ),
            ));
        }
        if self.page_rows == Some(0) {
            return Err(config_error("search_rows", "a page of 0 rows"));
        }
        for probe in &self.probes {
            if probe
                .free_values
                .values()
                .chain(
                    probe
                        .candidate_free_values
                        .values()
                        .flat_map(|f| f.values()),
                )
                .any(|&values| values == 0)
            {
                return Err(config_error(
                    "search_rows",
                    "an attribute with 0 distinct values among the matches",
                ));
            }
            for shares in probe.free_value_shares.values() {
                let total: f64 = shares.iter().sum();
                if shares.len() > MAX_FREE_VALUE_SHARES || total > 1.0 + 1e-9 {
                    return Err(config_error(
                        "search_rows",
                        format!(
                            "{} values' shares of the matches summing to {total}: at most \
                             {MAX_FREE_VALUE_SHARES}, summing to at most 1",
                            shares.len()
                        ),
                    ));
                }
            }
            for share in std::iter::once(&probe.matched_share)
                .chain(probe.attribute_shares.values())
                .chain(probe.free_value_shares.values().flatten())
                .chain(
                    probe
                        .candidate_free_shares
                        .values()
                        .flat_map(|shares| shares.values()),
                )
            {
                if !(0.0..=1.0).contains(share) {
                    return Err(config_error(
                        "search_rows",
                        format!("share {share} is not in 0..=1"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// An update's changed attributes and how often it occurs.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateFrequency {
    /// The secondary attributes whose values the update changes.
    pub attributes: AttributeSet,
    /// Its weight among all operations (any non-negative scale; the model normalises).
    pub frequency: f64,
}

/// The operations of a workload and their frequencies (the paper's `Q_i` and `p_i`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkloadProfile {
    /// The searches.
    pub searches: Vec<SearchFrequency>,
    /// The updates.
    pub updates: Vec<UpdateFrequency>,
    /// Per hashed attribute (strings, booleans), how its values spread over the table:
    /// which regions of a subspace cutting it the updates write ([`tables_written`]).
    /// An attribute missing here spreads evenly over every part (numbers are cut at
    /// their quantiles, so they do).
    pub value_spreads: BTreeMap<AttributeId, ValueSpread>,
}

/// How a hashed attribute's values fall over the table's records: five cities hashed
/// into 16 parts fill at most five of them, two into four parts (Dublin and Edinburgh
/// share one), and a subspace of the city alone has five regions written, not 16.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueSpread {
    /// The most common values, each as its hash (FNV-1a of the bytes the grid hashes;
    /// `None`: records lacking the attribute, which lie in part 0) and its share of the
    /// records, at most [`MAX_SPREAD_VALUES`], the shares summing to at most 1.
    pub hashed_shares: Vec<(Option<u64>, f64)>,
    /// Distinct values not listed: they share the rest of the records, spread evenly
    /// over the parts (0: the list is whole).
    pub other_values: u64,
}

/// Most values of an attribute a [`ValueSpread`] lists.
pub const MAX_SPREAD_VALUES: usize = 64;

impl ValueSpread {
    fn check(&self) -> Result<(), ConfigError> {
        if self.hashed_shares.len() > MAX_SPREAD_VALUES {
            return Err(config_error(
                "value_spread",
                format!(
                    "{} values listed, more than {MAX_SPREAD_VALUES}",
                    self.hashed_shares.len()
                ),
            ));
        }
        let mut total = 0.0;
        for &(_, share) in &self.hashed_shares {
            if !(0.0..=1.0).contains(&share) {
                return Err(config_error(
                    "value_spread",
                    format!("a value's share {share} is not in 0..=1"),
                ));
            }
            total += share;
        }
        if total > 1.0 + 1e-9 {
            return Err(config_error(
                "value_spread",
                format!("the listed values' shares sum to {total}, above 1"),
            ));
        }
        Ok(())
    }

    /// The share of the records in each of a dimension's `parts` parts (summing to 1
    /// when the list is whole or values are left over; less when the listed shares fall
    /// short of 1 and none are).
    fn part_shares(&self, parts: u32) -> Vec<f64> {
        let parts = parts.max(1);
        let mut shares = vec![0.0; parts as usize];
        for &(hash, share) in &self.hashed_shares {
            // As the grid places it ([`Dimension::part_of`](super::grid::Dimension)).
            let part = hash.map_or(0, |hash| super::grid::hashed_part(hash, parts));
            shares[part as usize] += share;
        }
        let listed: f64 = self.hashed_shares.iter().map(|(_, share)| share).sum();
        let rest = (1.0 - listed).max(0.0);
        if self.other_values > 0 || self.hashed_shares.is_empty() {
            // Which parts the rest's hashes fall in is unknown: evenly, as expected.
            for share in &mut shares {
                *share += rest / f64::from(parts);
            }
        }
        shares
    }
}

impl WorkloadProfile {
    /// Checks every operation and frequency; returns the total weight (> 0).
    pub(crate) fn check(&self) -> Result<f64, ConfigError> {
        let total = self.check_entries()?;
        if total <= 0.0 {
            return Err(config_error(
                "workload_profile",
                "no operation has a positive frequency: nothing to predict",
            ));
        }
        Ok(total)
    }

    /// Checks every operation and frequency; returns the total weight (>= 0, finite).
    pub(crate) fn check_entries(&self) -> Result<f64, ConfigError> {
        let mut total = 0.0;
        for search in &self.searches {
            search.shape.check()?;
            if let Some(rows) = &search.rows {
                rows.check()?;
            }
            check_frequency(search.frequency)?;
            total += search.frequency;
        }
        for update in &self.updates {
            check_update_attributes(&update.attributes)?;
            check_frequency(update.frequency)?;
            total += update.frequency;
        }
        for spread in self.value_spreads.values() {
            spread.check()?;
        }
        if !total.is_finite() {
            return Err(config_error(
                "workload_profile",
                format!("frequencies sum to {total}, not a finite number"),
            ));
        }
        Ok(total)
    }
}

fn check_frequency(frequency: f64) -> Result<(), ConfigError> {
    if !(frequency.is_finite() && frequency >= 0.0) {
        return Err(config_error(
            "workload_profile",
            format!("frequency {frequency} is not a finite non-negative number"),
        ));
    }
    Ok(())
}

/// Seconds one search of `shape` costs in `configuration` (equation 2), finding what
/// `rows` says (see the module docs).
pub fn search_cost_s(
    configuration: &Configuration,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    calibration: &Calibration,
) -> Result<f64, ConfigError> {
    calibration.check()?;
    shape.check()?;
    if let Some(rows) = rows {
        rows.check()?;
    }
    Ok(search_cost_unchecked(
        configuration,
        shape,
        rows,
        calibration,
    ))
}

fn search_cost_unchecked(
    configuration: &Configuration,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    calibration: &Calibration,
) -> f64 {
    search_cost_and_exposure(configuration, shape, rows, calibration).0
}

/// Equation 2's seconds and the search's [`written_exposure`], from one route.
fn search_cost_and_exposure(
    configuration: &Configuration,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    calibration: &Calibration,
) -> (f64, f64) {
    let route = route_search_unchecked(configuration, shape);
    let cost = route_cost_and_exposure(configuration, &route, shape, rows, calibration);
    (cost.cost_s, cost.exposure)
}

/// A search's costs by what decides them: the search (its index in the profile), the
/// subspace it is routed to (`None`: the key subspace) and the regions it asks of how
/// many in its grid. Candidate configurations share most of their subspaces, so the
/// ranking works out each once: 4,096 candidates of 14 classes, 256 probes each.
type RouteCosts = HashMap<(usize, Option<Subspace>, u64, u64), RouteCost>;

/// One search's seconds by equation 2, its [`written_exposure`] and its
/// [`SearchReads::pages`] (shared with the operation costs of every configuration that routes
/// the search the same way).
#[derive(Debug, Clone)]
struct RouteCost {
    cost_s: f64,
    exposure: f64,
    pages: Arc<PageCurve>,
}

/// What a search cut by its page reads in the regions holding its matches, from one
/// probe of its rows ([`SearchReads::pages`]): `candidate_rows` rows there, of which it reads
/// the share `paged_share` before the pages are full. When a share `m` of the table
/// was written in the last `τ` seconds ([`Calibration::fresh_window_s`]), `m` of the
/// matches lie in log tables and sorted batches, which a region reads first: the page
/// takes `min(paged_share, m)` of the candidates there, and segments only the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageRead {
    /// Share of the candidates read before the pages are full (in `(0, 1)`).
    pub paged_share: f64,
    /// Candidate rows in the regions holding matches, divided by the probes (so that
    /// the sum over a search's page reads is a mean over its probes; >= 0).
    pub candidate_rows: f64,
}

/// Rows of `pages` found outside segments when a share `fresh_share` of the table is
/// fresh (see [`PageRead`]).
pub fn fresh_page_rows(pages: &[PageRead], fresh_share: f64) -> f64 {
    pages
        .iter()
        .map(|page| page.candidate_rows * page.paged_share.min(fresh_share))
        .sum()
}

/// [`fresh_page_rows`] of one search's page reads at any fresh share in `O(log n)`:
/// the throughput's bisection asks it 64 times for every class of every candidate
/// configuration (C: 14 classes, up to 256 probes each, 4,090 candidates).
#[derive(Debug, Clone, Default)]
struct PageCurve {
    /// The page reads' shares, ascending.
    shares: Vec<f64>,
    /// `below[i]`: `Σ rows · share` over the first `i` shares (those found fresh whole).
    below: Vec<f64>,
    /// `above[i]`: `Σ rows` over the shares from `i` on (found fresh up to the share).
    above: Vec<f64>,
}

impl PageCurve {
    fn new(pages: &[PageRead]) -> PageCurve {
        let mut sorted = pages.to_vec();
        sorted.sort_by(|a, b| a.paged_share.total_cmp(&b.paged_share));
        let mut below = vec![0.0; sorted.len() + 1];
        let mut above = vec![0.0; sorted.len() + 1];
        for (i, page) in sorted.iter().enumerate() {
            below[i + 1] = below[i] + page.candidate_rows * page.paged_share;
        }
        for (i, page) in sorted.iter().enumerate().rev() {
            above[i] = above[i + 1] + page.candidate_rows;
        }
        PageCurve {
            shares: sorted.iter().map(|page| page.paged_share).collect(),
            below,
            above,
        }
    }

    /// [`fresh_page_rows`] of the pages this curve was made of.
    fn rows(&self, fresh_share: f64) -> f64 {
        let whole = self.shares.partition_point(|&share| share <= fresh_share);
        self.below[whole] + fresh_share * self.above[whole]
    }

    fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }
}

/// [`search_cost_and_exposure`] on `route`.
fn route_cost_and_exposure(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    calibration: &Calibration,
) -> RouteCost {
    let reads = search_reads(configuration, route, shape, rows, calibration.objects);
    let asked = route.regions_contacted as f64;
    let conditions = conditions_of(shape);
    let cost_s = asked * calibration.region_cost_s
        + (asked - 1.0).max(0.0) * calibration.fan_out_cost_s
        + asked * conditions * calibration.condition_cost_s
        + reads.read * calibration.beta_s_per_object
        + reads.sent * calibration.sent_row_cost_s;
    RouteCost {
        cost_s,
        exposure: reads.exposure,
        pages: Arc::new(PageCurve::new(&reads.pages)),
    }
}

/// The conditions a search of `shape` sets: one per constrained attribute, and the
/// key's.
pub fn conditions_of(shape: &SearchShape) -> f64 {
    (shape.attributes.len() + usize::from(shape.key.is_some())) as f64
}

/// Objects a search of `shape` reads on `route` in a table of `objects`, the mean over
/// `rows`' probes:
/// - each constraint's rows in the regions asked. A constraint on a dimension of the
///   routed subspace finds those of its rows that the other dimensions' parts asked
///   hold: all its rows are in its own parts, and their values of the other dimensions
///   are taken as independent of it (a locality and a price cut 4 by 4: the locality's
///   rows in the price's quarter). One on another attribute finds its share of the
///   regions asked (its values taken as independent of the cut); the key's equality or
///   `IN` finds one record per value; with no constraint the search reads the regions
///   asked whole;
/// - candidates: each region asked reads the rows of the constraint that finds the
///   fewest there, in every region asked, whether it holds matches or not. Where a
///   constraint's rows hold few values of a dimension the search leaves free
///   ([`RowProbe::candidate_free_values`]), they lie in those values' parts only, and
///   the regions beyond read nothing; the other constraints are charged their rows in
///   those parts (weighted by the share of the table there,
///   [`RowProbe::candidate_free_shares`]);
/// - the page: each region stops once it has found the page (`page_rows`), so a
///   search whose matches exceed a page in every region holding them reads only the
///   page's share of its candidates there. The regions holding matches are those asked,
///   less the parts of each free dimension of the subspace that no match's value falls
///   in ([`RowProbe::free_values`]); matches are taken as spread evenly over them.
///
/// Without `rows`, every object of the regions asked (the paper's equation 2).
pub fn objects_read(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    objects: u64,
) -> f64 {
    search_reads(configuration, route, shape, rows, objects).read
}

/// What one search of a shape reads and is sent on a route ([`search_reads`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchReads {
    /// [`objects_read`].
    pub read: f64,
    /// [`rows_returned`].
    pub sent: f64,
    /// [`written_exposure`].
    pub exposure: f64,
    /// One [`PageRead`] per probe of the rows whose page cuts the search (none without
    /// rows).
    pub pages: Vec<PageRead>,
}

/// [`objects_read`], [`rows_returned`], [`written_exposure`] and the page reads of a
/// search of `shape` on `route` in a table of `objects`, in one pass over the probes
/// (the ranking charges them all for every candidate configuration).
pub fn search_reads(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    objects: u64,
) -> SearchReads {
    let objects = objects as f64;
    let asked = route.regions_contacted as f64;
    let fraction = asked / route.grid_regions as f64;
    let Some(rows) = rows.filter(|rows| !rows.probes.is_empty()) else {
        return SearchReads {
            read: fraction * objects,
            sent: fraction * objects,
            exposure: fraction,
            pages: Vec::new(),
        };
    };
    let probes = rows.probes.len() as f64;
    let mut pages = Vec::new();
    let subspace = routed_subspace(configuration, route);
    let key_candidates = match shape.key {
        Some(Constraint::Equality) => 1.0,
        Some(Constraint::In { values }) => f64::from(values),
        Some(Constraint::Range { fraction_ppm }) => {
            f64::from(fraction_ppm) / f64::from(RANGE_FRACTION_DENOMINATOR) * objects * fraction
        }
        None => f64::INFINITY,
    };
    let (read, sent, exposure) = rows
        .probes
        .iter()
        .map(|probe| {
            let holding = holding_regions(configuration, route, shape, &probe.free_values);
            let held = held_share(configuration, route, shape, probe);
            let matched = probe.matched_share * objects;
            // Per constraint: its rows in the regions asked, and the regions they lie
            // in (at least those holding matches: every match meets every constraint).
            let constraints: Vec<(AttributeId, f64, f64)> = probe
                .attribute_shares
                .iter()
                .filter(|(attribute, _)| shape.attributes.contains_key(attribute))
                .map(|(&attribute, &share)| {
                    let in_asked = match subspace {
                        Some(s) if s.contains(attribute) => {
                            let own = own_part_share(s, shape, attribute, share);
                            share * objects * (held / own).min(1.0)
                        }
                        _ => share * objects * held,
                    };
                    let lie_in = probe
                        .candidate_free_values
                        .get(&attribute)
                        .map_or(asked, |free| {
                            holding_regions(configuration, route, shape, free)
                        })
                        .clamp(holding, asked.max(holding));
                    (attribute, in_asked, lie_in)
                })
                .collect();
            // Each region reads the rows of the constraint finding the fewest there.
            // Every constraint finds rows only in the regions of the most confined one
            // (whose rows lie in the fewest: a neighbourhood's in its city's parts);
            // the others read nothing. The regions are taken as nested, all holding the
            // matches'. Each constraint is charged its rows in those regions
            // ([`rows_in_regions_of`]), and the search the fewest.
            let confined = constraints
                .iter()
                .min_by(|a, b| a.2.total_cmp(&b.2))
                .map(|&(attribute, _, lie_in)| (attribute, lie_in));
            let (fewest, common_regions) = match confined {
                Some((most_confined, lie_in)) => (
                    constraints
                        .iter()
                        .map(|&(attribute, rows, _)| {
                            rows * rows_in_regions_of(
                                configuration,
                                route,
                                shape,
                                probe,
                                attribute,
                                most_confined,
                            )
                        })
                        .fold(f64::INFINITY, f64::min),
                    lie_in,
                ),
                None => (f64::INFINITY, asked.max(holding)),
            };
            // A constraint finds at least the search's matches, all in the regions
            // holding them, whatever the independence assumed above says; the key's
            // and the regions' own records bound it.
            let candidates = fewest.min(key_candidates).min(objects * held).max(matched);
            // The regions holding matches read their share of it (at least the
            // matches), cut by the page below; the others read theirs whole: no page
            // fills there.
            let holding_share = (holding / common_regions).min(1.0);
            let in_holding = if fewest.is_finite() {
                (candidates * holding_share).max(matched)
            } else {
                candidates
            };
            let elsewhere = candidates - in_holding;
            // Each region holding matches stops at its page: the share of the matches
            // the pages hold, over the regions as the matches fill them.
            let paged = rows.page_rows.map_or(1.0, |page| {
                paged_share(configuration, route, shape, probe, page as f64, matched)
            });
            if paged < 1.0 {
                pages.push(PageRead {
                    paged_share: paged,
                    candidate_rows: in_holding / probes,
                });
                let read = in_holding * paged + elsewhere;
                (
                    read,
                    matched * paged,
                    held * read / candidates.max(f64::MIN_POSITIVE),
                )
            } else {
                (candidates, matched, held)
            }
        })
        .fold((0.0, 0.0, 0.0), |(read, sent, exposure), (r, s, e)| {
            (read + r, sent + s, exposure + e)
        });
    SearchReads {
        read: read / probes,
        sent: sent / probes,
        exposure: exposure / probes,
        pages,
    }
}

/// The share of a search's `matched` matches that the regions holding them send back
/// before each has its `page` (1 when no region fills a page): `Σ_r min(matched ·
/// q_r, page) / matched`, `q_r` the share of the matches in region `r`. Per dimension
/// of the routed subspace the search leaves free, the matches fill its parts as their
/// values do ([`RowProbe::free_value_shares`], each value in a part of its own while
/// there are parts left, then in the emptiest; the rest of the matches spread evenly
/// over as many parts as they hold values, [`RowProbe::free_values`]); the dimensions
/// are taken as independent, and the regions asked along the search's own dimensions
/// share the matches evenly. In the key subspace the matches spread evenly over the
/// regions asked (keys are all distinct).
fn paged_share(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    probe: &RowProbe,
    page: f64,
    matched: f64,
) -> f64 {
    if matched <= page {
        return 1.0;
    }
    let asked = route.regions_contacted as f64;
    let Some(subspace) = routed_subspace(configuration, route) else {
        return (page * asked / matched).min(1.0);
    };
    // The regions asked along the search's own dimensions: the matches' shares there
    // are even; along each free dimension, its parts' shares.
    let free_dimensions: Vec<(AttributeId, u32)> = subspace
        .dimensions()
        .filter(|(dimension, _)| !shape.attributes.contains_key(dimension))
        .collect();
    let free: Vec<Vec<f64>> = free_dimensions
        .iter()
        .map(|(dimension, parts)| {
            part_shares(
                probe.free_value_shares.get(dimension).map(Vec::as_slice),
                probe.free_values.get(dimension).copied(),
                *parts,
            )
        })
        .collect();
    // A free dimension is asked in every one of its parts.
    let free_regions: f64 = free_dimensions
        .iter()
        .map(|&(_, parts)| f64::from(parts))
        .product();
    let own_regions = (asked / free_regions).max(1.0);
    // Every region's share, one dimension at a time (at most the grid's regions).
    let mut shares = vec![1.0 / own_regions];
    for dimension in &free {
        shares = shares
            .iter()
            .flat_map(|&share| dimension.iter().map(move |&part| share * part))
            .collect();
    }
    let sent: f64 = shares
        .iter()
        .map(|&share| (matched * share).min(page))
        .sum::<f64>()
        * own_regions;
    (sent / matched).min(1.0)
}

/// The shares of a free dimension's `parts` that matches fill, those with some (see
/// [`paged_share`]): `shares` of their most common values, `values` distinct ones in
/// all (`None`: as many as there are parts).
fn part_shares(shares: Option<&[f64]>, values: Option<u32>, parts: u32) -> Vec<f64> {
    let parts = parts.max(1) as usize;
    let values = values.map_or(parts, |v| (v as usize).max(1));
    let holding = values.min(parts);
    let mut filled: Vec<f64> = vec![0.0; holding];
    let listed = shares.unwrap_or(&[]);
    for &share in listed {
        // Its own part while there are parts left, then the emptiest.
        if let Some(emptiest) = filled.iter_mut().min_by(|a, b| a.total_cmp(b)) {
            *emptiest += share;
        }
    }
    let rest = (1.0 - listed.iter().sum::<f64>()).max(0.0);
    for part in &mut filled {
        *part += rest / holding as f64;
    }
    filled
}

/// The share of constraint `attribute`'s rows in the regions asked on `route` that lie
/// in the regions where constraint `most_confined`'s rows lie (1 for itself): per
/// dimension of the routed subspace the search leaves free, where `most_confined`'s
/// candidates hold `k` of its `p` parts' values, `attribute`'s rows there are
/// - all of them where its own candidates lie in no more parts;
/// - `k / k'` where they lie in `k' > k` parts of their own (spread evenly);
/// - where they spread over every part, the share of the table in those `k` parts:
///   the values' own share `S` ([`RowProbe::candidate_free_shares`]) and their part of
///   the rest, `S + (1 − S) k / p` (`k / p` without `S`): a neighbourhood's city's part
///   holds the city's listings, and a price's rows there are the price's share of those.
fn rows_in_regions_of(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    probe: &RowProbe,
    attribute: AttributeId,
    most_confined: AttributeId,
) -> f64 {
    if attribute == most_confined {
        return 1.0;
    }
    let Some(subspace) = routed_subspace(configuration, route) else {
        return 1.0;
    };
    let lain_in = |constraint: AttributeId, dimension: AttributeId, parts: u32| -> u32 {
        probe
            .candidate_free_values
            .get(&constraint)
            .and_then(|free| free.get(&dimension))
            .map_or(parts, |&values| values.min(parts))
    };
    subspace
        .dimensions()
        .filter(|(dimension, _)| !shape.attributes.contains_key(dimension))
        .map(|(dimension, parts)| {
            let (k, own) = (
                lain_in(most_confined, dimension, parts),
                lain_in(attribute, dimension, parts),
            );
            if own <= k {
                1.0
            } else if own < parts {
                f64::from(k) / f64::from(own)
            } else {
                let even = f64::from(k) / f64::from(parts);
                probe
                    .candidate_free_shares
                    .get(&most_confined)
                    .and_then(|shares| shares.get(&dimension))
                    .map_or(even, |&share| share + (1.0 - share) * even)
                    .min(1.0)
            }
        })
        .product()
}

/// The share of the rows written into the table that a search of `shape` on `route`
/// checks while they wait in its regions' log tables, the mean over `rows`' probes:
/// the share of the table in the regions asked (`held_share`: writes fall where the
/// records are), times the share of its candidates the search reads before its page is
/// full (1 when not cut; see [`objects_read`]). Without `rows`, `asked / grid`.
pub fn written_exposure(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    objects: u64,
) -> f64 {
    search_reads(configuration, route, shape, rows, objects).exposure
}

/// The subspace `route` reads (`None`: the key subspace).
fn routed_subspace<'c>(
    configuration: &'c Configuration,
    route: &SearchRoute,
) -> Option<&'c Subspace> {
    route
        .subspace_index
        .checked_sub(1)
        .and_then(|index| configuration.subspaces().get(index))
}

/// Share of the table's records in the regions a search of `shape` asks on `route`,
/// for `probe`'s values: `asked / grid` where records spread evenly over the parts of
/// every dimension, more where a value the search fixes by equality holds more than
/// its part's share. Such a part holds the value's records and its share of the others,
/// `share + (1 − share) / parts` of the table instead of `1 / parts` (five cities
/// hashed into 16 parts: a city's part holds a fifth of the table, not a sixteenth).
fn held_share(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    probe: &RowProbe,
) -> f64 {
    let even = route.regions_contacted as f64 / route.grid_regions as f64;
    let Some(subspace) = routed_subspace(configuration, route) else {
        return even;
    };
    subspace
        .dimensions()
        .filter(|(attribute, _)| shape.attributes.get(attribute) == Some(&Constraint::Equality))
        .filter_map(|(attribute, parts)| {
            probe
                .attribute_shares
                .get(&attribute)
                .map(|&share| (f64::from(parts), share))
        })
        .fold(even, |held, (parts, share)| {
            held * (parts * share + 1.0 - share)
        })
        .min(1.0)
}

/// The share of the table in the parts of dimension `attribute` of `subspace` that a
/// search of `shape` asks: its factor in [`held_share`]. An equality's part holds the
/// value's records (`share`) and its share of the others; any other constraint asks
/// [`parts_asked`](super::regions) parts of `parts`, each holding its share.
fn own_part_share(
    subspace: &Subspace,
    shape: &SearchShape,
    attribute: AttributeId,
    share: f64,
) -> f64 {
    let parts = subspace.parts_of(attribute).unwrap_or(1);
    let parts_f = f64::from(parts);
    match shape.attributes.get(&attribute).copied() {
        Some(Constraint::Equality) => share + (1.0 - share) / parts_f,
        constraint => super::regions::parts_asked(constraint, parts) as f64 / parts_f,
    }
}

/// Rows a search of `shape` on `route` sends back from the regions it asks, the mean
/// over `rows`' probes: each region holding matches sends them up to the page, so
/// `min(matched, page · holding)` with `holding` as in [`objects_read`]. Every row sent
/// is decoded whole, copied into the answer and merged, whatever it cost to find.
///
/// Without `rows`, the objects read (every object of the regions asked).
pub fn rows_returned(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    rows: Option<&SearchRows>,
    objects: u64,
) -> f64 {
    search_reads(configuration, route, shape, rows, objects).sent
}

/// Regions asked by a search on `route` that hold records whose free attributes have
/// `free_values` distinct values (a probe's matches, or one constraint's candidates): a
/// free dimension's parts beyond those values hold none (key regions: keys are all
/// distinct), at least 1.
fn holding_regions(
    configuration: &Configuration,
    route: &SearchRoute,
    shape: &SearchShape,
    free_values: &BTreeMap<AttributeId, u32>,
) -> f64 {
    let asked = route.regions_contacted as f64;
    let Some(subspace) = routed_subspace(configuration, route) else {
        return asked;
    };
    subspace
        .dimensions()
        .filter(|(attribute, _)| !shape.attributes.contains_key(attribute))
        .filter_map(|(attribute, parts)| free_values.get(&attribute).map(|&v| (v, parts)))
        .fold(asked, |regions, (values, parts)| {
            regions * f64::from(values.min(parts)) / f64::from(parts)
        })
        .max(1.0)
}

/// The weighted chain length `K(1 + |N| + Σ_M ((1 − q_s) + 2α q_s))` of an update
/// changing `attributes` (Observation 4 with the corrective factor of Observation 5),
/// `q_s` the chance the update moves the object out of its region in subspace `s`
/// ([`move_probability`]); with every `q_s = 1` it is the paper's `K(1 + |N| +
/// 2α|M|)`, and with `α = 1` the number of servers in the chain.
pub fn update_chain_length(
    configuration: &Configuration,
    attributes: &AttributeSet,
    alpha: f64,
) -> f64 {
    let (in_place, moved) =
        configuration
            .subspaces()
            .iter()
            .fold((0.0, 0.0), |(in_place, moved), subspace| {
                let q = move_probability(subspace, attributes);
                (in_place + 1.0 - q, moved + q)
            });
    f64::from(configuration.replicas()) * (1.0 + in_place + 2.0 * alpha * moved)
}

/// The chance that an update changing `attributes` moves an object to another region of
/// `subspace`: `1 − Π 1/p` over the changed attributes the subspace has, each dimension
/// cut into its `p` parts ([`dimension_parts`](super::regions::dimension_parts)), the
/// new value taken to fall in any part alike (quantile cuts and hashes spread values
/// evenly); 0 when the subspace has none of them.
///
/// Why not 1 whenever the subspace has a changed attribute, as the paper charges: the
/// store moves a copy only when its region changes, and overwrites it in place
/// otherwise. The paper's grids are fine (a hash per attribute), so a change nearly
/// always moves; here a wide subspace's dimensions have one part or two, so a change
/// stays in its region half the time or always. (Before wide grids were cut unevenly,
/// six attributes in 16 regions made one region, where no update moves anything, and
/// the model charged it `2α` copies an update for a copy written in place: on the
/// cluster, hyperspace measured 5 to 8 % above the choice at B-WH in four runs while
/// the model ranked it out of its five best.)
pub fn move_probability(subspace: &Subspace, attributes: &AttributeSet) -> f64 {
    // The chance that every changed attribute's new value stays in its old part (1
    // when the update changes none of the subspace's attributes).
    let stays: f64 = subspace
        .dimensions()
        .filter(|(attribute, _)| attributes.contains(attribute))
        .map(|(_, parts)| 1.0 / f64::from(parts))
        .product();
    1.0 - stays
}

/// Seconds one update changing `attributes` costs in `configuration`: the inverse of
/// equation 4, `f + K(1 + |N| + 2α|M|) / T_max` (`f` is `1 / T_max` in the paper).
pub fn update_cost_s(
    configuration: &Configuration,
    attributes: &AttributeSet,
    calibration: &Calibration,
) -> Result<f64, ConfigError> {
    calibration.check()?;
    check_update_attributes(attributes)?;
    Ok(update_cost_unchecked(
        configuration,
        attributes,
        calibration,
    ))
}

fn update_cost_unchecked(
    configuration: &Configuration,
    attributes: &AttributeSet,
    calibration: &Calibration,
) -> f64 {
    calibration.update_fixed_cost_s
        + update_chain_length(configuration, attributes, calibration.alpha)
            / calibration.max_throughput_ops_per_s
}

/// Predicted operations per second of `configuration` under `profile` (equations 1 to 4,
/// combined as equation 3 and §3.3). Where the upkeep of the regions an update writes
/// takes every second ([`Calibration::region_upkeep_s_per_s`]), a billionth of a
/// second is left to operations.
pub fn predicted_throughput_ops_per_s(
    configuration: &Configuration,
    profile: &WorkloadProfile,
    calibration: &Calibration,
) -> Result<f64, ConfigError> {
    calibration.check()?;
    let total = profile.check()?;
    Ok(throughput_unchecked(
        configuration,
        profile,
        calibration,
        total,
        &mut RouteCosts::new(),
    ))
}

fn throughput_unchecked(
    configuration: &Configuration,
    profile: &WorkloadProfile,
    calibration: &Calibration,
    total_frequency: f64,
    route_costs: &mut RouteCosts,
) -> f64 {
    let costs = cost_and_exposure_unchecked(
        configuration,
        profile,
        calibration,
        total_frequency,
        route_costs,
    );
    let write_term = calibration.write_rate_cost_s2 * costs.exposure
        + calibration.catch_up_cost_s2 * costs.searches_amid_updates;
    // Rows written in the last τ seconds, per row stored per operation per second.
    let fresh_rate = costs.update_share * calibration.fresh_window_s / calibration.objects as f64;
    if costs.update_share <= 0.0 || calibration.region_upkeep_s_per_s <= 0.0 {
        return solve_throughput(&costs, write_term, fresh_rate, |_| 0.0);
    }
    // The share of every second the written regions' upkeep takes at `T`.
    let tables = tables_written(configuration, &profile.value_spreads);
    let upkeep = |t: f64| {
        upkeep_share(
            &tables,
            costs.update_share * t,
            calibration.region_upkeep_s_per_s,
            calibration.upkeep_half_rate_per_s,
        )
    };
    solve_throughput(&costs, write_term, fresh_rate, upkeep)
}

/// The share of a second left to operations where the regions' upkeep takes it all: a
/// configuration whose upkeep takes every second keeps a billionth of it, ranked last
/// and never chosen, with a throughput the configurator can still compare.
const MIN_CAPACITY: f64 = 1e-9;

/// The tables an update writes into in `configuration`, each as the shares of the
/// copies its written regions take: the key subspace (keys are distinct: evenly over
/// its regions) and each subspace (its grid's regions, the values of `spreads` where
/// they fall, others evenly; dimensions taken as independent), on each of the `K`
/// copies (every update writes a copy into each; [`upkeep_share`]). Regions no copy
/// falls in are left out.
pub fn tables_written(
    configuration: &Configuration,
    spreads: &BTreeMap<AttributeId, ValueSpread>,
) -> Vec<Vec<f64>> {
    let key_regions = configuration.key_regions().max(1);
    let per_copy: Vec<Vec<f64>> =
        std::iter::once(vec![1.0 / f64::from(key_regions); key_regions as usize])
            .chain(
                configuration
                    .subspaces()
                    .iter()
                    .map(|subspace| region_shares(subspace, spreads)),
            )
            .collect();
    (0..configuration.replicas())
        .flat_map(|_| per_copy.iter().cloned())
        .collect()
}

/// The share of the records in each region of `subspace`'s grid that holds any
/// (`parts^dimensions` regions, the parts of each dimension as `spreads` fill them).
fn region_shares(subspace: &Subspace, spreads: &BTreeMap<AttributeId, ValueSpread>) -> Vec<f64> {
    subspace
        .dimensions()
        .map(|(attribute, parts)| match spreads.get(&attribute) {
            Some(spread) => spread.part_shares(parts),
            None => vec![1.0 / f64::from(parts); parts as usize],
        })
        .fold(vec![1.0], |regions, dimension| {
            regions
                .iter()
                .flat_map(|region| dimension.iter().map(move |part| region * part))
                .collect()
        })
        .into_iter()
        .filter(|&share| share > 0.0)
        .collect()
}

/// The share of every second the upkeep of the regions written takes
/// ([`Calibration::region_upkeep_s_per_s`]), with `updates_per_s` updates a second each
/// writing a copy into every table of `tables` (each as its written regions' shares of
/// the copies, as [`tables_written`] gives them): `ρ Σ_regions w / (w + w_½)`, `w =
/// share · updates_per_s` a region's copies a second and `w_½` = `half_rate_per_s` (0:
/// every region written costs `ρ` whatever its writes). At most all but a billionth of
/// the second.
pub fn upkeep_share(
    tables: &[Vec<f64>],
    updates_per_s: f64,
    region_upkeep_s_per_s: f64,
    half_rate_per_s: f64,
) -> f64 {
    if region_upkeep_s_per_s <= 0.0 {
        return 0.0;
    }
    let busy = busy_regions(tables, updates_per_s, half_rate_per_s);
    (region_upkeep_s_per_s * busy).min(1.0 - MIN_CAPACITY)
}

/// `T` solving `1/T = base_s + write_term · T` (see the module docs): `1 / base_s`
/// without the term.
fn throughput_from(base_s: f64, write_term: f64) -> f64 {
    // Costs are positive (β, O, T_max > 0), so `base_s` is too; this form has no
    // cancellation when the write term is small.
    2.0 / (base_s + (base_s * base_s + 4.0 * write_term).sqrt())
}

/// `T` solving `(1 − upkeep(T)) / T = A − β · F(1 − e^(−fresh_rate · T)) + write_term ·
/// T` (see the module docs; `F(m)` the page rows found outside segments when a share
/// `m` of the table is fresh, `upkeep(T)` the share of a second the written regions'
/// upkeep takes at `T`, below 1): [`throughput_from`] when no row is fresh and nothing
/// is upkept. At `T` with every row fresh and no upkeep the left side is at most the
/// right; at `T` with no row fresh, or near 0 with upkeep, at least; a root lies
/// between, found by bisection.
fn solve_throughput(
    costs: &OperationCosts,
    write_term: f64,
    fresh_rate: f64,
    upkeep: impl Fn(f64) -> f64,
) -> f64 {
    let base_s = costs.base_s;
    let stale = throughput_from(base_s, write_term);
    let paged = fresh_rate > 0.0 && !costs.pages_s.is_empty();
    if !paged && upkeep(stale) <= 0.0 {
        return stale;
    }
    let spared_s = |fresh_share: f64| -> f64 {
        costs
            .pages_s
            .iter()
            .map(|(weight_s, curve)| weight_s * curve.rows(fresh_share))
            .sum()
    };
    // The page reads are part of `base_s`; an operation keeps its other costs (every
    // workload with fresh rows has updates, each costing more than 0).
    let fresh = if paged {
        throughput_from((base_s - spared_s(1.0)).max(f64::MIN_POSITIVE), write_term)
    } else {
        stale
    };
    let excess = |t: f64| {
        (1.0 - upkeep(t)) / t - base_s + spared_s(-(-fresh_rate * t).exp_m1()) - write_term * t
    };
    // The upkeep only lowers the throughput: below `stale` the root may lie, down to 0
    // (where the left side grows without bound: the upkeep stays below 1).
    let (mut low, mut high) = (if upkeep(stale) > 0.0 { 0.0 } else { stale }, fresh);
    // 64 halvings take any bracket below f64's resolution.
    for _ in 0..64 {
        let middle = 0.5 * (low + high);
        if middle <= low || middle >= high {
            break;
        }
        if excess(middle) > 0.0 {
            low = middle;
        } else {
            high = middle;
        }
    }
    0.5 * (low + high)
}

/// What equation 3 needs of a workload in a configuration (see the module docs).
#[derive(Debug, Clone)]
struct OperationCosts {
    /// `A`: the mean seconds of an operation without the writes its searches see.
    base_s: f64,
    /// The page reads of the searches cut by their page: each search's share of the
    /// operations times `β` (seconds per row), and its page reads.
    pages_s: Vec<(f64, Arc<PageCurve>)>,
    /// `B`'s factor of `λ`: `u Σ_i p_i e_i`.
    exposure: f64,
    /// `B`'s factor of `κ`: `u Σ_i p_i`.
    searches_amid_updates: f64,
    /// `u`: the updates' share of the operations.
    update_share: f64,
}

fn cost_and_exposure_unchecked(
    configuration: &Configuration,
    profile: &WorkloadProfile,
    calibration: &Calibration,
    total_frequency: f64,
    route_costs: &mut RouteCosts,
) -> OperationCosts {
    let mut search_cost = 0.0;
    let mut pages_s = Vec::new();
    let mut exposure = 0.0;
    for (i, search) in profile.searches.iter().enumerate() {
        let route = route_search_unchecked(configuration, &search.shape);
        let key = (
            i,
            routed_subspace(configuration, &route).cloned(),
            route.regions_contacted,
            route.grid_regions,
        );
        let cost = route_costs.entry(key).or_insert_with(|| {
            route_cost_and_exposure(
                configuration,
                &route,
                &search.shape,
                search.rows.as_ref(),
                calibration,
            )
        });
        search_cost += search.frequency * cost.cost_s;
        exposure += search.frequency * cost.exposure;
        if !cost.pages.is_empty() {
            let weight_s = search.frequency / total_frequency * calibration.beta_s_per_object;
            pages_s.push((weight_s, Arc::clone(&cost.pages)));
        }
    }
    let update_cost: f64 = profile
        .updates
        .iter()
        .map(|update| {
            update.frequency * update_cost_unchecked(configuration, &update.attributes, calibration)
        })
        .sum();
    let update_share: f64 =
        profile.updates.iter().map(|u| u.frequency).sum::<f64>() / total_frequency;
    let search_share: f64 =
        profile.searches.iter().map(|s| s.frequency).sum::<f64>() / total_frequency;
    OperationCosts {
        base_s: (search_cost + update_cost) / total_frequency,
        pages_s,
        exposure: update_share * exposure / total_frequency,
        searches_amid_updates: update_share * search_share,
        update_share,
    }
}

/// `B / λ` of the module docs for `profile` in `configuration`, on a table of `objects`:
/// `u Σ_i p_i e_i`, the rows written per second into the regions its searches ask, per
/// operation per second of the workload (0 without searches or without updates).
pub fn write_exposure(
    configuration: &Configuration,
    profile: &WorkloadProfile,
    objects: u64,
) -> Result<f64, ConfigError> {
    let total = profile.check()?;
    if objects == 0 {
        return Err(config_error("objects", "0 objects: nothing to model"));
    }
    let mut exposure = 0.0;
    for search in &profile.searches {
        let route = route_search_unchecked(configuration, &search.shape);
        let reads = search_reads(
            configuration,
            &route,
            &search.shape,
            search.rows.as_ref(),
            objects,
        );
        exposure += search.frequency * reads.exposure;
    }
    let update_share: f64 = profile.updates.iter().map(|u| u.frequency).sum::<f64>() / total;
    Ok(update_share * exposure / total)
}

/// A configuration and its predicted throughput.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedConfiguration {
    /// The configuration.
    pub configuration: Configuration,
    /// Its predicted operations per second.
    pub predicted_throughput_ops_per_s: f64,
}

/// `candidates` with their predicted throughput, best first; equal predictions put the
/// configuration with fewer subspaces (less storage, shorter chains) first, then the one
/// that sorts first. Duplicated candidates are listed once.
pub fn rank_configurations(
    candidates: &[Configuration],
    profile: &WorkloadProfile,
    calibration: &Calibration,
) -> Result<Vec<RankedConfiguration>, ConfigError> {
    calibration.check()?;
    let total = profile.check()?;
    let mut unique: Vec<&Configuration> = candidates.iter().collect();
    unique.sort();
    unique.dedup();
    let mut route_costs = RouteCosts::new();
    let mut ranked: Vec<RankedConfiguration> = unique
        .into_iter()
        .map(|configuration| RankedConfiguration {
            configuration: configuration.clone(),
            predicted_throughput_ops_per_s: throughput_unchecked(
                configuration,
                profile,
                calibration,
                total,
                &mut route_costs,
            ),
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.predicted_throughput_ops_per_s
            .total_cmp(&a.predicted_throughput_ops_per_s)
            .then(
                a.configuration
                    .subspaces()
                    .len()
                    .cmp(&b.configuration.subspaces().len()),
            )
            .then(a.configuration.cmp(&b.configuration))
    });
    Ok(ranked)
}

/// One calibration run of updates alone (§4.3): the configuration's shape as the update
/// sees it, and the throughput measured.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRun {
    /// `K`, copies per subspace (1..=16).
    pub replicas: u32,
    /// `|N|`, subspaces the update leaves in place.
    pub untouched_subspaces: u32,
    /// `|M|`, subspaces holding an attribute the update changes.
    pub modified_subspaces: u32,
    /// Of the copies in the `|M|` subspaces, the share the update moves to another
    /// region on average (in `[0, 1]`; the mean of their [`move_probability`], 1 in the
    /// paper); the others are overwritten in place, as the `|N|` are.
    pub move_share: f64,
    /// The tables the updates write into, each as its written regions' shares of the
    /// copies ([`tables_written`]).
    pub tables_written: Vec<Vec<f64>>,
    /// `T_real`, operations per second measured (> 0).
    pub measured_throughput_ops_per_s: f64,
}

/// An update's two costs, from [`update_costs_from_runs`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateCosts {
    /// `f`, seconds an update costs whatever its copies (>= 0).
    pub fixed_cost_s: f64,
    /// `T_max`, copies written per second (> 0): a copy costs `1 / T_max` seconds.
    pub max_throughput_ops_per_s: f64,
}

impl UpdateCosts {
    /// The paper's calibration (§4.3): `T_max` twice the updates per second measured on
    /// the key subspace alone (a fetch and one write), `f` one hop, `1 / T_max`.
    pub fn paper(key_only_ops_per_s: f64) -> UpdateCosts {
        let max_throughput_ops_per_s = key_only_ops_per_s * 2.0;
        UpdateCosts {
            fixed_cost_s: 1.0 / max_throughput_ops_per_s,
            max_throughput_ops_per_s,
        }
    }
}

/// The regions' upkeep: `ρ` ([`Calibration::region_upkeep_s_per_s`]) and `w_½`
/// ([`Calibration::upkeep_half_rate_per_s`]), as a fit is given them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Upkeep {
    /// `ρ`, seconds a second (>= 0).
    pub region_s_per_s: f64,
    /// `w_½`, copies a second into a region (>= 0).
    pub half_rate_per_s: f64,
}

/// `f` and `T_max` from calibration runs of updates that move no copy (`|M| = 0`; the
/// others are `α`'s, [`alpha_from_update_runs`]), the regions' upkeep given: each gives
/// `(1 − upkeep) / T_real = f + K(1 + |N|) / T_max` (`upkeep` the share of a second
/// [`upkeep_share`] gives at `T_real`), linear in `f` and `1 / T_max`. They
/// are its least-squares solution in relative terms (each run's residual divided by its
/// cost), with `f` at 0 if it would fall below. Runs of at least two chain lengths are
/// needed; runs whose throughput does not fall as copies are added say nothing about a
/// copy's cost and are refused, as is an upkeep that leaves a run no time.
pub fn update_costs_from_runs(
    runs: &[UpdateRun],
    upkeep: Upkeep,
) -> Result<UpdateCosts, ConfigError> {
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    let mut chains = Vec::new();
    for run in runs.iter().filter(|run| run.modified_subspaces == 0) {
        check_update_run(run)?;
        let chain = u64::from(run.replicas) * (1 + u64::from(run.untouched_subspaces));
        // (1 − upkeep) / T_real = f + chain / T_max, times T_real: relative residuals.
        let measured = run.measured_throughput_ops_per_s;
        rows.push([measured, chain as f64 * measured]);
        targets.push(capacity_left(&run.tables_written, measured, upkeep)?);
        chains.push(chain);
    }
    chains.sort_unstable();
    chains.dedup();
    if chains.len() < 2 {
        return Err(config_error(
            "update_runs",
            format!(
                "{} chain length(s) among the runs that move no copy: at least 2 are needed \
                 to tell an update's fixed cost from a copy's",
                chains.len()
            ),
        ));
    }
    let [fixed_cost_s, copy_cost_s] = match least_squares(&rows, &targets, [true, true]) {
        Some([fixed, copy]) if fixed >= 0.0 => [fixed, copy],
        _ => least_squares(&rows, &targets, [false, true]).unwrap_or([0.0, 0.0]),
    };
    if !(copy_cost_s.is_finite() && copy_cost_s > 0.0 && fixed_cost_s.is_finite()) {
        return Err(config_error(
            "update_runs",
            format!(
                "the runs give {copy_cost_s} s a copy: throughput does not fall as copies \
                 are added, so they say nothing about T_max"
            ),
        ));
    }
    Ok(UpdateCosts {
        fixed_cost_s,
        max_throughput_ops_per_s: 1.0 / copy_cost_s,
    })
}

/// `α` from calibration runs (equation 5, as the exact inverse of equation 4).
///
/// Each run gives `(1 − ρ R) T_max / T_real − f · T_max − K(1 + |N| + |M|(1 − m)) =
/// 2K|M|m · α`, `m` its move share and `ρ R` its regions' upkeep (`f · T_max` and `m`
/// are 1 in the paper, `ρ` 0); `α` is the
/// least-squares solution of those equations (a single run with `|M| >= 1` gives
/// equation 4 inverted). At least one run must move a subspace
/// (`|M| >= 1`); an `α` below 0 means the runs were faster than any chain allows, and
/// is reported rather than used.
pub fn alpha_from_update_runs(
    runs: &[UpdateRun],
    max_throughput_ops_per_s: f64,
    update_fixed_cost_s: f64,
    upkeep: Upkeep,
) -> Result<f64, ConfigError> {
    if !(max_throughput_ops_per_s.is_finite() && max_throughput_ops_per_s > 0.0) {
        return Err(config_error(
            "max_throughput_ops_per_s",
            format!("{max_throughput_ops_per_s} is not a finite positive number"),
        ));
    }
    if !(update_fixed_cost_s.is_finite() && update_fixed_cost_s >= 0.0) {
        return Err(config_error(
            "update_fixed_cost_s",
            format!("{update_fixed_cost_s} is not a finite non-negative number"),
        ));
    }
    let mut weighted_sum = 0.0;
    let mut weight_square_sum = 0.0;
    for run in runs {
        check_update_run(run)?;
        let replicas = f64::from(run.replicas);
        let modified = f64::from(run.modified_subspaces);
        let capacity = capacity_left(
            &run.tables_written,
            run.measured_throughput_ops_per_s,
            upkeep,
        )?;
        let excess = capacity * max_throughput_ops_per_s / run.measured_throughput_ops_per_s
            - update_fixed_cost_s * max_throughput_ops_per_s
            - replicas
                * (1.0 + f64::from(run.untouched_subspaces) + modified * (1.0 - run.move_share));
        let weight = 2.0 * replicas * modified * run.move_share;
        weighted_sum += weight * excess;
        weight_square_sum += weight * weight;
    }
    if weight_square_sum == 0.0 {
        return Err(config_error(
            "update_runs",
            "no run moves a copy (|M| >= 1 and a move share above 0), so they say nothing \
             about alpha",
        ));
    }
    let alpha = weighted_sum / weight_square_sum;
    if !(alpha.is_finite() && alpha >= 0.0) {
        return Err(config_error(
            "update_runs",
            format!("the runs give alpha = {alpha}: faster than equation 4 allows for any alpha"),
        ));
    }
    Ok(alpha)
}

/// One calibration run of searches (§4.3), alone or amid updates: what each search
/// asked, read and was sent, the updates' part, and the throughput measured. Its
/// operations are searches and updates only: `1 − p` of them are updates.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRun {
    /// `p`, the searches' share of the run's operations (in `(0, 1]`).
    pub search_share: f64,
    /// Regions one search asks (>= 0).
    pub regions_asked: f64,
    /// Conditions one search sets ([`conditions_of`]; >= 0).
    pub conditions: f64,
    /// Objects one search reads (>= 0), as the model charges them ([`objects_read`]):
    /// `β` then also holds what the shards read beyond that on average.
    pub objects_read: f64,
    /// Rows the regions send back for one search ([`rows_returned`]; >= 0).
    pub rows_sent: f64,
    /// The search's [`SearchReads::pages`]: of `objects_read`, what log tables and sorted
    /// batches spare it amid updates (empty when no page cuts it).
    pub page_reads: Vec<PageRead>,
    /// Seconds per operation the run's updates cost, `(1 − p)` times an update's
    /// cost by equation 4 (>= 0; 0 for searches alone).
    pub update_s_per_op: f64,
    /// [`write_exposure`] of the run's workload (>= 0; 0 for searches alone).
    pub write_exposure: f64,
    /// The tables the run's updates write into, each as its written regions' shares of
    /// the copies ([`tables_written`]; not counted for searches alone).
    pub tables_written: Vec<Vec<f64>>,
    /// `T_real`, operations per second measured (> 0).
    pub measured_throughput_ops_per_s: f64,
}

/// A search's costs and the written regions' upkeep, from [`search_costs_from_runs`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchCosts {
    /// `c_region`, seconds per region asked (>= 0).
    pub region_cost_s: f64,
    /// `c_fan`, seconds per region asked beyond the first (>= 0).
    pub fan_out_cost_s: f64,
    /// `c_cond`, seconds per condition per region asked (>= 0).
    pub condition_cost_s: f64,
    /// `β`, seconds per object read (> 0).
    pub beta_s_per_object: f64,
    /// `γ`, seconds per row sent back (>= 0).
    pub sent_row_cost_s: f64,
    /// `λ`, seconds per row per second written into the regions asked (>= 0).
    pub write_rate_cost_s2: f64,
    /// `κ`, seconds per update per second written through the asking node (>= 0).
    pub catch_up_cost_s2: f64,
    /// `τ`, seconds a written row is read at no cost of `β` (>= 0).
    pub fresh_window_s: f64,
    /// `ρ`, seconds a second a region written without pause costs (>= 0).
    pub region_upkeep_s_per_s: f64,
    /// `w½`, copies a second into a region at which its upkeep is half of `ρ` (>= 0).
    pub upkeep_half_rate_per_s: f64,
}

/// `τ` values the fit tries: every quarter second up to a minute. A row stays in log
/// tables and sorted batches a few seconds; a minute leaves room for what the runs say.
const FRESH_WINDOW_STEPS: u32 = 240;
const FRESH_WINDOW_STEP_S: f64 = 0.25;

/// `c_region`, `c_fan`, `c_cond`, `β`, `γ`, `λ`, `κ`, `ρ` and `τ` from calibration runs
/// of searches on a table of `objects` (equations 2 and 3 inverted): each run gives `1 /
/// T_real = p (regions · c_region + (regions − 1) · c_fan + regions · conditions ·
/// c_cond + (read − F(m)) · β + sent · γ) + updates + λ · x · T_real + κ · p (1 − p) ·
/// T_real + ρ · R / T_real`, with `x` its [`write_exposure`], `R` the regions its
/// updates write, `F(m)` the page rows found outside
/// segments ([`PageRead`]) when a share `m = 1 − e^(−(1 − p) T_real τ / O)` of the
/// table is fresh; with the measured `T_real` on the right and `τ` given, that is
/// linear in the costs. They are the
/// least-squares solution of those equations in relative terms (each run's residual
/// divided by its cost, so a slow run does not outweigh the fast ones: the model's
/// error is judged relative), none below 0: among the fits with `β` and any of the seven
/// others left free (the rest 0), at every `τ` of a grid (0 to a minute by quarter
/// seconds), the one with the smallest residual whose costs are all non-negative.
/// Runs that leave `β` at 0 or below say nothing about it and are refused.
pub fn search_costs_from_runs(
    runs: &[SearchRun],
    objects: u64,
) -> Result<SearchCosts, ConfigError> {
    if objects == 0 {
        return Err(config_error("objects", "0 objects: nothing to model"));
    }
    if runs.is_empty() {
        return Err(config_error(
            "search_runs",
            "no run: nothing to estimate beta from",
        ));
    }
    // Each run as a row ([`run_row`]) against 1 − updates · T.
    let mut targets = Vec::with_capacity(runs.len());
    for run in runs {
        if !(run.search_share > 0.0 && run.search_share <= 1.0) {
            return Err(config_error(
                "search_runs",
                format!("search share {} is not in (0, 1]", run.search_share),
            ));
        }
        for (name, value) in [
            ("regions asked", run.regions_asked),
            ("conditions", run.conditions),
            ("objects read", run.objects_read),
            ("rows sent", run.rows_sent),
            ("update cost", run.update_s_per_op),
            ("write exposure", run.write_exposure),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(config_error(
                    "search_runs",
                    format!("{name} {value} is not a finite non-negative number"),
                ));
            }
        }
        for page in &run.page_reads {
            let share = page.paged_share;
            if !(share > 0.0 && share <= 1.0 && page.candidate_rows.is_finite())
                || page.candidate_rows < 0.0
            {
                return Err(config_error(
                    "search_runs",
                    format!(
                        "page read of {} rows at share {share} is not a share in (0, 1] \
                         of a finite non-negative number of rows",
                        page.candidate_rows
                    ),
                ));
            }
        }
        let measured = check_measured("search_runs", run.measured_throughput_ops_per_s)?;
        targets.push(1.0 - run.update_s_per_op * measured);
    }
    // Which costs are fitted (β, column BETA, always): every subset of the others at
    // every τ and every w½, the best feasible one kept (the smallest τ and w½ of equal
    // residuals).
    let optional = COSTS - 1;
    let mut best: Option<([f64; COSTS], f64, f64, f64)> = None;
    for step in 0..=FRESH_WINDOW_STEPS {
        let window_s = f64::from(step) * FRESH_WINDOW_STEP_S;
        for (h, &half_rate_per_s) in UPKEEP_HALF_RATES_PER_S.iter().enumerate() {
            let rows: Vec<[f64; COSTS]> = runs
                .iter()
                .map(|run| run_row(run, objects, window_s, half_rate_per_s))
                .collect();
            for subset in 0..1u32 << optional {
                let mut free = [true; COSTS];
                for (bit, column) in (0..COSTS).filter(|&c| c != BETA).enumerate() {
                    free[column] = subset & (1 << bit) != 0;
                }
                // Without ρ, w½ changes nothing: tried once.
                if !free[UPKEEP] && h > 0 {
                    continue;
                }
                let Some(costs) = least_squares(&rows, &targets, free) else {
                    continue;
                };
                if costs.iter().any(|c| !c.is_finite() || *c < 0.0) || costs[BETA] <= 0.0 {
                    continue;
                }
                let residual: f64 = rows
                    .iter()
                    .zip(&targets)
                    .map(|(row, target)| {
                        let fitted: f64 = row.iter().zip(&costs).map(|(x, c)| x * c).sum();
                        (fitted - target).powi(2)
                    })
                    .sum();
                if best.is_none_or(|(_, r, _, _)| residual < r) {
                    let half = if free[UPKEEP] { half_rate_per_s } else { 0.0 };
                    best = Some((costs, residual, window_s, half));
                }
            }
        }
    }
    let Some((
        [region_cost_s, fan_out_cost_s, condition_cost_s, beta_s_per_object, sent_row_cost_s, write_rate_cost_s2, catch_up_cost_s2, region_upkeep_s_per_s],
        _,
        fresh_window_s,
        upkeep_half_rate_per_s,
    )) = best
    else {
        return Err(config_error(
            "search_runs",
            "the runs give no positive beta: they say nothing about the cost of a row read",
        ));
    };
    Ok(SearchCosts {
        region_cost_s,
        fan_out_cost_s,
        condition_cost_s,
        beta_s_per_object,
        sent_row_cost_s,
        write_rate_cost_s2,
        catch_up_cost_s2,
        fresh_window_s,
        region_upkeep_s_per_s,
        upkeep_half_rate_per_s,
    })
}

/// `w½` values the fit tries, copies a second into a region: 0 (a region costs `ρ`
/// whatever its copies) and doublings from 25 to 6,400 (a region of the calibration's
/// update runs takes 1,500 to 15,000 copies a second, of its searches amid updates 5
/// to 6,000).
const UPKEEP_HALF_RATES_PER_S: [f64; 10] = [
    0.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 6400.0,
];

/// A search run as a row of the fit, one column per cost (`p · regions · T`, `p ·
/// (regions − 1) · T`, `p · regions · conditions · T`, `p · (read − F(m)) · T`, `p ·
/// sent · T`, `x · T²`, `p (1 − p) · T²`, busy regions), at `τ` = `window_s` and `w½` =
/// `half_rate_per_s`: its dot product with the costs plus the updates' `update · T` is
/// the model's time per operation times `T`.
fn run_row(run: &SearchRun, objects: u64, window_s: f64, half_rate_per_s: f64) -> [f64; COSTS] {
    let measured = run.measured_throughput_ops_per_s;
    let p = run.search_share;
    let searches = p * measured;
    let updates_per_s = (1.0 - p) * measured;
    let fresh_share = -(-updates_per_s / objects.max(1) as f64 * window_s).exp_m1();
    let read = run.objects_read - fresh_page_rows(&run.page_reads, fresh_share);
    [
        run.regions_asked * searches,
        (run.regions_asked - 1.0).max(0.0) * searches,
        run.regions_asked * run.conditions * searches,
        read * searches,
        run.rows_sent * searches,
        run.write_exposure * measured * measured,
        p * (1.0 - p) * measured * measured,
        busy_regions(&run.tables_written, updates_per_s, half_rate_per_s),
    ]
}

/// The regions of `tables` that `updates_per_s` updates keep busy at `w½` =
/// `half_rate_per_s`: `Σ w / (w + w½)` over the written regions, `w = share ·
/// updates_per_s` (0 without updates).
fn busy_regions(tables: &[Vec<f64>], updates_per_s: f64, half_rate_per_s: f64) -> f64 {
    if updates_per_s <= 0.0 {
        return 0.0;
    }
    tables
        .iter()
        .flatten()
        .map(|&share| {
            let copies_per_s = share * updates_per_s;
            copies_per_s / (copies_per_s + half_rate_per_s)
        })
        .sum()
}

/// How far fitted `costs` miss a calibration `run`: the model's seconds per operation of
/// the run (its searches' share of equation 2 at the measured `T_real`, with the fresh
/// share that throughput writes, plus the run's updates) times `T_real`, plus the
/// written regions' upkeep. 1 is a perfect
/// fit; above 1 the model has the run slower than measured, by about that factor.
pub fn search_run_time_ratio(run: &SearchRun, costs: &SearchCosts, objects: u64) -> f64 {
    let row = run_row(
        run,
        objects,
        costs.fresh_window_s,
        costs.upkeep_half_rate_per_s,
    );
    let fitted = [
        costs.region_cost_s,
        costs.fan_out_cost_s,
        costs.condition_cost_s,
        costs.beta_s_per_object,
        costs.sent_row_cost_s,
        costs.write_rate_cost_s2,
        costs.catch_up_cost_s2,
        costs.region_upkeep_s_per_s,
    ];
    row.iter().zip(fitted).map(|(x, c)| x * c).sum::<f64>()
        + run.update_s_per_op * run.measured_throughput_ops_per_s
}

/// Costs a search run is charged (columns of a calibration run's row): a search's
/// six, `λ`, `κ` and `ρ`.
const COSTS: usize = 8;
/// The column of `β`, always fitted.
const BETA: usize = 3;
/// The column of `ρ`.
const UPKEEP: usize = 7;

/// The least-squares costs of `rows · costs = targets` over the columns `free` says
/// (the others 0), by the normal equations; `None` when they are singular.
fn least_squares<const N: usize>(
    rows: &[[f64; N]],
    targets: &[f64],
    free: [bool; N],
) -> Option<[f64; N]> {
    let columns: Vec<usize> = (0..N).filter(|&c| free[c]).collect();
    let n = columns.len();
    // The augmented normal equations [AᵀA | Aᵀb], solved by Gaussian elimination.
    let mut m = vec![vec![0.0; n + 1]; n];
    for (row, target) in rows.iter().zip(targets) {
        for (i, &ci) in columns.iter().enumerate() {
            for (j, &cj) in columns.iter().enumerate() {
                m[i][j] += row[ci] * row[cj];
            }
            m[i][n] += row[ci] * target;
        }
    }
    let scale: f64 = (0..n).map(|i| m[i][i]).fold(0.0, f64::max);
    for pivot in 0..n {
        let best = (pivot..n).max_by(|&a, &b| m[a][pivot].abs().total_cmp(&m[b][pivot].abs()))?;
        if m[best][pivot].abs() <= 1e-12 * scale {
            return None;
        }
        m.swap(pivot, best);
        let (done, below) = m.split_at_mut(pivot + 1);
        let pivot_row = &done[pivot];
        for row in below {
            let factor = row[pivot] / pivot_row[pivot];
            for (value, above) in row.iter_mut().zip(pivot_row).skip(pivot) {
                *value -= factor * above;
            }
        }
    }
    let mut solution = vec![0.0; n];
    for i in (0..n).rev() {
        let known: f64 = (i + 1..n).map(|j| m[i][j] * solution[j]).sum();
        solution[i] = (m[i][n] - known) / m[i][i];
    }
    let mut costs = [0.0; N];
    for (value, &column) in solution.iter().zip(&columns) {
        costs[column] = *value;
    }
    Some(costs)
}

fn check_update_run(run: &UpdateRun) -> Result<(), ConfigError> {
    if !(1..=MAX_REPLICAS).contains(&run.replicas) {
        return Err(config_error(
            "update_runs",
            format!("{} copies is not in 1..={MAX_REPLICAS}", run.replicas),
        ));
    }
    let subspaces = u64::from(run.untouched_subspaces) + u64::from(run.modified_subspaces);
    if subspaces > MAX_SUBSPACES as u64 {
        return Err(config_error(
            "update_runs",
            format!("{subspaces} subspaces is more than {MAX_SUBSPACES}"),
        ));
    }
    if !(0.0..=1.0).contains(&run.move_share) {
        return Err(config_error(
            "update_runs",
            format!("move share {} is not in [0, 1]", run.move_share),
        ));
    }
    check_measured("update_runs", run.measured_throughput_ops_per_s).map(|_| ())
}

/// The share of a second left for its operations to a run of `updates_per_s` updates a
/// second into `tables` ([`tables_written`]) with `upkeep`, refused unless the upkeep's
/// parameters are non-negative numbers and leave some.
fn capacity_left(
    tables: &[Vec<f64>],
    updates_per_s: f64,
    upkeep: Upkeep,
) -> Result<f64, ConfigError> {
    for (setting, value) in [
        ("region_upkeep_s_per_s", upkeep.region_s_per_s),
        ("upkeep_half_rate_per_s", upkeep.half_rate_per_s),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(config_error(
                setting,
                format!("{value} is not a finite non-negative number"),
            ));
        }
    }
    let share = upkeep_share(
        tables,
        updates_per_s,
        upkeep.region_s_per_s,
        upkeep.half_rate_per_s,
    );
    if share >= 1.0 - 2.0 * MIN_CAPACITY {
        return Err(config_error(
            "region_upkeep_s_per_s",
            format!(
                "{} s/s a region written ({} copies a second at half of it) takes a run's \
                 whole second at {updates_per_s} updates a second into {} regions",
                upkeep.region_s_per_s,
                upkeep.half_rate_per_s,
                tables.iter().map(Vec::len).sum::<usize>()
            ),
        ));
    }
    Ok(1.0 - share)
}

/// A calibration run's measured throughput, refused unless finite and positive.
fn check_measured(setting: &'static str, measured: f64) -> Result<f64, ConfigError> {
    if !(measured.is_finite() && measured > 0.0) {
        return Err(config_error(
            setting,
            format!("measured throughput {measured} is not a finite positive number"),
        ));
    }
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyperspace::{AttributeId, Subspace};
    use proptest::prelude::*;

    fn calibration() -> Calibration {
        Calibration {
            beta_s_per_object: 1e-6,
            region_cost_s: 0.0,
            fan_out_cost_s: 0.0,
            condition_cost_s: 0.0,
            sent_row_cost_s: 0.0,
            write_rate_cost_s2: 0.0,
            catch_up_cost_s2: 0.0,
            fresh_window_s: 0.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            alpha: 2.3,
            max_throughput_ops_per_s: 100_000.0,
            update_fixed_cost_s: 1.0 / 100_000.0,
            objects: 140_000,
        }
    }

    /// A table of `regions` regions written evenly.
    fn evenly(regions: usize) -> Vec<f64> {
        vec![1.0 / regions as f64; regions]
    }

    fn set(attributes: &[AttributeId]) -> AttributeSet {
        attributes.iter().copied().collect()
    }

    #[test]
    fn figure_three_chain_lengths() {
        // Fig. 3: two subspaces besides the key, K = 3; <city, stars> and <price>, say.
        let configuration = Configuration::new(
            [
                Subspace::new([0, 1], 16).unwrap(),
                Subspace::new([2], 16).unwrap(),
            ],
            16,
            3,
        )
        .unwrap();
        // U = <tel>: (1 + |S|) K = 9 servers.
        assert_eq!(update_chain_length(&configuration, &set(&[7]), 1.0), 9.0);
        // U = <stars, tel>: stars changes in <city, stars>, cut into 4 × 4 regions, so
        // the object moves there 3 times in 4 (the paper's figure moves it always: 3
        // (1 + 1 + 2) = 12): 3 (1 + 1 + 1/4 + 2 · 3/4) = 11.25.
        assert_eq!(
            update_chain_length(&configuration, &set(&[1, 7]), 1.0),
            11.25
        );
        // With α = 2.3: 3 (1 + 1 + 1/4 + 4.6 · 3/4).
        let length = update_chain_length(&configuration, &set(&[1, 7]), 2.3);
        assert!((length - 17.1).abs() < 1e-12);
        // <price> in 16 parts: a new price moves the object 15 times in 16; in one
        // region (R = 1), never: the copy is overwritten in place, as for <tel>.
        assert_eq!(
            move_probability(&configuration.subspaces()[1], &set(&[2])),
            15.0 / 16.0
        );
        let one_region = Configuration::new([Subspace::new([0, 1, 2], 1).unwrap()], 16, 3).unwrap();
        assert_eq!(
            move_probability(&one_region.subspaces()[0], &set(&[1, 2])),
            0.0
        );
        assert_eq!(update_chain_length(&one_region, &set(&[1, 7]), 2.3), 6.0);
        // Two changed attributes of one subspace: stays only if both stay, 1 − 1/16.
        assert_eq!(
            move_probability(&configuration.subspaces()[0], &set(&[0, 1])),
            15.0 / 16.0
        );
    }

    /// The oracle: the store's own grid (each ordered dimension cut at the quantiles of
    /// `2p` evenly spread values, `p` its parts), every old and new value of the changed
    /// attributes enumerated, the share of pairs whose region differs. It equals
    /// `move_probability` exactly for every subspace size, region count and set of
    /// changed attributes tried, evenly cut grids and uneven ones (16 over 3 and 5).
    #[test]
    fn move_probability_is_the_grids_share_of_region_changes() {
        use crate::hyperspace::grid::{quantile_cuts, Coordinate, Dimension, Grid};
        for regions in [1, 4, 12, 16] {
            for dimensions in 1..=5u16 {
                let attributes: Vec<AttributeId> = (0..dimensions).collect();
                let subspace = Subspace::new(attributes.clone(), regions).unwrap();
                let parts = crate::hyperspace::dimension_parts(regions, attributes.len());
                // Two values a part: each part holds as many, as a quantile cut makes.
                let values: Vec<u32> = parts.iter().map(|p| 2 * p).collect();
                let grid = Grid {
                    dimensions: parts
                        .iter()
                        .zip(&values)
                        .map(|(&parts, &values)| {
                            let mut sample: Vec<f64> = (0..values).map(f64::from).collect();
                            Dimension::Ordered {
                                cuts: quantile_cuts(&mut sample, parts),
                            }
                        })
                        .collect(),
                };
                // Every nonempty set of changed attributes, plus one the subspace lacks.
                for mask in 1..(1u32 << dimensions) {
                    let changed: Vec<usize> = (0..usize::from(dimensions))
                        .filter(|d| mask & (1 << d) != 0)
                        .collect();
                    let pairs: u32 = changed.iter().map(|&d| values[d] * values[d]).product();
                    let mut moved = 0u32;
                    for pair in 0..pairs {
                        // Unchanged dimensions hold value 0; changed dimension i takes
                        // its old and new values from the pair's digits.
                        let mut old = vec![0.0; attributes.len()];
                        let mut new = old.clone();
                        let mut digits = pair;
                        for &d in &changed {
                            old[d] = f64::from(digits % values[d]);
                            digits /= values[d];
                            new[d] = f64::from(digits % values[d]);
                            digits /= values[d];
                        }
                        let region = |values: &[f64]| {
                            let coordinates: Vec<Coordinate<'_>> =
                                values.iter().map(|v| Coordinate::Number(*v)).collect();
                            grid.region_of(&coordinates)
                        };
                        if region(&old) != region(&new) {
                            moved += 1;
                        }
                    }
                    let mut updated: Vec<AttributeId> =
                        changed.iter().map(|&d| attributes[d]).collect();
                    updated.push(99);
                    let predicted = move_probability(&subspace, &set(&updated));
                    let brute = f64::from(moved) / f64::from(pairs);
                    assert!(
                        (predicted - brute).abs() < 1e-12,
                        "R {regions}, {dimensions} dimensions, changed {changed:?}: \
                         {predicted} against {brute}"
                    );
                }
                assert_eq!(move_probability(&subspace, &set(&[99])), 0.0);
            }
        }
    }

    /// R = 16 everywhere, K = 2, O = 1600, β = 1 ms, T_max = 1000, α = 2, the other
    /// costs 0; subspaces <0, 1> and <2>.
    fn small_instance() -> (Calibration, Configuration) {
        let calibration = Calibration {
            beta_s_per_object: 1e-3,
            region_cost_s: 0.0,
            fan_out_cost_s: 0.0,
            condition_cost_s: 0.0,
            sent_row_cost_s: 0.0,
            write_rate_cost_s2: 0.0,
            catch_up_cost_s2: 0.0,
            fresh_window_s: 0.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            alpha: 2.0,
            max_throughput_ops_per_s: 1000.0,
            update_fixed_cost_s: 1.0 / 1000.0,
            objects: 1600,
        };
        let configuration = Configuration::new(
            [
                Subspace::new([0, 1], 16).unwrap(),
                Subspace::new([2], 16).unwrap(),
            ],
            16,
            2,
        )
        .unwrap();
        (calibration, configuration)
    }

    /// The small instance's profile with writes: searches of <0> (asking 4 of 16
    /// regions, a quarter of the table) and of <3> (every key region, all of it), 2 to
    /// 1, and updates of <2>, a quarter of the operations; its `A` and `u Σ p_i e_i`.
    fn writing_profile() -> (WorkloadProfile, f64, f64) {
        let search = |attribute, frequency| SearchFrequency {
            shape: SearchShape::equalities([attribute]),
            frequency,
            rows: None,
        };
        let profile = WorkloadProfile {
            searches: vec![search(0, 2.0), search(3, 1.0)],
            updates: vec![UpdateFrequency {
                attributes: set(&[2]),
                frequency: 1.0,
            }],
            value_spreads: Default::default(),
        };
        let base = 0.5 * 0.4 + 0.25 * 1.6 + 0.25 * 0.012625;
        let exposure = 0.25 * (0.5 * 0.25 + 0.25 * 1.0);
        (profile, base, exposure)
    }

    /// The oracle of `1/T = base + slope · T`: bisection (the left side falls with `T`).
    fn bisected_throughput(base: f64, slope: f64) -> f64 {
        let (mut low, mut high) = (0.0_f64, 1.0 / base);
        for _ in 0..200 {
            let t = (low + high) / 2.0;
            if 1.0 / t > base + slope * t {
                low = t;
            } else {
                high = t;
            }
        }
        low
    }

    /// A subspace of a city (five values, skewed, some records without one) and a
    /// pool (a tenth with one) cut 4 × 4: the regions [`tables_written`] has written,
    /// and their shares, are those the grid places the records in (the oracle: every
    /// record placed by [`Grid::region_of`](crate::hyperspace::grid::Grid::region_of)).
    #[test]
    fn written_regions_are_where_the_grid_places_records() {
        use crate::hyperspace::grid::{Coordinate, Dimension, Grid};
        use crate::spread::fnv1a64;
        let cities: [(Option<&str>, usize); 6] = [
            (Some("dublin"), 40),
            (Some("edinburgh"), 25),
            (Some("boston"), 15),
            (Some("hongkong"), 12),
            (Some("antwerp"), 6),
            (None, 2),
        ];
        let pools: [(&[u8], usize); 2] = [(&[0], 9), (&[1], 1)];
        let records: usize = 100 * 10;
        let grid = Grid {
            dimensions: vec![
                Dimension::Hashed { parts: 4 },
                Dimension::Hashed { parts: 4 },
            ],
        };
        let mut placed = [0usize; 16];
        for (city, city_count) in cities {
            for (pool, pool_count) in pools {
                let coordinates = [
                    city.map_or(Coordinate::Missing, |c| Coordinate::Bytes(c.as_bytes())),
                    Coordinate::Bytes(pool),
                ];
                placed[grid.region_of(&coordinates) as usize] += city_count * pool_count;
            }
        }
        let expected: Vec<f64> = placed
            .iter()
            .filter(|&&count| count > 0)
            .map(|&count| count as f64 / records as f64)
            .collect();
        let spreads = BTreeMap::from([
            (
                0,
                ValueSpread {
                    hashed_shares: cities
                        .iter()
                        .map(|(city, count)| {
                            (city.map(|c| fnv1a64(c.as_bytes())), *count as f64 / 100.0)
                        })
                        .collect(),
                    other_values: 0,
                },
            ),
            (
                1,
                ValueSpread {
                    hashed_shares: pools
                        .iter()
                        .map(|(pool, count)| (Some(fnv1a64(pool)), *count as f64 / 10.0))
                        .collect(),
                    other_values: 0,
                },
            ),
        ]);
        let configuration = Configuration::new([Subspace::new([0, 1], 16).unwrap()], 4, 1).unwrap();
        let tables = tables_written(&configuration, &spreads);
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[0], evenly(4));
        assert_eq!(tables[1].len(), expected.len());
        for (share, expected) in tables[1].iter().zip(&expected) {
            assert!(
                (share - expected).abs() < 1e-12,
                "{:?} {expected:?}",
                tables[1]
            );
        }
        // Every written region costs ρ at w½ = 0: the key's four and the grid's.
        let upkeep = upkeep_share(&tables, 1_000.0, 1e-3, 0.0);
        assert!((upkeep - 1e-3 * (4 + expected.len()) as f64).abs() < 1e-15);
        // Values left unlisted spread evenly: one listed value at half the records,
        // the rest over the four parts.
        let half = ValueSpread {
            hashed_shares: vec![(Some(fnv1a64(b"dublin")), 0.5)],
            other_values: 100,
        };
        let mut parts = vec![0.125; 4];
        parts[(fnv1a64(b"dublin") % 4) as usize] += 0.5;
        assert_eq!(half.part_shares(4), parts);
        // A spread listing more than its bound, or shares above 1, is refused.
        let too_many = ValueSpread {
            hashed_shares: vec![(None, 0.0); MAX_SPREAD_VALUES + 1],
            other_values: 0,
        };
        let over = ValueSpread {
            hashed_shares: vec![(Some(1), 0.7), (Some(2), 0.7)],
            other_values: 0,
        };
        for spread in [too_many, over] {
            let profile = WorkloadProfile {
                value_spreads: BTreeMap::from([(0, spread)]),
                ..WorkloadProfile::default()
            };
            let error = profile.check_entries().unwrap_err();
            assert!(error.to_string().contains("value_spread"), "{error}");
        }
    }

    /// The written regions' upkeep leaves `c = 1 − ρ R` of every second to operations:
    /// without `λ` the throughput is `c` times as much; with it, the throughput solves
    /// `c / T = A + B · T`, `A` and `B` taken from the model without the upkeep.
    #[test]
    fn region_upkeep_by_hand() {
        let configuration = Configuration::new(
            [
                Subspace::new([0], 16).unwrap(),
                Subspace::new([1, 2], 16).unwrap(),
            ],
            4,
            2,
        )
        .unwrap();
        // Two copies of 4 + 16 + 16 regions, each written evenly without spreads.
        let tables = tables_written(&configuration, &BTreeMap::new());
        let regions: Vec<usize> = tables.iter().map(Vec::len).collect();
        assert_eq!(regions, [4, 16, 16, 4, 16, 16]);
        for table in &tables {
            let even = 1.0 / table.len() as f64;
            assert!(table.iter().all(|share| (share - even).abs() < 1e-15));
        }
        let profile = |share: f64| WorkloadProfile {
            searches: vec![SearchFrequency {
                shape: SearchShape::equalities([0]),
                frequency: share,
                rows: None,
            }],
            updates: vec![UpdateFrequency {
                attributes: set(&[2]),
                frequency: 1.0 - share,
            }],
            value_spreads: Default::default(),
        };
        let upkeep = 5e-3;
        let capacity = 1.0 - upkeep * 72.0;
        let without = calibration();
        let with = Calibration {
            region_upkeep_s_per_s: upkeep,
            upkeep_half_rate_per_s: 0.0,
            ..without
        };
        let throughput = |c: &Calibration, share: f64| {
            predicted_throughput_ops_per_s(&configuration, &profile(share), c).unwrap()
        };
        let ratio = throughput(&with, 0.5) / throughput(&without, 0.5);
        assert!((ratio - capacity).abs() < 1e-12, "{ratio}");
        // Searches alone write nothing: no upkeep.
        assert_eq!(throughput(&with, 1.0), throughput(&without, 1.0));
        // With λ: A from the model without λ, B from the model with it, both without
        // the upkeep; the throughput with the upkeep solves c / T = A + B · T.
        let lambda = Calibration {
            write_rate_cost_s2: 5e-4,
            ..without
        };
        let a = 1.0 / throughput(&without, 0.5);
        let t_b = throughput(&lambda, 0.5);
        let b = (1.0 / t_b - a) / t_b;
        assert!(b > 0.0);
        let t = throughput(
            &Calibration {
                region_upkeep_s_per_s: upkeep,
                upkeep_half_rate_per_s: 0.0,
                ..lambda
            },
            0.5,
        );
        let residual = capacity / t - a - b * t;
        assert!(residual.abs() < 1e-12 * a, "{residual}");
        // An upkeep that takes every second leaves a throughput still positive, far
        // below any other.
        let swamped = throughput(
            &Calibration {
                region_upkeep_s_per_s: 1.0 / 72.0,
                upkeep_half_rate_per_s: 0.0,
                ..without
            },
            0.5,
        );
        assert!(swamped > 0.0 && swamped < 1e-6 * throughput(&without, 0.5));
        // A bad upkeep is refused by name.
        for bad in [-1e-3, f64::NAN, f64::INFINITY] {
            let error = predicted_throughput_ops_per_s(
                &configuration,
                &profile(0.5),
                &Calibration {
                    region_upkeep_s_per_s: bad,
                    upkeep_half_rate_per_s: 0.0,
                    ..without
                },
            )
            .unwrap_err();
            assert_eq!(error.setting, "region_upkeep_s_per_s");
        }
    }

    /// Rows of a search of <0> in the small instance: a quarter of the table matches,
    /// 400 matches in the 4 regions asked, a page of 25 each.
    fn quarter_paged_rows() -> SearchRows {
        SearchRows {
            page_rows: Some(25),
            probes: vec![RowProbe {
                matched_share: 0.25,
                attribute_shares: BTreeMap::from([(0, 0.25)]),
                free_values: BTreeMap::new(),
                candidate_free_values: BTreeMap::new(),
                candidate_free_shares: BTreeMap::new(),
                free_value_shares: BTreeMap::new(),
            }],
        }
    }

    #[test]
    fn fresh_rows_by_hand() {
        // The small instance, searches of <0> cut by a page: 400 matches in the 4
        // regions asked, a page of 25 each, so a quarter of the candidates is read (100
        // rows, 0.1 s); three quarters of the operations, updates of <2> the rest
        // (0.012625 s each).
        let (calibration, configuration) = small_instance();
        let rows = quarter_paged_rows();
        let shape = SearchShape::equalities([0]);
        let route = route_search_unchecked(&configuration, &shape);
        let pages = search_reads(&configuration, &route, &shape, Some(&rows), 1600).pages;
        assert_eq!(
            pages,
            vec![PageRead {
                paged_share: 0.25,
                candidate_rows: 400.0
            }]
        );
        assert_eq!(
            objects_read(&configuration, &route, &shape, Some(&rows), 1600),
            100.0
        );
        let profile = WorkloadProfile {
            searches: vec![SearchFrequency {
                shape,
                frequency: 3.0,
                rows: Some(rows),
            }],
            updates: vec![UpdateFrequency {
                attributes: set(&[2]),
                frequency: 1.0,
            }],
            value_spreads: Default::default(),
        };
        let base = 0.75 * 0.1 + 0.25 * 0.012625;
        for (window_s, lambda) in [(50.0, 0.0), (50.0, 5e-4), (500.0, 0.0)] {
            let fresh = Calibration {
                fresh_window_s: window_s,
                region_upkeep_s_per_s: 0.0,
                upkeep_half_rate_per_s: 0.0,
                write_rate_cost_s2: lambda,
                ..calibration
            };
            // A share m = 1 − e^(−u T τ / O) of the table is fresh (u = 1/4, O = 1600):
            // the page takes min(1/4, m) of the 400 candidates there, at no β.
            let slope = lambda * 0.25 * 0.75 * (0.25 + 0.75 / 4.0) * 0.25;
            let right = |t: f64| {
                let m = 1.0 - (-0.25 * t * window_s / 1600.0).exp();
                base - 0.75 * 1e-3 * 400.0 * m.min(0.25) + slope * t
            };
            // The oracle: bisection of the left side against the right, which falls
            // slower with T.
            let (mut low, mut high) = (0.0_f64, 1e6);
            for _ in 0..200 {
                let t = (low + high) / 2.0;
                if 1.0 / t > right(t) {
                    low = t;
                } else {
                    high = t;
                }
            }
            let predicted =
                predicted_throughput_ops_per_s(&configuration, &profile, &fresh).unwrap();
            assert!(
                (predicted / low - 1.0).abs() < 1e-9,
                "τ {window_s}, λ {lambda}: {predicted} {low}"
            );
            let stale = Calibration {
                fresh_window_s: 0.0,
                region_upkeep_s_per_s: 0.0,
                upkeep_half_rate_per_s: 0.0,
                ..fresh
            };
            let without = predicted_throughput_ops_per_s(&configuration, &profile, &stale).unwrap();
            assert!(predicted > 1.1 * without, "{predicted} {without}");
        }
        // Searches alone write nothing, and a search no page cuts reads its candidates
        // whole: no row spared.
        let fresh = Calibration {
            fresh_window_s: 500.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            ..calibration
        };
        let (uncut, _, _) = writing_profile();
        let searches = WorkloadProfile {
            updates: Vec::new(),
            ..profile.clone()
        };
        for profile in [uncut, searches] {
            assert_eq!(
                predicted_throughput_ops_per_s(&configuration, &profile, &fresh).unwrap(),
                predicted_throughput_ops_per_s(&configuration, &profile, &calibration).unwrap()
            );
        }
        // A negative or infinite window is refused by name.
        for bad in [-1.0, f64::INFINITY, f64::NAN] {
            let bad = Calibration {
                fresh_window_s: bad,
                region_upkeep_s_per_s: 0.0,
                upkeep_half_rate_per_s: 0.0,
                ..calibration
            };
            assert_eq!(
                predicted_throughput_ops_per_s(&configuration, &profile, &bad)
                    .unwrap_err()
                    .setting,
                "fresh_window_s"
            );
        }
    }

    #[test]
    fn writes_seen_by_searches_by_hand() {
        // The small instance with λ = 0.5 ms per row per second: the search of <0>
        // asks 4 of 16 regions (a quarter of the table), that of <3> every key region
        // (all of it); a quarter of the operations are updates.
        let (calibration, configuration) = small_instance();
        let calibration = Calibration {
            write_rate_cost_s2: 5e-4,
            ..calibration
        };
        let (profile, base, exposure) = writing_profile();
        let x = write_exposure(&configuration, &profile, 1600).unwrap();
        assert!((x / exposure - 1.0).abs() < 1e-12, "{x} {exposure}");
        let low = bisected_throughput(base, 5e-4 * exposure);
        let predicted =
            predicted_throughput_ops_per_s(&configuration, &profile, &calibration).unwrap();
        assert!((predicted / low - 1.0).abs() < 1e-9, "{predicted} {low}");
        assert!(predicted < 1.0 / base);
        // Searches alone see no writes; updates alone have no search to slow.
        for profile in [
            WorkloadProfile {
                updates: Vec::new(),
                ..profile.clone()
            },
            WorkloadProfile {
                searches: Vec::new(),
                ..profile.clone()
            },
        ] {
            assert_eq!(write_exposure(&configuration, &profile, 1600).unwrap(), 0.0);
            // Nor does any search wait for its node's own writes.
            let waiting = Calibration {
                catch_up_cost_s2: 2e-4,
                ..calibration
            };
            let without = Calibration {
                write_rate_cost_s2: 0.0,
                ..calibration
            };
            let predicted =
                predicted_throughput_ops_per_s(&configuration, &profile, &waiting).unwrap();
            let expected =
                predicted_throughput_ops_per_s(&configuration, &profile, &without).unwrap();
            assert!((predicted / expected - 1.0).abs() < 1e-12);
        }
        // A page found in the first quarter of its candidates sees a quarter of the
        // writes to its regions: 400 matches in the 4 regions asked, a page of 25 each.
        // The regions asked hold the value's records and a quarter of the others
        // (held_share): 0.25 + 0.75 / 4 of the table.
        let rows = quarter_paged_rows();
        let shape = SearchShape::equalities([0]);
        let route = route_search_unchecked(&configuration, &shape);
        let e = written_exposure(&configuration, &route, &shape, Some(&rows), 1600);
        assert!((e - (0.25 + 0.75 / 4.0) * 0.25).abs() < 1e-12, "{e}");
    }

    #[test]
    fn own_writes_waited_for_by_hand() {
        // The small instance with κ = 0.2 ms per update per second and λ = 0.5 ms per
        // row per second: three quarters of the operations are searches, a quarter
        // updates, so B = λ x + κ · 0.25 · 0.75.
        let (calibration, configuration) = small_instance();
        let calibration = Calibration {
            write_rate_cost_s2: 5e-4,
            catch_up_cost_s2: 2e-4,
            ..calibration
        };
        let (profile, base, exposure) = writing_profile();
        let slope = 5e-4 * exposure + 2e-4 * 0.25 * 0.75;
        let low = bisected_throughput(base, slope);
        let predicted =
            predicted_throughput_ops_per_s(&configuration, &profile, &calibration).unwrap();
        assert!((predicted / low - 1.0).abs() < 1e-9, "{predicted} {low}");
        // Without updates or without searches, no search waits
        // (writes_seen_by_searches_by_hand).
    }

    #[test]
    fn hand_evaluation_of_a_small_instance() {
        let (calibration, configuration) = small_instance();
        let profile = WorkloadProfile {
            searches: vec![
                // <0>: 4 of 16 regions of <0, 1> (4 parts free), 100 objects each.
                SearchFrequency {
                    shape: SearchShape::equalities([0]),
                    frequency: 2.0,
                    rows: None,
                },
                // <3>: nothing indexes it, all 1600 objects.
                SearchFrequency {
                    shape: SearchShape::equalities([3]),
                    frequency: 1.0,
                    rows: None,
                },
            ],
            updates: vec![UpdateFrequency {
                attributes: set(&[2]),
                frequency: 1.0,
            }],
            value_spreads: Default::default(),
        };
        let search_zero = 4.0 * 100.0 * 1e-3; // equation 2: 0.4 s
        let search_three = 16.0 * 100.0 * 1e-3; // 1.6 s

        // A new value of 2 moves the object out of its region of <2> (16 parts) 15
        // times in 16, and leaves <0, 1> in place: f + K (1 + 1 + 1/16 + 2α · 15/16)
        // / T_max = 12.625 ms.
        let update = (1.0 + 2.0 * (1.0 + 1.0 + 1.0 / 16.0 + 2.0 * 2.0 * 15.0 / 16.0)) / 1000.0;
        let expected = 1.0 / (0.5 * search_zero + 0.25 * search_three + 0.25 * update);
        let predicted =
            predicted_throughput_ops_per_s(&configuration, &profile, &calibration).unwrap();
        assert!(
            (predicted / expected - 1.0).abs() < 1e-12,
            "{predicted} {expected}"
        );
        assert_eq!(
            search_cost_s(
                &configuration,
                &SearchShape::equalities([0]),
                None,
                &calibration
            )
            .unwrap(),
            search_zero
        );
    }

    #[test]
    fn searches_alone_follow_equation_three() {
        // Observation 1 and 2: a search no subspace indexes scans all O objects; one a
        // subspace fully fixes scans O / R.
        let configuration = Configuration::new([Subspace::new([0], 64).unwrap()], 64, 1).unwrap();
        let calibration = calibration();
        let full = search_cost_s(
            &configuration,
            &SearchShape::equalities([5]),
            None,
            &calibration,
        );
        assert!((full.unwrap() - 140_000.0 * 1e-6).abs() < 1e-12);
        let one = search_cost_s(
            &configuration,
            &SearchShape::equalities([0]),
            None,
            &calibration,
        );
        assert!((one.unwrap() - 140_000.0 / 64.0 * 1e-6).abs() < 1e-12);
    }

    #[test]
    fn alpha_round_trips_through_equation_four() {
        let calibration = calibration();
        let configuration = Configuration::new(
            [
                Subspace::new([0], 16).unwrap(),
                Subspace::new([1, 2], 16).unwrap(),
                Subspace::new([3], 16).unwrap(),
            ],
            16,
            3,
        )
        .unwrap();
        let attributes = set(&[0, 2]);
        let measured = 1.0 / update_cost_s(&configuration, &attributes, &calibration).unwrap();
        // <0> (16 parts) moves 15 times in 16, <1, 2> (4 × 4) 3 times in 4.
        let run = UpdateRun {
            replicas: 3,
            untouched_subspaces: 1,
            modified_subspaces: 2,
            move_share: (15.0 / 16.0 + 0.75) / 2.0,
            tables_written: Vec::new(),
            measured_throughput_ops_per_s: measured,
        };
        let alpha = alpha_from_update_runs(
            &[run.clone(), run],
            calibration.max_throughput_ops_per_s,
            calibration.update_fixed_cost_s,
            Upkeep::default(),
        );
        assert!((alpha.unwrap() - 2.3).abs() < 1e-9);
    }

    /// Runs generated by equation 4 with a fixed cost `f` and `T_max`, and each region
    /// written costing `ρ` of every second: the fit given `ρ` finds both again, and `α`
    /// after them; runs moving copies do not enter it. Given no upkeep, the same runs
    /// give other costs.
    #[test]
    fn update_costs_round_trip_through_equation_four() {
        for (fixed_cost_s, max_throughput, upkeep) in [
            (1e-5, 100_000.0, 0.0),
            (5e-3, 20_000.0, 0.0),
            (0.0, 500.0, 0.0),
            (1e-5, 100_000.0, 2e-3),
        ] {
            let runs: Vec<UpdateRun> = [(1, 0, 0), (1, 1, 0), (1, 3, 0), (2, 2, 0), (1, 1, 2)]
                .into_iter()
                .map(|(replicas, untouched, modified)| {
                    let chain = f64::from(replicas)
                        * (1.0 + f64::from(untouched) + 2.0 * 2.3 * f64::from(modified));
                    // 4 regions of the key subspace and 16 of each other, on every copy.
                    let tables_written: Vec<Vec<f64>> = (0..replicas)
                        .flat_map(|_| {
                            std::iter::once(evenly(4))
                                .chain((0..untouched + modified).map(|_| evenly(16)))
                        })
                        .collect();
                    let regions: usize = tables_written.iter().map(Vec::len).sum();
                    let capacity = 1.0 - upkeep * regions as f64;
                    UpdateRun {
                        replicas,
                        untouched_subspaces: untouched,
                        modified_subspaces: modified,
                        move_share: 1.0,
                        tables_written,
                        measured_throughput_ops_per_s: capacity
                            / (fixed_cost_s + chain / max_throughput),
                    }
                })
                .collect();
            // Every region costs ρ whatever its copies (w½ = 0).
            let upkeep = Upkeep {
                region_s_per_s: upkeep,
                half_rate_per_s: 0.0,
            };
            let costs = update_costs_from_runs(&runs, upkeep).unwrap();
            assert!((costs.fixed_cost_s - fixed_cost_s).abs() < 1e-12);
            assert!((costs.max_throughput_ops_per_s / max_throughput - 1.0).abs() < 1e-9);
            let alpha = alpha_from_update_runs(
                &runs,
                costs.max_throughput_ops_per_s,
                costs.fixed_cost_s,
                upkeep,
            )
            .unwrap();
            assert!((alpha - 2.3).abs() < 1e-6);
            if upkeep.region_s_per_s > 0.0 {
                let blind = update_costs_from_runs(&runs, Upkeep::default()).unwrap();
                assert!(blind.max_throughput_ops_per_s < 0.99 * max_throughput);
            }
        }
        // An upkeep that leaves a run no second is refused by name.
        let busy = UpdateRun {
            replicas: 1,
            untouched_subspaces: 1,
            modified_subspaces: 0,
            move_share: 1.0,
            tables_written: vec![evenly(4), evenly(16)],
            measured_throughput_ops_per_s: 100.0,
        };
        for (region_s_per_s, half_rate_per_s, setting) in [
            (0.05, 0.0, "region_upkeep_s_per_s"),
            (-1e-3, 0.0, "region_upkeep_s_per_s"),
            (f64::NAN, 0.0, "region_upkeep_s_per_s"),
            (1e-3, -1.0, "upkeep_half_rate_per_s"),
        ] {
            let upkeep = Upkeep {
                region_s_per_s,
                half_rate_per_s,
            };
            let error = update_costs_from_runs(std::slice::from_ref(&busy), upkeep).unwrap_err();
            assert_eq!(error.setting, setting);
        }
        // The paper's calibration is the fit's answer when f is one hop: the key
        // subspace alone runs at T_max / 2.
        let paper = UpdateCosts::paper(500.0);
        assert_eq!(paper.max_throughput_ops_per_s, 1000.0);
        assert_eq!(paper.fixed_cost_s, 1e-3);
        let runs: Vec<UpdateRun> = [0, 1, 2]
            .into_iter()
            .map(|untouched| UpdateRun {
                replicas: 1,
                untouched_subspaces: untouched,
                modified_subspaces: 0,
                move_share: 1.0,
                tables_written: Vec::new(),
                measured_throughput_ops_per_s: 1000.0 / (2.0 + f64::from(untouched)),
            })
            .collect();
        let fitted = update_costs_from_runs(&runs, Upkeep::default()).unwrap();
        assert!((fitted.fixed_cost_s - paper.fixed_cost_s).abs() < 1e-12);
        assert!((fitted.max_throughput_ops_per_s - paper.max_throughput_ops_per_s).abs() < 1e-6);
    }

    #[test]
    fn update_costs_need_two_chain_lengths_that_slow_updates() {
        let run = |untouched, measured| UpdateRun {
            replicas: 1,
            untouched_subspaces: untouched,
            modified_subspaces: 0,
            move_share: 1.0,
            tables_written: Vec::new(),
            measured_throughput_ops_per_s: measured,
        };
        // One chain length (and a moved run, which is alpha's): f and T_max cannot be
        // told apart.
        let moved = UpdateRun {
            modified_subspaces: 1,
            ..run(0, 100.0)
        };
        let error =
            update_costs_from_runs(&[run(1, 100.0), run(1, 90.0), moved], Upkeep::default())
                .unwrap_err();
        assert!(error.reason.contains("at least 2"), "{}", error.reason);
        // Faster with more copies: no copy cost.
        let error =
            update_costs_from_runs(&[run(0, 100.0), run(2, 120.0)], Upkeep::default()).unwrap_err();
        assert!(error.reason.contains("T_max"), "{}", error.reason);
        // A fixed cost that would come out below 0 is 0: 1/T = chain · c fitted alone.
        // 1000, 400 and 250 ops/s for chains 1, 2, 3 give f < 0 unconstrained.
        let costs = update_costs_from_runs(
            &[run(0, 1000.0), run(1, 400.0), run(2, 250.0)],
            Upkeep::default(),
        )
        .unwrap();
        assert_eq!(costs.fixed_cost_s, 0.0);
        // Relative least squares of 1 = c · chain · T: c = Σ x / Σ x², x = chain · T.
        let x = [1000.0, 800.0, 750.0];
        let expected = x.iter().sum::<f64>() / x.iter().map(|v| v * v).sum::<f64>();
        assert!((1.0 / costs.max_throughput_ops_per_s - expected).abs() < 1e-15);
        // A bad run is refused by name.
        assert!(
            update_costs_from_runs(&[run(0, f64::NAN), run(1, 10.0)], Upkeep::default()).is_err()
        );
    }

    #[test]
    fn search_costs_round_trip_through_equation_two() {
        let calibration = Calibration {
            region_cost_s: 2e-4,
            fan_out_cost_s: 5e-5,
            condition_cost_s: 7e-5,
            sent_row_cost_s: 3e-5,
            write_rate_cost_s2: 4e-7,
            catch_up_cost_s2: 2e-7,
            // On the fit's grid of quarter seconds.
            fresh_window_s: 41.5,
            // 128 regions written, each at half its upkeep at 400 copies a second.
            region_upkeep_s_per_s: 2e-3,
            upkeep_half_rate_per_s: 400.0,
            ..calibration()
        };
        let configuration =
            Configuration::new([Subspace::new([0, 1], 64).unwrap()], 64, 1).unwrap();
        let rows = rows_of(
            Some(100),
            &[
                (0.05, &[(0, 0.2), (1, 0.1), (5, 0.3)]),
                (0.001, &[(0, 0.01), (1, 0.3), (5, 0.02)]),
            ],
        );
        let shapes = [
            vec![0],
            vec![0, 1],
            vec![5],
            vec![1, 5],
            vec![1],
            vec![0, 5],
            vec![0, 1, 5],
        ];
        // Each class alone, and amid updates at 90, 50 and 10 % searches: the
        // throughput the model predicts is what the run "measured".
        let runs: Vec<SearchRun> = shapes
            .into_iter()
            .flat_map(|attributes| [1.0, 0.9, 0.5, 0.1].map(|share| (attributes.clone(), share)))
            .map(|(attributes, share)| {
                let shape = SearchShape::equalities(attributes);
                let route = crate::hyperspace::route_search(&configuration, &shape).unwrap();
                let objects = calibration.objects;
                let updated = set(&[1]);
                let profile = WorkloadProfile {
                    searches: vec![SearchFrequency {
                        shape: shape.clone(),
                        frequency: share,
                        rows: Some(rows.clone()),
                    }],
                    updates: vec![UpdateFrequency {
                        attributes: updated.clone(),
                        frequency: 1.0 - share,
                    }],
                    value_spreads: Default::default(),
                };
                SearchRun {
                    search_share: share,
                    regions_asked: route.regions_contacted as f64,
                    conditions: conditions_of(&shape),
                    objects_read: objects_read(
                        &configuration,
                        &route,
                        &shape,
                        Some(&rows),
                        objects,
                    ),
                    rows_sent: rows_returned(&configuration, &route, &shape, Some(&rows), objects),
                    page_reads: search_reads(&configuration, &route, &shape, Some(&rows), objects)
                        .pages,
                    update_s_per_op: (1.0 - share)
                        * update_cost_s(&configuration, &updated, &calibration).unwrap(),
                    write_exposure: write_exposure(&configuration, &profile, objects).unwrap(),
                    tables_written: tables_written(&configuration, &profile.value_spreads),
                    measured_throughput_ops_per_s: predicted_throughput_ops_per_s(
                        &configuration,
                        &profile,
                        &calibration,
                    )
                    .unwrap(),
                }
            })
            .collect();
        let costs = search_costs_from_runs(&runs, calibration.objects).unwrap();
        assert_eq!(costs.fresh_window_s, calibration.fresh_window_s);
        assert!((costs.beta_s_per_object / calibration.beta_s_per_object - 1.0).abs() < 1e-9);
        assert!((costs.region_cost_s / calibration.region_cost_s - 1.0).abs() < 1e-9);
        assert!((costs.sent_row_cost_s / calibration.sent_row_cost_s - 1.0).abs() < 1e-9);
        assert!((costs.fan_out_cost_s / calibration.fan_out_cost_s - 1.0).abs() < 1e-9);
        assert!((costs.condition_cost_s / calibration.condition_cost_s - 1.0).abs() < 1e-9);
        assert!((costs.write_rate_cost_s2 / calibration.write_rate_cost_s2 - 1.0).abs() < 1e-9);
        assert!((costs.catch_up_cost_s2 / calibration.catch_up_cost_s2 - 1.0).abs() < 1e-9);
        assert!(
            (costs.region_upkeep_s_per_s / calibration.region_upkeep_s_per_s - 1.0).abs() < 1e-9
        );
        assert_eq!(
            costs.upkeep_half_rate_per_s,
            calibration.upkeep_half_rate_per_s
        );
        // Every run was made by the model: each is fitted exactly. A run measured at
        // 80 % of that throughput is missed: the model has it faster than measured, by
        // no more than 1 / 0.8² (at the slower throughput the terms that grow with it,
        // λ's and κ's, fall too; fewer rows are fresh, which costs more).
        let objects = calibration.objects;
        for run in &runs {
            let ratio = search_run_time_ratio(run, &costs, objects);
            assert!((ratio - 1.0).abs() < 1e-9, "{ratio}");
            let slower = SearchRun {
                measured_throughput_ops_per_s: 0.8 * run.measured_throughput_ops_per_s,
                ..run.clone()
            };
            let ratio = search_run_time_ratio(&slower, &costs, objects);
            assert!((0.64 - 1e-9..1.0).contains(&ratio), "{ratio}");
        }
        // Runs that ask one region each and are sent nothing say nothing apart about
        // the region's cost or a row sent: both 0 and beta carries it all; runs with no
        // object read say nothing about beta.
        let one = SearchRun {
            search_share: 1.0,
            regions_asked: 1.0,
            conditions: 1.0,
            objects_read: 10.0,
            rows_sent: 0.0,
            page_reads: Vec::new(),
            update_s_per_op: 0.0,
            write_exposure: 0.0,
            tables_written: Vec::new(),
            measured_throughput_ops_per_s: 100.0,
        };
        let costs = search_costs_from_runs(&[one.clone(), one.clone()], 1000).unwrap();
        assert_eq!(
            (
                costs.region_cost_s,
                costs.fan_out_cost_s,
                costs.condition_cost_s,
                costs.sent_row_cost_s,
                costs.write_rate_cost_s2,
                costs.catch_up_cost_s2,
                costs.fresh_window_s,
                costs.region_upkeep_s_per_s
            ),
            (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        );
        assert!((costs.beta_s_per_object - 1e-3).abs() < 1e-15);
        let nothing_read = SearchRun {
            objects_read: 0.0,
            ..one.clone()
        };
        assert!(search_costs_from_runs(&[nothing_read], 1000).is_err());
        assert!(search_costs_from_runs(&[], 1000).is_err());
        assert_eq!(
            search_costs_from_runs(std::slice::from_ref(&one), 0)
                .unwrap_err()
                .setting,
            "objects"
        );
        for bad in [
            SearchRun {
                measured_throughput_ops_per_s: 0.0,
                ..one.clone()
            },
            SearchRun {
                search_share: 0.0,
                ..one.clone()
            },
            SearchRun {
                write_exposure: -1.0,
                ..one.clone()
            },
            SearchRun {
                conditions: -1.0,
                ..one.clone()
            },
            SearchRun {
                page_reads: vec![PageRead {
                    paged_share: 1.5,
                    candidate_rows: 10.0,
                }],
                ..one.clone()
            },
            SearchRun {
                update_s_per_op: f64::NAN,
                ..one.clone()
            },
        ] {
            assert_eq!(
                search_costs_from_runs(&[bad], 1000).unwrap_err().setting,
                "search_runs"
            );
        }
    }

    /// A calibration charging one second an object read and nothing else.
    fn unit_calibration() -> Calibration {
        Calibration {
            beta_s_per_object: 1.0,
            region_cost_s: 0.0,
            fan_out_cost_s: 0.0,
            condition_cost_s: 0.0,
            sent_row_cost_s: 0.0,
            write_rate_cost_s2: 0.0,
            catch_up_cost_s2: 0.0,
            fresh_window_s: 0.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            alpha: 1.0,
            max_throughput_ops_per_s: 1.0,
            update_fixed_cost_s: 1.0,
            objects: 1600,
        }
    }

    /// Row estimates with one probe per `(matched, attribute shares)`.
    fn rows_of(page_rows: Option<u64>, probes: &[(f64, &[(AttributeId, f64)])]) -> SearchRows {
        SearchRows {
            page_rows,
            probes: probes
                .iter()
                .map(|(matched, shares)| RowProbe {
                    matched_share: *matched,
                    attribute_shares: shares.iter().copied().collect(),
                    free_values: BTreeMap::new(),
                    candidate_free_values: BTreeMap::new(),
                    candidate_free_shares: BTreeMap::new(),
                    free_value_shares: BTreeMap::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn objects_read_by_hand() {
        // O = 1600; subspace <0, 1> of 16 regions (4 by 4); key subspace of 4 regions.
        let configuration = Configuration::new([Subspace::new([0, 1], 16).unwrap()], 4, 1).unwrap();
        let read = |attributes: &[AttributeId], rows: &SearchRows| {
            let shape = SearchShape::equalities(attributes.iter().copied());
            let route = crate::hyperspace::route_search(&configuration, &shape).unwrap();
            objects_read(&configuration, &route, &shape, Some(rows), 1600)
        };
        // <0, 5>: routed to 4 of 16 regions, which hold attribute 0's 160 rows and a
        // quarter of the other 1440: 520 rows. Attribute 0 finds its 160 there,
        // attribute 5 its share of the 520: 26 candidates. 4 matches: no page cut.
        let probe = rows_of(Some(100), &[(4.0 / 1600.0, &[(0, 0.1), (5, 0.05)])]);
        assert!((read(&[0, 5], &probe) - 26.0).abs() < 1e-9);
        // A search whose matches outnumber what independence gives: at least those.
        let probe = rows_of(Some(100), &[(30.0 / 1600.0, &[(0, 0.1), (5, 0.05)])]);
        assert!((read(&[0, 5], &probe) - 30.0).abs() < 1e-9);
        // <0, 1> both fixed: 1 region of 16. Attribute 0's 160 rows are all in its
        // part, and those in attribute 1's part are its share of them, 0.2 + 0.8 / 4:
        // 64; attribute 1's 320 rows, 0.1 + 0.9 / 4 of them in 0's part: 104. The
        // fewer, 64 (not all 160 of attribute 0's rows: most are in other regions).
        let probe = rows_of(Some(100), &[(4.0 / 1600.0, &[(0, 0.1), (1, 0.2)])]);
        assert!((read(&[0, 1], &probe) - 64.0).abs() < 1e-9);
        // <1, 5> with 0 free: 4 regions asked, holding 0.2 + 0.8 / 4 = 0.4 of the table;
        // the matches hold one value of 0: one region holds them. Attribute 1's 320
        // rows spread over the 4: 80 in each. Attribute 5 finds 0.3 of the 640 there,
        // 192, also spread: 48 in each. Every region reads its fewest, 48, whether it
        // holds matches or not: 192.
        let mut probe = rows_of(Some(100), &[(4.0 / 1600.0, &[(1, 0.2), (5, 0.3)])]);
        probe.probes[0].free_values.insert(0, 1);
        assert!((read(&[1, 5], &probe) - 192.0).abs() < 1e-9);
        // Where 5's rows hold one value of 0 (a neighbourhood's, one city), all 192
        // are in one region, and the other three find none of them: that region reads
        // 1's rows there, a quarter of 320 (80), as its parts are even...
        probe.probes[0]
            .candidate_free_values
            .insert(5, BTreeMap::from([(0, 1)]));
        assert!((read(&[1, 5], &probe) - 80.0).abs() < 1e-9);
        // ... or, where that value of 0 holds 0.4 of the table, its part holds 0.4 +
        // 0.6 / 4 = 0.55 of it: 176 of 1's rows.
        probe.probes[0]
            .candidate_free_shares
            .insert(5, BTreeMap::from([(0, 0.4)]));
        assert!((read(&[1, 5], &probe) - 176.0).abs() < 1e-9);
        // 1's rows in two of the four parts of 0, 5's in three: the regions read are
        // 1's two, which hold all 320 of 1's rows and two thirds of 5's 192, 128.
        probe.probes[0]
            .candidate_free_values
            .insert(5, BTreeMap::from([(0, 3)]));
        probe.probes[0]
            .candidate_free_values
            .insert(1, BTreeMap::from([(0, 2)]));
        assert!((read(&[1, 5], &probe) - 128.0).abs() < 1e-9);
        // <0>: 160 candidates, 160 matches, a page of 10 in each of 4 regions: 40,
        // and the 40 are sent; a search with 4 matches is sent those 4.
        let probe = rows_of(Some(10), &[(0.1, &[(0, 0.1)])]);
        assert!((read(&[0], &probe) - 40.0).abs() < 1e-9);
        let sent = |attributes: &[AttributeId], rows: &SearchRows| {
            let shape = SearchShape::equalities(attributes.iter().copied());
            let route = crate::hyperspace::route_search(&configuration, &shape).unwrap();
            rows_returned(&configuration, &route, &shape, Some(rows), 1600)
        };
        assert!((sent(&[0], &probe) - 40.0).abs() < 1e-9);
        let few = rows_of(Some(10), &[(4.0 / 1600.0, &[(0, 0.1), (5, 0.05)])]);
        assert!((sent(&[0, 5], &few) - 4.0).abs() < 1e-9);
        // Its matches hold one value of attribute 1: one region of the 4 holds them all,
        // and stops at the page of 10.
        let mut one_value = rows_of(Some(10), &[(0.1, &[(0, 0.1)])]);
        one_value.probes[0].free_values.insert(1, 1);
        assert!((read(&[0], &one_value) - 10.0).abs() < 1e-9);
        // Two values: two regions; more values than parts: all four.
        one_value.probes[0].free_values.insert(1, 2);
        assert!((read(&[0], &one_value) - 20.0).abs() < 1e-9);
        one_value.probes[0].free_values.insert(1, 9);
        assert!((read(&[0], &one_value) - 40.0).abs() < 1e-9);
        // Two values, 19 matches in 20 holding one: 152 in its part fill the page,
        // the other part's 8 do not.
        let mut uneven = rows_of(Some(10), &[(0.1, &[(0, 0.1)])]);
        uneven.probes[0].free_values.insert(1, 2);
        uneven.probes[0]
            .free_value_shares
            .insert(1, vec![0.95, 0.05]);
        assert!((read(&[0], &uneven) - 18.0).abs() < 1e-9);
        assert!((sent(&[0], &uneven) - 18.0).abs() < 1e-9);
        // Shares beyond the bound, or summing past 1, are refused.
        uneven.probes[0].free_value_shares.insert(1, vec![0.6, 0.6]);
        let shape0 = SearchShape::equalities([0]);
        assert!(
            search_cost_s(&configuration, &shape0, Some(&uneven), &unit_calibration()).is_err()
        );
        uneven.probes[0]
            .free_value_shares
            .insert(1, vec![0.01; MAX_FREE_VALUE_SHARES + 1]);
        assert!(
            search_cost_s(&configuration, &shape0, Some(&uneven), &unit_calibration()).is_err()
        );
        one_value.probes[0].free_values.insert(1, 0);
        let shape = SearchShape::equalities([0]);
        assert!(search_cost_s(
            &configuration,
            &shape,
            Some(&one_value),
            &unit_calibration()
        )
        .is_err());
        // Without a page, all 160.
        let probe = rows_of(None, &[(0.1, &[(0, 0.1)])]);
        assert!((read(&[0], &probe) - 160.0).abs() < 1e-9);
        // <5>: the key subspace, all 4 regions: 80 candidates; the mean of two probes.
        let probes = rows_of(None, &[(0.05, &[(5, 0.05)]), (0.0, &[(5, 0.15)])]);
        assert!((read(&[5], &probes) - 160.0).abs() < 1e-9);
        // <5> with no share for 5 (nothing starts from it): the whole table.
        let probe = rows_of(None, &[(0.05, &[])]);
        assert!((read(&[5], &probe) - 1600.0).abs() < 1e-9);
        // Without rows: the regions asked whole (the paper's equation 2).
        let shape = SearchShape::equalities([0]);
        let route = crate::hyperspace::route_search(&configuration, &shape).unwrap();
        assert_eq!(
            objects_read(&configuration, &route, &shape, None, 1600),
            400.0
        );
        // The cost: 4 regions at 1 ms and 40 objects at 0.1 ms.
        let calibration = Calibration {
            beta_s_per_object: 1e-4,
            region_cost_s: 1e-3,
            fan_out_cost_s: 0.0,
            condition_cost_s: 0.0,
            sent_row_cost_s: 0.0,
            write_rate_cost_s2: 0.0,
            catch_up_cost_s2: 0.0,
            fresh_window_s: 0.0,
            region_upkeep_s_per_s: 0.0,
            upkeep_half_rate_per_s: 0.0,
            alpha: 1.0,
            max_throughput_ops_per_s: 1000.0,
            update_fixed_cost_s: 1.0 / 1000.0,
            objects: 1600,
        };
        let probe = rows_of(Some(10), &[(0.1, &[(0, 0.1)])]);
        let cost = search_cost_s(&configuration, &shape, Some(&probe), &calibration).unwrap();
        assert!((cost - 8e-3).abs() < 1e-12, "{cost}");
        // Each condition in each region asked: one condition, 4 regions at 0.5 ms more;
        // the key's equality besides it is a second condition (and asks one region).
        let per_condition = Calibration {
            condition_cost_s: 5e-4,
            ..calibration
        };
        let cost = search_cost_s(&configuration, &shape, Some(&probe), &per_condition).unwrap();
        assert!((cost - 10e-3).abs() < 1e-12, "{cost}");
        let with_key = SearchShape {
            key: Some(Constraint::Equality),
            ..shape.clone()
        };
        assert_eq!(conditions_of(&with_key), 2.0);
        assert_eq!(conditions_of(&shape), 1.0);
        let bad = rows_of(Some(10), &[(1.5, &[(0, 0.1)])]);
        assert!(search_cost_s(&configuration, &shape, Some(&bad), &calibration).is_err());
        assert!(search_cost_s(
            &configuration,
            &shape,
            Some(&rows_of(None, &[])),
            &calibration
        )
        .is_err());
    }

    #[test]
    fn alpha_needs_a_modified_subspace_and_sane_runs() {
        let run = UpdateRun {
            replicas: 1,
            untouched_subspaces: 1,
            modified_subspaces: 0,
            move_share: 1.0,
            tables_written: Vec::new(),
            measured_throughput_ops_per_s: 100.0,
        };
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&run),
            1000.0,
            1e-3,
            Upkeep::default()
        )
        .is_err());
        assert!(alpha_from_update_runs(&[], 1000.0, 1e-3, Upkeep::default()).is_err());
        let too_fast = UpdateRun {
            modified_subspaces: 1,
            measured_throughput_ops_per_s: 999.0,
            ..run.clone()
        };
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&too_fast),
            1000.0,
            1e-3,
            Upkeep::default()
        )
        .is_err());
        // A fixed cost below 0 or not finite is refused.
        let slow = UpdateRun {
            measured_throughput_ops_per_s: 100.0,
            ..too_fast.clone()
        };
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&slow),
            1000.0,
            1e-3,
            Upkeep::default()
        )
        .is_ok());
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&slow),
            1000.0,
            -1e-3,
            Upkeep::default()
        )
        .is_err());
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&slow),
            1000.0,
            f64::NAN,
            Upkeep::default()
        )
        .is_err());
        let zero = UpdateRun {
            measured_throughput_ops_per_s: 0.0,
            ..too_fast.clone()
        };
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&zero),
            1000.0,
            1e-3,
            Upkeep::default()
        )
        .is_err());
        // A modified subspace that never moves the copy (one region) is a copy written
        // in place: it says nothing about alpha. A share outside [0, 1] is refused.
        let in_place = UpdateRun {
            move_share: 0.0,
            ..slow.clone()
        };
        assert!(alpha_from_update_runs(
            std::slice::from_ref(&in_place),
            1000.0,
            1e-3,
            Upkeep::default()
        )
        .is_err());
        for share in [-0.1, 1.5, f64::NAN] {
            let bad = UpdateRun {
                move_share: share,
                ..slow.clone()
            };
            assert_eq!(
                alpha_from_update_runs(std::slice::from_ref(&bad), 1000.0, 1e-3, Upkeep::default())
                    .unwrap_err()
                    .setting,
                "update_runs"
            );
        }
    }

    #[test]
    fn rejects_bad_calibration_and_profiles() {
        let configuration = Configuration::key_only(16, 1).unwrap();
        let profile = WorkloadProfile {
            searches: vec![SearchFrequency {
                shape: SearchShape::default(),
                frequency: 1.0,
                rows: None,
            }],
            updates: vec![],
            value_spreads: Default::default(),
        };
        let bad = Calibration {
            beta_s_per_object: f64::NAN,
            ..calibration()
        };
        assert!(predicted_throughput_ops_per_s(&configuration, &profile, &bad).is_err());
        let bad = Calibration {
            objects: 0,
            ..calibration()
        };
        assert!(predicted_throughput_ops_per_s(&configuration, &profile, &bad).is_err());
        // Each search cost below 0 or not finite is refused, by its name.
        for (setting, bad) in [
            (
                "region_cost_s",
                Calibration {
                    region_cost_s: -1e-6,
                    ..calibration()
                },
            ),
            (
                "fan_out_cost_s",
                Calibration {
                    fan_out_cost_s: f64::NAN,
                    ..calibration()
                },
            ),
            (
                "condition_cost_s",
                Calibration {
                    condition_cost_s: -1e-6,
                    ..calibration()
                },
            ),
            (
                "sent_row_cost_s",
                Calibration {
                    sent_row_cost_s: -1.0,
                    ..calibration()
                },
            ),
            (
                "write_rate_cost_s2",
                Calibration {
                    write_rate_cost_s2: -1.0,
                    ..calibration()
                },
            ),
            (
                "catch_up_cost_s2",
                Calibration {
                    catch_up_cost_s2: -1e-9,
                    ..calibration()
                },
            ),
            (
                "alpha",
                Calibration {
                    alpha: f64::INFINITY,
                    ..calibration()
                },
            ),
            (
                "update_fixed_cost_s",
                Calibration {
                    update_fixed_cost_s: -1e-6,
                    ..calibration()
                },
            ),
        ] {
            let error = predicted_throughput_ops_per_s(&configuration, &profile, &bad).unwrap_err();
            assert_eq!(error.setting, setting);
        }
        let empty = WorkloadProfile::default();
        assert!(predicted_throughput_ops_per_s(&configuration, &empty, &calibration()).is_err());
        let negative = WorkloadProfile {
            searches: vec![SearchFrequency {
                shape: SearchShape::default(),
                frequency: -1.0,
                rows: None,
            }],
            updates: vec![],
            value_spreads: Default::default(),
        };
        assert!(predicted_throughput_ops_per_s(&configuration, &negative, &calibration()).is_err());
    }

    #[test]
    fn ranking_is_best_first_with_fewer_subspaces_on_ties() {
        let key_only = Configuration::key_only(16, 1).unwrap();
        let useless = Configuration::new([Subspace::new([9], 16).unwrap()], 16, 1).unwrap();
        let useful = Configuration::new([Subspace::new([0], 16).unwrap()], 16, 1).unwrap();
        let profile = WorkloadProfile {
            searches: vec![SearchFrequency {
                shape: SearchShape::equalities([0]),
                frequency: 1.0,
                rows: None,
            }],
            updates: vec![],
            value_spreads: Default::default(),
        };
        let ranked = rank_configurations(
            &[
                useless.clone(),
                key_only.clone(),
                useful.clone(),
                key_only.clone(),
            ],
            &profile,
            &calibration(),
        )
        .unwrap();
        let order: Vec<&Configuration> = ranked.iter().map(|r| &r.configuration).collect();
        // Searches alone: `useless` ties with `key_only`, which has fewer subspaces.
        assert_eq!(order, vec![&useful, &key_only, &useless]);
    }

    fn subspace_strategy() -> impl Strategy<Value = Subspace> {
        proptest::sample::subsequence((0..5).collect::<Vec<AttributeId>>(), 1..=3)
            .prop_map(|attributes| Subspace::new(attributes, 64).unwrap())
    }

    proptest! {
        /// The page curve's sorted sums give what summing every page read gives, at
        /// any fresh share (ties, shares of 1 and empty curves included).
        #[test]
        fn page_curve_is_the_sum_of_its_page_reads(
            pages in proptest::collection::vec((1u32..=20, 0u32..1000), 0..40),
            fresh in 0u32..=21,
        ) {
            let pages: Vec<PageRead> = pages
                .into_iter()
                .map(|(share, rows)| PageRead {
                    paged_share: f64::from(share) / 20.0,
                    candidate_rows: f64::from(rows),
                })
                .collect();
            let fresh = f64::from(fresh) / 20.0;
            let curve = PageCurve::new(&pages);
            let expected = fresh_page_rows(&pages, fresh);
            prop_assert!((curve.rows(fresh) - expected).abs() <= 1e-9 * expected.max(1.0));
            prop_assert_eq!(curve.is_empty(), pages.is_empty());
        }

        /// Adding a subspace never makes a search costlier (it can only offer a better
        /// route) and always makes an update costlier (one more chain of K servers).
        #[test]
        fn adding_a_subspace_trades_updates_for_searches(
            subspaces in proptest::collection::vec(subspace_strategy(), 0..4),
            extra in subspace_strategy(),
            searched in proptest::collection::btree_set(0..6u16, 0..4),
            updated in proptest::collection::btree_set(0..6u16, 0..3),
            replicas in 1u32..=4,
            alpha in 0.01f64..5.0,
        ) {
            let Ok(before) = Configuration::new(subspaces.clone(), 64, replicas) else {
                return Ok(());
            };
            let mut more = subspaces;
            more.push(extra);
            let Ok(after) = Configuration::new(more, 64, replicas) else {
                return Ok(());
            };
            let calibration = Calibration { alpha, ..calibration() };
            let shape = SearchShape::equalities(searched);
            prop_assert!(
                search_cost_s(&after, &shape, None, &calibration).unwrap()
                    <= search_cost_s(&before, &shape, None, &calibration).unwrap()
            );
            prop_assert!(
                update_cost_s(&after, &updated, &calibration).unwrap()
                    > update_cost_s(&before, &updated, &calibration).unwrap()
            );
        }
    }
}
