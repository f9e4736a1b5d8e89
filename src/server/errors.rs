//! The one place gateway errors become HTTP responses: a status that fits, a JSON body with a
//! stable code and a message that never leaks internals, and the details a client acts on.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{gateway::GatewayError, store::rfc3339};

/// An API error: status, code, message, extra fields.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Details a client acts on (boxed: errors travel through `Result`s on every path).
    pub extra: Option<Box<Value>>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

/// `Retry-After` of a `store_unavailable` answer.
const STORE_RETRY_SECS: u64 = 2;

impl From<GatewayError> for ApiError {
    fn from(err: GatewayError) -> ApiError {
        let status = match &err {
            GatewayError::InvalidArguments { .. } => StatusCode::BAD_REQUEST,
            GatewayError::NotFound { .. } | GatewayError::ConfirmationNotFound => {
                StatusCode::NOT_FOUND
            }
            GatewayError::Quarantined { .. } | GatewayError::PendingReview { .. } => {
                StatusCode::LOCKED
            }
            GatewayError::ConfirmationRequired { .. } => StatusCode::PRECONDITION_REQUIRED,
            GatewayError::ConfirmationInvalid { .. } => StatusCode::CONFLICT,
            GatewayError::LimitExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            // The call went through; the tool itself reported the failure.
            GatewayError::ToolError { .. } => StatusCode::OK,
            GatewayError::ResultTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::Upstream { source, .. } => match source {
                crate::gateway::UpstreamError::Unavailable { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::BAD_GATEWAY,
            },
            GatewayError::Page { source, .. } => match source {
                crate::webmcp::PageError::NotConnected { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            },
            GatewayError::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            // Not the caller's credential to the gateway (that would be 401): their account
            // at the upstream, which they connect through `connect`.
            GatewayError::AuthorizationRequired { .. } => StatusCode::FORBIDDEN,
            GatewayError::OAuthUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        };
        let mut api = ApiError::new(status, err.code(), err.to_string());
        match &err {
            GatewayError::ConfirmationRequired {
                confirmation_id,
                tool,
                args_hash,
                expires_at,
            } => {
                api.extra = Some(Box::new(json!({
                    "confirmationId": confirmation_id,
                    "tool": tool,
                    "argsHash": args_hash,
                    "expiresAt": rfc3339(*expires_at),
                })));
            }
            GatewayError::LimitExceeded { retry_after, .. } => {
                // Round up: a client retrying at the floor would be refused again.
                api.retry_after =
                    retry_after.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
            }
            // A store is back within seconds (a restart, a failover) or not for a while:
            // the client may try again soon, and the gateway reconnects by itself.
            GatewayError::StoreUnavailable { .. } => api.retry_after = Some(STORE_RETRY_SECS),
            GatewayError::AuthorizationRequired {
                server, connect, ..
            } => {
                api.extra = Some(Box::new(json!({ "server": server, "connect": connect })));
            }
            _ => {}
        }
        api
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "ok": false, "code": self.code, "message": self.message });
        if let (Some(extra), Some(map)) = (self.extra, body.as_object_mut())
            && let Value::Object(extra) = *extra
        {
            map.extend(extra);
        }
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// Longest plain-text refusal carried over into a typed one.
const MAX_REFUSAL_BYTES: usize = 1024;

/// A refusal made in plain text or with no body (the extractors' rejections: a body over
/// `max_body_bytes`, a malformed query; rmcp's: no session id, a wrong `Accept`; the router's
/// 404 and 405), answered as every other refusal of the gateway is, and as the OpenAPI
/// document says: `{"ok": false, "code", "message"}`, status and other headers kept, the
/// plain text as the message. Every other response passes untouched.
pub(super) async fn typed_refusal(response: Response) -> Response {
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REFUSAL_BYTES)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let code = match status {
        // The router's own 404 has no body: no route has this path.
        StatusCode::NOT_FOUND if text.is_empty() => "route_not_found",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
        status if status.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    let mut refused = ApiError::new(status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            refused.headers_mut().insert(name.clone(), value.clone());
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn statuses_and_details() {
        let limit = ApiError::from(GatewayError::LimitExceeded {
            limit: "user rate".into(),
            retry_after: Some(Duration::from_millis(1500)),
        });
        assert_eq!(limit.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limit.retry_after, Some(2));
        let confirm = ApiError::from(GatewayError::ConfirmationRequired {
            confirmation_id: "c1".into(),
            tool: "demo.add_note".into(),
            args_hash: "h".into(),
            expires_at: UNIX_EPOCH + Duration::from_secs(10),
        });
        assert_eq!(confirm.status, StatusCode::PRECONDITION_REQUIRED);
        let extra = confirm.extra.expect("details");
        assert_eq!(extra["confirmationId"], "c1");
        assert_eq!(extra["expiresAt"], "1970-01-01T00:00:10Z");
        let missing = ApiError::from(GatewayError::NotFound { name: "x".into() });
        assert_eq!(
            (missing.status, missing.code),
            (StatusCode::NOT_FOUND, "not_found")
        );
    }
}
