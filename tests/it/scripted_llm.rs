//! A scripted OpenAI-compatible chat completions server for tests: real HTTP on loopback, real
//! SSE, no model. Each request takes the next [`Reply`] of the script; the replies replay the
//! streaming shapes of real servers (see `shapes`), quirks included.
//!
//! A request with `"stream": false` gets a JSON body: the one recorded with the reply (the
//! built-in constructors record one), else the stream is sent anyway (`Reply::raw`: the script
//! decides). A `Reply::json` body is sent as JSON whatever the request asked.

mod shapes;

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;

pub use shapes::Provider;

use crate::support::wait_for;

/// One scripted response.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    chunk_delay: Option<Duration>,
    stall_after: Option<usize>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// SSE `data:` payloads (framing and `[DONE]` added when sent), and the JSON body to send
    /// instead when the request asks for no stream.
    Stream {
        chunks: Vec<String>,
        body: Option<Value>,
    },
    Json(Value),
    Status(u16, String),
}

impl Reply {
    /// An OpenAI-shaped stream of text deltas answering `answer`, usage last.
    pub fn text(answer: &str) -> Reply {
        Reply::stream(shapes::text(answer, None), shapes::text_body(answer, None))
    }

    /// Reasoning under the delta field `field` (`reasoning`, `reasoning_content`,
    /// `reasoning_text`), then the answer.
    pub fn reasoning(field: &str, reasoning: &str, answer: &str) -> Reply {
        Reply::stream(
            shapes::text(answer, Some((field, reasoning))),
            shapes::text_body(answer, Some((field, reasoning))),
        )
    }

    /// An OpenAI-shaped stream calling these functions with these arguments.
    pub fn tool_calls(calls: &[(&str, Value)]) -> Reply {
        Reply::provider(Provider::OpenAi, calls)
    }

    /// The same calls in that provider's recorded shape.
    pub fn provider(provider: Provider, calls: &[(&str, Value)]) -> Reply {
        let (chunks, body) = shapes::tool_calls(provider, calls);
        Reply::stream(chunks, body)
    }

    /// Exact SSE data payloads (the `data:` framing and `[DONE]` are added).
    pub fn raw(chunks: Vec<String>) -> Reply {
        Reply {
            kind: Kind::Stream { chunks, body: None },
            chunk_delay: None,
            stall_after: None,
        }
    }

    /// A non-streaming JSON body (`200`, `application/json`).
    pub fn json(body: Value) -> Reply {
        Reply {
            kind: Kind::Json(body),
            chunk_delay: None,
            stall_after: None,
        }
    }

    /// A status with this body (as `application/json` when it parses as JSON).
    pub fn status(code: u16, body: &str) -> Reply {
        Reply {
            kind: Kind::Status(code, body.to_owned()),
            chunk_delay: None,
            stall_after: None,
        }
    }

    /// Pause this long before each chunk after the first.
    pub fn chunk_delay(mut self, d: Duration) -> Reply {
        self.chunk_delay = Some(d);
        self
    }

    /// Send `n_chunks` chunks, then send nothing more until the client goes away (or the
    /// server stops). A reply with fewer chunks is sent whole.
    pub fn stall_after(mut self, n_chunks: usize) -> Reply {
        self.stall_after = Some(n_chunks);
        self
    }

    /// The SSE data payloads of a streamed reply (empty for JSON and status replies).
    pub fn chunks(&self) -> Vec<String> {
        match &self.kind {
            Kind::Stream { chunks, .. } => chunks.clone(),
            _ => Vec::new(),
        }
    }

    fn stream(chunks: Vec<Value>, body: Value) -> Reply {
        Reply {
            kind: Kind::Stream {
                chunks: chunks.iter().map(Value::to_string).collect(),
                body: Some(body),
            },
            chunk_delay: None,
            stall_after: None,
        }
    }
}

/// How one response ended, as the server saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Still being sent.
    Open,
    /// Sent to the end.
    Complete,
    /// The client went away before the end (the body was dropped unfinished).
    Dropped,
}

#[derive(Default)]
struct Shared {
    script: Vec<Reply>,
    next: usize,
    requests: Vec<Value>,
    headers: Vec<HeaderMap>,
    endings: Vec<Ending>,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Mutex<Shared>>,
    stop: CancellationToken,
}

/// A running scripted server on 127.0.0.1; dropping it stops the server and any stalled
/// response.
pub struct ScriptedLlm {
    state: AppState,
    addr: std::net::SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.state.stop.cancel();
        self.task.abort();
    }
}

impl ScriptedLlm {
    /// Starts serving `replies`, one per request, in order.
    pub async fn start(replies: Vec<Reply>) -> ScriptedLlm {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let state = AppState {
            shared: Arc::new(Mutex::new(Shared {
                script: replies,
                ..Shared::default()
            })),
            stop: CancellationToken::new(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(state.clone());
        let stop = state.stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        ScriptedLlm { state, addr, task }
    }

    /// `http://127.0.0.1:PORT/v1`; requests go to `{base}/chat/completions`.
    pub fn base_url(&self) -> url::Url {
        format!("http://{}/v1", self.addr)
            .parse()
            .expect("a loopback URL")
    }

    /// The request bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// The request headers received so far, in order.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.lock().headers.clone()
    }

    /// How each response ended so far, in request order.
    pub fn endings(&self) -> Vec<Ending> {
        self.lock().endings.clone()
    }

    /// Waits (bounded by `support::WAIT`) until `n` requests have arrived.
    pub async fn wait_requests(&self, n: usize) {
        wait_for(&format!("{n} requests to the scripted LLM"), || {
            (self.lock().requests.len() >= n).then_some(())
        })
        .await;
    }

    /// Waits (bounded) until response number `index` (from 0) has ended, and says how.
    pub async fn wait_ending(&self, index: usize) -> Ending {
        wait_for(
            &format!("response {index} of the scripted LLM to end"),
            || {
                self.lock()
                    .endings
                    .get(index)
                    .copied()
                    .filter(|e| *e != Ending::Open)
            },
        )
        .await
    }

    /// Appends a reply to the script while running.
    pub fn push(&self, reply: Reply) {
        self.lock().script.push(reply);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.state.shared.lock().expect("scripted LLM state lock")
    }
}

async fn answer(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let wants_stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let (index, reply) = {
        let mut shared = state.shared.lock().expect("scripted LLM state lock");
        shared.requests.push(request);
        shared.headers.push(headers);
        shared.endings.push(Ending::Complete);
        let index = shared.next;
        shared.next += 1;
        (index, shared.script.get(index).cloned())
    };
    let Some(reply) = reply else {
        let message = format!("scripted LLM: no reply left for request {index}");
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": {"message": message, "type": "server_error"}}).to_string(),
        );
    };
    match reply.kind {
        Kind::Status(code, body) => {
            let status = StatusCode::from_u16(code).expect("a valid scripted status");
            if serde_json::from_str::<Value>(&body).is_ok() {
                json_response(status, body)
            } else {
                (status, body).into_response()
            }
        }
        Kind::Json(body) => json_response(StatusCode::OK, body.to_string()),
        Kind::Stream {
            body: Some(body), ..
        } if !wants_stream => json_response(StatusCode::OK, body.to_string()),
        Kind::Stream { chunks, .. } => {
            set_ending(&state, index, Ending::Open);
            sse_response(state, index, chunks, reply.chunk_delay, reply.stall_after)
        }
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn set_ending(state: &AppState, index: usize, ending: Ending) {
    let mut shared = state.shared.lock().expect("scripted LLM state lock");
    if let Some(slot) = shared.endings.get_mut(index) {
        *slot = ending;
    }
}

/// Marks the response `Dropped` unless it was marked `Complete` first: hyper drops the body
/// stream when the client goes away mid-response.
struct EndGuard {
    state: AppState,
    index: usize,
    complete: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        let ending = if self.complete {
            Ending::Complete
        } else {
            Ending::Dropped
        };
        set_ending(&self.state, self.index, ending);
    }
}

fn sse_response(
    state: AppState,
    index: usize,
    chunks: Vec<String>,
    delay: Option<Duration>,
    stall_after: Option<usize>,
) -> Response {
    let stop = state.stop.clone();
    let mut guard = EndGuard {
        state,
        index,
        complete: false,
    };
    let frames = async_stream(move |tx| async move {
        for (i, chunk) in chunks.iter().enumerate() {
            if stall_after == Some(i) {
                break;
            }
            if i > 0
                && let Some(delay) = delay
            {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
            }
            if tx.send(format!("data: {chunk}\n\n")).await.is_err() {
                return;
            }
        }
        if stall_after.is_some_and(|n| n <= chunks.len()) {
            // Hang until the client drops the response (the body, and with it this task's
            // receiver, goes away) or the server stops.
            tokio::select! {
                () = tx.closed() => {}
                () = stop.cancelled() => {}
            }
            return;
        }
        if tx.send("data: [DONE]\n\n".to_owned()).await.is_ok() {
            guard.complete = true;
        }
        drop(guard);
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(
            frames.map(|frame| Ok::<_, Infallible>(Bytes::from(frame))),
        ))
        .expect("a valid SSE response")
}

/// A stream fed by a producer task over a channel of one: the producer sees the consumer
/// (hyper's body writer) go away as a closed channel.
fn async_stream<F, Fut>(producer: F) -> impl futures::Stream<Item = String> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<String>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(1);
    tokio::spawn(producer(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<String>,
) -> impl futures::Stream<Item = String> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The function names a model request offered (its `tools` array), in order.
pub fn offered(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
    }

    async fn post(llm: &ScriptedLlm, body: Value) -> reqwest::Response {
        client()
            .post(format!("{}/chat/completions", llm.base_url()))
            .json(&body)
            .send()
            .await
            .expect("the scripted LLM answers")
    }

    #[tokio::test]
    async fn serves_the_script_in_order_then_500() {
        let llm = ScriptedLlm::start(vec![Reply::text("hello there"), Reply::text("again")]).await;
        let streamed = post(&llm, json!({"stream": true})).await;
        assert_eq!(
            streamed.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let text = streamed.text().await.expect("body");
        assert!(text.starts_with("data: {"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(text.contains(r#""content":"hell""#), "{text}");

        let whole: Value = post(&llm, json!({"stream": false}))
            .await
            .json()
            .await
            .expect("a JSON body");
        assert_eq!(whole["choices"][0]["message"]["content"], "again");

        let past_end = post(&llm, json!({"stream": true})).await;
        assert_eq!(past_end.status(), 500);
        assert_eq!(llm.requests().len(), 3);
        assert_eq!(llm.requests()[0]["stream"], true);
        assert_eq!(llm.endings()[0], Ending::Complete);
    }

    #[tokio::test]
    async fn a_stalled_reply_sees_the_client_go_away() {
        let llm = ScriptedLlm::start(vec![Reply::text("never finished").stall_after(2)]).await;
        let mut response = post(&llm, json!({"stream": true})).await;
        let first = response
            .chunk()
            .await
            .expect("a chunk")
            .expect("not the end");
        assert!(first.starts_with(b"data: "));
        assert_eq!(llm.endings(), vec![Ending::Open]);
        drop(response);
        assert_eq!(llm.wait_ending(0).await, Ending::Dropped);
    }

    #[tokio::test]
    async fn every_shape_is_json_and_the_script_grows() {
        let calls = [("a", json!({"x": 1})), ("b", json!({"y": "z"}))];
        for provider in Provider::ALL {
            let reply = Reply::provider(provider, &calls);
            for chunk in reply.chunks() {
                serde_json::from_str::<Value>(&chunk).expect("each chunk is JSON");
            }
        }
        assert_eq!(
            Reply::tool_calls(&calls).chunks(),
            Reply::provider(Provider::OpenAi, &calls).chunks()
        );
        assert_eq!(
            Reply::raw(vec!["{}".into()]).chunks(),
            vec!["{}".to_owned()]
        );
        let llm = ScriptedLlm::start(vec![Reply::json(json!({"ok": true}))]).await;
        llm.push(Reply::status(401, r#"{"error":{"message":"no"}}"#));
        llm.push(Reply::reasoning("reasoning", "hm", "yes").chunk_delay(Duration::from_millis(1)));
        let request = client()
            .post(format!("{}/chat/completions", llm.base_url()))
            .header("x-probe", "1")
            .json(&json!({"stream": true}));
        let first: Value = request
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("JSON");
        assert_eq!(first, json!({"ok": true}));
        assert_eq!(post(&llm, json!({})).await.status(), 401);
        let text = post(&llm, json!({"stream": true}))
            .await
            .text()
            .await
            .expect("body");
        assert!(text.contains(r#""reasoning":"hm""#), "{text}");
        llm.wait_requests(3).await;
        assert_eq!(llm.headers()[0]["x-probe"], "1");
    }
}
