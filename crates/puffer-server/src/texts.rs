//! Text files: uploaded, indexed (puffer-index), kept compressed in `texts/<name>.pidx`,
//! and queried without decompressing.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use puffer_index::TextIndex;
use serde::Deserialize;
use serde_json::json;

use crate::auth::{require, Role};
use crate::error::ApiError;
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
    body: Bytes,
) -> Result<Response, ApiError> {
    require(role, Role::Admin)?;
    check_name(&name)?;
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
    let answer = tokio::task::spawn_blocking(move || -> Result<Response, ApiError> {
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
    .map_err(|e| ApiError::internal(format!("a worker failed: {e}")))?;
    answer
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
    Query(params): Query<ExtractParams>,
) -> Result<Response, ApiError> {
    require(role, Role::Read)?;
    let index = text(&state, &name)?;
    if params.len > state.config.max_body_bytes as u64 {
        return Err(ApiError::limit(format!(
            "an extract returns at most {} bytes",
            state.config.max_body_bytes
        )));
    }
    let bytes = tokio::task::spawn_blocking(move || index.extract(params.offset, params.len))
        .await
        .map_err(|e| ApiError::internal(format!("a worker failed: {e}")))??;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

#[derive(Deserialize)]
pub(crate) struct PatternParams {
    pattern: String,
    limit: Option<usize>,
}

fn check_pattern(state: &AppState, pattern: &str) -> Result<(), ApiError> {
    if pattern.len() > state.config.max_pattern_bytes {
        return Err(ApiError::limit(format!(
            "a pattern has at most {} bytes",
            state.config.max_pattern_bytes
        )));
    }
    Ok(())
}

pub(crate) async fn count(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    Query(params): Query<PatternParams>,
) -> Result<Json<serde_json::Value>, ApiError> {
    require(role, Role::Read)?;
    check_pattern(&state, &params.pattern)?;
    let index = text(&state, &name)?;
    let count = tokio::task::spawn_blocking(move || index.count(params.pattern.as_bytes()))
        .await
        .map_err(|e| ApiError::internal(format!("a worker failed: {e}")))??;
    Ok(Json(json!({"count": count})))
}

pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    Query(params): Query<PatternParams>,
) -> Result<Json<serde_json::Value>, ApiError> {
    require(role, Role::Read)?;
    check_pattern(&state, &params.pattern)?;
    let max = state.config.max_result_rows;
    let limit = params.limit.unwrap_or(max);
    if limit > max {
        return Err(ApiError::limit(format!("limit {limit} exceeds {max}")));
    }
    let index = text(&state, &name)?;
    let offsets = tokio::task::spawn_blocking(move || {
        let total = index.count(params.pattern.as_bytes())?;
        if total as usize > max && params.limit.is_none() {
            return Err(ApiError::limit(format!(
                "{total} occurrences exceed {max}; give a limit"
            )));
        }
        Ok(index.search(params.pattern.as_bytes(), Some(limit))?)
    })
    .await
    .map_err(|e| ApiError::internal(format!("a worker failed: {e}")))??;
    Ok(Json(json!({"offsets": offsets})))
}
