//! The SQL front end: PufferDB's subset of SQL, parsed by `sqlparser`, turned into
//! [`Statement`]s. Anything outside the subset is refused with an error naming the
//! construct and where it is.
//!
//! The subset: `SELECT cols | * | COUNT(*) FROM t [WHERE ...] [LIMIT n] [FRESHNESS s]`
//! with `=`, `<>`, `<`, `<=`, `>`, `>=`, `BETWEEN`, `IN`, `LIKE` (`'x%'`, `'%x'`, `'%x%'`,
//! or no wildcard), `IS NOT NULL`, `AND`, `OR`, `NOT`; `INSERT INTO t (cols) VALUES ...`;
//! `DELETE FROM t WHERE key = ... | key IN (...)`; `CREATE TABLE t (col TYPE, ...,
//! PRIMARY KEY (col))`; `DROP TABLE t`; `SHOW TABLES`; `DESCRIBE t`.

use std::ops::Bound;
use std::time::Duration;

use puffer_store::timestamp::parse_timestamp_micros;
use puffer_store::{AttrType, Attribute, Predicate, Record, Schema, Value};
use sqlparser::ast::{self as sql, Spanned};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, Tokenizer};

use crate::ast::{Granularity, Output, Select, Statement, TimePartition};
use crate::error::{QueryError, Result};

/// Longest SQL text accepted, in bytes.
pub const MAX_SQL_BYTES: usize = 1 << 20;
/// Deepest nesting of expressions accepted (the parser refuses deeper input).
pub const MAX_SQL_DEPTH: usize = 64;
/// Longest freshness bound accepted, in seconds (ten years).
pub const MAX_FRESHNESS_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

/// Looks up a table's schema while translating (inserts and comparisons need types).
pub trait SchemaSource {
    /// The schema of `table`.
    fn schema_of(&self, table: &str) -> Result<std::sync::Arc<Schema>>;
}

/// Parses one SQL statement.
pub fn parse(text: &str, schemas: &dyn SchemaSource) -> Result<Statement> {
    if text.len() > MAX_SQL_BYTES {
        return Err(QueryError::Limit(format!(
            "the SQL text is {} bytes; the limit is {MAX_SQL_BYTES}",
            text.len()
        )));
    }
    if let Some(statement) = parse_subspace_statement(text)? {
        return Ok(statement);
    }
    let (text, freshness) = split_freshness(text)?;
    let dialect = GenericDialect {};
    let statements = Parser::new(&dialect)
        .with_recursion_limit(MAX_SQL_DEPTH)
        .try_with_sql(&text)
        .and_then(|mut parser| parser.parse_statements())
        .map_err(|e| syntax_error(e, &text))?;
    let [statement] = <[sql::Statement; 1]>::try_from(statements).map_err(|found| {
        QueryError::Invalid(format!("expected one SQL statement, found {}", found.len()))
    })?;
    let translated = translate(&statement, schemas, freshness)?;
    if freshness.is_some() && !matches!(translated, Statement::Select(_)) {
        return Err(unsupported(
            "FRESHNESS outside a SELECT",
            statement.span().start,
        ));
    }
    Ok(translated)
}

/// Line and column just past the end of `text` (where "unexpected end" errors are).
fn end_position(text: &str) -> (u64, u64) {
    let line = text.matches('\n').count() as u64 + 1;
    let last = text.rsplit('\n').next().unwrap_or("");
    (line, last.chars().count() as u64 + 1)
}

fn syntax_error(error: sqlparser::parser::ParserError, text: &str) -> QueryError {
    syntax_error_from_message(&error.to_string(), text)
}

/// A syntax error from a SQL parser's message (`... at Line: 3, Column: 7`, the form
/// sqlparser gives, also through DataFusion), placed where the message says, or at the
/// end of `text` when it names no place (the parser ran out of input).
pub fn syntax_error_from_message(message: &str, text: &str) -> QueryError {
    if message.contains("recursion limit") {
        return QueryError::Limit(format!("the SQL nests deeper than {MAX_SQL_DEPTH} levels"));
    }
    let number_after = |label: &str| {
        message
            .find(label)
            .map(|at| &message[at + label.len()..])
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(0)
    };
    let (line, column) = match (number_after("Line: "), number_after("Column: ")) {
        (0, _) => end_position(text),
        found => found,
    };
    QueryError::Syntax {
        line,
        column,
        message: message.trim_start_matches("sql parser error: ").to_string(),
    }
}

fn unsupported(construct: impl Into<String>, at: Location) -> QueryError {
    QueryError::Unsupported {
        construct: construct.into(),
        line: at.line,
        column: at.column,
    }
}

fn invalid(message: impl Into<String>) -> QueryError {
    QueryError::Invalid(message.into())
}

/// Removes a trailing `FRESHNESS <seconds>` clause (LazyBase's), returning the rest.
pub fn split_freshness(text: &str) -> Result<(String, Option<Duration>)> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| QueryError::Syntax {
            message: e.message.clone(),
            line: e.location.line,
            column: e.location.column,
        })?;
    let significant: Vec<_> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon))
        .collect();
    let position = significant.iter().position(|t| {
        matches!(&t.token, Token::Word(w) if w.quote_style.is_none()
            && w.value.eq_ignore_ascii_case("FRESHNESS"))
    });
    let Some(position) = position else {
        return Ok((text.to_string(), None));
    };
    let keyword = significant[position];
    let value = match significant.get(position + 1).map(|t| &t.token) {
        Some(Token::Number(n, _)) if position + 2 == significant.len() => n.clone(),
        _ => {
            return Err(unsupported(
                "FRESHNESS must end the statement and be followed by a number of seconds",
                keyword.span.start,
            ))
        }
    };
    let seconds: f64 = value
        .parse()
        .map_err(|_| invalid(format!("FRESHNESS {value} is not a number of seconds")))?;
    if !(0.0..=MAX_FRESHNESS_SECONDS).contains(&seconds) {
        return Err(invalid(format!(
            "FRESHNESS must be between 0 and {MAX_FRESHNESS_SECONDS} seconds; got {value}"
        )));
    }
    let cut = byte_offset(text, keyword.span.start);
    Ok((
        text[..cut].to_string(),
        Some(Duration::from_secs_f64(seconds)),
    ))
}

/// `ALTER TABLE t ADD SUBSPACE (a, b) [REGIONS n]` and `ALTER TABLE t DROP SUBSPACE s`,
/// which sqlparser does not know: `None` for any other statement.
fn parse_subspace_statement(text: &str) -> Result<Option<Statement>> {
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize_with_location() else {
        return Ok(None); // sqlparser reports it
    };
    let significant: Vec<_> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon))
        .collect();
    let keyword = |i: usize, word: &str| {
        matches!(significant.get(i).map(|t| &t.token),
            Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
    };
    if !(keyword(0, "ALTER") && keyword(1, "TABLE") && keyword(4, "SUBSPACE")) {
        return Ok(None);
    }
    let name = |i: usize, what: &str| -> Result<String> {
        match significant.get(i).map(|t| &t.token) {
            Some(Token::Word(w)) => Ok(w.value.clone()),
            _ => Err(invalid(format!(
                "ALTER TABLE ... SUBSPACE: expected {what}"
            ))),
        }
    };
    let table = name(2, "a table name after ALTER TABLE")?;
    if keyword(3, "DROP") {
        let subspace = name(5, "the subspace's name after DROP SUBSPACE")?;
        if significant.len() != 6 {
            return Err(invalid(
                "ALTER TABLE t DROP SUBSPACE s takes nothing after the subspace's name",
            ));
        }
        return Ok(Some(Statement::DropSubspace {
            table,
            name: subspace,
        }));
    }
    if !keyword(3, "ADD") {
        return Err(invalid(
            "ALTER TABLE t ADD SUBSPACE (a, b) [REGIONS n] or ALTER TABLE t DROP SUBSPACE s",
        ));
    }
    let shape = "ALTER TABLE t ADD SUBSPACE (a, b) [REGIONS n]";
    if !matches!(significant.get(5).map(|t| &t.token), Some(Token::LParen)) {
        return Err(invalid(format!(
            "{shape}: the attributes go in parentheses"
        )));
    }
    let mut attributes = Vec::new();
    let mut at = 6;
    loop {
        attributes.push(name(at, &format!("an attribute name ({shape})"))?);
        match significant.get(at + 1).map(|t| &t.token) {
            Some(Token::Comma) => at += 2,
            Some(Token::RParen) => {
                at += 2;
                break;
            }
            _ => {
                return Err(invalid(format!(
                    "{shape}: expected , or ) after an attribute"
                )))
            }
        }
    }
    let regions = if keyword(at, "REGIONS") {
        let n = match significant.get(at + 1).map(|t| &t.token) {
            Some(Token::Number(n, _)) => n
                .parse::<u32>()
                .map_err(|_| invalid(format!("REGIONS {n} is not a whole number of regions")))?,
            _ => return Err(invalid(format!("{shape}: REGIONS takes a number"))),
        };
        at += 2;
        Some(n)
    } else {
        None
    };
    if at != significant.len() {
        return Err(invalid(format!("{shape}: unexpected words at the end")));
    }
    Ok(Some(Statement::AddSubspace {
        table,
        attributes,
        regions,
    }))
}

/// Byte offset of a 1-based line and column (columns count characters).
fn byte_offset(text: &str, at: Location) -> usize {
    let (mut line, mut column) = (1, 1);
    for (offset, c) in text.char_indices() {
        if line == at.line && column == at.column {
            return offset;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    text.len()
}

fn translate(
    statement: &sql::Statement,
    schemas: &dyn SchemaSource,
    freshness: Option<Duration>,
) -> Result<Statement> {
    let at = statement.span().start;
    match statement {
        sql::Statement::Query(query) => translate_select(query, schemas, freshness),
        sql::Statement::Insert(insert) => translate_insert(insert, schemas),
        sql::Statement::Delete(delete) => translate_delete(delete, schemas),
        sql::Statement::CreateTable(create) => translate_create(create),
        sql::Statement::Drop {
            object_type: sql::ObjectType::Table,
            names,
            ..
        } => match names.as_slice() {
            [name] => Ok(Statement::DropTable {
                name: table_name(name)?,
            }),
            _ => Err(unsupported("DROP TABLE of several tables", at)),
        },
        sql::Statement::ShowTables { .. } => Ok(Statement::ShowTables),
        sql::Statement::ExplainTable { table_name: t, .. } => Ok(Statement::Describe {
            table: table_name(t)?,
        }),
        other => Err(unsupported(
            format!("statement {}", first_words(&other.to_string())),
            at,
        )),
    }
}

fn first_words(text: &str) -> String {
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn table_name(name: &sql::ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [sql::ObjectNamePart::Identifier(ident)] => Ok(ident.value.clone()),
        _ => Err(unsupported(
            format!("qualified table name {name}"),
            name.span().start,
        )),
    }
}

fn translate_select(
    query: &sql::Query,
    schemas: &dyn SchemaSource,
    freshness: Option<Duration>,
) -> Result<Statement> {
    let at = query.span().start;
    if query.with.is_some() {
        return Err(unsupported("WITH", at));
    }
    if query.order_by.is_some() {
        return Err(unsupported("ORDER BY (results come sorted by key)", at));
    }
    if query.fetch.is_some() || !query.locks.is_empty() {
        return Err(unsupported("FETCH or locking clause", at));
    }
    let sql::SetExpr::Select(select) = query.body.as_ref() else {
        return Err(unsupported(
            "set operations and VALUES as a query",
            query.body.span().start,
        ));
    };
    let limit = match &query.limit_clause {
        None => None,
        Some(sql::LimitClause::LimitOffset {
            limit: Some(limit),
            offset: None,
            limit_by,
        }) if limit_by.is_empty() => Some(limit_value(limit)?),
        Some(other) => return Err(unsupported(format!("{other}"), other.span().start)),
    };
    check_plain_select(select)?;
    let table = match select.from.as_slice() {
        [sql::TableWithJoins {
            relation:
                sql::TableFactor::Table {
                    name,
                    alias: None,
                    args: None,
                    ..
                },
            joins,
        }] if joins.is_empty() => table_name(name)?,
        [] => return Err(unsupported("SELECT without FROM", select.span().start)),
        _ => {
            return Err(unsupported(
                "joins, aliases or several tables in FROM",
                select.from[0].span().start,
            ))
        }
    };
    let schema = schemas.schema_of(&table)?;
    let output = translate_projection(&select.projection, &schema)?;
    let predicate = match &select.selection {
        None => Predicate::All,
        Some(expr) => translate_condition(expr, &schema, false)?,
    };
    Ok(Statement::Select(Select {
        table,
        output,
        predicate,
        limit,
        freshness,
    }))
}

fn check_plain_select(select: &sql::Select) -> Result<()> {
    let at = select.span().start;
    let refuse = |what: &str| Err(unsupported(what, at));
    if select.distinct.is_some() {
        return refuse("DISTINCT");
    }
    if select.top.is_some() || select.into.is_some() {
        return refuse("TOP or SELECT INTO");
    }
    if !matches!(&select.group_by, sql::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
    {
        return refuse("GROUP BY");
    }
    if select.having.is_some() || select.qualify.is_some() || select.prewhere.is_some() {
        return refuse("HAVING, QUALIFY or PREWHERE");
    }
    if !select.lateral_views.is_empty()
        || !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
        || !select.named_window.is_empty()
        || !select.connect_by.is_empty()
    {
        return refuse("this SELECT clause");
    }
    Ok(())
}

fn limit_value(expr: &sql::Expr) -> Result<usize> {
    match expr {
        sql::Expr::Value(v) => match &v.value {
            sql::Value::Number(n, _) => n
                .parse::<usize>()
                .map_err(|_| invalid(format!("LIMIT {n} is not a whole number"))),
            other => Err(invalid(format!("LIMIT {other} is not a number"))),
        },
        other => Err(unsupported(
            format!("LIMIT {other} (only a number)"),
            other.span().start,
        )),
    }
}

fn translate_projection(items: &[sql::SelectItem], schema: &Schema) -> Result<Output> {
    if let [sql::SelectItem::UnnamedExpr(sql::Expr::Function(function))] = items {
        let is_count_star = function.name.to_string().eq_ignore_ascii_case("count")
            && function.args.to_string() == "(*)";
        if is_count_star {
            return Ok(Output::Count);
        }
    }
    if let [sql::SelectItem::Wildcard(_)] = items {
        return Ok(Output::All);
    }
    let mut columns = Vec::with_capacity(items.len());
    for item in items {
        match item {
            sql::SelectItem::UnnamedExpr(sql::Expr::Identifier(ident)) => {
                let name = column_name(ident, schema)?;
                columns.push(name);
            }
            other => {
                return Err(unsupported(
                    format!("select item {other} (columns, * or COUNT(*) only)"),
                    other.span().start,
                ))
            }
        }
    }
    Ok(Output::Columns(columns))
}

fn column_name(ident: &sql::Ident, schema: &Schema) -> Result<String> {
    let name = &ident.value;
    if *name == schema.key || schema.id_of(name).is_some() {
        Ok(name.clone())
    } else {
        Err(invalid(format!(
            "unknown column {name:?} (line {}, column {})",
            ident.span.start.line, ident.span.start.column
        )))
    }
}

fn column_type(name: &str, schema: &Schema) -> AttrType {
    match schema.id_of(name) {
        Some(id) => schema.attributes[id as usize].attr_type,
        None => AttrType::String, // the key
    }
}

/// A literal as a value of `target`'s type.
fn literal(expr: &sql::Expr, target: AttrType, column: &str) -> Result<Value> {
    let at = expr.span().start;
    let (negative, inner) = match expr {
        sql::Expr::UnaryOp {
            op: sql::UnaryOperator::Minus,
            expr,
        } => (true, expr.as_ref()),
        other => (false, other),
    };
    let sql::Expr::Value(value) = inner else {
        return Err(unsupported(
            format!("{expr} (comparisons are with literal values)"),
            at,
        ));
    };
    let mismatch = || {
        invalid(format!(
            "{expr} is not a {} value for column {column:?} (line {}, column {})",
            target.name(),
            at.line,
            at.column
        ))
    };
    let sign = if negative { "-" } else { "" };
    match (&value.value, target) {
        (sql::Value::Number(n, _), AttrType::Int | AttrType::Timestamp) => {
            let x: i64 = format!("{sign}{n}").parse().map_err(|_| mismatch())?;
            Ok(if target == AttrType::Int {
                Value::Int(x)
            } else {
                Value::Timestamp(x)
            })
        }
        (sql::Value::Number(n, _), AttrType::Float) => {
            let x: f64 = format!("{sign}{n}").parse().map_err(|_| mismatch())?;
            if x.is_finite() {
                Ok(Value::Float(x))
            } else {
                Err(mismatch())
            }
        }
        (sql::Value::SingleQuotedString(s), AttrType::String) if !negative => {
            Ok(Value::String(s.clone().into_bytes()))
        }
        (sql::Value::SingleQuotedString(s), AttrType::Timestamp) if !negative => {
            parse_timestamp_micros(s)
                .map(Value::Timestamp)
                .ok_or_else(mismatch)
        }
        (sql::Value::Boolean(b), AttrType::Bool) if !negative => Ok(Value::Bool(*b)),
        (sql::Value::Null, _) => Err(unsupported(
            "NULL as a value (use IS NOT NULL; absent attributes match no comparison)",
            at,
        )),
        _ => Err(mismatch()),
    }
}

fn column_of(expr: &sql::Expr, schema: &Schema) -> Result<Option<String>> {
    match expr {
        sql::Expr::Identifier(ident) => column_name(ident, schema).map(Some),
        sql::Expr::Nested(inner) => column_of(inner, schema),
        _ => Ok(None),
    }
}

fn less_than(column: &str, value: Value, inclusive: bool) -> Predicate {
    Predicate::Range {
        attribute: column.to_string(),
        lower: Bound::Unbounded,
        upper: if inclusive {
            Bound::Included(value)
        } else {
            Bound::Excluded(value)
        },
    }
}

fn greater_than(column: &str, value: Value, inclusive: bool) -> Predicate {
    Predicate::Range {
        attribute: column.to_string(),
        lower: if inclusive {
            Bound::Included(value)
        } else {
            Bound::Excluded(value)
        },
        upper: Bound::Unbounded,
    }
}

/// `column <> value`: smaller or greater (a record without the column matches neither,
/// as SQL's NULL does not).
fn not_equal(column: &str, value: Value) -> Predicate {
    Predicate::Or(vec![
        less_than(column, value.clone(), false),
        greater_than(column, value, false),
    ])
}

/// Translates a WHERE condition; `negated` pushes a NOT down to the comparisons.
fn translate_condition(expr: &sql::Expr, schema: &Schema, negated: bool) -> Result<Predicate> {
    let at = expr.span().start;
    match expr {
        sql::Expr::Nested(inner) => translate_condition(inner, schema, negated),
        sql::Expr::UnaryOp {
            op: sql::UnaryOperator::Not,
            expr,
        } => translate_condition(expr, schema, !negated),
        sql::Expr::BinaryOp { left, op, right }
            if matches!(op, sql::BinaryOperator::And | sql::BinaryOperator::Or) =>
        {
            let children = vec![
                translate_condition(left, schema, negated)?,
                translate_condition(right, schema, negated)?,
            ];
            // De Morgan: NOT (a AND b) = NOT a OR NOT b.
            let conjunction = (*op == sql::BinaryOperator::And) != negated;
            Ok(if conjunction {
                Predicate::And(children)
            } else {
                Predicate::Or(children)
            })
        }
        sql::Expr::BinaryOp { left, op, right } => comparison(left, op, right, schema, negated, at),
        sql::Expr::Between {
            expr,
            negated: between_negated,
            low,
            high,
        } => {
            let column = column_of(expr, schema)?
                .ok_or_else(|| unsupported("BETWEEN on an expression", at))?;
            let target = column_type(&column, schema);
            let (low, high) = (
                literal(low, target, &column)?,
                literal(high, target, &column)?,
            );
            Ok(if *between_negated != negated {
                Predicate::Or(vec![
                    less_than(&column, low, false),
                    greater_than(&column, high, false),
                ])
            } else {
                Predicate::Range {
                    attribute: column,
                    lower: Bound::Included(low),
                    upper: Bound::Included(high),
                }
            })
        }
        sql::Expr::InList {
            expr,
            list,
            negated: in_negated,
        } => {
            let column =
                column_of(expr, schema)?.ok_or_else(|| unsupported("IN on an expression", at))?;
            let target = column_type(&column, schema);
            let values = list
                .iter()
                .map(|v| literal(v, target, &column))
                .collect::<Result<Vec<_>>>()?;
            if values.is_empty() {
                return Err(invalid("IN needs at least one value"));
            }
            Ok(if *in_negated != negated {
                Predicate::And(values.into_iter().map(|v| not_equal(&column, v)).collect())
            } else {
                Predicate::In(column, values)
            })
        }
        sql::Expr::Like {
            negated: like_negated,
            any: false,
            expr,
            pattern,
            escape_char: None,
        } => {
            let column =
                column_of(expr, schema)?.ok_or_else(|| unsupported("LIKE on an expression", at))?;
            let matching = like(&column, pattern, schema)?;
            Ok(if *like_negated != negated {
                // SQL: NOT LIKE is unknown (so false) where the column is NULL.
                Predicate::And(vec![
                    Predicate::Exists(column),
                    Predicate::Not(Box::new(matching)),
                ])
            } else {
                matching
            })
        }
        sql::Expr::IsNotNull(inner) | sql::Expr::IsNull(inner) => {
            let column = column_of(inner, schema)?
                .ok_or_else(|| unsupported("IS NULL on an expression", at))?;
            let is_not_null = matches!(expr, sql::Expr::IsNotNull(_)) != negated;
            let exists = Predicate::Exists(column);
            Ok(if is_not_null {
                exists
            } else {
                Predicate::Not(Box::new(exists))
            })
        }
        other => Err(unsupported(format!("condition {other}"), at)),
    }
}

fn comparison(
    left: &sql::Expr,
    op: &sql::BinaryOperator,
    right: &sql::Expr,
    schema: &Schema,
    negated: bool,
    at: Location,
) -> Result<Predicate> {
    use sql::BinaryOperator::*;
    // Put the column on the left: `5 < x` is `x > 5`.
    let (column, value_expr, op) = match (column_of(left, schema)?, column_of(right, schema)?) {
        (Some(column), None) => (column, right, op.clone()),
        (None, Some(column)) => {
            let flipped = match op {
                Lt => Gt,
                LtEq => GtEq,
                Gt => Lt,
                GtEq => LtEq,
                other => other.clone(),
            };
            (column, left, flipped)
        }
        _ => {
            return Err(unsupported(
                format!(
                "comparison {left} {op} {right} (one side must be a column, the other a literal)"
            ),
                at,
            ))
        }
    };
    let value = literal(value_expr, column_type(&column, schema), &column)?;
    let op = if negated {
        match op {
            Eq => NotEq,
            NotEq => Eq,
            Lt => GtEq,
            LtEq => Gt,
            Gt => LtEq,
            GtEq => Lt,
            other => other,
        }
    } else {
        op
    };
    Ok(match op {
        Eq => Predicate::Eq(column, value),
        NotEq => not_equal(&column, value),
        Lt => less_than(&column, value, false),
        LtEq => less_than(&column, value, true),
        Gt => greater_than(&column, value, false),
        GtEq => greater_than(&column, value, true),
        other => return Err(unsupported(format!("operator {other}"), at)),
    })
}

/// `LIKE 'x%'`, `'%x'`, `'%x%'` or a pattern without wildcards.
fn like(column: &str, pattern: &sql::Expr, schema: &Schema) -> Result<Predicate> {
    let at = pattern.span().start;
    if column_type(column, schema) != AttrType::String {
        return Err(invalid(format!(
            "LIKE needs a string column; {column:?} is not"
        )));
    }
    let text = match pattern {
        sql::Expr::Value(v) => match &v.value {
            sql::Value::SingleQuotedString(s) => s.clone(),
            _ => return Err(unsupported("LIKE with a non-string pattern", at)),
        },
        _ => return Err(unsupported("LIKE with a computed pattern", at)),
    };
    let starts = text.starts_with('%');
    let ends = text.ends_with('%') && text.len() > usize::from(starts);
    let core = &text[usize::from(starts)..text.len() - usize::from(ends)];
    if core.contains(['%', '_']) {
        return Err(unsupported(
            format!("LIKE pattern {text:?} ('x%', '%x', '%x%' or no wildcard only)"),
            at,
        ));
    }
    let bytes = core.as_bytes().to_vec();
    let name = column.to_string();
    Ok(match (starts, ends) {
        (false, false) => Predicate::Eq(name, Value::String(bytes)),
        (false, true) => Predicate::Prefix(name, bytes),
        (true, false) => Predicate::Suffix(name, bytes),
        (true, true) => Predicate::Contains(name, bytes),
    })
}

fn translate_insert(insert: &sql::Insert, schemas: &dyn SchemaSource) -> Result<Statement> {
    let at = insert.span().start;
    if insert.or.is_some() || insert.on.is_some() || insert.returning.is_some() {
        return Err(unsupported("INSERT modifiers (OR, ON, RETURNING)", at));
    }
    let sql::TableObject::TableName(name) = &insert.table else {
        return Err(unsupported("INSERT into a table function", at));
    };
    let table = table_name(name)?;
    let schema = schemas.schema_of(&table)?;
    if insert.columns.is_empty() {
        return Err(invalid(
            "INSERT needs its column list: INSERT INTO t (cols) VALUES ...",
        ));
    }
    let columns = insert
        .columns
        .iter()
        .map(|c| match c.0.as_slice() {
            [sql::ObjectNamePart::Identifier(ident)] => column_name(ident, &schema),
            _ => Err(unsupported(
                format!("qualified column name {c}"),
                c.span().start,
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    let key_at = columns
        .iter()
        .position(|c| *c == schema.key)
        .ok_or_else(|| invalid(format!("INSERT must give the key column {:?}", schema.key)))?;
    let rows = match insert.source.as_deref().map(|q| q.body.as_ref()) {
        Some(sql::SetExpr::Values(values)) => &values.rows,
        _ => return Err(unsupported("INSERT without VALUES", at)),
    };
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        let row = &row.content;
        if row.len() != columns.len() {
            return Err(invalid(format!(
                "a VALUES row has {} values for {} columns",
                row.len(),
                columns.len()
            )));
        }
        let key = match literal(&row[key_at], AttrType::String, &schema.key)? {
            Value::String(bytes) => bytes,
            _ => unreachable!("string literals become strings"),
        };
        let mut record = Record::new(key);
        for (i, (column, expr)) in columns.iter().zip(row).enumerate() {
            if i == key_at || is_null(expr) {
                continue;
            }
            let value = literal(expr, column_type(column, &schema), column)?;
            record.values.insert(column.clone(), value);
        }
        records.push(record);
    }
    Ok(Statement::Insert { table, records })
}

fn is_null(expr: &sql::Expr) -> bool {
    matches!(expr, sql::Expr::Value(v) if v.value == sql::Value::Null)
}

fn translate_delete(delete: &sql::Delete, schemas: &dyn SchemaSource) -> Result<Statement> {
    let at = delete.span().start;
    let from = match &delete.from {
        sql::FromTable::WithFromKeyword(tables) | sql::FromTable::WithoutKeyword(tables) => tables,
    };
    let table = match from.as_slice() {
        [sql::TableWithJoins {
            relation: sql::TableFactor::Table { name, .. },
            joins,
        }] if joins.is_empty() => table_name(name)?,
        _ => return Err(unsupported("DELETE from several tables", at)),
    };
    let schema = schemas.schema_of(&table)?;
    let refuse = || {
        invalid(format!(
            "DELETE needs WHERE {key} = '...' or WHERE {key} IN (...)",
            key = schema.key
        ))
    };
    let keys = match &delete.selection {
        Some(sql::Expr::BinaryOp {
            left,
            op: sql::BinaryOperator::Eq,
            right,
        }) if column_of(left, &schema)?.as_deref() == Some(schema.key.as_str()) => {
            vec![right.as_ref()]
        }
        Some(sql::Expr::InList {
            expr,
            list,
            negated: false,
        }) if column_of(expr, &schema)?.as_deref() == Some(schema.key.as_str()) => {
            list.iter().collect()
        }
        _ => return Err(refuse()),
    };
    let keys = keys
        .into_iter()
        .map(|k| match literal(k, AttrType::String, &schema.key)? {
            Value::String(bytes) => Ok(bytes),
            _ => Err(refuse()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Statement::Delete { table, keys })
}

fn translate_create(create: &sql::CreateTable) -> Result<Statement> {
    let name = table_name(&create.name)?;
    let mut key: Option<String> = None;
    for constraint in &create.constraints {
        match constraint {
            sql::TableConstraint::PrimaryKey(primary) if primary.columns.len() == 1 => {
                key = Some(primary.columns[0].column.expr.to_string());
            }
            other => {
                return Err(unsupported(
                    format!("constraint {other} (PRIMARY KEY of one column only)"),
                    other.span().start,
                ))
            }
        }
    }
    let mut attributes = Vec::new();
    for column in &create.columns {
        let is_key = column
            .options
            .iter()
            .any(|o| matches!(o.option, sql::ColumnOption::PrimaryKey(_)));
        if is_key {
            key = Some(column.name.value.clone());
        }
        let attr_type = attr_type_of(&column.data_type, column.name.span.start)?;
        attributes.push(Attribute {
            name: column.name.value.clone(),
            attr_type,
        });
    }
    let key = key.ok_or_else(|| invalid("CREATE TABLE needs a PRIMARY KEY column"))?;
    let key_column = attributes
        .iter()
        .position(|a| a.name == key)
        .ok_or_else(|| invalid(format!("the PRIMARY KEY {key:?} is not a column")))?;
    if attributes[key_column].attr_type != AttrType::String {
        return Err(invalid(format!(
            "the PRIMARY KEY {key:?} must be a string (TEXT) column"
        )));
    }
    attributes.remove(key_column);
    let schema = Schema::new(&key, attributes).map_err(QueryError::Store)?;
    let partition = create
        .partition_by
        .as_deref()
        .map(translate_partition)
        .transpose()?;
    Ok(Statement::CreateTable {
        name,
        schema,
        partition,
    })
}

/// `PARTITION BY HOUR(ts)`, `DAY(ts)` or `MONTH(ts)`.
fn translate_partition(expr: &sql::Expr) -> Result<TimePartition> {
    let wrong = || {
        unsupported(
            format!("PARTITION BY {expr} (HOUR(column), DAY(column) or MONTH(column) only)"),
            expr.span().start,
        )
    };
    let sql::Expr::Function(function) = expr else {
        return Err(wrong());
    };
    let granularity = Granularity::parse(&function.name.to_string()).ok_or_else(wrong)?;
    let sql::FunctionArguments::List(list) = &function.args else {
        return Err(wrong());
    };
    let [sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(sql::Expr::Identifier(column)))] =
        list.args.as_slice()
    else {
        return Err(wrong());
    };
    Ok(TimePartition {
        attribute: column.value.clone(),
        granularity,
    })
}

fn attr_type_of(data_type: &sql::DataType, at: Location) -> Result<AttrType> {
    let text = data_type.to_string().to_ascii_uppercase();
    let base = text.split(['(', ' ']).next().unwrap_or("");
    Ok(match base {
        "TEXT" | "STRING" | "VARCHAR" | "CHAR" | "CHARACTER" | "BYTES" => AttrType::String,
        "INT" | "INTEGER" | "BIGINT" | "SMALLINT" | "INT64" | "INT8" => AttrType::Int,
        "FLOAT" | "DOUBLE" | "REAL" | "FLOAT64" | "FLOAT8" => AttrType::Float,
        "BOOL" | "BOOLEAN" => AttrType::Bool,
        "TIMESTAMP" | "DATE" | "DATETIME" => AttrType::Timestamp,
        _ => {
            return Err(unsupported(
                format!("column type {text} (TEXT, INT, FLOAT, BOOL or TIMESTAMP)"),
                at,
            ))
        }
    })
}
