//! Change notifications between instances over Redis pub/sub: what one instance learned or
//! did (a server refreshed, pins changed) reaches the others, which act on it themselves
//! (each holds its own upstream connections). Delivery is best effort, as pub/sub is: an
//! instance that was disconnected catches up at its next refresh (the catalog TTL).

use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::Redis;
use crate::store::StoreError;

/// Events one subscriber may fall behind by before it misses some.
const BACKLOG: usize = 256;

/// Longest wait between attempts to subscribe again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Something another instance says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Event {
    /// A server's tools changed here (found by any refresh): list them again too.
    Refreshed {
        server: String,
    },
    /// The pins changed (a tool pinned, accepted or released): read them again.
    PinsChanged,
    /// An MCP client ended its session (`DELETE`) on another instance: close it here too.
    McpSessionClosed {
        view: String,
        id: String,
    },
    /// An MCP client's answer (`message`, its JSON-RPC text) to a request that the endpoint
    /// tagged `tag` sent on `session`, posted to another instance: for that endpoint alone.
    McpAnswer {
        tag: String,
        session: String,
        message: String,
    },
    /// A chat approval or denial that reached another instance, for whichever runs the
    /// turn; that one answers [`Event::ChatDecided`] with the same `reply`.
    ChatDecision {
        tenant: String,
        user: String,
        session: String,
        call_id: String,
        approve: bool,
        reply: String,
    },
    ChatDecided {
        reply: String,
    },
    /// A chat cancel that reached another instance; those running turns of the session
    /// answer [`Event::ChatCancelled`] with how many they cancelled.
    ChatCancel {
        tenant: String,
        user: String,
        session: String,
        reply: String,
    },
    ChatCancelled {
        reply: String,
        count: usize,
    },
    /// A WebMCP page connected to, changed its tools on, or left another instance: read the
    /// pages' registry again.
    PagesChanged,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    event: Event,
}

/// Publishes this instance's events and hands other instances' to subscribers.
#[derive(Debug, Clone)]
pub struct Events {
    redis: Redis,
    channel: String,
    sender: broadcast::Sender<Event>,
}

impl Events {
    /// Starts listening (in the background, reconnecting until `stop`).
    pub fn start(redis: Redis, stop: CancellationToken) -> Events {
        let channel = redis.key("events", "all");
        let (sender, _) = broadcast::channel(BACKLOG);
        let events = Events {
            redis,
            channel,
            sender,
        };
        let listener = events.clone();
        tokio::spawn(async move { listener.listen(stop).await });
        events
    }

    /// Other instances' events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// Tells the other instances.
    pub async fn publish(&self, event: Event) -> Result<(), StoreError> {
        let envelope = Envelope {
            from: self.redis.instance().to_owned(),
            event,
        };
        let text = serde_json::to_string(&envelope)
            .map_err(|_| StoreError::Corrupt("an event cannot be written".to_owned()))?;
        // An answer's text is the user's (a form's content, a sampled message): not logged.
        if !matches!(envelope.event, Event::McpAnswer { .. }) {
            tracing::debug!(event = %text, "event published");
        }
        let mut connection = self.redis.connection();
        self.redis
            .run(
                redis::cmd("PUBLISH")
                    .arg(&self.channel)
                    .arg(text)
                    .query_async::<i64>(&mut connection),
            )
            .await
            .map(|_| ())
    }

    async fn listen(&self, stop: CancellationToken) {
        let instance = self.redis.instance().to_owned();
        let sender = self.sender.clone();
        let channels = [self.channel.clone()];
        follow_channels(&self.redis, &channels, &stop, None, |payload| {
            match serde_json::from_str::<Envelope>(&payload) {
                Ok(envelope) if envelope.from != instance => {
                    if !matches!(envelope.event, Event::McpAnswer { .. }) {
                        tracing::debug!(from = %envelope.from, event = ?envelope.event, "event received");
                    }
                    let _ = sender.send(envelope.event);
                }
                Ok(_) => {}
                Err(_) => tracing::debug!("an unreadable event was ignored"),
            }
        })
        .await;
    }
}

/// Hands every message of `channels` to `handle`, subscribing again (with backoff) whenever
/// the subscription ends, until `stop`; `subscribed` says whether it is subscribed now.
pub(super) async fn follow_channels(
    redis: &Redis,
    channels: &[String],
    stop: &CancellationToken,
    subscribed: Option<&tokio::sync::watch::Sender<bool>>,
    mut handle: impl FnMut(String),
) {
    let mark = |up: bool| {
        if let Some(subscribed) = subscribed {
            subscribed.send_replace(up);
        }
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let subscribing = async {
            let mut pubsub = redis.client().get_async_pubsub().await?;
            for channel in channels {
                pubsub.subscribe(channel).await?;
            }
            redis::RedisResult::Ok(pubsub)
        };
        let pubsub = tokio::select! {
            () = stop.cancelled() => return,
            pubsub = tokio::time::timeout(Duration::from_secs(5), subscribing) => pubsub,
        };
        match pubsub {
            Ok(Ok(pubsub)) => {
                tracing::debug!(?channels, "subscribed");
                backoff = Duration::from_millis(100);
                mark(true);
                let mut messages = pubsub.into_on_message();
                loop {
                    let message = tokio::select! {
                        () = stop.cancelled() => return,
                        message = messages.next() => message,
                    };
                    let Some(message) = message else { break };
                    if let Ok(payload) = message.get_payload::<String>() {
                        handle(payload);
                    }
                }
                mark(false);
                tracing::warn!(?channels, "a Redis subscription ended; subscribing again");
            }
            Ok(Err(err)) => {
                tracing::debug!(error = %super::unavailable(&err), ?channels, "cannot subscribe");
            }
            Err(_) => tracing::debug!(?channels, "subscribing timed out"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
