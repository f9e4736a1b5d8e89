//! Resource, prompt and completion errors of the gateway as JSON-RPC errors: the MCP
//! specification's codes for what the caller asked wrongly, a code-tagged message without
//! upstream details for everything else.

use rmcp::ErrorData;
use serde_json::json;

use crate::gateway::resources::ContentError;

/// A gateway error as the JSON-RPC error the client sees; the detail of upstream failures
/// goes to the log only.
pub fn error(err: ContentError) -> ErrorData {
    let data = Some(json!({ "code": err.code() }));
    match &err {
        ContentError::ResourceNotFound { uri } => {
            ErrorData::resource_not_found(format!("unknown resource {uri:?}"), data)
        }
        ContentError::PromptNotFound { .. }
        | ContentError::Ambiguous { .. }
        | ContentError::InvalidParams { .. } => ErrorData::invalid_params(err.to_string(), data),
        ContentError::ResultTooLarge { .. }
        | ContentError::Timeout { .. }
        | ContentError::StoreUnavailable { .. }
        | ContentError::AuthorizationRequired { .. } => {
            ErrorData::internal_error(err.to_string(), data)
        }
        ContentError::Upstream { server, .. } => {
            tracing::warn!(error = %err, "an upstream failed a resource or prompt request");
            ErrorData::internal_error(
                format!("upstream `{server}` could not serve the request"),
                data,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ErrorCode;

    use super::*;
    use crate::gateway::UpstreamError;

    #[test]
    fn errors_map_to_spec_codes_without_upstream_detail() {
        let missing = error(ContentError::ResourceNotFound {
            uri: "x://y".into(),
        });
        assert_eq!(missing.code, ErrorCode::RESOURCE_NOT_FOUND);
        let invalid = error(ContentError::InvalidParams {
            reason: "`arg1` is required".into(),
        });
        assert_eq!(invalid.code, ErrorCode::INVALID_PARAMS);
        assert!(invalid.message.contains("arg1"));
        let upstream = error(ContentError::Upstream {
            server: "conf".into(),
            source: UpstreamError::Rpc {
                code: -32603,
                message: "secret stack trace".into(),
            },
        });
        assert_eq!(upstream.code, ErrorCode::INTERNAL_ERROR);
        assert!(!upstream.message.contains("secret"), "{}", upstream.message);
        assert_eq!(upstream.data, Some(json!({ "code": "upstream_error" })));
    }
}
