//! Segment popularity: access counts per window, aged by halving (Getafix §4.1).
//!
//! The coordinator collects each segment's access count once per window (a minute in the
//! paper) and computes `popularity_j = sum_i C_ij / 2^(i-1)`, where `i = 1` is the newest
//! window. A window is forgotten once [`Popularity::MAX_WINDOWS`] newer ones have been
//! recorded: by then its weight is `2^-32`, so a window of fewer than `2^32` accesses
//! would add less than one access to any popularity.
//!
//! The sum is kept exact: every weight is `2^(MAX_WINDOWS - i) / 2^(MAX_WINDOWS - 1)`, so
//! the counts are summed as integers scaled by `2^(MAX_WINDOWS - 1)` (at most `2^96`,
//! well inside `u128`) and divided once at the end. The result does not depend on the
//! order of the segments or of the additions.

use std::collections::{BTreeMap, VecDeque};

use super::{check_segment_count, SegmentId};
use crate::ConfigError;

/// Access counts of the last [`Popularity::MAX_WINDOWS`] windows, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Popularity {
    windows: VecDeque<BTreeMap<SegmentId, u64>>,
}

impl Popularity {
    /// Windows kept; the oldest has weight `2^-(MAX_WINDOWS - 1)`.
    pub const MAX_WINDOWS: usize = 32;

    /// No history: every segment has popularity 0.
    pub fn new() -> Popularity {
        Popularity::default()
    }

    /// Records a window's access counts (segments absent from `counts_by_segment` had
    /// none); the window 32 windows back is forgotten. At most
    /// [`MAX_SEGMENTS`](super::MAX_SEGMENTS) segments per window.
    pub fn record_window(
        &mut self,
        counts_by_segment: &BTreeMap<SegmentId, u64>,
    ) -> Result<(), ConfigError> {
        check_segment_count("counts_by_segment", counts_by_segment.len())?;
        // Zero counts add nothing; leaving them out keeps the history as small as the
        // set of segments actually read.
        let window: BTreeMap<SegmentId, u64> = counts_by_segment
            .iter()
            .filter(|(_, &count)| count > 0)
            .map(|(&segment, &count)| (segment, count))
            .collect();
        self.windows.push_front(window);
        self.windows.truncate(Self::MAX_WINDOWS);
        Ok(())
    }

    /// Windows recorded and still remembered (at most [`Popularity::MAX_WINDOWS`]).
    pub fn window_count(&self) -> usize {
        self.windows.len()
    }

    /// One segment's aged popularity (0 if it had no access in the remembered windows).
    pub fn popularity(&self, segment: SegmentId) -> f64 {
        let scaled: u128 = self
            .windows
            .iter()
            .enumerate()
            .filter_map(|(age, window)| window.get(&segment).map(|&count| scaled(age, count)))
            .sum();
        unscale(scaled)
    }

    /// Every segment with a positive popularity, and that popularity.
    pub fn popularities(&self) -> BTreeMap<SegmentId, f64> {
        let mut scaled_by_segment: BTreeMap<SegmentId, u128> = BTreeMap::new();
        for (age, window) in self.windows.iter().enumerate() {
            for (&segment, &count) in window {
                *scaled_by_segment.entry(segment).or_insert(0) += scaled(age, count);
            }
        }
        scaled_by_segment
            .into_iter()
            .map(|(segment, sum)| (segment, unscale(sum)))
            .collect()
    }
}

/// `count * 2^(MAX_WINDOWS - 1 - age)`: the count weighted by `1 / 2^age`, times
/// `2^(MAX_WINDOWS - 1)`; `age` 0 is the newest window.
fn scaled(age: usize, count: u64) -> u128 {
    u128::from(count) << (Popularity::MAX_WINDOWS - 1 - age)
}

fn unscale(sum: u128) -> f64 {
    sum as f64 / (1u64 << (Popularity::MAX_WINDOWS - 1)) as f64
}

/// Gives each young segment at least its predecessor's popularity: `heirs` lists
/// (segment, predecessor) pairs, a time chunk and the chunk before it of the same table.
///
/// Beyond the paper: a new chunk of a time-series table takes over the interest the one
/// before it had as the newest (queries ask for "the latest"), but its aged sum starts
/// from nothing and counts one window where an old chunk's counts many, so for its first
/// windows it is planned as if it were cold while it is the hottest. Planning it with the
/// predecessor's popularity gives it its replicas at once; the predecessor keeps its own,
/// which then ages down. A predecessor without popularity gives nothing.
pub fn inherit_from_predecessors<K: Ord + Copy>(
    popularity_by_segment: &mut BTreeMap<K, f64>,
    heirs: &[(K, K)],
) {
    for &(segment, predecessor) in heirs {
        let inherited = popularity_by_segment
            .get(&predecessor)
            .copied()
            .unwrap_or(0.0);
        if inherited > 0.0 {
            let own = popularity_by_segment.entry(segment).or_insert(0.0);
            *own = own.max(inherited);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_each_window() {
        let mut popularity = Popularity::new();
        popularity
            .record_window(&BTreeMap::from([(1, 8), (2, 0)]))
            .unwrap();
        popularity
            .record_window(&BTreeMap::from([(1, 2), (3, 5)]))
            .unwrap();
        // 2 + 8/2 and 5; segment 2 had no access.
        assert_eq!(popularity.popularity(1), 6.0);
        assert_eq!(popularity.popularity(3), 5.0);
        assert_eq!(popularity.popularity(2), 0.0);
        assert_eq!(
            popularity.popularities(),
            BTreeMap::from([(1, 6.0), (3, 5.0)])
        );
    }

    #[test]
    fn forgets_after_max_windows() {
        let mut popularity = Popularity::new();
        popularity
            .record_window(&BTreeMap::from([(7, 1u64 << 31)]))
            .unwrap();
        for _ in 1..Popularity::MAX_WINDOWS {
            popularity.record_window(&BTreeMap::new()).unwrap();
        }
        // 31 windows later the weight is 2^-31.
        assert_eq!(popularity.popularity(7), 1.0);
        popularity.record_window(&BTreeMap::new()).unwrap();
        assert_eq!(popularity.popularity(7), 0.0);
        assert_eq!(popularity.window_count(), Popularity::MAX_WINDOWS);
    }

    #[test]
    fn largest_counts_do_not_overflow() {
        let mut popularity = Popularity::new();
        for _ in 0..Popularity::MAX_WINDOWS {
            popularity
                .record_window(&BTreeMap::from([(0, u64::MAX)]))
                .unwrap();
        }
        let expected = u64::MAX as f64 * (2.0 - 2f64.powi(-31));
        assert!((popularity.popularity(0) / expected - 1.0).abs() < 1e-15);
    }

    #[test]
    fn young_segments_inherit_at_least_their_predecessors_popularity() {
        let mut popularity: BTreeMap<SegmentId, f64> = [(1, 8.0), (2, 3.0), (5, 10.0)].into();
        // 2 inherits 8 from 1; 5 keeps its own 10 over 2's 3; 7 gets nothing from 6,
        // which has none.
        inherit_from_predecessors(&mut popularity, &[(2, 1), (5, 2), (7, 6)]);
        assert_eq!(popularity, [(1, 8.0), (2, 8.0), (5, 10.0)].into());
        // A segment unknown so far appears with the inherited popularity.
        inherit_from_predecessors(&mut popularity, &[(9, 5)]);
        assert_eq!(popularity.get(&9), Some(&10.0));
    }
}
