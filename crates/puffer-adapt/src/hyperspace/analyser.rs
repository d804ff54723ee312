//! The query analyser (paper §5.1): candidate configurations built from the attributes
//! the workload searches.
//!
//! The paper takes the power set of the attributes as candidate subspaces and every
//! combination of those as a configuration; that doubles twice with each attribute, so
//! here it is bounded and pruned:
//! 1. Only attributes some search (of positive frequency) constrains are used: a subspace
//!    over an attribute no search constrains prunes nothing and lengthens update chains.
//! 2. Candidate subspaces are the non-empty sets of at most `max_subspace_attributes` of
//!    them. If those are more than [`MAX_CANDIDATE_SUBSPACES`], the least searched
//!    attributes (search weight, then higher id) are dropped until they are not.
//! 3. Each subspace gets a cheap score: the summed frequency of the searches that fix all
//!    its attributes (they ask one region of it, Observation 2). Subspaces are ordered by
//!    score, then fewer attributes, then sort order.
//! 4. The candidates are every set of at most `max_subspaces` subspaces drawn from the
//!    first `L` of that order, `L` as large as keeps the count within `max_candidates`.
//!    When `L` is all of them the enumeration is exhaustive: the paper's, within the
//!    size bounds. The key-only configuration is always a candidate.
//! 5. The paper's heuristics' configurations (§5.2: hyperspace, subspaces-all, dominant;
//!    no-subspace is the key-only one) are candidates too, whatever the size bounds: the
//!    bounds keep the enumeration small, not the configurations the model may rank, and a
//!    heuristic the model itself prices above everything enumerated must not be missed
//!    for being wide (on the loopback cluster at half updates, the model priced one
//!    subspace of six attributes above every enumerated configuration, and it measured
//!    fastest; its grid was then a single region at 16). Room for them is kept within
//!    `max_candidates` before `L` is chosen, even where one of them is enumerated too.

use super::{
    heuristics::{attributes_by_search_weight, dominant, hyperspace, no_subspace, subspaces_all},
    AttributeId, AttributeSet, Configuration, Deployment, WorkloadProfile, MAX_SUBSPACES,
    MAX_SUBSPACE_ATTRIBUTES,
};
use crate::{config_error, ConfigError};

/// Most candidate subspaces scored (before combining them into configurations).
pub const MAX_CANDIDATE_SUBSPACES: usize = 4096;

/// Most candidate configurations one run may ask for: each costs one model evaluation.
pub const MAX_CANDIDATES: usize = 1 << 20;

/// The analyser's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyserConfig {
    /// Most attributes per candidate subspace (1..=[`MAX_SUBSPACE_ATTRIBUTES`]; 3 keeps
    /// about `R^(1/3)` parts per dimension, enough to prune).
    pub max_subspace_attributes: usize,
    /// Most subspaces per candidate configuration (0..=[`MAX_SUBSPACES`]).
    pub max_subspaces: usize,
    /// Most candidate configurations returned (1..=[`MAX_CANDIDATES`]).
    pub max_candidates: usize,
    /// Regions and copies every candidate gets.
    pub deployment: Deployment,
}

impl AnalyserConfig {
    fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_SUBSPACE_ATTRIBUTES).contains(&self.max_subspace_attributes) {
            return Err(config_error(
                "max_subspace_attributes",
                format!(
                    "{} is not in 1..={MAX_SUBSPACE_ATTRIBUTES}",
                    self.max_subspace_attributes
                ),
            ));
        }
        if self.max_subspaces > MAX_SUBSPACES {
            return Err(config_error(
                "max_subspaces",
                format!("{} is more than {MAX_SUBSPACES}", self.max_subspaces),
            ));
        }
        if !(1..=MAX_CANDIDATES).contains(&self.max_candidates) {
            return Err(config_error(
                "max_candidates",
                format!("{} is not in 1..={MAX_CANDIDATES}", self.max_candidates),
            ));
        }
        self.deployment.check()
    }
}

/// `n choose k`, saturating at `u64::MAX`.
fn binomial(n: usize, k: usize) -> u64 {
    if k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut value: u128 = 1;
    for step in 0..k {
        // Exact at every step: value is C(n, step) before, C(n, step + 1) after.
        value = value * (n - step) as u128 / (step + 1) as u128;
        if value > u128::from(u64::MAX) {
            return u64::MAX;
        }
    }
    value as u64
}

/// Sets of `1..=max_size` out of `n`, saturating.
fn subsets_up_to(n: usize, max_size: usize) -> u64 {
    (1..=max_size).fold(0u64, |sum, size| sum.saturating_add(binomial(n, size)))
}

/// Candidate configurations for `profile` (see the module docs), in sort order.
pub fn candidate_configurations(
    profile: &WorkloadProfile,
    config: &AnalyserConfig,
) -> Result<Vec<Configuration>, ConfigError> {
    config.check()?;
    profile.check_entries()?;
    let mut attributes = attributes_by_search_weight(profile);
    while subsets_up_to(attributes.len(), config.max_subspace_attributes)
        > MAX_CANDIDATE_SUBSPACES as u64
    {
        attributes.pop();
    }
    let subspaces = ranked_subspaces(profile, &attributes, config.max_subspace_attributes);
    let heuristics = heuristic_configurations(profile, &config.deployment)?;
    // Configurations of at most `max_subspaces` from the first `kept` subspaces, counting
    // the key-only one and the heuristics' room.
    let configurations_of = |kept: usize| {
        subsets_up_to(kept, config.max_subspaces)
            .saturating_add(1)
            .saturating_add(heuristics.len() as u64)
    };
    let mut kept = subspaces.len();
    while kept > 0 && configurations_of(kept) > config.max_candidates as u64 {
        kept -= 1;
    }
    let mut candidates = Vec::new();
    let mut chosen = Vec::new();
    combine(
        &subspaces[..kept],
        config.max_subspaces,
        &mut chosen,
        &mut candidates,
        &config.deployment,
    )?;
    candidates.sort();
    for heuristic in heuristics {
        if candidates.len() >= config.max_candidates {
            break;
        }
        if let Err(place) = candidates.binary_search(&heuristic) {
            candidates.insert(place, heuristic);
        }
    }
    Ok(candidates)
}

/// The heuristics' configurations other than the key-only one, distinct, most
/// selective first (dominant, hyperspace, subspaces-all: the order they are kept in
/// when `max_candidates` leaves room for fewer).
fn heuristic_configurations(
    profile: &WorkloadProfile,
    deployment: &Deployment,
) -> Result<Vec<Configuration>, ConfigError> {
    let key_only = no_subspace(deployment)?;
    let mut configurations: Vec<Configuration> = Vec::new();
    for configuration in [
        dominant(profile, deployment)?,
        hyperspace(profile, deployment)?,
        subspaces_all(profile, deployment)?,
    ] {
        if configuration != key_only && !configurations.contains(&configuration) {
            configurations.push(configuration);
        }
    }
    Ok(configurations)
}

/// Every non-empty subset of `attributes` of at most `max_size`, ordered best first.
fn ranked_subspaces(
    profile: &WorkloadProfile,
    attributes: &[AttributeId],
    max_size: usize,
) -> Vec<AttributeSet> {
    let mut subsets: Vec<AttributeSet> = Vec::new();
    let mut current = AttributeSet::new();
    collect_subsets(attributes, max_size, &mut current, &mut subsets);
    let searches: Vec<(AttributeSet, f64)> = profile
        .searches
        .iter()
        .map(|search| (search.shape.constrained_attributes(), search.frequency))
        .collect();
    let mut scored: Vec<(f64, AttributeSet)> = subsets
        .into_iter()
        .map(|subspace| {
            let score = searches
                .iter()
                .filter(|(constrained, _)| subspace.is_subset(constrained))
                .map(|(_, frequency)| frequency)
                .sum();
            (score, subspace)
        })
        .collect();
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(&b.1))
    });
    scored.into_iter().map(|(_, subspace)| subspace).collect()
}

fn collect_subsets(
    remaining: &[AttributeId],
    max_size: usize,
    current: &mut AttributeSet,
    subsets: &mut Vec<AttributeSet>,
) {
    for (position, &attribute) in remaining.iter().enumerate() {
        current.insert(attribute);
        subsets.push(current.clone());
        if current.len() < max_size {
            collect_subsets(&remaining[position + 1..], max_size, current, subsets);
        }
        current.remove(&attribute);
    }
}

fn combine(
    remaining: &[AttributeSet],
    max_subspaces: usize,
    chosen: &mut Vec<AttributeSet>,
    candidates: &mut Vec<Configuration>,
    deployment: &Deployment,
) -> Result<(), ConfigError> {
    candidates.push(deployment.configuration(chosen.iter().cloned())?);
    if chosen.len() == max_subspaces {
        return Ok(());
    }
    for (position, subspace) in remaining.iter().enumerate() {
        chosen.push(subspace.clone());
        combine(
            &remaining[position + 1..],
            max_subspaces,
            chosen,
            candidates,
            deployment,
        )?;
        chosen.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyperspace::heuristics::tests::{
        table_one, DEPLOYMENT, LOCALITY, PETS, POOL, PRICE, RATINGS, REGION,
    };
    use crate::hyperspace::{SearchFrequency, SearchShape};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn config(max_subspaces: usize, max_candidates: usize) -> AnalyserConfig {
        AnalyserConfig {
            max_subspace_attributes: 3,
            max_subspaces,
            max_candidates,
            deployment: DEPLOYMENT,
        }
    }

    /// Brute force: the power set of the searched attributes (sizes 1..=3) as subspaces,
    /// then the power set of those (sizes 0..=max) as configurations.
    fn brute_force(attributes: &[AttributeId], max_subspaces: usize) -> BTreeSet<Configuration> {
        let subspaces: Vec<AttributeSet> = (1u32..1 << attributes.len())
            .map(|mask| {
                attributes
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| mask >> bit & 1 == 1)
                    .map(|(_, &attribute)| attribute)
                    .collect::<AttributeSet>()
            })
            .filter(|subspace| subspace.len() <= 3)
            .collect();
        (0u64..1 << subspaces.len())
            .filter(|mask| mask.count_ones() as usize <= max_subspaces)
            .map(|mask| {
                let chosen = subspaces
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| mask >> bit & 1 == 1)
                    .map(|(_, subspace)| subspace.clone());
                DEPLOYMENT.configuration(chosen).unwrap()
            })
            .collect()
    }

    fn searches_of(sets: &[Vec<AttributeId>]) -> WorkloadProfile {
        WorkloadProfile {
            searches: sets
                .iter()
                .map(|attributes| SearchFrequency {
                    shape: SearchShape::equalities(attributes.iter().copied()),
                    frequency: 1.0,
                    rows: None,
                })
                .collect(),
            updates: vec![],
            value_spreads: Default::default(),
        }
    }

    #[test]
    fn bounds_are_checked() {
        let profile = searches_of(&[vec![0]]);
        assert!(candidate_configurations(&profile, &config(MAX_SUBSPACES + 1, 10)).is_err());
        assert!(candidate_configurations(&profile, &config(1, 0)).is_err());
        let mut too_wide = config(1, 10);
        too_wide.max_subspace_attributes = 0;
        assert!(candidate_configurations(&profile, &too_wide).is_err());
    }

    /// The heuristics' configurations for `profile`, the key-only one left out.
    fn heuristics_of(profile: &WorkloadProfile) -> BTreeSet<Configuration> {
        let key_only = no_subspace(&DEPLOYMENT).unwrap();
        [
            dominant(profile, &DEPLOYMENT).unwrap(),
            hyperspace(profile, &DEPLOYMENT).unwrap(),
            subspaces_all(profile, &DEPLOYMENT).unwrap(),
        ]
        .into_iter()
        .filter(|configuration| *configuration != key_only)
        .collect()
    }

    #[test]
    fn pruning_keeps_the_best_scored_subspaces() {
        // Workload A: price is fixed by 94 % of the searches, locality by 87 %, the pair
        // <locality, price> by 81 %. With room for 6 candidates of one subspace, three
        // are kept for the heuristics (dominant: (price); hyperspace: one subspace of
        // the six searched attributes; subspaces-all: six of one each), so the key-only
        // configuration and the two best scored subspaces remain; (price) is dominant's
        // too, so 5 candidates in all.
        let profile = table_one([6.0, 13.0, 26.0, 55.0]);
        let candidates = candidate_configurations(&profile, &config(1, 6)).unwrap();
        let all_six = AttributeSet::from([LOCALITY, REGION, PRICE, RATINGS, PETS, POOL]);
        let mut expected: Vec<Configuration> = vec![
            DEPLOYMENT.configuration([]).unwrap(),
            DEPLOYMENT
                .configuration([AttributeSet::from([LOCALITY])])
                .unwrap(),
            DEPLOYMENT
                .configuration([AttributeSet::from([PRICE])])
                .unwrap(),
            DEPLOYMENT.configuration([all_six.clone()]).unwrap(),
            DEPLOYMENT
                .configuration(all_six.iter().map(|&a| AttributeSet::from([a])))
                .unwrap(),
        ];
        expected.sort();
        assert_eq!(candidates, expected);

        // With room for 3, the heuristics' room leaves no enumerated subspace: the
        // key-only configuration, then dominant and hyperspace in that order.
        let candidates = candidate_configurations(&profile, &config(1, 3)).unwrap();
        let mut expected = vec![
            DEPLOYMENT.configuration([]).unwrap(),
            DEPLOYMENT
                .configuration([AttributeSet::from([PRICE])])
                .unwrap(),
            DEPLOYMENT.configuration([all_six]).unwrap(),
        ];
        expected.sort();
        assert_eq!(candidates, expected);
    }

    proptest! {
        #[test]
        fn exhaustive_on_small_inputs(
            sets in proptest::collection::vec(
                proptest::collection::vec(0u16..4, 1..3), 1..4),
            max_subspaces in 0usize..=2,
        ) {
            let profile = searches_of(&sets);
            let candidates = candidate_configurations(&profile, &config(max_subspaces, 1 << 16))
                .unwrap();
            let attributes: Vec<AttributeId> = sets
                .iter()
                .flatten()
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut expected = brute_force(&attributes, max_subspaces);
            expected.extend(heuristics_of(&profile));
            prop_assert_eq!(candidates.len(), expected.len());
            prop_assert_eq!(candidates.into_iter().collect::<BTreeSet<_>>(), expected);
        }

        #[test]
        fn pruned_candidates_are_bounded_and_distinct(
            sets in proptest::collection::vec(
                proptest::collection::vec(0u16..12, 1..4), 1..6),
            max_subspaces in 0usize..=4,
            max_candidates in 1usize..200,
        ) {
            let profile = searches_of(&sets);
            let bounds = config(max_subspaces, max_candidates);
            let candidates = candidate_configurations(&profile, &bounds).unwrap();
            prop_assert!(candidates.len() <= max_candidates);
            prop_assert!(candidates.contains(&DEPLOYMENT.configuration([]).unwrap()));
            let distinct: BTreeSet<&Configuration> = candidates.iter().collect();
            prop_assert_eq!(distinct.len(), candidates.len());
            let heuristics = heuristics_of(&profile);
            let widest = bounds.max_subspace_attributes;
            for candidate in &candidates {
                // Only a heuristic's configuration may exceed the size bounds.
                let within_bounds = candidate.subspaces().len() <= max_subspaces
                    && candidate
                        .subspaces()
                        .iter()
                        .all(|subspace| subspace.attributes().len() <= widest);
                prop_assert!(within_bounds || heuristics.contains(candidate));
            }
            if max_candidates > heuristics.len() {
                for heuristic in &heuristics {
                    prop_assert!(candidates.contains(heuristic));
                }
            }
        }
    }
}
