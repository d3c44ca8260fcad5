//! Bounded retries with exponential backoff, shared by the network sources.

use std::time::Duration;

use crate::error::Error;

/// The outcome of one attempt.
pub(crate) enum Attempt<T> {
    /// Done.
    Ok(T),
    /// A transient failure (reset, stall, 5xx, short body): try again.
    Retry(Error),
    /// A transient failure after useful progress (a reset 200 MiB into a
    /// span): try again at once, without using up an attempt. Progress
    /// bounds how often this can happen.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Resumable(Error),
    /// A failure that another attempt cannot fix.
    Final(Error),
}

/// Runs `attempt` until it succeeds, fails for good, or `attempts` are used
/// up (a resumable failure does not count). The first retry is immediate (a lone reset or stall is usually
/// transient and each attempt re-fetches only what is missing); later ones
/// wait `backoff`, then twice that, and so on. The error is the last one
/// seen (`None` only if no attempt ran).
pub(crate) fn retry<T>(
    attempts: u32,
    backoff: Duration,
    mut attempt: impl FnMut() -> Attempt<T>,
) -> Result<T, Option<Error>> {
    let mut delay = backoff;
    let mut last = None;
    let mut failures = 0;
    while failures < attempts.max(1) {
        if failures > 1 {
            std::thread::sleep(delay);
            delay = delay.saturating_mul(2);
        }
        match attempt() {
            Attempt::Ok(v) => return Ok(v),
            Attempt::Final(e) => return Err(Some(e)),
            Attempt::Retry(e) => {
                failures += 1;
                last = Some(e);
            }
            Attempt::Resumable(e) => {
                failures = 0;
                delay = backoff;
                last = Some(e);
            }
        }
    }
    Err(last)
}
