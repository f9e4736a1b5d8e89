//! The OpenAPI document against the router: every documented operation is served and
//! answers only statuses it documents, other methods and paths are not served; and the
//! document against its reviewed snapshot.

use std::path::PathBuf;

use axum::http::{Method, StatusCode};
use mcpgate::server::openapi::document;
use serde_json::{Value, json};

use super::{Reply, demo_harness};

/// Methods tried on every documented path.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// The router's own 404 (no route) has no JSON error body; a handler's 404 has one.
/// The router's own 404: no route has the path (`route_not_found`), as against a route's
/// answer that what it names does not exist.
fn unrouted(reply: &Reply) -> bool {
    reply.status == StatusCode::NOT_FOUND
        && reply
            .json
            .as_ref()
            .is_none_or(|body| body["code"].is_null() || body["code"] == "route_not_found")
}

#[tokio::test]
async fn the_document_lists_exactly_the_routes_served() {
    let harness = demo_harness().await;
    let doc = document();
    let served = harness
        .send_as(None, Method::GET, "/api/v1/openapi.json", None)
        .await;
    assert_eq!(served.status, StatusCode::OK, "public, no token needed");
    assert_eq!(served.json.as_ref(), Some(&doc));

    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 10, "{paths:?}");
    for (path, item) in paths {
        // `demo` is a real server id; as a confirmation id it is simply unknown.
        let concrete = path.replace("{id}", "demo");
        for method in METHODS {
            let key = method.as_str().to_ascii_lowercase();
            let body = (method != Method::GET).then(|| json!({}));
            let reply = harness.send(method.clone(), &concrete, body.as_ref()).await;
            let Some(operation) = item.get(&key) else {
                assert_eq!(
                    reply.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} is served but not documented"
                );
                continue;
            };
            assert!(
                !unrouted(&reply) && reply.status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is documented but not served: {}",
                reply.status
            );
            let status = reply.status.as_u16().to_string();
            assert!(
                operation["responses"].get(&status).is_some(),
                "{method} {path} answered {status}, which it does not document: {}",
                reply.text
            );
        }
    }
    for undocumented in [
        "/nope",
        "/api/v1/nope",
        "/api/v1/mcp/tools/extra",
        "/api/v2/audit",
    ] {
        let reply = harness.send(Method::GET, undocumented, None).await;
        assert!(unrouted(&reply), "{undocumented}: {}", reply.status);
    }
    harness.stop().await;
}

#[test]
fn every_operation_is_complete() {
    let doc = document();
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for target in &refs {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {target}"));
        assert!(schemas.contains_key(name), "{target} is not defined");
    }
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            ids.push(op["operationId"].as_str().expect("operationId").to_owned());
            let responses = op["responses"].as_object().expect("responses");
            assert!(responses.contains_key("200"), "{method} {path}");
            let public = op.get("security") == Some(&json!([]));
            // Every route can meet the Host guard and the request deadline; every
            // authenticated one, a refused credential.
            let mut expected = vec!["403", "504"];
            if !public {
                expected.extend(["400", "401"]);
            }
            for status in expected {
                let response = &responses[status];
                assert!(
                    response["content"]["application/json"]["schema"]["$ref"].is_string(),
                    "{method} {path} {status}"
                );
            }
            for name in path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            {
                let declared = op["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == name && p["in"] == "path"));
                assert!(declared, "{method} {path}: parameter {name}");
            }
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operation ids are unique");
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                out.push(target.clone());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_document_matches_its_snapshot() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/openapi.json");
    let actual = serde_json::to_string_pretty(&document()).expect("serializes") + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("folder")).expect("snapshot folder");
        std::fs::write(&path, &actual).expect("snapshot written");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected == actual {
        return;
    }
    let first_difference = expected
        .lines()
        .zip(actual.lines())
        .position(|(e, a)| e != a)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    let line = |text: &str| {
        text.lines()
            .nth(first_difference)
            .unwrap_or("<end>")
            .to_owned()
    };
    panic!(
        "the OpenAPI document differs from {} at line {}:\n  snapshot: {}\n  now:      {}\n\
         Review the change; if it is intended, rewrite the snapshot with\n  \
         UPDATE_SNAPSHOTS=1 cargo nextest run --test it service_extras::openapi::the_document_matches_its_snapshot\n\
         (or the same filter with `cargo test --test it`) and commit it.",
        path.display(),
        first_difference + 1,
        line(&expected),
        line(&actual),
    );
}
