//! Region pruning: how many regions of a subspace a search asks (equation 1, generalised
//! from equalities to `IN` lists and ranges), and which subspace the search goes to.
//!
//! A subspace of `d` dimensions asked for `R` regions cuts each dimension into
//! `p = floor(R^(1/d))` parts (at least 1), and its first dimensions (by attribute id)
//! into `p + 1` as far as the grid stays within `R` ([`dimension_parts`]): never more
//! regions than configured, exactly `R` when `R` is a `d`-th power, as in the paper, and
//! never one region for a wide subspace (16 regions over six dimensions are
//! `2 × 2 × 2 × 2 × 1 × 1`, not six dimensions of one part). Per dimension of `p` parts a
//! search asks every part if it leaves the attribute unconstrained, one part for an
//! equality, `min(n, p)` for `IN` of `n` values and `ceil(fraction * p)` for a range
//! starting at a part boundary; the regions asked are the product. With equalities only
//! and equal parts that is the paper's `(R^(1/|S|))^|E|`, `E` the subspace's
//! unconstrained attributes.
//!
//! The paper sends a search to the subspace with the fewest regions, which is also the
//! one that scans the fewest objects when every subspace has the same grid. When grids
//! differ (different `R`, or a floor in the root) the two can disagree; the route here
//! minimises the share of the data scanned, `regions asked / grid regions` (the quantity
//! equation 2 charges for), then the fewest regions, then the earliest subspace (the key
//! subspace first, then the configuration's sorted order). Minimising the charged quantity
//! is what makes adding a subspace never raise a search's predicted cost.

use super::{Configuration, Constraint, SearchShape, Subspace};
use crate::ConfigError;

/// Parts each of `dimensions` dimensions is cut into for a grid of at most `regions`
/// regions: the largest `p >= 1` with `p^dimensions <= regions`.
pub fn parts_per_dimension(regions: u32, dimensions: usize) -> u32 {
    if dimensions == 0 {
        return 1;
    }
    // A float estimate, then corrected both ways: the root of a `u32` is exact to well
    // under one part, and the integer checks make the floor exact.
    let mut parts = (f64::from(regions).powf(1.0 / dimensions as f64).round() as u32).max(1);
    while parts > 1 && grid_size(parts, dimensions) > u64::from(regions) {
        parts -= 1;
    }
    while grid_size(parts + 1, dimensions) <= u64::from(regions) {
        parts += 1;
    }
    parts
}

/// Parts of each of `dimensions` dimensions (in the subspace's order: increasing
/// attribute id) for a grid of at most `regions` regions: [`parts_per_dimension`] each,
/// then `p + 1` for as many leading dimensions as keep the grid within `regions`. The
/// parts differ by at most one, and no grid of such parts within `regions` has more
/// regions: 16 regions over 3 dimensions are `3 × 2 × 2` (12), over 6 dimensions
/// `2 × 2 × 2 × 2 × 1 × 1` (16, where equal parts would leave one region).
pub fn dimension_parts(regions: u32, dimensions: usize) -> Vec<u32> {
    let parts = parts_per_dimension(regions, dimensions);
    let mut all = vec![parts; dimensions];
    let mut size = grid_size(parts, dimensions);
    for dimension in &mut all {
        // `size` holds a factor `parts` for every dimension not yet raised.
        let raised = size / u64::from(parts) * u64::from(parts + 1);
        if raised > u64::from(regions) {
            break;
        }
        *dimension = parts + 1;
        size = raised;
    }
    all
}

/// `parts^dimensions`, saturating (only ever compared with a `u32`).
fn grid_size(parts: u32, dimensions: usize) -> u64 {
    let mut size: u64 = 1;
    for _ in 0..dimensions {
        size = size.saturating_mul(u64::from(parts));
    }
    size
}

/// Regions in the grid of `subspace`: the product of its [`dimension_parts`], at most
/// its `R`.
pub fn subspace_grid_regions(subspace: &Subspace) -> u64 {
    subspace
        .dimensions()
        .map(|(_, parts)| u64::from(parts))
        .product()
}

/// Parts of a dimension cut into `parts` that a constraint (or none) asks.
pub(crate) fn parts_asked(constraint: Option<Constraint>, parts: u32) -> u64 {
    let parts = u64::from(parts);
    match constraint {
        None => parts,
        Some(Constraint::Equality) => 1,
        Some(Constraint::In { values }) => u64::from(values).min(parts),
        Some(Constraint::Range { fraction_ppm }) => {
            let denominator = u64::from(super::RANGE_FRACTION_DENOMINATOR);
            // ceil(fraction_ppm * parts / 10^6), exact; at least 1 as fraction_ppm >= 1.
            (u64::from(fraction_ppm) * parts)
                .div_ceil(denominator)
                .min(parts)
        }
    }
}

/// Regions of `subspace` a search of shape `shape` asks (equation 1, generalised).
pub fn regions_contacted(subspace: &Subspace, shape: &SearchShape) -> Result<u64, ConfigError> {
    shape.check()?;
    Ok(regions_contacted_unchecked(subspace, shape))
}

fn regions_contacted_unchecked(subspace: &Subspace, shape: &SearchShape) -> u64 {
    subspace
        .dimensions()
        .map(|(attribute, parts)| parts_asked(shape.attributes.get(&attribute).copied(), parts))
        .product()
}

/// Where a search goes in a configuration, and what it asks there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchRoute {
    /// 0 for the key subspace, `i + 1` for `configuration.subspaces()[i]`.
    pub subspace_index: usize,
    /// Regions asked in that subspace.
    pub regions_contacted: u64,
    /// Regions in that subspace's grid.
    pub grid_regions: u64,
}

impl SearchRoute {
    /// Share of all objects the search scans: `regions_contacted / grid_regions`, the
    /// `|S|√R^|E| / R` of equation 2 once multiplied by the object count.
    pub fn scanned_fraction(&self) -> f64 {
        self.regions_contacted as f64 / self.grid_regions as f64
    }
}

/// The subspace a search of shape `shape` goes to in `configuration` (see the module docs
/// for the rule and its ties).
pub fn route_search(
    configuration: &Configuration,
    shape: &SearchShape,
) -> Result<SearchRoute, ConfigError> {
    shape.check()?;
    Ok(route_search_unchecked(configuration, shape))
}

pub(crate) fn route_search_unchecked(
    configuration: &Configuration,
    shape: &SearchShape,
) -> SearchRoute {
    let key_regions = u64::from(configuration.key_regions());
    let mut best = SearchRoute {
        subspace_index: 0,
        regions_contacted: parts_asked(shape.key, configuration.key_regions()),
        grid_regions: key_regions,
    };
    for (position, subspace) in configuration.subspaces().iter().enumerate() {
        let candidate = SearchRoute {
            subspace_index: position + 1,
            regions_contacted: regions_contacted_unchecked(subspace, shape),
            grid_regions: subspace_grid_regions(subspace),
        };
        if route_is_better(&candidate, &best) {
            best = candidate;
        }
    }
    best
}

/// Smaller scanned share first (compared exactly by cross-multiplying; both factors are at
/// most 2^16 · 2^16), then fewer regions; an equal route keeps the earlier subspace.
fn route_is_better(candidate: &SearchRoute, best: &SearchRoute) -> bool {
    let candidate_share = candidate.regions_contacted * best.grid_regions;
    let best_share = best.regions_contacted * candidate.grid_regions;
    candidate_share < best_share
        || (candidate_share == best_share && candidate.regions_contacted < best.regions_contacted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyperspace::{AttributeId, RANGE_FRACTION_DENOMINATOR};
    use proptest::prelude::*;

    /// A constraint the brute force evaluates on one dimension of `parts` parts: which
    /// parts it can hit. An equality's value falls in part 0, an `IN`'s `n` values in
    /// parts `0, 1, ..` (as many distinct parts as there are values, the worst case), and
    /// a range `[0, f)` hits part `i` when `i / parts < f`.
    fn part_is_hit(constraint: Option<Constraint>, parts: u32, part: u32) -> bool {
        match constraint {
            None => true,
            Some(Constraint::Equality) => part == 0,
            Some(Constraint::In { values }) => part < values,
            Some(Constraint::Range { fraction_ppm }) => {
                u64::from(part) * u64::from(RANGE_FRACTION_DENOMINATOR)
                    < u64::from(fraction_ppm) * u64::from(parts)
            }
        }
    }

    /// Enumerates every region of the grid (a mixed-radix counter over the dimensions)
    /// and counts those the shape can hit in all dimensions.
    fn brute_force_regions(subspace: &Subspace, shape: &SearchShape) -> u64 {
        let dimensions = subspace.attributes().len();
        let parts = brute_force_parts(subspace.regions(), dimensions);
        let mut coordinates = vec![0u32; dimensions];
        let mut hit = 0;
        loop {
            let all_hit = subspace
                .attributes()
                .iter()
                .zip(&coordinates)
                .zip(&parts)
                .all(|((attribute, &part), &parts)| {
                    part_is_hit(shape.attributes.get(attribute).copied(), parts, part)
                });
            hit += u64::from(all_hit);
            let mut dimension = 0;
            loop {
                if dimension == dimensions {
                    return hit;
                }
                coordinates[dimension] += 1;
                if coordinates[dimension] < parts[dimension] {
                    break;
                }
                coordinates[dimension] = 0;
                dimension += 1;
            }
        }
    }

    /// Every way of cutting `dimensions` dimensions into parts that differ by at most
    /// one, the larger ones first, tried in turn: the one with the most regions within
    /// `regions` (the fewest larger parts among equals).
    fn brute_force_parts(regions: u32, dimensions: usize) -> Vec<u32> {
        let mut best = vec![1u32; dimensions];
        let mut best_size = 1u64;
        for parts in 1..=regions {
            for raised in 0..=dimensions {
                let cut: Vec<u32> = (0..dimensions)
                    .map(|d| if d < raised { parts + 1 } else { parts })
                    .collect();
                let size = cut
                    .iter()
                    .try_fold(1u64, |size, &p| size.checked_mul(u64::from(p)));
                if let Some(size) = size.filter(|&size| size <= u64::from(regions)) {
                    if size > best_size {
                        (best, best_size) = (cut, size);
                    }
                }
            }
        }
        best
    }

    fn constraint_strategy() -> impl Strategy<Value = Option<Constraint>> {
        prop_oneof![
            Just(None),
            Just(Some(Constraint::Equality)),
            (1u32..12).prop_map(|values| Some(Constraint::In { values })),
            (1u32..=RANGE_FRACTION_DENOMINATOR)
                .prop_map(|fraction_ppm| Some(Constraint::Range { fraction_ppm })),
        ]
    }

    fn shape_strategy() -> impl Strategy<Value = SearchShape> {
        (
            constraint_strategy(),
            proptest::collection::vec(constraint_strategy(), 5),
        )
            .prop_map(|(key, constraints)| SearchShape {
                key,
                attributes: constraints
                    .into_iter()
                    .enumerate()
                    .filter_map(|(attribute, constraint)| {
                        constraint.map(|constraint| (attribute as AttributeId, constraint))
                    })
                    .collect(),
            })
    }

    fn subspace_strategy() -> impl Strategy<Value = Subspace> {
        (
            proptest::sample::subsequence((0..5).collect::<Vec<AttributeId>>(), 1..=3),
            1u32..=400,
        )
            .prop_map(|(attributes, regions)| Subspace::new(attributes, regions).unwrap())
    }

    #[test]
    fn parts_are_the_floor_of_the_root() {
        assert_eq!(parts_per_dimension(16, 2), 4);
        assert_eq!(parts_per_dimension(15, 2), 3);
        assert_eq!(parts_per_dimension(8, 3), 2);
        assert_eq!(parts_per_dimension(65_536, 8), 4);
        assert_eq!(parts_per_dimension(65_536, 1), 65_536);
        assert_eq!(parts_per_dimension(1, 5), 1);
        for regions in 1..=2000u32 {
            for dimensions in 1..=8usize {
                let parts = parts_per_dimension(regions, dimensions);
                assert!(grid_size(parts, dimensions) <= u64::from(regions));
                assert!(grid_size(parts + 1, dimensions) > u64::from(regions));
            }
        }
    }

    /// Against every cut into parts differing by at most one, tried in turn.
    #[test]
    fn dimension_parts_are_the_largest_grid_of_near_equal_parts() {
        assert_eq!(dimension_parts(16, 2), [4, 4]);
        assert_eq!(dimension_parts(16, 3), [3, 2, 2]);
        assert_eq!(dimension_parts(16, 6), [2, 2, 2, 2, 1, 1]);
        assert_eq!(dimension_parts(1, 4), [1, 1, 1, 1]);
        assert_eq!(dimension_parts(64, 3), [4, 4, 4]);
        for regions in 1..=300u32 {
            for dimensions in 1..=6usize {
                let parts = dimension_parts(regions, dimensions);
                assert_eq!(
                    parts,
                    brute_force_parts(regions, dimensions),
                    "{regions} regions over {dimensions} dimensions"
                );
                let size: u64 = parts.iter().map(|&p| u64::from(p)).product();
                assert!(size <= u64::from(regions));
                let subspace =
                    Subspace::new((0..dimensions as AttributeId).collect::<Vec<_>>(), regions)
                        .unwrap();
                assert_eq!(subspace_grid_regions(&subspace), size);
            }
        }
    }

    #[test]
    fn equation_one_with_equalities() {
        // R = 64, |S| = 3: 4 parts per dimension; one attribute left free asks 4^1.
        let subspace = Subspace::new([1, 2, 3], 64).unwrap();
        let shape = SearchShape::equalities([1, 3, 9]);
        assert_eq!(regions_contacted(&subspace, &shape).unwrap(), 4);
        // Fig. 1b: <city, price> with 3 parts per dimension; city alone asks 3 regions,
        // city and price ask 1.
        let city_price = Subspace::new([0, 1], 9).unwrap();
        let city = SearchShape::equalities([0]);
        assert_eq!(regions_contacted(&city_price, &city).unwrap(), 3);
        let both = SearchShape::equalities([0, 1]);
        assert_eq!(regions_contacted(&city_price, &both).unwrap(), 1);
    }

    #[test]
    fn rejects_bad_constraints() {
        let subspace = Subspace::new([0], 4).unwrap();
        let mut shape = SearchShape::default();
        shape.attributes.insert(0, Constraint::In { values: 0 });
        assert!(regions_contacted(&subspace, &shape).is_err());
        shape.attributes.insert(
            0,
            Constraint::Range {
                fraction_ppm: RANGE_FRACTION_DENOMINATOR + 1,
            },
        );
        assert!(regions_contacted(&subspace, &shape).is_err());
        shape
            .attributes
            .insert(0, Constraint::Range { fraction_ppm: 0 });
        assert!(regions_contacted(&subspace, &shape).is_err());
    }

    #[test]
    fn key_subspace_serves_key_lookups_and_ties() {
        let configuration = Configuration::new([Subspace::new([0], 16).unwrap()], 16, 2).unwrap();
        let mut by_key = SearchShape::equalities([0]);
        by_key.key = Some(Constraint::Equality);
        // Both ask 1 of 16 regions: the key subspace wins the tie.
        let route = route_search(&configuration, &by_key).unwrap();
        assert_eq!((route.subspace_index, route.regions_contacted), (0, 1));
        // No constraint at all: every subspace asks everything; the key subspace wins.
        let route = route_search(&configuration, &SearchShape::default()).unwrap();
        assert_eq!((route.subspace_index, route.regions_contacted), (0, 16));
        let route = route_search(&configuration, &SearchShape::equalities([0])).unwrap();
        assert_eq!(route.subspace_index, 1);
    }

    proptest! {
        #[test]
        fn regions_match_brute_force(subspace in subspace_strategy(), shape in shape_strategy()) {
            prop_assert_eq!(
                regions_contacted(&subspace, &shape).unwrap(),
                brute_force_regions(&subspace, &shape)
            );
        }

        #[test]
        fn route_is_the_brute_force_minimum(
            subspaces in proptest::collection::vec(subspace_strategy(), 0..5),
            key_regions in 1u32..=400,
            shape in shape_strategy(),
        ) {
            let Ok(configuration) = Configuration::new(subspaces, key_regions, 1) else {
                return Ok(()); // a duplicate subspace: not a configuration
            };
            let route = route_search(&configuration, &shape).unwrap();
            // Every subspace as (scanned share, regions, index), the key subspace first.
            let mut options: Vec<(f64, u64, usize)> = vec![{
                let key_subspace = Subspace::new([u16::MAX], key_regions).unwrap();
                let mut key_shape = SearchShape::default();
                if let Some(key) = shape.key {
                    key_shape.attributes.insert(u16::MAX, key);
                }
                let regions = brute_force_regions(&key_subspace, &key_shape);
                (regions as f64 / f64::from(key_regions), regions, 0)
            }];
            for (position, subspace) in configuration.subspaces().iter().enumerate() {
                let regions = brute_force_regions(subspace, &shape);
                let grid = brute_force_regions(subspace, &SearchShape::default());
                options.push((regions as f64 / grid as f64, regions, position + 1));
            }
            let best = options
                .iter()
                .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)))
                .unwrap();
            prop_assert_eq!(route.scanned_fraction(), best.0);
            prop_assert_eq!(route.regions_contacted, best.1);
            // The index may differ only between exactly equal options.
            let chosen = options[route.subspace_index];
            prop_assert_eq!((chosen.0, chosen.1), (best.0, best.1));
            prop_assert_eq!(route.subspace_index, best.2);
        }
    }
}
