//! A [`RangeSource`] over one object of an `object_store` store: the
//! `object_store` transport of the ranged-read engine
//! ([`crate::store::ranged`]).

use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::describe::{transient, unsatisfiable};
use super::{block_on, refused, store_error};
use crate::error::{Error, Result};
use crate::source::{RangeSource, TransferLimits};
pub use crate::store::ranged::PREFIX;
use crate::store::ranged::{self, Ask, Head, Ranged, Response, Span, Transport, Validators};
use crate::store::retry::{Attempt, Pace, RetryPolicy};
use crate::store::tls::Trust;

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
    ranged: Ranged<ObjectClient>,
}

/// Sends the ranged `GET`s of one object through `object_store`.
struct ObjectClient {
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// What the store's requests verify servers with, where known (to word
    /// a refused certificate).
    trust: Option<Trust>,
}

/// A response body, and the pace it is read at.
struct Body {
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    /// Bytes of the last chunk past what was asked for, not yet delivered.
    leftover: Option<Bytes>,
    pace: Pace,
}

impl CloudSource {
    /// Opens `path` in `store` with one ranged `GET` (see [`CloudReadOptions`]).
    /// `name` is used in messages.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        path: Path,
        name: String,
        options: &CloudReadOptions,
    ) -> Result<Self> {
        Self::with_client(ObjectClient { store, path, trust: None }, name, options)
    }

    /// [`Self::open`] for a store whose requests verify servers with
    /// `trust`: a certificate TLS refuses ends the read at once, worded as
    /// the HTTP source words it.
    pub(super) fn open_trusting(
        store: Arc<dyn ObjectStore>,
        path: Path,
        name: String,
        options: &CloudReadOptions,
        trust: Trust,
    ) -> Result<Self> {
        Self::with_client(ObjectClient { store, path, trust: Some(trust) }, name, options)
    }

    fn with_client(client: ObjectClient, name: String, options: &CloudReadOptions) -> Result<Self> {
        Ok(Self {
            ranged: Ranged::open(client, name, options.limits, options.retry, options.read_all)?,
        })
    }

    /// The object's ETag when it was opened, if the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.ranged.etag()
    }
}

impl ObjectClient {
    /// Runs `future` to completion, within what is left of `pace`'s
    /// deadline (a failure naming `span` when it passes).
    fn within<T>(
        &self,
        pace: &Pace,
        span: &Span<'_>,
        future: impl Future<Output = Attempt<T>>,
    ) -> Attempt<T> {
        let outcome = match pace.time_left() {
            // The timer is made inside the runtime (tokio's needs one).
            Some(left) => block_on(async move { tokio::time::timeout(left, future).await })
                .map(|r| r.unwrap_or_else(|_| ranged::broken(span, pace.deadline_error(), pace))),
            None => block_on(future),
        };
        outcome.unwrap_or_else(Attempt::Final)
    }

    /// One ranged `GET` for `ask` (the opening of an object whose ranged
    /// `GET` is refused as unsatisfiable is the opening of an empty object
    /// if a `HEAD` says so).
    async fn request(&self, ask: Ask<'_>, span: &Span<'_>, pace: Pace) -> Attempt<Response<Body>> {
        let (options, range) = match ask {
            Ask::Opening { all } => {
                let range = if all { GetRange::Offset(0) } else { GetRange::Bounded(0..PREFIX) };
                (GetOptions { range: Some(range), ..Default::default() }, None)
            }
            Ask::Range { range, pinned } => {
                let options = GetOptions {
                    range: Some(GetRange::Bounded(range.clone())),
                    if_match: pinned.etag.clone(),
                    ..Default::default()
                };
                (options, Some((span.start, span.len)))
            }
        };
        let opening = range.is_none();
        let result = match self.store.get_opts(&self.path, options).await {
            Ok(result) => result,
            Err(e) if opening && unsatisfiable(&e) => return self.empty(e, span, pace).await,
            Err(e) => {
                if let Some(refused) =
                    self.trust.as_ref().and_then(|t| refused(span.name, range, &e, t))
                {
                    return Attempt::Final(refused);
                }
                let again = transient(&e);
                return failed(store_error(span.name, range, e), again);
            }
        };
        let head = Head {
            range: Some((result.range.clone(), result.meta.size)),
            validators: Validators {
                etag: result.meta.e_tag.clone(),
                last_modified: Some(result.meta.last_modified.to_rfc3339()),
            },
        };
        Attempt::Ok(Response {
            head,
            body: Body { stream: result.into_stream(), leftover: None, pace },
        })
    }

    /// The opening of an object whose ranged `GET` was refused as
    /// unsatisfiable (`failed`): an empty object, if a `HEAD` says so.
    async fn empty(
        &self,
        failed: object_store::Error,
        span: &Span<'_>,
        pace: Pace,
    ) -> Attempt<Response<Body>> {
        let head = GetOptions { head: true, ..Default::default() };
        match self.store.get_opts(&self.path, head).await.map(|r| r.meta) {
            Ok(meta) if meta.size == 0 => {
                let validators = Validators {
                    etag: meta.e_tag,
                    last_modified: Some(meta.last_modified.to_rfc3339()),
                };
                let head = Head { range: Some((0..0, 0)), validators };
                let body =
                    Body { stream: futures_util::stream::empty().boxed(), leftover: None, pace };
                Attempt::Ok(Response { head, body })
            }
            _ => Attempt::Final(store_error(span.name, None, failed)),
        }
    }

    /// Reads `body` into `bufs` from `*done` up to `stop` (see
    /// [`Transport::fill`]); the part of a chunk past `stop` is kept in the
    /// body. A stall (nothing for a rate window) or a trickle ends the
    /// attempt, as the pace says.
    async fn receive(
        &self,
        body: &mut Body,
        bufs: &mut [&mut [u8]],
        done: &mut u64,
        stop: u64,
        span: &Span<'_>,
    ) -> Attempt<()> {
        while *done < stop {
            let chunk = match body.leftover.take() {
                Some(chunk) => chunk,
                None => {
                    let next = match body.pace.wait() {
                        Some(wait) => match tokio::time::timeout(wait, body.stream.next()).await {
                            Ok(next) => next,
                            Err(_) => match body.pace.progress(0) {
                                Ok(()) => continue,
                                Err(e) => return ranged::broken(span, e, &body.pace),
                            },
                        },
                        None => body.stream.next().await,
                    };
                    match next {
                        Some(Ok(chunk)) => chunk,
                        // A broken body: the bytes still missing are asked for again.
                        Some(Err(e)) => {
                            return Attempt::Retry(store_error(
                                span.name,
                                Some((span.start, span.len)),
                                e,
                            ));
                        }
                        None => {
                            let why = "the object ended early";
                            return Attempt::Final(span.io(io::ErrorKind::UnexpectedEof, why));
                        }
                    }
                }
            };
            // At most `stop - *done`, which is a usize as `bufs` are.
            let n = (chunk.len() as u64).min(stop - *done) as usize;
            ranged::copy_into(bufs, *done, &chunk[..n]);
            if n < chunk.len() {
                body.leftover = Some(chunk.slice(n..));
            }
            *done += n as u64;
            // A slow last window does not undo a finished read.
            if let Err(e) = body.pace.progress(n)
                && *done < stop
            {
                return ranged::broken(span, e, &body.pace);
            }
        }
        Attempt::Ok(())
    }
}

impl Transport for ObjectClient {
    type Body = Body;

    const WHO: &'static str = "store";

    const NO_ETAG: &'static str = "the store gives no ETag; last modified";

    fn get(&self, ask: Ask<'_>, span: &Span<'_>, pace: Pace) -> Attempt<Response<Body>> {
        let deadline = pace.clone();
        self.within(&deadline, span, self.request(ask, span, pace))
    }

    fn fill(
        &self,
        body: &mut Body,
        bufs: &mut [&mut [u8]],
        done: &mut u64,
        stop: u64,
        span: &Span<'_>,
    ) -> Attempt<()> {
        match block_on(self.receive(body, bufs, done, stop, span)) {
            Ok(outcome) => outcome,
            Err(e) => Attempt::Final(e),
        }
    }

    fn repace(body: &mut Body, pace: Pace) {
        body.pace = pace;
    }

    fn overran(body: &Body) -> bool {
        body.leftover.is_some()
    }
}

/// A failed request: another attempt if `again`, else the end.
fn failed<T>(e: Error, again: bool) -> Attempt<T> {
    if again { Attempt::Retry(e) } else { Attempt::Final(e) }
}

impl RangeSource for CloudSource {
    fn len(&self) -> u64 {
        self.ranged.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.ranged.read(offset, &mut [buf])
    }

    fn name(&self) -> &str {
        self.ranged.name()
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        self.ranged.read(offset, bufs)
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
        CopyOptions, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStoreExt,
        PutMultipartOptions, PutOptions, PutPayload, PutResult,
    };

    use super::*;
    use crate::error::StoreErrorKind;
    use crate::store::ranged::copy_into;
    use std::time::{Duration, Instant};

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
        async fn put_opts(
            &self,
            p: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.inner.put_opts(p, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            p: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(p, opts).await
        }
        async fn get_opts(
            &self,
            p: &Path,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
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
            let GetResultPayload::Stream(body) = std::mem::replace(&mut result.payload, empty())
            else {
                unreachable!("InMemory streams")
            };
            let body: Vec<u8> = body.map(|c| c.unwrap().to_vec()).concat().await;
            result.payload = match self.fault {
                Fault::BreakAfter(n, pause) if n < body.len() => {
                    let sent = Bytes::from(body[..n].to_vec());
                    let broken = async move {
                        tokio::time::sleep(pause).await;
                        Err(object_store::Error::Generic {
                            store: "Faulty",
                            source: "connection reset".into(),
                        })
                    };
                    GetResultPayload::Stream(
                        stream::iter([Ok(sent)]).chain(stream::once(broken)).boxed(),
                    )
                }
                Fault::BreakAfter(..) => {
                    GetResultPayload::Stream(stream::iter([Ok(Bytes::from(body))]).boxed())
                }
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
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: CopyOptions,
        ) -> object_store::Result<()> {
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
        let store = Arc::new(Faulty {
            inner: InMemory::new(),
            fault,
            clean,
            gets: AtomicU32::new(0),
            no_etag: false,
        });
        block_on(store.put(&Path::from("o"), PutPayload::from(pattern(len)))).unwrap().unwrap();
        store
    }

    fn open(store: &Arc<Faulty>, options: CloudReadOptions) -> Result<CloudSource> {
        CloudSource::open(store.clone(), Path::from("o"), "mem://o".into(), &options)
    }

    /// A source over an object of `len` bytes in a store with `fault`,
    /// opened (for the prefix only) without one.
    fn faulty(
        len: usize,
        fault: Fault,
        limits: TransferLimits,
        retry: RetryPolicy,
    ) -> (Arc<Faulty>, CloudSource) {
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
        let retry = RetryPolicy {
            attempts: 2,
            give_up_after: Some(Duration::from_millis(200)),
            ..RetryPolicy::default()
        };
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
        let limits =
            TransferLimits { min_rate: 1, rate_window: Duration::from_millis(30), deadline: None };
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
        assert!(
            err.to_string().contains(&format!("mem://o (bytes {}-{})", P + 100, P + 109)),
            "{err}"
        );
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 3);
        // Without an attempt limit, give_up_after ends it.
        let retry = RetryPolicy {
            attempts: 1000,
            give_up_after: Some(Duration::from_millis(150)),
            ..retry
        };
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
        let source =
            open(&store, CloudReadOptions { read_all: true, ..CloudReadOptions::default() })
                .unwrap();
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
        assert!(source.ranged.parked.lock().unwrap().is_none());
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
        let source =
            open(&store, CloudReadOptions { read_all: true, ..CloudReadOptions::default() })
                .unwrap();
        let mut all = vec![0u8; len];
        source.read_exact_at(0, &mut all).unwrap();
        assert_eq!(all, pattern(len));
        // 2.5 MiB were missing after the opening: two more requests.
        assert_eq!(store.gets.load(Ordering::Relaxed), 1 + 2);
    }

    #[test]
    fn a_stalled_opening_fails_in_bounded_time() {
        let limits =
            TransferLimits { min_rate: 1, rate_window: Duration::from_millis(30), deadline: None };
        let retry = RetryPolicy {
            attempts: 2,
            backoff: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        let store = store(4096, Fault::Stall, 0);
        let started = Instant::now();
        let err = open(&store, CloudReadOptions { limits, retry, read_all: true }).err().unwrap();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(store.gets.load(Ordering::Relaxed), 2);
        // A deadline bounds the opening too.
        let limits =
            TransferLimits { min_rate: 0, deadline: Some(Duration::from_millis(50)), ..limits };
        let err = open(&store, CloudReadOptions { limits, retry, read_all: false }).err().unwrap();
        assert_eq!(err.store_kind(), Some(StoreErrorKind::TimedOut), "{err}");
        assert!(err.to_string().contains("deadline"), "{err}");
    }

    #[test]
    fn an_empty_object_opens_empty() {
        let store = store(0, Fault::BreakAfter(usize::MAX, Duration::ZERO), 0);
        for read_all in [false, true] {
            let source =
                open(&store, CloudReadOptions { read_all, ..CloudReadOptions::default() }).unwrap();
            assert_eq!(source.len(), 0);
            source.read_exact_at(0, &mut []).unwrap();
            assert!(source.read_exact_at(0, &mut [0u8; 1]).is_err());
        }
        let missing = CloudSource::open(
            store.clone(),
            Path::from("nope"),
            "mem://nope".into(),
            &CloudReadOptions::default(),
        );
        assert_eq!(missing.err().unwrap().store_kind(), Some(StoreErrorKind::NotFound));
    }

    #[test]
    fn without_an_etag_the_date_and_the_size_are_pinned() {
        let len = P as usize + 4096;
        let put = |store: &Faulty, len| {
            block_on(store.inner.put(&Path::from("o"), PutPayload::from(pattern(len))))
        };
        let clean = Fault::BreakAfter(usize::MAX, Duration::ZERO);
        let store = Arc::new(Faulty {
            inner: InMemory::new(),
            fault: clean,
            clean: 0,
            gets: AtomicU32::new(0),
            no_etag: true,
        });
        // Replaced by an object of the same size (a new date), and by one a byte shorter.
        for (replacement, what) in
            [(len, "the store gives no ETag; last modified"), (len - 1, "bytes long, is now")]
        {
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
