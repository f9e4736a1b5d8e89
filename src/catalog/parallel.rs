//! Work over a large catalog spread across the machine's cores: building a catalog of
//! thousands of tools (fingerprints, schema repair, the poisoning scan) is pure CPU work on
//! independent tools, and a refresh waits for it.

use std::{num::NonZeroUsize, thread};

/// Below this many items the work stays on the calling thread: starting threads costs more
/// than a small catalog's whole build.
const MIN_PARALLEL_ITEMS: usize = 256;

/// Most threads used: a catalog build should not take over a large machine.
const MAX_THREADS: usize = 8;

/// `f` applied to every item, in order, on up to [`MAX_THREADS`] scoped threads (the calling
/// thread among them). A panic in `f` reaches the caller, as it would without threads.
pub(super) fn map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = thread::available_parallelism()
        .map(NonZeroUsize::get)
        .unwrap_or(1)
        .min(MAX_THREADS);
    if threads < 2 || items.len() < MIN_PARALLEL_ITEMS {
        return items.into_iter().map(f).collect();
    }
    let per_thread = items.len().div_ceil(threads);
    let mut chunks: Vec<Vec<T>> = Vec::with_capacity(threads);
    let mut rest = items;
    while rest.len() > per_thread {
        let tail = rest.split_off(per_thread);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    let f = &f;
    thread::scope(|scope| {
        let mut chunks = chunks.into_iter();
        let first = chunks.next().unwrap_or_default();
        let others: Vec<_> = chunks
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>()))
            .collect();
        let mut out: Vec<R> = first.into_iter().map(f).collect();
        for other in others {
            match other.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_mapped_once_in_order() {
        for len in [0, 1, 255, 256, 257, 1000, 4099] {
            let items: Vec<usize> = (0..len).collect();
            let out = map(items, |i| (i, thread::current().id()));
            assert_eq!(out.len(), len);
            assert!(out.iter().enumerate().all(|(at, (i, _))| at == *i));
        }
    }

    #[test]
    fn a_panic_reaches_the_caller() {
        let items: Vec<usize> = (0..4096).collect();
        let caught = std::panic::catch_unwind(|| {
            map(items, |i| {
                assert!(i != 4000, "item 4000");
                i
            })
        });
        assert!(caught.is_err());
    }
}
