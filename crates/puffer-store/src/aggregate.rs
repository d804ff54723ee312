//! Aggregates computed where the records are: COUNT, SUM, MIN, MAX and AVG of the records
//! a predicate matches, whole or grouped by one attribute, answered as partial states
//! that the answers of other shards (and other nodes) merge into (`puffer-node`'s
//! `merged`), so that a scan ships one row per group instead of every record.
//!
//! A shard aggregates the columns of a column read (`crate::columns`: column layers
//! where held, the asked fields otherwise); a count grouped by one attribute over a
//! whole segment is answered from the suffix array instead (see
//! [`crate::shard::Shard::aggregate`]).

use std::cmp::Ordering::{Greater, Less};
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::columns::{Column, ColumnData};
use crate::query::Predicate;
use crate::schema::{AttrType, Value};
use crate::shard::{ReadOptions, SnapshotInfo};
use crate::stage::TextStage;

/// Most aggregates one query computes (each group holds a state of each).
pub const MAX_AGGREGATES: usize = 16;

/// Most groups a stage's suffix array is walked for: past it, the stage's records are
/// aggregated from their values instead (a locate per group stops paying).
pub const MAX_INDEX_GROUPS: usize = 4096;

/// One aggregate over the records of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Aggregate {
    /// `COUNT(*)`: the records.
    Rows,
    /// `COUNT(a)`: the records holding a value of `a`.
    Count(String),
    /// `SUM(a)` of an integer or float attribute.
    Sum(String),
    /// `AVG(a)` of an integer or float attribute.
    Avg(String),
    /// `MIN(a)`.
    Min(String),
    /// `MAX(a)`.
    Max(String),
}

impl Aggregate {
    /// The attribute it reads, if any.
    pub fn attribute(&self) -> Option<&str> {
        match self {
            Aggregate::Rows => None,
            Aggregate::Count(a)
            | Aggregate::Sum(a)
            | Aggregate::Avg(a)
            | Aggregate::Min(a)
            | Aggregate::Max(a) => Some(a),
        }
    }

    /// The state of a group that has seen no record yet.
    fn empty_state(&self) -> AggregateState {
        match self {
            Aggregate::Rows | Aggregate::Count(_) => AggregateState::Count(0),
            Aggregate::Sum(_) | Aggregate::Avg(_) => AggregateState::Sum {
                int: 0,
                float: 0.0,
                values: 0,
            },
            Aggregate::Min(_) => AggregateState::Min(None),
            Aggregate::Max(_) => AggregateState::Max(None),
        }
    }
}

/// A time bucket a timestamp group is cut to, in UTC, as SQL's `date_trunc` cuts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeBucket {
    Second,
    Minute,
    Hour,
    Day,
    /// Weeks starting on Monday.
    Week,
    Month,
    Quarter,
    Year,
}

impl TimeBucket {
    /// The bucket `date_trunc` names `unit` (case-insensitive), if it is one of these.
    pub fn of_unit(unit: &str) -> Option<TimeBucket> {
        Some(match unit.to_ascii_lowercase().as_str() {
            "second" => TimeBucket::Second,
            "minute" => TimeBucket::Minute,
            "hour" => TimeBucket::Hour,
            "day" => TimeBucket::Day,
            "week" => TimeBucket::Week,
            "month" => TimeBucket::Month,
            "quarter" => TimeBucket::Quarter,
            "year" => TimeBucket::Year,
            _ => return None,
        })
    }

    /// The start of the bucket holding `micros` (microseconds since the epoch, UTC);
    /// `None` where it is before the earliest timestamp (within a year of `i64::MIN`).
    pub fn truncate(self, micros: i64) -> Option<i64> {
        const SECOND: i64 = 1_000_000;
        const DAY: i64 = 86_400 * SECOND;
        let floor = |unit: i64| micros.div_euclid(unit).checked_mul(unit);
        let days = micros.div_euclid(DAY);
        let civil_start = |month_of: fn(i64) -> i64| {
            let (year, month, _) = crate::timestamp::civil_from_days(days);
            crate::timestamp::days_from_civil(year, month_of(month), 1).checked_mul(DAY)
        };
        match self {
            TimeBucket::Second => floor(SECOND),
            TimeBucket::Minute => floor(60 * SECOND),
            TimeBucket::Hour => floor(3600 * SECOND),
            TimeBucket::Day => floor(DAY),
            // 1970-01-01 was a Thursday: Monday is 3 days before it.
            TimeBucket::Week => (days - (days + 3).rem_euclid(7)).checked_mul(DAY),
            TimeBucket::Month => civil_start(|month| month),
            TimeBucket::Quarter => civil_start(|month| (month - 1) / 3 * 3 + 1),
            TimeBucket::Year => civil_start(|_| 1),
        }
    }
}

/// Aggregates of the records matching a predicate, optionally per value of one
/// attribute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregateQuery {
    /// Which records.
    pub predicate: Predicate,
    /// The attribute whose values make the groups (`None`: one group of every record).
    /// Not a float attribute (floats do not group exactly).
    pub group_by: Option<String>,
    /// Where the groups are of a timestamp attribute's time buckets (`date_trunc`), the
    /// bucket; `None`: of its values.
    pub bucket: Option<TimeBucket>,
    /// What each group answers, in order.
    pub aggregates: Vec<Aggregate>,
    /// Most records aggregated from their values: past it the answer is `truncated` and
    /// incomplete, and whoever asked refuses it (the bound a scan has).
    pub max_rows: usize,
    /// Freshness and snapshot.
    pub read: ReadOptions,
}

impl AggregateQuery {
    /// Refuses what a shard cannot aggregate: float groups, sums of non-numbers, more
    /// than [`MAX_AGGREGATES`] aggregates.
    pub fn check(&self, schema: &crate::Schema) -> crate::Result<()> {
        if self.aggregates.len() > MAX_AGGREGATES {
            return Err(crate::StoreError::InvalidQuery(format!(
                "{} aggregates asked at once; the most is {MAX_AGGREGATES}",
                self.aggregates.len()
            )));
        }
        let type_of = |name: &str| -> crate::Result<AttrType> {
            let id = schema.require(name)?;
            Ok(schema.attributes[id as usize].attr_type)
        };
        if let Some(group) = &self.group_by {
            let group_type = type_of(group)?;
            if group_type == AttrType::Float {
                return Err(crate::StoreError::InvalidQuery(format!(
                    "cannot group by float attribute {group}"
                )));
            }
            if self.bucket.is_some() && group_type != AttrType::Timestamp {
                return Err(crate::StoreError::InvalidQuery(format!(
                    "cannot cut attribute {group} into time buckets: it is not a timestamp"
                )));
            }
        }
        for aggregate in &self.aggregates {
            if let Aggregate::Sum(a) | Aggregate::Avg(a) = aggregate {
                if !matches!(type_of(a)?, AttrType::Int | AttrType::Float) {
                    return Err(crate::StoreError::InvalidQuery(format!(
                        "cannot sum attribute {a}: it is not a number"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The attributes a column read must bring: the group's, then each aggregate's,
    /// each once.
    pub fn columns(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let wanted = self
            .group_by
            .iter()
            .map(String::as_str)
            .chain(self.aggregates.iter().filter_map(Aggregate::attribute));
        for name in wanted {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        names
    }
}

/// One aggregate's partial state in one group; states of the same aggregate merge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AggregateState {
    /// Records (or values) counted.
    Count(u64),
    /// A sum: integers exactly, floats in `float`, and how many values it added (none:
    /// the sum is NULL).
    Sum { int: i128, float: f64, values: u64 },
    /// The least value seen.
    Min(Option<Value>),
    /// The greatest value seen.
    Max(Option<Value>),
}

impl AggregateState {
    fn merge(&mut self, other: &AggregateState) -> Result<(), String> {
        match (self, other) {
            (AggregateState::Count(a), AggregateState::Count(b)) => {
                *a = a.checked_add(*b).ok_or("a count overflows 64 bits")?;
            }
            (
                AggregateState::Sum { int, float, values },
                AggregateState::Sum {
                    int: more_int,
                    float: more_float,
                    values: more,
                },
            ) => {
                *int = int
                    .checked_add(*more_int)
                    .ok_or("a sum overflows 128 bits")?;
                *float += more_float;
                *values = values
                    .checked_add(*more)
                    .ok_or("a count overflows 64 bits")?;
            }
            (AggregateState::Min(a), AggregateState::Min(b)) => keep(a, b.as_ref(), Less),
            (AggregateState::Max(a), AggregateState::Max(b)) => keep(a, b.as_ref(), Greater),
            (a, b) => return Err(format!("aggregate states {a:?} and {b:?} do not merge")),
        }
        Ok(())
    }
}

/// Replaces `held` by row `row` of `column` (which holds a value there) where the row
/// compares `wanted` to it; the value is copied out only then.
fn keep_row(held: &mut Option<Value>, column: &Column, row: usize, wanted: std::cmp::Ordering) {
    let order = match (&*held, &column.data) {
        (None, _) => None,
        (Some(Value::Int(h) | Value::Timestamp(h)), ColumnData::Ints(v)) => Some(v[row].cmp(h)),
        (Some(Value::Float(h)), ColumnData::Floats(v)) => v[row].partial_cmp(h),
        (Some(Value::Bool(h)), ColumnData::Bools(v)) => Some(v[row].cmp(h)),
        (Some(Value::String(h)), ColumnData::Bytes { ends, bytes }) => {
            let start = if row == 0 { 0 } else { ends[row - 1] };
            Some(bytes[start..ends[row]].cmp(h.as_slice()))
        }
        (Some(_), _) => return, // another type: the column's value never replaces it
    };
    if order.is_none_or(|order| order == wanted) {
        *held = column.value(row);
    }
}

/// Replaces `held` by `seen` where `seen` compares `wanted` to it.
fn keep(held: &mut Option<Value>, seen: Option<&Value>, wanted: std::cmp::Ordering) {
    if let Some(seen) = seen {
        let replace = match held {
            None => true,
            Some(held) => seen.cmp_same_type(held) == Some(wanted),
        };
        if replace {
            *held = Some(seen.clone());
        }
    }
}

/// A shard's (or several merged shards') aggregates: one entry per group, by the
/// group's value (`None`: records lacking the attribute, or the one group of an
/// ungrouped query, which is there even when no record matched).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AggregateResult {
    /// Each group's value and its states, in the order of the query's aggregates.
    pub groups: Vec<(Option<Value>, Vec<AggregateState>)>,
    /// Records aggregated from their values (not those counted from the index).
    pub rows: usize,
    /// Whether more than `max_rows` records matched (the states are then incomplete).
    pub truncated: bool,
    /// The snapshot read.
    pub snapshot: SnapshotInfo,
}

/// A group's value as a hash key (floats never group).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum GroupKey {
    Absent,
    Int(i64),
    Bool(bool),
    Bytes(Vec<u8>),
}

impl GroupKey {
    fn of_value(value: Option<&Value>) -> Option<GroupKey> {
        Some(match value {
            None => GroupKey::Absent,
            Some(Value::Int(i) | Value::Timestamp(i)) => GroupKey::Int(*i),
            Some(Value::Bool(b)) => GroupKey::Bool(*b),
            Some(Value::String(s)) => GroupKey::Bytes(s.clone()),
            Some(Value::Float(_)) => return None,
        })
    }
}

/// Groups under construction: their states and an index by key.
pub(crate) struct Groups<'q> {
    query: &'q AggregateQuery,
    index: HashMap<GroupKey, usize>,
    groups: Vec<(Option<Value>, Vec<AggregateState>)>,
}

impl<'q> Groups<'q> {
    pub(crate) fn new(query: &'q AggregateQuery) -> Groups<'q> {
        let mut groups = Groups {
            query,
            index: HashMap::new(),
            groups: Vec::new(),
        };
        if query.group_by.is_none() {
            groups.group(GroupKey::Absent, None);
        }
        groups
    }

    fn group(&mut self, key: GroupKey, value: Option<Value>) -> usize {
        let next = self.groups.len();
        *self.index.entry(key).or_insert_with(|| {
            let states = self
                .query
                .aggregates
                .iter()
                .map(Aggregate::empty_state)
                .collect();
            self.groups.push((value, states));
            next
        })
    }

    /// Adds `count` records whose group value is `value` to `Rows` counts only (what
    /// a count from the index knows of them).
    pub(crate) fn add_counted(&mut self, value: Option<Value>, count: u64) -> crate::Result<()> {
        let key = GroupKey::of_value(value.as_ref())
            .ok_or_else(|| crate::StoreError::InvalidQuery("cannot group by a float".into()))?;
        let group = self.group(key, value);
        for (aggregate, state) in self.query.aggregates.iter().zip(&mut self.groups[group].1) {
            match (aggregate, state) {
                (Aggregate::Rows, AggregateState::Count(n)) => *n += count,
                _ => {
                    return Err(crate::StoreError::InvalidQuery(
                        "only COUNT(*) is counted from the index".into(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Adds every row of `columns` (the query's [`AggregateQuery::columns`], in order).
    /// Values are compared where they lie in the columns; a group's value or a new
    /// minimum is copied out only when it is new.
    pub(crate) fn add_columns(&mut self, columns: &[Column], rows: usize) -> crate::Result<()> {
        let column = |name: &str| -> crate::Result<&Column> {
            columns.iter().find(|c| c.name == name).ok_or_else(|| {
                crate::StoreError::InvalidQuery(format!("no column {name} was read"))
            })
        };
        let row_groups: Vec<usize> = match &self.query.group_by {
            None => vec![0; rows],
            Some(name) => self.row_groups(column(name)?, rows)?,
        };
        for (i, aggregate) in self.query.aggregates.iter().enumerate() {
            let source = aggregate.attribute().map(column).transpose()?;
            let Some(source) = source else {
                for &group in &row_groups {
                    if let AggregateState::Count(n) = &mut self.groups[group].1[i] {
                        *n += 1;
                    }
                }
                continue;
            };
            for (row, &group) in row_groups.iter().enumerate() {
                if !source.valid[row] {
                    continue;
                }
                let state = &mut self.groups[group].1[i];
                match (state, &source.data) {
                    (AggregateState::Count(n), _) => *n += 1,
                    (AggregateState::Sum { int, values, .. }, ColumnData::Ints(v)) => {
                        *int += i128::from(v[row]);
                        *values += 1;
                    }
                    (AggregateState::Sum { float, values, .. }, ColumnData::Floats(v)) => {
                        *float += v[row];
                        *values += 1;
                    }
                    (AggregateState::Min(held), _) => keep_row(held, source, row, Less),
                    (AggregateState::Max(held), _) => keep_row(held, source, row, Greater),
                    (state, _) => {
                        return Err(crate::StoreError::InvalidQuery(format!(
                            "cannot aggregate column {} ({}) into {state:?}",
                            source.name,
                            source.attr_type.name()
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// The group of each of the first `rows` rows of column `by`, the groups made as
    /// met; each distinct value is looked up in the groups once.
    fn row_groups(&mut self, by: &Column, rows: usize) -> crate::Result<Vec<usize>> {
        let mut out = Vec::with_capacity(rows);
        let mut absent = None;
        match &by.data {
            ColumnData::Bytes { ends, bytes } => {
                let mut seen: HashMap<&[u8], usize> = HashMap::new();
                let mut start = 0;
                for row in 0..rows {
                    let value = &bytes[start..ends[row]];
                    start = ends[row];
                    let group = if !by.valid[row] {
                        *absent.get_or_insert_with(|| self.group(GroupKey::Absent, None))
                    } else if let Some(&group) = seen.get(value) {
                        group
                    } else {
                        let group = self.group(
                            GroupKey::Bytes(value.to_vec()),
                            Some(Value::String(value.to_vec())),
                        );
                        seen.insert(value, group);
                        group
                    };
                    out.push(group);
                }
            }
            ColumnData::Ints(values) => {
                let mut seen: HashMap<i64, usize> = HashMap::new();
                let bucket = self.query.bucket;
                for (row, &value) in values.iter().enumerate().take(rows) {
                    let group = if !by.valid[row] {
                        *absent.get_or_insert_with(|| self.group(GroupKey::Absent, None))
                    } else {
                        let value = match bucket {
                            None => value,
                            Some(bucket) => bucket.truncate(value).ok_or_else(|| {
                                crate::StoreError::InvalidQuery(format!(
                                    "timestamp {value} us has no {bucket:?} bucket: it is too early"
                                ))
                            })?,
                        };
                        match seen.get(&value) {
                            Some(&group) => group,
                            None => {
                                let shown = match (bucket, by.value(row)) {
                                    (Some(_), _) => Some(Value::Timestamp(value)),
                                    (None, shown) => shown,
                                };
                                let group = self.group(GroupKey::Int(value), shown);
                                seen.insert(value, group);
                                group
                            }
                        }
                    };
                    out.push(group);
                }
            }
            ColumnData::Bools(values) => {
                let mut seen: [Option<usize>; 2] = [None, None];
                for (row, &value) in values.iter().enumerate().take(rows) {
                    let group = if !by.valid[row] {
                        *absent.get_or_insert_with(|| self.group(GroupKey::Absent, None))
                    } else {
                        *seen[usize::from(value)]
                            .get_or_insert_with(|| self.group(GroupKey::Bool(value), by.value(row)))
                    };
                    out.push(group);
                }
            }
            ColumnData::Floats(_) => {
                return Err(crate::StoreError::InvalidQuery(format!(
                    "cannot group by float attribute {}",
                    by.name
                )))
            }
        }
        Ok(out)
    }

    pub(crate) fn finish(
        self,
        rows: usize,
        truncated: bool,
        snapshot: SnapshotInfo,
    ) -> AggregateResult {
        AggregateResult {
            groups: self.groups,
            rows,
            truncated,
            snapshot,
        }
    }
}

impl AggregateResult {
    /// Merges `other` (the same query's answer from other records) into this one.
    pub fn merge(&mut self, other: AggregateResult) -> Result<(), String> {
        let mut index: HashMap<GroupKey, usize> = HashMap::with_capacity(self.groups.len());
        for (i, (value, _)) in self.groups.iter().enumerate() {
            let key = GroupKey::of_value(value.as_ref()).ok_or("a float group")?;
            index.insert(key, i);
        }
        for (value, states) in other.groups {
            let key = GroupKey::of_value(value.as_ref()).ok_or("a float group")?;
            match index.get(&key) {
                Some(&i) => {
                    let held = &mut self.groups[i].1;
                    if held.len() != states.len() {
                        return Err("answers with different aggregates do not merge".into());
                    }
                    for (held, state) in held.iter_mut().zip(&states) {
                        held.merge(state)?;
                    }
                }
                None => {
                    index.insert(key, self.groups.len());
                    self.groups.push((value, states));
                }
            }
        }
        self.rows += other.rows;
        self.truncated |= other.truncated;
        Ok(())
    }
}

/// A group's value (`None`: records lacking the attribute) and its records.
pub type GroupCount = (Option<Value>, u64);

/// The records of a sorted stage at `snapshot` counted per value of attribute `id`
/// (`None`: records lacking it), from the suffix array alone.
///
/// Every field is `MARK id value` in the text, so the suffixes of attribute `id`'s fields
/// are one interval of the suffix array in value order, and each value's records a
/// sub-interval of it (the pattern `codec::equals_pattern`). Walking it: the first
/// entry not yet counted is located, its record's value read, and that value's interval
/// found by a backward search; its length is the group's count, and the walk goes on
/// past it. Records deleted by `snapshot` are taken off their group. `None` (the caller
/// then reads the values instead) where the stage has more groups than pay (more than
/// [`MAX_INDEX_GROUPS`], or with a column layer of the attribute held, more than one per
/// 8,192 records), more than [`MAX_INDEX_GROUPS`] deleted records, or intervals that do
/// not tile the attribute's as they should.
pub fn index_group_counts(
    stage: &dyn TextStage,
    id: u16,
    types: &[AttrType],
    snapshot: u64,
) -> crate::Result<Option<Vec<GroupCount>>> {
    let (start, end) = stage.entries_matching(&codec::field_start(id))?;
    let (records, holding) = (stage.record_count(), end - start);
    // A group costs a locate, a field's extraction and a backward search (about 100 us,
    // measured on hotel bookings), what a column layer's values of some thousands of
    // records cost to decode and group: with a layer, the walk pays only for groups of
    // 8,192 records or more.
    let max_groups = match stage.column_layer(id) {
        Some(_) => usize::try_from(holding / 8192).unwrap_or(usize::MAX).max(1),
        None => MAX_INDEX_GROUPS,
    };
    let deleted = stage.deletions().deleted_at(snapshot);
    if deleted.len() > MAX_INDEX_GROUPS {
        return Ok(None); // each is looked up among the groups: read the values instead
    }
    let value_of = |record: u64| -> crate::Result<Option<Value>> {
        let fields = stage.record_fields(record, &[id], types)?;
        Ok(fields.get(id).cloned())
    };
    let mut counts: Vec<GroupCount> = Vec::new();
    let mut at = start;
    while at < end {
        if counts.len() >= max_groups {
            return Ok(None);
        }
        let offset = stage.locate(&[(at, at + 1)])?;
        let Some(&offset) = offset.first() else {
            return Ok(None);
        };
        let Some(value) = value_of(stage.record_at(offset)?)? else {
            return Ok(None);
        };
        let (first, past) = stage.entries_matching(&codec::equals_pattern(id, &value))?;
        if first != at || past <= at || past > end {
            return Ok(None);
        }
        counts.push((Some(value), past - first));
        at = past;
    }
    if holding < records {
        counts.push((None, records - holding));
    }
    for record in deleted {
        let value = value_of(record)?;
        match counts.iter_mut().find(|(v, _)| *v == value) {
            Some((_, count)) if *count > 0 => *count -= 1,
            _ => return Ok(None),
        }
    }
    counts.retain(|(_, count)| *count > 0);
    Ok(Some(counts))
}

#[cfg(test)]
mod tests {
    use super::TimeBucket;

    const BUCKETS: [TimeBucket; 8] = [
        TimeBucket::Second,
        TimeBucket::Minute,
        TimeBucket::Hour,
        TimeBucket::Day,
        TimeBucket::Week,
        TimeBucket::Month,
        TimeBucket::Quarter,
        TimeBucket::Year,
    ];

    #[test]
    fn buckets_start_at_or_before_their_values_and_the_extremes_do_not_overflow() {
        for bucket in BUCKETS {
            // 2024-02-29T13:45:07.5Z, a Thursday, and one before the epoch.
            for micros in [1_709_214_307_500_000, -1_709_214_307_500_000, 0, -1] {
                let start = bucket.truncate(micros).unwrap();
                assert!(start <= micros, "{bucket:?} {micros}: {start}");
                assert_eq!(bucket.truncate(start), Some(start), "{bucket:?} {micros}");
            }
            assert_eq!(bucket.truncate(i64::MIN), None, "{bucket:?}");
            assert!(bucket.truncate(i64::MAX).is_some(), "{bucket:?}");
        }
        // Monday 2024-02-26, 1 February, 1 January.
        let day = 86_400_000_000;
        assert_eq!(
            TimeBucket::Week.truncate(1_709_214_307_500_000),
            Some(19_779 * day)
        );
        assert_eq!(
            TimeBucket::Month.truncate(1_709_214_307_500_000),
            Some(19_754 * day)
        );
        assert_eq!(
            TimeBucket::Year.truncate(1_709_214_307_500_000),
            Some(19_723 * day)
        );
    }
}
