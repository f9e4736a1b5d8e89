//! The routes of a user's own remote servers (`[user_servers]`, as `server/me.rs` serves
//! them) and their schemas.

use serde_json::{Map, Value, json};

use super::{Access, Route, json_body, schema_ref};

const OFF: (u16, &str, &str) = (
    404,
    "User-added servers are not enabled (`not_found`), or the caller has no server of this name (`unknown_server`).",
    "Error",
);
const STORE: (u16, &str, &str) = (
    503,
    "The store of users' servers is unavailable (`store_unavailable`).",
    "Error",
);

fn name() -> Value {
    json!([{ "name": "name", "in": "path", "required": true,
        "description": "The name the caller gave the server (its id is `user-<name>`).",
        "schema": { "type": "string" } }])
}

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            method: "get",
            path: "/api/v1/me/servers",
            id: "listMyServers",
            access: Access::Caller,
            summary: "The remote servers the caller added for themselves, with what each lists \
                for them now (header values are never shown).",
            parameters: json!([]),
            body: None,
            ok: json_body("The caller's servers.", schema_ref("UserServerList")),
            errors: &[OFF, STORE],
        },
        Route {
            method: "post",
            path: "/api/v1/me/servers",
            id: "addMyServer",
            access: Access::Caller,
            summary: "Adds a remote MCP server (Streamable HTTP over https, public addresses \
                only) for the caller alone, after connecting to it and listing its tools.",
            parameters: json!([]),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("NewUserServer") } } })),
            ok: json_body("Added (status 201).", schema_ref("UserServerAdded")),
            errors: &[
                (
                    400,
                    "The body, the name, the URL or a header is not acceptable (`bad_request`, `invalid_name`, `invalid_url`, `invalid_header`), or the URL is refused by the SSRF guard (`url_refused`, with the reason).",
                    "Error",
                ),
                (
                    403,
                    "The URL's host is not one the operator allows (`host_not_allowed`).",
                    "Error",
                ),
                OFF,
                (
                    409,
                    "The caller has a server of this name (`name_taken`), or as many servers as allowed (`too_many_servers`).",
                    "Error",
                ),
                (
                    502,
                    "The server could not be connected to or listed (`server_unreachable`).",
                    "Error",
                ),
                STORE,
            ],
        },
        Route {
            method: "delete",
            path: "/api/v1/me/servers/{name}",
            id: "removeMyServer",
            access: Access::Caller,
            summary: "Removes one of the caller's servers and closes its connection.",
            parameters: name(),
            body: None,
            ok: json_body("Removed.", schema_ref("Ok")),
            errors: &[OFF, STORE],
        },
        Route {
            method: "put",
            path: "/api/v1/me/servers/{name}/read-only",
            id: "markMyServerReadOnly",
            access: Access::Caller,
            summary: "Replaces the tools of one of the caller's servers that are called \
                without confirmation: their current definitions (a changed one needs \
                confirmation again).",
            parameters: name(),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("ReadOnlyTools") } } })),
            ok: json_body(
                "The server after the change.",
                schema_ref("UserServerAdded"),
            ),
            errors: &[
                (
                    400,
                    "The body is not acceptable (`bad_request`) or names a tool the server does not list (`unknown_tool`).",
                    "Error",
                ),
                OFF,
                (
                    409,
                    "A tool's definition is no longer the one with the fingerprint given (`definition_changed`).",
                    "Error",
                ),
                STORE,
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/me/servers/{name}/connect",
            id: "connectMyServer",
            access: Access::Caller,
            summary: "Starts connecting the caller's own account on one of their servers with \
                `auth: \"oauth\"`: the authorization server's URL to send them to (completed \
                at `/api/v1/oauth/callback`).",
            parameters: name(),
            body: None,
            ok: json_body("Where to send the user.", schema_ref("MyServerConnect")),
            errors: &[
                (
                    404,
                    "User-added servers are not enabled (`not_found`), the caller has no server of this name (`unknown_server`), or it does not use OAuth (`not_oauth`).",
                    "Error",
                ),
                (
                    502,
                    "The server's authorization server could not be found or registered with (`oauth_unavailable`).",
                    "Error",
                ),
                (
                    503,
                    "The gateway has no `public_url` to be sent back to (`oauth_unavailable`), or a store is unavailable (`store_unavailable`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "delete",
            path: "/api/v1/me/servers/{name}/connect",
            id: "disconnectMyServer",
            access: Access::Caller,
            summary: "Ends the caller's connection on one of their servers (its tokens revoked \
                where the authorization server offers RFC 7009).",
            parameters: name(),
            body: None,
            ok: json_body(
                "Disconnected (or there was nothing to).",
                schema_ref("MyServerDisconnected"),
            ),
            errors: &[
                (
                    404,
                    "User-added servers are not enabled (`not_found`), the caller has no server of this name (`unknown_server`), or it does not use OAuth (`not_oauth`).",
                    "Error",
                ),
                STORE,
            ],
        },
    ]
}

pub(super) fn schemas() -> Map<String, Value> {
    let schemas = json!({
        "NewUserServer": {
            "type": "object",
            "required": ["name", "url"],
            "additionalProperties": false,
            "properties": {
                "name": { "type": "string", "pattern": "^[a-z][a-z0-9-]{0,26}$" },
                "url": { "type": "string", "description": "https, a public address, a host the operator allows." },
                "headers": { "type": "object", "additionalProperties": { "type": "string" },
                    "description": "Sent with every request to the server; kept sealed, never shown back." },
                "auth": { "enum": ["none", "oauth"],
                    "description": "`oauth`: calls carry the user's own token from the server's authorization server (connect at `/api/v1/me/servers/{name}/connect`)." },
            },
        },
        "UserServer": {
            "type": "object",
            "required": ["name", "server", "url", "headers", "readOnly", "createdAt", "auth"],
            "properties": {
                "name": { "type": "string" },
                "server": { "type": "string", "description": "`user-<name>`: its id in the caller's catalog." },
                "url": { "type": "string" },
                "headers": { "type": "array", "items": { "type": "string" }, "description": "Header names only." },
                "readOnly": { "type": "array", "items": { "type": "string" } },
                "tools": { "type": ["integer", "null"] },
                "error": { "type": ["string", "null"], "description": "Why the last listing failed." },
                "createdAt": { "type": "string", "format": "date-time" },
                "auth": { "enum": ["none", "oauth"] },
                "authorization": {
                    "type": ["object", "null"],
                    "description": "With `auth: oauth`: the caller's connection (`status`: `connected`, `expired` or `none`; `scopes`, `issuer`, `connectedAt` when connected) and `connect`, the route that connects it.",
                },
            },
        },
        "UserServerList": {
            "type": "object",
            "required": ["servers"],
            "properties": { "servers": { "type": "array", "items": schema_ref("UserServer") } },
        },
        "UserServerAdded": {
            "type": "object",
            "required": ["server"],
            "properties": { "server": schema_ref("UserServer") },
        },
        "MyServerConnect": {
            "type": "object",
            "required": ["server", "authorizationUrl"],
            "properties": { "server": { "type": "string" }, "authorizationUrl": { "type": "string" } },
        },
        "MyServerDisconnected": {
            "type": "object",
            "required": ["server", "disconnected"],
            "properties": { "server": { "type": "string" }, "disconnected": { "type": "boolean" } },
        },
        "ReadOnlyTools": {
            "type": "object",
            "required": ["tools"],
            "additionalProperties": false,
            "properties": { "tools": { "type": "array", "items": { "oneOf": [
                { "type": "string", "description": "A tool's name: its definition as listed now." },
                { "type": "object", "required": ["name", "fingerprint"], "additionalProperties": false,
                  "properties": { "name": { "type": "string" }, "fingerprint": { "type": "string",
                    "description": "The definition the user looked at; refused (409) if the server lists another by now." } } },
            ] } } },
        },
    });
    match schemas {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
