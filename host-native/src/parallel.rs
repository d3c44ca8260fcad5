//! A minimal scoped work queue: `threads` workers pull items until the
//! queue is empty or one fails; the first error wins.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Runs `f` over `items` on up to `threads` threads.
pub(crate) fn for_each<T: Send>(
    threads: usize,
    items: Vec<T>,
    f: impl Fn(T) -> Result<()> + Sync,
) -> Result<()> {
    if threads.clamp(1, items.len().max(1)) == 1 {
        return items.into_iter().try_for_each(f);
    }
    for_each_scratch(threads, items, |item, _: &mut ()| f(item))
}

/// [`for_each`] where each thread keeps a `scratch` of its own between
/// items (a bounce buffer).
pub(crate) fn for_each_scratch<T: Send, W: Default>(
    threads: usize,
    items: Vec<T>,
    f: impl Fn(T, &mut W) -> Result<()> + Sync,
) -> Result<()> {
    let threads = threads.clamp(1, items.len().max(1));
    let queue = Mutex::new(items.into_iter());
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut scratch = W::default();
                while !failed.load(Ordering::Relaxed) {
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some(item) = next else { break };
                    if let Err(e) = f(item, &mut scratch) {
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

/// Runs `job(k, scratch, stopped)` for every `k` in `0..count`, in order of
/// `k`, on up to `threads` threads, each keeping its own `scratch` between
/// jobs; the first error stops the rest and is returned. `stopped` turns
/// true once something failed, so a long job can give up early (its own
/// error is then not the one returned). Meanwhile the calling
/// thread reports `done` (which the jobs advance) to `progress` at most
/// once per `interval`, and once more when every job has finished; an error
/// from `progress` stops the jobs too.
pub(crate) fn for_each_index<W: Default>(
    threads: usize,
    count: usize,
    job: impl Fn(usize, &mut W, &AtomicBool) -> Result<()> + Sync,
    done: &std::sync::atomic::AtomicU64,
    interval: std::time::Duration,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<()> {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc::{RecvTimeoutError, channel};
    let threads = threads.clamp(1, count.max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    // The error is stored before the flag is raised, so that a job giving
    // up because of the flag never gets its error in first.
    let fail = |e: Error| {
        if let Ok(mut slot) = first_error.lock() {
            slot.get_or_insert(e);
        }
        failed.store(true, Ordering::Release);
    };
    std::thread::scope(|scope| {
        // Each worker holds a sender; the channel closes when all are done.
        let (tx, rx) = channel::<()>();
        for _ in 0..threads {
            let tx = tx.clone();
            let (job, next, failed, fail) = (&job, &next, &failed, &fail);
            scope.spawn(move || {
                let mut scratch = W::default();
                while !failed.load(Ordering::Relaxed) {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= count {
                        break;
                    }
                    if let Err(e) = job(k, &mut scratch, failed) {
                        fail(e);
                        break;
                    }
                    let _ = tx.send(());
                }
            });
        }
        drop(tx);
        let mut last = std::time::Instant::now();
        loop {
            let finished = matches!(rx.recv_timeout(interval), Err(RecvTimeoutError::Disconnected));
            if failed.load(Ordering::Relaxed) {
                if finished {
                    break;
                }
                continue;
            }
            if finished || last.elapsed() >= interval {
                last = std::time::Instant::now();
                if let Err(e) = progress(done.load(Ordering::Relaxed)) {
                    fail(e);
                }
            }
            if finished {
                break;
            }
        }
    });
    match first_error.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}
