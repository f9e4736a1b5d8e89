//! Where a turn's events go: the stream's bounded channel, or nowhere (`Agent::run`).

use tokio::sync::mpsc;

use super::AgentEvent;

/// Events a turn may have queued before it waits for its reader: the turn runs at the pace
/// its reader takes events, so a slow client cannot make it buffer without bound.
pub(crate) const EVENT_BUFFER: usize = 64;

#[derive(Debug, Clone)]
pub(crate) struct Emitter(Option<mpsc::Sender<AgentEvent>>);

impl Emitter {
    pub(crate) fn channel() -> (Emitter, mpsc::Receiver<AgentEvent>) {
        let (sender, receiver) = mpsc::channel(EVENT_BUFFER);
        (Emitter(Some(sender)), receiver)
    }

    /// Events are dropped.
    pub(crate) fn none() -> Emitter {
        Emitter(None)
    }

    pub(crate) async fn emit(&self, event: AgentEvent) {
        if let Some(sender) = &self.0 {
            // The reader gone means the turn is being dropped with it: nothing to do.
            let _ = sender.send(event).await;
        }
    }
}
