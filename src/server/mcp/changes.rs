//! `notifications/tools/list_changed` for one caller: each time the gateway swaps in a new
//! catalog (or a reload swaps in a new gateway), the caller's usable tools are compared with
//! what was last announced, and only a real difference (for this caller) is announced.

use std::{future::Future, sync::Arc};

use tokio::sync::watch;

use crate::{gateway::Gateway, policy::CallContext, server::reload::LiveGateway};

/// What a caller's tool list is made of, for comparison: names and definitions.
async fn view(gateway: &Gateway, ctx: &CallContext) -> Vec<(String, String)> {
    gateway
        .model_tools(ctx)
        .await
        .into_iter()
        .map(|t| (t.function_name, t.fingerprint.as_str().to_owned()))
        .collect()
}

/// Follows one caller's tools from the moment it is made: a change after that is announced
/// even if the follower starts running later (the session's follower is made at `initialize`
/// and runs from `notifications/initialized`).
pub struct Follower {
    /// Looked up at each look, never held: a reload must be able to retire the old gateway.
    live: Arc<LiveGateway>,
    ctx: CallContext,
    /// Catalog swaps of the gateway in service when last looked.
    changes: watch::Receiver<u64>,
    swaps: watch::Receiver<u64>,
    announced: Vec<(String, String)>,
}

impl Follower {
    pub async fn new(live: Arc<LiveGateway>, ctx: CallContext) -> Follower {
        // Subscribed before the first look, so no change falls between the two.
        let mut swaps = live.swaps();
        swaps.borrow_and_update();
        let gateway = live.current();
        let mut changes = gateway.changes();
        changes.borrow_and_update();
        let announced = view(&gateway, &ctx).await;
        drop(gateway);
        Follower {
            live,
            ctx,
            changes,
            swaps,
            announced,
        }
    }

    /// Follows the gateway a reload put in service.
    fn follow_current(&mut self) {
        self.swaps.borrow_and_update();
        self.changes = self.live.current().changes();
        self.changes.borrow_and_update();
    }

    /// Announces changes with `notify` (which says `false` once the client is gone) until
    /// `stop` resolves.
    pub async fn run<F, Fut>(mut self, stop: impl Future<Output = ()>, mut notify: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                // A retired gateway's changes end when it is gone: follow the new one.
                changed = self.changes.changed() => if changed.is_err() { self.follow_current() },
                swapped = self.swaps.changed() => {
                    if swapped.is_err() {
                        return;
                    }
                    self.follow_current();
                }
                () = &mut stop => return,
            }
            let current = self.live.current();
            let now = view(&current, &self.ctx).await;
            drop(current);
            if now != self.announced {
                self.announced = now;
                if !notify().await {
                    return;
                }
            }
        }
    }
}
