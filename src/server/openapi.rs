//! The OpenAPI 3.1 document of `mcpgate serve`: every route with its request, its responses
//! (each status `errors.rs` and the middleware map to) and the bearer scheme; served at
//! `GET /api/v1/openapi.json` without authentication (it names routes, never tools).

mod apps;
mod chat;
mod me;
mod routes;
mod schemas;

use std::collections::BTreeMap;

use axum::Json;
use serde_json::{Map, Value, json};

use routes::routes;

/// Who may call a route.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Public,
    /// Any authenticated caller.
    Caller,
    /// An administrator: the admin role (of its own tenant with `[access]`) or an operator.
    Admin,
    /// A gateway operator (the admin role without `[access]`).
    Operator,
    /// An operator or the metrics role.
    Scraper,
}

/// One operation: its success response and the errors particular to it; the statuses every
/// route shares (Host guard, request deadline, authentication) are added by [`operation`].
struct Route {
    method: &'static str,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    access: Access,
    parameters: Value,
    body: Option<Value>,
    ok: Value,
    /// `(status, description, schema)`; the schema names a component, or is empty for a
    /// body that is not ours (rmcp's plain text, or none).
    errors: &'static [(u16, &'static str, &'static str)],
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_body(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

/// Statuses any route may answer, and those of authenticated routes.
const EVERY_ROUTE: &[(u16, &str)] = &[
    (
        403,
        "The Host or Origin is not accepted (`host_not_allowed`, `origin_not_allowed`).",
    ),
    (
        504,
        "The request did not finish within the request deadline (`timeout`).",
    ),
];
const AUTHENTICATED: &[(u16, &str)] = &[
    (
        400,
        "A malformed `Authorization` or `x-mcpgate-session` header, or a token in the query string (`invalid_request`, `token_in_query`).",
    ),
    (
        401,
        "No token, or one that is invalid, expired or not yet valid (see `WWW-Authenticate`).",
    ),
];
const ADMIN_ONLY: (u16, &str) = (
    403,
    "The caller administers nothing: neither the admin role of a configured tenant nor an operator (`forbidden`).",
);
const OPERATOR_ONLY: (u16, &str) = (403, "The caller is not a gateway operator (`forbidden`).");

fn operation(route: &Route) -> Value {
    let mut responses: BTreeMap<u16, (Vec<&str>, &str)> = BTreeMap::new();
    let mut add = |status: u16, description: &'static str, schema: &'static str| {
        let entry = responses.entry(status).or_insert((Vec::new(), schema));
        entry.0.push(description);
        if entry.1.is_empty() {
            entry.1 = schema;
        }
    };
    for (status, description, schema) in route.errors {
        add(*status, description, schema);
    }
    match route.access {
        Access::Admin => add(ADMIN_ONLY.0, ADMIN_ONLY.1, "Error"),
        Access::Operator => add(OPERATOR_ONLY.0, OPERATOR_ONLY.1, "Error"),
        _ => {}
    }
    if route.access != Access::Public {
        for (status, description) in AUTHENTICATED {
            add(*status, description, "Error");
        }
    }
    for (status, description) in EVERY_ROUTE {
        add(*status, description, "Error");
    }
    let mut out = Map::new();
    out.insert("200".into(), route.ok.clone());
    for (status, (descriptions, schema)) in responses {
        let description = descriptions.join(" Or: ");
        let mut response = if schema.is_empty() {
            json!({ "description": description })
        } else {
            json_body(&description, schema_ref(schema))
        };
        match status {
            401 => {
                response["headers"] = json!({ "WWW-Authenticate": {
                "description": "The bearer challenge (RFC 6750).", "schema": { "type": "string" } } })
            }
            429 => {
                response["headers"] = json!({ "Retry-After": {
                "description": "Seconds until a retry may succeed.", "schema": { "type": "integer" } } })
            }
            _ => {}
        }
        out.insert(status.to_string(), response);
    }
    let mut op = json!({ "operationId": route.id, "summary": route.summary });
    if route.parameters.as_array().is_some_and(|p| !p.is_empty()) {
        op["parameters"] = route.parameters.clone();
    }
    op["responses"] = Value::Object(out);
    if route.access == Access::Public {
        op["security"] = json!([]);
    }
    if let Some(body) = &route.body {
        op["requestBody"] = body.clone();
    }
    op
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for route in routes()
        .into_iter()
        .chain(chat::routes())
        .chain(apps::routes())
        .chain(me::routes())
    {
        let item = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method] = operation(&route);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mcpgate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A secure gateway between LLM applications and MCP tool servers. \
                Every response carries `x-request-id` (a valid one sent is kept) and \
                `x-mcpgate-overhead-ms` (time spent in the gateway, upstreams excluded). \
                Errors are `{ok: false, code, message}` with a stable `code`.",
            "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
        },
        "security": [{ "bearer": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": { "bearer": {
                "type": "http", "scheme": "bearer",
                "description": "A JWT (mode `jwt`) or the token printed at start (mode `dev`).",
            } },
            "schemas": all_schemas(),
        },
    })
}

fn all_schemas() -> Value {
    let mut all = schemas::schemas();
    if let Value::Object(map) = &mut all {
        map.extend(chat::schemas());
        map.extend(apps::schemas());
        map.extend(me::schemas());
    }
    all
}

/// `GET /api/v1/openapi.json`.
pub async fn serve() -> Json<Value> {
    Json(document())
}
