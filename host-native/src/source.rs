//! Where bytes come from: anything that can serve positioned reads
//! concurrently ([`RangeSource`]). Local files use `pread`; the remote
//! stores in [`crate::store`] implement the same trait, and
//! [`crate::store::open_source`] picks one for a location.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result, file_err, io_err};

mod direct;
mod frozen;
mod window;
pub use direct::{COLD_READS_VAR, DIRECT_BLOCK, read_ahead};
pub use frozen::{Frozen, frozen};
pub use window::Window;

/// A byte source that serves concurrent positioned reads.
pub trait RangeSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`. Reading past the end is an
    /// error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// A name for messages: a path or a URI.
    fn name(&self) -> &str;

    /// Whether each request costs far more than the bytes it moves (network
    /// sources). The reader then fetches a few long spans, one request per
    /// reader thread, instead of many pieces.
    fn prefers_long_reads(&self) -> bool {
        false
    }

    /// Fills `bufs`, which together cover consecutive bytes starting at
    /// `offset`. Network sources serve this with one request.
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let mut at = offset;
        for buf in bufs.iter_mut() {
            self.read_exact_at(at, buf)?;
            at += buf.len() as u64;
        }
        Ok(())
    }

    /// Whether a load would read faster around the page cache
    /// ([`RangeSource::read_uncached_at`]): a local file most of whose
    /// pages are not cached, on a file system that allows it.
    fn is_cold(&self) -> bool {
        false
    }

    /// Fills `buf` with the bytes at `offset`, bypassing the page cache
    /// where the source can. `offset`, `buf`'s length and its address are
    /// multiples of [`DIRECT_BLOCK`]; `buf` may reach past the end of the
    /// source (to the end of the last block), and those bytes are left as
    /// they are. The default reads as [`RangeSource::read_exact_at`] does.
    fn read_uncached_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n =
            usize::try_from(self.len().saturating_sub(offset)).unwrap_or(usize::MAX).min(buf.len());
        self.read_exact_at(offset, &mut buf[..n])
    }

    /// The open local file whose bytes this source serves at their own
    /// offsets (a private memory map of it holds the same bytes), or
    /// `None` for any other source.
    fn local_file(&self) -> Option<&File> {
        None
    }
}

/// Fails with a `Truncated` format error when `len` bytes at `offset` do
/// not lie inside a source of `total` bytes.
pub(crate) fn check_range(name: &str, total: u64, offset: u64, len: usize) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= total => Ok(()),
        end => Err(Error::format(
            name,
            tensorizer_core::Error::Truncated {
                offset: total.min(offset),
                needed: end.map_or(u64::MAX, |e| e - total),
            },
        )),
    }
}

/// A local file read with `pread`, so any number of threads share one
/// descriptor.
#[derive(Debug)]
pub struct LocalFile {
    file: File,
    len: u64,
    name: String,
    /// The same file opened with `O_DIRECT`, once a load asks for it
    /// (`None` inside where that is not possible).
    direct: std::sync::OnceLock<Option<direct::DirectFile>>,
}

impl LocalFile {
    /// Opens `path` for reading.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let name = path.as_ref().display().to_string();
        let file = File::open(path.as_ref()).map_err(file_err(&name))?;
        let len = file.metadata().map_err(file_err(&name))?.len();
        Ok(Self { file, len, name, direct: std::sync::OnceLock::new() })
    }

    fn direct(&self) -> Option<&direct::DirectFile> {
        self.direct.get_or_init(|| direct::DirectFile::reopen(&self.file)).as_ref()
    }

    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl RangeSource for LocalFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(&self.name, self.len, offset, buf.len())?;
        self.file.read_exact_at(buf, offset).map_err(io_err(&self.name, offset))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_cold(&self) -> bool {
        direct::allowed()
            && direct::mostly_uncached(&self.file, self.len)
            && self.direct().is_some()
    }

    fn read_uncached_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let want =
            usize::try_from(self.len.saturating_sub(offset)).unwrap_or(usize::MAX).min(buf.len());
        check_range(&self.name, self.len, offset, want)?;
        let aligned = offset.is_multiple_of(DIRECT_BLOCK)
            && (buf.len() as u64).is_multiple_of(DIRECT_BLOCK)
            && (buf.as_ptr() as u64).is_multiple_of(DIRECT_BLOCK);
        match self.direct() {
            Some(d) if aligned => match d.read_at(offset, buf) {
                Ok(n) if n >= want => Ok(()),
                // The file shrank under the load.
                Ok(n) => Err(io_err(&self.name, offset + n as u64)(
                    std::io::ErrorKind::UnexpectedEof.into(),
                )),
                // A file system that opens with O_DIRECT but refuses such
                // reads: the cache then.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self
                    .file
                    .read_exact_at(&mut buf[..want], offset)
                    .map_err(io_err(&self.name, offset)),
                Err(e) => Err(io_err(&self.name, offset)(e)),
            },
            _ => self
                .file
                .read_exact_at(&mut buf[..want], offset)
                .map_err(io_err(&self.name, offset)),
        }
    }

    fn local_file(&self) -> Option<&File> {
        Some(&self.file)
    }
}

/// An in-memory source (tests, small files, already-fetched bytes).
#[derive(Debug, Clone)]
pub struct MemorySource {
    bytes: Vec<u8>,
    name: String,
}

impl MemorySource {
    /// Wraps `bytes` under a display name.
    pub fn new(bytes: Vec<u8>, name: impl Into<String>) -> Self {
        Self { bytes, name: name.into() }
    }
}

impl RangeSource for MemorySource {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start.checked_add(buf.len()).and_then(|end| self.bytes.get(start..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => check_range(&self.name, self.len(), offset, buf.len()),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// `Box<T>` and `Arc<T>` read as the `T` they hold. Every method forwards,
/// those with defaults too, so that a source's own overrides still apply.
macro_rules! forward_range_source {
    ($($pointer:ident)::+) => {
        impl<T: RangeSource + ?Sized> RangeSource for $($pointer)::+<T> {
            fn len(&self) -> u64 {
                (**self).len()
            }

            fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read_exact_at(offset, buf)
            }

            fn name(&self) -> &str {
                (**self).name()
            }

            fn prefers_long_reads(&self) -> bool {
                (**self).prefers_long_reads()
            }

            fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
                (**self).read_vectored_at(offset, bufs)
            }

            fn is_cold(&self) -> bool {
                (**self).is_cold()
            }

            fn read_uncached_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read_uncached_at(offset, buf)
            }

            fn local_file(&self) -> Option<&File> {
                (**self).local_file()
            }
        }
    };
}

forward_range_source!(Box);
forward_range_source!(std::sync::Arc);

/// A source that counts the requests it serves and the bytes they move,
/// forwarding everything (vectored reads stay one request).
pub struct Counted<S> {
    inner: S,
    bytes: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
}

impl<S> Counted<S> {
    /// Wraps `inner`, with both counts at zero.
    pub fn new(inner: S) -> Self {
        Self { inner, bytes: Default::default(), requests: Default::default() }
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Read requests served so far (a vectored read counts once).
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self, bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes.fetch_add(bytes as u64, Relaxed);
        self.requests.fetch_add(1, Relaxed);
    }
}

impl<S: RangeSource> RangeSource for Counted<S> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.count(buf.len());
        self.inner.read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn prefers_long_reads(&self) -> bool {
        self.inner.prefers_long_reads()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.count(bufs.iter().map(|b| b.len()).sum());
        self.inner.read_vectored_at(offset, bufs)
    }

    fn is_cold(&self) -> bool {
        self.inner.is_cold()
    }

    fn read_uncached_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = usize::try_from(self.inner.len().saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.count(n);
        self.inner.read_uncached_at(offset, buf)
    }

    fn local_file(&self) -> Option<&File> {
        self.inner.local_file()
    }
}

/// Default of [`TransferLimits::min_rate`]: 16 KiB/s.
pub const DEFAULT_MIN_RATE: u64 = 16 << 10;

/// Default of [`TransferLimits::rate_window`]: 30 s.
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(30);

/// Environment variable read by [`crate::store::StoreOptions::from_env`]: [`TransferLimits::min_rate`]
/// in bytes per second (`0` turns the check off).
pub const MIN_RATE_VAR: &str = "TZR_MIN_RATE";

/// Environment variable read by [`crate::store::StoreOptions::from_env`]: [`TransferLimits::deadline`]
/// in seconds (`0` or empty: none).
pub const DEADLINE_VAR: &str = "TZR_DEADLINE";

/// How slow a network read may be, on top of each source's per-read timeout
/// (which only catches silence): one policy for HTTP, S3 and Redis.
///
/// A request must move at least [`min_rate`](Self::min_rate) bytes per
/// second on average over every [`rate_window`](Self::rate_window), counted
/// from when it is sent; a slower one (a server trickling bytes) is
/// abandoned and retried for the bytes still missing, like a stalled one.
/// A slow but steady transfer of any size is never cut. [`deadline`](Self::deadline)
/// optionally bounds one read of a source as a whole, retries included.
/// Either limit ends in an [`Error::Io`] of kind
/// [`std::io::ErrorKind::TimedOut`] naming the source, the byte range and
/// the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferLimits {
    /// Lowest average rate, in bytes per second, over each window; `0`
    /// turns the check off.
    pub min_rate: u64,
    /// The span over which the rate is averaged (at least 1 ms is used).
    pub rate_window: Duration,
    /// Longest time one read of a source (or opening it) may take in all,
    /// its retries included; `None`: no limit.
    pub deadline: Option<Duration>,
}

impl Default for TransferLimits {
    fn default() -> Self {
        Self { min_rate: DEFAULT_MIN_RATE, rate_window: DEFAULT_RATE_WINDOW, deadline: None }
    }
}

impl TransferLimits {
    /// The defaults, overridden by [`MIN_RATE_VAR`] and [`DEADLINE_VAR`]
    /// where set; a value that is not a number is an error.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut limits = Self::default();
        let bad = |name: &str, value: &str, what: &str| {
            Error::Invalid(format!("{name}={value:?}: expected {what}"))
        };
        if let Some(v) = var(MIN_RATE_VAR).filter(|v| !v.trim().is_empty()) {
            limits.min_rate = v
                .trim()
                .parse()
                .map_err(|_| bad(MIN_RATE_VAR, &v, "a whole number of bytes per second"))?;
        }
        if let Some(v) = var(DEADLINE_VAR).filter(|v| !v.trim().is_empty()) {
            let secs: f64 =
                v.trim().parse().map_err(|_| bad(DEADLINE_VAR, &v, "a number of seconds"))?;
            let deadline = Duration::try_from_secs_f64(secs)
                .map_err(|_| bad(DEADLINE_VAR, &v, "a number of seconds"))?;
            limits.deadline = (!deadline.is_zero()).then_some(deadline);
        }
        Ok(limits)
    }
}

/// A [`RangeSource`] read through the core's positioned-read trait
/// ([`tensorizer_core::RandomAccess`]), for the core's scanner and
/// fingerprints. [`RangeSource`] is the concurrent form of that trait
/// (`&self`, `Send + Sync`, this crate's errors): the parallel reader calls
/// it from many threads at once, which the core's `&mut self` reads cannot
/// express; this adapter is the one bridge from it to the core.
pub struct Positioned<'a, S: RangeSource + ?Sized = dyn RangeSource>(pub &'a S);

impl<S: RangeSource + ?Sized> tensorizer_core::RandomAccess for Positioned<'_, S> {
    fn len(&self) -> u64 {
        self.0.len()
    }

    fn read_exact_at(
        &mut self,
        offset: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), tensorizer_core::ReadError> {
        self.0
            .read_exact_at(offset, buf)
            .map_err(|e| tensorizer_core::ReadError { offset, message: e.to_string() })
    }
}

/// How much of a source its user means to read. Network sources plan their
/// opening request by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Intent {
    /// Most of it: a load, a copy, a conversion.
    #[default]
    ReadAll,
    /// Its header and index, and at most parts of the rest: an inspection,
    /// or one rank's share of a cooperative load.
    Peek,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(TransferLimits::from_vars(vars(&[])).unwrap(), TransferLimits::default());
        let set =
            TransferLimits::from_vars(vars(&[(MIN_RATE_VAR, "0"), (DEADLINE_VAR, "2.5")])).unwrap();
        assert_eq!((set.min_rate, set.deadline), (0, Some(Duration::from_millis(2500))));
        assert_eq!(TransferLimits::from_vars(vars(&[(DEADLINE_VAR, "0")])).unwrap().deadline, None);
        for bad in [(MIN_RATE_VAR, "1k"), (DEADLINE_VAR, "-1"), (DEADLINE_VAR, "soon")] {
            let err =
                TransferLimits::from_vars(move |n: &str| (n == bad.0).then(|| bad.1.to_string()))
                    .unwrap_err();
            assert!(err.to_string().contains(bad.0), "{err}");
        }
    }
}
