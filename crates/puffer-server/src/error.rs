//! API errors: a stable code (which implies the HTTP status), a message, and whether a
//! retry may help.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
pub use puffer_query::ErrorCode;
use puffer_query::QueryError;

/// The HTTP status of every error code: the one place it is decided. `docs/http.md`
/// lists the same table (a test checks it).
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::SyntaxError
        | C::Unsupported
        | C::InvalidRequest
        | C::InvalidRecord
        | C::InvalidSchema
        | C::InvalidSetting
        | C::BadJson
        | C::InUse => StatusCode::BAD_REQUEST,
        C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::Forbidden => StatusCode::FORBIDDEN,
        C::UnknownTable | C::UnknownText | C::UnknownReplica | C::NotFound | C::UnknownRoute => {
            StatusCode::NOT_FOUND
        }
        C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        C::TableExists | C::TextExists => StatusCode::CONFLICT,
        C::LimitExceeded => StatusCode::PAYLOAD_TOO_LARGE,
        C::Overloaded => StatusCode::TOO_MANY_REQUESTS,
        C::Unavailable | C::NotHeld | C::SnapshotGone => StatusCode::SERVICE_UNAVAILABLE,
        C::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
        C::IoError | C::Corrupt | C::IndexError | C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error answer: `{"code", "message", "retryable"}`, with the status of its code.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// Stable machine-readable code; it decides the HTTP status.
    pub code: ErrorCode,
    /// What went wrong, for a person.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
}

impl ApiError {
    /// An error with a code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retryable: false,
        }
    }

    /// `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// `limit_exceeded`.
    pub fn limit(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::LimitExceeded, message)
    }

    /// `internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Internal, message)
    }

    /// The HTTP status, the one its code implies.
    pub fn status(&self) -> StatusCode {
        status_of(self.code)
    }
}

impl From<QueryError> for ApiError {
    fn from(error: QueryError) -> ApiError {
        ApiError {
            code: error.code(),
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
            other => ApiError::new(ErrorCode::IndexError, other.to_string()),
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
        let mut response = (self.status(), axum::Json(body)).into_response();
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

/// The answer to a request whose handler panicked: `internal`, without the panic's
/// message, which may quote data the caller may not see (the panic hook has already
/// written it to the server's log). Also used when work run by `routes::blocking`
/// panics: that work runs inside the handler's poll, so its panic reaches the same layer.
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::internal("the server failed answering this request (a bug; see the server's log)")
        .into_response()
}

/// 404 for paths no route serves.
pub async fn unknown_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        ErrorCode::UnknownRoute,
        format!("no route serves {}", uri.path()),
    )
}

/// 405 for a method a route does not take.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("{} does not take {method}", uri.path()),
    )
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
        if let Some(timeout) = body_timeout(&rejection) {
            return timeout;
        }
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

/// The error of a body that could not be received whole within `limit` bytes.
pub fn body_error(error: &axum::Error, limit: usize) -> ApiError {
    if let Some(timeout) = body_timeout(error) {
        return timeout;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(inner) = cause {
        if inner.is::<http_body_util::LengthLimitError>() {
            return ApiError::limit(format!(
                "the request body is too large: more than max_body_bytes ({limit})"
            ));
        }
        cause = inner.source();
    }
    ApiError::invalid(format!("cannot read the request body: {error}"))
}

/// `request_timeout` when `error` comes of a body's deadline.
fn body_timeout(error: &(dyn std::error::Error + 'static)) -> Option<ApiError> {
    let mut cause = Some(error);
    while let Some(inner) = cause {
        if let Some(passed) = inner.downcast_ref::<crate::connections::BodyDeadlinePassed>() {
            return Some(ApiError::new(ErrorCode::RequestTimeout, passed.to_string()));
        }
        cause = inner.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows of the table of error codes in `docs/http.md`: (code, status).
    fn documented_codes() -> Vec<(String, u16)> {
        let doc = include_str!("../../../docs/http.md");
        let mut lines = doc.lines().map(str::trim);
        lines
            .by_ref()
            .find(|line| *line == "| code | status | meaning |")
            .expect("docs/http.md has no table headed | code | status | meaning |");
        lines
            .skip(1) // |---|---|---|
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
                let code = cells[0]
                    .strip_prefix('`')
                    .and_then(|c| c.strip_suffix('`'))
                    .unwrap_or_else(|| panic!("the code is not in backquotes: {line}"));
                let status = cells[1]
                    .parse()
                    .unwrap_or_else(|_| panic!("the status is not a number: {line}"));
                assert!(
                    cells.len() == 3 && !cells[2].is_empty(),
                    "no meaning: {line}"
                );
                (code.to_string(), status)
            })
            .collect()
    }

    #[test]
    fn docs_list_every_code_once_with_its_status() {
        let documented = documented_codes();
        for &code in ErrorCode::ALL {
            let rows: Vec<_> = documented
                .iter()
                .filter(|(text, _)| text == code.as_str())
                .collect();
            assert_eq!(
                rows.len(),
                1,
                "{code} is in docs/http.md's table {} times",
                rows.len()
            );
            assert_eq!(
                rows[0].1,
                status_of(code).as_u16(),
                "docs/http.md gives {code} another status"
            );
        }
        for (text, _) in &documented {
            assert!(
                ErrorCode::ALL.iter().any(|code| code == &text.as_str()),
                "docs/http.md lists {text}, which is no code"
            );
        }
    }

    #[test]
    fn an_answer_has_the_status_of_its_code_and_retry_after_when_retryable() {
        for &code in ErrorCode::ALL {
            for retryable in [false, true] {
                let mut error = ApiError::new(code, "m");
                error.retryable = retryable;
                let response = error.into_response();
                assert_eq!(response.status(), status_of(code), "{code}");
                assert_eq!(
                    response.headers().contains_key(header::RETRY_AFTER),
                    retryable,
                    "{code}"
                );
            }
        }
    }
}
