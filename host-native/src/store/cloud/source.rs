//! A [`RangeSource`] over one object of an `object_store` store.

use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::describe::{transient, unsatisfiable};
use super::{block_on, store_error};
use crate::error::{Error, Result, StoreErrorKind};
use crate::source::{RangeSource, TransferLimits, check_range};
use crate::store::retry::{Attempt, RetryPolicy, Target, retry};

/// Bytes an attempt must have brought in for its failure (a broken body,
/// a stall) to be resumed at once with a fresh request instead of counting
/// as a failed attempt, as for HTTP.
const RESUMABLE_PROGRESS: u64 = 1 << 20;

/// Bytes the opening request keeps: the file header and (usually) the
/// whole index, so opening a file costs one request (as for HTTP).
pub const PREFIX: u64 = 1 << 20;

/// A response body.
type Body = BoxStream<'static, object_store::Result<Bytes>>;

/// How a [`CloudSource`] reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct CloudReadOptions {
    /// Rate and deadline limits of every request, the opening one included.
    pub limits: TransferLimits,
    /// How failed, broken and stalled requests are retried (the store
    /// itself must not retry: see [`CloudSource`]).
    pub retry: RetryPolicy,
    /// The caller will read most of the object (a load, a copy): the
    /// opening request asks for all of it, keeps its first [`PREFIX`]
    /// bytes, and its body goes on into the first read that starts where
    /// the prefix ends, so a load with N readers makes N requests, as N
    /// ranged `curl`s do. Off, the opening request asks for [`PREFIX`]
    /// bytes only, so inspecting a file transfers no more than that.
    pub read_all: bool,
}

/// One object of a cloud store, read with ranged `GET`s pinned to the ETag
/// it had when opened (`If-Match`), or, from a store that gives none, to
/// its last-modified date, and to its size always: a replaced object fails
/// the read with an [`Error::Store`] of kind `Changed` naming the object,
/// the range and what changed, instead of mixing two versions.
///
/// Opening it is one ranged `GET` (no `HEAD`): its first [`PREFIX`] bytes
/// are kept and serve reads of the header and index; with
/// [`CloudReadOptions::read_all`] the rest of that response is parked and
/// continues into the read that needs it next.
///
/// Retries follow the shared [`RetryPolicy`], applied here and not by
/// `object_store` (give the store no retries of its own: its resumption of
/// broken bodies waits longer after every break and never forgets). A
/// request that fails for the moment (a connection error, a timeout, 5xx,
/// 408, 429) is a failed attempt; a 4xx, a missing object or a changed
/// ETag ends the read. A body that broke, or fell below
/// [`TransferLimits::min_rate`] over a window, is asked for again for the
/// bytes still missing. Such a failure after at
/// least 1 MiB of progress is resumed at once and starts the policy's
/// counts afresh (a slow but moving transfer is never given up on); one
/// without progress is a failed attempt (a stalled transfer runs out of
/// attempts or of `give_up_after`). [`TransferLimits::deadline`], when set,
/// bounds each read as a whole, and the opening.
pub struct CloudSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    name: String,
    len: u64,
    etag: Option<String>,
    /// The last-modified date at opening (RFC 3339), compared when the
    /// store gave no ETag.
    last_modified: Option<String>,
    limits: TransferLimits,
    retry: RetryPolicy,
    /// The object's first bytes, from the opening request.
    prefix: Vec<u8>,
    /// With [`CloudReadOptions::read_all`]: the rest of the opening response.
    parked: Mutex<Option<Parked>>,
}

/// An opening response read as far as the end of the prefix.
struct Parked {
    /// The offset of its next byte.
    at: u64,
    /// Bytes of the last chunk beyond the prefix, not yet delivered.
    leftover: Option<Bytes>,
    body: Body,
}

/// What the opening request learnt.
struct Opened {
    len: u64,
    etag: Option<String>,
    last_modified: Option<String>,
    prefix: Vec<u8>,
    parked: Option<Parked>,
}

/// A deadline for one read or the opening: its length, and when it ends.
type Deadline = Option<(Duration, Option<Instant>)>;

impl CloudSource {
    /// Opens `path` in `store` with one ranged `GET` (see [`CloudReadOptions`]).
    /// `name` is used in messages.
    pub fn open(store: Arc<dyn ObjectStore>, path: Path, name: String, options: &CloudReadOptions) -> Result<Self> {
        let mut this = Self {
            store,
            path,
            name,
            len: 0,
            etag: None,
            last_modified: None,
            limits: options.limits,
            retry: options.retry,
            prefix: Vec::new(),
            parked: Mutex::new(None),
        };
        let deadline = this.deadline();
        let target = Target { location: &this.name, range: None };
        let opened = retry(&this.retry, target, || this.run(deadline, None, this.probe(options.read_all)))?;
        this.len = opened.len;
        this.etag = opened.etag;
        this.last_modified = opened.last_modified;
        this.prefix = opened.prefix;
        this.parked = Mutex::new(opened.parked);
        Ok(this)
    }

    /// The object's ETag when it was opened, if the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// The deadline of a read (or the opening) that starts now.
    fn deadline(&self) -> Deadline {
        self.limits.deadline.map(|d| (d, Instant::now().checked_add(d)))
    }

    /// Runs one attempt to completion within `deadline` (a failure naming
    /// `range` when it passes).
    fn run<T>(
        &self,
        deadline: Deadline,
        range: Option<(u64, u64)>,
        attempt: impl Future<Output = Attempt<T>>,
    ) -> Attempt<T> {
        let outcome = match deadline {
            Some((limit, at)) => {
                let left = at.map_or(limit, |at| at.saturating_duration_since(Instant::now()));
                // The timer is made inside the runtime (tokio's needs one).
                block_on(async move { tokio::time::timeout(left, attempt).await })
                    .map(|r| r.unwrap_or_else(|_| Attempt::Final(deadline_error(&self.name, range, limit))))
            }
            None => block_on(attempt),
        };
        outcome.unwrap_or_else(Attempt::Final)
    }

    /// One attempt at the opening request: bytes `0..PREFIX`, or all of
    /// the object with `read_all`. The prefix is read here (paced as any
    /// read); the rest is parked.
    async fn probe(&self, read_all: bool) -> Attempt<Opened> {
        let range = if read_all { GetRange::Offset(0) } else { GetRange::Bounded(0..PREFIX) };
        let options = GetOptions { range: Some(range), ..Default::default() };
        let result = match self.store.get_opts(&self.path, options).await {
            Ok(result) => result,
            Err(e) if unsatisfiable(&e) => return self.probe_empty(e).await,
            Err(e) => {
                let again = transient(&e);
                return failed(store_error(&self.name, None, e), again);
            }
        };
        let (len, etag, end) = (result.meta.size, result.meta.e_tag.clone(), result.range.end);
        let last_modified = Some(result.meta.last_modified.to_rfc3339());
        if result.range.start != 0 || end > len {
            let why = "the store returned a different range";
            return Attempt::Final(self.fail(0, PREFIX.min(len), io::ErrorKind::InvalidData, why));
        }
        let mut prefix = vec![0u8; end.min(PREFIX) as usize];
        let want = prefix.len() as u64;
        let (mut body, mut leftover, mut done) = (result.into_stream(), None, 0);
        match self.receive(&mut body, &mut leftover, 0, want, &mut done, &mut [&mut prefix]).await {
            Attempt::Ok(()) => {}
            // At most a MiB: asked for again whole.
            Attempt::Retry(e) | Attempt::Resumable(e) => return Attempt::Retry(e),
            Attempt::Final(e) => return Attempt::Final(e),
        }
        let parked = (end > want).then_some(Parked { at: want, leftover, body });
        Attempt::Ok(Opened { len, etag, last_modified, prefix, parked })
    }

    /// The opening of an object whose ranged `GET` was refused as
    /// unsatisfiable (`failed`): an empty object, if a `HEAD` says so.
    async fn probe_empty(&self, failed: object_store::Error) -> Attempt<Opened> {
        let head = GetOptions { head: true, ..Default::default() };
        match self.store.get_opts(&self.path, head).await.map(|r| r.meta) {
            Ok(meta) if meta.size == 0 => {
                let last_modified = Some(meta.last_modified.to_rfc3339());
                Attempt::Ok(Opened { len: 0, etag: meta.e_tag, last_modified, prefix: Vec::new(), parked: None })
            }
            _ => Attempt::Final(store_error(&self.name, None, failed)),
        }
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
        let result = match self.store.get_opts(&self.path, options).await {
            Ok(result) => result,
            Err(e) => {
                let again = transient(&e);
                return failed(store_error(&self.name, Some((start, total - began)), e), again);
            }
        };
        if let Some(why) = self.changed(&result.meta) {
            return Attempt::Final(Error::store(&self.name, Some(start..offset + total), StoreErrorKind::Changed, why));
        }
        let (mut body, mut leftover) = (result.into_stream(), None);
        let outcome = self.receive(&mut body, &mut leftover, offset, total, done, bufs).await;
        if matches!(outcome, Attempt::Ok(())) && leftover.is_some() {
            let why = "the store sent more bytes than asked";
            return Attempt::Final(self.fail(start, total - began, io::ErrorKind::InvalidData, why));
        }
        outcome
    }

    /// Reads `body` (whose next byte is at `offset + *done`, after the
    /// bytes in `*leftover`) into `bufs` (consecutive, `total` bytes from
    /// `offset`) until they are full, `*done` advanced by what arrived; the
    /// part of a chunk past `total` is left in `*leftover`. The body is
    /// paced: a window below the minimum rate ends the attempt.
    async fn receive(
        &self,
        body: &mut Body,
        leftover: &mut Option<Bytes>,
        offset: u64,
        total: u64,
        done: &mut u64,
        bufs: &mut [&mut [u8]],
    ) -> Attempt<()> {
        let began = *done;
        let window = self.limits.rate_window.max(Duration::from_millis(1));
        let (mut window_start, mut window_bytes) = (Instant::now(), 0u64);
        // A failure after useful progress is resumed; one without is a failed attempt.
        let broke = |done: u64, e: Error, or_else: fn(Error) -> Attempt<()>| match done - began {
            n if n >= RESUMABLE_PROGRESS => Attempt::Resumable(e),
            _ => or_else(e),
        };
        while *done < total {
            let chunk = match leftover.take() {
                Some(chunk) => chunk,
                None => match next_chunk(body, window, self.limits.min_rate).await {
                    Some(Ok(Some(chunk))) => chunk,
                    Some(Ok(None)) => {
                        let e = self.too_slow(offset + *done, offset + total, window);
                        return broke(*done, e, Attempt::Retry);
                    }
                    // A broken body: the bytes still missing are asked for again.
                    Some(Err(e)) => {
                        let e = store_error(&self.name, Some((offset + *done, total - *done)), e);
                        return broke(*done, e, Attempt::Retry);
                    }
                    None => {
                        let why = "the object ended early";
                        let kind = io::ErrorKind::UnexpectedEof;
                        return Attempt::Final(self.fail(offset + *done, total - *done, kind, why));
                    }
                },
            };
            // At most `total - *done`, which is a usize as `bufs` are.
            let n = (chunk.len() as u64).min(total - *done) as usize;
            copy_into(bufs, *done, &chunk[..n]);
            if n < chunk.len() {
                *leftover = Some(chunk.slice(n..));
            }
            *done += n as u64;
            window_bytes += n as u64;
            if window_start.elapsed() >= window {
                let floor = self.limits.min_rate as f64 * window_start.elapsed().as_secs_f64();
                if (window_bytes as f64) < floor && *done < total {
                    return broke(*done, self.too_slow(offset + *done, offset + total, window), Attempt::Retry);
                }
                (window_start, window_bytes) = (Instant::now(), 0);
            }
        }
        Attempt::Ok(())
    }

    /// Fills `bufs` (consecutive bytes from `offset`, `total` in all) as
    /// far as the prefix and the parked opening response reach, if that
    /// response continues exactly where this read needs it; advances
    /// `*done`. A failure only stops early: the caller fetches whatever is
    /// missing.
    fn continue_opening(&self, offset: u64, bufs: &mut [&mut [u8]], total: u64, done: &mut u64, deadline: Deadline) {
        let at = self.prefix.len() as u64;
        if !(offset <= at && at < offset + total) {
            return;
        }
        // `offset` ≤ the prefix's length, which is a usize.
        let cached = &self.prefix[offset as usize..];
        copy_into(bufs, 0, cached);
        *done = cached.len() as u64;
        let Some(mut parked) = self.parked.lock().ok().and_then(|mut p| p.take()) else { return };
        if parked.at != at {
            return;
        }
        let range = Some((offset, total));
        let receive = self.receive(&mut parked.body, &mut parked.leftover, offset, total, done, bufs);
        // Whatever arrived stays in `bufs`; the rest is asked for afresh.
        let _ = self.run(deadline, range, receive);
    }

    /// What tells that a response comes from another object than the one
    /// opened, beyond the `If-Match` the store checks: another size; without
    /// an ETag, another last-modified date. `None` when nothing does.
    fn changed(&self, meta: &object_store::ObjectMeta) -> Option<String> {
        if meta.size != self.len {
            let (was, now) = (self.len, meta.size);
            return Some(format!(
                "the object changed during the load (it was {was} bytes long, is now {now}); open it again"
            ));
        }
        let now = meta.last_modified.to_rfc3339();
        match (&self.etag, &self.last_modified) {
            (None, Some(was)) if *was != now => Some(format!(
                "the object changed during the load (the store gives no ETag; last modified {was}, now {now}); \
                 open it again"
            )),
            _ => None,
        }
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
        if let Some(cached) = usize::try_from(offset).ok().and_then(|start| self.prefix.get(start..))
            && cached.len() as u64 >= total
        {
            copy_into(bufs, 0, cached);
            return Ok(());
        }
        let deadline = self.deadline();
        let mut done = 0u64;
        self.continue_opening(offset, bufs, total, &mut done, deadline);
        if done == total {
            return Ok(());
        }
        let target = Target { location: &self.name, range: Some(offset..offset + total) };
        retry(&self.retry, target, || {
            self.run(deadline, Some((offset, total)), self.attempt(offset, total, &mut done, bufs))
        })
    }
}

/// The next chunk of `stream`; `Ok(None)` when nothing came for a whole
/// `window` while a minimum rate is set (a stall: ask again).
async fn next_chunk(stream: &mut Body, window: Duration, min_rate: u64) -> Option<object_store::Result<Option<Bytes>>> {
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

/// A failed request: another attempt if `again`, else the end.
fn failed<T>(e: Error, again: bool) -> Attempt<T> {
    if again { Attempt::Retry(e) } else { Attempt::Final(e) }
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
        /// Ranged bodies served whole before the faults begin.
        clean: u32,
        gets: AtomicU32,
        /// Answers without an ETag (as some stores and emulators do).
        no_etag: bool,
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
            if self.no_etag {
                result.meta.e_tag = None;
            }
            if !ranged {
                return Ok(result);
            }
            if self.gets.fetch_add(1, Ordering::Relaxed) < self.clean {
                return Ok(result);
            }
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

    /// The bytes of the test objects.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// A store holding an object of `len` bytes at "o", whose ranged
    /// bodies after the first `clean` have `fault`.
    fn store(len: usize, fault: Fault, clean: u32) -> Arc<Faulty> {
        let store = Arc::new(Faulty { inner: InMemory::new(), fault, clean, gets: AtomicU32::new(0), no_etag: false });
        block_on(store.put(&Path::from("o"), PutPayload::from(pattern(len)))).unwrap().unwrap();
        store
    }

    fn open(store: &Arc<Faulty>, options: CloudReadOptions) -> Result<CloudSource> {
        CloudSource::open(store.clone(), Path::from("o"), "mem://o".into(), &options)
    }

    /// A source over an object of `len` bytes in a store with `fault`,
    /// opened (for the prefix only) without one.
    fn faulty(len: usize, fault: Fault, limits: TransferLimits, retry: RetryPolicy) -> (Arc<Faulty>, CloudSource) {
        let store = store(len, fault, 1);
        let source = open(&store, CloudReadOptions { limits, retry, read_all: false }).unwrap();
        (store, source)
    }

    const P: u64 = PREFIX;

    #[test]
    fn a_read_that_keeps_moving_outlives_the_retry_time_limit() {
        // Every body breaks after 1.5 MiB and 60 ms: five requests for the
        // 7 MiB past the prefix take longer than give_up_after, yet each
        // brought progress.
        let fault = Fault::BreakAfter(3 << 19, Duration::from_millis(60));
        let retry =
            RetryPolicy { attempts: 2, give_up_after: Some(Duration::from_millis(200)), ..RetryPolicy::default() };
        let (store, source) = faulty(8 << 20, fault, TransferLimits::default(), retry);
        let mut buf = vec![0u8; 8 << 20];
        let started = Instant::now();
        source.read_exact_at(0, &mut buf).unwrap();
        assert!(started.elapsed() > Duration::from_millis(200));
        assert_eq!(buf, pattern(8 << 20));
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 5);
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
        let len = (P as usize) + 4096;
        let (store, source) = faulty(len, Fault::Stall, limits, retry);
        let err = source.read_exact_at(P + 100, &mut [0u8; 10]).unwrap_err();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(err.to_string().contains("gave up after 3 failed attempts"), "{err}");
        assert!(err.to_string().contains(&format!("mem://o (bytes {}-{})", P + 100, P + 109)), "{err}");
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 3);
        // Without an attempt limit, give_up_after ends it.
        let retry = RetryPolicy { attempts: 1000, give_up_after: Some(Duration::from_millis(150)), ..retry };
        let (_, source) = faulty(len, Fault::Stall, limits, retry);
        let started = Instant::now();
        let err = source.read_exact_at(P, &mut [0u8; 10]).unwrap_err();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        // A break without progress is a failed attempt.
        let fault = Fault::BreakAfter(10, Duration::ZERO);
        let retry = RetryPolicy { attempts: 3, give_up_after: None, ..retry };
        let (store, source) = faulty(len, fault, TransferLimits::default(), retry);
        let err = source.read_exact_at(P, &mut [0u8; 100]).unwrap_err();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::RetriesExhausted), "{err}");
        assert!(err.to_string().contains("connection reset"), "{err}");
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 3);
    }

    #[test]
    fn opening_is_one_request_that_a_whole_read_continues() {
        let len = 3 << 20;
        let store = store(len, Fault::BreakAfter(usize::MAX, Duration::ZERO), 0);
        let source = open(&store, CloudReadOptions { read_all: true, ..CloudReadOptions::default() }).unwrap();
        assert_eq!((source.len(), store.gets.load(Ordering::Relaxed)), (len as u64, 1));
        // The header comes from the prefix, the rest from the same response.
        let mut header = [0u8; 73];
        source.read_exact_at(0, &mut header).unwrap();
        let mut rest = vec![0u8; len - 1000];
        source.read_exact_at(1000, &mut rest).unwrap();
        assert_eq!(store.gets.load(Ordering::Relaxed), 1);
        assert_eq!((&header[..], &rest[..]), (&pattern(len)[..73], &pattern(len)[1000..]));
        // The parked response is used once; a later read asks afresh.
        source.read_exact_at(1000, &mut rest).unwrap();
        assert_eq!(store.gets.load(Ordering::Relaxed), 2);
        // Without read_all the opening asks for the prefix only.
        let source = open(&store, CloudReadOptions::default()).unwrap();
        assert!(source.parked.lock().unwrap().is_none());
        source.read_exact_at(1000, &mut rest).unwrap();
        assert_eq!(store.gets.load(Ordering::Relaxed), 4);
        assert_eq!(&rest[..], &pattern(len)[1000..]);
    }

    #[test]
    fn a_broken_opening_response_is_resumed_for_what_is_missing() {
        // Every body breaks after 1.5 MiB: the opening keeps 1 MiB, parks
        // the rest, and the read takes what the parked body still had.
        let len = 4 << 20;
        let store = store(len, Fault::BreakAfter(3 << 19, Duration::ZERO), 0);
        let source = open(&store, CloudReadOptions { read_all: true, ..CloudReadOptions::default() }).unwrap();
        let mut all = vec![0u8; len];
        source.read_exact_at(0, &mut all).unwrap();
        assert_eq!(all, pattern(len));
        // 2.5 MiB were missing after the opening: two more requests.
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 2);
    }

    #[test]
    fn a_stalled_opening_fails_in_bounded_time() {
        let limits = TransferLimits { min_rate: 1, rate_window: Duration::from_millis(30), deadline: None };
        let retry = RetryPolicy { attempts: 2, backoff: Duration::from_millis(1), ..RetryPolicy::default() };
        let store = store(4096, Fault::Stall, 0);
        let started = Instant::now();
        let err = open(&store, CloudReadOptions { limits, retry, read_all: true }).err().unwrap();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(store.gets.load(Ordering::Relaxed), 2);
        // A deadline bounds the opening too.
        let limits = TransferLimits { min_rate: 0, deadline: Some(Duration::from_millis(50)), ..limits };
        let err = open(&store, CloudReadOptions { limits, retry, read_all: false }).err().unwrap();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(err.to_string().contains("deadline"), "{err}");
    }

    #[test]
    fn an_empty_object_opens_empty() {
        let store = store(0, Fault::BreakAfter(usize::MAX, Duration::ZERO), 0);
        for read_all in [false, true] {
            let source = open(&store, CloudReadOptions { read_all, ..CloudReadOptions::default() }).unwrap();
            assert_eq!(source.len(), 0);
            source.read_exact_at(0, &mut []).unwrap();
            assert!(source.read_exact_at(0, &mut [0u8; 1]).is_err());
        }
        let missing =
            CloudSource::open(store.clone(), Path::from("nope"), "mem://nope".into(), &CloudReadOptions::default());
        assert_eq!(missing.err().unwrap().store_kind(), Some(StoreErrorKind::NotFound));
    }

    #[test]
    fn without_an_etag_the_date_and_the_size_are_pinned() {
        let len = P as usize + 4096;
        let put = |store: &Faulty, len| block_on(store.inner.put(&Path::from("o"), PutPayload::from(pattern(len))));
        let clean = Fault::BreakAfter(usize::MAX, Duration::ZERO);
        let store =
            Arc::new(Faulty { inner: InMemory::new(), fault: clean, clean: 0, gets: AtomicU32::new(0), no_etag: true });
        // Replaced by an object of the same size (a new date), and by one a byte shorter.
        for (replacement, what) in [(len, "the store gives no ETag; last modified"), (len - 1, "bytes long, is now")] {
            put(&store, len).unwrap().unwrap();
            let source = open(&store, CloudReadOptions::default()).unwrap();
            assert!(source.etag().is_none());
            std::thread::sleep(Duration::from_millis(2));
            put(&store, replacement).unwrap().unwrap();
            let err = source.read_exact_at(P, &mut [0u8; 10]).unwrap_err();
            assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
            assert!(err.to_string().contains("mem://o") && err.to_string().contains(what), "{err}");
        }
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
