//! Predicates on records, compiled against a schema, and their evaluation on each kind
//! of stage: as suffix-array probes on text stages (sorted batches, segments), as
//! n-gram-narrowed scans on log tables, and directly on decoded records (verification).

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::ops::Bound;

use crate::attr_layer::AttributeDemand;
use crate::codec;
use crate::error::{Result, StoreError};
use crate::memtable::{MemInner, MemTable};
use crate::schema::{AttrType, Schema, StoredRecord, Value};
use crate::stage::TextStage;

/// A condition on records. Attribute conditions are false on records that omit the
/// attribute. The key can be named like an attribute (its values are strings).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Predicate {
    /// Every record.
    All,
    /// Attribute equals the value.
    Eq(String, Value),
    /// Attribute equals one of the values.
    In(String, Vec<Value>),
    /// String attribute starts with the bytes.
    Prefix(String, Vec<u8>),
    /// String attribute ends with the bytes.
    Suffix(String, Vec<u8>),
    /// String attribute contains the bytes.
    Contains(String, Vec<u8>),
    /// Attribute between two bounds (numbers, timestamps, strings by bytes, bools).
    Range {
        /// Attribute name.
        attribute: String,
        /// Lower bound.
        lower: Bound<Value>,
        /// Upper bound.
        upper: Bound<Value>,
    },
    /// The record has the attribute.
    Exists(String),
    /// Some string attribute of the record contains the bytes.
    RecordContains(Vec<u8>),
    /// All of them hold.
    And(Vec<Predicate>),
    /// At least one holds.
    Or(Vec<Predicate>),
    /// The predicate does not hold (records without an attribute do not hold conditions
    /// on it, so they match its negation; wrap in `And` with `Exists` for SQL's NULLs).
    Not(Box<Predicate>),
}

/// A test on one value.
#[derive(Clone, Debug)]
enum Test {
    Eq(Value),
    In(Vec<Value>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Contains(Vec<u8>),
    Range(Bound<Value>, Bound<Value>),
    Exists,
}

/// A predicate with names resolved and types checked.
#[derive(Clone, Debug)]
pub enum Compiled {
    /// Every record.
    All,
    /// A test on attribute `id`.
    Attr(u16, TestBox),
    /// A test on the key.
    Key(TestBox),
    /// Some string attribute contains the bytes.
    RecordContains(Vec<u8>),
    /// Conjunction.
    And(Vec<Compiled>),
    /// Disjunction.
    Or(Vec<Compiled>),
    /// Negation (found by scanning and verifying).
    Not(Box<Compiled>),
}

/// An opaque compiled test (see [`Compiled`]).
#[derive(Clone, Debug)]
pub struct TestBox(Test);

/// Most nodes a predicate may have.
pub const MAX_PREDICATE_NODES: usize = 1024;

fn coerce(value: &Value, target: AttrType, attribute: &str) -> Result<Value> {
    match (value, target) {
        (v, t) if v.attr_type() == t => match v {
            Value::Float(f) if !f.is_finite() => Err(StoreError::InvalidQuery(format!(
                "{f} is not a finite number (attribute {attribute:?})"
            ))),
            Value::Float(f) if *f == 0.0 => Ok(Value::Float(0.0)),
            other => Ok(other.clone()),
        },
        (Value::Int(x), AttrType::Float) => Ok(Value::Float(*x as f64)),
        (Value::Int(x), AttrType::Timestamp) => Ok(Value::Timestamp(*x)),
        (v, t) => Err(StoreError::InvalidQuery(format!(
            "attribute {attribute:?} is a {}; a {} value cannot be compared with it",
            t.name(),
            v.attr_type().name()
        ))),
    }
}

fn compile_test(predicate: &Predicate, target: AttrType, attribute: &str) -> Result<Test> {
    let need_string = |what: &str| {
        if target == AttrType::String {
            Ok(())
        } else {
            Err(StoreError::InvalidQuery(format!(
                "{what} needs a string attribute; {attribute:?} is a {}",
                target.name()
            )))
        }
    };
    Ok(match predicate {
        Predicate::Eq(_, v) => Test::Eq(coerce(v, target, attribute)?),
        Predicate::In(_, vs) => {
            if vs.is_empty() {
                return Err(StoreError::InvalidQuery(format!(
                    "IN on {attribute:?} needs at least one value"
                )));
            }
            let vs: Result<Vec<Value>> = vs.iter().map(|v| coerce(v, target, attribute)).collect();
            Test::In(vs?)
        }
        Predicate::Prefix(_, p) => {
            need_string("prefix")?;
            Test::Prefix(p.clone())
        }
        Predicate::Suffix(_, s) => {
            need_string("suffix")?;
            Test::Suffix(s.clone())
        }
        Predicate::Contains(_, s) => {
            need_string("contains")?;
            Test::Contains(s.clone())
        }
        Predicate::Range { lower, upper, .. } => {
            let map = |b: &Bound<Value>| -> Result<Bound<Value>> {
                Ok(match b {
                    Bound::Included(v) => Bound::Included(coerce(v, target, attribute)?),
                    Bound::Excluded(v) => Bound::Excluded(coerce(v, target, attribute)?),
                    Bound::Unbounded => Bound::Unbounded,
                })
            };
            Test::Range(map(lower)?, map(upper)?)
        }
        Predicate::Exists(_) => Test::Exists,
        _ => unreachable!("compile_test is called on attribute predicates only"),
    })
}

fn count_nodes(predicate: &Predicate) -> usize {
    match predicate {
        Predicate::And(children) | Predicate::Or(children) => {
            1 + children.iter().map(count_nodes).sum::<usize>()
        }
        Predicate::Not(inner) => 1 + count_nodes(inner),
        Predicate::In(_, values) => 1 + values.len(),
        _ => 1,
    }
}

impl Compiled {
    /// Resolves names and checks types against `schema`.
    pub fn new(predicate: &Predicate, schema: &Schema) -> Result<Compiled> {
        let nodes = count_nodes(predicate);
        if nodes > MAX_PREDICATE_NODES {
            return Err(StoreError::InvalidQuery(format!(
                "the predicate has {nodes} nodes; the limit is {MAX_PREDICATE_NODES}"
            )));
        }
        Self::compile(predicate, schema)
    }

    fn compile(predicate: &Predicate, schema: &Schema) -> Result<Compiled> {
        Ok(match predicate {
            Predicate::All => Compiled::All,
            Predicate::RecordContains(s) => Compiled::RecordContains(s.clone()),
            Predicate::And(children) => Compiled::And(
                children
                    .iter()
                    .map(|c| Self::compile(c, schema))
                    .collect::<Result<_>>()?,
            ),
            Predicate::Or(children) => Compiled::Or(
                children
                    .iter()
                    .map(|c| Self::compile(c, schema))
                    .collect::<Result<_>>()?,
            ),
            Predicate::Not(inner) => Compiled::Not(Box::new(Self::compile(inner, schema)?)),
            Predicate::Eq(name, _)
            | Predicate::In(name, _)
            | Predicate::Prefix(name, _)
            | Predicate::Suffix(name, _)
            | Predicate::Contains(name, _)
            | Predicate::Range {
                attribute: name, ..
            }
            | Predicate::Exists(name) => {
                if *name == schema.key {
                    Compiled::Key(TestBox(compile_test(predicate, AttrType::String, name)?))
                } else {
                    let id = schema.require(name)?;
                    let target = schema.attributes[id as usize].attr_type;
                    Compiled::Attr(id, TestBox(compile_test(predicate, target, name)?))
                }
            }
        })
    }

    /// Whether `record` satisfies the predicate.
    pub fn matches(&self, record: &StoredRecord) -> bool {
        match self {
            Compiled::All => true,
            Compiled::Attr(id, test) => record.get(*id).is_some_and(|v| test.0.holds(v)),
            Compiled::Key(test) => test.0.holds(&Value::String(record.key.clone())),
            Compiled::RecordContains(s) => record.fields.iter().any(|(_, v)| match v {
                Value::String(bytes) => contains(bytes, s),
                _ => false,
            }),
            Compiled::And(children) => children.iter().all(|c| c.matches(record)),
            Compiled::Or(children) => children.iter().any(|c| c.matches(record)),
            Compiled::Not(inner) => !inner.matches(record),
        }
    }
}

impl Compiled {
    /// The attributes the predicate reads, ascending; `None` if it reads the key or
    /// every attribute (`RecordContains`), which a record of some fields cannot answer.
    pub fn attributes(&self) -> Option<Vec<u16>> {
        fn walk(compiled: &Compiled, out: &mut Vec<u16>) -> bool {
            match compiled {
                Compiled::All => true,
                Compiled::Attr(id, _) => {
                    out.push(*id);
                    true
                }
                Compiled::Key(_) | Compiled::RecordContains(_) => false,
                Compiled::And(children) | Compiled::Or(children) => {
                    children.iter().all(|c| walk(c, out))
                }
                Compiled::Not(inner) => walk(inner, out),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out).then(|| {
            out.sort_unstable();
            out.dedup();
            out
        })
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

impl Test {
    fn holds(&self, value: &Value) -> bool {
        use std::cmp::Ordering::*;
        let bytes = || match value {
            Value::String(b) => Some(b.as_slice()),
            _ => None,
        };
        match self {
            Test::Eq(v) => value.cmp_same_type(v) == Some(Equal),
            Test::In(vs) => vs.iter().any(|v| value.cmp_same_type(v) == Some(Equal)),
            Test::Prefix(p) => bytes().is_some_and(|b| b.starts_with(p)),
            Test::Suffix(s) => bytes().is_some_and(|b| b.ends_with(s)),
            Test::Contains(s) => bytes().is_some_and(|b| contains(b, s)),
            Test::Exists => true,
            Test::Range(lower, upper) => {
                let above = match lower {
                    Bound::Included(v) => matches!(value.cmp_same_type(v), Some(Greater | Equal)),
                    Bound::Excluded(v) => value.cmp_same_type(v) == Some(Greater),
                    Bound::Unbounded => true,
                };
                let below = match upper {
                    Bound::Included(v) => matches!(value.cmp_same_type(v), Some(Less | Equal)),
                    Bound::Excluded(v) => value.cmp_same_type(v) == Some(Less),
                    Bound::Unbounded => true,
                };
                above && below
            }
        }
    }
}

/// How one suffix-array range is found.
enum Probe {
    /// Entries whose suffix starts with the bytes.
    Prefix(Vec<u8>),
    /// From the first entry `>=` (or past) the lower bytes to the first entry `>=`
    /// (or past) the upper bytes; the flag says "past".
    Between((Vec<u8>, bool), (Vec<u8>, bool)),
}

/// How the records a text stage's probes find are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Every located occurrence is a distinct matching record.
    Exact,
    /// An occurrence counts when it starts at a character of the attribute's value (any
    /// string attribute's when `None`); a record may be found more than once.
    Occurrence {
        attribute: Option<u16>,
        may_split_escape: bool,
    },
    /// Each found record is decoded and the whole predicate evaluated.
    Record,
    /// Occurrences are placed as for `Occurrence`, then the records of those that count
    /// are decoded and the whole predicate evaluated (a conjunction planned on one of
    /// its substring conditions).
    OccurrenceThenRecord {
        attribute: Option<u16>,
        may_split_escape: bool,
    },
}

impl Check {
    /// The placement test located occurrences must pass: (attribute, may split escape).
    fn placement(self) -> Option<(Option<u16>, bool)> {
        match self {
            Check::Occurrence {
                attribute,
                may_split_escape,
            }
            | Check::OccurrenceThenRecord {
                attribute,
                may_split_escape,
            } => Some((attribute, may_split_escape)),
            Check::Exact | Check::Record => None,
        }
    }

    /// Whether found records are decoded and the whole predicate evaluated.
    fn verifies_records(self) -> bool {
        matches!(self, Check::Record | Check::OccurrenceThenRecord { .. })
    }
}

/// Probes that find a superset of a leaf's records, and how to check what they find.
struct LeafProbes {
    probes: Vec<Probe>,
    check: Check,
    /// The attribute whose fields every probe's entries start at (exact probes on one
    /// attribute), so that an attribute layer can give their records.
    attribute: Option<u16>,
}

fn leaf_probes(compiled: &Compiled) -> Option<LeafProbes> {
    let exact = |probes, attribute| {
        Some(LeafProbes {
            probes,
            check: Check::Exact,
            attribute: Some(attribute),
        })
    };
    // Escaped patterns hold no marker before their end, so an occurrence lies within
    // one field and is placed by the field it starts in.
    let in_values = |pattern: Vec<u8>, attribute: Option<u16>| {
        let may_split_escape = codec::may_split_escape(pattern[0]);
        Some(LeafProbes {
            probes: vec![Probe::Prefix(pattern)],
            check: Check::Occurrence {
                attribute,
                may_split_escape,
            },
            attribute: None,
        })
    };
    match compiled {
        Compiled::Attr(id, TestBox(test)) => {
            let id = *id;
            match test {
                Test::Eq(v) => exact(vec![Probe::Prefix(codec::equals_pattern(id, v))], id),
                Test::In(vs) => {
                    let mut distinct: Vec<Vec<u8>> =
                        vs.iter().map(|v| codec::equals_pattern(id, v)).collect();
                    distinct.sort();
                    distinct.dedup();
                    exact(distinct.into_iter().map(Probe::Prefix).collect(), id)
                }
                Test::Prefix(p) => exact(
                    vec![Probe::Prefix(codec::value_prefix_pattern(
                        id,
                        &Value::String(p.clone()),
                    ))],
                    id,
                ),
                Test::Exists => exact(vec![Probe::Prefix(codec::field_start(id))], id),
                Test::Suffix(s) | Test::Contains(s) if s.is_empty() => {
                    exact(vec![Probe::Prefix(codec::field_start(id))], id)
                }
                Test::Suffix(s) => {
                    let mut pattern = codec::escape(s);
                    pattern.push(codec::MARK);
                    in_values(pattern, Some(id))
                }
                Test::Contains(s) => in_values(codec::escape(s), Some(id)),
                Test::Range(lower, upper) => {
                    let lower = match lower {
                        Bound::Included(v) => (codec::value_prefix_pattern(id, v), false),
                        Bound::Excluded(v) => (codec::equals_pattern(id, v), true),
                        Bound::Unbounded => (codec::field_start(id), false),
                    };
                    let upper = match upper {
                        Bound::Included(v) => (codec::equals_pattern(id, v), true),
                        Bound::Excluded(v) => (codec::equals_pattern(id, v), false),
                        Bound::Unbounded => (codec::field_start(id), true),
                    };
                    exact(vec![Probe::Between(lower, upper)], id)
                }
            }
        }
        Compiled::RecordContains(s) if !s.is_empty() => in_values(codec::escape(s), None),
        _ => None,
    }
}

/// Where a text stage's candidates come from.
enum Source {
    /// Every record.
    Scan,
    /// Suffix-array ranges, and/or given record numbers.
    Found {
        ranges: Vec<EntryRange>,
        records: Vec<u64>,
        check: Check,
    },
}

impl Source {
    fn cost(&self, stage: &dyn TextStage) -> u64 {
        match self {
            Source::Scan => stage.record_count().saturating_mul(4),
            Source::Found {
                ranges, records, ..
            } => ranges.iter().map(EntryRange::len).sum::<u64>() + records.len() as u64,
        }
    }
}

/// Suffix-array entries `start..end`; `attribute` when they all start at that
/// attribute's fields (an exact probe on it), so that its attribute layer, where the
/// stage holds one, gives their records without a walk.
#[derive(Clone, Copy, Debug)]
struct EntryRange {
    start: u64,
    end: u64,
    attribute: Option<u16>,
}

impl EntryRange {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

fn resolve(stage: &dyn TextStage, probe: &Probe) -> Result<(u64, u64)> {
    Ok(match probe {
        Probe::Prefix(p) => stage.entries_matching(p)?,
        Probe::Between((lo, lo_past), (hi, hi_past)) => {
            let at = |b: &[u8], past: bool| {
                if past {
                    stage.first_entry_past(b)
                } else {
                    stage.first_entry_at_least(b)
                }
            };
            let start = at(lo, *lo_past)?;
            let end = at(hi, *hi_past)?;
            (start, end.max(start))
        }
    })
}

fn plan_text(stage: &dyn TextStage, compiled: &Compiled) -> Result<Source> {
    if let Some(leaf) = leaf_probes(compiled) {
        let ranges = leaf
            .probes
            .iter()
            .map(|p| {
                let (start, end) = resolve(stage, p)?;
                Ok(EntryRange {
                    start,
                    end,
                    attribute: leaf.attribute,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok(Source::Found {
            ranges,
            records: Vec::new(),
            check: leaf.check,
        });
    }
    match compiled {
        Compiled::Key(TestBox(Test::Eq(Value::String(key)))) => Ok(Source::Found {
            ranges: Vec::new(),
            records: stage.find_key(key)?.into_iter().collect(),
            check: Check::Exact,
        }),
        Compiled::Key(TestBox(Test::In(values))) => {
            let mut records = Vec::new();
            for value in values {
                if let Value::String(key) = value {
                    records.extend(stage.find_key(key)?);
                }
            }
            records.sort_unstable();
            records.dedup();
            Ok(Source::Found {
                ranges: Vec::new(),
                records,
                check: Check::Exact,
            })
        }
        Compiled::And(children) => {
            let mut best = Source::Scan;
            let mut best_cost = u64::MAX;
            for child in children {
                let source = plan_text(stage, child)?;
                let cost = source.cost(stage);
                if cost < best_cost {
                    best_cost = cost;
                    best = source;
                }
            }
            Ok(match best {
                Source::Found {
                    ranges,
                    records,
                    check,
                } if children.len() > 1 => Source::Found {
                    ranges,
                    records,
                    check: match check.placement() {
                        Some((attribute, may_split_escape)) => Check::OccurrenceThenRecord {
                            attribute,
                            may_split_escape,
                        },
                        None => Check::Record,
                    },
                },
                other => other,
            })
        }
        Compiled::Or(children) => {
            let (mut all_ranges, mut all_records) = (Vec::new(), Vec::new());
            for child in children {
                match plan_text(stage, child)? {
                    Source::Scan => return Ok(Source::Scan),
                    Source::Found {
                        ranges, records, ..
                    } => {
                        all_ranges.extend(ranges);
                        all_records.extend(records);
                    }
                }
            }
            Ok(Source::Found {
                ranges: all_ranges,
                records: all_records,
                check: Check::Record,
            })
        }
        _ => Ok(Source::Scan),
    }
}

/// How many candidates the index finds for `compiled` on `stage` (suffix-array entries
/// and records by key); `None` when it finds none and the stage would be scanned.
pub(crate) fn candidate_entries(stage: &dyn TextStage, compiled: &Compiled) -> Result<Option<u64>> {
    Ok(match plan_text(stage, compiled)? {
        Source::Scan => None,
        found => Some(found.cost(stage)),
    })
}

/// Most entries located in the first step when a limit may stop early.
const LOCATE_CHUNK: u64 = 64;
/// Entries located together when a limited search spreads its locates over a range:
/// neighbours decode from the same Psi blocks in a walk's first steps.
const SPREAD_RUN_ENTRIES: u64 = 16;

/// Entries `start..end` in runs of `run_entries`, the runs in bit-reversed order of
/// their number (0, 1/2, 1/4, 3/4, ... of the range): every prefix of the order is an
/// even sample of the range, and the whole order covers each entry once.
struct SpreadRuns {
    start: u64,
    end: u64,
    run_entries: u64,
    runs: u64,
    bits: u32,
    next: u64,
}

impl SpreadRuns {
    fn new(start: u64, end: u64, run_entries: u64) -> SpreadRuns {
        let run_entries = run_entries.max(1);
        let runs = (end.saturating_sub(start)).div_ceil(run_entries);
        SpreadRuns {
            start,
            end,
            run_entries,
            runs,
            bits: runs.next_power_of_two().trailing_zeros(),
            next: 0,
        }
    }
}

impl Iterator for SpreadRuns {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        // Numbers past `runs` are skipped: fewer than half of the 2^bits.
        while self.next < 1u64 << self.bits {
            let number = self.next;
            self.next += 1;
            let run = match self.bits {
                0 => 0,
                bits => number.reverse_bits() >> (64 - bits),
            };
            if run < self.runs {
                let start = self.start + run * self.run_entries;
                return Some((start, self.end.min(start + self.run_entries)));
            }
        }
        None
    }
}

/// What a search gives back of each record it finds.
#[derive(Clone, Copy, Debug)]
pub enum Want<'a> {
    /// Record numbers only (the caller names them by key).
    Keys,
    /// Whole records.
    Records,
    /// Records with at least these attributes (by id).
    Fields(&'a [u16]),
}

/// Records of a text stage that match at `snapshot`, at most `limit`, with the decoded
/// record as `want` says (or whole when verification decoded it anyway). Rows that
/// attribute predicates find are counted in `demand`.
pub fn search_text(
    stage: &dyn TextStage,
    compiled: &Compiled,
    types: &[AttrType],
    snapshot: u64,
    limit: usize,
    want: Want<'_>,
    demand: &AttributeDemand,
) -> Result<Vec<(u64, Option<StoredRecord>)>> {
    let source = plan_text(stage, compiled)?;
    let check = match &source {
        Source::Found { check, .. } => *check,
        Source::Scan if matches!(compiled, Compiled::All) => Check::Exact,
        Source::Scan => Check::Record,
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let none_deleted = stage.deletions().none();
    // Adds `record` if it is live and matches; false once the limit is reached.
    let consider = |record: u64,
                    out: &mut Vec<(u64, Option<StoredRecord>)>,
                    seen: &mut HashSet<u64>|
     -> Result<bool> {
        if out.len() >= limit {
            return Ok(false);
        }
        if (check != Check::Exact && !seen.insert(record))
            || !(none_deleted || stage.deletions().live_at(record, snapshot))
        {
            return Ok(true);
        }
        if let (Want::Fields(wanted), false, true) =
            (want, check.verifies_records(), limit > KEEP_MAX_ROWS)
        {
            // A long answer of a few columns reads only their fields (short answers read
            // whole records into the record cache instead, below).
            out.push((record, Some(stage.record_fields(record, wanted, types)?)));
        } else if check.verifies_records() || !matches!(want, Want::Keys) {
            // A long answer (or a count) is a scan and is not kept in a record cache; a
            // short answer is, with the few candidates it verifies (extracting one costs
            // far more than caching it, and the cache's policy admits one-off entries
            // cold, so they leave first).
            let decoded = if limit > KEEP_MAX_ROWS {
                stage.record(record, types)?
            } else {
                stage.record_kept(record, types)?
            };
            if check.verifies_records() && !compiled.matches(&decoded) {
                return Ok(true);
            }
            out.push((record, Some(decoded)));
        } else {
            out.push((record, None));
        }
        Ok(out.len() < limit)
    };
    match source {
        Source::Scan => {
            for record in 0..stage.record_count() {
                if !consider(record, &mut out, &mut seen)? {
                    break;
                }
            }
        }
        Source::Found {
            ranges, records, ..
        } => {
            'records: for record in records {
                if !consider(record, &mut out, &mut seen)? {
                    break 'records;
                }
            }
            // With a limit, locate just enough entries (most are live matches), then as
            // many more as the matches found per entry so far say are needed.
            let mut chunk = (limit as u64).clamp(1, LOCATE_CHUNK);
            let mut located_entries = 0u64;
            'ranges: for range in ranges {
                let layer = range
                    .attribute
                    .and_then(|attribute| stage.attribute_layer(attribute))
                    .filter(|layer| layer.covers(range.start, range.end));
                if let Some(layer) = layer {
                    // Every record at once, from the layer: no walk to stop early. The
                    // answer's size is known, so it is allocated once (growing it by
                    // doubling copied it about twice over).
                    let entries = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
                    out.reserve(entries.min(limit.saturating_sub(out.len())));
                    let mut entry = range.start;
                    while entry < range.end {
                        let more = consider(layer.record(entry), &mut out, &mut seen)?;
                        entry += 1;
                        if !more {
                            break;
                        }
                    }
                    demand.record(layer.attribute(), entry - range.start, true);
                    if entry < range.end || out.len() >= limit {
                        break 'ranges;
                    }
                    continue;
                }
                // Under a limit the entries are taken spread over the range: entries
                // next to each other share what follows the pattern, and whether an
                // occurrence counts (its attribute) depends on that, so a prefix of the
                // range can hold almost none of the matches that a spread sample finds.
                let run_entries = if limit == usize::MAX {
                    range.end - range.start
                } else {
                    SPREAD_RUN_ENTRIES
                };
                let mut spread = SpreadRuns::new(range.start, range.end, run_entries);
                loop {
                    let (mut runs, mut entries) = (Vec::new(), 0u64);
                    while entries < chunk || limit == usize::MAX {
                        let Some((start, end)) = spread.next() else {
                            break;
                        };
                        runs.push((start, end));
                        entries += end - start;
                    }
                    if runs.is_empty() {
                        break;
                    }
                    if let Some(attribute) = range.attribute {
                        demand.record(attribute, entries, false);
                    }
                    located_entries += entries;
                    let located = stage.locate(&runs)?;
                    // Occurrences in short fields cost an extract each to place: they
                    // are placed after the cheap ones, and only while those leave the
                    // answer short.
                    let mut unplaced = Vec::new();
                    for offset in located {
                        let record = stage.record_at(offset)?;
                        if let Some((attribute, may_split_escape)) = check.placement() {
                            if seen.contains(&record) {
                                continue;
                            }
                            match stage.value_attribute_at_cheaply(offset, may_split_escape)? {
                                Some(placed) if placement_counts(placed, attribute, types) => {}
                                Some(_) => continue,
                                None => {
                                    unplaced.push((offset, record));
                                    continue;
                                }
                            }
                        }
                        if !consider(record, &mut out, &mut seen)? {
                            break 'ranges;
                        }
                    }
                    if let Some((attribute, may_split_escape)) = check.placement() {
                        for (offset, record) in unplaced {
                            if seen.contains(&record)
                                || !occurrence_counts(
                                    stage,
                                    offset,
                                    attribute,
                                    may_split_escape,
                                    types,
                                )?
                            {
                                continue;
                            }
                            if !consider(record, &mut out, &mut seen)? {
                                break 'ranges;
                            }
                        }
                    }
                    chunk = next_locate_chunk(chunk, limit - out.len(), out.len(), located_entries);
                }
            }
        }
    }
    Ok(out)
}

/// Whether an occurrence at `offset` starts in a value of `attribute` (of any string
/// attribute when `None`).
fn occurrence_counts(
    stage: &dyn TextStage,
    offset: u64,
    attribute: Option<u16>,
    may_split_escape: bool,
    types: &[AttrType],
) -> Result<bool> {
    let placed = stage.value_attribute_at(offset, may_split_escape)?;
    Ok(placement_counts(placed, attribute, types))
}

/// Entries to locate next under a limit, `missing` rows short after `found` rows from
/// `located` entries: twice the last `chunk`, or fewer where the rows found per entry
/// so far say fewer will do (a quarter more than that estimate, and at least
/// [`LOCATE_CHUNK`]).
fn next_locate_chunk(chunk: u64, missing: usize, found: usize, located: u64) -> u64 {
    let doubled = chunk.saturating_mul(2);
    if found == 0 {
        return doubled;
    }
    let estimate = (missing as u64)
        .saturating_mul(located)
        .div_ceil(found as u64);
    estimate
        .saturating_add(estimate / 4)
        .clamp(LOCATE_CHUNK.min(doubled), doubled)
}

/// Whether an occurrence placed in the value of `placed` (in no value when `None`)
/// counts for `attribute` (any string attribute when `None`).
fn placement_counts(placed: Option<u16>, attribute: Option<u16>, types: &[AttrType]) -> bool {
    match (placed, attribute) {
        (None, _) => false,
        (Some(id), Some(wanted)) => id == wanted,
        (Some(id), None) => types.get(id as usize) == Some(&AttrType::String),
    }
}

/// Number of records of a text stage that match at `snapshot` (rows found by attribute
/// predicates counted in `demand`).
pub fn count_text(
    stage: &dyn TextStage,
    compiled: &Compiled,
    types: &[AttrType],
    snapshot: u64,
    demand: &AttributeDemand,
) -> Result<u64> {
    let exact_total = match (&plan_text(stage, compiled)?, compiled) {
        (_, Compiled::All) => Some(stage.record_count()),
        (
            Source::Found {
                ranges,
                records,
                check: Check::Exact,
            },
            _,
        ) if records.is_empty() => Some(ranges.iter().map(EntryRange::len).sum::<u64>()),
        _ => None,
    };
    match exact_total {
        Some(total) => {
            // Every occurrence is a distinct matching record; subtract deleted ones.
            let mut deleted_matching = 0;
            for record in stage.deletions().deleted_at(snapshot) {
                if compiled.matches(&stage.record(record, types)?) {
                    deleted_matching += 1;
                }
            }
            Ok(total - deleted_matching)
        }
        None => Ok(search_text(
            stage,
            compiled,
            types,
            snapshot,
            usize::MAX,
            Want::Keys,
            demand,
        )?
        .len() as u64),
    }
}

fn mem_candidates(table: &MemInner, compiled: &Compiled) -> Option<Vec<u64>> {
    if let Some(leaf) = leaf_probes(compiled) {
        let mut out = Vec::new();
        for probe in &leaf.probes {
            match probe {
                Probe::Prefix(p) => out.extend(table.candidates(p)?),
                Probe::Between(..) => return None,
            }
        }
        out.sort_unstable();
        out.dedup();
        return Some(out);
    }
    match compiled {
        Compiled::Key(TestBox(Test::Eq(Value::String(key)))) => {
            Some(table.keys.get(key).copied().into_iter().collect())
        }
        Compiled::And(children) => children
            .iter()
            .filter_map(|c| mem_candidates(table, c))
            .min_by_key(|c| c.len()),
        Compiled::Or(children) => {
            let mut out = Vec::new();
            for child in children {
                out.extend(mem_candidates(table, child)?);
            }
            out.sort_unstable();
            out.dedup();
            Some(out)
        }
        _ => None,
    }
}

/// Answers of at most this many rows keep their records in a record cache (see
/// [`TextStage::record_kept`]); longer ones are scans. A shard looks for one row beyond
/// the limit asked (it tells whether the answer was cut), so a page of 100 rows is
/// looked for as 101, and is kept.
const KEEP_MAX_ROWS: usize = 100 + 1;

/// Candidates a search checks in a log table under one hold of its lock. The committer
/// appends to the active table while searches read it, and every write of the node
/// waits for that append: a search holding the lock through a whole table of a second's
/// writes (thousands of records at a write-heavy mix) stalled every write behind it.
/// A table only grows, so positions found under one hold stay valid under the next.
const MEM_SCAN_CHUNK_RECORDS: usize = 256;

/// Visits the records of log table `table` written at or before `snapshot`, live at
/// it, and matching: at most `limit`, ascending. Returns how many were visited. The
/// table's lock is held for [`MEM_SCAN_CHUNK_RECORDS`] candidates at a time (`visit`
/// runs under it).
pub fn search_mem(
    table: &MemTable,
    compiled: &Compiled,
    snapshot: u64,
    limit: usize,
    mut visit: impl FnMut(&StoredRecord),
) -> usize {
    let candidates = {
        let inner = table.read();
        mem_candidates(&inner, compiled)
            .unwrap_or_else(|| (0..inner.records.len() as u64).collect())
    };
    let mut visited = 0;
    for chunk in candidates.chunks(MEM_SCAN_CHUNK_RECORDS) {
        let inner = table.read();
        for &record in chunk {
            if visited >= limit {
                return visited;
            }
            let i = record as usize;
            if inner.seqs[i] <= snapshot
                && table.deletions.live_at(record, snapshot)
                && compiled.matches(&inner.records[i])
            {
                visit(&inner.records[i]);
                visited += 1;
            }
        }
    }
    visited
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Attribute;

    /// A log table of 1,000 records over several scan chunks, some deleted, searched
    /// at snapshots and limits on both sides of chunk boundaries (also while records
    /// are appended between chunks): the keys visited equal a naive filter of the
    /// records in order.
    #[test]
    fn log_table_searches_in_chunks_equal_a_naive_filter() {
        let schema = Schema::new(
            "id",
            vec![Attribute {
                name: "city".into(),
                attr_type: AttrType::String,
            }],
        )
        .unwrap();
        let cities = [&b"antwerp"[..], b"boston", b"dublin"];
        let table = MemTable::new(1);
        let append = |i: u64| {
            let record = StoredRecord {
                key: format!("k{i:04}").into_bytes(),
                fields: vec![(0, Value::String(cities[(i * 7 % 3) as usize].to_vec()))],
            };
            let mut text = Vec::new();
            codec::push_record(&mut text, &record);
            table.append(i + 1, record, text);
        };
        let records = 1000u64;
        for i in 0..records {
            append(i);
        }
        // Every 5th record deleted by a later SCU (seq 2,000 + i).
        for i in (0..records).step_by(5) {
            table.deletions.mark(i, 2000 + i);
        }
        let predicates = [
            Predicate::Eq("city".into(), Value::String(b"boston".to_vec())),
            Predicate::Contains("city".into(), b"u".to_vec()),
            Predicate::All,
        ];
        let naive = |predicate: &Predicate, snapshot: u64, limit: usize| -> Vec<Vec<u8>> {
            (0..records)
                .filter(|&i| i < snapshot) // record i was written by SCU i + 1
                .filter(|&i| !(i % 5 == 0 && 2000 + i <= snapshot))
                .filter(|&i| {
                    let city = cities[(i * 7 % 3) as usize];
                    match predicate {
                        Predicate::Eq(_, Value::String(v)) => city == v.as_slice(),
                        Predicate::Contains(_, v) => city.windows(v.len()).any(|w| w == v),
                        _ => true,
                    }
                })
                .take(limit)
                .map(|i| format!("k{i:04}").into_bytes())
                .collect()
        };
        for predicate in &predicates {
            let compiled = Compiled::new(predicate, &schema).unwrap();
            for snapshot in [0, 1, 300, 999, 1000, 2500, 4000] {
                for limit in [0, 1, 100, 255, 256, 257, 600, usize::MAX] {
                    let mut keys = Vec::new();
                    let visited = search_mem(&table, &compiled, snapshot, limit, |record| {
                        keys.push(record.key.clone())
                    });
                    let expected = naive(predicate, snapshot, limit);
                    assert_eq!(keys, expected, "{predicate:?} at {snapshot}, limit {limit}");
                    assert_eq!(visited, expected.len());
                }
            }
        }
        // Records appended by another thread while scans run (between their lock
        // holds) are after the scans' snapshot: every answer is the one before them.
        let compiled = Compiled::new(&predicates[2], &schema).unwrap();
        let expected = naive(&predicates[2], 1000, usize::MAX);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| {
                for i in records..records + 3000 {
                    append(i);
                }
            });
            while !writer.is_finished() {
                let mut keys = Vec::new();
                search_mem(&table, &compiled, 1000, usize::MAX, |record| {
                    keys.push(record.key.clone())
                });
                assert_eq!(keys, expected, "a scan amid appends");
            }
        });
        assert_eq!(table.len(), records + 3000);
    }

    #[test]
    fn spread_runs_cover_every_entry_once_and_spread_every_prefix() {
        let cases = [
            (5, 5, 16),
            (1, 2, 16),
            (3, 100, 16),
            (0, 1000, 7),
            (0, 1024, 16),
            (100, 100 + 16 * 32, 16),
        ];
        for (start, end, run) in cases {
            let runs: Vec<(u64, u64)> = SpreadRuns::new(start, end, run).collect();
            let mut entries: Vec<u64> = runs.iter().flat_map(|&(s, e)| s..e).collect();
            entries.sort_unstable();
            assert_eq!(
                entries,
                (start..end).collect::<Vec<_>>(),
                "{start}..{end} by {run}"
            );
            // With a power of two of runs, the first k runs fall in k different k-ths
            // of the range.
            let count = runs.len() as u64;
            let mut k = 2;
            while k <= count && count.is_power_of_two() {
                let mut parts: Vec<u64> = runs[..k as usize]
                    .iter()
                    .map(|&(s, _)| (s - start) / run / (count / k))
                    .collect();
                parts.sort_unstable();
                assert_eq!(
                    parts,
                    (0..k).collect::<Vec<_>>(),
                    "{start}..{end}: first {k}"
                );
                k *= 2;
            }
        }
    }

    #[test]
    fn locate_chunks_follow_the_yield_within_doubling() {
        // Nothing found yet: twice as many.
        assert_eq!(next_locate_chunk(64, 100, 0, 64), 128);
        // 50 found in 1,000 entries, 50 missing: 1,000 more and a quarter, under 2 x 1,024.
        assert_eq!(next_locate_chunk(1024, 50, 50, 1000), 1250);
        // A high yield asks for few, but never fewer than the first chunk.
        assert_eq!(next_locate_chunk(64, 1, 60, 64), LOCATE_CHUNK);
        // A low yield is capped by doubling.
        assert_eq!(next_locate_chunk(256, 99, 1, 448), 512);
    }
}
