//! Bearer-token roles. With no token configured every caller is an admin; with tokens,
//! a request's role comes from its `Authorization: Bearer` header, and each handler
//! checks the role it needs before it changes anything.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::AppState;

/// What a caller may do; each role includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// No valid token.
    Anonymous,
    /// Reads.
    Read,
    /// Reads and record writes.
    Write,
    /// Everything, tables and texts included.
    Admin,
}

/// Refuses the request unless `role` is at least `needed`.
pub fn require(role: Role, needed: Role) -> Result<(), ApiError> {
    if role >= needed {
        return Ok(());
    }
    Err(match role {
        Role::Anonymous => ApiError::new(
            ErrorCode::Unauthorized,
            "a bearer token is required (Authorization: Bearer <token>)",
        ),
        _ => ApiError::new(
            ErrorCode::Forbidden,
            format!("this needs the {needed:?} role; the token gives {role:?}"),
        ),
    })
}

/// Resolves the caller's role and stores it in the request's extensions.
pub async fn resolve_role(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let config = &state.config;
    let role = if !config.auth_enabled() {
        Role::Admin
    } else {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                // The scheme name is case-insensitive (RFC 9110).
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let matches = |token: &Option<String>| {
            presented.is_some_and(|p| token.as_deref().is_some_and(|t| constant_time_eq(p, t)))
        };
        if matches(&config.admin_token) {
            Role::Admin
        } else if matches(&config.write_token) {
            Role::Write
        } else if matches(&config.read_token) {
            Role::Read
        } else if presented.is_some() {
            let mut error = require(Role::Anonymous, Role::Read).unwrap_err();
            error.message = "the bearer token is not valid".into();
            let mut response = error.into_response();
            // The body is not read: the connection cannot be reused.
            response.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return response;
        } else {
            Role::Anonymous
        }
    };
    request.extensions_mut().insert(role);
    next.run(request).await
}

/// Compares secrets without an early exit on the first difference.
fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
