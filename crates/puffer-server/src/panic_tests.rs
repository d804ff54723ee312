//! A handler that panics is answered 500 `internal`, and the locks it held do not fail
//! the requests after it. The panicking routes exist only in these tests.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::routing::get;
use axum::Router;
use serde_json::Value as JsonValue;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::routes::blocking;
use crate::{router_with, AppState, ServerConfig};

/// Panics while holding the metrics lock, poisoning it.
async fn panic_holding_metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> &'static str {
    state
        .metrics
        .panic_holding_lock("a test handler panics holding the metrics lock")
}

/// Panics inside the blocking work of a handler.
async fn panic_in_blocking() -> Result<&'static str, ApiError> {
    blocking(|| -> Result<&'static str, ApiError> {
        panic!("a test handler's blocking work panics");
    })
    .await
}

fn app(state: Arc<AppState>) -> Router {
    let failing = Router::new()
        .route("/test/panic-holding-metrics", get(panic_holding_metrics))
        .route("/test/panic-in-blocking", get(panic_in_blocking));
    router_with(state, failing)
}

/// Sends one request; answers the status and the body (JSON when it parses, else a
/// JSON string of the text).
async fn send(app: &Router, method: Method, path: &str, body: &[u8]) -> (StatusCode, JsonValue) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_vec()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| JsonValue::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, body)
}

fn assert_internal(status: StatusCode, body: &JsonValue) {
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["code"], "internal", "{body}");
    assert_eq!(body["retryable"], false, "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert_eq!(body.as_object().unwrap().len(), 3, "{body}");
}

fn open_state(dir: &tempfile::TempDir) -> Arc<AppState> {
    AppState::open(ServerConfig {
        data_dir: dir.path().to_path_buf(),
        ..ServerConfig::default()
    })
    .unwrap()
}

// `blocking` runs work with `block_in_place`, which needs the multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_holding_a_lock_answers_500_and_later_requests_take_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_state(&dir);
    let app = app(state.clone());

    let (status, body) = send(&app, Method::POST, "/v1/texts/first", b"banana band").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let (status, body) = send(&app, Method::GET, "/test/panic-holding-metrics", b"").await;
    assert_internal(status, &body);
    assert!(
        state.metrics.is_poisoned(),
        "the test route did not poison the lock"
    );

    // Reads and writes of texts (the node's text map, whose lock no handler holds), of
    // the tables, and of the metrics.
    let (status, body) = send(&app, Method::GET, "/v1/texts/first/count?pattern=an", b"").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["count"], 3, "{body}");
    let (status, body) = send(&app, Method::POST, "/v1/texts/second", b"abc").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = send(&app, Method::POST, "/v1/texts/second", b"abc").await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &"text_exists".into())
    );
    let (status, body) = send(&app, Method::GET, "/v1/texts/second/count?pattern=b", b"").await;
    assert_eq!(
        (status, &body["count"]),
        (StatusCode::OK, &1.into()),
        "{body}"
    );
    let (status, body) = send(&app, Method::GET, "/v1/tables", b"").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tables"], serde_json::json!([]), "{body}");

    // Every request above was counted, the panics as the 500s they were answered with.
    let (status, body) = send(&app, Method::GET, "/metrics", b"").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let text = body.as_str().unwrap();
    for series in [
        r#"{method="GET",route="/test/panic-holding-metrics",status="500"} 1"#,
        r#"{method="GET",route="/v1/tables",status="200"} 1"#,
        r#"{method="POST",route="/v1/texts/{name}",status="201"} 2"#,
    ] {
        assert!(
            text.contains(&format!("puffer_http_requests_total{series}")),
            "{series} missing from:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_blocking_work_answers_500_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(open_state(&dir));
    for _ in 0..3 {
        let (status, body) = send(&app, Method::GET, "/test/panic-in-blocking", b"").await;
        assert_internal(status, &body);
        let (status, body) = send(&app, Method::GET, "/v1/tables", b"").await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_router_serves_no_panicking_route() {
    let dir = tempfile::tempdir().unwrap();
    let app = crate::router(open_state(&dir));
    for path in ["/test/panic-holding-metrics", "/test/panic-in-blocking"] {
        let (status, body) = send(&app, Method::GET, path, b"").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["code"], "unknown_route", "{path}: {body}");
    }
}
