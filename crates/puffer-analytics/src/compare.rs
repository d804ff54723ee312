//! Answers of two SQL engines brought to one form and compared: how the tests and
//! `puffer-bench analytics` check PufferDB's answers against SQLite's.

use puffer_store::Value;

/// One cell of an answer: timestamps and booleans as numbers (SQLite keeps them as
/// integers), strings as text (non-UTF-8 lossily).
#[derive(Clone, Debug, PartialEq, PartialOrd)]
pub enum Cell {
    /// NULL.
    Null,
    /// Any number.
    Number(f64),
    /// A string.
    Text(String),
}

impl Cell {
    /// A PufferDB value (`None`: NULL) as a cell.
    pub fn of_value(value: Option<&Value>) -> Cell {
        match value {
            None => Cell::Null,
            Some(Value::Int(x) | Value::Timestamp(x)) => Cell::Number(*x as f64),
            Some(Value::Float(x)) => Cell::Number(*x),
            Some(Value::Bool(b)) => Cell::Number(f64::from(u8::from(*b))),
            Some(Value::String(s)) => Cell::Text(String::from_utf8_lossy(s).into_owned()),
        }
    }
}

/// Whether two answers hold equal rows in the same order, numbers within a relative
/// 1e-9 (sums of floats differ in their last bits with the order they are added in).
pub fn same_rows(ours: &[Vec<Cell>], theirs: &[Vec<Cell>]) -> bool {
    let close = |a: &Cell, b: &Cell| match (a, b) {
        (Cell::Number(x), Cell::Number(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
        _ => a == b,
    };
    ours.len() == theirs.len()
        && ours
            .iter()
            .zip(theirs)
            .all(|(a, b)| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| close(x, y)))
}

/// `rows` in one order, for answers whose order the query leaves open.
pub fn sort_rows(rows: &mut [Vec<Cell>]) {
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_differing_in_a_value_a_type_an_order_or_a_count_are_not_the_same() {
        let row = |n: f64, t: &str| vec![Cell::Number(n), Cell::Text(t.into())];
        let ours = vec![row(1.0, "a"), row(0.1 + 0.2, "b")];
        assert!(same_rows(&ours, &[row(1.0, "a"), row(0.3, "b")]));
        assert!(!same_rows(&ours, &[row(1.0, "a"), row(0.31, "b")]));
        assert!(!same_rows(&ours, &[row(1.0, "a"), row(0.3, "c")]));
        assert!(!same_rows(&ours, &[row(0.3, "b"), row(1.0, "a")]));
        assert!(!same_rows(&ours, &[row(1.0, "a")]));
        assert!(!same_rows(&[vec![Cell::Null]], &[vec![Cell::Number(0.0)]]));
        let mut shuffled = vec![row(0.3, "b"), row(1.0, "a")];
        sort_rows(&mut shuffled);
        assert!(same_rows(&shuffled, &[row(0.3, "b"), row(1.0, "a")]));
        assert_eq!(Cell::of_value(Some(&Value::Bool(true))), Cell::Number(1.0));
        assert_eq!(Cell::of_value(None), Cell::Null);
    }
}
