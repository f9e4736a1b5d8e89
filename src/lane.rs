//! Lanes: threads that each drive a runtime of their own (tokio's current-thread runtime).
//!
//! `mcpgate serve` answers HTTP on lanes, one per core by default: each connection is dealt
//! to one lane and every request on it is handled there, together with the tasks it starts
//! (the upstream connection it borrows from that lane's pool, its timers). A call then runs
//! on one thread from its request to its answer, and no other thread is woken for it: on a
//! machine where waking a sleeping thread costs tens of microseconds, that is most of what a
//! gateway adds to a call at low load. Under load the lanes share the connections out
//! evenly, and no work is stolen between them.
//!
//! A current-thread runtime moves its tasks only while its thread waits in `block_on`, so a
//! lane's thread does that from its start until [`Lanes::stop`]: tasks a request left on a
//! lane (an MCP session's, a pooled connection's) keep running after the HTTP server has
//! stopped, until the gateway behind it has shut down.

use std::{cell::Cell, io, sync::OnceLock, thread};

use tokio::{runtime::Handle, sync::oneshot};

/// Most lanes a process runs. Lane numbers are `1 ..= MAX_LANES`; 0 is every other thread.
pub const MAX_LANES: usize = 64;

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's lane: `1 ..= MAX_LANES` on a lane's thread, 0 on any other.
pub fn current() -> usize {
    LANE.with(Cell::get)
}

/// One value per lane, and one for every thread on no lane, each made by the first caller on
/// its lane: what making it spawns or registers (a connection's driver task, a socket's
/// readiness) lives on that lane's runtime, so using it from there wakes no other thread.
pub struct PerLane<T> {
    slots: Box<[OnceLock<T>]>,
}

impl<T> PerLane<T> {
    pub fn new() -> PerLane<T> {
        PerLane {
            slots: (0..=MAX_LANES).map(|_| OnceLock::new()).collect(),
        }
    }

    /// The calling lane's value, made with `make` if it has none yet.
    pub fn get_or_init(&self, make: impl FnOnce() -> T) -> &T {
        // Lanes number at most MAX_LANES; a slot past the end cannot be asked for.
        self.slots[current().min(MAX_LANES)].get_or_init(make)
    }
}

impl<T> Default for PerLane<T> {
    fn default() -> Self {
        PerLane::new()
    }
}

impl<T> std::fmt::Debug for PerLane<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let made = self.slots.iter().filter(|s| s.get().is_some()).count();
        f.debug_struct("PerLane").field("made", &made).finish()
    }
}

/// Running lanes; dropping them lets their threads end without waiting for them.
#[derive(Debug)]
pub struct Lanes {
    lanes: Vec<Lane>,
}

#[derive(Debug)]
struct Lane {
    handle: Handle,
    /// Sent (or dropped) to let the lane's thread leave `block_on` and drop its runtime.
    release: Option<oneshot::Sender<()>>,
    /// Resolves once the lane's runtime is dropped, with every task left on it.
    ended: Option<oneshot::Receiver<()>>,
}

impl Lanes {
    /// Starts `count` lanes (1 ..= [`MAX_LANES`]), each on a thread named `mcpgate-lane-N`.
    pub fn start(count: usize) -> io::Result<Lanes> {
        if !(1..=MAX_LANES).contains(&count) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("lanes must number 1 to {MAX_LANES}, not {count}"),
            ));
        }
        let mut lanes = Vec::with_capacity(count);
        for number in 1..=count {
            lanes.push(Lane::start(number)?);
        }
        Ok(Lanes { lanes })
    }

    /// The lanes' runtimes, in lane order.
    pub fn handles(&self) -> impl ExactSizeIterator<Item = &Handle> {
        self.lanes.iter().map(|lane| &lane.handle)
    }

    /// Stops every lane: each drops its runtime and every task still on it. Resolves once
    /// all have.
    pub async fn stop(mut self) {
        for lane in &mut self.lanes {
            lane.release.take();
        }
        for lane in &mut self.lanes {
            if let Some(ended) = lane.ended.take() {
                let _ = ended.await;
            }
        }
    }
}

impl Lane {
    fn start(number: usize) -> io::Result<Lane> {
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel(1);
        let (release, released) = oneshot::channel::<()>();
        let (ended_tx, ended) = oneshot::channel();
        thread::Builder::new()
            .name(format!("mcpgate-lane-{number}"))
            .spawn(move || {
                LANE.set(number);
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = started_tx.send(Err(err));
                        return;
                    }
                };
                runtime.spawn(keep_a_timer_pending());
                let _ = started_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = released.await;
                });
                drop(runtime);
                let _ = ended_tx.send(());
            })?;
        let handle = started_rx.recv().map_err(|_| {
            io::Error::other(format!("lane {number} ended before its runtime started"))
        })??;
        Ok(Lane {
            handle,
            release: Some(release),
            ended: Some(ended),
        })
    }
}

/// How far ahead the lane's standing timer is set.
const STANDING_TIMER: std::time::Duration = std::time::Duration::from_secs(10);

/// Keeps a timer pending on the lane, at most [`STANDING_TIMER`] ahead, for as long as the
/// lane runs. A runtime's timer driver wakes its thread (a write to an eventfd, and another
/// turn of the event loop) whenever a timer is set earlier than the earliest one it knew of
/// when it last went to sleep, and the thread being awake already does not spare it that. A
/// call sets two or three timers of tens of seconds or more (its deadlines), and with no
/// other timer pending each of them did that. With this one pending they come later than
/// it, and the lane is woken for it once every ten seconds instead of twice per call.
async fn keep_a_timer_pending() {
    loop {
        tokio::time::sleep(STANDING_TIMER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_runs_on_its_lanes_thread_until_the_lanes_stop() {
        assert_eq!(current(), 0, "a test's thread is on no lane");
        let lanes = Lanes::start(2).expect("lanes start");
        let mut seen = Vec::new();
        for handle in lanes.handles() {
            let on = handle
                .spawn(async { (current(), thread::current().name().map(str::to_owned)) })
                .await
                .expect("the task runs");
            seen.push(on);
        }
        assert_eq!(
            seen,
            [
                (1, Some("mcpgate-lane-1".to_owned())),
                (2, Some("mcpgate-lane-2".to_owned()))
            ]
        );
        // A task left on a lane is dropped when the lanes stop, not before.
        let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
        let (running_tx, running_rx) = oneshot::channel::<()>();
        let first = lanes.handles().next().expect("a lane").clone();
        first.spawn(async move {
            let _dropped = dropped_tx;
            let _ = running_tx.send(());
            std::future::pending::<()>().await;
        });
        running_rx.await.expect("the task started");
        let mut dropped_rx = dropped_rx;
        assert!(dropped_rx.try_recv().is_err(), "still running");
        lanes.stop().await;
        assert!(
            dropped_rx.await.is_err(),
            "the task was dropped with its lane"
        );
    }

    #[test]
    fn lanes_number_one_to_the_most() {
        for count in [0, MAX_LANES + 1] {
            let err = Lanes::start(count).expect_err("out of range");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{count}");
        }
    }
}
