//! Time-partitioned tables, as Druid's: a table created `PARTITION BY DAY(ts)` keeps
//! no records itself; each record goes to the *chunk* of its timestamp, a table of its
//! own named `<table>__<YYYYMMDD[HH]>` (or `__<YYYYMM>`), made when the first record of
//! that time arrives. A chunk is an ordinary table (its shards are what a cluster
//! places and replicates), so writes over several chunks are one SCU like any write
//! over several tables, and a read of the table reads the chunks its time condition can
//! match, at one snapshot.
//!
//! A key is unique within a chunk: a put replaces the record of that key in the chunk
//! of its timestamp (as in TimescaleDB, whose unique keys must include the time); a
//! get answers the record of the newest chunk holding the key; a delete removes the key
//! from every chunk.

use std::ops::Bound;

use puffer_query::{Granularity, QueryError, Result, TimePartition};
use puffer_store::timestamp::{civil_from_days, days_from_civil};
use puffer_store::{AttrType, Predicate, Schema, Value};

use crate::layout::MAX_TABLE_NAME_BYTES;

/// Microseconds in an hour and in a day.
const HOUR_MICROS: i64 = 3_600_000_000;
const DAY_MICROS: i64 = 86_400_000_000;
/// Bytes a chunk's name adds to its table's: `__` and up to 10 digits.
pub const CHUNK_SUFFIX_BYTES: usize = 12;
/// Most chunks of one time-partitioned table (the database's table bound applies too).
pub const MAX_CHUNKS: usize = 1000;
/// Timestamps a time-partitioned table takes: years 1 to 9999 (a chunk's name has
/// four digits of year).
const FIRST_MICROS: i64 = -62_135_596_800_000_000;
const END_MICROS: i64 = 253_402_300_800_000_000;

/// Checks a partition of table `name` with `schema`: the attribute is a timestamp,
/// and the name leaves room for the chunks' suffix.
pub fn validate(name: &str, schema: &Schema, partition: &TimePartition) -> Result<()> {
    let attribute = schema
        .attributes
        .iter()
        .find(|a| a.name == partition.attribute)
        .ok_or_else(|| {
            QueryError::Invalid(format!(
                "PARTITION BY {}: the table has no attribute {:?}",
                partition.granularity.name(),
                partition.attribute
            ))
        })?;
    if attribute.attr_type != AttrType::Timestamp {
        return Err(QueryError::Invalid(format!(
            "PARTITION BY {}({}): the attribute is {:?}, not a timestamp",
            partition.granularity.name(),
            partition.attribute,
            attribute.attr_type
        )));
    }
    if name.len() + CHUNK_SUFFIX_BYTES > MAX_TABLE_NAME_BYTES {
        return Err(QueryError::Invalid(format!(
            "a time-partitioned table's name is at most {} bytes (its chunks add {CHUNK_SUFFIX_BYTES}); got {name:?}",
            MAX_TABLE_NAME_BYTES - CHUNK_SUFFIX_BYTES
        )));
    }
    if name.contains("__") {
        return Err(QueryError::Invalid(format!(
            "a time-partitioned table's name has no \"__\" (its chunks' names do); got {name:?}"
        )));
    }
    Ok(())
}

/// The chunk holding timestamp `micros`: its first microsecond. Errors outside years
/// 1 to 9999.
pub fn chunk_start(granularity: Granularity, micros: i64) -> Result<i64> {
    if !(FIRST_MICROS..END_MICROS).contains(&micros) {
        return Err(QueryError::Invalid(format!(
            "timestamp {} is outside the years 1 to 9999 a time-partitioned table takes",
            puffer_store::timestamp::format_timestamp_micros(micros)
        )));
    }
    Ok(match granularity {
        Granularity::Hour => micros.div_euclid(HOUR_MICROS) * HOUR_MICROS,
        Granularity::Day => micros.div_euclid(DAY_MICROS) * DAY_MICROS,
        Granularity::Month => {
            let (year, month, _) = civil_from_days(micros.div_euclid(DAY_MICROS));
            days_from_civil(year, month, 1) * DAY_MICROS
        }
    })
}

/// The first microsecond after the chunk that starts at `start`.
pub fn chunk_end(granularity: Granularity, start: i64) -> i64 {
    match granularity {
        Granularity::Hour => start + HOUR_MICROS,
        Granularity::Day => start + DAY_MICROS,
        Granularity::Month => {
            let (year, month, _) = civil_from_days(start.div_euclid(DAY_MICROS));
            let (year, month) = if month == 12 {
                (year + 1, 1)
            } else {
                (year, month + 1)
            };
            days_from_civil(year, month, 1) * DAY_MICROS
        }
    }
}

/// The name of table `table`'s chunk starting at `start`: `table__YYYYMMDDHH` (hours),
/// `table__YYYYMMDD` (days), `table__YYYYMM` (months).
pub fn chunk_name(table: &str, granularity: Granularity, start: i64) -> String {
    let (year, month, day) = civil_from_days(start.div_euclid(DAY_MICROS));
    let hour = start.rem_euclid(DAY_MICROS) / HOUR_MICROS;
    match granularity {
        Granularity::Hour => format!("{table}__{year:04}{month:02}{day:02}{hour:02}"),
        Granularity::Day => format!("{table}__{year:04}{month:02}{day:02}"),
        Granularity::Month => format!("{table}__{year:04}{month:02}"),
    }
}

/// The timestamps of `attribute` a record matching `predicate` can have, as an
/// inclusive range (`lo > hi`: none); conservative: a condition it cannot bound (on
/// other attributes, negations, text) leaves the whole line.
pub fn time_range(predicate: &Predicate, attribute: &str) -> (i64, i64) {
    const ALL: (i64, i64) = (i64::MIN, i64::MAX);
    let stamp = |value: &Value| match value {
        Value::Timestamp(micros) => Some(*micros),
        _ => None,
    };
    match predicate {
        Predicate::Eq(name, value) if name == attribute => match stamp(value) {
            Some(t) => (t, t),
            None => ALL,
        },
        Predicate::In(name, values) if name == attribute => {
            let stamps: Option<Vec<i64>> = values.iter().map(stamp).collect();
            match stamps {
                Some(stamps) if stamps.is_empty() => (1, 0),
                Some(stamps) => (
                    *stamps.iter().min().expect("not empty"),
                    *stamps.iter().max().expect("not empty"),
                ),
                None => ALL,
            }
        }
        Predicate::Range {
            attribute: name,
            lower,
            upper,
        } if name == attribute => {
            let lo = match lower {
                Bound::Included(v) => stamp(v).unwrap_or(i64::MIN),
                Bound::Excluded(v) => stamp(v).map_or(i64::MIN, |t| t.saturating_add(1)),
                Bound::Unbounded => i64::MIN,
            };
            let hi = match upper {
                Bound::Included(v) => stamp(v).unwrap_or(i64::MAX),
                Bound::Excluded(v) => stamp(v).map_or(i64::MAX, |t| t.saturating_sub(1)),
                Bound::Unbounded => i64::MAX,
            };
            (lo, hi)
        }
        Predicate::And(parts) => parts.iter().fold(ALL, |(lo, hi), p| {
            let (l, h) = time_range(p, attribute);
            (lo.max(l), hi.min(h))
        }),
        Predicate::Or(parts) => {
            let ranges: Vec<(i64, i64)> = parts
                .iter()
                .map(|p| time_range(p, attribute))
                .filter(|(l, h)| l <= h)
                .collect();
            if ranges.is_empty() {
                return (1, 0);
            }
            (
                ranges.iter().map(|r| r.0).min().expect("not empty"),
                ranges.iter().map(|r| r.1).max().expect("not empty"),
            )
        }
        _ => ALL,
    }
}

/// Whether the chunk starting at `start` holds any time of the inclusive range.
pub fn overlaps(granularity: Granularity, start: i64, (lo, hi): (i64, i64)) -> bool {
    lo <= hi && start <= hi && chunk_end(granularity, start) > lo
}

/// `predicate` as it reads on the chunk of `granularity` starting at `start`: its
/// conditions on time attribute `attribute` that every timestamp of the chunk meets
/// (a range covering the chunk, as most of a time-ranged read's chunks are) become
/// `All`. Every record of the chunk has a timestamp in it, so the answer is the same;
/// the store then answers the rest from its index alone, and checks no record's time.
pub fn within_chunk(
    predicate: &Predicate,
    attribute: &str,
    granularity: Granularity,
    start: i64,
) -> Predicate {
    let last = chunk_end(granularity, start) - 1;
    let covers_chunk = |p: &Predicate| match p {
        Predicate::Range { attribute: a, .. } if a == attribute => {
            let (lo, hi) = time_range(p, attribute);
            lo <= start && last <= hi
        }
        _ => false,
    };
    match predicate {
        p if covers_chunk(p) => Predicate::All,
        Predicate::And(parts) => {
            let mut kept: Vec<Predicate> = parts
                .iter()
                .map(|p| within_chunk(p, attribute, granularity, start))
                .filter(|p| !matches!(p, Predicate::All))
                .collect();
            match kept.len() {
                0 => Predicate::All,
                1 => kept.pop().expect("one part"),
                _ => Predicate::And(kept),
            }
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use puffer_store::timestamp::{format_timestamp_micros, parse_timestamp_micros};

    fn at(text: &str) -> i64 {
        parse_timestamp_micros(text).unwrap()
    }

    #[test]
    fn chunks_start_where_their_names_say_and_tile_the_line() {
        // Against the formatted time: a chunk's start formats as its hour, day or month
        // at zero, and every timestamp lies in [start, end).
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Years 1950 to 2100, and some before 1970 (negative microseconds).
            let micros = at("1950-01-01") + (state % (150 * 365 * DAY_MICROS as u64)) as i64;
            let text = format_timestamp_micros(micros);
            for granularity in [Granularity::Hour, Granularity::Day, Granularity::Month] {
                let start = chunk_start(granularity, micros).unwrap();
                let end = chunk_end(granularity, start);
                assert!(start <= micros && micros < end, "{text} {granularity:?}");
                let expected = match granularity {
                    Granularity::Hour => format!("{}:00:00Z", &text[..13]),
                    Granularity::Day => format!("{}T00:00:00Z", &text[..10]),
                    Granularity::Month => format!("{}-01T00:00:00Z", &text[..7]),
                };
                assert_eq!(format_timestamp_micros(start), expected, "{text}");
                // The next chunk starts where this one ends.
                assert_eq!(chunk_start(granularity, end).unwrap(), end);
            }
        }
        assert_eq!(
            chunk_name("wiki", Granularity::Hour, at("2015-09-12T13:05:00Z")),
            "wiki__2015091213"
        );
        assert_eq!(
            chunk_name("wiki", Granularity::Day, at("2015-09-12T13:05:00Z")),
            "wiki__20150912"
        );
        assert_eq!(
            chunk_name("wiki", Granularity::Month, at("2015-12-31T23:00:00Z")),
            "wiki__201512"
        );
        assert_eq!(
            chunk_end(Granularity::Month, at("2015-12-01")),
            at("2016-01-01")
        );
        assert!(chunk_start(Granularity::Day, i64::MAX).is_err());
        assert!(chunk_start(Granularity::Day, at("0001-01-01")).is_ok());
    }

    #[test]
    fn time_ranges_bound_every_matching_time() {
        let ts = |t: &str| Value::Timestamp(at(t));
        let range = |lower: Bound<Value>, upper: Bound<Value>| Predicate::Range {
            attribute: "ts".into(),
            lower,
            upper,
        };
        let city = Predicate::Eq("city".into(), Value::String(b"Lisbon".to_vec()));
        let cases = [
            (Predicate::All, (i64::MIN, i64::MAX)),
            (city.clone(), (i64::MIN, i64::MAX)),
            (
                Predicate::Eq("ts".into(), ts("2015-09-12T10:00:00Z")),
                (at("2015-09-12T10:00:00Z"), at("2015-09-12T10:00:00Z")),
            ),
            (
                Predicate::And(vec![
                    city.clone(),
                    range(
                        Bound::Included(ts("2015-09-12")),
                        Bound::Excluded(ts("2015-09-13")),
                    ),
                ]),
                (at("2015-09-12"), at("2015-09-13") - 1),
            ),
            (
                Predicate::Or(vec![
                    Predicate::Eq("ts".into(), ts("2015-09-01")),
                    Predicate::Eq("ts".into(), ts("2015-09-20")),
                ]),
                (at("2015-09-01"), at("2015-09-20")),
            ),
            (
                Predicate::Or(vec![Predicate::Eq("ts".into(), ts("2015-09-01")), city]),
                (i64::MIN, i64::MAX),
            ),
            (
                Predicate::Not(Box::new(Predicate::Eq("ts".into(), ts("2015-09-01")))),
                (i64::MIN, i64::MAX),
            ),
        ];
        for (predicate, expected) in cases {
            assert_eq!(time_range(&predicate, "ts"), expected, "{predicate:?}");
        }
        let day = at("2015-09-12");
        assert!(overlaps(Granularity::Day, day, (day - 1, day)));
        assert!(!overlaps(Granularity::Day, day, (day - 10, day - 1)));
        assert!(!overlaps(
            Granularity::Day,
            day,
            (day + DAY_MICROS, i64::MAX)
        ));
        assert!(!overlaps(Granularity::Day, day, (5, 4)));
    }

    /// The oracle: `predicate` on a record with timestamp `ts` in `ts` and `city`
    /// (the conditions the test draws).
    fn holds(predicate: &Predicate, ts: i64, city: &str) -> bool {
        let stamp = |v: &Value| match v {
            Value::Timestamp(t) => *t,
            other => panic!("not drawn: {other:?}"),
        };
        match predicate {
            Predicate::All => true,
            Predicate::Eq(a, Value::String(c)) if a == "city" => c == city.as_bytes(),
            Predicate::Range { lower, upper, .. } => {
                let above = match lower {
                    Bound::Included(v) => ts >= stamp(v),
                    Bound::Excluded(v) => ts > stamp(v),
                    Bound::Unbounded => true,
                };
                let below = match upper {
                    Bound::Included(v) => ts <= stamp(v),
                    Bound::Excluded(v) => ts < stamp(v),
                    Bound::Unbounded => true,
                };
                above && below
            }
            Predicate::And(parts) => parts.iter().all(|p| holds(p, ts, city)),
            Predicate::Or(parts) => parts.iter().any(|p| holds(p, ts, city)),
            other => panic!("not drawn: {other:?}"),
        }
    }

    #[test]
    fn a_predicate_within_a_chunk_answers_as_the_whole_one_does_on_its_records() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let base = at("2015-09-12T00:00:00Z");
        let mut simplified = 0;
        for _ in 0..3000 {
            let granularity =
                [Granularity::Hour, Granularity::Day, Granularity::Month][rng.gen_range(0..3)];
            let start = chunk_start(granularity, base + rng.gen_range(0..40) * DAY_MICROS).unwrap();
            let end = chunk_end(granularity, start);
            let span = end - start;
            // Bounds near the chunk's edges, inside and out, to the microsecond.
            let edge = |rng: &mut rand::rngs::StdRng| {
                let near = [start, end, start + span / 2][rng.gen_range(0..3)];
                let t = near + rng.gen_range(-2..=2) * [1, HOUR_MICROS][rng.gen_range(0..2)];
                match rng.gen_range(0..3) {
                    0 => Bound::Included(Value::Timestamp(t)),
                    1 => Bound::Excluded(Value::Timestamp(t)),
                    _ => Bound::Unbounded,
                }
            };
            let condition = |rng: &mut rand::rngs::StdRng| match rng.gen_range(0..4) {
                0 => Predicate::Eq("city".into(), Value::String(b"Oslo".to_vec())),
                1 => Predicate::Or(vec![
                    Predicate::Range {
                        attribute: "ts".into(),
                        lower: edge(rng),
                        upper: edge(rng),
                    },
                    Predicate::Eq("city".into(), Value::String(b"Lima".to_vec())),
                ]),
                _ => Predicate::Range {
                    attribute: "ts".into(),
                    lower: edge(rng),
                    upper: edge(rng),
                },
            };
            let predicate = match rng.gen_range(0..3) {
                0 => condition(&mut rng),
                _ => Predicate::And(
                    (0..rng.gen_range(1..4))
                        .map(|_| condition(&mut rng))
                        .collect(),
                ),
            };
            let on_chunk = within_chunk(&predicate, "ts", granularity, start);
            simplified += usize::from(on_chunk != predicate);
            for _ in 0..20 {
                let ts = [start, end - 1, rng.gen_range(start..end)][rng.gen_range(0..3)];
                let city = ["Oslo", "Lima"][rng.gen_range(0..2)];
                assert_eq!(
                    holds(&on_chunk, ts, city),
                    holds(&predicate, ts, city),
                    "{predicate:?} became {on_chunk:?}, at {ts} in the chunk from {start}"
                );
            }
        }
        // The test draws ranges covering their chunk often enough to mean something.
        assert!(simplified > 300, "only {simplified} predicates simplified");
    }
}
