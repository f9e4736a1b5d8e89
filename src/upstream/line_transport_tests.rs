//! The line transport decodes every message as rmcp does (a tool call's result by a shorter
//! path), skips what rmcp skips, and answers JSON that is no message.

use std::{sync::Arc, time::Duration};

use rmcp::{
    ErrorData, RoleClient,
    model::{GetExtensions, JsonRpcMessage, NumberOrString, ServerJsonRpcMessage, ServerResult},
    service::RxJsonRpcMessage,
    transport::Transport,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{CallMeta, Decoded, LineTransport, call_result, decode, request_json, trim};

const WAIT: Duration = Duration::from_secs(10);

/// Lines of every kind an upstream sends, tool call results in many shapes among them.
const LINES: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
    r#"{"jsonrpc":"2.0","id":"a-1","result":{"content":[],"isError":true}}"#,
    r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"x"}],"structuredContent":{"n":1},"_meta":{"k":"v"}}}"#,
    r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"structuredContent":null}}"#,
    r#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"image","data":"AAAA","mimeType":"image/png"}],"resultType":"complete"}}"#,
    r#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"resource","resource":{"uri":"file:///a","text":"t"}}]}}"#,
    r#"{"jsonrpc":"2.0","id":"t-1","result":{"isError":false,"content":[{"text":"a \"q\"\n\u00e9","type":"text"},{"type":"text","text":""}]}}"#,
    r#"{"jsonrpc":"2.0","id":"t-2","result":{"content":[{"type":"text","text":"x"}],"isError":null}}"#,
    r#"{"jsonrpc":"2.0","id":"t-3","result":{"content":[{"type":"text","text":"x","annotations":{"priority":0.5}}]}}"#,
    r#"{"jsonrpc":"2.0","id":"t-4","result":{"content":[{"type":"text","text":"x","_meta":{"k":1}}]}}"#,
    r#"{"jsonrpc":"2.0","id":"t-5","result":{"resultType":"complete","content":[{"type":"text","text":"Echo: hello"}],"isError":false}}"#,
    // Not plainly a tool call's result: left to rmcp.
    r#"{"jsonrpc":"2.0","id":6,"result":{"content":[],"resultType":"input_required","inputRequests":{}}}"#,
    r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"vendorExtra":1}}"#,
    r#"{"jsonrpc":"2.0","id":8,"result":{"isError":false}}"#,
    r#"{"jsonrpc":"2.0","id":9,"result":{"tools":[]}}"#,
    r#"{"jsonrpc":"2.0","id":10,"result":{}}"#,
    r#"{"jsonrpc":"2.0","id":11,"result":{"contents":[{"uri":"file:///a","text":"t"}]}}"#,
    r#"{"jsonrpc":"2.0","id":12,"error":{"code":-32601,"message":"no such method"}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}"#,
    r#"{"jsonrpc":"2.0","id":13,"method":"roots/list"}"#,
    r#"{"jsonrpc":"2.0","id":14,"result":{"content":"not a list"}}"#,
    r#"{"jsonrpc":"1.0","id":15,"result":{"content":[]}}"#,
    r#"{"jsonrpc":"2.0","id":16,"result":{"content":[]},"extra":true}"#,
    r#"{"jsonrpc":"2.0","method":"$/lsp-thing","params":{}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/vendor/custom","params":{"x":1}}"#,
];

#[test]
fn every_message_decodes_as_rmcp_decodes_it() {
    for line in LINES {
        let ours = decode(line.as_bytes());
        let rmcp = serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(line);
        match (&ours, rmcp) {
            // The same variants and values (notifications have no `PartialEq`).
            (Decoded::Message(ours), Ok(theirs)) => {
                assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{line}");
            }
            (Decoded::Invalid, Err(err)) => assert!(err.is_data(), "{line}: {err}"),
            (ours, theirs) => panic!("{line}: ours {ours:?}, rmcp's {theirs:?}"),
        }
    }
}

#[test]
fn plain_tool_call_results_take_the_short_path() {
    let short: Vec<bool> = LINES
        .iter()
        .map(|line| call_result(line.as_bytes()).is_some())
        .collect();
    assert_eq!(
        &short[..11],
        &[true; 11],
        "the first eleven are plain results"
    );
    assert!(short[11..].iter().all(|s| !s), "the rest are not");
    let Some(ServerJsonRpcMessage::Response(response)) = call_result(LINES[0].as_bytes()) else {
        panic!("a response");
    };
    assert!(matches!(response.result, ServerResult::CallToolResult(_)));
}

/// Text parts alone (and `isError`) are decoded in one pass; anything more takes the longer
/// way, with the same outcome (`every_message_decodes_as_rmcp_decodes_it`).
#[test]
fn text_only_results_take_the_shortest_path() {
    let text_only: Vec<bool> = LINES[..11]
        .iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
            serde_json::from_value::<super::TextResult>(value["result"].clone()).is_ok()
        })
        .collect();
    assert_eq!(
        text_only,
        [
            true, true, false, false, false, false, true, true, false, false, true
        ]
    );
}

#[test]
fn what_rmcp_skips_is_skipped() {
    for line in ["", "not json", "{\"jsonrpc\":\"2.0\","] {
        assert!(matches!(decode(line.as_bytes()), Decoded::Skip), "{line:?}");
    }
    // Notifications that rmcp cannot decode are skipped when they are not MCP's.
    for line in [
        r#"{"jsonrpc":"2.0","method":"$/lsp-thing","params":"text"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/vendor/custom","params":[1]}"#,
    ] {
        assert!(serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(line).is_err());
        assert!(matches!(decode(line.as_bytes()), Decoded::Skip), "{line:?}");
    }
    // A standard notification that does not decode is answered, as rmcp answers it.
    assert!(matches!(
        decode(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":"text"}"#),
        Decoded::Invalid
    ));
    assert!(matches!(decode(br#"{"hello":"world"}"#), Decoded::Invalid));
    assert_eq!(trim(b"\xEF\xBB\xBF{}\r\n"), b"{}");
}

#[tokio::test]
async fn lines_are_read_whole_and_bad_ones_dropped_or_answered() {
    let (ours, mut theirs) = tokio::io::duplex(256);
    let (read, write) = tokio::io::split(ours);
    let mut transport = LineTransport::new(read, write, 64);
    let (their_read, mut their_write) = tokio::io::split(&mut theirs);
    let writer = async {
        // Too long (dropped), broken JSON (dropped), not a message (answered), then a
        // result in two writes.
        let long = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(100));
        their_write.write_all(long.as_bytes()).await.expect("write");
        their_write
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\n")
            .await
            .expect("write");
        their_write
            .write_all(b"{\"hello\":1}\n")
            .await
            .expect("write");
        their_write
            .write_all(br#"{"jsonrpc":"2.0","id":1,"#)
            .await
            .expect("write");
        their_write
            .write_all(b"\"result\":{\"content\":[]}}\r\n")
            .await
            .expect("write");
    };
    let (received, ()) =
        tokio::time::timeout(WAIT, async { tokio::join!(transport.receive(), writer) })
            .await
            .expect("a message within the bound");
    let Some(ServerJsonRpcMessage::Response(response)) = received else {
        panic!("a response, got {received:?}");
    };
    assert!(matches!(response.result, ServerResult::CallToolResult(_)));
    // The object that was no message got rmcp's answer.
    let mut answer = String::new();
    tokio::time::timeout(WAIT, BufReader::new(their_read).read_line(&mut answer))
        .await
        .expect("an answer within the bound")
        .expect("read");
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    transport.close().await.expect("close");
}

#[tokio::test]
async fn a_line_of_the_bound_is_read_and_one_byte_more_dropped() {
    // The bound counts the newline: the stdio connection passes its own bound plus one.
    let fits = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
    let over = b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}} \n";
    let (ours, mut theirs) = tokio::io::duplex(256);
    let (read, write) = tokio::io::split(ours);
    let mut transport = LineTransport::new(read, write, fits.len());
    theirs.write_all(over).await.expect("write");
    theirs.write_all(fits).await.expect("write");
    let received = tokio::time::timeout(WAIT, transport.receive())
        .await
        .expect("a message within the bound");
    let Some(ServerJsonRpcMessage::Response(response)) = received else {
        panic!("a response, got {received:?}");
    };
    assert_eq!(response.id, NumberOrString::Number(1));
    transport.close().await.expect("close");
}

/// The gateway's own `tools/call` is the request rmcp would write with that id, after
/// setting the connection's `_meta` entries, the progress token and the call's capabilities
/// in the caller's `_meta`; and the caller's parameters are left as they were.
#[test]
fn a_direct_request_is_written_as_rmcp_writes_it() {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientJsonRpcMessage,
        ClientRequest, Implementation, NumberOrString, ProgressToken, ProtocolVersion,
        RequestMetaObject,
    };
    let id = NumberOrString::String("mcpgate-7".into());
    let mut callers = RequestMetaObject::new();
    callers.set_progress_token(ProgressToken(NumberOrString::Number(3)));
    callers.set_protocol_version(ProtocolVersion::V_2025_06_18);
    callers.insert("trace".to_owned(), serde_json::json!({"id": "t-1"}));
    let arguments = serde_json::json!({"text": "a \"quoted\" line\nand é", "n": [1, 2.5, null]});
    let shapes = [
        CallToolRequestParams::new("echo"),
        CallToolRequestParams::new("echo")
            .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        {
            let mut params = CallToolRequestParams::new("with-meta");
            params.meta = Some(callers);
            params.request_state = Some("state-1".to_owned());
            params
        },
    ];
    let mut connection = RequestMetaObject::new();
    connection.set_protocol_version(ProtocolVersion::V_2026_07_28);
    connection.set_client_info(Implementation::new("mcpgate", "1.0.0"));
    let mut declared = ClientCapabilities::default();
    declared.roots = Some(Default::default());
    connection.set_client_capabilities(declared);
    let mut asked = ClientCapabilities::default();
    asked.sampling = Some(Default::default());
    // A line connection before 2026-07-28, then an HTTP one with and without the call's own
    // capabilities.
    let cases = [
        (RequestMetaObject::new(), None),
        (connection.clone(), Some(&asked)),
        (connection, None),
    ];
    for (fixed, capabilities) in &cases {
        let meta = CallMeta::new(fixed);
        for params in &shapes {
            let mut sent = params.clone();
            let ours = request_json(&id, &mut sent, &meta, *capabilities).expect("serializable");
            assert_eq!(&sent, params, "the parameters are left as they were");
            assert!(!ours.contains(&b'\n'), "one line");
            let metas = ours.windows(8).filter(|w| *w == br#""_meta":"#).count();
            assert_eq!(metas, 1, "one `_meta`, not the caller's beside ours");
            let mut expected = params.clone();
            let set = expected.meta.get_or_insert_with(RequestMetaObject::new);
            for (key, value) in fixed.iter() {
                set.insert(key.clone(), value.clone());
            }
            if let Some(capabilities) = capabilities {
                set.set_client_capabilities((*capabilities).clone());
            }
            set.set_progress_token(ProgressToken(id.clone()));
            let theirs = ClientJsonRpcMessage::request(
                ClientRequest::CallToolRequest(CallToolRequest::new(expected)),
                id.clone(),
            );
            let ours: serde_json::Value = serde_json::from_slice(&ours).expect("JSON");
            assert_eq!(
                ours,
                serde_json::to_value(&theirs).expect("serializable"),
                "{params:?} {capabilities:?}"
            );
        }
    }
}

/// A direct call's answer goes to its caller and not to rmcp; rmcp's own answers still reach
/// rmcp; an answer to an abandoned call is dropped; when the connection ends, a waiting call
/// learns it and no call can start.
#[tokio::test]
async fn direct_calls_are_answered_beside_rmcp() {
    use rmcp::model::{CallToolRequestParams, NumberOrString};
    let (ours, theirs) = tokio::io::duplex(4096);
    let (read, write) = tokio::io::split(ours);
    let mut transport = LineTransport::new(read, write, 4096);
    let link = transport.link();
    let (their_read, mut their_write) = tokio::io::split(theirs);
    let mut their_read = BufReader::new(their_read);

    let mut call = link.register().expect("open");
    let abandoned = link.register().expect("open");
    assert_ne!(call.id, abandoned.id);
    let NumberOrString::String(id) = call.id.clone() else {
        panic!("a string id, got {:?}", call.id);
    };
    let NumberOrString::String(abandoned_id) = abandoned.id.clone() else {
        panic!("a string id");
    };
    drop(abandoned);
    link.send(&call, &mut CallToolRequestParams::new("echo"))
        .await
        .expect("written");
    let mut request = String::new();
    tokio::time::timeout(WAIT, their_read.read_line(&mut request))
        .await
        .expect("a request within the bound")
        .expect("read");
    let request: serde_json::Value = serde_json::from_str(&request).expect("JSON");
    assert_eq!(request["id"], id.as_ref());
    assert_eq!(request["method"], "tools/call");

    // The abandoned call's answer, ours, then rmcp's (numeric id).
    let lines = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":\"{abandoned_id}\",\"result\":{{\"content\":[]}}}}\n\
         {{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"hi\"}}]}}}}\n\
         {{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"content\":[]}}}}\n"
    );
    their_write
        .write_all(lines.as_bytes())
        .await
        .expect("write");
    let (received, answer) = tokio::time::timeout(WAIT, async {
        tokio::join!(transport.receive(), call.answer())
    })
    .await
    .expect("both within the bound");
    let Some(ServerJsonRpcMessage::Response(response)) = received else {
        panic!("rmcp's response, got {received:?}");
    };
    assert_eq!(response.id, NumberOrString::Number(3));
    let Some(ServerJsonRpcMessage::Response(answer)) = answer else {
        panic!("our answer, got {answer:?}");
    };
    assert_eq!(answer.id, call.id);
    let ServerResult::CallToolResult(result) = answer.result else {
        panic!("a tool result");
    };
    assert_eq!(result.content.len(), 1);

    // The server goes away while a call waits.
    let mut waiting = link.register().expect("open");
    drop(their_write);
    drop(their_read);
    let (received, answer) = tokio::time::timeout(WAIT, async {
        tokio::join!(transport.receive(), waiting.answer())
    })
    .await
    .expect("both within the bound");
    assert!(received.is_none(), "{received:?}");
    assert!(answer.is_none(), "{answer:?}");
    assert!(
        link.register().is_none(),
        "no call starts on an ended connection"
    );
}

/// Lines written at once by many writers arrive whole, each exactly once.
#[tokio::test]
async fn concurrent_writers_write_whole_lines() {
    use rmcp::model::CallToolRequestParams;
    let (ours, theirs) = tokio::io::duplex(64);
    let (read, write) = tokio::io::split(ours);
    let transport = LineTransport::new(read, write, 4096);
    let link = transport.link();
    let calls: Vec<_> = (0..20).map(|_| link.register().expect("open")).collect();
    let writers = futures::future::join_all(calls.iter().map(|call| {
        let link = link.clone();
        async move {
            let mut params = CallToolRequestParams::new("echo").with_arguments(
                serde_json::json!({"pad": "y".repeat(150)})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
            link.send(call, &mut params).await
        }
    }));
    let reader = async {
        let mut lines = BufReader::new(theirs).lines();
        let mut ids = Vec::new();
        while ids.len() < calls.len() {
            let line = lines.next_line().await.expect("read").expect("a line");
            let request: serde_json::Value = serde_json::from_str(&line).expect("whole JSON");
            ids.push(request["id"].as_str().expect("an id").to_owned());
        }
        ids
    };
    let (written, mut ids) = tokio::time::timeout(WAIT, async { tokio::join!(writers, reader) })
        .await
        .expect("within the bound");
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), calls.len());
}

/// A write dropped part way through its line (its call abandoned while the pipe was full)
/// leaves the rest for the next writer, which finishes that line before its own.
#[tokio::test]
async fn a_line_cut_short_is_finished_by_the_next_writer() {
    use rmcp::model::{CallToolRequestParams, NumberOrString};
    let (ours, theirs) = tokio::io::duplex(64);
    let (read, write) = tokio::io::split(ours);
    let transport = LineTransport::new(read, write, 4096);
    let link = transport.link();
    let first = link.register().expect("open");
    let second = link.register().expect("open");
    let mut big = CallToolRequestParams::new("echo").with_arguments(
        serde_json::json!({"pad": "z".repeat(300)})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    {
        // Nobody reads yet: the pipe takes 64 bytes of the line and the write waits.
        let mut cut = std::pin::pin!(link.send(&first, &mut big));
        assert!(
            futures::poll!(&mut cut).is_pending(),
            "the line fits no pipe"
        );
    }
    let reader = async {
        let mut lines = BufReader::new(theirs).lines();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let line = lines.next_line().await.expect("read").expect("a line");
            let request: serde_json::Value = serde_json::from_str(&line).expect("whole JSON");
            ids.push(request["id"].as_str().expect("an id").to_owned());
        }
        ids
    };
    let mut small = CallToolRequestParams::new("echo");
    let (written, ids) = tokio::time::timeout(WAIT, async {
        tokio::join!(link.send(&second, &mut small), reader)
    })
    .await
    .expect("within the bound");
    written.expect("written");
    let id = |call: &super::DirectCall| match &call.id {
        NumberOrString::String(id) => id.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    };
    assert_eq!(ids, [id(&first), id(&second)]);
}

/// A write to an upstream that has gone away fails (the call then ends as a lost
/// connection) rather than waiting.
#[tokio::test]
async fn writing_to_a_closed_upstream_fails() {
    use rmcp::model::CallToolRequestParams;
    let (ours, theirs) = tokio::io::duplex(4096);
    let (read, write) = tokio::io::split(ours);
    let transport = LineTransport::new(read, write, 4096);
    let link = transport.link();
    let call = link.register().expect("open");
    drop(theirs);
    let written = tokio::time::timeout(
        WAIT,
        link.send(&call, &mut CallToolRequestParams::new("echo")),
    )
    .await
    .expect("within the bound");
    assert!(written.is_err(), "{written:?}");
}

/// A relay that ignores what it is given: the test looks at the call's guard only.
struct Quiet;

#[expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577; the relay trait still has them"
)]
impl crate::upstream::CallRelay for Quiet {
    fn progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
    ) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn log(
        &self,
        _params: rmcp::model::LoggingMessageNotificationParam,
    ) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn create_message(
        &self,
        _params: rmcp::model::CreateMessageRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<rmcp::model::CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("not in this test", None)) })
    }

    fn elicit(
        &self,
        _params: rmcp::model::ElicitRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<rmcp::model::ElicitResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("not in this test", None)) })
    }
}

/// rmcp hands each notification to a task of its own, which may start after the call's
/// answer (read next) has reached the call. A progress notification is therefore counted
/// for its call as the transport reads it, and the call's answer waits until the
/// notification, carried to the handler, is dropped there. Progress whose token no call has
/// yet (read before a descheduled caller registered it) holds every call's answer.
#[tokio::test(start_paused = true)]
async fn a_notification_read_holds_its_calls_answer_until_handled() {
    let relays = super::RelayRegistry::new();
    let relay: Arc<dyn crate::upstream::CallRelay> = Arc::new(Quiet);
    let guard = relays.register(Some(relay), Duration::from_secs(60));
    let token = rmcp::model::ProgressToken(NumberOrString::String("p-1".into()));
    guard.sent(NumberOrString::Number(7), token);
    let (ours, mut theirs) = tokio::io::duplex(1024);
    let (read, write) = tokio::io::split(ours);
    let mut transport = LineTransport::new(read, write, 4096).announcing(relays.clone());
    theirs
        .write_all(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-1","progress":1}}
{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-2","progress":1}}
{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}
{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}
"#,
        )
        .await
        .expect("write");
    let ours = transport.receive().await.expect("a notification");
    let early = transport.receive().await.expect("another");
    let log = transport.receive().await.expect("a log message");
    let changed = transport.receive().await.expect("a list change");
    let announced = |message: &RxJsonRpcMessage<RoleClient>| match message {
        JsonRpcMessage::Notification(n) => n
            .notification
            .extensions()
            .get::<super::super::relay::Announced>()
            .is_some(),
        other => panic!("not a notification: {other:?}"),
    };
    assert!(
        announced(&ours),
        "counted for the call whose token it names"
    );
    assert!(
        announced(&early),
        "counted although no call has its token yet"
    );
    assert!(announced(&log), "counted for the one call running");
    assert!(!announced(&changed), "nothing any call waits for");
    drop((log, changed));
    // Held: the answer waits (the drain's own bound is 5 s; paused time runs to 1 s first).
    let held = tokio::time::timeout(Duration::from_secs(1), guard.drain()).await;
    assert!(held.is_err(), "the answer went before the notification");
    drop(ours);
    let held = tokio::time::timeout(Duration::from_secs(1), guard.drain()).await;
    assert!(
        held.is_err(),
        "the answer went before progress read ahead of its token"
    );
    drop(early);
    tokio::time::timeout(Duration::from_secs(1), guard.drain())
        .await
        .expect("handled: the answer goes at once");
}
