//! The HTTP transport of the ranged-read engine ([`crate::store::ranged`]):
//! `GET` with one `Range` through the direct socket client ([`super::wire`])
//! where the URL allows it, else through ureq (TLS, proxies, redirects).

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ureq::ResponseExt;

use super::{HttpOptions, wire};
use crate::error::StoreErrorKind;
use crate::store::ranged::{self, Ask, Head, PREFIX, Response, Span, Transport, Validators};
use crate::store::retry::{Attempt, Pace, Paced};
use crate::store::tls::{Trust, is_tls_failure};

/// A response body, from either client.
pub(crate) enum Body {
    Wire(wire::Body),
    Ureq(ureq::BodyReader<'static>),
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Wire(body) => body.read(buf),
            Self::Ureq(body) => body.read(buf),
        }
    }
}

/// Sends the range requests of one URL.
pub(crate) struct HttpClient {
    pub(super) agent: ureq::Agent,
    pub(super) url: String,
    pub(super) options: HttpOptions,
    /// What `https://` servers are verified against.
    pub(super) trust: Trust,
    /// The direct client for range reads, where the URL allows it.
    pub(super) wire: Option<wire::Wire>,
    /// Set once the server answered the direct client with a response it
    /// does not handle, or the opening was redirected: everything goes
    /// through ureq from then on.
    pub(super) wire_off: AtomicBool,
}

/// A response's status and head.
struct Answer {
    status: u16,
    head: Head,
}

impl Answer {
    fn of_wire(resp: &wire::Response) -> Self {
        Self::new(resp.status(), |name| resp.header(name))
    }

    fn of_ureq(resp: &ureq::http::Response<ureq::Body>) -> Self {
        Self::new(resp.status().as_u16(), |name| {
            resp.headers().get(name).and_then(|v| v.to_str().ok())
        })
    }

    fn new<'h>(status: u16, header: impl Fn(&str) -> Option<&'h str>) -> Self {
        let range = header("content-range")
            .and_then(content_range)
            .and_then(|(start, end, total)| Some((start..end.checked_add(1)?, total)));
        let validators = Validators {
            etag: header("etag").map(str::to_string),
            last_modified: header("last-modified").map(str::to_string),
        };
        Self { status, head: Head { range, validators } }
    }
}

/// Parses `bytes START-END/TOTAL`.
pub(super) fn content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, end.trim().parse().ok()?, total.trim().parse().ok()?))
}

impl HttpClient {
    /// How an attempt that failed with `e` ends: a refused certificate at
    /// once (kept as it is, so that callers can tell it by its type), else
    /// as the engine decides; a socket read timeout says so.
    fn broken<T>(&self, span: &Span<'_>, e: io::Error, pace: &Pace) -> Attempt<T> {
        if is_tls_failure(&e) {
            return Attempt::Final(crate::error::Error::Io {
                file: span.name.to_string(),
                offset: span.start,
                source: e,
            });
        }
        if e.kind() == io::ErrorKind::WouldBlock && !pace.expired() {
            // A socket read timeout: the server went silent.
            let why = format!(
                "the server sent nothing for {:.1} s (the read timeout)",
                self.options.read_timeout.as_secs_f64()
            );
            return Attempt::Retry(span.io(io::ErrorKind::TimedOut, why));
        }
        ranged::broken(span, e, pace)
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
    fn ureq_get(
        &self,
        range: &str,
        pace: &Pace,
    ) -> Result<ureq::http::Response<ureq::Body>, io::Error> {
        let mut request = self.agent.get(&self.url).header("Range", range);
        if let Some(authorization) = &self.options.authorization {
            request = request.header("Authorization", authorization.value());
        }
        let request = match pace.time_left() {
            Some(left) => {
                request.config().timeout_global(Some(left.max(Duration::from_millis(1)))).build()
            }
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
    fn unless_partial<T>(&self, status: u16, span: &Span<'_>) -> Option<Attempt<T>> {
        let typed =
            |kind, why: &str| Some(Attempt::Final(span.store(kind, format!("HTTP {status}{why}"))));
        match status {
            206 => None,
            200 => typed(
                StoreErrorKind::RangeNotSupported,
                ": the server ignores Range requests (answered 200, not 206)",
            ),
            404 | 410 => typed(StoreErrorKind::NotFound, ""),
            401 | 403 => typed(
                StoreErrorKind::PermissionDenied,
                ": check the credentials or the URL's signature",
            ),
            412 => typed(
                StoreErrorKind::Changed,
                ": the object changed during the load (open it again)",
            ),
            408 | 429 | 500..=599 => {
                Some(Attempt::Retry(span.io(io::ErrorKind::Other, format!("HTTP {status}"))))
            }
            _ => Some(Attempt::Final(span.io(io::ErrorKind::Other, format!("HTTP {status}")))),
        }
    }

    /// The opening request for bytes `0..=end` (all, if `None`): through
    /// the direct client where the URL allows it (a redirect or a framing
    /// it does not handle goes to ureq, and a redirect keeps every later
    /// request on ureq), else through ureq. A server that answers a request
    /// for all of the object with `200` is asked for the prefix only: only
    /// a bounded request tells whether it honours `Range` at all.
    fn opening(
        &self,
        end: Option<u64>,
        span: &Span<'_>,
        mut pace: Pace,
    ) -> Attempt<Response<Paced<Body>>> {
        if let Some(wire) = self.direct() {
            match wire.get_range(0, end, &mut pace) {
                Ok(resp) if !(300..400).contains(&resp.status()) => {
                    let answer = Answer::of_wire(&resp);
                    return self.answered(answer, Body::Wire(resp.body), end, span, pace);
                }
                Ok(_) => {}
                Err(wire::WireError::Unsupported) => self.wire_off.store(true, Ordering::Relaxed),
                Err(wire::WireError::Io(e)) => return self.broken(span, e, &pace),
            }
        }
        let range = end.map_or_else(|| "bytes=0-".to_string(), |e| format!("bytes=0-{e}"));
        let resp = match self.ureq_get(&range, &pace) {
            Ok(r) => r,
            Err(e) => return self.broken(span, e, &pace),
        };
        if resp.get_uri().to_string() != self.url {
            self.wire_off.store(true, Ordering::Relaxed);
        }
        let answer = Answer::of_ureq(&resp);
        self.answered(answer, Body::Ureq(resp.into_body().into_reader()), end, span, pace)
    }

    /// The opening response `answer` to a request for `0..=asked`.
    fn answered(
        &self,
        answer: Answer,
        body: Body,
        asked: Option<u64>,
        span: &Span<'_>,
        pace: Pace,
    ) -> Attempt<Response<Paced<Body>>> {
        if answer.status == 200 && asked.is_none() {
            drop(body);
            let pace = Pace::new(&self.options.limits, pace.deadline());
            return self.opening(Some(PREFIX - 1), span, pace);
        }
        if let Some(failed) = self.unless_partial(answer.status, span) {
            return failed;
        }
        Attempt::Ok(Response { head: answer.head, body: Paced { inner: body, pace } })
    }

    /// `GET` of `range`.
    fn ranged(
        &self,
        range: &std::ops::Range<u64>,
        span: &Span<'_>,
        mut pace: Pace,
    ) -> Attempt<Response<Paced<Body>>> {
        // A span is never empty.
        let (start, end) = (range.start, range.end.saturating_sub(1));
        let (answer, body) = 'sent: {
            if let Some(wire) = self.direct() {
                match wire.get_range(start, Some(end), &mut pace) {
                    Ok(resp) => break 'sent (Answer::of_wire(&resp), Body::Wire(resp.body)),
                    Err(wire::WireError::Io(e)) => return self.broken(span, e, &pace),
                    // Not a failure of the server: ask again through ureq.
                    Err(wire::WireError::Unsupported) => {
                        self.wire_off.store(true, Ordering::Relaxed)
                    }
                }
            }
            match self.ureq_get(&format!("bytes={start}-{end}"), &pace) {
                Ok(resp) => (Answer::of_ureq(&resp), Body::Ureq(resp.into_body().into_reader())),
                Err(e) => return self.broken(span, e, &pace),
            }
        };
        if let Some(failed) = self.unless_partial(answer.status, span) {
            return failed;
        }
        Attempt::Ok(Response { head: answer.head, body: Paced { inner: body, pace } })
    }
}

impl Transport for HttpClient {
    type Body = Paced<Body>;

    const WHO: &'static str = "server";

    const NO_ETAG: &'static str = "the server sends no ETag; Last-Modified";

    fn get(&self, ask: Ask<'_>, span: &Span<'_>, pace: Pace) -> Attempt<Response<Self::Body>> {
        match ask {
            Ask::Opening { all } => self.opening((!all).then_some(PREFIX - 1), span, pace),
            Ask::Range { range, .. } => self.ranged(range, span, pace),
        }
    }

    fn fill(
        &self,
        body: &mut Self::Body,
        bufs: &mut [&mut [u8]],
        done: &mut u64,
        stop: u64,
        span: &Span<'_>,
    ) -> Attempt<()> {
        match fill(body, bufs, done, stop) {
            Ok(()) => Attempt::Ok(()),
            Err(e) => self.broken(span, e, &body.pace),
        }
    }

    fn repace(body: &mut Self::Body, pace: Pace) {
        body.pace = pace;
    }
}

/// Reads from `reader` into `bufs`, taken as one run of bytes, from
/// position `*done` up to `stop`, advancing `*done` as bytes arrive. A body
/// that ends first is an `UnexpectedEof` error.
fn fill(
    reader: &mut impl Read,
    bufs: &mut [&mut [u8]],
    done: &mut u64,
    stop: u64,
) -> io::Result<()> {
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
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, why));
                }
                Ok(n) => {
                    pos += n;
                    *done += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        base += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_range() {
        assert_eq!(content_range("bytes 0-0/262425"), Some((0, 0, 262425)));
        assert_eq!(content_range("bytes 10-19/*"), None);
    }
}
