//! HTTP(S) range reads: a [`RangeSource`] over a URL served with
//! `Accept-Ranges: bytes` (nginx, object stores, CDNs).
//!
//! Each read is one `Range` request on a pooled keep-alive connection, so
//! the reader's threads are concurrent range streams. Over plain `http://`
//! the bodies are read from the socket straight into the caller's buffers
//! (see `wire`); otherwise through ureq (TLS, proxies, redirects). Each
//! socket read has a timeout (a stall), each request a minimum average
//! rate over a window (a trickle) and, optionally, each read an overall
//! deadline ([`TransferLimits`]); a failed, short or too slow read
//! re-fetches only the bytes still missing, with exponential backoff, up to
//! a bounded number of attempts. A server that ignores `Range`, or an
//! object that changes during the load, is an error naming the URL and the
//! range: its ETag is pinned by the opening response, or, when the server
//! sends none, its `Last-Modified` date; its size is pinned always.
//!
//! `https://` servers are verified against the CAs that [`TlsOptions`]
//! and the environment name (see [`crate::store::tls`]); a refused certificate
//! ends the read at once, naming what was trusted.

mod wire;

use std::io::{self, Read};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ureq::ResponseExt;

use crate::error::{Error, Result, StoreErrorKind};
use crate::source::{RangeSource, TransferLimits};
pub use crate::store::retry::RetryPolicy;
use crate::store::retry::{Attempt, Pace, Paced, Target, deadline, retry, too_slow};
pub use crate::store::tls::TlsOptions;
use crate::store::tls::{Service, Trust, is_tls_failure};

/// Retry, timeout, request and TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// The caller will read most of the object (a load, a copy): the
    /// opening request asks for all of it, keeps its first [`PREFIX`]
    /// bytes, and its body goes on into the first read that crosses
    /// `PREFIX`, so a load costs one request fewer. Off (the default), the
    /// opening request asks for `PREFIX` bytes only, so inspecting a header
    /// transfers no more than that.
    pub read_all: bool,
    /// How failed requests are retried.
    pub retry: RetryPolicy,
    /// Longest wait for any single socket read or write (a stalled server).
    pub read_timeout: Duration,
    /// Longest wait to connect.
    pub connect_timeout: Duration,
    /// Minimum transfer rate of each request and deadline of each read
    /// (a trickling server), on top of `read_timeout`.
    pub limits: TransferLimits,
    /// Which certificate authorities `https://` servers must be signed by.
    pub tls: TlsOptions,
    /// An `Authorization` header for every request (a store's static
    /// bearer token); none by default.
    pub authorization: Option<Authorization>,
}

/// The value of an `Authorization` header. Never shown: its `Debug` says
/// only that it is there.
#[derive(Clone, PartialEq, Eq)]
pub struct Authorization(String);

impl Authorization {
    /// `Bearer <token>`; `None` for a token a header line cannot carry
    /// (empty, or with bytes other than visible ASCII).
    pub fn bearer(token: &str) -> Option<Self> {
        let visible = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        visible.then(|| Self(format!("Bearer {token}")))
    }

    pub(crate) fn value(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorization(..)")
    }
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            read_all: false,
            retry: RetryPolicy::default(),
            read_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            limits: TransferLimits::default(),
            tls: TlsOptions::default(),
            authorization: None,
        }
    }
}

/// A remote object read with HTTP range requests.
pub struct HttpSource {
    agent: ureq::Agent,
    url: String,
    name: String,
    len: u64,
    etag: Option<String>,
    /// `Last-Modified` of the opening response: what tells versions apart
    /// when the server sends no ETag.
    last_modified: Option<String>,
    /// The object's first bytes, fetched by the probe: the file header and
    /// (usually) the whole index, so opening a file costs one request.
    prefix: Vec<u8>,
    options: HttpOptions,
    /// What `https://` servers are verified against.
    trust: Trust,
    /// The direct client for range reads, where the URL allows it.
    wire: Option<wire::Wire>,
    /// Set once the server answered the direct client with a response it
    /// does not handle: everything goes through ureq from then on.
    wire_off: AtomicBool,
    /// With [`HttpOptions::read_all`]: the rest of the opening response.
    parked: Mutex<Option<Parked>>,
}

/// An opening response read as far as the end of the prefix (its next
/// byte is at the prefix's length).
struct Parked {
    /// The offset one past its last byte.
    end: u64,
    body: Paced<Box<dyn Read + Send>>,
}

/// What the opening request learnt.
struct Opened {
    len: u64,
    etag: Option<String>,
    last_modified: Option<String>,
    prefix: Vec<u8>,
    /// Answered by the URL itself, not after a redirect.
    direct: bool,
    parked: Option<Parked>,
}

/// What a range response says of itself.
struct Head {
    status: u16,
    etag: Option<String>,
    last_modified: Option<String>,
    /// `(start, end, total)` from `Content-Range`.
    content_range: Option<(u64, u64, u64)>,
}

impl Head {
    fn of_wire(resp: &wire::Response) -> Self {
        Self {
            status: resp.status,
            etag: resp.header("etag").map(str::to_string),
            last_modified: resp.header("last-modified").map(str::to_string),
            content_range: resp.header("content-range").and_then(content_range),
        }
    }

    fn of_ureq(resp: &ureq::http::Response<ureq::Body>) -> Self {
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
        Self {
            status: resp.status().as_u16(),
            etag: header("etag").map(str::to_string),
            last_modified: header("last-modified").map(str::to_string),
            content_range: header("content-range").and_then(content_range),
        }
    }
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource").field("name", &self.name).field("len", &self.len).finish()
    }
}

/// A broken response that delivered at least this much is resumed at once
/// without using up an attempt.
const RESUMABLE_PROGRESS: u64 = 1 << 20;

/// Bytes fetched (and kept) by the opening request.
pub const PREFIX: u64 = 1 << 20;

/// One agent per source: pooled keep-alive connections, a timeout on each
/// socket read and write (a stall) but none on a whole body (the caller
/// paces bodies, see [`TransferLimits`]). With a minimum rate, a response
/// head must arrive within a rate window (or the read timeout, if longer).
/// `https://` servers are verified against `trust`.
pub(crate) fn agent(options: &HttpOptions, trust: &Trust) -> ureq::Agent {
    let limits = &options.limits;
    let head = (limits.min_rate > 0).then(|| limits.rate_window.max(options.read_timeout));
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_recv_response(head)
        .timeout_per_read(Some(options.read_timeout))
        .timeout_per_write(Some(options.read_timeout))
        .timeout_connect(Some(options.connect_timeout))
        .max_idle_connections_per_host(64)
        .user_agent(concat!("tensorizer-rs/", env!("CARGO_PKG_VERSION")))
        .tls_config(trust.tls_config())
        .build()
        .new_agent()
}

/// Parses `bytes START-END/TOTAL`.
fn content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, end.trim().parse().ok()?, total.trim().parse().ok()?))
}

impl HttpSource {
    /// Opens `url`: one request for its first [`PREFIX`] bytes (or all of
    /// it, with [`HttpOptions::read_all`]) gives the length, the ETag, proof
    /// that the server honours `Range`, and the bytes a reader needs first
    /// (kept).
    pub fn open(url: &str, options: HttpOptions) -> Result<Self> {
        Self::open_named(url, url, options)
    }

    /// Opens `url` but names it `name` in every message (a presigned URL
    /// carries a signature that must not end up in logs).
    pub fn open_named(url: &str, name: &str, options: HttpOptions) -> Result<Self> {
        let secure = url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
        let trust = options.tls.resolve_for(Service::Http, secure, &crate::store::tls::process_env)?;
        Self::open_trusted(url, name, options, trust)
    }

    /// [`open_named`](Self::open_named) with the TLS trust already resolved.
    pub(crate) fn open_trusted(url: &str, name: &str, options: HttpOptions, trust: Trust) -> Result<Self> {
        let wire =
            wire::Wire::for_url(url, options.read_timeout, options.connect_timeout, options.authorization.as_ref());
        let until = deadline(&options.limits);
        let mut this = Self {
            agent: agent(&options, &trust),
            url: url.to_string(),
            name: name.to_string(),
            len: 0,
            etag: None,
            last_modified: None,
            prefix: Vec::new(),
            options,
            trust,
            wire,
            wire_off: AtomicBool::new(false),
            parked: Mutex::new(None),
        };
        let target = Target { location: &this.name, range: None };
        let opened = retry(&this.options.retry, target, || this.probe(until))?;
        this.len = opened.len;
        this.etag = opened.etag;
        this.last_modified = opened.last_modified;
        this.prefix = opened.prefix;
        this.parked = Mutex::new(opened.parked);
        if !opened.direct {
            this.wire = None;
        }
        Ok(this)
    }

    fn fail(&self, offset: u64, len: u64, why: impl std::fmt::Display) -> Error {
        self.fail_kind(offset, len, io::ErrorKind::Other, why)
    }

    /// A failure the caller can act on, naming the URL and the range.
    fn store_fail(&self, offset: u64, len: u64, kind: StoreErrorKind, why: impl std::fmt::Display) -> Error {
        Error::store(&self.name, Some(offset..offset.saturating_add(len.max(1))), kind, why)
    }

    fn fail_kind(&self, offset: u64, len: u64, kind: io::ErrorKind, why: impl std::fmt::Display) -> Error {
        Error::Io {
            file: self.name.clone(),
            offset,
            source: io::Error::new(kind, format!("range {offset}-{}: {why}", offset + len.max(1) - 1)),
        }
    }

    /// How an attempt that failed with `e` ends: final once the deadline
    /// has passed, else worth a retry (`resumable` after useful progress).
    fn broken<T>(&self, start: u64, span: u64, e: io::Error, pace: &Pace, resumable: bool) -> Attempt<T> {
        if is_tls_failure(&e) {
            // Kept as it is, so that callers can tell a refused certificate by its type.
            return Attempt::Final(Error::Io { file: self.name.clone(), offset: start, source: e });
        }
        if too_slow(&e).is_some_and(|t| t.deadline) || pace.expired() {
            let e = if too_slow(&e).is_some() { e } else { pace.deadline_error() };
            return Attempt::Final(self.fail_kind(start, span, e.kind(), e));
        }
        let error = if e.kind() == io::ErrorKind::WouldBlock {
            // A socket read timeout: the server went silent.
            let why = format!(
                "the server sent nothing for {:.1} s (the read timeout)",
                self.options.read_timeout.as_secs_f64()
            );
            self.fail_kind(start, span, io::ErrorKind::TimedOut, why)
        } else {
            self.fail_kind(start, span, e.kind(), e)
        };
        if resumable { Attempt::Resumable(error) } else { Attempt::Retry(error) }
    }

    /// A ureq transport error as an `io::Error` of the right kind (a
    /// refused certificate carries a [`crate::store::tls::TlsError`]).
    fn transport(&self, e: ureq::Error) -> io::Error {
        if let Some(untrusted) = self.trust.untrusted(&e) {
            return untrusted;
        }
        match e {
            ureq::Error::Io(e) => e,
            e @ ureq::Error::Timeout(_) => io::Error::new(io::ErrorKind::TimedOut, e),
            e => io::Error::other(e),
        }
    }

    /// `GET` of `range` through ureq, within what is left of `pace`'s deadline.
    fn ureq_get(&self, range: &str, pace: &Pace) -> Result<ureq::http::Response<ureq::Body>, io::Error> {
        let mut request = self.agent.get(&self.url).header("Range", range);
        if let Some(authorization) = &self.options.authorization {
            request = request.header("Authorization", authorization.value());
        }
        let request = match pace.time_left() {
            Some(left) => request.config().timeout_global(Some(left.max(Duration::from_millis(1)))).build(),
            None => request,
        };
        request.call().map_err(|e| self.transport(e))
    }

    /// The direct client, unless the URL or the server rules it out.
    fn direct(&self) -> Option<&wire::Wire> {
        self.wire.as_ref().filter(|_| !self.wire_off.load(Ordering::Relaxed))
    }

    /// `None` for `206 Partial Content`; otherwise how the attempt ends: a
    /// `200` means the server ignores `Range`, `404`/`410` that the object
    /// is not there, `401`/`403` that access is refused, `412` that it
    /// changed, `408`/`429`/`5xx` are worth retrying, anything else is final.
    fn unless_partial<T>(&self, status: u16, offset: u64, span: u64) -> Option<Attempt<T>> {
        let typed =
            |kind, why: &str| Some(Attempt::Final(self.store_fail(offset, span, kind, format!("HTTP {status}{why}"))));
        match status {
            206 => None,
            200 => {
                typed(StoreErrorKind::RangeNotSupported, ": the server ignores Range requests (answered 200, not 206)")
            }
            404 | 410 => typed(StoreErrorKind::NotFound, ""),
            401 | 403 => typed(StoreErrorKind::PermissionDenied, ": check the credentials or the URL's signature"),
            412 => typed(StoreErrorKind::Changed, ": the object changed during the load (open it again)"),
            408 | 429 | 500..=599 => Some(Attempt::Retry(self.fail(offset, span, format!("HTTP {status}")))),
            _ => Some(Attempt::Final(self.fail(offset, span, format!("HTTP {status}")))),
        }
    }

    /// One attempt at the opening request, to end by `until`: through the
    /// direct client where the URL allows it (a redirect or a framing it
    /// does not handle goes to ureq), else through ureq.
    fn probe(&self, until: Option<Instant>) -> Attempt<Opened> {
        self.probe_range((!self.options.read_all).then_some(PREFIX - 1), until)
    }

    /// The opening request for bytes `0..=end` (all, if `None`).
    fn probe_range(&self, end: Option<u64>, until: Option<Instant>) -> Attempt<Opened> {
        let mut pace = Pace::new(&self.options.limits, until);
        if let Some(wire) = self.direct() {
            match wire.get_range(0, end, &mut pace) {
                Ok(resp) if !(300..400).contains(&resp.status) => {
                    let head = Head::of_wire(&resp);
                    return self.opened(head, Paced { inner: Box::new(resp.body), pace }, true, end, until);
                }
                Ok(_) => {}
                Err(wire::WireError::Unsupported) => self.wire_off.store(true, Ordering::Relaxed),
                Err(wire::WireError::Io(e)) => return self.broken(0, PREFIX, e, &pace, false),
            }
        }
        let range = end.map_or_else(|| "bytes=0-".to_string(), |e| format!("bytes=0-{e}"));
        let resp = match self.ureq_get(&range, &pace) {
            Ok(r) => r,
            Err(e) => return self.broken(0, PREFIX, e, &pace, false),
        };
        let direct = resp.get_uri().to_string() == self.url;
        let head = Head::of_ureq(&resp);
        self.opened(head, Paced { inner: Box::new(resp.into_body().into_reader()), pace }, direct, end, until)
    }

    /// Checks the opening response to a request for `0..=asked`, reads the
    /// prefix, and parks the rest.
    fn opened(
        &self,
        head: Head,
        mut body: Paced<Box<dyn Read + Send>>,
        direct: bool,
        asked: Option<u64>,
        until: Option<Instant>,
    ) -> Attempt<Opened> {
        if head.status == 200 && asked.is_none() {
            // Some servers answer a request for all of an object with 200
            // and the whole body; only a bounded request tells whether they
            // honour Range at all.
            drop(body);
            return self.probe_range(Some(PREFIX - 1), until);
        }
        if let Some(failed) = self.unless_partial(head.status, 0, PREFIX) {
            return failed;
        }
        let Some((0, end, total)) = head.content_range else {
            return Attempt::Final(self.fail(0, PREFIX, "missing or invalid Content-Range"));
        };
        if end >= total || asked.is_some_and(|a| end > a) {
            return Attempt::Final(self.fail(0, PREFIX, "the server returned a different range"));
        }
        // At most PREFIX bytes.
        let mut prefix = vec![0u8; (end + 1).min(PREFIX) as usize];
        if let Err(e) = body.read_exact(&mut prefix) {
            return self.broken(0, PREFIX, e, &body.pace, false);
        }
        let parked = (prefix.len() as u64 <= end).then_some(Parked { end: end + 1, body });
        Attempt::Ok(Opened { len: total, etag: head.etag, last_modified: head.last_modified, prefix, direct, parked })
    }

    /// Fills `bufs` (consecutive bytes from `offset`) as far as the prefix
    /// and the parked opening response reach, if that response continues
    /// exactly where this read needs it; advances `*done`. A failure only
    /// stops early: the caller fetches whatever is missing. The response is
    /// paced afresh from here (it sat idle while parked).
    fn continue_opening(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        total: u64,
        done: &mut u64,
        until: Option<Instant>,
    ) {
        let at = self.prefix.len() as u64;
        if !(offset <= at && at < offset + total) {
            return;
        }
        let Some(mut parked) = self.parked.lock().ok().and_then(|mut p| p.take()) else { return };
        parked.body.pace = Pace::new(&self.options.limits, until);
        // `offset` ≤ the prefix's length.
        let cached = &self.prefix[offset as usize..];
        if fill(&mut &cached[..], bufs, done, cached.len() as u64).is_ok() {
            let stop = total.min(parked.end - offset);
            let _ = fill(&mut parked.body, bufs, done, stop);
        }
    }

    /// One attempt at filling what is left of `bufs` (consecutive bytes
    /// from `offset`, `total` in all) after the first `*done`, to end by
    /// `until`; progress survives failures.
    fn fetch(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        total: u64,
        done: &mut u64,
        until: Option<Instant>,
    ) -> Attempt<()> {
        let start = offset + *done;
        let end = offset + total - 1;
        let mut pace = Pace::new(&self.options.limits, until);
        if let Some(wire) = self.direct() {
            match wire.get_range(start, Some(end), &mut pace) {
                Ok(resp) => {
                    let head = Head::of_wire(&resp);
                    return self.receive(start, end, head, Paced { inner: resp.body, pace }, bufs, total, done);
                }
                Err(wire::WireError::Io(e)) => return self.broken(start, end + 1 - start, e, &pace, false),
                // Not a failure of the server: ask again through ureq.
                Err(wire::WireError::Unsupported) => self.wire_off.store(true, Ordering::Relaxed),
            }
        }
        let range = format!("bytes={start}-{end}");
        let resp = match self.ureq_get(&range, &pace) {
            Ok(r) => r,
            Err(e) => return self.broken(start, end + 1 - start, e, &pace, false),
        };
        let head = Head::of_ureq(&resp);
        let body = Paced { inner: resp.into_body().into_reader(), pace };
        self.receive(start, end, head, body, bufs, total, done)
    }

    /// What tells that the object a range response comes from is not the
    /// one opened: another ETag; another total size; without an ETag at
    /// opening, another `Last-Modified`. `None` when nothing does (an
    /// object replaced by one of the same size and date, from a server that
    /// sends no ETag, goes unnoticed: only stored hashes catch it).
    fn changed(&self, head: &Head) -> Option<String> {
        let shown = |v: Option<&String>| v.map_or_else(|| "none".to_string(), |v| format!("{:?}", shorten(v)));
        if let Some(expected) = &self.etag
            && head.etag.as_ref() != Some(expected)
        {
            let (was, now) = (shown(Some(expected)), shown(head.etag.as_ref()));
            return Some(format!(
                "the object changed during the load (ETag differs: was {was}, is now {now}); open it again"
            ));
        }
        if let Some((_, _, total)) = head.content_range
            && total != self.len
        {
            let was = self.len;
            return Some(format!(
                "the object changed during the load (it was {was} bytes long, is now {total}); open it again"
            ));
        }
        match (&self.etag, &self.last_modified) {
            (None, Some(expected)) if head.last_modified.as_ref() != Some(expected) => {
                let (was, now) = (shown(Some(expected)), shown(head.last_modified.as_ref()));
                Some(format!(
                    "the object changed during the load (the server sends no ETag; Last-Modified was {was}, is now \
                     {now}); open it again"
                ))
            }
            _ => None,
        }
    }

    /// Checks a response to `bytes=start-end` and reads its body into what
    /// is left of `bufs` (`total` bytes in all) after `*done`.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        start: u64,
        end: u64,
        head: Head,
        mut reader: Paced<impl Read>,
        bufs: &mut [&mut [u8]],
        total: u64,
        done: &mut u64,
    ) -> Attempt<()> {
        let span = end + 1 - start;
        if let Some(failed) = self.unless_partial(head.status, start, span) {
            return failed;
        }
        if let Some(why) = self.changed(&head) {
            return Attempt::Final(self.store_fail(start, span, StoreErrorKind::Changed, why));
        }
        match head.content_range {
            Some((s, e, total)) if s == start && e == end && total == self.len => {}
            _ => return Attempt::Final(self.fail(start, span, "the server returned a different range")),
        }
        let began = *done;
        match fill(&mut reader, bufs, done, total) {
            Ok(()) => Attempt::Ok(()),
            Err(e) => self.broken(start, span, e, &reader.pace, *done - began >= RESUMABLE_PROGRESS),
        }
    }
}

/// At most 80 characters of a header value, for a message.
fn shorten(value: &str) -> &str {
    value.char_indices().nth(80).map_or(value, |(at, _)| &value[..at])
}

/// Reads from `reader` into `bufs`, taken as one run of bytes, from
/// position `*done` up to `stop`, advancing `*done` as bytes arrive. A body
/// that ends first is an `UnexpectedEof` error.
fn fill(reader: &mut impl Read, bufs: &mut [&mut [u8]], done: &mut u64, stop: u64) -> std::io::Result<()> {
    let mut base = 0u64;
    for buf in bufs.iter_mut() {
        let len = buf.len() as u64;
        if base + len <= *done {
            base += len;
            continue;
        }
        if base >= stop {
            break;
        }
        // `*done - base` < `len` and `stop - base` > 0: both within `buf`.
        let mut pos = (*done - base) as usize;
        let until = (stop - base).min(len) as usize;
        while pos < until {
            match reader.read(&mut buf[pos..until]) {
                Ok(0) => {
                    let why = "connection closed early (short body)";
                    return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why));
                }
                Ok(n) => {
                    pos += n;
                    *done += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        base += len;
    }
    Ok(())
}

impl RangeSource for HttpSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_vectored_at(offset, &mut [buf])
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if total == 0 {
            return Ok(());
        }
        crate::source::check_range(&self.name, self.len, offset, usize::try_from(total).unwrap_or(usize::MAX))?;
        let mut done = 0u64;
        if let Some(cached) = usize::try_from(offset).ok().and_then(|start| self.prefix.get(start..))
            && cached.len() as u64 >= total
        {
            return fill(&mut &cached[..], bufs, &mut done, total).map_err(|e| self.fail(offset, total, e));
        }
        let until = deadline(&self.options.limits);
        self.continue_opening(offset, bufs, total, &mut done, until);
        if done == total {
            return Ok(());
        }
        let target = Target { location: &self.name, range: Some(offset..offset + total) };
        retry(&self.options.retry, target, || self.fetch(offset, bufs, total, &mut done, until))
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_is_checked_and_never_shown() {
        let a = Authorization::bearer("ya29.secret").unwrap();
        assert_eq!(a.value(), "Bearer ya29.secret");
        let options = HttpOptions { authorization: Some(a), ..HttpOptions::default() };
        assert!(!format!("{options:?}").contains("secret"));
        for bad in ["", "a b", "a\r\nX-Evil: 1", "é"] {
            assert!(Authorization::bearer(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn parses_content_range() {
        assert_eq!(content_range("bytes 0-0/262425"), Some((0, 0, 262425)));
        assert_eq!(content_range("bytes 10-19/*"), None);
    }
}
