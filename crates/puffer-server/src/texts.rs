//! Text files: uploaded, indexed (puffer-index), kept compressed in `texts/<name>.pidx`,
//! and queried without decompressing.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use puffer_index::TextIndex;
use serde::Deserialize;
use serde_json::json;

use crate::auth::{require, Role};
use crate::error::ApiError;
use crate::routes::blocking;
use crate::AppState;

/// Where text indexes live in the data directory.
pub fn texts_dir(state: &AppState) -> PathBuf {
    state.config.data_dir.join("texts")
}

fn check_name(name: &str) -> Result<(), ApiError> {
    puffer_query::database::check_table_name(name)
        .map_err(|_| ApiError::invalid(format!("text names follow table-name rules; got {name:?}")))
}

fn text(state: &AppState, name: &str) -> Result<TextIndex, ApiError> {
    state
        .texts
        .read()
        .expect("texts lock")
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found("unknown_text", format!("unknown text {name:?}")))
}

/// Opens every text index of the data directory.
pub fn load_texts(state: &AppState) -> Result<(), ApiError> {
    let dir = texts_dir(state);
    std::fs::create_dir_all(&dir)
        .map_err(|e| ApiError::internal(format!("{}: {e}", dir.display())))?;
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| ApiError::internal(format!("{}: {e}", dir.display())))?;
    let mut texts = state.texts.write().expect("texts lock");
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".pidx"))
        else {
            continue;
        };
        texts.insert(name.to_string(), TextIndex::open(&path)?);
    }
    Ok(())
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
    if state.texts.read().expect("texts lock").contains_key(&name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "text_exists",
            format!("text {name:?} exists"),
        ));
    }
    blocking(move || -> Result<Response, ApiError> {
        let index = TextIndex::build(&body)?;
        index.save(texts_dir(&state).join(format!("{name}.pidx")))?;
        let index_bytes = index.footprint().total_bytes();
        state
            .texts
            .write()
            .expect("texts lock")
            .insert(name.clone(), index);
        Ok((
            StatusCode::CREATED,
            Json(json!({"name": name, "bytes": body.len(), "index_bytes": index_bytes})),
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

fn pattern_params(query: Option<String>) -> Result<PatternParams, ApiError> {
    let query = query.unwrap_or_default();
    let (mut pattern, mut limit) = (None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "pattern" => pattern = Some(percent_decode(value)?),
            "limit" => {
                let text = String::from_utf8_lossy(&percent_decode(value)?).into_owned();
                limit = Some(text.parse().map_err(|_| {
                    ApiError::invalid(format!("limit={text} is not a whole number"))
                })?);
            }
            other => return Err(ApiError::invalid(format!("unknown parameter {other:?}"))),
        }
    }
    let pattern = pattern.ok_or_else(|| ApiError::invalid("the pattern parameter is missing"))?;
    Ok(PatternParams { pattern, limit })
}

fn check_pattern(state: &AppState, pattern: &[u8]) -> Result<(), ApiError> {
    if pattern.len() > state.config.max_pattern_bytes {
        return Err(ApiError::limit(format!(
            "a pattern has at most {} bytes",
            state.config.max_pattern_bytes
        )));
    }
    Ok(())
}

/// The checks every pattern query shares: role, parameters, pattern size, the text.
fn pattern_query(
    state: &AppState,
    role: Role,
    name: &str,
    query: Option<String>,
) -> Result<(TextIndex, PatternParams), ApiError> {
    require(role, Role::Read)?;
    let params = pattern_params(query)?;
    check_pattern(state, &params.pattern)?;
    Ok((text(state, name)?, params))
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
    let limit = params.limit.unwrap_or(max);
    if limit > max {
        return Err(ApiError::limit(format!("limit {limit} exceeds {max}")));
    }
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
