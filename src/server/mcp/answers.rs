//! A client's answers to the gateway's own requests (an elicitation for a confirmation, or a
//! sampling, elicitation or roots request relayed from an upstream), across instances.
//!
//! The request goes out on the stream of the call that made it, on the instance running
//! that call; behind a load balancer the client's answer, a `POST` of its own, may reach any
//! instance. Every request a shared session sends carries an id that names the endpoint
//! that sent it (`mcpgate-<tag>-<n>`, `tag` random per endpoint and process, `n` rmcp's own
//! number for it), so the instance an answer reaches knows, from the answer alone, where it
//! belongs: one of its own goes to rmcp as before, with rmcp's number back in place; another
//! goes to the other instances as an event, and the one whose tag it names hands it to its
//! session. Nothing is stored, and two instances serving one session can never mistake each
//! other's requests (rmcp numbers each from 0).

use rmcp::{
    RoleServer,
    model::{
        CancelledNotificationParam, ClientJsonRpcMessage, JsonRpcMessage, NumberOrString,
        RequestId, ServerJsonRpcMessage, ServerNotification,
    },
    transport::{
        Transport, WorkerTransport, streamable_http_server::session::local::LocalSessionWorker,
    },
};
use serde::Deserialize;
use std::{borrow::Cow, sync::Arc};

/// The prefix of every request id a shared session sends.
const PREFIX: &str = "mcpgate-";

/// The tag of one endpoint of this process, in the ids of the requests its sessions send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag(Arc<str>);

impl Tag {
    /// A new random tag.
    pub fn new() -> Tag {
        Tag(crate::digest::random_hex(8).into())
    }

    fn wire(&self, n: i64) -> RequestId {
        NumberOrString::String(format!("{PREFIX}{}-{n}", self.0).into())
    }

    /// rmcp's number for the request `id` names, when this tag sent it.
    fn number(&self, id: &RequestId) -> Option<i64> {
        let NumberOrString::String(id) = id else {
            return None;
        };
        let (tag, n) = tagged(id)?;
        (tag == &*self.0).then_some(n)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The tag and number of a request id a shared session sent.
fn tagged(id: &str) -> Option<(&str, i64)> {
    let (tag, n) = id.strip_prefix(PREFIX)?.rsplit_once('-')?;
    Some((tag, n.parse().ok()?))
}

/// What an answer to a request of another endpoint names: that endpoint's tag.
pub fn foreign_tag(body: &[u8], own: &Tag) -> Option<String> {
    /// A JSON-RPC message read only as far as telling an answer from the rest.
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        id: Option<Cow<'a, str>>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    // Every POST of a shared session comes here: a body that cannot hold a tagged id (a
    // call, most of all) is not parsed for it.
    if !body.windows(PREFIX.len()).any(|w| w == PREFIX.as_bytes()) {
        return None;
    }
    // Anything else (a number id, a batch, a request) is not an answer to a tagged request.
    let message: Message<'_> = serde_json::from_slice(body).ok()?;
    if message.method.is_some() || (message.result.is_none() && message.error.is_none()) {
        return None;
    }
    let id = message.id?;
    let (tag, _) = tagged(&id)?;
    (tag != own.as_str()).then(|| tag.to_owned())
}

/// rmcp's session transport, with the ids of the requests it sends tagged when the session
/// is shared.
pub struct Routed {
    inner: WorkerTransport<LocalSessionWorker>,
    tag: Option<Tag>,
}

impl Routed {
    pub fn new(inner: WorkerTransport<LocalSessionWorker>, tag: Option<Tag>) -> Routed {
        Routed { inner, tag }
    }
}

impl Transport<RoleServer> for Routed {
    type Error = <WorkerTransport<LocalSessionWorker> as Transport<RoleServer>>::Error;

    fn send(
        &mut self,
        mut item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(tag) = &self.tag {
            match &mut item {
                JsonRpcMessage::Request(request) => {
                    if let NumberOrString::Number(n) = request.id {
                        request.id = tag.wire(n);
                    }
                }
                // rmcp cancels a request it gave up on under its own number.
                JsonRpcMessage::Notification(notification) => {
                    if let ServerNotification::CancelledNotification(cancelled) =
                        &mut notification.notification
                    {
                        let CancelledNotificationParam { request_id, .. } = &mut cancelled.params;
                        if let Some(NumberOrString::Number(n)) = request_id {
                            *request_id = Some(tag.wire(*n));
                        }
                    }
                }
                JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
            }
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        let mut message = self.inner.receive().await?;
        if let Some(tag) = &self.tag {
            let id = match &mut message {
                JsonRpcMessage::Response(response) => Some(&mut response.id),
                JsonRpcMessage::Error(error) => error.id.as_mut(),
                JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
            };
            if let Some(id) = id
                && let Some(n) = tag.number(id)
            {
                *id = NumberOrString::Number(n);
            }
        }
        Some(message)
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_reads_back_its_own_ids_only() {
        let (ours, theirs) = (Tag::new(), Tag::new());
        assert_ne!(ours, theirs);
        let id = ours.wire(7);
        assert_eq!(ours.number(&id), Some(7));
        assert_eq!(theirs.number(&id), None);
        assert_eq!(ours.number(&NumberOrString::Number(7)), None);
        assert_eq!(ours.number(&NumberOrString::String("7".into())), None);
        assert_eq!(
            ours.number(&NumberOrString::String(
                format!("{PREFIX}{}-x", ours.0).into()
            )),
            None
        );
    }

    #[test]
    fn only_an_answer_to_another_endpoint_is_foreign() {
        let (ours, theirs) = (Tag::new(), Tag::new());
        let answer = |id: &RequestId| {
            serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": { "action": "decline" } })
                .to_string()
        };
        let foreign = foreign_tag(answer(&theirs.wire(3)).as_bytes(), &ours);
        assert_eq!(foreign.as_deref(), Some(theirs.as_str()));
        assert_eq!(foreign_tag(answer(&ours.wire(3)).as_bytes(), &ours), None);
        let error = serde_json::json!({ "jsonrpc": "2.0", "id": theirs.wire(1),
            "error": { "code": -1, "message": "no" } });
        assert!(foreign_tag(error.to_string().as_bytes(), &ours).is_some());
        // A request or notification naming such an id, a number id, a batch, bad JSON: not.
        for body in [
            serde_json::json!({ "jsonrpc": "2.0", "id": theirs.wire(1), "method": "ping" }),
            serde_json::json!({ "jsonrpc": "2.0", "id": 3, "result": {} }),
            serde_json::json!([{ "jsonrpc": "2.0", "id": theirs.wire(1), "result": {} }]),
            serde_json::json!({ "jsonrpc": "2.0", "id": theirs.wire(1) }),
        ] {
            assert_eq!(
                foreign_tag(body.to_string().as_bytes(), &ours),
                None,
                "{body}"
            );
        }
        assert_eq!(foreign_tag(b"{not json", &ours), None);
    }
}
