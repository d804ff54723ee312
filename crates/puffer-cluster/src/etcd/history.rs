//! etcd's history: kept short by compacting it.
//!
//! etcd keeps every revision of every key until it is told to forget them. A cluster
//! makes revisions all the time (log groups, published segments, progress reports:
//! about a hundred a second under a steady write load), so an etcd that is never
//! compacted grows until it reaches its storage quota (2 GiB by default) and then
//! refuses every write, which stops the cluster. The ingest leader therefore compacts
//! it: it notes the current revision every [`mark_interval`] and compacts up to the
//! newest mark at least the retention old.
//!
//! Nothing in PufferDB reads an old revision (every read that needs one revision is a
//! single transaction, and nothing watches), so any retention works for PufferDB
//! itself; the default keeps five minutes for the operator's own `etcdctl watch
//! --rev`. Compaction is etcd-wide: clusters (or other programs) that share one etcd
//! share its history too, and a program that reads older revisions there needs a
//! longer retention (or 0, and compaction by etcd's own
//! `--auto-compaction-retention`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;

use super::Etcd;
use crate::error::Result;

/// How much history the ingest leader keeps by default.
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(300);
/// The longest retention a node accepts.
pub const MAX_HISTORY_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// Marks a retention is cut into: compaction lags the retention by at most a tenth.
const MARKS_PER_RETENTION: u32 = 10;

/// How often the current revision is noted for a `retention`: a tenth of it, at least
/// a second apart.
pub fn mark_interval(retention: Duration) -> Duration {
    (retention / MARKS_PER_RETENTION).max(Duration::from_secs(1))
}

/// Revisions noted over time, and the compaction they allow. Pure: fed with times and
/// revisions, it says where to compact.
#[derive(Debug)]
pub struct HistoryMarks {
    retention: Duration,
    /// (when, revision), oldest first, a [`mark_interval`] apart at least; none older
    /// than the newest mark past the retention, so at most [`MARKS_PER_RETENTION`] + 1.
    marks: VecDeque<(Instant, i64)>,
    /// The revision compacted to last (0: none yet).
    compacted: i64,
}

impl HistoryMarks {
    /// No marks yet, keeping `retention` of history.
    pub fn new(retention: Duration) -> HistoryMarks {
        HistoryMarks {
            retention,
            marks: VecDeque::new(),
            compacted: 0,
        }
    }

    /// Notes that the store was at `revision` at `at` (times never go back); returns
    /// the revision to compact to if there is a newer one than the last: the newest
    /// mark at least the retention old. A note less than [`mark_interval`] after the
    /// last mark is not kept, so however often it is called the marks stay few.
    pub fn note(&mut self, at: Instant, revision: i64) -> Option<i64> {
        let spaced = |&(when, last): &(Instant, i64)| {
            revision > last && at.duration_since(when) >= mark_interval(self.retention)
        };
        if self.marks.back().is_none_or(spaced) {
            self.marks.push_back((at, revision));
        }
        let old_enough = |&(when, _): &(Instant, i64)| at.duration_since(when) >= self.retention;
        // Marks before the newest old-enough one are of no more use.
        while self.marks.len() >= 2 && old_enough(&self.marks[1]) {
            self.marks.pop_front();
        }
        let (_, target) = *self.marks.front().filter(|mark| old_enough(mark))?;
        (target > self.compacted).then_some(target)
    }

    /// Records that the store is compacted up to `revision`.
    pub fn compacted(&mut self, revision: i64) {
        self.compacted = self.compacted.max(revision);
    }

    /// Marks held (for tests of the bound).
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether no mark is held.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

/// etcd's current revision.
pub fn current_revision(etcd: &Etcd) -> Result<i64> {
    let root = etcd.keys().root().to_string();
    let response = etcd.call(move |mut client| async move {
        client
            .get(
                root,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
    })?;
    Ok(response.header().map_or(0, |header| header.revision()))
}

/// Compacts etcd's history up to `revision`: afterwards no revision older than it can
/// be read. Already compacted that far (by another node, or etcd's own compaction) is
/// done too; the answer says whether this call compacted.
pub fn compact(etcd: &Etcd, revision: i64) -> Result<bool> {
    etcd.call(move |mut client| async move {
        match client.compact(revision, None).await {
            Ok(_) => Ok(true),
            Err(e)
                if e.to_string()
                    .contains("required revision has been compacted") =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest revision noted at least `age` before `now`, among all notes.
    fn newest_noted_before(all: &[(Instant, i64)], now: Instant, age: Duration) -> i64 {
        all.iter()
            .filter(|&&(when, _)| now.checked_duration_since(when).is_some_and(|d| d >= age))
            .map(|&(_, revision)| revision)
            .max()
            .unwrap_or(0)
    }

    /// Against a scan of every note: a compaction never reaches a revision younger than
    /// the retention (safe), and lags it by at most a mark interval and the longest
    /// gap between notes (live).
    #[test]
    fn compactions_keep_the_retention_and_lag_it_little_as_a_scan_of_all_notes_says() {
        let start = Instant::now();
        for (retention_s, tick_ms) in [(30, 3_000), (30, 200), (5, 1_500), (300, 7_000)] {
            let retention = Duration::from_secs(retention_s);
            // Notes come at most two ticks apart.
            let lag = retention + mark_interval(retention) + 2 * Duration::from_millis(tick_ms);
            let mut marks = HistoryMarks::new(retention);
            let mut all = Vec::new();
            let (mut compacted, mut revision, mut state) = (0, 1, 7u64);
            for step in 0..3_000u64 {
                // Irregular ticks, revisions growing by 0 to 99.
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let at = start + Duration::from_millis(step * tick_ms + (state >> 33) % tick_ms);
                revision += ((state >> 20) % 100) as i64;
                all.push((at, revision));
                if let Some(target) = marks.note(at, revision) {
                    assert!(target > compacted, "went back: {target} after {compacted}");
                    let safe = newest_noted_before(&all, at, retention);
                    assert!(
                        target <= safe,
                        "{target} is younger than the retention ({safe})"
                    );
                    marks.compacted(target);
                    compacted = target;
                }
                let due = newest_noted_before(&all, at, lag);
                assert!(
                    compacted >= due,
                    "retention {retention_s} s, step {step}: compacted to {compacted}, {due} due"
                );
                assert!(
                    marks.len() <= MARKS_PER_RETENTION as usize + 1,
                    "{} marks",
                    marks.len()
                );
            }
            assert!(compacted > 0, "never compacted");
        }
    }

    #[test]
    fn nothing_is_compacted_before_the_retention_has_passed() {
        let start = Instant::now();
        let mut marks = HistoryMarks::new(Duration::from_secs(60));
        for s in 0..60 {
            assert_eq!(
                marks.note(start + Duration::from_secs(s), 100 + s as i64),
                None
            );
        }
        // Marks every 6 s: the one at 0 s is the newest a minute old.
        assert_eq!(marks.note(start + Duration::from_secs(60), 500), Some(100));
        marks.compacted(100);
        // Compacted further by someone else: nothing older is asked for.
        marks.compacted(140);
        assert_eq!(marks.note(start + Duration::from_secs(61), 501), None);
        assert_eq!(marks.note(start + Duration::from_secs(102), 502), Some(142));
    }

    #[test]
    fn the_mark_interval_is_a_tenth_of_the_retention_and_at_least_a_second() {
        assert_eq!(
            mark_interval(Duration::from_secs(300)),
            Duration::from_secs(30)
        );
        assert_eq!(
            mark_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
