//! The dashboard page served at `/`: one self-contained HTML file (inline CSS and
//! JavaScript, no external resources, so it works without network) that polls
//! `/v1/admin/replicas` and `/v1/admin/history` every second and plots each replica's
//! footprint, layers, queue and rates over the last five minutes, and lists its attribute
//! layers; every five refreshes it reads each table's subspaces and what the subspace
//! configurator made of them (`/v1/admin/tables/{t}/subspaces`), and on a cluster node
//! the cluster and its placement (`/v1/admin/cluster` and `/v1/admin/placement`).

use axum::http::header;
use axum::response::{Html, IntoResponse};

/// The page, compiled into the binary.
const PAGE_HTML: &str = include_str!("../assets/dashboard.html");

/// What the page may load: its own inline script and style, and the API of this server.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `GET /`: the dashboard.
pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(PAGE_HTML),
    )
}

#[cfg(test)]
mod tests {
    use super::PAGE_HTML;

    #[test]
    fn page_loads_nothing_from_elsewhere() {
        for external in ["http://", "https://", "src=", "@import", "url("] {
            assert!(
                !PAGE_HTML.contains(external),
                "the dashboard references {external:?}"
            );
        }
    }

    #[test]
    fn page_reads_the_admin_api_and_exposes_test_hooks() {
        for needed in [
            "/v1/admin/replicas",
            "/v1/admin/history?last_s=",
            "/v1/admin/cluster",
            "/v1/admin/placement",
            "data-cluster",
            "data-updates",
            "data-points",
            "data-replica-id",
            "attributeLayers",
            "/subspaces",
            "data-subspaces-of",
            "Authorization",
        ] {
            assert!(PAGE_HTML.contains(needed), "the dashboard lacks {needed:?}");
        }
    }
}
