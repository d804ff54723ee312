//! The profiler (paper §5.1): how often each search shape and each update attribute set
//! occurred over the last `W` time buckets.
//!
//! Time is the caller's milliseconds, passed with every call and never decreasing; bucket
//! `b` holds the times `b · width ..< (b + 1) · width`, and the window at time `t` is the
//! `W` buckets ending with `t`'s. Memory is bounded twice: each tracked set keeps at most
//! `W` bucket counts, and at most `max_tracked_sets` search shapes and as many update sets
//! are tracked. When an untracked set arrives with the table full, the tracked set with
//! the fewest operations in the window is forgotten (the one that sorts first on a tie)
//! and the newcomer takes its place: a set that keeps occurring stays, a shifted workload
//! gets in, and a count is never more than what was recorded (it can be less for a set
//! forgotten and seen again).

use std::collections::{BTreeMap, VecDeque};

use super::{
    check_update_attributes, AttributeSet, SearchFrequency, SearchShape, UpdateFrequency,
    WorkloadProfile,
};
use crate::{config_error, ConfigError};

/// The profiler's window and memory bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfilerConfig {
    /// Width of one time bucket, in the caller's milliseconds (>= 1).
    pub bucket_width_ms: u64,
    /// `W`, buckets in the window (1..=[`ProfilerConfig::MAX_WINDOW_BUCKETS`]).
    pub window_buckets: u32,
    /// `N`, most search shapes, and separately most update sets, tracked
    /// (1..=[`ProfilerConfig::MAX_TRACKED_SETS`]).
    pub max_tracked_sets: usize,
}

impl ProfilerConfig {
    /// Most buckets in a window.
    pub const MAX_WINDOW_BUCKETS: u32 = 1024;
    /// Most sets tracked per kind of operation.
    pub const MAX_TRACKED_SETS: usize = 4096;

    fn check(&self) -> Result<(), ConfigError> {
        if self.bucket_width_ms == 0 {
            return Err(config_error("bucket_width_ms", "0 ms is not a bucket"));
        }
        if !(1..=Self::MAX_WINDOW_BUCKETS).contains(&self.window_buckets) {
            return Err(config_error(
                "window_buckets",
                format!(
                    "{} is not in 1..={}",
                    self.window_buckets,
                    Self::MAX_WINDOW_BUCKETS
                ),
            ));
        }
        if !(1..=Self::MAX_TRACKED_SETS).contains(&self.max_tracked_sets) {
            return Err(config_error(
                "max_tracked_sets",
                format!(
                    "{} is not in 1..={}",
                    self.max_tracked_sets,
                    Self::MAX_TRACKED_SETS
                ),
            ));
        }
        Ok(())
    }
}

/// A tracked set's counts per bucket, oldest first; only buckets with operations.
type BucketCounts = VecDeque<(u64, u64)>;

/// Operation counts over a sliding window of time buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profiler {
    config: ProfilerConfig,
    newest_bucket: u64,
    searches: BTreeMap<SearchShape, BucketCounts>,
    updates: BTreeMap<AttributeSet, BucketCounts>,
}

impl Profiler {
    /// An empty profiler.
    pub fn new(config: ProfilerConfig) -> Result<Profiler, ConfigError> {
        config.check()?;
        Ok(Profiler {
            config,
            newest_bucket: 0,
            searches: BTreeMap::new(),
            updates: BTreeMap::new(),
        })
    }

    /// Records `count` searches of `shape` at `now_ms`.
    pub fn record_search(
        &mut self,
        now_ms: u64,
        shape: &SearchShape,
        count: u64,
    ) -> Result<(), ConfigError> {
        shape.check()?;
        let bucket = self.advance(now_ms)?;
        add(
            &mut self.searches,
            shape,
            bucket,
            count,
            self.config.max_tracked_sets,
        );
        Ok(())
    }

    /// Records `count` updates changing `attributes` at `now_ms`.
    pub fn record_update(
        &mut self,
        now_ms: u64,
        attributes: &AttributeSet,
        count: u64,
    ) -> Result<(), ConfigError> {
        check_update_attributes(attributes)?;
        let bucket = self.advance(now_ms)?;
        add(
            &mut self.updates,
            attributes,
            bucket,
            count,
            self.config.max_tracked_sets,
        );
        Ok(())
    }

    /// Searches per tracked shape in the window ending at `now_ms`.
    pub fn search_counts(
        &mut self,
        now_ms: u64,
    ) -> Result<BTreeMap<SearchShape, u64>, ConfigError> {
        self.advance(now_ms)?;
        Ok(totals(&self.searches))
    }

    /// Updates per tracked attribute set in the window ending at `now_ms`.
    pub fn update_counts(
        &mut self,
        now_ms: u64,
    ) -> Result<BTreeMap<AttributeSet, u64>, ConfigError> {
        self.advance(now_ms)?;
        Ok(totals(&self.updates))
    }

    /// The window's workload: each tracked operation's share of all tracked operations,
    /// searches and updates in their sort order. Empty if the window saw nothing.
    pub fn profile(&mut self, now_ms: u64) -> Result<WorkloadProfile, ConfigError> {
        let searches = self.search_counts(now_ms)?;
        let updates = self.update_counts(now_ms)?;
        let total: u64 = searches.values().chain(updates.values()).sum();
        if total == 0 {
            return Ok(WorkloadProfile::default());
        }
        let share = |count: u64| count as f64 / total as f64;
        Ok(WorkloadProfile {
            searches: searches
                .into_iter()
                .map(|(shape, count)| SearchFrequency {
                    shape,
                    frequency: share(count),
                    rows: None,
                })
                .collect(),
            updates: updates
                .into_iter()
                .map(|(attributes, count)| UpdateFrequency {
                    attributes,
                    frequency: share(count),
                })
                .collect(),
            // The profiler sees operations, not records: the caller adds the spreads
            // from a sample of them.
            value_spreads: BTreeMap::new(),
        })
    }

    /// Moves the window to `now_ms`'s bucket, forgetting buckets that left it.
    fn advance(&mut self, now_ms: u64) -> Result<u64, ConfigError> {
        let bucket = now_ms / self.config.bucket_width_ms;
        if bucket < self.newest_bucket {
            return Err(config_error(
                "now_ms",
                format!(
                    "time {now_ms} ms is in bucket {bucket}, before the newest bucket {} \
                     already recorded",
                    self.newest_bucket
                ),
            ));
        }
        self.newest_bucket = bucket;
        // Buckets `bucket - W + 1 ..= bucket` are in the window.
        let oldest_kept = (bucket + 1).saturating_sub(u64::from(self.config.window_buckets));
        expire(&mut self.searches, oldest_kept);
        expire(&mut self.updates, oldest_kept);
        Ok(bucket)
    }
}

fn expire<K: Ord>(tracked: &mut BTreeMap<K, BucketCounts>, oldest_kept: u64) {
    tracked.retain(|_, counts| {
        while counts
            .front()
            .is_some_and(|&(bucket, _)| bucket < oldest_kept)
        {
            counts.pop_front();
        }
        !counts.is_empty()
    });
}

fn total(counts: &BucketCounts) -> u64 {
    counts
        .iter()
        .fold(0u64, |sum, &(_, count)| sum.saturating_add(count))
}

fn totals<K: Ord + Clone>(tracked: &BTreeMap<K, BucketCounts>) -> BTreeMap<K, u64> {
    tracked
        .iter()
        .map(|(key, counts)| (key.clone(), total(counts)))
        .collect()
}

fn add<K: Ord + Clone>(
    tracked: &mut BTreeMap<K, BucketCounts>,
    key: &K,
    bucket: u64,
    count: u64,
    max_tracked: usize,
) {
    if count == 0 {
        return;
    }
    if !tracked.contains_key(key) && tracked.len() >= max_tracked {
        // `min_by_key` keeps the first minimum, the set that sorts first.
        let least_frequent = tracked
            .iter()
            .min_by_key(|(_, counts)| total(counts))
            .map(|(least, _)| least.clone());
        if let Some(least) = least_frequent {
            tracked.remove(&least);
        }
    }
    let counts = tracked.entry(key.clone()).or_default();
    match counts.back_mut() {
        Some((last_bucket, last_count)) if *last_bucket == bucket => {
            *last_count = last_count.saturating_add(count);
        }
        _ => counts.push_back((bucket, count)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(max_tracked_sets: usize) -> ProfilerConfig {
        ProfilerConfig {
            bucket_width_ms: 10,
            window_buckets: 3,
            max_tracked_sets,
        }
    }

    #[test]
    fn window_slides_by_buckets() {
        let mut profiler = Profiler::new(config(8)).unwrap();
        let a = SearchShape::equalities([1]);
        let b = SearchShape::equalities([2]);
        profiler.record_search(0, &a, 2).unwrap();
        profiler.record_search(15, &b, 1).unwrap();
        profiler
            .record_update(29, &AttributeSet::from([4]), 1)
            .unwrap();
        // At 29 ms: buckets 0, 1, 2.
        let profile = profiler.profile(29).unwrap();
        assert_eq!(profile.searches.len(), 2);
        assert_eq!(profile.searches[0].frequency, 0.5);
        assert_eq!(profile.updates[0].frequency, 0.25);
        // At 30 ms bucket 0 leaves the window.
        let counts = profiler.search_counts(30).unwrap();
        assert_eq!(counts, BTreeMap::from([(b.clone(), 1)]));
        assert!(profiler.record_search(29, &a, 1).is_err());
        assert_eq!(profiler.profile(1000).unwrap(), WorkloadProfile::default());
    }

    #[test]
    fn evicts_the_least_frequent() {
        let mut profiler = Profiler::new(config(2)).unwrap();
        let shapes: Vec<SearchShape> = (0..3).map(|a| SearchShape::equalities([a])).collect();
        profiler.record_search(0, &shapes[0], 5).unwrap();
        profiler.record_search(0, &shapes[1], 1).unwrap();
        profiler.record_search(0, &shapes[2], 2).unwrap();
        assert_eq!(
            profiler.search_counts(0).unwrap(),
            BTreeMap::from([(shapes[0].clone(), 5), (shapes[2].clone(), 2)])
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert!(Profiler::new(ProfilerConfig {
            bucket_width_ms: 0,
            ..config(1)
        })
        .is_err());
        assert!(Profiler::new(config(0)).is_err());
        assert!(Profiler::new(ProfilerConfig {
            window_buckets: 0,
            ..config(1)
        })
        .is_err());
    }

    #[derive(Debug, Clone)]
    enum Event {
        Search(u16, u64),
        Update(u16, u64),
    }

    fn events() -> impl Strategy<Value = Vec<(u64, Event)>> {
        proptest::collection::vec(
            (
                0u64..25,
                prop_oneof![
                    (0u16..6, 0u64..4).prop_map(|(a, c)| Event::Search(a, c)),
                    (0u16..6, 0u64..4).prop_map(|(a, c)| Event::Update(a, c)),
                ],
            ),
            0..60,
        )
        .prop_map(|steps| {
            // Time steps forward by the drawn gaps.
            let mut now_ms = 0;
            steps
                .into_iter()
                .map(|(gap, event)| {
                    now_ms += gap;
                    (now_ms, event)
                })
                .collect()
        })
    }

    /// Naive recount of a log: operations in buckets `now - W + 1 ..= now`.
    fn recount(
        log: &[(u64, Event)],
        now_ms: u64,
        config: &ProfilerConfig,
    ) -> (BTreeMap<SearchShape, u64>, BTreeMap<AttributeSet, u64>) {
        let now_bucket = now_ms / config.bucket_width_ms;
        let mut searches = BTreeMap::new();
        let mut updates = BTreeMap::new();
        for (time_ms, event) in log {
            let bucket = time_ms / config.bucket_width_ms;
            if bucket + u64::from(config.window_buckets) <= now_bucket {
                continue;
            }
            match *event {
                Event::Search(attribute, count) if count > 0 => {
                    *searches
                        .entry(SearchShape::equalities([attribute]))
                        .or_insert(0) += count;
                }
                Event::Update(attribute, count) if count > 0 => {
                    *updates.entry(AttributeSet::from([attribute])).or_insert(0) += count;
                }
                _ => {}
            }
        }
        (searches, updates)
    }

    fn replay(profiler: &mut Profiler, log: &[(u64, Event)]) {
        for (now_ms, event) in log {
            match *event {
                Event::Search(attribute, count) => profiler
                    .record_search(*now_ms, &SearchShape::equalities([attribute]), count)
                    .unwrap(),
                Event::Update(attribute, count) => profiler
                    .record_update(*now_ms, &AttributeSet::from([attribute]), count)
                    .unwrap(),
            }
        }
    }

    proptest! {
        #[test]
        fn window_equals_naive_recount(log in events(), later in 0u64..40) {
            let config = config(ProfilerConfig::MAX_TRACKED_SETS);
            let mut profiler = Profiler::new(config).unwrap();
            replay(&mut profiler, &log);
            let now_ms = log.last().map_or(0, |(time, _)| *time) + later;
            let (searches, updates) = recount(&log, now_ms, &config);
            prop_assert_eq!(profiler.search_counts(now_ms).unwrap(), searches);
            prop_assert_eq!(profiler.update_counts(now_ms).unwrap(), updates);
        }

        #[test]
        fn bounded_tracking_never_over_counts(log in events(), max_tracked in 1usize..4) {
            let config = config(max_tracked);
            let mut profiler = Profiler::new(config).unwrap();
            replay(&mut profiler, &log);
            let now_ms = log.last().map_or(0, |(time, _)| *time);
            let (searches, updates) = recount(&log, now_ms, &config);
            let tracked_searches = profiler.search_counts(now_ms).unwrap();
            let tracked_updates = profiler.update_counts(now_ms).unwrap();
            prop_assert!(tracked_searches.len() <= max_tracked);
            prop_assert!(tracked_updates.len() <= max_tracked);
            for (shape, count) in &tracked_searches {
                prop_assert!(*count <= searches[shape]);
            }
            for (attributes, count) in &tracked_updates {
                prop_assert!(*count <= updates[attributes]);
            }
            // The most recent operation's set is tracked while it is in the window.
            if let Some((_, event)) = log.iter().rev().find(|(time_ms, event)| {
                matches!(event, Event::Search(_, c) | Event::Update(_, c) if *c > 0)
                    && time_ms / config.bucket_width_ms + u64::from(config.window_buckets)
                        > now_ms / config.bucket_width_ms
            }) {
                match *event {
                    Event::Search(attribute, _) => prop_assert!(
                        tracked_searches.contains_key(&SearchShape::equalities([attribute]))
                    ),
                    Event::Update(attribute, _) => prop_assert!(
                        tracked_updates.contains_key(&AttributeSet::from([attribute]))
                    ),
                }
            }
        }
    }
}
