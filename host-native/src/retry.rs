//! Bounded retries with exponential backoff, and the transfer-rate and
//! deadline policy ([`TransferLimits`]), shared by the network sources.

use std::fmt;
use std::io::{self, Read};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::source::TransferLimits;

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

/// The instant by which a read that starts now must end, if `limits` set
/// a deadline.
pub(crate) fn deadline(limits: &TransferLimits) -> Option<Instant> {
    limits.deadline.and_then(|d| Instant::now().checked_add(d))
}

/// Which limit a transfer broke: the error inside the `io::Error` (of kind
/// `TimedOut`) that [`Pace`] returns.
#[derive(Debug)]
pub(crate) struct TooSlow {
    /// The overall deadline passed (final), not the rate (worth a retry).
    pub(crate) deadline: bool,
    message: String,
}

impl fmt::Display for TooSlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TooSlow {}

/// Whether `e` is a [`TooSlow`], and if so whether the deadline passed.
pub(crate) fn too_slow(e: &io::Error) -> Option<&TooSlow> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<TooSlow>())
}

/// One request measured against [`TransferLimits`]: its bytes per window
/// since it was sent, and the deadline of the read it serves.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    min_rate: u64,
    window: Duration,
    deadline: Option<Instant>,
    /// The whole deadline, for messages.
    allowed: Option<Duration>,
    window_start: Instant,
    window_bytes: u64,
}

impl Pace {
    /// A request sent now, for a read that must end by `deadline`.
    pub(crate) fn new(limits: &TransferLimits, deadline: Option<Instant>) -> Self {
        Self {
            min_rate: limits.min_rate,
            window: limits.rate_window.max(Duration::from_millis(1)),
            deadline,
            allowed: limits.deadline,
            window_start: Instant::now(),
            window_bytes: 0,
        }
    }

    /// No limits (a connection between requests).
    pub(crate) fn off() -> Self {
        Self::new(&TransferLimits { min_rate: 0, deadline: None, ..TransferLimits::default() }, None)
    }

    /// Time left before the deadline (`None`: no deadline).
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// `timeout` shortened to what is left before the deadline (at least
    /// 1 ms, since a zero socket timeout means none).
    pub(crate) fn io_timeout(&self, timeout: Duration) -> Duration {
        self.time_left().map_or(timeout, |left| left.min(timeout)).max(Duration::from_millis(1))
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// The error for a passed deadline.
    pub(crate) fn deadline_error(&self) -> io::Error {
        let allowed = self.allowed.unwrap_or_default();
        let message = format!(
            "not finished within the deadline of {:.1} s for one read, retries included (raise or unset \
             TransferLimits::deadline in the source's options, or {}=<seconds> for tzr and open_source)",
            allowed.as_secs_f64(),
            crate::source::DEADLINE_VAR,
        );
        io::Error::new(io::ErrorKind::TimedOut, TooSlow { deadline: true, message })
    }

    /// Counts `n` bytes just received; fails once the deadline has passed,
    /// or when a window of at least `rate_window` averaged below
    /// `min_rate` (a new window then starts).
    pub(crate) fn progress(&mut self, n: usize) -> io::Result<()> {
        if self.expired() {
            return Err(self.deadline_error());
        }
        self.window_bytes = self.window_bytes.saturating_add(n as u64);
        if self.min_rate == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < self.window {
            return Ok(());
        }
        let needed = self.min_rate as f64 * elapsed.as_secs_f64();
        if (self.window_bytes as f64) < needed {
            let message = format!(
                "too slow: {} bytes in the last {:.1} s, below the minimum average of {} bytes/s over {:.1} s \
                 (lower TransferLimits::min_rate in the source's options, or set {}=<bytes per second> for tzr \
                 and open_source; 0 turns the check off)",
                self.window_bytes,
                elapsed.as_secs_f64(),
                self.min_rate,
                self.window.as_secs_f64(),
                crate::source::MIN_RATE_VAR,
            );
            return Err(io::Error::new(io::ErrorKind::TimedOut, TooSlow { deadline: false, message }));
        }
        self.window_start = now;
        self.window_bytes = 0;
        Ok(())
    }
}

/// A reader whose every read counts against its [`Pace`]. A read that
/// fails after the deadline passed (a socket timeout) reports the deadline.
pub(crate) struct Paced<R> {
    pub(crate) inner: R,
    pub(crate) pace: Pace,
}

impl<R: Read> Read for Paced<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.pace.progress(n)?;
                Ok(n)
            }
            Err(e) if e.kind() != io::ErrorKind::Interrupted && self.pace.expired() => Err(self.pace.deadline_error()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields one byte per read, sleeping `gap` before each.
    struct Trickle(Duration);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(self.0);
            buf[0] = 0;
            Ok(1)
        }
    }

    #[test]
    fn a_trickle_trips_the_rate_and_a_steady_flow_does_not() {
        let limits = TransferLimits { min_rate: 1000, rate_window: Duration::from_millis(100), deadline: None };
        let mut slow = Paced { inner: Trickle(Duration::from_millis(5)), pace: Pace::new(&limits, None) };
        let started = Instant::now();
        let err = io::copy(&mut slow.by_ref().take(1000), &mut io::sink()).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(too_slow(&err).is_some_and(|t| !t.deadline) && err.to_string().contains("min_rate"), "{err}");
        // 1 byte per 1 ms is 1000 B/s on paper; ask for a tenth of that.
        let lenient = TransferLimits { min_rate: 100, ..limits };
        let mut steady = Paced { inner: Trickle(Duration::from_millis(1)), pace: Pace::new(&lenient, None) };
        assert_eq!(io::copy(&mut steady.by_ref().take(300), &mut io::sink()).unwrap(), 300);
        // The deadline is final and says so.
        let strict = TransferLimits { min_rate: 0, deadline: Some(Duration::from_millis(30)), ..limits };
        let mut late = Paced { inner: Trickle(Duration::from_millis(5)), pace: Pace::new(&strict, deadline(&strict)) };
        let err = io::copy(&mut late.by_ref().take(1000), &mut io::sink()).unwrap_err();
        assert!(too_slow(&err).is_some_and(|t| t.deadline) && err.to_string().contains("deadline"), "{err}");
    }
}
