//! The timing the comparison benches share (`redis_clients`,
//! `http_stacks`): a load cut into one share per reader thread, and
//! contenders run alternately with one untimed round first.

use std::time::{Duration, Instant};

/// Reads the bytes at an offset into a buffer (one contender).
pub(crate) type Read<'a> = &'a (dyn Fn(u64, &mut [u8]) + Sync);

/// The variable `name` as a number, or `default`.
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Fills `buf` with `readers` threads, `read(offset, part)` each, one
/// contiguous share per thread (as a load cuts its tensors); the time taken.
pub(crate) fn load(buf: &mut [u8], readers: usize, read: Read<'_>) -> Duration {
    let share = buf.len().div_ceil(readers);
    let start = Instant::now();
    std::thread::scope(|s| {
        for (i, part) in buf.chunks_mut(share).enumerate() {
            s.spawn(move || read((i * share) as u64, part));
        }
    });
    start.elapsed()
}

/// Runs `contenders` alternately, one untimed round first, then `reps`
/// timed ones; their medians.
pub(crate) fn race(
    buf: &mut [u8],
    readers: usize,
    reps: usize,
    contenders: &[Read<'_>],
) -> Vec<Duration> {
    let mut times = vec![Vec::new(); contenders.len()];
    for rep in 0..=reps {
        for (c, read) in contenders.iter().enumerate() {
            let t = load(buf, readers, *read);
            if rep > 0 {
                times[c].push(t);
            }
        }
    }
    times.into_iter().map(median).collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}
