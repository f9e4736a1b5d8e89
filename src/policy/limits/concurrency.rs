//! Concurrency permits: calls in flight per user × server and per server, counted under one
//! lock so a call takes both or neither, with waiters woken as permits drop.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::sync::{Notify, futures::OwnedNotified};

use super::{LimitExceeded, LimitKind};
use crate::config::{CallLimits, ServerId};

pub(super) struct Concurrency {
    state: Mutex<State>,
    max_tracked_users: usize,
}

#[derive(Default)]
struct State {
    /// Only servers with calls in flight have an entry: a server slot goes when its last
    /// permit drops, so nothing here outlives the calls it counts.
    servers: HashMap<ServerId, ServerSlot>,
    /// User × server pairs with calls in flight, over all servers.
    tracked_users: usize,
}

struct ServerSlot {
    in_flight: u32,
    /// Calls in flight per user on this server; a user goes when their last permit drops.
    users: HashMap<String, u32>,
    /// Woken on every release on this server: a waiter may be held by either cap, and both
    /// only move when a permit on this server drops.
    released: Arc<Notify>,
}

enum Attempt {
    Taken,
    /// Full for now; the future completes on the next release on this server.
    Full(LimitKind, OwnedNotified),
    /// Cannot pass however long it waits.
    Refused(LimitExceeded),
}

impl Concurrency {
    pub(super) fn new(max_tracked_users: usize) -> Concurrency {
        Concurrency {
            state: Mutex::new(State::default()),
            max_tracked_users,
        }
    }

    pub(super) async fn acquire(
        this: &Arc<Concurrency>,
        user: &str,
        server: &ServerId,
        limits: &CallLimits,
    ) -> Result<CallPermit, LimitExceeded> {
        let permit = || CallPermit {
            concurrency: Arc::clone(this),
            user: user.to_owned(),
            server: server.clone(),
        };
        let (mut blocked_by, mut released) = match this.try_take(user, server, limits) {
            Attempt::Taken => return Ok(permit()),
            Attempt::Refused(refused) => return Err(refused),
            Attempt::Full(kind, _) if limits.concurrency_wait.is_zero() => {
                return Err(LimitExceeded::new(kind, None));
            }
            Attempt::Full(kind, released) => (kind, released),
        };
        let wait = async {
            loop {
                released.await;
                match this.try_take(user, server, limits) {
                    Attempt::Taken => return Ok(permit()),
                    Attempt::Refused(refused) => return Err(refused),
                    Attempt::Full(kind, next) => {
                        blocked_by = kind;
                        released = next;
                    }
                }
            }
        };
        // `timeout` treats a wait too long to add to now as no deadline instead of panicking.
        match tokio::time::timeout(limits.concurrency_wait, wait).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(LimitExceeded::new(blocked_by, None)),
        }
    }

    fn try_take(&self, user: &str, server: &ServerId, limits: &CallLimits) -> Attempt {
        // A zero cap never frees up: refuse rather than wait for nothing.
        if limits.user_concurrency == 0 {
            return Attempt::Refused(LimitExceeded::new(LimitKind::UserConcurrency, None));
        }
        if limits.server_concurrency == 0 {
            return Attempt::Refused(LimitExceeded::new(LimitKind::ServerConcurrency, None));
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        let user_in_flight = state
            .servers
            .get(server)
            .and_then(|slot| slot.users.get(user).copied())
            .unwrap_or(0);
        if user_in_flight == 0 && state.tracked_users >= self.max_tracked_users {
            // Busy pairs are what is tracked; one may finish soon, so there is no useful
            // retry time to give.
            return Attempt::Refused(LimitExceeded::new(LimitKind::TooManyUsers, None));
        }
        let slot = state
            .servers
            .entry(server.clone())
            .or_insert_with(ServerSlot::new);
        let full = if user_in_flight >= limits.user_concurrency {
            Some(LimitKind::UserConcurrency)
        } else if slot.in_flight >= limits.server_concurrency {
            Some(LimitKind::ServerConcurrency)
        } else {
            None
        };
        if let Some(kind) = full {
            // Created under the lock, so a release after this point cannot be missed.
            return Attempt::Full(kind, Arc::clone(&slot.released).notified_owned());
        }
        slot.in_flight += 1;
        *slot.users.entry(user.to_owned()).or_insert(0) += 1;
        if user_in_flight == 0 {
            state.tracked_users += 1;
        }
        Attempt::Taken
    }

    fn release(&self, user: &str, server: &ServerId) {
        let released = {
            let mut guard = self.lock();
            let state = &mut *guard;
            let Some(slot) = state.servers.get_mut(server) else {
                return;
            };
            slot.in_flight = slot.in_flight.saturating_sub(1);
            if let Some(count) = slot.users.get_mut(user) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    slot.users.remove(user);
                    state.tracked_users = state.tracked_users.saturating_sub(1);
                }
            }
            let released = Arc::clone(&slot.released);
            if slot.in_flight == 0 {
                // Waiters hold their own handle to `released`, so the slot can go now.
                state.servers.remove(server);
            }
            released
        };
        released.notify_waiters();
    }

    pub(super) fn tracked_users(&self) -> usize {
        self.lock().tracked_users
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section only does arithmetic and map updates that keep the counts
        // consistent, so a panic elsewhere cannot leave them half-updated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ServerSlot {
    fn new() -> ServerSlot {
        ServerSlot {
            in_flight: 0,
            users: HashMap::new(),
            released: Arc::new(Notify::new()),
        }
    }
}

/// One call's place under the concurrency caps; dropping it frees the place and wakes waiters.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct CallPermit {
    concurrency: Arc<Concurrency>,
    user: String,
    server: ServerId,
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        self.concurrency.release(&self.user, &self.server);
    }
}

impl fmt::Debug for CallPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallPermit")
            .field("user", &self.user)
            .field("server", &self.server)
            .finish()
    }
}
