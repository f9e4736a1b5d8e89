//! What an MCP App's tool carries passes through both views as the upstream wrote it: the
//! tool's `_meta` (its `ui.resourceUri` and `visibility`), output schema and icons, the
//! result's structured content and `_meta`, and the view's `ui://` resource (MIME type,
//! `_meta` with its CSP, a body of over 1 MiB) byte for byte.

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Icon,
        ListResourcesResult, ListToolsResult, MetaObject, PaginatedRequestParams,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::support::{Endpoint, TestClient, WAIT, in_process, initialize};
use crate::config::{AuthConfig, Confirm};

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

#[derive(Clone)]
struct AppServer;

impl ServerHandler for AppServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
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
        Ok(ListToolsResult::with_all_items(vec![upstream_tool()]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(upstream_result().into())
    }
}

#[tokio::test]
async fn an_apps_tool_and_result_pass_through_both_views_intact() {
    let mut server = in_process("apps", AppServer);
    server.confirm = Confirm::None;
    let endpoint = Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await;
    for (url, name) in [
        (endpoint.url(), "apps_show"),
        (format!("{}/apps", endpoint.url()), "show"),
    ] {
        let client = endpoint
            .connect_to(
                url.clone(),
                TestClient::new(None),
                initialize(),
                &endpoint.token,
            )
            .await;
        let listed = tokio::time::timeout(WAIT, client.list_all_tools())
            .await
            .expect("in time")
            .expect("listed");
        let tool = listed
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{url}: {name} in {listed:?}"));
        let expected = upstream_tool();
        assert_eq!(wire(&tool.meta), wire(&expected.meta), "{url}: _meta");
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
            "{url}"
        );
        assert_eq!(
            wire(&called.meta),
            wire(&expected.meta),
            "{url}: result _meta"
        );
        client.cancel().await.expect("closed");
    }
    endpoint.stop().await;
}
