//! The gateway's typed errors, each with a stable machine-readable code.

use std::time::Duration;

use crate::upstream::UpstreamError;

/// Why a gateway operation did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// No such tool (or not visible to the caller: the two are indistinguishable on purpose).
    #[error("unknown tool `{name}`")]
    NotFound { name: String },
    /// The arguments are not acceptable.
    #[error("invalid arguments: {reason}")]
    InvalidArguments { reason: String },
    /// The tool ran and reported an error (`isError`).
    #[error("the tool reported an error: {message}")]
    ToolError { message: String },
    /// The result is larger than `max_result_bytes`.
    #[error("the result is {size} bytes, over the {limit}-byte limit")]
    ResultTooLarge { size: usize, limit: usize },
    /// The call did not finish in time.
    #[error("the tool did not answer within {after:?}")]
    Timeout { after: Duration },
    /// The upstream could not serve the call.
    #[error("upstream `{server}`: {source}")]
    Upstream {
        server: String,
        source: UpstreamError,
    },
}

impl GatewayError {
    /// A stable, machine-readable code (listed in the README).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::NotFound { .. } => "not_found",
            GatewayError::InvalidArguments { .. } => "invalid_arguments",
            GatewayError::ToolError { .. } => "tool_error",
            GatewayError::ResultTooLarge { .. } => "result_too_large",
            GatewayError::Timeout { .. } => "timeout",
            GatewayError::Upstream { source, .. } => source.code(),
        }
    }
}
