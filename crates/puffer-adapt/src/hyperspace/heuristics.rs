//! The paper's static heuristics (§5.2), as baselines for the model-driven configurator.
//!
//! An attribute's *search weight* is the summed frequency of the searches that constrain
//! it; "most searched" orders by that weight, then by lower attribute id. Where a
//! heuristic would exceed a configuration bound ([`MAX_SUBSPACE_ATTRIBUTES`] for the one
//! hyperspace, [`MAX_SUBSPACES`] for subspaces-all) it keeps the most searched attributes.
//! A profile without searches gives the key subspace alone for every heuristic.

use std::collections::BTreeMap;

use super::{
    AttributeId, AttributeSet, Configuration, Deployment, WorkloadProfile, MAX_SUBSPACES,
    MAX_SUBSPACE_ATTRIBUTES,
};
use crate::ConfigError;

/// Each searched attribute's search weight (searches of frequency 0 count for nothing).
pub(crate) fn search_weights(profile: &WorkloadProfile) -> BTreeMap<AttributeId, f64> {
    let mut weights = BTreeMap::new();
    for search in profile.searches.iter().filter(|s| s.frequency > 0.0) {
        for &attribute in search.shape.attributes.keys() {
            *weights.entry(attribute).or_insert(0.0) += search.frequency;
        }
    }
    weights
}

/// Searched attributes, most searched first.
pub(crate) fn attributes_by_search_weight(profile: &WorkloadProfile) -> Vec<AttributeId> {
    let mut weighted: Vec<(AttributeId, f64)> = search_weights(profile).into_iter().collect();
    weighted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    weighted
        .into_iter()
        .map(|(attribute, _)| attribute)
        .collect()
}

/// No subspace besides the key: what a plain key-value store does.
pub fn no_subspace(deployment: &Deployment) -> Result<Configuration, ConfigError> {
    deployment.check()?;
    Configuration::key_only(deployment.key_regions, deployment.replicas)
}

/// One subspace over every searched attribute (the most searched
/// [`MAX_SUBSPACE_ATTRIBUTES`] if there are more).
pub fn hyperspace(
    profile: &WorkloadProfile,
    deployment: &Deployment,
) -> Result<Configuration, ConfigError> {
    deployment.check()?;
    profile.check_entries()?;
    let attributes: AttributeSet = attributes_by_search_weight(profile)
        .into_iter()
        .take(MAX_SUBSPACE_ATTRIBUTES)
        .collect();
    let subspaces = (!attributes.is_empty()).then_some(attributes);
    deployment.configuration(subspaces)
}

/// One single-attribute subspace per searched attribute (the most searched
/// [`MAX_SUBSPACES`] if there are more).
pub fn subspaces_all(
    profile: &WorkloadProfile,
    deployment: &Deployment,
) -> Result<Configuration, ConfigError> {
    deployment.check()?;
    profile.check_entries()?;
    let subspaces = attributes_by_search_weight(profile)
        .into_iter()
        .take(MAX_SUBSPACES)
        .map(|attribute| AttributeSet::from([attribute]));
    deployment.configuration(subspaces)
}

/// One subspace of the most searched attribute.
pub fn dominant(
    profile: &WorkloadProfile,
    deployment: &Deployment,
) -> Result<Configuration, ConfigError> {
    deployment.check()?;
    profile.check_entries()?;
    let most_searched = attributes_by_search_weight(profile).into_iter().next();
    deployment.configuration(most_searched.map(|attribute| AttributeSet::from([attribute])))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hyperspace::{SearchFrequency, SearchShape, UpdateFrequency};

    // Table 1's attributes.
    pub(crate) const LOCALITY: AttributeId = 0;
    pub(crate) const REGION: AttributeId = 1;
    pub(crate) const PRICE: AttributeId = 2;
    pub(crate) const RATINGS: AttributeId = 3;
    pub(crate) const PETS: AttributeId = 4;
    pub(crate) const POOL: AttributeId = 5;

    pub(crate) const DEPLOYMENT: Deployment = Deployment {
        subspace_regions: 64,
        key_regions: 64,
        replicas: 2,
    };

    /// Table 1, balanced variant: updates 50 % (price and ratings equally), searches 50 %
    /// in the given per-class percentages.
    pub(crate) fn table_one(search_percentages: [f64; 4]) -> WorkloadProfile {
        let classes: [&[AttributeId]; 4] = [
            &[LOCALITY],
            &[REGION, PRICE],
            &[LOCALITY, RATINGS, PRICE],
            &[LOCALITY, PRICE, PETS, POOL],
        ];
        WorkloadProfile {
            searches: classes
                .iter()
                .zip(search_percentages)
                .map(|(attributes, percentage)| SearchFrequency {
                    shape: SearchShape::equalities(attributes.iter().copied()),
                    frequency: 0.5 * percentage / 100.0,
                    rows: None,
                })
                .collect(),
            updates: [PRICE, RATINGS]
                .into_iter()
                .map(|attribute| UpdateFrequency {
                    attributes: AttributeSet::from([attribute]),
                    frequency: 0.25,
                })
                .collect(),
            value_spreads: Default::default(),
        }
    }

    fn expected(subspaces: &[&[AttributeId]]) -> Configuration {
        DEPLOYMENT
            .configuration(
                subspaces
                    .iter()
                    .map(|attributes| attributes.iter().copied().collect()),
            )
            .unwrap()
    }

    #[test]
    fn workload_a_of_table_one() {
        let profile = table_one([6.0, 13.0, 26.0, 55.0]);
        assert_eq!(no_subspace(&DEPLOYMENT).unwrap(), expected(&[]));
        assert_eq!(
            hyperspace(&profile, &DEPLOYMENT).unwrap(),
            expected(&[&[LOCALITY, REGION, PRICE, RATINGS, PETS, POOL]])
        );
        assert_eq!(
            subspaces_all(&profile, &DEPLOYMENT).unwrap(),
            expected(&[
                &[LOCALITY],
                &[REGION],
                &[PRICE],
                &[RATINGS],
                &[PETS],
                &[POOL]
            ])
        );
        // price: 13 + 26 + 55 = 94 %, locality: 6 + 26 + 55 = 87 %.
        assert_eq!(
            dominant(&profile, &DEPLOYMENT).unwrap(),
            expected(&[&[PRICE]])
        );
    }

    #[test]
    fn workload_b_of_table_one() {
        // locality: 55 + 13 + 6 = 74 %, price: 26 + 13 + 6 = 45 %.
        let profile = table_one([55.0, 26.0, 13.0, 6.0]);
        assert_eq!(
            dominant(&profile, &DEPLOYMENT).unwrap(),
            expected(&[&[LOCALITY]])
        );
    }

    #[test]
    fn bounds_and_empty_profiles() {
        assert_eq!(
            dominant(&WorkloadProfile::default(), &DEPLOYMENT).unwrap(),
            expected(&[])
        );
        assert_eq!(
            hyperspace(&WorkloadProfile::default(), &DEPLOYMENT).unwrap(),
            expected(&[])
        );
        // Ten attributes searched with weights 10, 9, .., 1: keep the heaviest.
        let profile = WorkloadProfile {
            searches: (0..10u16)
                .map(|attribute| SearchFrequency {
                    shape: SearchShape::equalities([attribute]),
                    frequency: f64::from(10 - attribute),
                    rows: None,
                })
                .collect(),
            updates: vec![],
            value_spreads: Default::default(),
        };
        let all = subspaces_all(&profile, &DEPLOYMENT).unwrap();
        let kept: Vec<AttributeId> = all.subspaces().iter().map(|s| s.attributes()[0]).collect();
        assert_eq!(kept, (0..8).collect::<Vec<_>>());
        let one = hyperspace(&profile, &DEPLOYMENT).unwrap();
        assert_eq!(
            one.subspaces()[0].attributes(),
            &(0..8).collect::<Vec<_>>()[..]
        );
        let bad = Deployment {
            replicas: 0,
            ..DEPLOYMENT
        };
        assert!(no_subspace(&bad).is_err());
    }
}
