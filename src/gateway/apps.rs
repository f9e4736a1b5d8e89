//! MCP Apps (the `io.modelcontextprotocol/ui` extension) in the gateway's views. A tool's
//! interactive view is a `ui://` resource its `_meta` names (`ui.resourceUri`, or the
//! deprecated flat `ui/resourceUri`); who may call the tool is its `_meta.ui.visibility`
//! (`model`, `app`; both when absent).
//!
//! The merged view (`/mcp`, the page) puts each server's `ui://` URIs under the server's id,
//! `ui://<server>/<rest>` for the upstream's `ui://<rest>`, so two servers' views never
//! collide and a read routes back to its server without a listing; the tools' `_meta` is
//! rewritten to match. The per-server view keeps the upstream's URIs.
//!
//! A view is as visible as the tools that name it: when every tool naming it is hidden from
//! a caller, so is the view.

use std::collections::HashSet;

use rmcp::model::{MetaObject, Tool};
use serde_json::Value;

use super::{Gateway, GatewayError, ToolOutput, call::Call};
use crate::{catalog::CatalogTool, config::ServerId, policy::CallContext};

pub use crate::upstream::extensions::{
    APP_MIME, APPS_EXTENSION as EXTENSION, declared as client_extensions,
};

/// The scheme of views.
const SCHEME: &str = "ui://";

/// The flat key older servers name their view by, beside `ui.resourceUri`.
const FLAT_KEY: &str = "ui/resourceUri";

/// Who calls a tool: the model, or an app from inside its view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Model,
    App,
}

impl Caller {
    fn word(self) -> &'static str {
        match self {
            Caller::Model => "model",
            Caller::App => "app",
        }
    }
}

/// Whether `tool` may be called by `caller` (its `_meta.ui.visibility` names it, or is
/// absent: then both may).
pub fn visible_to(tool: &Tool, caller: Caller) -> bool {
    let visibility = tool
        .meta
        .as_ref()
        .and_then(|meta| meta.0.get("ui"))
        .and_then(|ui| ui.get("visibility"))
        .and_then(Value::as_array);
    visibility.is_none_or(|who| who.iter().any(|w| w == caller.word()))
}

/// The `ui://` view `tool` names, as its upstream wrote it: `ui.resourceUri`, else the flat
/// key.
pub fn view_uri(tool: &Tool) -> Option<&str> {
    let meta = &tool.meta.as_ref()?.0;
    let nested = meta
        .get("ui")
        .and_then(|ui| ui.get("resourceUri"))
        .and_then(Value::as_str);
    nested
        .or_else(|| meta.get(FLAT_KEY).and_then(Value::as_str))
        .filter(|uri| uri.starts_with(SCHEME))
}

/// `uri` of `server` as the merged view names it: a `ui://` URI under the server's id,
/// anything else unchanged.
pub fn merged_uri(server: &ServerId, uri: &str) -> String {
    match uri.strip_prefix(SCHEME) {
        Some(rest) => format!("{SCHEME}{server}/{rest}"),
        None => uri.to_owned(),
    }
}

/// The server and upstream URI of a merged view's `ui://<server>/<rest>`; `None` for any
/// other URI (and for a first segment that is no server id).
pub fn from_merged(uri: &str) -> Option<(ServerId, String)> {
    let (server, rest) = uri.strip_prefix(SCHEME)?.split_once('/')?;
    let server = ServerId::new(server)?;
    Some((server, format!("{SCHEME}{rest}")))
}

/// Whether `uri` is a view's (`ui://`).
pub fn is_view(uri: &str) -> bool {
    uri.starts_with(SCHEME)
}

/// `meta` of a tool of `server` as the merged view lists it: its view URIs (both keys)
/// under the server's id; everything else as the upstream wrote it.
pub fn merged_meta(server: &ServerId, meta: &MetaObject) -> MetaObject {
    let mut meta = meta.clone();
    if let Some(Value::String(uri)) = meta
        .0
        .get_mut("ui")
        .and_then(|ui| ui.get_mut("resourceUri"))
    {
        *uri = merged_uri(server, uri);
    }
    if let Some(Value::String(uri)) = meta.0.get_mut(FLAT_KEY) {
        *uri = merged_uri(server, uri);
    }
    meta
}

/// The upstream URIs of `server`'s views that `visible` (the caller's tools) leaves hidden:
/// named by some tool of the server in `catalog`, by none in `visible`.
pub fn hidden_views(
    server: &ServerId,
    catalog: &[CatalogTool],
    visible: &[CatalogTool],
) -> HashSet<String> {
    let named = |tools: &[CatalogTool]| -> HashSet<String> {
        tools
            .iter()
            .filter(|t| &t.server == server)
            .filter_map(|t| view_uri(&t.upstream))
            .map(str::to_owned)
            .collect()
    };
    let shown = named(visible);
    named(catalog)
        .into_iter()
        .filter(|uri| !shown.contains(uri))
        .collect()
}

impl Gateway {
    /// A call an MCP App makes from inside its view `view` of `server` (the view as the
    /// merged view names it, `ui://<server>/…`, the one the page rendered; see
    /// [`from_merged`]), `tool` by its upstream name, as the app knows it. Only tools of that
    /// server whose visibility includes `app` answer; anything else is `not_found`, as the
    /// gate answers any name a caller may not see. Otherwise the one gate as for every call
    /// (access, pins, arguments, a confirmation for writes, limits), audited with the view in
    /// the record's detail. Also returns the time spent waiting for the upstream.
    pub async fn call_tool_from_app(
        &self,
        ctx: &CallContext,
        (server, view): (&ServerId, &str),
        tool: &str,
        arguments: Value,
        confirmation: Option<&str>,
    ) -> (Result<ToolOutput, GatewayError>, std::time::Duration) {
        let name = format!("{server}.{tool}");
        let call = Call {
            name: &name,
            confirmation,
            relay: None,
            app: Some((server, view)),
        };
        self.call_gated(ctx, call, arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> serde_json::Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn id(raw: &str) -> ServerId {
        ServerId::new(raw).expect("an id")
    }

    #[test]
    fn merged_uris_round_trip_and_leave_other_schemes_alone() {
        let server = id("time-2");
        let merged = merged_uri(&server, "ui://get-time/mcp-app.html");
        assert_eq!(merged, "ui://time-2/get-time/mcp-app.html");
        assert_eq!(
            from_merged(&merged),
            Some((server.clone(), "ui://get-time/mcp-app.html".to_owned()))
        );
        assert_eq!(merged_uri(&server, "file:///a"), "file:///a");
        // No server id first: not a merged view's URI.
        assert_eq!(from_merged("ui://Bad_Id/x"), None);
        assert_eq!(from_merged("ui://noslash"), None);
        assert_eq!(from_merged("https://a/b"), None);
    }

    #[test]
    fn both_view_keys_are_rewritten_and_nothing_else() {
        let meta = MetaObject(object(json!({
            "ui": { "resourceUri": "ui://v/a.html", "visibility": ["app"], "x": "ui://keep" },
            "ui/resourceUri": "ui://v/a.html",
            "other": "ui://keep"
        })));
        let merged = merged_meta(&id("s"), &meta);
        assert_eq!(
            serde_json::to_value(&merged).expect("serializes"),
            json!({
                "ui": { "resourceUri": "ui://s/v/a.html", "visibility": ["app"], "x": "ui://keep" },
                "ui/resourceUri": "ui://s/v/a.html",
                "other": "ui://keep"
            })
        );
    }

    #[test]
    fn visibility_defaults_to_both() {
        let mut tool = Tool::new_with_raw("t", None, std::sync::Arc::new(serde_json::Map::new()));
        assert!(visible_to(&tool, Caller::Model) && visible_to(&tool, Caller::App));
        tool.meta = Some(MetaObject(object(
            json!({ "ui": { "visibility": ["app"] } }),
        )));
        assert!(!visible_to(&tool, Caller::Model) && visible_to(&tool, Caller::App));
        tool.meta = Some(MetaObject(object(
            json!({ "ui": { "visibility": ["model"] } }),
        )));
        assert!(visible_to(&tool, Caller::Model) && !visible_to(&tool, Caller::App));
        tool.meta = Some(MetaObject(object(json!({ "ui/resourceUri": "ui://x/y" }))));
        assert_eq!(view_uri(&tool), Some("ui://x/y"));
    }
}
