//! `Idempotency-Key` on `POST /api/v1/mcp/tools/call` (after the IETF httpapi draft): the
//! first request with a key runs; a retry of the same request (same caller, tool, arguments
//! and confirmation token) within `[limits] idempotency_window` gets the first answer again,
//! marked `Idempotent-Replayed: true`, and the upstream is not called again. The same key with
//! another request is 422 `idempotency_key_reused`; while the first still runs, a duplicate is
//! 409 `idempotency_key_in_use` (with `Retry-After`), never a second call.
//!
//! Answers that ran nothing, or ask the client to act first, are not kept, so a retry with the
//! same key runs: 428 (a confirmation is needed), 429 (a limit), 503 (nothing was sent). Every
//! other answer is kept, a timeout (504) and an upstream failure (502) included: the call may
//! have acted, and the retry must not act twice.

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::Value;

use super::{AppState, errors::ApiError};
use crate::{
    gateway::Gateway,
    policy::CallContext,
    store::idempotency::{Answer, Begin, IdempotencyKey},
};

/// The request header, and the one marking a replayed answer.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest key (the draft leaves it to the server; UUIDs are 36).
const MAX_KEY_CHARS: usize = 255;

/// A request's hold on its key: [`Claim::finish`] keeps (or releases) its answer.
pub struct Claim {
    key: IdempotencyKey,
    request_hash: String,
}

/// The key `headers` carry, if any: an sf-string (`"..."`) or, as many clients send it, bare.
fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |why: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_idempotency_key",
            format!("`Idempotency-Key` {why}"),
        )
    };
    if values.next().is_some() {
        return Err(invalid("is given more than once"));
    }
    let text = value
        .to_str()
        .map_err(|_| invalid("must be printable ASCII"))?;
    let key = match text.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| invalid("has an unterminated quote"))?,
        None => text,
    };
    let fine = (1..=MAX_KEY_CHARS).contains(&key.len())
        && key
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\');
    if !fine {
        return Err(invalid(&format!(
            "must be 1 to {MAX_KEY_CHARS} printable ASCII characters, without `\"` or `\\`"
        )));
    }
    Ok(Some(key.to_owned()))
}

fn unavailable() -> ApiError {
    let mut err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "the idempotency store is unavailable; try again shortly",
    );
    err.retry_after = Some(2);
    err
}

/// Claims the request's key, when it has one: `Ok(None)` to run it as usual (no key, or the
/// window is zero); `Err` with the answer to give instead (a replay, a mismatch, in use, a
/// malformed key).
pub async fn claim(
    state: &AppState,
    gateway: &Gateway,
    ctx: &CallContext,
    headers: &HeaderMap,
    request: &Value,
) -> Result<Option<Claim>, Response> {
    claim_or_refuse(state, gateway, ctx, headers, request)
        .await
        .map_err(|refused| match refused {
            Refused::Error(err) => err.into_response(),
            Refused::Replay(answer) => replayed(answer.status, answer.body),
        })
}

/// Why a request with a key does not run.
enum Refused {
    Error(ApiError),
    Replay(Answer),
}

impl From<ApiError> for Refused {
    fn from(err: ApiError) -> Refused {
        Refused::Error(err)
    }
}

async fn claim_or_refuse(
    state: &AppState,
    gateway: &Gateway,
    ctx: &CallContext,
    headers: &HeaderMap,
    request: &Value,
) -> Result<Option<Claim>, Refused> {
    let window = gateway.config().call_limits.idempotency_window;
    let Some(key) = key_of(headers)? else {
        return Ok(None);
    };
    if window.is_zero() {
        return Ok(None);
    }
    let key = IdempotencyKey::new(&ctx.tenant, &ctx.user, &key);
    let request_hash = crate::catalog::args_hash(request);
    let now = std::time::SystemTime::now();
    // A claim is abandoned once its request could no longer be running.
    let stale_after = state.service.request_timeout;
    let store = gateway.idempotency_store();
    match store.begin(&key, &request_hash, now, stale_after).await {
        Err(err) => {
            tracing::error!(error = %err, "the idempotency store failed");
            Err(unavailable().into())
        }
        Ok(Begin::Fresh) => Ok(Some(Claim { key, request_hash })),
        Ok(Begin::Mismatch) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was used for another request: use a new key for a new request",
        )
        .into()),
        Ok(Begin::InFlight) => {
            let mut err = ApiError::new(
                StatusCode::CONFLICT,
                "idempotency_key_in_use",
                "the first request with this Idempotency-Key is still running: retry later",
            );
            err.retry_after = Some(1);
            Err(err.into())
        }
        Ok(Begin::Replay(sealed)) => match key.open(&sealed) {
            Ok(answer) => Err(Refused::Replay(answer)),
            Err(err) => {
                tracing::error!(error = %err, "a kept answer does not open");
                Err(unavailable().into())
            }
        },
    }
}

impl Claim {
    /// Keeps `answer` for the key's retries (or releases the key when the answer is not one
    /// to keep); returns it to send.
    pub async fn finish(self, gateway: &Gateway, answer: Response) -> Response {
        let store = gateway.idempotency_store();
        let status = answer.status();
        let keep = !matches!(
            status,
            StatusCode::PRECONDITION_REQUIRED
                | StatusCode::TOO_MANY_REQUESTS
                | StatusCode::SERVICE_UNAVAILABLE
        );
        if !keep {
            if let Err(err) = store.release(&self.key, &self.request_hash).await {
                tracing::warn!(error = %err, "releasing an idempotency key failed");
            }
            return answer;
        }
        let (parts, body) = answer.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            let _ = store.release(&self.key, &self.request_hash).await;
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the answer could not be read",
            )
                .into_response();
        };
        let kept = Answer {
            status: status.as_u16(),
            body: bytes.to_vec(),
        };
        let window = gateway.config().call_limits.idempotency_window;
        let stored = match self.key.seal(&kept) {
            Ok(sealed) => {
                store
                    .finish(
                        &self.key,
                        &self.request_hash,
                        &sealed,
                        std::time::SystemTime::now() + window,
                    )
                    .await
            }
            Err(err) => Err(err),
        };
        if let Err(err) = stored {
            // The call ran: its answer goes to the client all the same. A retry then finds
            // the claim unfinished (409) until it is abandoned, never a second call.
            tracing::error!(error = %err, "keeping an idempotent answer failed");
        }
        Response::from_parts(parts, Body::from(bytes))
    }
}

/// A kept answer as sent again.
fn replayed(status: u16, body: Vec<u8>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
