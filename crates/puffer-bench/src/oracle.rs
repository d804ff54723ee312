//! What the benchmarks share to check answers: the order of values of one column, range
//! membership, and a bounded record of disagreements.

use std::ops::Bound;

use puffer_store::Value;

/// Disagreements kept with their description; the rest are only counted.
const MISMATCH_EXAMPLES: usize = 20;

/// Order of two values of one column (values of one column have one type).
pub fn order(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) | (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        // Finite, and -0.0 was made 0.0: total_cmp is the numeric order.
        (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        _ => panic!("values of one column have one type"),
    }
}

/// Whether `value` lies between the bounds.
pub fn within(value: &Value, lower: &Bound<Value>, upper: &Bound<Value>) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    let above = match lower {
        Bound::Included(bound) => order(value, bound) != Less,
        Bound::Excluded(bound) => order(value, bound) == Greater,
        Bound::Unbounded => true,
    };
    let below = match upper {
        Bound::Included(bound) => order(value, bound) != Greater,
        Bound::Excluded(bound) => order(value, bound) == Less,
        Bound::Unbounded => true,
    };
    above && below
}

/// Disagreements with the oracle: all counted, the first few described (and printed).
#[derive(Default)]
pub struct Mismatches {
    pub count: u64,
    pub examples: Vec<String>,
}

impl Mismatches {
    pub fn record(&mut self, what: String) {
        self.count += 1;
        if self.examples.len() < MISMATCH_EXAMPLES {
            eprintln!("mismatch: {what}");
            self.examples.push(what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_agrees_with_comparing_integers() {
        let bounds = |b: i64, kind: u8| match kind {
            0 => Bound::Included(Value::Int(b)),
            1 => Bound::Excluded(Value::Int(b)),
            _ => Bound::Unbounded,
        };
        for v in -3..=3i64 {
            for (lo, hi) in [(-1i64, 1i64), (0, 0), (2, -2)] {
                for (lk, hk) in [(0u8, 0u8), (0, 1), (1, 0), (1, 1), (2, 0), (0, 2), (2, 2)] {
                    let above = match lk {
                        0 => v >= lo,
                        1 => v > lo,
                        _ => true,
                    };
                    let below = match hk {
                        0 => v <= hi,
                        1 => v < hi,
                        _ => true,
                    };
                    assert_eq!(
                        within(&Value::Int(v), &bounds(lo, lk), &bounds(hi, hk)),
                        above && below,
                        "{v} in {lo}/{lk} .. {hi}/{hk}"
                    );
                }
            }
        }
    }

    #[test]
    fn mismatches_count_all_and_keep_the_first_few() {
        let mut m = Mismatches::default();
        for i in 0..30 {
            m.record(format!("m{i}"));
        }
        assert_eq!(m.count, 30);
        assert_eq!(m.examples.len(), MISMATCH_EXAMPLES);
        assert_eq!(m.examples[0], "m0");
    }
}
