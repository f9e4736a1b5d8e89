//! Input rounds handed back to 2026-07-28 clients. An upstream asks for input by answering a
//! call with an input round; a client that takes no requests gets the round itself, under a
//! `requestState` of ours: a random handle to what the retry needs (the upstream's own state,
//! and whether the call was already confirmed), kept here. The handle is single use, expires,
//! and is bound to the caller (tenant, user, session), the tool (and its definition) and the
//! arguments, so a retry cannot be replayed or carried over to another call; the upstream's
//! state never reaches the client. Kept in this process, or in Redis when instances share
//! it, so that a retry may reach any of them.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use serde_json::Value;
use tokio::time::Instant;

use crate::{
    catalog::args_hash,
    digest::{random_hex, sha256_hex},
    policy::CallContext,
    store::redis::RedisRounds,
};

/// How our `requestState` handles start; a state without it is a confirmation id.
const HANDLE_PREFIX: &str = "mcpgate-round:";

/// Most rounds waiting for their retry at once, for all callers. A round costs its
/// upstream state and a few hashes; a client that never retries leaves its round to expire.
const MAX_OPEN: usize = 4096;

/// Most rounds one caller (tenant and user) may have waiting, so one cannot fill the table.
const MAX_PER_CALLER: usize = 64;

/// Largest upstream `requestState` kept; a bigger one fails the call rather than the table.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// Most bytes of upstream state kept in all.
const MAX_TOTAL_STATE_BYTES: usize = 32 * 1024 * 1024;

/// Why a round could not be handed out or taken back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoundError {
    #[error("too many input rounds are waiting for an answer; retry later")]
    Full,
    #[error("the upstream's requestState is larger than {MAX_STATE_BYTES} bytes")]
    StateTooLarge,
    #[error("unknown, already used or expired input round")]
    Unknown,
    #[error("the input round belongs to another caller, tool or set of arguments")]
    Mismatch,
    #[error("the store of input rounds is unavailable")]
    Unavailable,
}

impl RoundError {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            RoundError::Full => "limit_exceeded",
            RoundError::StateTooLarge => "upstream_protocol_error",
            RoundError::Unknown | RoundError::Mismatch => "input_round_invalid",
            RoundError::Unavailable => "store_unavailable",
        }
    }
}

/// What a retry continues with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continued {
    /// The upstream's `requestState`, to send back exactly.
    pub upstream_state: Option<String>,
    /// The user confirmed this call before the upstream asked for input: the retry is the
    /// same confirmed call, not a new one.
    pub confirmed: bool,
}

struct Round {
    /// SHA-256 over tenant, user, session, tool name and argument hash.
    binding: String,
    owner: (String, String),
    continued: Continued,
    expires_at: Instant,
}

#[derive(Default)]
struct Table {
    rounds: HashMap<String, Round>,
    state_bytes: usize,
}

impl Table {
    fn prune(&mut self, now: Instant) {
        let mut freed = 0;
        self.rounds.retain(|_, round| {
            let live = round.expires_at > now;
            if !live {
                freed += state_len(&round.continued);
            }
            live
        });
        self.state_bytes -= freed;
    }

    fn remove(&mut self, handle: &str) -> Option<Round> {
        let round = self.rounds.remove(handle)?;
        self.state_bytes -= state_len(&round.continued);
        Some(round)
    }
}

fn state_len(continued: &Continued) -> usize {
    continued.upstream_state.as_ref().map_or(0, String::len)
}

/// The rounds handed out and not yet taken back: by this process, or by every instance.
#[derive(Default)]
pub struct Rounds {
    table: Mutex<Table>,
    shared: Option<RedisRounds>,
}

/// The call a round belongs to, besides its caller.
#[derive(Debug, Clone, Copy)]
pub struct CallKey<'a> {
    /// The name the tool was called by.
    pub name: &'a str,
    /// The tool definition's fingerprint when called: a retry after the definition changed
    /// is another call.
    pub fingerprint: &'a str,
    pub arguments: &'a Value,
}

/// What a round is bound to, hashed: every part length-prefixed, so no two differ only in
/// where one part ends.
fn binding(ctx: &CallContext, call: CallKey<'_>) -> String {
    let args = args_hash(call.arguments);
    let parts = [
        ctx.tenant.as_str(),
        ctx.user.as_str(),
        ctx.session.as_str(),
        call.name,
        call.fingerprint,
        args.as_str(),
    ];
    let mut bound = String::new();
    for part in parts {
        bound.push_str(&format!("{}:{part};", part.len()));
    }
    sha256_hex(bound.as_bytes())
}

impl Rounds {
    pub fn new() -> Rounds {
        Rounds::default()
    }

    /// Rounds kept in Redis, for every instance.
    pub fn shared(redis: RedisRounds) -> Rounds {
        Rounds {
            shared: Some(redis),
            ..Rounds::default()
        }
    }

    /// [`Rounds::hand_out`], in Redis when shared.
    pub async fn hand_out_any(
        &self,
        ctx: &CallContext,
        call: CallKey<'_>,
        continued: Continued,
        ttl: Duration,
    ) -> Result<String, RoundError> {
        let Some(shared) = &self.shared else {
            return self.hand_out(ctx, call, continued, ttl);
        };
        if state_len(&continued) > MAX_STATE_BYTES {
            return Err(RoundError::StateTooLarge);
        }
        let handle = format!("{HANDLE_PREFIX}{}", random_hex(16));
        let value = serde_json::json!({
            "binding": binding(ctx, call),
            "upstreamState": continued.upstream_state,
            "confirmed": continued.confirmed,
        });
        let owner = (ctx.tenant.as_str(), ctx.user.as_str());
        match shared
            .put(&handle, owner, &value, ttl, MAX_PER_CALLER)
            .await
        {
            Ok(()) => Ok(handle),
            Err(crate::store::StoreError::Full) => Err(RoundError::Full),
            Err(err) => {
                tracing::error!(error = %err, "an input round could not be kept");
                Err(RoundError::Unavailable)
            }
        }
    }

    /// [`Rounds::take`], from Redis when shared.
    pub async fn take_any(
        &self,
        request_state: &str,
        ctx: &CallContext,
        call: CallKey<'_>,
    ) -> Option<Result<Continued, RoundError>> {
        let Some(shared) = &self.shared else {
            return self.take(request_state, ctx, call);
        };
        if !request_state.starts_with(HANDLE_PREFIX) {
            return None;
        }
        let round = match shared.take(request_state).await {
            Ok(Some(round)) => round,
            Ok(None) => return Some(Err(RoundError::Unknown)),
            Err(err) => {
                tracing::error!(error = %err, "an input round could not be read");
                return Some(Err(RoundError::Unavailable));
            }
        };
        if round["binding"].as_str() != Some(binding(ctx, call).as_str()) {
            return Some(Err(RoundError::Mismatch));
        }
        Some(Ok(Continued {
            upstream_state: round["upstreamState"].as_str().map(str::to_owned),
            confirmed: round["confirmed"].as_bool().unwrap_or(false),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A poisoned lock only means another thread panicked while editing plain data.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `continued` for the retry of `ctx`'s `call`, for `ttl`; returns the
    /// `requestState` to give the client.
    pub fn hand_out(
        &self,
        ctx: &CallContext,
        call: CallKey<'_>,
        continued: Continued,
        ttl: Duration,
    ) -> Result<String, RoundError> {
        if state_len(&continued) > MAX_STATE_BYTES {
            return Err(RoundError::StateTooLarge);
        }
        let now = Instant::now();
        let owner = (ctx.tenant.clone(), ctx.user.clone());
        let mut table = self.lock();
        table.prune(now);
        let owned = table.rounds.values().filter(|r| r.owner == owner).count();
        let room = table.rounds.len() < MAX_OPEN
            && owned < MAX_PER_CALLER
            && table.state_bytes + state_len(&continued) <= MAX_TOTAL_STATE_BYTES;
        if !room {
            return Err(RoundError::Full);
        }
        let handle = format!("{HANDLE_PREFIX}{}", random_hex(16));
        table.state_bytes += state_len(&continued);
        table.rounds.insert(
            handle.clone(),
            Round {
                binding: binding(ctx, call),
                owner,
                continued,
                expires_at: now + ttl,
            },
        );
        Ok(handle)
    }

    /// Takes back the round `request_state` names, once: `None` when the state is not one
    /// of our handles (a confirmation id); an error when it is unknown, used, expired, or
    /// bound to another caller or call (taken all the same, so a handle cannot be probed).
    pub fn take(
        &self,
        request_state: &str,
        ctx: &CallContext,
        call: CallKey<'_>,
    ) -> Option<Result<Continued, RoundError>> {
        if !request_state.starts_with(HANDLE_PREFIX) {
            return None;
        }
        let now = Instant::now();
        let round = {
            let mut table = self.lock();
            table.prune(now);
            table.remove(request_state)
        };
        let Some(round) = round else {
            return Some(Err(RoundError::Unknown));
        };
        if round.binding != binding(ctx, call) {
            return Some(Err(RoundError::Mismatch));
        }
        Some(Ok(round.continued))
    }

    /// Rounds waiting now (expired ones included until the next hand-out or take).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().rounds.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn caller(user: &str, session: &str) -> CallContext {
        CallContext {
            tenant: "t".into(),
            user: user.into(),
            session: session.into(),
            roles: vec![],
            request_id: "r".into(),
        }
    }

    fn continued(state: &str) -> Continued {
        Continued {
            upstream_state: Some(state.to_owned()),
            confirmed: false,
        }
    }

    const TTL: Duration = Duration::from_secs(60);

    fn key<'a>(name: &'a str, arguments: &'a Value) -> CallKey<'a> {
        CallKey {
            name,
            fingerprint: "f1",
            arguments,
        }
    }

    #[tokio::test]
    async fn a_round_is_taken_back_once_by_its_own_call() {
        let rounds = Rounds::new();
        let ada = caller("ada", "s1");
        let args = json!({ "a": 1 });
        let handle = rounds
            .hand_out(&ada, key("srv_tool", &args), continued("up"), TTL)
            .expect("room");
        assert!(handle.starts_with(HANDLE_PREFIX));
        assert_eq!(
            rounds.take(&handle, &ada, key("srv_tool", &args)),
            Some(Ok(continued("up")))
        );
        assert_eq!(
            rounds.take(&handle, &ada, key("srv_tool", &args)),
            Some(Err(RoundError::Unknown))
        );
        assert_eq!(rounds.take("0123abcd", &ada, key("srv_tool", &args)), None);
    }

    #[tokio::test]
    async fn another_caller_tool_or_arguments_is_refused_and_spends_it() {
        let rounds = Rounds::new();
        let ada = caller("ada", "s1");
        let args = json!({ "a": 1 });
        let others = [
            (caller("bob", "s1"), "srv_tool", json!({ "a": 1 })),
            (caller("ada", "s2"), "srv_tool", json!({ "a": 1 })),
            (caller("ada", "s1"), "srv_other", json!({ "a": 1 })),
            (caller("ada", "s1"), "srv_tool", json!({ "a": 2 })),
        ];
        let handle = rounds
            .hand_out(&ada, key("srv_tool", &args), continued("up"), TTL)
            .expect("room");
        let changed = CallKey {
            fingerprint: "f2",
            ..key("srv_tool", &args)
        };
        assert_eq!(
            rounds.take(&handle, &ada, changed),
            Some(Err(RoundError::Mismatch))
        );
        for (ctx, name, other_args) in others {
            let handle = rounds
                .hand_out(&ada, key("srv_tool", &args), continued("up"), TTL)
                .expect("room");
            assert_eq!(
                rounds.take(&handle, &ctx, key(name, &other_args)),
                Some(Err(RoundError::Mismatch))
            );
            assert_eq!(
                rounds.take(&handle, &ada, key("srv_tool", &args)),
                Some(Err(RoundError::Unknown))
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rounds_expire_and_are_bounded() {
        let rounds = Rounds::new();
        let ada = caller("ada", "s1");
        let args = json!({});
        let handle = rounds
            .hand_out(&ada, key("t", &args), continued("up"), TTL)
            .expect("room");
        tokio::time::advance(TTL).await;
        assert_eq!(
            rounds.take(&handle, &ada, key("t", &args)),
            Some(Err(RoundError::Unknown))
        );

        for _ in 0..MAX_PER_CALLER {
            rounds
                .hand_out(&ada, key("t", &args), continued("up"), TTL)
                .expect("room");
        }
        assert_eq!(
            rounds.hand_out(&ada, key("t", &args), continued("up"), TTL),
            Err(RoundError::Full)
        );
        // Another caller still has room.
        let bob = caller("bob", "s1");
        assert!(
            rounds
                .hand_out(&bob, key("t", &args), continued("up"), TTL)
                .is_ok()
        );
        let big = "x".repeat(MAX_STATE_BYTES + 1);
        assert_eq!(
            rounds.hand_out(&bob, key("t", &args), continued(&big), TTL),
            Err(RoundError::StateTooLarge)
        );
        tokio::time::advance(TTL).await;
        assert!(
            rounds
                .hand_out(&ada, key("t", &args), continued("up"), TTL)
                .is_ok()
        );
        assert_eq!(rounds.len(), 1, "expired rounds were dropped");
    }
}
