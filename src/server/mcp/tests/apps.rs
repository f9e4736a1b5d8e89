//! What an MCP App's tool carries passes through both views as the upstream wrote it: the
//! tool's `_meta` (its `ui.resourceUri` and `visibility`), output schema and icons, the
//! result's structured content and `_meta`, and the view's `ui://` resource (MIME type,
//! `_meta` with its CSP, a body of over 1 MiB) byte for byte; in the merged view, the view's
//! `ui://` URI under its server, in the tool's `_meta` and in the listing and read alike.
//! The extension is declared to the upstream and the upstream's forwarded to the client; a
//! view is hidden from a caller who may use none of the tools naming it.

use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceError,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
        ExtensionCapabilities, Icon, ListResourcesResult, ListToolsResult, MetaObject,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::support::{Endpoint, TestClient, WAIT, in_process, initialize, jwt_auth, jwt_for};
use crate::{
    config::{AccessConfig, AuthConfig, Confirm, Grant, ServerId, TenantAccess},
    gateway::apps::EXTENSION,
};

fn wire<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn object(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().expect("an object")
}

/// The tool as the upstream lists it.
fn upstream_tool() -> Tool {
    let mut tool = Tool::new_with_raw(
        "show",
        Some("Shows a number in its view.".into()),
        std::sync::Arc::new(object(json!({ "type": "object" }))),
    );
    tool.output_schema = Some(std::sync::Arc::new(object(json!({
        "type": "object",
        "properties": { "n": { "type": "number" } },
        "required": ["n"]
    }))));
    tool.icons = Some(vec![Icon::new("https://example.test/icon.png")]);
    tool.meta = Some(MetaObject(object(json!({
        "ui": { "resourceUri": "ui://apps/view.html", "visibility": ["model", "app"] },
        "ui/resourceUri": "ui://apps/view.html"
    }))));
    tool
}

fn upstream_result() -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text("n is 1")]);
    result.structured_content = Some(json!({ "n": 1 }));
    result.meta = Some(MetaObject(object(json!({ "ui": { "theme": "dark" } }))));
    result
}

/// The view as the upstream names it (the server's id is `apps` too: the merged view's URI
/// is `ui://apps/apps/view.html`).
const VIEW_URI: &str = "ui://apps/view.html";
const APP_MIME: &str = "text/html;profile=mcp-app";

fn view_meta() -> MetaObject {
    MetaObject(object(json!({ "ui": {
        "csp": { "connectDomains": ["https://api.example.test"] },
        "prefersBorder": true
    } })))
}

/// The view's resource as the upstream reads it: a page of over 1 MiB.
fn upstream_view() -> ReadResourceResult {
    let body = format!(
        "<!doctype html><title>view</title><script>{}</script>",
        "/* padding */ ".repeat(80_000)
    );
    assert!(body.len() > 1 << 20);
    ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
        uri: VIEW_URI.to_owned(),
        mime_type: Some(APP_MIME.to_owned()),
        text: body,
        meta: Some(view_meta()),
    }])
}

/// A tool of the same server without a view.
fn plain_tool() -> Tool {
    Tool::new_with_raw(
        "plain",
        Some("Has no view.".into()),
        std::sync::Arc::new(object(json!({ "type": "object" }))),
    )
}

/// The extension's settings as the upstream declares them.
fn server_extension() -> serde_json::Map<String, Value> {
    object(json!({ "note": "declared by the upstream" }))
}

#[derive(Clone)]
struct AppServer;

impl ServerHandler for AppServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        let mut extensions = ExtensionCapabilities::new();
        extensions.insert(EXTENSION.to_owned(), server_extension());
        capabilities.extensions = Some(extensions);
        ServerConfig::new(capabilities)
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut view = Resource::new(VIEW_URI, "view").with_mime_type(APP_MIME);
        view.meta = Some(view_meta());
        Ok(ListResourcesResult::with_all_items(vec![view]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri == VIEW_URI {
            Ok(upstream_view().into())
        } else {
            Err(ErrorData::resource_not_found("no such resource", None))
        }
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            upstream_tool(),
            plain_tool(),
        ]))
    }

    /// As an Apps server that answers with its view's data only to a client rendering
    /// views: the gateway must have declared the extension.
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let declared = context
            .client_capabilities()
            .and_then(|capabilities| capabilities.extensions)
            .and_then(|extensions| extensions.get(EXTENSION).cloned());
        let mime_types = declared.as_ref().and_then(|ui| ui.get("mimeTypes"));
        if mime_types != Some(&json!([APP_MIME])) {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "the client declared no MCP Apps support: {declared:?}"
            ))])
            .into());
        }
        Ok(upstream_result().into())
    }
}

/// The view's URI as `url`'s view names it: under the server in the merged view.
fn view_uri_in(merged: bool) -> &'static str {
    if merged {
        "ui://apps/apps/view.html"
    } else {
        VIEW_URI
    }
}

#[tokio::test]
async fn an_apps_tool_and_result_pass_through_both_views_intact() {
    let mut server = in_process("apps", AppServer);
    server.confirm = Confirm::None;
    let endpoint = Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await;
    for (url, name, merged) in [
        (endpoint.url(), "apps_show", true),
        (format!("{}/apps", endpoint.url()), "show", false),
    ] {
        let client = endpoint
            .connect_to(
                url.clone(),
                TestClient::new(None),
                initialize(),
                &endpoint.token,
            )
            .await;
        let extensions = client
            .peer_info()
            .and_then(|info| info.capabilities.extensions.clone())
            .unwrap_or_default();
        assert_eq!(
            extensions.get(EXTENSION),
            Some(&server_extension()),
            "{url}: the upstream's extension is forwarded"
        );
        let listed = tokio::time::timeout(WAIT, client.list_all_tools())
            .await
            .expect("in time")
            .expect("listed");
        let tool = listed
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{url}: {name} in {listed:?}"));
        let expected = upstream_tool();
        let mut expected_meta = wire(&expected.meta);
        expected_meta["ui"]["resourceUri"] = json!(view_uri_in(merged));
        expected_meta["ui/resourceUri"] = json!(view_uri_in(merged));
        assert_eq!(wire(&tool.meta), expected_meta, "{url}: _meta");
        assert_eq!(
            wire(&tool.output_schema),
            wire(&expected.output_schema),
            "{url}: outputSchema"
        );
        assert_eq!(wire(&tool.icons), wire(&expected.icons), "{url}: icons");

        let called = tokio::time::timeout(
            WAIT,
            client.call_tool(CallToolRequestParams::new(name.to_owned())),
        )
        .await
        .expect("in time")
        .expect("called");
        let expected = upstream_result();
        assert_eq!(
            called.structured_content, expected.structured_content,
            "{url}: {called:?}"
        );
        assert_eq!(
            wire(&called.meta),
            wire(&expected.meta),
            "{url}: result _meta"
        );

        // The view: listed and read under the view's URI, otherwise byte for byte.
        let resources = client.list_all_resources().await.expect("resources/list");
        let [listed] = resources.as_slice() else {
            panic!("{url}: one view in {resources:?}");
        };
        let mut expected = wire(
            &Resource::new(view_uri_in(merged), "view")
                .with_mime_type(APP_MIME)
                .with_meta(view_meta()),
        );
        expected["uri"] = json!(view_uri_in(merged));
        assert_eq!(wire(listed), expected, "{url}: listed");
        let read = tokio::time::timeout(
            WAIT,
            client.read_resource(ReadResourceRequestParams::new(view_uri_in(merged))),
        )
        .await
        .expect("in time")
        .expect("read");
        // Contents and `_meta` (the cache hints are the upstream session's, on its version).
        let mut expected = wire(&upstream_view().contents);
        expected[0]["uri"] = json!(view_uri_in(merged));
        let got = wire(&read.contents);
        if got != expected {
            let mut shown = got;
            let length = shown[0]["text"].as_str().map(str::len);
            shown[0]["text"] = json!(length);
            panic!("{url}: the view differs: {shown}");
        }
        assert_eq!(read.meta, upstream_view().meta, "{url}");
        client.cancel().await.expect("closed");
    }
    endpoint.stop().await;
}

#[tokio::test]
async fn a_view_is_hidden_with_the_tools_that_name_it() {
    let server_id = |id: &str| ServerId::new(id).expect("valid id");
    let grant = |user: &str, tool: &str| Grant {
        tenant: "local".into(),
        users: vec![user.into()],
        roles: vec![],
        tools: vec![tool.into()],
    };
    let access = AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "local".into(),
            servers: vec![server_id("apps")],
            models: None,
        }],
        grants: vec![grant("alice", "apps.*"), grant("bob", "apps.plain")],
        operators: vec![],
    };
    let mut server = in_process("apps", AppServer);
    server.confirm = Confirm::None;
    let endpoint = Endpoint::start_servers(jwt_auth(), vec![server], Some(access)).await;
    for (user, sees) in [("alice", true), ("bob", false)] {
        for (url, merged) in [
            (endpoint.url(), true),
            (format!("{}/apps", endpoint.url()), false),
        ] {
            let client = endpoint
                .connect_to(
                    url.clone(),
                    TestClient::new(None),
                    initialize(),
                    &jwt_for(user),
                )
                .await;
            let resources = client.list_all_resources().await.expect("resources/list");
            assert_eq!(
                resources.len(),
                usize::from(sees),
                "{user} {url}: {resources:?}"
            );
            let read = client
                .read_resource(ReadResourceRequestParams::new(view_uri_in(merged)))
                .await;
            match read {
                Ok(read) => assert!(sees, "{user} {url}: read {} contents", read.contents.len()),
                Err(ServiceError::McpError(error)) => {
                    assert!(!sees, "{user} {url}: {error:?}");
                    assert_eq!(error.code, ErrorCode::RESOURCE_NOT_FOUND);
                }
                Err(other) => panic!("{user} {url}: {other:?}"),
            }
            client.cancel().await.expect("closed");
        }
    }
    endpoint.stop().await;
}
