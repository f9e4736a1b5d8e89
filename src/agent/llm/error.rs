//! What can go wrong talking to the model server, as typed errors with stable codes. Messages
//! never carry the API key or configured header values (server bodies are redacted and cut).

use std::{fmt, time::Duration};

/// Which deadline ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// Opening the connection (`connect_timeout`).
    Connect,
    /// The whole request, stream included (`request_timeout`).
    Request,
    /// Silence between two pieces of the response (`idle_timeout`).
    Idle,
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::Connect => "connect",
            TimeoutPhase::Request => "request",
            TimeoutPhase::Idle => "idle",
        })
    }
}

/// A failed model request.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The client cannot be built from this configuration (e.g. an invalid header).
    #[error("invalid model client configuration: {detail}")]
    Config { detail: String },
    /// The request cannot be sent as asked (e.g. an option the client sets itself).
    #[error("the model request is invalid: {detail}")]
    BadRequest { detail: String },
    /// No connection, or the connection broke.
    #[error("the model server is unreachable: {detail}")]
    Unreachable { detail: String },
    /// A deadline ran out.
    #[error("the model server did not answer in time ({phase} timeout, {after:?})")]
    Timeout {
        phase: TimeoutPhase,
        after: Duration,
    },
    /// A non-success HTTP status; `message` is the server's (redacted, at most a few hundred
    /// characters).
    #[error("the model server answered HTTP {status}: {message}")]
    Status {
        status: u16,
        message: String,
        /// From `Retry-After` (seconds), when the server sent one.
        retry_after: Option<Duration>,
    },
    /// The server reported an error inside a successful stream (`{"error": ...}` chunk).
    #[error("the model server reported an error: {message}")]
    Reported { message: String },
    /// The response is not an OpenAI-compatible chat completion.
    #[error("the model server sent an invalid response: {detail}")]
    BadResponse { detail: String },
    /// The response is longer than `max_response_bytes`.
    #[error("the model response is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// More tool calls in one response than the client accepts.
    #[error("the model made more than {limit} tool calls in one response")]
    TooManyToolCalls { limit: usize },
    /// One tool call's arguments are longer than the client accepts.
    #[error("the arguments of a tool call are longer than {limit} bytes")]
    ArgumentsTooLarge { limit: usize },
}

impl LlmError {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::Config { .. } => "llm_config",
            LlmError::BadRequest { .. } => "llm_bad_request",
            LlmError::Unreachable { .. } => "llm_unreachable",
            LlmError::Timeout { .. } => "llm_timeout",
            LlmError::Status { .. } | LlmError::Reported { .. } => "llm_status",
            LlmError::BadResponse { .. } => "llm_bad_response",
            LlmError::TooLarge { .. }
            | LlmError::TooManyToolCalls { .. }
            | LlmError::ArgumentsTooLarge { .. } => "llm_too_large",
        }
    }

    /// Whether trying the same request again later may succeed (connection trouble, a
    /// timeout, HTTP 408/429/5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unreachable { .. } | LlmError::Timeout { .. } => true,
            LlmError::Status { status, .. } => matches!(status, 408 | 429 | 500..=599),
            _ => false,
        }
    }

    pub(crate) fn bad_response(detail: impl Into<String>) -> LlmError {
        LlmError::BadResponse {
            detail: detail.into(),
        }
    }
}

/// Replaces every secret in `text` and cuts it to `max_chars` characters.
pub(crate) fn redact(text: &str, secrets: &[String], max_chars: usize) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret.as_str(), "<redacted>");
    }
    if out.chars().count() > max_chars {
        out = out.chars().take(max_chars).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_secrets_and_bounds_length() {
        let secrets = vec!["sk-secret-key".to_owned(), "ab".to_owned()];
        let text = redact("bad key sk-secret-key, ab", &secrets, 100);
        assert_eq!(text, "bad key <redacted>, ab");
        assert_eq!(redact("abcdef", &[], 3), "abc…");
    }

    #[test]
    fn codes_are_stable() {
        let timeout = LlmError::Timeout {
            phase: TimeoutPhase::Idle,
            after: Duration::from_secs(1),
        };
        assert_eq!(timeout.code(), "llm_timeout");
        assert!(timeout.is_transient());
        assert_eq!(LlmError::TooLarge { limit: 1 }.code(), "llm_too_large");
        assert_eq!(LlmError::bad_response("x").code(), "llm_bad_response");
    }
}
