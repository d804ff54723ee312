//! Request counters and latency sums by route and status, in Prometheus text format.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::AppState;

/// Counters of one (method, route, status).
#[derive(Default, Clone, Copy)]
struct Counter {
    requests: u64,
    seconds: f64,
}

/// Request metrics (bounded: one entry per route template and status).
#[derive(Default)]
pub struct Metrics {
    by_route: Mutex<BTreeMap<(String, String, u16), Counter>>,
}

impl Metrics {
    fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = self.by_route.lock().expect("metrics lock");
        let counter = map
            .entry((method.to_string(), route.to_string(), status))
            .or_default();
        counter.requests += 1;
        counter.seconds += seconds;
    }

    /// Prometheus exposition text.
    pub fn render(&self) -> String {
        let map = self.by_route.lock().expect("metrics lock");
        let mut out = String::from(
            "# HELP puffer_http_requests_total HTTP requests by route and status.\n\
             # TYPE puffer_http_requests_total counter\n",
        );
        for ((method, route, status), c) in map.iter() {
            out.push_str(&format!(
                "puffer_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {}\n",
                c.requests
            ));
        }
        out.push_str(
            "# HELP puffer_http_request_seconds_sum Time spent answering, by route and status.\n\
             # TYPE puffer_http_request_seconds_sum counter\n",
        );
        for ((method, route, status), c) in map.iter() {
            out.push_str(&format!(
                "puffer_http_request_seconds_sum{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {:.6}\n",
                c.seconds
            ));
        }
        out
    }
}

/// Records every request's route template, status and duration.
pub async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    state.metrics.record(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}
