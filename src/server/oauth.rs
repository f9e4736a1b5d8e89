//! OAuth routes outside the API: the protected resource metadata of `/mcp` (RFC 9728), which
//! MCP clients fetch before they have a token.

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::{AppState, errors::ApiError};
use crate::server::auth::METADATA_PREFIX;

/// Clients may keep the document this long (it changes only with the configuration).
const MAX_AGE: &str = "public, max-age=3600";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(METADATA_PREFIX, get(root_metadata))
        .route(&format!("{METADATA_PREFIX}/{{*rest}}"), get(metadata))
        .route(crate::oauth::CLIENT_METADATA_PATH, get(client_metadata))
}

/// The gateway's Client ID Metadata Document, fetched by authorization servers that take it
/// as the client's registration.
async fn client_metadata(State(state): State<AppState>) -> Response {
    let gateway = state.gateway.current();
    match gateway.connections().and_then(|c| c.client_metadata()) {
        Some(document) => {
            let mut response = Json(document).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static(MAX_AGE));
            response
        }
        None => not_found(
            "this gateway publishes no client metadata: it needs an https public_url and a server with auth = \"oauth\"",
        ),
    }
}

async fn root_metadata(State(state): State<AppState>) -> Response {
    serve_metadata(&state, "")
}

async fn metadata(State(state): State<AppState>, Path(rest): Path<String>) -> Response {
    serve_metadata(&state, &format!("/{rest}"))
}

fn serve_metadata(state: &AppState, rest: &str) -> Response {
    match state.auth.protected_resource() {
        Some(protected) if protected.serves(rest) => {
            let mut response = Json(protected.document().clone()).into_response();
            let headers = response.headers_mut();
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(MAX_AGE));
            // Public and unauthenticated: browser-based clients read it from any origin.
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            response
        }
        Some(_) => not_found("no protected resource at this path: the gateway's is /mcp"),
        None => not_found(
            "this gateway is not an OAuth protected resource: it needs JWT authentication \
             and [server] public_url",
        ),
    }
}

fn not_found(message: &'static str) -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", message).into_response()
}
