//! DataFusion filters as the store's predicates, where the store can evaluate them on
//! the compressed text: comparisons, `BETWEEN`, `IN`, `LIKE` with a wildcard at either
//! end, `IS NOT NULL`, a boolean column and its `NOT`, `AND` and `OR` of those, on a
//! column and a literal of the column's own type.
//!
//! A predicate made here holds for every row the filter holds for. Where the whole
//! filter translated, it holds for exactly those rows (SQL's NULLs included: a record
//! without the attribute satisfies no comparison on it, in the store as in SQL), and the
//! filter is pushed as exact: DataFusion then neither applies it again nor asks for its
//! columns, so a `COUNT(*)` under it is a store count. Where only part translated (an
//! `AND` with a part the store cannot evaluate), the predicate holds for more rows and
//! the filter is pushed as inexact: DataFusion applies it again. Negations are not
//! pushed (the negation of a wider predicate is a narrower one).

use std::ops::Bound;

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use puffer_store::{AttrType, Predicate, Schema, Value};

/// How a filter is pushed to the store.
#[derive(Clone, Debug, PartialEq)]
pub struct Pushed {
    /// The store's predicate.
    pub predicate: Predicate,
    /// Whether it holds for exactly the rows the filter holds for (else: for more).
    pub exact: bool,
}

/// The conjunction of `predicates` (`All` for none).
pub fn all_of(mut predicates: Vec<Predicate>) -> Predicate {
    match predicates.len() {
        0 => Predicate::All,
        1 => predicates.pop().expect("one predicate"),
        _ => Predicate::And(predicates),
    }
}

/// The store predicate standing for `filter` on a table of `schema`, or `None` if the
/// store can evaluate none of it.
pub fn predicate_of(filter: &Expr, schema: &Schema) -> Option<Pushed> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else {
        return exact_predicate_of(filter, schema).map(|predicate| Pushed {
            predicate,
            exact: true,
        });
    };
    match op {
        Operator::And => {
            let sides = [predicate_of(left, schema), predicate_of(right, schema)];
            let exact = sides
                .iter()
                .all(|side| side.as_ref().is_some_and(|p| p.exact));
            let mut parts: Vec<Predicate> =
                sides.into_iter().flatten().map(|p| p.predicate).collect();
            let predicate = match parts.len() {
                0 => return None,
                1 => parts.pop().expect("one part"),
                _ => Predicate::And(parts),
            };
            Some(Pushed { predicate, exact })
        }
        Operator::Or => {
            let (left, right) = (predicate_of(left, schema)?, predicate_of(right, schema)?);
            Some(Pushed {
                exact: left.exact && right.exact,
                predicate: Predicate::Or(vec![left.predicate, right.predicate]),
            })
        }
        _ => Some(Pushed {
            predicate: comparison(left, *op, right, schema)?,
            exact: true,
        }),
    }
}

/// A filter on one column that the store evaluates exactly as SQL does.
fn exact_predicate_of(filter: &Expr, schema: &Schema) -> Option<Predicate> {
    match filter {
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let (column, kind) = column_of(expr, schema)?;
            Some(Predicate::Range {
                attribute: column.name.clone(),
                lower: Bound::Included(value_of(low, kind)?),
                upper: Bound::Included(value_of(high, kind)?),
            })
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let (column, kind) = column_of(expr, schema)?;
            let values = list
                .iter()
                .map(|item| value_of(item, kind))
                .collect::<Option<Vec<_>>>()?;
            Some(Predicate::In(column.name.clone(), values))
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let (column, kind) = column_of(expr, schema)?;
            if kind != AttrType::String {
                return None;
            }
            let Value::String(pattern) = value_of(pattern, AttrType::String)? else {
                return None;
            };
            like(&column.name, &pattern)
        }
        Expr::IsNotNull(expr) => {
            let (column, _) = column_of(expr, schema)?;
            Some(Predicate::Exists(column.name.clone()))
        }
        // A boolean column as the filter (`WHERE pets`), or its negation (`NOT pets`,
        // which a record without the attribute fails, as the equality does).
        Expr::Column(_) | Expr::Not(_) => {
            let (inner, wanted) = match filter {
                Expr::Not(inner) => (inner.as_ref(), false),
                column => (column, true),
            };
            match column_of(inner, schema)? {
                (column, AttrType::Bool) => {
                    Some(Predicate::Eq(column.name.clone(), Value::Bool(wanted)))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// `column op literal` (either way round) as a predicate.
fn comparison(left: &Expr, op: Operator, right: &Expr, schema: &Schema) -> Option<Predicate> {
    let (column, kind, literal, op) = match (column_of(left, schema), column_of(right, schema)) {
        (Some((column, kind)), None) => (column, kind, right, op),
        (None, Some((column, kind))) => (column, kind, left, op.swap()?),
        _ => return None,
    };
    let value = value_of(literal, kind)?;
    let attribute = column.name.clone();
    let range = |lower, upper| Predicate::Range {
        attribute: attribute.clone(),
        lower,
        upper,
    };
    Some(match op {
        Operator::Eq => Predicate::Eq(attribute.clone(), value),
        Operator::Lt => range(Bound::Unbounded, Bound::Excluded(value)),
        Operator::LtEq => range(Bound::Unbounded, Bound::Included(value)),
        Operator::Gt => range(Bound::Excluded(value), Bound::Unbounded),
        Operator::GtEq => range(Bound::Included(value), Bound::Unbounded),
        _ => return None,
    })
}

/// A `LIKE` pattern with `%` only at its ends and no `_` or escape: a prefix, suffix,
/// substring or whole-value test.
fn like(attribute: &str, pattern: &[u8]) -> Option<Predicate> {
    let starts = pattern.first() == Some(&b'%');
    let ends = pattern.len() > 1 && pattern.last() == Some(&b'%');
    let inner = &pattern[usize::from(starts)..pattern.len() - usize::from(ends)];
    if inner.is_empty() || inner.iter().any(|b| matches!(b, b'%' | b'_' | b'\\')) {
        return None;
    }
    let name = attribute.to_string();
    let inner = inner.to_vec();
    Some(match (starts, ends) {
        (false, false) => Predicate::Eq(name, Value::String(inner)),
        (false, true) => Predicate::Prefix(name, inner),
        (true, false) => Predicate::Suffix(name, inner),
        (true, true) => Predicate::Contains(name, inner),
    })
}

/// The column `expr` names, if it is a plain column of the table, and its type (the
/// key's values are strings).
fn column_of<'e>(expr: &'e Expr, schema: &Schema) -> Option<(&'e Column, AttrType)> {
    let Expr::Column(column) = expr else {
        return None;
    };
    if column.name == schema.key {
        return Some((column, AttrType::String));
    }
    let attribute = schema.attributes.iter().find(|a| a.name == column.name)?;
    Some((column, attribute.attr_type))
}

/// The literal `expr` as a value of type `kind`, if it is a non-NULL literal of that
/// type exactly (DataFusion has already cast literals to the column's type where the
/// types differ; what it could not cast is left to it).
fn value_of(expr: &Expr, kind: AttrType) -> Option<Value> {
    let Expr::Literal(scalar, _) = expr else {
        return None;
    };
    match (kind, scalar) {
        (AttrType::String, ScalarValue::Utf8(Some(s)))
        | (AttrType::String, ScalarValue::LargeUtf8(Some(s)))
        | (AttrType::String, ScalarValue::Utf8View(Some(s))) => {
            Some(Value::String(s.as_bytes().to_vec()))
        }
        (AttrType::Int, ScalarValue::Int64(Some(x))) => Some(Value::Int(*x)),
        (AttrType::Float, ScalarValue::Float64(Some(x))) if x.is_finite() => {
            // The store keeps -0.0 as 0.0.
            Some(Value::Float(if *x == 0.0 { 0.0 } else { *x }))
        }
        (AttrType::Bool, ScalarValue::Boolean(Some(b))) => Some(Value::Bool(*b)),
        (AttrType::Timestamp, ScalarValue::TimestampMicrosecond(Some(x), _)) => {
            Some(Value::Timestamp(*x))
        }
        _ => None,
    }
}
