//! The OpenAPI 3.0 description of the API, built from the same route table the router
//! is checked against.

use serde_json::{json, Map, Value};

/// Every route: (method, path, summary). Tests check the router serves each of them.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("post", "/v1/sql", "Run one SQL statement (SELECT ... FRESHNESS s, INSERT, DELETE, CREATE TABLE, DROP TABLE, ALTER TABLE ... ADD/DROP SUBSPACE, SHOW TABLES, DESCRIBE)"),
    ("post", "/v1/tables", "Create a table (time-partitioned with partition_by)"),
    ("get", "/v1/tables", "List tables"),
    ("get", "/v1/tables/{table}", "Describe a table"),
    ("delete", "/v1/tables/{table}", "Drop a table and its data"),
    ("post", "/v1/tables/{table}/records", "Put a batch of records as one SCU (JSON array or JSON Lines)"),
    ("post", "/v1/batches", "Put and delete records of several tables as one SCU (all or nothing)"),
    ("get", "/v1/tables/{table}/records/{key}", "Get a record by key"),
    ("delete", "/v1/tables/{table}/records/{key}", "Delete a record by key"),
    ("post", "/v1/tables/{table}/search", "Search or count records with a JSON predicate"),
    ("post", "/v1/texts/{name}", "Upload and index a text"),
    ("get", "/v1/texts/{name}/extract", "Bytes of a text (offset, len)"),
    ("get", "/v1/texts/{name}/count", "Occurrences of a pattern"),
    ("get", "/v1/texts/{name}/search", "Offsets of a pattern"),
    ("get", "/v1/texts/{name}/range", "Offsets whose suffix lies between two bounds (lo, hi)"),
    ("get", "/v1/texts/{name}/wildcard", "Matches of a prefix, at most max_gap bytes, then a suffix"),
    ("get", "/v1/admin/cluster", "The cluster as this node sees it: nodes, roles, leases, leaders, the log's tail (a single node says so)"),
    ("get", "/v1/admin/placement", "Per shard its popularity, replicas, holders and routing fractions; per data node its room (a single node says it places nothing)"),
    ("get", "/v1/admin/replicas", "The adaptive node: every shard replica's layers, footprint, queue and response rate"),
    ("get", "/v1/admin/history", "Every replica's samples of the last last_s seconds (what the dashboard plots)"),
    ("post", "/v1/admin/replicas/{id}/layers", "Add or drop a layer by hand (pins the replica), set a count, or hand it back to the layer manager"),
    ("post", "/v1/admin/replicas/{id}/attribute-layers", "Keep or drop a replica's layers of one attribute whatever the demand, or hand them back to the policy"),
    ("put", "/v1/admin/budget", "Change the node's memory budget"),
    ("get", "/v1/admin/tables/{table}/subspaces", "A table's subspaces (hyperspace hashing): attributes, parts, regions, readiness"),
    ("post", "/v1/admin/tables/{table}/subspaces", "Build a subspace over attributes, cut into at most regions regions (answered once ready)"),
    ("delete", "/v1/admin/tables/{table}/subspaces/{name}", "Drop a subspace"),
    ("get", "/v1/admin/hyperspace/calibration", "The subspace model's measured parameters (beta, alpha, T_max), if set"),
    ("put", "/v1/admin/hyperspace/calibration", "Set the subspace model's parameters as puffer-bench hyperspace --calibrate measured them"),
    ("get", "/", "The dashboard page"),
    ("get", "/health", "Liveness"),
    ("get", "/ready", "Readiness: every table open and writable"),
    ("get", "/metrics", "Prometheus metrics"),
    ("get", "/openapi.json", "This document"),
];

/// The OpenAPI document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for (method, path, summary) in ROUTES {
        let parameters: Vec<Value> = path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let entry = paths
            .entry(path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        entry[*method] = json!({
            "summary": summary,
            "parameters": parameters,
            "responses": {
                "200": {"description": "success"},
                "default": {
                    "description": "error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                }
            }
        });
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "PufferDB",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Compressed, searchable data store. See docs/http.md."
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["code", "message", "retryable"],
                    "properties": {
                        "code": {
                            "type": "string",
                            "enum": puffer_query::ErrorCode::ALL
                                .iter()
                                .map(|code| code.as_str())
                                .collect::<Vec<_>>()
                        },
                        "message": {"type": "string"},
                        "retryable": {"type": "boolean"}
                    }
                },
                "AttributeType": {"type": "string", "enum": crate::routes::type_names()}
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}
