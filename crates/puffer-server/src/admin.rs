//! The admin API of the adaptive node: every replica's layers, footprint, queue and
//! response rate, their recent history (what the dashboard plots), manual layer changes
//! for experiments, and the memory budget.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value as JsonValue};

use puffer_adapt::attributes::LayerKind;
use puffer_node::serving::{AttributePin, NodeStatus, ReplicaStatus};

use crate::auth::{require, Role};
use crate::error::{ApiError, ErrorCode};
use crate::routes::{blocking, parse_json, Shared};

/// Most seconds of history one request returns.
pub const MAX_HISTORY_SECONDS: f64 = 3600.0;

/// `GET /v1/admin/replicas`: the node and every replica now.
pub(crate) async fn replicas(
    State(state): Shared,
    Extension(role): Extension<Role>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    let mut status = json!(state.db.node().status());
    name_attribute_layers(&state, &mut status);
    Ok(Json(status))
}

/// Adds each attribute layer's attribute name (the node knows attributes by id only),
/// where the replica's table is still in the catalog.
fn name_attribute_layers(state: &crate::AppState, status: &mut JsonValue) {
    let Some(replicas) = status["replicas"].as_array_mut() else {
        return;
    };
    for replica in replicas {
        let Some(Ok(table)) = replica["table"].as_str().map(|name| state.db.table(name)) else {
            continue;
        };
        let schema = table.schema();
        for list in ["attribute_layers", "column_layers"] {
            let Some(layers) = replica[list].as_array_mut() else {
                continue;
            };
            for layer in layers {
                let attribute = layer["attribute"]
                    .as_u64()
                    .and_then(|id| usize::try_from(id).ok());
                if let Some(attribute) = attribute.and_then(|id| schema.attributes.get(id)) {
                    layer["name"] = json!(attribute.name);
                }
            }
        }
    }
}

/// `GET /v1/admin/cluster`: nodes, roles, leases, leaders and the log, as etcd has
/// them (a single node answers `{"mode": "single"}`).
pub(crate) async fn cluster(
    State(state): Shared,
    Extension(role): Extension<Role>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    let published = state.db.published();
    if state.cluster_status.is_none() {
        return Ok(Json(json!({"mode": "single", "published": published})));
    }
    // It asks etcd: a blocking call.
    let status = blocking(move || {
        let status = state.cluster_status.as_ref().expect("checked above");
        Ok(status(crate::StatusView::Cluster))
    })
    .await?;
    Ok(Json(status))
}

/// `GET /v1/admin/placement`: per shard its popularity, replicas, holders and the
/// share of its reads each holder serves; per data node the shards it holds. A single
/// node answers that it places nothing.
pub(crate) async fn placement(
    State(state): Shared,
    Extension(role): Extension<Role>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    if state.cluster_status.is_none() {
        return Ok(Json(json!({
            "mode": "single",
            "placement": null,
            "why": "a single node holds every shard; placement is a cluster's"
        })));
    }
    let status = blocking(move || {
        let status = state.cluster_status.as_ref().expect("checked above");
        Ok(status(crate::StatusView::Placement))
    })
    .await?;
    Ok(Json(status))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryParams {
    /// Seconds of history wanted, counted back from now.
    last_s: Option<f64>,
}

/// `GET /v1/admin/history?last_s=S`: every replica's samples of the last `S` seconds
/// (default 300).
pub(crate) async fn history(
    State(state): Shared,
    Extension(role): Extension<Role>,
    params: Result<Query<HistoryParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    let Query(params) = params?;
    let last = params.last_s.unwrap_or(300.0);
    if !(last.is_finite() && last > 0.0 && last <= MAX_HISTORY_SECONDS) {
        return Err(ApiError::invalid(format!(
            "last_s must be in (0, {MAX_HISTORY_SECONDS}], got {last}"
        )));
    }
    let node = state.db.node();
    let status = node.status();
    let since = status.uptime_seconds - last;
    let replicas: Vec<JsonValue> = status
        .replicas
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "table": r.table,
                "shard": r.shard,
                "replica": r.replica,
                "samples": node.history(r.id, since),
            })
        })
        .collect();
    Ok(Json(json!({
        "now_s": status.uptime_seconds,
        "delta_ms": status.delta_ms,
        "memory_budget_bytes": status.memory_budget_bytes,
        "memory_used_bytes": status.memory_used_bytes,
        "replicas": replicas,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LayerRequest {
    /// `add`, `drop` or `auto` (hand the replica back to the layer manager).
    action: Option<String>,
    /// Or an exact layer count.
    layers: Option<u32>,
}

/// `POST /v1/admin/replicas/{id}/layers`: add or drop a layer by hand (pinning the
/// replica), set an exact count, or hand it back to the layer manager.
pub(crate) async fn set_layers(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<u64>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    let request: LayerRequest = parse_json(&body?)?;
    blocking(move || {
        let node = state.db.node();
        let current = replica_status(&node.status(), id)?;
        // The target may still exceed what the indexes allow until the next tick clamps it.
        let now_target = current.target_layers.clamp(1, current.max_layers.max(1));
        let target = match (request.action.as_deref(), request.layers) {
            (Some("add"), None) => now_target + 1,
            (Some("drop"), None) => now_target.saturating_sub(1).max(1),
            (Some("auto"), None) => {
                node.unpin(id)?;
                return Ok(Json(json!({"id": id, "pinned": false, "target_layers": current.target_layers})));
            }
            (None, Some(layers)) if layers >= 1 => layers,
            _ => {
                return Err(ApiError::invalid(
                    "give either {\"action\": \"add\" | \"drop\" | \"auto\"} or {\"layers\": n} with n >= 1",
                ))
            }
        };
        if target > current.max_layers {
            return Err(ApiError::invalid(format!("replica {id} has at most {} layer(s) now (layers live in segments; records still in the log have none)", current.max_layers)));
        }
        let target = node.set_layers(id, target)?;
        Ok(Json(json!({"id": id, "pinned": true, "target_layers": target})))
    })
    .await
}

/// Replica `id` of the node's status, or the error that names it unknown.
fn replica_status(status: &NodeStatus, id: u64) -> Result<ReplicaStatus, ApiError> {
    status
        .replicas
        .iter()
        .find(|r| r.id == id)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownReplica,
                format!("no replica {id} on this node"),
            )
        })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttributeLayerRequest {
    /// The attribute, by name.
    attribute: String,
    /// `keep`, `drop` or `auto` (hand it back to the policy).
    action: String,
    /// `attribute` (the default: layers for predicates) or `column` (for scans).
    #[serde(default)]
    kind: Option<String>,
}

/// `POST /v1/admin/replicas/{id}/attribute-layers`: keep or drop a replica's attribute
/// or column layers of one attribute whatever the demand, or hand them back to the
/// policy.
pub(crate) async fn set_attribute_layers(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<u64>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    let request: AttributeLayerRequest = parse_json(&body?)?;
    let pin = match request.action.as_str() {
        "keep" => Some(AttributePin::Keep),
        "drop" => Some(AttributePin::Drop),
        "auto" => None,
        other => {
            return Err(ApiError::invalid(format!(
                "action {other:?}: give \"keep\", \"drop\" or \"auto\""
            )))
        }
    };
    let kind = match request.kind.as_deref() {
        None | Some("attribute") => LayerKind::Attribute,
        Some("column") => LayerKind::Column,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "kind {other:?}: give \"attribute\" or \"column\""
            )))
        }
    };
    blocking(move || {
        let node = state.db.node();
        let replica = replica_status(&node.status(), id)?;
        let schema = state.db.table(&replica.table)?.schema();
        let attribute = schema.require(&request.attribute)?;
        node.pin_attribute(id, kind, attribute, pin)?;
        Ok(Json(
            json!({"id": id, "attribute": request.attribute, "kind": kind, "pin": pin}),
        ))
    })
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetRequest {
    memory_budget_bytes: u64,
}

/// `PUT /v1/admin/budget`: changes the node's memory budget (the next tick fits it).
pub(crate) async fn set_budget(
    State(state): Shared,
    Extension(role): Extension<Role>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    let request: BudgetRequest = parse_json(&body?)?;
    state
        .db
        .node()
        .set_memory_budget(request.memory_budget_bytes);
    Ok(Json(
        json!({"memory_budget_bytes": request.memory_budget_bytes}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddSubspaceRequest {
    attributes: Vec<String>,
    regions: Option<u32>,
}

/// `GET /v1/admin/tables/{table}/subspaces`: the table's subspaces (hyperspace hashing).
pub(crate) async fn subspaces(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    blocking(move || {
        let described = state.db.table(&table)?;
        Ok(Json(json!({
            "table": table,
            "subspace_of": described.subspace_of().map(|s| json!({
                "table": s.table,
                "attributes": s.attributes,
                "ready": s.ready,
            })),
            "subspaces": state.db.describe_subspaces(&table),
            "configurator": state.db.hyperspace_status(&table)?,
        })))
    })
    .await
}

/// `POST /v1/admin/tables/{table}/subspaces` with `{"attributes": [...], "regions": n}`:
/// builds a subspace (answered once it is ready).
pub(crate) async fn add_subspace(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(table): Path<String>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    require(role, Role::Admin)?;
    let request: AddSubspaceRequest = parse_json(&body?)?;
    blocking(move || {
        let regions = request
            .regions
            .unwrap_or(puffer_node::subspace::DEFAULT_REGIONS);
        let name = state
            .db
            .add_subspace(&table, &request.attributes, regions)?;
        let added = state
            .db
            .describe_subspaces(&table)
            .into_iter()
            .find(|s| s.name == name);
        Ok((StatusCode::CREATED, Json(json!(added))).into_response())
    })
    .await
}

/// `DELETE /v1/admin/tables/{table}/subspaces/{name}`: drops a subspace.
pub(crate) async fn drop_subspace(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path((table, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    blocking(move || {
        state.db.drop_subspace(&table, &name)?;
        Ok(Json(json!({"ok": true, "name": name})))
    })
    .await
}

/// `GET /v1/admin/hyperspace/calibration`: the model's parameters, if set.
pub(crate) async fn calibration(
    State(state): Shared,
    Extension(role): Extension<Role>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Read)?;
    Ok(Json(
        json!({"calibration": state.db.hyperspace_calibration()}),
    ))
}

/// `PUT /v1/admin/hyperspace/calibration` with `{"beta_s_per_object", "alpha",
/// "max_throughput_ops_per_s"}` and optionally `"region_cost_s"`,
/// `"fan_out_cost_s"`, `"condition_cost_s"`, `"sent_row_cost_s"`, `"write_rate_cost_s2"`,
/// `"catch_up_cost_s2"`, `"fresh_window_s"`, `"region_upkeep_s_per_s"` and
/// `"upkeep_half_rate_per_s"` (0 without them) and
/// `"update_fixed_cost_s"` (equation 4's `1 / max_throughput_ops_per_s` without it), as
/// `puffer-bench hyperspace --calibrate` measured them.
pub(crate) async fn set_calibration(
    State(state): Shared,
    Extension(role): Extension<Role>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<JsonValue>, ApiError> {
    require(role, Role::Admin)?;
    let measured: puffer_node::hyperspace::MeasuredCalibration = parse_json(&body?)?;
    state.db.set_hyperspace_calibration(measured)?;
    Ok(Json(json!({"calibration": measured})))
}
