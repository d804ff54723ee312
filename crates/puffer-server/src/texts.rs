//! Text files over HTTP: uploaded, indexed and kept by the node (`puffer_node::texts`,
//! listed in the catalog), and queried without decompressing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use puffer_index::TextIndex;
use puffer_node::texts::Added;
use serde::Deserialize;
use serde_json::json;

use crate::auth::{require, Role};
use crate::error::{ApiError, ErrorCode};
use crate::routes::blocking;
use crate::AppState;

fn check_name(name: &str) -> Result<(), ApiError> {
    puffer_node::database::check_table_name(name)
        .map_err(|_| ApiError::invalid(format!("text names follow table-name rules; got {name:?}")))
}

fn text(state: &AppState, name: &str) -> Result<TextIndex, ApiError> {
    state
        .db
        .texts()
        .get(name)
        .ok_or_else(|| ApiError::new(ErrorCode::UnknownText, format!("unknown text {name:?}")))
}

fn exists(name: &str) -> ApiError {
    ApiError::new(ErrorCode::TextExists, format!("text {name:?} exists"))
}

pub(crate) async fn upload(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Admin)?;
    check_name(&name)?;
    let body = body?;
    if body.len() > state.config.max_text_bytes {
        return Err(ApiError::limit(format!(
            "a text holds at most {} bytes",
            state.config.max_text_bytes
        )));
    }
    // Refused before the build when the name is taken; the node checks again, under
    // its lock, for two uploads of one name at once.
    if state.db.texts().get(&name).is_some() {
        return Err(exists(&name));
    }
    blocking(move || -> Result<Response, ApiError> {
        let Added::New(entry) = state.db.texts().add(&name, &body)? else {
            return Err(exists(&name));
        };
        let index_bytes = state
            .db
            .texts()
            .get(&name)
            .map_or(entry.index_bytes, |index| index.footprint().total_bytes());
        Ok((
            StatusCode::CREATED,
            Json(json!({"name": name, "bytes": entry.text_bytes, "index_bytes": index_bytes})),
        )
            .into_response())
    })
    .await
}

#[derive(Deserialize)]
pub(crate) struct ExtractParams {
    offset: u64,
    len: u64,
}

pub(crate) async fn extract(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    params: Result<Query<ExtractParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Read)?;
    let Query(params) = params?;
    let index = text(&state, &name)?;
    if params.len > state.config.max_body_bytes as u64 {
        return Err(ApiError::limit(format!(
            "an extract returns at most {} bytes",
            state.config.max_body_bytes
        )));
    }
    let bytes = blocking(move || Ok(index.extract(params.offset, params.len)?)).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// `pattern` (percent-decoded to bytes: patterns need not be UTF-8) and `limit`.
struct PatternParams {
    pattern: Vec<u8>,
    limit: Option<usize>,
}

fn percent_decode(text: &str) -> Result<Vec<u8>, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| ApiError::invalid("bad percent escape in the query string"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The parameters of a text query's string, percent-decoded to bytes. Names outside the
/// query's known ones are refused; a repeated name keeps its last value.
struct QueryParams(HashMap<&'static str, Vec<u8>>);

impl QueryParams {
    fn parse(query: Option<String>, known: &[&'static str]) -> Result<QueryParams, ApiError> {
        let query = query.unwrap_or_default();
        let mut values = HashMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(&name) = known.iter().find(|&&k| k == name) else {
                return Err(ApiError::invalid(format!("unknown parameter {name:?}")));
            };
            values.insert(name, percent_decode(value)?);
        }
        Ok(QueryParams(values))
    }

    /// A required pattern (or bound), at most `max_pattern_bytes` long.
    fn pattern(&mut self, state: &AppState, name: &str) -> Result<Vec<u8>, ApiError> {
        let pattern = self
            .0
            .remove(name)
            .ok_or_else(|| ApiError::invalid(format!("the {name} parameter is missing")))?;
        check_pattern(state, name, &pattern)?;
        Ok(pattern)
    }

    /// An optional whole number.
    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ApiError> {
        let Some(value) = self.0.get(name) else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(value);
        text.parse()
            .map(Some)
            .map_err(|_| ApiError::invalid(format!("{name}={text} is not a whole number")))
    }
}

fn check_pattern(state: &AppState, name: &str, pattern: &[u8]) -> Result<(), ApiError> {
    if pattern.len() > state.config.max_pattern_bytes {
        let what = match name {
            "pattern" => "a pattern".to_string(),
            other => other.to_string(),
        };
        return Err(ApiError::limit(format!(
            "{what} has at most {} bytes",
            state.config.max_pattern_bytes
        )));
    }
    Ok(())
}

/// The checks every text query shares: role, parameters (`known` names them; `parse`
/// reads them), the text.
fn text_query<P>(
    state: &AppState,
    role: Role,
    name: &str,
    query: Option<String>,
    known: &[&'static str],
    parse: impl FnOnce(&mut QueryParams) -> Result<P, ApiError>,
) -> Result<(TextIndex, P), ApiError> {
    require(role, Role::Read)?;
    let mut params = QueryParams::parse(query, known)?;
    let parsed = parse(&mut params)?;
    Ok((text(state, name)?, parsed))
}

/// The checks every pattern query shares: role, parameters, pattern size, the text.
fn pattern_query(
    state: &AppState,
    role: Role,
    name: &str,
    query: Option<String>,
) -> Result<(TextIndex, PatternParams), ApiError> {
    text_query(state, role, name, query, &["pattern", "limit"], |params| {
        Ok(PatternParams {
            pattern: params.pattern(state, "pattern")?,
            limit: params.number("limit")?,
        })
    })
}

/// The limit a query answers with: the given one (at most `max_result_rows`) or
/// `max_result_rows`.
fn result_limit(state: &AppState, limit: Option<usize>) -> Result<usize, ApiError> {
    let max = state.config.max_result_rows;
    let limit = limit.unwrap_or(max);
    if limit > max {
        return Err(ApiError::limit(format!("limit {limit} exceeds {max}")));
    }
    Ok(limit)
}

pub(crate) async fn count(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (index, params) = pattern_query(&state, role, &name, query)?;
    let count = blocking(move || Ok(index.count(&params.pattern)?)).await?;
    Ok(Json(json!({"count": count})))
}

pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (index, params) = pattern_query(&state, role, &name, query)?;
    let max = state.config.max_result_rows;
    let limit = result_limit(&state, params.limit)?;
    let offsets = blocking(move || {
        let total = index.count(&params.pattern)?;
        if total as usize > max && params.limit.is_none() {
            return Err(ApiError::limit(format!(
                "{total} occurrences exceed {max}; give a limit"
            )));
        }
        Ok(index.search(&params.pattern, Some(limit))?)
    })
    .await?;
    Ok(Json(json!({"offsets": offsets})))
}

/// `lo`, `hi` (bounds, percent-decoded to bytes; either may be empty) and `limit`.
struct RangeParams {
    lo: Vec<u8>,
    hi: Vec<u8>,
    limit: Option<usize>,
}

/// Offsets whose suffix is `>= lo` and whose first `hi.len()` bytes are `<= hi`.
pub(crate) async fn range(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (index, params) = text_query(
        &state,
        role,
        &name,
        query,
        &["lo", "hi", "limit"],
        |params| {
            Ok(RangeParams {
                lo: params.pattern(&state, "lo")?,
                hi: params.pattern(&state, "hi")?,
                limit: params.number("limit")?,
            })
        },
    )?;
    let max = state.config.max_result_rows;
    let limit = result_limit(&state, params.limit)?;
    let offsets = blocking(move || {
        let total = index.range_count(&params.lo, &params.hi)?;
        if total as usize > max && params.limit.is_none() {
            return Err(ApiError::limit(format!(
                "{total} offsets in the range exceed {max}; give a limit"
            )));
        }
        Ok(index.range_search(&params.lo, &params.hi, Some(limit))?)
    })
    .await?;
    Ok(Json(json!({"offsets": offsets})))
}

/// `prefix`, `suffix` (percent-decoded to bytes), `max_gap` (required) and `limit`.
struct WildcardParams {
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    max_gap: u64,
    limit: Option<usize>,
}

/// `prefix`, at most `max_gap` bytes, then `suffix`: `{"start", "len"}` ascending by
/// start, then len.
pub(crate) async fn wildcard(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (index, params) = text_query(
        &state,
        role,
        &name,
        query,
        &["prefix", "suffix", "max_gap", "limit"],
        |params| {
            let prefix = params.pattern(&state, "prefix")?;
            let suffix = params.pattern(&state, "suffix")?;
            for (what, pattern) in [("prefix", &prefix), ("suffix", &suffix)] {
                if pattern.is_empty() {
                    return Err(ApiError::invalid(format!("the {what} must not be empty")));
                }
            }
            Ok(WildcardParams {
                prefix,
                suffix,
                max_gap: params
                    .number("max_gap")?
                    .ok_or_else(|| ApiError::invalid("the max_gap parameter is missing"))?,
                limit: params.number("limit")?,
            })
        },
    )?;
    let max = state.config.max_result_rows;
    let limit = result_limit(&state, params.limit)?;
    let matches = blocking(move || {
        // The index locates every occurrence of both patterns, whatever the limit.
        for (what, pattern) in [("prefix", &params.prefix), ("suffix", &params.suffix)] {
            let total = index.count(pattern)?;
            if total as usize > max {
                return Err(ApiError::limit(format!(
                    "the {what} occurs {total} times, more than {max}; \
                     a wildcard search locates every occurrence, so give a rarer {what}"
                )));
            }
        }
        // Without a limit, one match more than allowed tells that there are too many.
        let want = if params.limit.is_none() {
            max.saturating_add(1)
        } else {
            limit
        };
        let matches =
            index.wildcard_search(&params.prefix, &params.suffix, params.max_gap, Some(want))?;
        if matches.len() > limit {
            return Err(ApiError::limit(format!(
                "more than {max} matches; give a limit"
            )));
        }
        Ok(matches)
    })
    .await?;
    let matches: Vec<_> = matches
        .iter()
        .map(|m| json!({"start": m.start, "len": m.len}))
        .collect();
    Ok(Json(json!({"matches": matches})))
}
