//! A minimal scoped work queue: `threads` workers pull items until the
//! queue is empty or one fails; the first error wins.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Runs `f` over `items` on up to `threads` threads.
pub(crate) fn for_each<T: Send>(threads: usize, items: Vec<T>, f: impl Fn(T) -> Result<()> + Sync) -> Result<()> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.into_iter().try_for_each(f);
    }
    let queue = Mutex::new(items.into_iter());
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some(item) = next else { break };
                    if let Err(e) = f(item) {
                        failed.store(true, Ordering::Relaxed);
                        if let Ok(mut slot) = first_error.lock() {
                            slot.get_or_insert(e);
                        }
                        break;
                    }
                }
            });
        }
    });
    match first_error.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

/// The default number of concurrent readers: one per core, at most 16.
pub fn default_readers() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 16)
}
