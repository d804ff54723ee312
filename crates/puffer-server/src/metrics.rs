//! Request counters and latency sums by route and status, in Prometheus text format.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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

/// Counters by route template, then method, then status.
type ByRoute = BTreeMap<String, BTreeMap<String, BTreeMap<u16, Counter>>>;

/// Request metrics (bounded: one entry per route template, method and status).
#[derive(Default)]
pub struct Metrics {
    by_route: Mutex<ByRoute>,
}

impl Metrics {
    /// The counters, also when a panic poisoned their lock: a holder that panicked can
    /// at worst have left one counter with its request counted and its time not, which
    /// skews a metric by one request, while failing on the lock would fail every later
    /// request (each one is counted).
    fn by_route(&self) -> MutexGuard<'_, ByRoute> {
        self.by_route.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Panics while holding the lock, as a bug in a holder would (tests only).
    #[cfg(test)]
    pub(crate) fn panic_holding_lock(&self, message: &str) -> ! {
        let _map = self.by_route.lock();
        panic!("{message}");
    }

    /// Whether a panic poisoned the lock (tests only).
    #[cfg(test)]
    pub(crate) fn is_poisoned(&self) -> bool {
        self.by_route.is_poisoned()
    }

    /// Counts a request. Looked up by borrowed names, so a request of a known route
    /// allocates nothing.
    fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = self.by_route();
        let methods = match map.get_mut(route) {
            Some(methods) => methods,
            None => map.entry(route.to_string()).or_default(),
        };
        let statuses = match methods.get_mut(method) {
            Some(statuses) => statuses,
            None => methods.entry(method.to_string()).or_default(),
        };
        let counter = statuses.entry(status).or_default();
        counter.requests += 1;
        counter.seconds += seconds;
    }

    /// Every counter as (method, route, status, counter), in that order.
    fn counters(map: &ByRoute) -> Vec<(&str, &str, u16, Counter)> {
        let mut out: Vec<_> = map
            .iter()
            .flat_map(|(route, methods)| {
                methods.iter().flat_map(move |(method, statuses)| {
                    statuses
                        .iter()
                        .map(move |(status, c)| (method.as_str(), route.as_str(), *status, *c))
                })
            })
            .collect();
        out.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        out
    }

    /// Prometheus exposition text.
    pub fn render(&self) -> String {
        let map = self.by_route();
        let counters = Self::counters(&map);
        let mut out = String::from(
            "# HELP puffer_http_requests_total HTTP requests by route and status.\n\
             # TYPE puffer_http_requests_total counter\n",
        );
        for (method, route, status, c) in &counters {
            out.push_str(&format!(
                "puffer_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {}\n",
                c.requests
            ));
        }
        out.push_str(
            "# HELP puffer_http_request_seconds_sum Time spent answering, by route and status.\n\
             # TYPE puffer_http_request_seconds_sum counter\n",
        );
        for (method, route, status, c) in &counters {
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
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    state.metrics.record(
        method.as_str(),
        route.as_ref().map_or("unmatched", |p| p.as_str()),
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_a_model_of_every_request() {
        let metrics = Metrics::default();
        let mut model: BTreeMap<(String, String, u16), u64> = BTreeMap::new();
        let (methods, routes, statuses) = (["GET", "POST"], ["/a", "/b/{x}", "/c"], [200, 404]);
        let mut seed = 12345u64;
        for _ in 0..500 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let pick = (seed >> 33) as usize;
            let (m, r, s) = (
                methods[pick % 2],
                routes[pick / 2 % 3],
                statuses[pick / 6 % 2],
            );
            metrics.record(m, r, s, 0.001);
            *model.entry((m.to_string(), r.to_string(), s)).or_default() += 1;
        }
        let text = metrics.render();
        let mut lines = 0;
        for line in text
            .lines()
            .filter(|l| l.starts_with("puffer_http_requests_total{"))
        {
            lines += 1;
            let (labels, count) = line.rsplit_once(' ').unwrap();
            let found = model.iter().find(|((m, r, s), _)| {
                labels
                    == format!(
                        "puffer_http_requests_total{{method=\"{m}\",route=\"{r}\",status=\"{s}\"}}"
                    )
            });
            let (_, want) = found.unwrap_or_else(|| panic!("unexpected series {labels}"));
            assert_eq!(count.parse::<u64>().unwrap(), *want, "{labels}");
        }
        assert_eq!(lines, model.len());
    }
}
