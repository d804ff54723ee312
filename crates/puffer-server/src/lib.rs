//! `puffer-server`: PufferDB's HTTP/JSON API (axum) over a database of tables and a set
//! of texts: SQL with FRESHNESS, records, searches, texts, health, metrics, OpenAPI.
//! The API is described in `docs/http.md`.

pub mod admin;
pub mod answers;
pub mod auth;
pub mod config;
pub mod connections;
mod dashboard;
pub mod error;
pub mod metrics;
pub mod openapi;
#[cfg(test)]
mod panic_tests;
mod routes;
pub mod texts;
pub mod values;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use puffer_node::Database;
use tower_http::catch_panic::CatchPanicLayer;

pub use config::ServerConfig;
pub use error::ApiError;

/// What every handler shares.
pub struct AppState {
    /// The tables.
    pub db: Arc<Database>,
    /// Settings.
    pub config: ServerConfig,
    /// Request metrics.
    pub metrics: metrics::Metrics,
    /// Permits for requests in flight (bounded by `max_concurrent_requests`).
    pub in_flight: tokio::sync::Semaphore,
    /// KiB of request bodies being received (bounded by `max_buffered_body_mb`).
    pub body_budget_kib: tokio::sync::Semaphore,
    /// What `GET /v1/admin/cluster` shows; `None` on a single node.
    pub cluster_status: Option<ClusterStatus>,
}

/// A cluster's view of itself for `GET /v1/admin/cluster` and `GET /v1/admin/placement`,
/// given by the binary that joined the node to a cluster (the server knows nothing of
/// clusters).
pub type ClusterStatus = Box<dyn Fn(StatusView) -> serde_json::Value + Send + Sync>;

/// Which view of the cluster an admin request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusView {
    /// Nodes, roles, leaders, the log (`/v1/admin/cluster`).
    Cluster,
    /// Shard popularity, replicas, holders and routing fractions (`/v1/admin/placement`).
    Placement,
}

impl AppState {
    /// Opens the data directory: every table and every text of its catalog.
    pub fn open(config: ServerConfig) -> Result<Arc<AppState>, ApiError> {
        AppState::open_with(config, |options| options, None)
    }

    /// [`AppState::open`] with the database options passed through `options` (a
    /// cluster node sets its catalog, shipper and following there) and a cluster
    /// status for the admin API.
    pub fn open_with(
        config: ServerConfig,
        options: impl FnOnce(puffer_node::DatabaseOptions) -> puffer_node::DatabaseOptions,
        cluster_status: Option<ClusterStatus>,
    ) -> Result<Arc<AppState>, ApiError> {
        let mut options = options(config.adapt.database_options()?);
        if config.record_cache_mb > config::MAX_RECORD_CACHE_MB {
            return Err(ApiError::invalid(format!(
                "record_cache_mb is at most {}, got {}",
                config::MAX_RECORD_CACHE_MB,
                config.record_cache_mb
            )));
        }
        options.shard.record_cache_bytes = config.record_cache_mb << 20;
        if !(1..=config::MAX_LOG_TABLE_RECORDS).contains(&config.log_table_max_records) {
            return Err(ApiError::invalid(format!(
                "log_table_max_records is between 1 and {}, got {}",
                config::MAX_LOG_TABLE_RECORDS,
                config.log_table_max_records
            )));
        }
        options.shard.log_table_max_records = config.log_table_max_records;
        config.connection_limits()?;
        let (hyperspace, calibration) = config.hyperspace.options()?;
        options.hyperspace = hyperspace;
        let db = Arc::new(Database::open_with(&config.data_dir, options)?);
        if let Some(calibration) = calibration {
            db.set_hyperspace_calibration(calibration)?;
        }
        start_configurator(
            &db,
            std::time::Duration::from_secs(config.hyperspace.interval_s),
        )?;
        let state = Arc::new(AppState {
            db,
            cluster_status,
            in_flight: tokio::sync::Semaphore::new(config.max_concurrent_requests.max(1)),
            body_budget_kib: tokio::sync::Semaphore::new(
                usize::try_from(config.max_buffered_body_mb << 10).unwrap_or(usize::MAX),
            ),
            config,
            metrics: Default::default(),
        });
        Ok(state)
    }
}

/// Runs the subspace configurator over every profiled table every `interval`, for as
/// long as the database is open.
fn start_configurator(db: &Arc<Database>, interval: std::time::Duration) -> Result<(), ApiError> {
    let db = Arc::downgrade(db);
    std::thread::Builder::new()
        .name("puffer-hyperspace".into())
        .spawn(move || loop {
            // Slept in short steps: the thread ends soon after the database closes.
            let until = std::time::Instant::now() + interval;
            while std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(200).min(interval));
                if db.strong_count() == 0 {
                    return;
                }
            }
            match db.upgrade() {
                Some(db) => db.tune_tables(),
                None => return,
            }
        })
        .map_err(|e| ApiError::invalid(format!("cannot start the configurator thread: {e}")))?;
    Ok(())
}

/// The router with every route, auth, metrics, the body limit, and panics answered 500.
pub fn router(state: Arc<AppState>) -> Router {
    router_with(state, Router::new())
}

/// [`router`] with `extra` routes under the same layers: tests add routes that fail on
/// purpose, which the real server must not serve.
fn router_with(state: Arc<AppState>, extra: Router<Arc<AppState>>) -> Router {
    let v1 = Router::new()
        .route("/v1/sql", post(routes::sql))
        .route(
            "/v1/tables",
            post(routes::create_table).get(routes::list_tables),
        )
        .route(
            "/v1/tables/{table}",
            get(routes::get_table).delete(routes::drop_table),
        )
        .route("/v1/tables/{table}/records", post(routes::put_records))
        .route("/v1/batches", post(routes::put_batch))
        .route(
            "/v1/tables/{table}/records/{key}",
            get(routes::get_record).delete(routes::delete_record),
        )
        .route("/v1/tables/{table}/search", post(routes::search))
        .route("/v1/admin/replicas", get(admin::replicas))
        .route("/v1/admin/cluster", get(admin::cluster))
        .route("/v1/admin/placement", get(admin::placement))
        .route("/v1/admin/history", get(admin::history))
        .route("/v1/admin/replicas/{id}/layers", post(admin::set_layers))
        .route(
            "/v1/admin/replicas/{id}/attribute-layers",
            post(admin::set_attribute_layers),
        )
        .route("/v1/admin/budget", axum::routing::put(admin::set_budget))
        .route(
            "/v1/admin/tables/{table}/subspaces",
            get(admin::subspaces).post(admin::add_subspace),
        )
        .route(
            "/v1/admin/tables/{table}/subspaces/{name}",
            axum::routing::delete(admin::drop_subspace),
        )
        .route(
            "/v1/admin/hyperspace/calibration",
            get(admin::calibration).put(admin::set_calibration),
        )
        .route("/v1/texts/{name}/extract", get(texts::extract))
        .route("/v1/texts/{name}/count", get(texts::count))
        .route("/v1/texts/{name}/search", get(texts::search))
        .route("/v1/texts/{name}/range", get(texts::range))
        .route("/v1/texts/{name}/wildcard", get(texts::wildcard));
    // A text (up to `max_text_bytes`) is read by its handler, in its request slot.
    let upload = Router::new().route(
        "/v1/texts/{name}",
        post(texts::upload).layer(DefaultBodyLimit::max(state.config.max_text_bytes)),
    );
    let body_limit = state.config.max_body_bytes;
    Router::new()
        .merge(guarded(v1, &state, BodyIntake::Received))
        .merge(guarded(upload, &state, BodyIntake::Streamed))
        .merge(extra)
        .route("/", get(dashboard::page))
        .route("/health", get(routes::health))
        .route("/ready", get(routes::ready))
        .route("/metrics", get(render_metrics))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .fallback(error::unknown_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        // Inside the metrics layer, so a panic is counted as the 500 it is answered with.
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// How a route's body reaches its handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyIntake {
    /// Received whole before the request takes a slot (every route but text uploads).
    Received,
    /// Read by the handler, in its slot, under the same deadline (text uploads, up to
    /// `max_text_bytes`: too large to hold in the body budget).
    Streamed,
}

/// `routes` behind the caller's role and the bound on requests in flight.
fn guarded(
    routes: Router<Arc<AppState>>,
    state: &Arc<AppState>,
    intake: BodyIntake,
) -> Router<Arc<AppState>> {
    routes
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::resolve_role,
        ))
        .layer(middleware::from_fn_with_state(
            (state.clone(), intake),
            limit_in_flight,
        ))
}

/// Receives a request's body (as its route's [`BodyIntake`] says), then refuses the
/// request when `max_concurrent_requests` are already being served, rather than
/// queueing without bound. A body received first holds no request slot while it
/// arrives, only its share of `max_buffered_body_mb`, for at most `body_timeout_s`.
async fn limit_in_flight(
    axum::extract::State((state, intake)): axum::extract::State<(Arc<AppState>, BodyIntake)>,
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let timeout = std::time::Duration::from_secs(state.config.body_timeout_s);
    let (request, _reserved) = match intake {
        BodyIntake::Streamed => (
            request.map(|body| connections::deadline_body(body, timeout)),
            None,
        ),
        BodyIntake::Received => match receive_body(&state, request, timeout).await {
            Ok(received) => received,
            Err(error) => return error.into_response(),
        },
    };
    let Ok(_permit) = state.in_flight.try_acquire() else {
        // A received body was read already; a streamed one is what the client is sending.
        drain(request.into_body(), state.config.max_body_bytes).await;
        return overloaded(format!(
            "{} requests are being served (the limit); retry later",
            state.config.max_concurrent_requests
        ))
        .into_response();
    };
    next.run(request).await
}

/// A retryable `overloaded` error.
fn overloaded(message: String) -> ApiError {
    let mut error = ApiError::new(error::ErrorCode::Overloaded, message);
    error.retryable = true;
    error
}

/// The request with its body received whole (within `timeout` and `max_body_bytes`), and
/// the share of `max_buffered_body_mb` it holds (none for a request without a body).
async fn receive_body(
    state: &AppState,
    request: axum::extract::Request,
    timeout: std::time::Duration,
) -> Result<
    (
        axum::extract::Request,
        Option<tokio::sync::SemaphorePermit<'_>>,
    ),
    ApiError,
> {
    use http_body::Body as _;
    if request.body().is_end_stream() {
        return Ok((request, None));
    }
    let limit = state.config.max_body_bytes;
    let announced = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok());
    // A body of unknown length may grow to the limit.
    let kib = announced.unwrap_or(limit).div_ceil(1024).max(1);
    let kib = u32::try_from(kib).unwrap_or(u32::MAX);
    let reserved = if announced.is_some_and(|length| length > limit) {
        Err(ApiError::limit(format!(
            "the request body is too large: more than max_body_bytes ({limit})"
        )))
    } else {
        state.body_budget_kib.try_acquire_many(kib).map_err(|_| {
            overloaded(format!(
                "{} MiB of request bodies are being received (max_buffered_body_mb); retry later",
                state.config.max_buffered_body_mb
            ))
        })
    };
    let reserved = match reserved {
        Ok(reserved) => reserved,
        Err(refusal) => {
            drain(request.into_body(), limit).await;
            return Err(refusal);
        }
    };
    let (parts, body) = request.into_parts();
    let body = connections::deadline_body(body, timeout);
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| error::body_error(&e, limit))?;
    Ok((
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes)),
        Some(reserved),
    ))
}

/// Longest a refused request's body is read for, to be dropped.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads and drops up to `limit` bytes of a refused request's body, for at most
/// [`DRAIN_TIMEOUT`]: a client that sends its whole body before it reads the answer
/// would otherwise find the connection reset under it instead of the refusal. Nothing
/// is kept, so draining costs time on the connection, not memory.
async fn drain(mut body: axum::body::Body, limit: usize) {
    use http_body_util::BodyExt;
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let mut seen = 0;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |data| data.len());
            if seen > limit {
                break;
            }
        }
    })
    .await;
}

/// Request metrics, then the node's place in the database's order: the newest SCU it
/// has applied, whether it follows a cluster's log (on a cluster, the difference
/// between nodes' published SCUs is how far behind a follower is), and the shards it
/// holds and does not hold.
async fn render_metrics(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
) -> String {
    let mut out = state.metrics.render();
    // A cluster's data-only node holds only the shards placed on it.
    let (mut held, mut not_held) = (0u64, 0u64);
    for name in state.db.table_names() {
        if let Ok(table) = state.db.table(&name) {
            for shard in 0..table.layout().shards {
                if table.holds(shard) {
                    held += 1;
                } else {
                    not_held += 1;
                }
            }
        }
    }
    out.push_str(&format!(
        "# HELP puffer_published_scu The newest SCU applied on this node (what reads see).\n\
         # TYPE puffer_published_scu gauge\n\
         puffer_published_scu {}\n\
         # HELP puffer_following 1 while this node follows a cluster's log (SCUs numbered elsewhere).\n\
         # TYPE puffer_following gauge\n\
         puffer_following {}\n\
         # HELP puffer_shards_held Shards of every table held on this node.\n\
         # TYPE puffer_shards_held gauge\n\
         puffer_shards_held {held}\n\
         # HELP puffer_shards_not_held Shards of every table held elsewhere, not on this node.\n\
         # TYPE puffer_shards_not_held gauge\n\
         puffer_shards_not_held {not_held}\n",
        state.db.published(),
        u8::from(state.db.is_following())
    ));
    out
}

/// Serves until Ctrl-C; `ready` is called with the bound address.
pub async fn serve(
    config: ServerConfig,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), ApiError> {
    serve_state(AppState::open(config)?, ready).await
}

/// Serves an opened state on its configured address until Ctrl-C (or SIGTERM).
pub async fn serve_state(
    state: Arc<AppState>,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), ApiError> {
    let listen = state.config.listen;
    let limits = state.config.connection_limits()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ApiError::internal(format!("cannot listen on {listen}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    ready(bound);
    connections::serve_connections(listener, router(state), limits, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
