//! Chat decisions and cancels that reach an instance other than the one running the turn
//! (behind a load balancer, the turn's stream stays where it started): forwarded over the
//! shared events, applied by the instance that holds the turn, which answers. The decision
//! carries the caller's tenant, user and session, checked there exactly as a local one is.

use std::{sync::Arc, time::Duration};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::ChatHub;
use crate::{
    agent::Decision,
    policy::CallContext,
    store::redis::{Event, Events},
};

/// How long a forwarded decision or cancel waits for the instance running the turn.
const FORWARD_WAIT: Duration = Duration::from_secs(2);

/// Applies other instances' decisions and cancels to the turns running here, until `stop`.
pub(super) fn follow(hub: Arc<ChatHub>, events: Events, stop: CancellationToken) {
    let mut received = events.subscribe();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                event = received.recv() => event,
            };
            let answer = match event {
                Ok(Event::ChatDecision {
                    tenant,
                    user,
                    session,
                    call_id,
                    approve,
                    reply,
                }) => {
                    let ctx = caller(tenant, user, session);
                    let decision = if approve {
                        Decision::Approve
                    } else {
                        Decision::Deny
                    };
                    hub.approvals
                        .decide(&ctx, &call_id, decision)
                        .is_ok()
                        .then_some(Event::ChatDecided { reply })
                }
                Ok(Event::ChatCancel {
                    tenant,
                    user,
                    session,
                    reply,
                }) => {
                    let count = hub.cancel(&caller(tenant, user, session));
                    (count > 0).then_some(Event::ChatCancelled { reply, count })
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if let Some(answer) = answer
                && let Err(err) = events.publish(answer).await
            {
                tracing::warn!(error = %err, "a chat answer could not be sent back");
            }
        }
    });
}

fn caller(tenant: String, user: String, session: String) -> CallContext {
    CallContext {
        tenant,
        user,
        session,
        roles: Vec::new(),
        request_id: crate::policy::new_request_id(),
    }
}

/// Waits at most [`FORWARD_WAIT`] for the first answer `pick` accepts.
async fn first_answer<T>(
    answers: &mut broadcast::Receiver<Event>,
    pick: impl Fn(Event) -> Option<T>,
) -> Option<T> {
    let wait = async {
        loop {
            match answers.recv().await {
                Ok(event) => {
                    if let Some(found) = pick(event) {
                        return Some(found);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    };
    tokio::time::timeout(FORWARD_WAIT, wait)
        .await
        .ok()
        .flatten()
}

/// Forwards `ctx`'s decision on `call_id` to the other instances; whether one applied it.
pub(super) async fn decide(
    events: &Events,
    ctx: &CallContext,
    call_id: &str,
    approve: bool,
) -> bool {
    let reply = crate::digest::random_hex(16);
    let mut answers = events.subscribe();
    let asked = events
        .publish(Event::ChatDecision {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            session: ctx.session.clone(),
            call_id: call_id.to_owned(),
            approve,
            reply: reply.clone(),
        })
        .await;
    asked.is_ok()
        && first_answer(&mut answers, |event| match event {
            Event::ChatDecided { reply: r } if r == reply => Some(()),
            _ => None,
        })
        .await
        .is_some()
}

/// Forwards `ctx`'s cancel to the other instances; how many turns the first instance that
/// ran some cancelled (a session's turns run where their streams are, normally one place).
pub(super) async fn cancel(events: &Events, ctx: &CallContext) -> usize {
    let reply = crate::digest::random_hex(16);
    let mut answers = events.subscribe();
    let asked = events
        .publish(Event::ChatCancel {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            session: ctx.session.clone(),
            reply: reply.clone(),
        })
        .await;
    if asked.is_err() {
        return 0;
    }
    first_answer(&mut answers, |event| match event {
        Event::ChatCancelled { reply: r, count } if r == reply => Some(count),
        _ => None,
    })
    .await
    .unwrap_or(0)
}
