//! One device queue for the whole process: the cold reads of every load
//! share [`QUEUE_DEPTH`] requests in flight, and the oldest load with
//! requests left goes first. A younger load (the next shard of a model)
//! prepares beside an older one (opens, plans, allocates) and takes each
//! slot the older one no longer needs, so the queue stays full from one
//! file to the next instead of draining and starting again per file, and
//! two loads never split the queue between two places in the disk.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Requests in flight at once, each a blocking read on a thread of its
/// own: the queue depth at which reads around the cache reached the
/// device's rate here (spec §23.4).
pub(super) const QUEUE_DEPTH: usize = 16;

/// A load waiting for slots: its requests not yet started, and where its
/// threads wait.
struct Waiting {
    left: usize,
    wake: Arc<Condvar>,
}

struct Queue {
    free: usize,
    /// By age: the first entry is served first.
    waiting: BTreeMap<u64, Waiting>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { free: QUEUE_DEPTH, waiting: BTreeMap::new() });
static NEXT: AtomicU64 = AtomicU64::new(0);

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    /// Wakes a thread of the load served next, if a slot is free.
    fn pass_on(&self) {
        if self.free > 0
            && let Some(first) = self.waiting.values().next()
        {
            first.wake.notify_one();
        }
    }
}

/// One load's place in the queue, for `requests` requests; leaving
/// (dropping) gives up any it did not start.
pub(super) struct Turn {
    id: u64,
    wake: Arc<Condvar>,
}

impl Turn {
    pub(super) fn enter(requests: usize) -> Self {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Condvar::new());
        if requests > 0 {
            queue().waiting.insert(id, Waiting { left: requests, wake: wake.clone() });
        }
        Self { id, wake }
    }

    /// Waits until this load may start its next request; the slot is held
    /// until the returned guard drops.
    pub(super) fn slot(&self) -> Slot {
        let mut q = queue();
        // A load past its count of requests (none are) waits for a slot only.
        let mine = |q: &Queue| {
            !q.waiting.contains_key(&self.id) || q.waiting.keys().next() == Some(&self.id)
        };
        while q.free == 0 || !mine(&q) {
            q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        q.free -= 1;
        let done = q.waiting.get_mut(&self.id).is_some_and(|w| {
            w.left -= 1;
            w.left == 0
        });
        if done {
            q.waiting.remove(&self.id);
            // The next load's threads may all be waiting for the head.
            if let Some(next) = q.waiting.values().next() {
                next.wake.notify_all();
            }
        }
        q.pass_on();
        Slot
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut q = queue();
        if q.waiting.remove(&self.id).is_some()
            && let Some(next) = q.waiting.values().next()
        {
            next.wake.notify_all();
        }
    }
}

/// A held slot of the queue.
pub(super) struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        let mut q = queue();
        q.free += 1;
        q.pass_on();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Takes a slot of `turn` on a thread of its own; says so on `tx`.
    fn take_later(turn: Turn, tx: mpsc::Sender<&'static str>, name: &'static str) {
        std::thread::spawn(move || {
            let _slot = turn.slot();
            let _ = tx.send(name);
        });
    }

    #[test]
    fn a_younger_load_waits_until_the_older_has_started_every_request() {
        let older = Turn::enter(2);
        let younger = Turn::enter(1);
        let (tx, rx) = mpsc::channel();
        let first = older.slot();
        take_later(younger, tx, "younger");
        let wait = Duration::from_millis(200);
        assert!(rx.recv_timeout(wait).is_err(), "the older load has a request left");
        drop(first);
        let _second = older.slot();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("younger"));
    }

    #[test]
    fn a_load_that_stops_early_lets_the_next_go() {
        let failed = Turn::enter(5);
        let next = Turn::enter(1);
        let (tx, rx) = mpsc::channel();
        drop(failed.slot());
        take_later(next, tx, "next");
        drop(failed);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("next"));
    }
}
