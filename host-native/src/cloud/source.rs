//! A [`RangeSource`] over one object of an `object_store` store.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::{block_on, store_error};
use crate::error::{Error, Result, StoreErrorKind};
use crate::retry::{Attempt, RetryPolicy, Target, retry};
use crate::source::{RangeSource, TransferLimits, check_range};

/// Bytes an attempt must have brought in for its failure (a broken body,
/// a stall) to be resumed at once with a fresh request instead of counting
/// as a failed attempt, as for HTTP.
const RESUMABLE_PROGRESS: u64 = 1 << 20;

/// One object of a cloud store, read with ranged `GET`s pinned to the ETag
/// it had when opened (`If-Match`): a replaced object fails the read with
/// an [`Error::Store`] of kind `Changed` naming the object and the range,
/// instead of mixing two versions.
///
/// Retries follow the shared [`RetryPolicy`]: `object_store` retries each
/// request under it (see [`super::retry_config`]), resuming a broken body
/// for the bytes still missing; on top of that a read re-requests the
/// missing bytes when its body broke for good or fell below
/// [`TransferLimits::min_rate`] over a window. Such a failure after at
/// least 1 MiB of progress is resumed at once and starts the policy's
/// counts afresh (a slow but moving transfer is never given up on); one
/// without progress is a failed attempt (a stalled transfer runs out of
/// attempts or of `give_up_after`). [`TransferLimits::deadline`], when set,
/// bounds each read as a whole.
pub struct CloudSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    name: String,
    len: u64,
    etag: Option<String>,
    limits: TransferLimits,
    retry: RetryPolicy,
}

impl CloudSource {
    /// Opens `path` in `store`: one `HEAD` for the length and the ETag.
    /// `name` is used in messages. Reads retry under the default
    /// [`RetryPolicy`] unless [`with_retry`](Self::with_retry) sets another.
    pub fn open(store: Arc<dyn ObjectStore>, path: Path, name: String, limits: TransferLimits) -> Result<Self> {
        let head = {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_opts(&path, GetOptions { head: true, ..Default::default() }).await }
        };
        let meta = match limits.deadline {
            Some(d) => block_on(tokio::time::timeout(d, head))?.map_err(|_| deadline_error(&name, None, d))?,
            None => block_on(head)?,
        }
        .map_err(|e| store_error(&name, None, e))?
        .meta;
        let retry = RetryPolicy::default();
        Ok(Self { store, path, name, len: meta.size, etag: meta.e_tag, limits, retry })
    }

    /// The same source resuming broken and stalled reads under `retry`
    /// (give the store the same policy through [`super::retry_config`]).
    pub fn with_retry(self, retry: RetryPolicy) -> Self {
        Self { retry, ..self }
    }

    /// The object's ETag when it was opened, if the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// One attempt: a ranged `GET` for bytes `offset + *done ..
    /// offset + total` of `bufs` (consecutive), `*done` advanced by what
    /// arrived.
    async fn attempt(&self, offset: u64, total: u64, done: &mut u64, bufs: &mut [&mut [u8]]) -> Attempt<()> {
        let (began, start) = (*done, offset + *done);
        let options = GetOptions {
            range: Some(GetRange::Bounded(start..offset + total)),
            if_match: self.etag.clone(),
            ..Default::default()
        };
        // object_store has already retried the request under the policy.
        let result = match self.store.get_opts(&self.path, options).await {
            Ok(result) => result,
            Err(e) => return Attempt::Final(store_error(&self.name, Some((start, total - began)), e)),
        };
        let mut stream = result.into_stream();
        let window = self.limits.rate_window.max(Duration::from_millis(1));
        let (mut window_start, mut window_bytes) = (Instant::now(), 0u64);
        // A failure after useful progress is resumed; one without is a failed attempt.
        let broke = |done: u64, e: Error, or_else: fn(Error) -> Attempt<()>| match done - began {
            n if n >= RESUMABLE_PROGRESS => Attempt::Resumable(e),
            _ => or_else(e),
        };
        while let Some(chunk) = next_chunk(&mut stream, window, self.limits.min_rate).await {
            let chunk = match chunk {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return broke(*done, self.too_slow(offset + *done, offset + total, window), Attempt::Retry),
                // object_store has already resumed the body under the policy.
                Err(e) => {
                    let e = store_error(&self.name, Some((offset + *done, total - *done)), e);
                    return broke(*done, e, Attempt::Final);
                }
            };
            let n = chunk.len() as u64;
            if n > total - *done {
                let why = "the store sent more bytes than asked";
                return Attempt::Final(self.fail(start, total - began, io::ErrorKind::InvalidData, why));
            }
            copy_into(bufs, *done, &chunk);
            *done += n;
            window_bytes += n;
            if window_start.elapsed() >= window {
                let floor = self.limits.min_rate as f64 * window_start.elapsed().as_secs_f64();
                if (window_bytes as f64) < floor {
                    return broke(*done, self.too_slow(offset + *done, offset + total, window), Attempt::Retry);
                }
                (window_start, window_bytes) = (Instant::now(), 0);
            }
        }
        if *done < total {
            let why = "the object ended early";
            return Attempt::Final(self.fail(offset + *done, total - *done, io::ErrorKind::UnexpectedEof, why));
        }
        Attempt::Ok(())
    }

    /// The failure of a transfer below the minimum rate, at `start..end`.
    fn too_slow(&self, start: u64, end: u64, window: Duration) -> Error {
        let why = format!("slower than {} bytes/s over {window:?} (TZR_MIN_RATE)", self.limits.min_rate);
        Error::store(&self.name, Some(start..end), StoreErrorKind::TimedOut, why)
    }

    fn fail(&self, offset: u64, len: u64, kind: io::ErrorKind, why: impl std::fmt::Display) -> Error {
        Error::Io {
            file: self.name.clone(),
            offset,
            source: io::Error::new(kind, format!("range {offset}-{}: {why}", offset + len.max(1) - 1)),
        }
    }

    fn read(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(&self.name, self.len, offset, total)?;
        if total == 0 {
            return Ok(());
        }
        let total = total as u64;
        let deadline = self.limits.deadline.map(|d| (d, Instant::now().checked_add(d)));
        let mut done = 0u64;
        let target = Target { location: &self.name, range: Some(offset..offset + total) };
        retry(&self.retry, target, || {
            let attempt = self.attempt(offset, total, &mut done, bufs);
            let outcome = match deadline {
                Some((limit, at)) => {
                    let left = at.map_or(limit, |at| at.saturating_duration_since(Instant::now()));
                    block_on(tokio::time::timeout(left, attempt)).map(|r| {
                        r.unwrap_or_else(|_| Attempt::Final(deadline_error(&self.name, Some((offset, total)), limit)))
                    })
                }
                None => block_on(attempt),
            };
            outcome.unwrap_or_else(Attempt::Final)
        })
    }
}

/// The next chunk of `stream`; `Ok(None)` when nothing came for a whole
/// `window` while a minimum rate is set (a stall: ask again).
async fn next_chunk(
    stream: &mut futures_util::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    window: Duration,
    min_rate: u64,
) -> Option<object_store::Result<Option<bytes::Bytes>>> {
    if min_rate == 0 {
        return stream.next().await.map(|r| r.map(Some));
    }
    match tokio::time::timeout(window, stream.next()).await {
        Ok(next) => next.map(|r| r.map(Some)),
        Err(_) => Some(Ok(None)),
    }
}

/// Copies `chunk` into the concatenation of `bufs` at position `at`.
fn copy_into(bufs: &mut [&mut [u8]], mut at: u64, mut chunk: &[u8]) {
    for buf in bufs.iter_mut() {
        let len = buf.len() as u64;
        if at >= len {
            at -= len;
            continue;
        }
        let from = at as usize;
        let n = (buf.len() - from).min(chunk.len());
        buf[from..from + n].copy_from_slice(&chunk[..n]);
        chunk = &chunk[n..];
        at = 0;
        if chunk.is_empty() {
            break;
        }
    }
}

fn deadline_error(name: &str, range: Option<(u64, u64)>, deadline: Duration) -> Error {
    let range = range.map(|(start, len)| start..start.saturating_add(len.max(1)));
    Error::store(
        name,
        range,
        StoreErrorKind::TimedOut,
        format!("not done within the {deadline:?} deadline (TZR_DEADLINE)"),
    )
}

impl RangeSource for CloudSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read(offset, &mut [buf])
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.read(offset, bufs)
    }
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::sync::atomic::{AtomicU32, Ordering};

    use bytes::Bytes;
    use futures_util::stream::{self, BoxStream};
    use object_store::memory::InMemory;
    use object_store::{
        CopyOptions, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStoreExt, PutMultipartOptions,
        PutOptions, PutPayload, PutResult,
    };

    use super::*;

    /// How each ranged body of a [`Faulty`] store ends.
    #[derive(Debug, Clone, Copy)]
    enum Fault {
        /// After this many bytes (and a pause), the body breaks.
        BreakAfter(usize, Duration),
        /// The body never sends a byte.
        Stall,
    }

    /// An in-memory store whose ranged bodies break or stall.
    #[derive(Debug)]
    struct Faulty {
        inner: InMemory,
        fault: Fault,
        gets: AtomicU32,
    }

    impl fmt::Display for Faulty {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Faulty")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Faulty {
        async fn put_opts(&self, p: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
            self.inner.put_opts(p, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            p: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(p, opts).await
        }
        async fn get_opts(&self, p: &Path, options: GetOptions) -> object_store::Result<object_store::GetResult> {
            let ranged = options.range.is_some();
            let mut result = self.inner.get_opts(p, options).await?;
            if !ranged {
                return Ok(result);
            }
            self.gets.fetch_add(1, Ordering::Relaxed);
            // Irrefutable unless object_store's "fs" feature is on.
            #[allow(irrefutable_let_patterns)]
            let GetResultPayload::Stream(body) = std::mem::replace(&mut result.payload, empty()) else {
                unreachable!("InMemory streams")
            };
            let body: Vec<u8> = body.map(|c| c.unwrap().to_vec()).concat().await;
            result.payload = match self.fault {
                Fault::BreakAfter(n, pause) if n < body.len() => {
                    let sent = Bytes::from(body[..n].to_vec());
                    let broken = async move {
                        tokio::time::sleep(pause).await;
                        Err(object_store::Error::Generic { store: "Faulty", source: "connection reset".into() })
                    };
                    GetResultPayload::Stream(stream::iter([Ok(sent)]).chain(stream::once(broken)).boxed())
                }
                Fault::BreakAfter(..) => GetResultPayload::Stream(stream::iter([Ok(Bytes::from(body))]).boxed()),
                Fault::Stall => GetResultPayload::Stream(stream::pending().boxed()),
            };
            Ok(result)
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    fn empty() -> GetResultPayload {
        GetResultPayload::Stream(stream::empty().boxed())
    }

    /// A source over an object of `len` bytes in a store with `fault`.
    fn faulty(len: usize, fault: Fault, limits: TransferLimits, retry: RetryPolicy) -> (Arc<Faulty>, CloudSource) {
        let store = Arc::new(Faulty { inner: InMemory::new(), fault, gets: AtomicU32::new(0) });
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let path = Path::from("o");
        block_on(store.put(&path, PutPayload::from(data))).unwrap().unwrap();
        let source = CloudSource::open(store.clone(), path, "mem://o".into(), limits).unwrap().with_retry(retry);
        (store, source)
    }

    #[test]
    fn a_read_that_keeps_moving_outlives_the_retry_time_limit() {
        // Every body breaks after 1.5 MiB and 60 ms: six requests for 8 MiB
        // take longer than give_up_after, yet each brought progress.
        let fault = Fault::BreakAfter(3 << 19, Duration::from_millis(60));
        let retry =
            RetryPolicy { attempts: 2, give_up_after: Some(Duration::from_millis(200)), ..RetryPolicy::default() };
        let (store, source) = faulty(8 << 20, fault, TransferLimits::default(), retry);
        let mut buf = vec![0u8; 8 << 20];
        let started = Instant::now();
        source.read_exact_at(0, &mut buf).unwrap();
        assert!(started.elapsed() > Duration::from_millis(200));
        assert!(buf.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        assert_eq!(store.gets.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn a_stalled_read_runs_out_of_attempts_or_time() {
        let limits = TransferLimits { min_rate: 1, rate_window: Duration::from_millis(30), deadline: None };
        let retry = RetryPolicy {
            attempts: 3,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
            give_up_after: None,
        };
        let (store, source) = faulty(4096, Fault::Stall, limits, retry);
        let err = source.read_exact_at(100, &mut [0u8; 10]).unwrap_err();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(err.to_string().contains("gave up after 3 failed attempts"), "{err}");
        assert!(err.to_string().contains("mem://o (bytes 100-109)"), "{err}");
        assert_eq!(store.gets.load(Ordering::Relaxed), 3);
        // Without an attempt limit, give_up_after ends it.
        let retry = RetryPolicy { attempts: 1000, give_up_after: Some(Duration::from_millis(150)), ..retry };
        let (_, source) = faulty(4096, Fault::Stall, limits, retry);
        let started = Instant::now();
        let err = source.read_exact_at(0, &mut [0u8; 10]).unwrap_err();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        // A break without progress is final: object_store already retried it.
        let fault = Fault::BreakAfter(10, Duration::ZERO);
        let (store, source) = faulty(4096, fault, TransferLimits::default(), RetryPolicy::default());
        assert!(source.read_exact_at(0, &mut [0u8; 100]).is_err());
        assert_eq!(store.gets.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn chunks_land_across_buffers() {
        let (mut a, mut b, mut c) = ([0u8; 3], [0u8; 2], [0u8; 4]);
        let mut bufs: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        copy_into(&mut bufs, 0, &[1, 2]);
        copy_into(&mut bufs, 2, &[3, 4, 5, 6]);
        copy_into(&mut bufs, 6, &[7, 8, 9]);
        assert_eq!((a, b, c), ([1, 2, 3], [4, 5], [6, 7, 8, 9]));
    }
}
