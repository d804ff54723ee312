//! API errors: a status, a stable code, a message, and whether a retry may help.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use puffer_query::QueryError;

/// An error answer: `{"code", "message", "retryable"}`.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
}

impl ApiError {
    /// An error with a status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retryable: false,
        }
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 413 `limit_exceeded`.
    pub fn limit(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "limit_exceeded", message)
    }

    /// 404 with a code.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 500 `internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl From<QueryError> for ApiError {
    fn from(error: QueryError) -> ApiError {
        let code = error.code();
        let status = match code {
            "unknown_table" => StatusCode::NOT_FOUND,
            "table_exists" => StatusCode::CONFLICT,
            "limit_exceeded" => StatusCode::PAYLOAD_TOO_LARGE,
            "overloaded" => StatusCode::TOO_MANY_REQUESTS,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "io_error" | "corrupt" | "index_error" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError {
            status,
            code,
            retryable: error.retryable(),
            message: error.to_string(),
        }
    }
}

impl From<puffer_store::StoreError> for ApiError {
    fn from(error: puffer_store::StoreError) -> ApiError {
        QueryError::Store(error).into()
    }
}

impl From<puffer_index::IndexError> for ApiError {
    fn from(error: puffer_index::IndexError) -> ApiError {
        match error {
            puffer_index::IndexError::InvalidArgument(m) => ApiError::invalid(m),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "index_error",
                other.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.retryable {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::invalid(format!("bad query string: {}", rejection.body_text()))
    }
}

/// 404 for paths no route serves.
pub async fn unknown_route(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found("unknown_route", format!("no route serves {}", uri.path()))
}

/// 405 for a method a route does not take.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::limit(format!(
                "the request body is too large: {}",
                rejection.body_text()
            ))
        } else {
            ApiError::invalid(format!(
                "cannot read the request body: {}",
                rejection.body_text()
            ))
        }
    }
}
