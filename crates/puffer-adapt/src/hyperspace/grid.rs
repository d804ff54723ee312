//! The concrete grid of a subspace: the region a record's values fall in, and the regions
//! a search's conditions can match. [`regions`](super::regions) counts regions for the
//! model; this places records and routes searches over them.
//!
//! Each dimension is cut into parts its own way:
//! - **hashed** (strings, booleans): a value's part is its FNV-1a hash modulo the parts,
//!   so an equality or `IN` asks one part a value, and a range asks every part;
//! - **ordered** (numbers, timestamps): `parts - 1` cuts taken from quantiles of a sample
//!   of the data, so skewed values still spread; a value's part is the number of cuts at or
//!   below it, which never decreases as the value grows, so a range asks the parts from
//!   its lower bound's to its upper bound's.
//!
//! A region is the mixed-radix number of its parts, the first dimension the most
//! significant. A record without a dimension's attribute goes to part 0 of it: no
//! condition on that attribute matches it, and a search that leaves the attribute free
//! asks every part anyway.

use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::spread::fnv1a64;

/// How one dimension is cut.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Values by hash into `parts` parts (at least 1).
    Hashed {
        /// Parts of the dimension.
        parts: u32,
    },
    /// Values by order: part `i` holds the values from `cuts[i - 1]` (inclusive) to
    /// `cuts[i]` (exclusive); `cuts` ascend (equal cuts are allowed: skewed data).
    Ordered {
        /// The `parts - 1` cuts.
        cuts: Vec<f64>,
    },
}

/// One value of a dimension.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Coordinate<'a> {
    /// A hashed dimension's value (a boolean as one byte, 0 or 1).
    Bytes(&'a [u8]),
    /// An ordered dimension's value (integers and timestamps converted, which keeps
    /// their order: the conversion never decreases).
    Number(f64),
    /// The record lacks the attribute.
    Missing,
}

/// The part of a hashed dimension of `parts` parts that a value hashing to `hash`
/// (FNV-1a of its bytes, [`bytes_hash`]) falls in.
pub fn hashed_part(hash: u64, parts: u32) -> u32 {
    (hash % u64::from(parts.max(1))) as u32
}

/// The hash a hashed dimension cuts `value` by: of its bytes (`None` for a number, which
/// an ordered dimension cuts, and for a missing value, which lies in part 0).
pub fn bytes_hash(value: Coordinate<'_>) -> Option<u64> {
    match value {
        Coordinate::Bytes(bytes) => Some(fnv1a64(bytes)),
        Coordinate::Number(_) | Coordinate::Missing => None,
    }
}

/// What a search asks of one dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum Condition<'a> {
    /// Nothing: every part.
    Any,
    /// One of these values (an equality is one).
    OneOf(Vec<Coordinate<'a>>),
    /// Numbers between two bounds.
    Between(Bound<f64>, Bound<f64>),
}

impl Dimension {
    /// Parts of the dimension.
    pub fn parts(&self) -> u32 {
        match self {
            Dimension::Hashed { parts } => (*parts).max(1),
            Dimension::Ordered { cuts } => cuts.len() as u32 + 1,
        }
    }

    /// The part `value` falls in.
    pub fn part_of(&self, value: Coordinate<'_>) -> u32 {
        match (self, value) {
            (_, Coordinate::Missing) => 0,
            (Dimension::Hashed { parts }, Coordinate::Bytes(bytes)) => {
                hashed_part(fnv1a64(bytes), *parts)
            }
            // Numbers belong on ordered dimensions; hashed by their bits for totality
            // (so 0.0 and -0.0 differ: a caller hashing numbers must normalise them).
            (Dimension::Hashed { parts }, Coordinate::Number(number)) => {
                (fnv1a64(&number.to_bits().to_le_bytes()) % u64::from((*parts).max(1))) as u32
            }
            (Dimension::Ordered { cuts }, Coordinate::Number(number)) => {
                cuts.partition_point(|cut| cut.total_cmp(&number).is_le()) as u32
            }
            // Bytes on an ordered dimension: not a value it holds; part 0, like a
            // missing one (the store's schema keeps types apart before this is asked).
            (Dimension::Ordered { .. }, Coordinate::Bytes(_)) => 0,
        }
    }

    /// The parts a condition can match, ascending, without repeats.
    pub fn parts_matching(&self, condition: &Condition<'_>) -> Vec<u32> {
        let all = || (0..self.parts()).collect();
        match (self, condition) {
            (_, Condition::Any) => all(),
            (_, Condition::OneOf(values)) => {
                let mut parts: Vec<u32> = values.iter().map(|v| self.part_of(*v)).collect();
                parts.sort_unstable();
                parts.dedup();
                parts
            }
            (Dimension::Hashed { .. }, Condition::Between(..)) => all(),
            (Dimension::Ordered { .. }, Condition::Between(lower, upper)) => {
                let first = match lower {
                    Bound::Included(v) | Bound::Excluded(v) => self.part_of(Coordinate::Number(*v)),
                    Bound::Unbounded => 0,
                };
                let last = match upper {
                    Bound::Included(v) | Bound::Excluded(v) => self.part_of(Coordinate::Number(*v)),
                    Bound::Unbounded => self.parts() - 1,
                };
                (first..=last).collect()
            }
        }
    }
}

/// `parts - 1` cuts at the quantiles of `sample` (sorted here), for an ordered dimension;
/// none for an empty sample or one part.
pub fn quantile_cuts(sample: &mut [f64], parts: u32) -> Vec<f64> {
    if sample.is_empty() || parts <= 1 {
        return Vec::new();
    }
    sample.sort_unstable_by(f64::total_cmp);
    (1..parts)
        .map(|i| {
            let rank = (sample.len() as u64 * u64::from(i) / u64::from(parts)) as usize;
            sample[rank.min(sample.len() - 1)]
        })
        .collect()
}

/// A subspace's grid: its dimensions in the subspace's attribute order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// The dimensions.
    pub dimensions: Vec<Dimension>,
}

impl Grid {
    /// Regions of the grid: the product of the dimensions' parts.
    pub fn regions(&self) -> u64 {
        self.dimensions
            .iter()
            .map(|d| u64::from(d.parts()))
            .product()
    }

    /// The region of a record whose values are `coordinates` (one a dimension).
    ///
    /// # Panics
    ///
    /// If `coordinates` does not have one value a dimension (a caller's bug).
    pub fn region_of(&self, coordinates: &[Coordinate<'_>]) -> u64 {
        assert_eq!(
            coordinates.len(),
            self.dimensions.len(),
            "one value a dimension"
        );
        self.dimensions
            .iter()
            .zip(coordinates)
            .fold(0, |region, (dimension, value)| {
                region * u64::from(dimension.parts()) + u64::from(dimension.part_of(*value))
            })
    }

    /// The regions a search whose conditions are `conditions` (one a dimension) can
    /// match, ascending.
    ///
    /// # Panics
    ///
    /// If `conditions` does not have one condition a dimension (a caller's bug).
    pub fn regions_matching(&self, conditions: &[Condition<'_>]) -> Vec<u64> {
        assert_eq!(
            conditions.len(),
            self.dimensions.len(),
            "one condition a dimension"
        );
        let mut regions = vec![0u64];
        for (dimension, condition) in self.dimensions.iter().zip(conditions) {
            let parts = dimension.parts_matching(condition);
            regions = regions
                .iter()
                .flat_map(|&region| {
                    parts
                        .iter()
                        .map(move |&part| region * u64::from(dimension.parts()) + u64::from(part))
                })
                .collect();
        }
        regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng};

    /// The tests' seeded generator, with the one draw they need.
    struct Rng(StdRng);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0.gen_range(0..n)
        }
    }

    const WORDS: &[&[u8]] = &[b"", b"a", b"b", b"lisbon", b"porto", b"faro", b"\xff\x00"];

    fn random_grid(rng: &mut Rng) -> Grid {
        let dimensions = (0..1 + rng.below(3))
            .map(|_| {
                if rng.below(2) == 0 {
                    Dimension::Hashed {
                        parts: 1 + rng.below(5) as u32,
                    }
                } else {
                    // Skewed samples: many equal values, so equal cuts appear.
                    let mut sample: Vec<f64> = (0..1 + rng.below(50))
                        .map(|_| (rng.below(8) as f64).powi(2) - 10.0)
                        .collect();
                    Dimension::Ordered {
                        cuts: quantile_cuts(&mut sample, 1 + rng.below(6) as u32),
                    }
                }
            })
            .collect();
        Grid { dimensions }
    }

    fn random_value(rng: &mut Rng, dimension: &Dimension) -> Coordinate<'static> {
        match (rng.below(10), dimension) {
            (0, _) => Coordinate::Missing,
            (_, Dimension::Hashed { .. }) => {
                Coordinate::Bytes(WORDS[rng.below(WORDS.len() as u64) as usize])
            }
            (_, Dimension::Ordered { .. }) => Coordinate::Number(rng.below(80) as f64 - 20.5),
        }
    }

    fn random_condition(rng: &mut Rng, dimension: &Dimension) -> Condition<'static> {
        match rng.below(3) {
            0 => Condition::Any,
            1 => Condition::OneOf(
                (0..1 + rng.below(3))
                    .map(|_| random_value(rng, dimension))
                    .filter(|v| *v != Coordinate::Missing)
                    .collect(),
            ),
            _ => {
                let bound = |rng: &mut Rng| match rng.below(3) {
                    0 => Bound::Unbounded,
                    1 => Bound::Included(rng.below(80) as f64 - 20.0),
                    _ => Bound::Excluded(rng.below(80) as f64 - 20.0),
                };
                let lower = bound(rng);
                Condition::Between(lower, bound(rng))
            }
        }
    }

    /// Whether `value` satisfies `condition`, by its definition (a missing value
    /// satisfies only `Any`).
    fn satisfies(value: Coordinate<'_>, condition: &Condition<'_>) -> bool {
        match (condition, value) {
            (Condition::Any, _) => true,
            (_, Coordinate::Missing) => false,
            (Condition::OneOf(values), _) => values.contains(&value),
            (Condition::Between(lower, upper), Coordinate::Number(v)) => {
                let above = match lower {
                    Bound::Included(l) => v >= *l,
                    Bound::Excluded(l) => v > *l,
                    Bound::Unbounded => true,
                };
                let below = match upper {
                    Bound::Included(u) => v <= *u,
                    Bound::Excluded(u) => v < *u,
                    Bound::Unbounded => true,
                };
                above && below
            }
            (Condition::Between(..), Coordinate::Bytes(_)) => false,
        }
    }

    #[test]
    fn every_record_a_search_matches_is_in_a_region_it_asks() {
        let mut rng = Rng(StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15));
        let mut checked = 0;
        for _ in 0..300 {
            let grid = random_grid(&mut rng);
            for _ in 0..20 {
                let conditions: Vec<Condition> = grid
                    .dimensions
                    .iter()
                    .map(|d| random_condition(&mut rng, d))
                    .collect();
                let asked = grid.regions_matching(&conditions);
                assert!(
                    asked.windows(2).all(|w| w[0] < w[1]),
                    "ascending, no repeats"
                );
                assert!(asked.iter().all(|&r| r < grid.regions()));
                for _ in 0..40 {
                    let record: Vec<Coordinate> = grid
                        .dimensions
                        .iter()
                        .map(|d| random_value(&mut rng, d))
                        .collect();
                    let region = grid.region_of(&record);
                    assert!(region < grid.regions());
                    let matches = record
                        .iter()
                        .zip(&conditions)
                        .all(|(value, condition)| satisfies(*value, condition));
                    if matches {
                        checked += 1;
                        assert!(
                            asked.binary_search(&region).is_ok(),
                            "{grid:?}: {record:?} in region {region} matches {conditions:?}, \
                             which asks only {asked:?}"
                        );
                    }
                }
            }
        }
        assert!(
            checked > 1_000,
            "only {checked} matching records were checked"
        );
    }

    #[test]
    fn equalities_ask_one_region_and_free_dimensions_all_of_theirs() {
        let grid = Grid {
            dimensions: vec![
                Dimension::Hashed { parts: 4 },
                Dimension::Ordered {
                    cuts: vec![0.0, 10.0],
                },
            ],
        };
        assert_eq!(grid.regions(), 12);
        let city = Coordinate::Bytes(b"porto");
        let equal = [
            Condition::OneOf(vec![city]),
            Condition::OneOf(vec![Coordinate::Number(5.0)]),
        ];
        assert_eq!(
            grid.regions_matching(&equal),
            vec![grid.region_of(&[city, Coordinate::Number(5.0)])]
        );
        let free_number = [Condition::OneOf(vec![city]), Condition::Any];
        assert_eq!(grid.regions_matching(&free_number).len(), 3);
        let range = [
            Condition::Any,
            Condition::Between(Bound::Included(-5.0), Bound::Excluded(3.0)),
        ];
        // Parts 0 and 1 of the ordered dimension, under each of the 4 hashed parts.
        assert_eq!(grid.regions_matching(&range).len(), 8);
    }

    #[test]
    fn quantile_cuts_give_skewed_data_equal_parts() {
        // Cubes: most values crowd near 0, a few are huge; equal-width cuts would put
        // nearly everything in the first part.
        let values: Vec<f64> = (0..1000).map(|i| f64::from(i).powi(3)).collect();
        let cuts = quantile_cuts(&mut values.clone(), 4);
        assert_eq!(cuts.len(), 3);
        let dimension = Dimension::Ordered { cuts };
        let mut counts = [0u32; 4];
        for &v in &values {
            counts[dimension.part_of(Coordinate::Number(v)) as usize] += 1;
        }
        assert_eq!(counts, [250, 250, 250, 250]);
        // Mostly one value: equal cuts, and every value still has its one part.
        let mut flat: Vec<f64> = (0..100)
            .map(|i| if i < 90 { 1.0 } else { f64::from(i) })
            .collect();
        let cuts = quantile_cuts(&mut flat, 4);
        assert_eq!(cuts, vec![1.0, 1.0, 1.0]);
        assert!(quantile_cuts(&mut [], 4).is_empty());
        assert!(quantile_cuts(&mut [1.0, 2.0], 1).is_empty());
    }
}
