//! The load generator: a fixed number of calls spread over `concurrency` workers, each timing
//! its own calls, so every target is driven by the same loop.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::future::BoxFuture;

use super::stats::Summary;

/// One target's call, made by worker `worker` (0-based, below the run's concurrency).
pub trait Caller: Send + Sync + 'static {
    fn call(&self, worker: usize) -> BoxFuture<'_, Result<(), String>>;
}

/// A run's summary and its first error, if any call failed.
#[derive(Debug)]
pub struct Run {
    pub summary: Summary,
    pub first_error: Option<String>,
}

/// Makes `calls` calls through `caller` with `concurrency` workers, each starting its next
/// call as soon as its last one answered.
pub async fn drive(caller: Arc<dyn Caller>, calls: usize, concurrency: usize) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..concurrency.max(1) {
        let caller = caller.clone();
        let next = next.clone();
        workers.spawn(async move {
            let mut samples = Vec::with_capacity(calls / concurrency.max(1) + 1);
            let mut errors = 0;
            let mut first_error = None;
            while next.fetch_add(1, Ordering::Relaxed) < calls {
                let sent = Instant::now();
                match caller.call(worker).await {
                    Ok(()) => samples.push(sent.elapsed()),
                    Err(error) => {
                        errors += 1;
                        first_error.get_or_insert(error);
                    }
                }
            }
            (samples, errors, first_error)
        });
    }
    let mut samples: Vec<Duration> = Vec::with_capacity(calls);
    let mut errors = 0;
    let mut first_error = None;
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok((worker_samples, worker_errors, worker_error)) => {
                samples.extend(worker_samples);
                errors += worker_errors;
                if first_error.is_none() {
                    first_error = worker_error;
                }
            }
            Err(panic) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("a worker failed: {panic}"));
            }
        }
    }
    let wall = started.elapsed();
    Run {
        summary: Summary::new(samples, errors, wall),
        first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails every tenth call; counts calls per worker.
    struct Counting {
        calls: AtomicUsize,
        workers_seen: std::sync::Mutex<std::collections::BTreeSet<usize>>,
    }

    impl Caller for Counting {
        fn call(&self, worker: usize) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(async move {
                self.workers_seen.lock().expect("lock").insert(worker);
                let n = self.calls.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                if n % 10 == 9 {
                    Err(format!("call {n}"))
                } else {
                    Ok(())
                }
            })
        }
    }

    #[tokio::test]
    async fn makes_exactly_the_calls_asked_and_counts_errors() {
        let caller = Arc::new(Counting {
            calls: AtomicUsize::new(0),
            workers_seen: Default::default(),
        });
        let run = drive(caller.clone(), 100, 4).await;
        assert_eq!(caller.calls.load(Ordering::SeqCst), 100);
        assert_eq!(run.summary.calls, 90);
        assert_eq!(run.summary.errors, 10);
        assert!(run.first_error.is_some_and(|e| e.starts_with("call ")));
        let seen = caller.workers_seen.lock().expect("lock").clone();
        assert!(seen.iter().all(|w| *w < 4), "{seen:?}");
    }
}
