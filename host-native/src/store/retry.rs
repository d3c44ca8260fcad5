//! The one retry policy of every remote store ([`RetryPolicy`]: bounded
//! attempts, exponential backoff with jitter and a cap, a time limit on
//! failing without progress), and the transfer-rate and deadline policy
//! ([`TransferLimits`]) that tells a slow but moving transfer from a
//! stalled one.

// Without a network feature (local files only) nothing retries.
#![cfg_attr(not(any(feature = "http", feature = "redis")), allow(dead_code))]

use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::error::{Error, StoreErrorKind};
use crate::source::TransferLimits;

/// How a remote store retries a request that failed on a transient fault
/// (a reset, a stall, a trickle, HTTP 429/5xx, a busy Redis): one policy
/// for HTTP, S3 and Redis.
///
/// The first retry is immediate (a lone reset or stall is usually
/// transient, and each attempt re-fetches only the bytes still missing);
/// later ones wait [`backoff`](Self::backoff), doubling up to
/// [`max_backoff`](Self::max_backoff), each wait drawn at random from its
/// upper half so that many reader threads do not retry in lockstep.
/// Retrying stops after [`attempts`](Self::attempts) failures in a row or
/// once [`give_up_after`](Self::give_up_after) has passed since the request
/// started, whichever comes first. A failure after useful progress (a
/// reset 200 MiB into a span) starts both counts afresh, so a long
/// transfer that keeps moving is never given up on; one that stalls is,
/// since each stall ends an attempt (see [`TransferLimits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Failed attempts in a row before giving up (at least 1 attempt runs).
    pub attempts: u32,
    /// Wait before the second retry; doubled for each one after.
    pub backoff: Duration,
    /// Longest wait between two attempts.
    pub max_backoff: Duration,
    /// Longest time to keep failing without progress; `None`: attempts only.
    pub give_up_after: Option<Duration>,
}

/// Default of [`RetryPolicy::max_backoff`].
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(15);

/// Default of [`RetryPolicy::give_up_after`]: three minutes.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(180);

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            backoff: Duration::from_millis(100),
            max_backoff: DEFAULT_MAX_BACKOFF,
            give_up_after: Some(DEFAULT_GIVE_UP_AFTER),
        }
    }
}

/// Environment variable read by [`crate::store::StoreOptions::from_env`]:
/// [`RetryPolicy::attempts`] for every remote store (a whole number, at
/// least 1).
pub const RETRIES_VAR: &str = "TZR_RETRIES";

/// Environment variable read by [`crate::store::StoreOptions::from_env`]:
/// [`RetryPolicy::give_up_after`] in seconds for every remote store (`0`:
/// attempts only).
pub const RETRY_GIVE_UP_VAR: &str = "TZR_RETRY_GIVE_UP";

impl RetryPolicy {
    /// The default policy with `attempts` and `backoff`.
    pub fn new(attempts: u32, backoff: Duration) -> Self {
        Self { attempts, backoff, ..Self::default() }
    }

    /// The default policy, overridden by [`RETRIES_VAR`] and
    /// [`RETRY_GIVE_UP_VAR`] where set; a value that is not a number is an
    /// error naming the variable.
    pub fn from_env() -> crate::error::Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> crate::error::Result<Self> {
        let mut policy = Self::default();
        let bad = |name: &str, value: &str, what: &str| {
            Error::Invalid(format!("{name}={value:?}: expected {what}"))
        };
        if let Some(v) = var(RETRIES_VAR).filter(|v| !v.trim().is_empty()) {
            policy.attempts =
                v.trim().parse().ok().filter(|n: &u32| *n >= 1).ok_or_else(|| {
                    bad(RETRIES_VAR, &v, "a whole number of attempts, at least 1")
                })?;
        }
        if let Some(v) = var(RETRY_GIVE_UP_VAR).filter(|v| !v.trim().is_empty()) {
            let secs: f64 =
                v.trim().parse().map_err(|_| bad(RETRY_GIVE_UP_VAR, &v, "a number of seconds"))?;
            let limit = Duration::try_from_secs_f64(secs)
                .map_err(|_| bad(RETRY_GIVE_UP_VAR, &v, "a number of seconds"))?;
            policy.give_up_after = (!limit.is_zero()).then_some(limit);
        }
        Ok(policy)
    }

    /// The wait before retry number `retry` (1 = the first retry), before
    /// jitter: none for the first, then `backoff` doubling up to the cap.
    fn delay(&self, retry: u32) -> Duration {
        match retry {
            0 | 1 => Duration::ZERO,
            n => self
                .backoff
                .saturating_mul(1u32.checked_shl(n - 2).unwrap_or(u32::MAX))
                .min(self.max_backoff),
        }
    }
}

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

/// A failed attempt that brought at least this many new bytes is resumed
/// at once, without using up an attempt ([`Attempt::Resumable`]): the rule
/// of every remote store.
pub(crate) const RESUMABLE_PROGRESS: u64 = 1 << 20;

/// What a request is about, for the error that ends its retries.
pub(crate) struct Target<'a> {
    /// The path or URI (never a presigned URL).
    pub(crate) location: &'a str,
    /// The bytes being read, if a read.
    pub(crate) range: Option<Range<u64>>,
}

/// Runs `attempt` under `policy` until it succeeds, fails for good, or
/// the policy gives up; giving up is an [`Error::Store`] of kind
/// [`StoreErrorKind::RetriesExhausted`] (or [`StoreErrorKind::TimedOut`]
/// when the last failure was a stall or a trickle) naming `target`, the
/// attempts, the time spent and the last failure.
pub(crate) fn retry<T>(
    policy: &RetryPolicy,
    target: Target<'_>,
    mut attempt: impl FnMut() -> Attempt<T>,
) -> Result<T, Error> {
    let mut since = Instant::now();
    let mut failures = 0u32;
    loop {
        let last = match attempt() {
            Attempt::Ok(v) => return Ok(v),
            Attempt::Final(e) => return Err(e),
            Attempt::Retry(e) => {
                failures += 1;
                e
            }
            Attempt::Resumable(e) => {
                failures = 0;
                since = Instant::now();
                e
            }
        };
        let wait = jitter(policy.delay(failures));
        let out_of_time = policy.give_up_after.is_some_and(|limit| since.elapsed() + wait >= limit);
        if failures >= policy.attempts.max(1) || (failures > 0 && out_of_time) {
            return Err(exhausted(target, failures, since.elapsed(), last));
        }
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// The error for a request whose retries ran out after `failures` failed
/// attempts in `elapsed`, the last with `last`.
fn exhausted(target: Target<'_>, failures: u32, elapsed: Duration, last: Error) -> Error {
    let kind = match last.store_kind() {
        Some(StoreErrorKind::TimedOut) => StoreErrorKind::TimedOut,
        _ => StoreErrorKind::RetriesExhausted,
    };
    let cause = match &last {
        Error::Io { source, .. } => source.to_string(),
        Error::Store { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    let plural = if failures == 1 { "" } else { "s" };
    Error::Store {
        location: target.location.to_string(),
        range: target.range,
        kind,
        detail: format!(
            "gave up after {failures} failed attempt{plural} in {:.1} s; the last: {cause}",
            elapsed.as_secs_f64()
        ),
    }
}

/// `d` scaled by a random factor in `[0.5, 1]`.
fn jitter(d: Duration) -> Duration {
    if d.is_zero() {
        return d;
    }
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    // xorshift64*: plenty for spreading retries apart.
    let r = STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    let fraction = 0.5 + (r >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
    d.mul_f64(fraction)
}

/// A non-zero seed from the OS (or, failing that, the clock).
fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        bytes = (nanos.as_nanos() as u64).to_le_bytes();
    }
    u64::from_le_bytes(bytes) | 1
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
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn off() -> Self {
        Self::new(
            &TransferLimits { min_rate: 0, deadline: None, ..TransferLimits::default() },
            None,
        )
    }

    /// The instant by which the read this request serves must end.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
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

    /// The longest wait for more bytes before this pace must be checked
    /// again with [`progress`](Self::progress): a rate window while a
    /// minimum rate is set, and no longer than what is left before the
    /// deadline; `None` when neither applies.
    #[cfg_attr(not(feature = "cloud"), allow(dead_code))]
    pub(crate) fn wait(&self) -> Option<Duration> {
        let window = (self.min_rate > 0).then_some(self.window);
        match (window, self.time_left()) {
            (Some(window), Some(left)) => Some(window.min(left)),
            (window, left) => window.or(left),
        }
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
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                TooSlow { deadline: false, message },
            ));
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
            Err(e) if e.kind() != io::ErrorKind::Interrupted && self.pace.expired() => {
                Err(self.pace.deadline_error())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target<'static> {
        Target { location: "http://h/f", range: Some(0..10) }
    }

    fn transient() -> Error {
        Error::Io { file: "http://h/f".into(), offset: 0, source: io::Error::other("reset") }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let policy = RetryPolicy {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..RetryPolicy::default()
        };
        let delays: Vec<_> = (1..6).map(|n| policy.delay(n).as_millis()).collect();
        assert_eq!(delays, [0, 100, 200, 350, 350]);
        let drawn: Vec<_> = (0..64).map(|_| jitter(Duration::from_millis(100))).collect();
        assert!(drawn.iter().all(|d| (50..=100).contains(&d.as_millis())), "{drawn:?}");
        assert!(drawn.iter().any(|d| *d != drawn[0]), "jitter draws differ");
    }

    #[test]
    fn attempts_run_out_into_a_typed_error() {
        let policy = RetryPolicy {
            attempts: 3,
            backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        let mut calls = 0;
        let err = retry::<()>(&policy, target(), || {
            calls += 1;
            Attempt::Retry(transient())
        })
        .unwrap_err();
        assert_eq!(calls, 3);
        assert_eq!(err.store_kind(), Some(StoreErrorKind::RetriesExhausted));
        let text = err.to_string();
        assert!(
            text.starts_with(
                "http://h/f (bytes 0-9): retries exhausted: gave up after 3 failed attempts"
            ),
            "{text}"
        );
        assert!(text.ends_with("the last: reset"), "{text}");
        // Progress starts the count afresh; a final failure ends at once.
        let mut calls = 0;
        let err = retry::<()>(&policy, target(), || {
            calls += 1;
            match calls {
                1 | 2 | 4 | 5 => Attempt::Retry(transient()),
                3 => Attempt::Resumable(transient()),
                _ => Attempt::Final(Error::Invalid("final".into())),
            }
        })
        .unwrap_err();
        assert_eq!((calls, err.to_string()), (6, "final".to_string()));
    }

    #[test]
    fn failing_without_progress_is_bounded_in_time() {
        let policy = RetryPolicy {
            attempts: 1000,
            backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(20),
            give_up_after: Some(Duration::from_millis(200)),
        };
        let started = Instant::now();
        let err = retry::<()>(&policy, target(), || Attempt::Retry(transient())).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(err.store_kind(), Some(StoreErrorKind::RetriesExhausted));
    }

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
        let limits = TransferLimits {
            min_rate: 1000,
            rate_window: Duration::from_millis(100),
            deadline: None,
        };
        let mut slow =
            Paced { inner: Trickle(Duration::from_millis(5)), pace: Pace::new(&limits, None) };
        let started = Instant::now();
        let err = io::copy(&mut slow.by_ref().take(1000), &mut io::sink()).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(
            too_slow(&err).is_some_and(|t| !t.deadline) && err.to_string().contains("min_rate"),
            "{err}"
        );
        // 1 byte per 1 ms is 1000 B/s on paper; ask for a tenth of that.
        let lenient = TransferLimits { min_rate: 100, ..limits };
        let mut steady =
            Paced { inner: Trickle(Duration::from_millis(1)), pace: Pace::new(&lenient, None) };
        assert_eq!(io::copy(&mut steady.by_ref().take(300), &mut io::sink()).unwrap(), 300);
        // The deadline is final and says so.
        let strict =
            TransferLimits { min_rate: 0, deadline: Some(Duration::from_millis(30)), ..limits };
        let mut late = Paced {
            inner: Trickle(Duration::from_millis(5)),
            pace: Pace::new(&strict, deadline(&strict)),
        };
        let err = io::copy(&mut late.by_ref().take(1000), &mut io::sink()).unwrap_err();
        assert!(
            too_slow(&err).is_some_and(|t| t.deadline) && err.to_string().contains("deadline"),
            "{err}"
        );
    }

    #[test]
    fn the_policy_comes_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(RetryPolicy::from_vars(vars(&[])).unwrap(), RetryPolicy::default());
        let set = RetryPolicy::from_vars(vars(&[(RETRIES_VAR, "2"), (RETRY_GIVE_UP_VAR, "1.5")]))
            .unwrap();
        assert_eq!((set.attempts, set.give_up_after), (2, Some(Duration::from_millis(1500))));
        assert_eq!(
            RetryPolicy::from_vars(vars(&[(RETRY_GIVE_UP_VAR, "0")])).unwrap().give_up_after,
            None
        );
        for bad in [(RETRIES_VAR, "0"), (RETRIES_VAR, "many"), (RETRY_GIVE_UP_VAR, "-1")] {
            let err =
                RetryPolicy::from_vars(move |n: &str| (n == bad.0).then(|| bad.1.to_string()))
                    .unwrap_err();
            assert!(err.to_string().contains(bad.0), "{err}");
        }
    }
}
