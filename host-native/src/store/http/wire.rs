//! A minimal HTTP/1.1 client for the bulk of a load: `GET` with one
//! `Range` over plain `http://`, body bytes read from the socket straight
//! into the caller's buffers.
//!
//! ureq (used for everything else: the probe, TLS, proxies, redirects)
//! reads each body through its own input buffer and copies it out, which on
//! a loopback or datacentre link is a second pass over every byte. This
//! client has no such buffer: once the response head is parsed, `read`
//! goes from the kernel to the destination tensor.
//!
//! It is used only where nothing ureq does for us could matter: an
//! `http://` URL without credentials, reached without a redirect, with no
//! proxy configured in the environment. A response it does not expect
//! (chunked framing, no `Content-Length`) makes the source fall back to
//! ureq for good. What the bytes of a response mean (the head, its limits,
//! the body's framing) is decided without I/O in
//! [`crate::store::http_response`]; this module moves the bytes.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::http_response::{self, BodyError, Framing, Head};
use crate::store::retry::Pace;

/// Bytes asked of the socket per read while looking for the end of the head.
const HEAD_CHUNK: usize = 8 << 10;
/// Idle connections kept per source.
const MAX_IDLE: usize = 64;

/// Proxy variables that ureq honours; any of them set keeps requests on ureq.
const PROXY_VARS: [&str; 6] =
    ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"];

/// Where and how to send range requests for one URL.
pub(crate) struct Wire {
    /// `host[:port]` as written in the URL: the Host header (and what a
    /// presigned URL's signature covers).
    authority: String,
    /// `host:port` to connect to.
    connect_to: String,
    /// Path and query, as written in the URL.
    target: String,
    read_timeout: Duration,
    connect_timeout: Duration,
    /// Header lines sent with every request (`Authorization`), each ended
    /// by CRLF.
    extra: String,
    idle: Arc<Mutex<Vec<TcpStream>>>,
}

/// A response head, and its body still on the socket.
pub(crate) struct Response {
    head: Head,
    pub(crate) body: Body,
}

/// Why a request did not produce a usable response.
pub(crate) enum WireError {
    /// Transport trouble (refused, reset, stalled, closed early): retry.
    Io(io::Error),
    /// A response this client does not handle: use ureq instead.
    Unsupported,
}

impl Wire {
    /// A client for `url`, or `None` where ureq must do the work (not plain
    /// `http://`, credentials in the URL, a proxy in the environment, bytes
    /// a request line cannot carry).
    pub(crate) fn for_url(
        url: &str,
        read_timeout: Duration,
        connect_timeout: Duration,
        authorization: Option<&super::Authorization>,
    ) -> Option<Self> {
        if PROXY_VARS.iter().any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty())) {
            return None;
        }
        let scheme = url.get(..7)?;
        if !scheme.eq_ignore_ascii_case("http://") {
            return None;
        }
        let rest = &url[7..];
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(split);
        let target = target.split('#').next().unwrap_or_default();
        let printable = |s: &str| s.bytes().all(|b| b.is_ascii_graphic());
        if authority.is_empty()
            || authority.contains('@')
            || !printable(authority)
            || !printable(target)
        {
            return None;
        }
        // A port is present if a ':' follows the last ']' (IPv6 literals).
        let host_end = authority.rfind(']').map_or(0, |i| i + 1);
        let connect_to = if authority[host_end..].contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let target = if target.is_empty() {
            "/".to_string()
        } else if target.starts_with('?') {
            format!("/{target}")
        } else {
            target.to_string()
        };
        Some(Self {
            authority: authority.to_string(),
            connect_to,
            target,
            read_timeout,
            connect_timeout,
            extra: authorization
                .map(|a| format!("Authorization: {}\r\n", a.value()))
                .unwrap_or_default(),
            idle: Arc::new(Mutex::new(Vec::new())),
        })
    }

    fn connect(&self) -> io::Result<TcpStream> {
        let mut last = io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} resolves to no address", self.authority),
        );
        for addr in self.connect_to.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.connect_timeout) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(self.read_timeout))?;
                    s.set_write_timeout(Some(self.read_timeout))?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// `GET` of bytes `start..=end` (to the end of the object if `end` is
    /// `None`). A pooled connection that turns out to be closed by the
    /// server is replaced by a new one at once (that is not a failure of
    /// the server). The response head counts against `pace` (the caller
    /// paces the body), and the socket timeouts are shortened to the time
    /// `pace` has left.
    pub(crate) fn get_range(
        &self,
        start: u64,
        end: Option<u64>,
        pace: &mut Pace,
    ) -> Result<Response, WireError> {
        let end = end.map(|e| e.to_string()).unwrap_or_default();
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nRange: bytes={start}-{end}\r\nUser-Agent: tensorizer-rs/{}\r\n\
             Accept-Encoding: identity\r\n{}\r\n",
            self.target,
            self.authority,
            env!("CARGO_PKG_VERSION"),
            self.extra,
        );
        let pooled = self.idle.lock().map_or(None, |mut idle| idle.pop());
        if let Some(stream) = pooled {
            match self.exchange(stream, request.as_bytes(), pace) {
                Err(WireError::Io(e)) if stale(&e) => {}
                other => return other,
            }
        }
        let stream = self.connect().map_err(WireError::Io)?;
        self.exchange(stream, request.as_bytes(), pace)
    }

    /// Sends `request` on `stream` and reads until the response head is
    /// complete; what the bytes mean is decided by
    /// [`http_response::decode_head`].
    fn exchange(
        &self,
        mut stream: TcpStream,
        request: &[u8],
        pace: &mut Pace,
    ) -> Result<Response, WireError> {
        let timeout = Some(pace.io_timeout(self.read_timeout));
        stream
            .set_read_timeout(timeout)
            .and_then(|()| stream.set_write_timeout(timeout))
            .map_err(WireError::Io)?;
        stream.write_all(request).map_err(WireError::Io)?;
        let mut received = Vec::with_capacity(HEAD_CHUNK);
        let head = loop {
            // `filled` < `MAX_HEAD`: the decoder refuses a longer head.
            let filled = received.len();
            received.resize(filled + HEAD_CHUNK, 0);
            let n = read_some(&mut stream, &mut received[filled..], pace)?;
            received.truncate(filled + n);
            if n == 0 {
                return Err(WireError::Io(closed_before_head(filled)));
            }
            match http_response::decode_head(&received) {
                Ok(None) => {}
                Ok(Some(head)) => break head,
                Err(_) => return Err(WireError::Unsupported),
            }
        };
        let leftover = received.split_off(head.used);
        let body = Body {
            idle: self.idle.clone(),
            stream: Some(stream),
            keep_alive: head.reusable(leftover.len()),
            leftover,
            taken: 0,
            framing: Framing::new(head.length),
        };
        Ok(Response { head, body })
    }
}

/// One read from `stream` into `buf`, counted against `pace`; a read that
/// fails once `pace`'s deadline has passed reports the deadline.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], pace: &mut Pace) -> Result<usize, WireError> {
    let n = loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if pace.expired() => return Err(WireError::Io(pace.deadline_error())),
            other => break other.map_err(WireError::Io)?,
        }
    };
    pace.progress(n).map_err(WireError::Io)?;
    Ok(n)
}

/// The error for a connection closed after `filled` bytes of a head: none
/// is how a server's closing of an idle connection looks.
fn closed_before_head(filled: usize) -> io::Error {
    let why =
        if filled == 0 { io::ErrorKind::ConnectionAborted } else { io::ErrorKind::UnexpectedEof };
    io::Error::new(why, "connection closed before a complete response head")
}

/// Errors that a server's closing of an idle keep-alive connection gives on
/// its next use.
fn stale(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
    )
}

impl Response {
    /// The status code.
    pub(crate) fn status(&self) -> u16 {
        self.head.status
    }

    /// The value of header `name` (lowercase, one of [`http_response::KEPT`]).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }
}

/// A body of known length on a socket. Read to its end, the connection goes
/// back to the pool; dropped early, it is closed.
pub(crate) struct Body {
    /// The pool of the [`Wire`] that sent the request.
    idle: Arc<Mutex<Vec<TcpStream>>>,
    stream: Option<TcpStream>,
    /// Body bytes that arrived with the head.
    leftover: Vec<u8>,
    taken: usize,
    framing: Framing,
    /// The connection may carry the next request once the body is read.
    keep_alive: bool,
}

impl Read for Body {
    /// Body bytes, never past the declared length; a connection that ends
    /// before it is an `UnexpectedEof` error.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.framing.room(buf.len());
        if room == 0 {
            return Ok(0);
        }
        let n = if let Some(rest) = self.leftover.get(self.taken..).filter(|r| !r.is_empty()) {
            let n = room.min(rest.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.taken += n;
            n
        } else {
            self.stream.as_mut().map_or(Ok(0), |s| s.read(&mut buf[..room]))?
        };
        self.framing.took(n).map_err(|e| {
            let kind = match e {
                BodyError::Short(_) => io::ErrorKind::UnexpectedEof,
                BodyError::Overrun => io::ErrorKind::InvalidData,
            };
            io::Error::new(kind, e.to_string())
        })
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if self.framing.remaining() == 0
            && self.keep_alive
            && let Some(stream) = self.stream.take()
            && let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(url: &str) -> Option<Wire> {
        Wire::for_url(url, Duration::from_secs(1), Duration::from_secs(1), None)
    }

    #[test]
    fn takes_only_plain_http_urls_it_can_send() {
        let w = wire("http://127.0.0.1:8080/b/k.tensors?X-Amz-Signature=ab").unwrap();
        assert_eq!(
            (w.authority.as_str(), w.connect_to.as_str()),
            ("127.0.0.1:8080", "127.0.0.1:8080")
        );
        assert_eq!(w.target, "/b/k.tensors?X-Amz-Signature=ab");
        let w = wire("HTTP://[::1]/x#frag").unwrap();
        assert_eq!((w.connect_to.as_str(), w.target.as_str()), ("[::1]:80", "/x"));
        assert_eq!(wire("http://h?q=1").unwrap().target, "/?q=1");
        assert!(wire("https://h/x").is_none());
        assert!(wire("http://user:pw@h/x").is_none());
        assert!(wire("http://h/a b").is_none());
        assert!(wire("http:///x").is_none());
    }

    /// A server on 127.0.0.1 that answers each connection with the next of
    /// `responses` (whatever the request) and closes it.
    fn serve(responses: Vec<Vec<u8>>) -> (Wire, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/o", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            for response in responses {
                let Ok((mut s, _)) = listener.accept() else { return };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.read(&mut [0u8; 4096]);
                let _ = s.write_all(&response);
            }
        });
        (wire(&url).unwrap(), server)
    }

    /// Sends a request for each of `responses`: never a panic or a hang;
    /// a body is never longer than its `Content-Length` nor than what the
    /// server sent.
    fn survives(responses: Vec<Vec<u8>>) -> Vec<Result<(u16, usize), String>> {
        let sent: Vec<usize> = responses.iter().map(Vec::len).collect();
        let (wire, server) = serve(responses);
        let limits = crate::source::TransferLimits::default();
        let mut outcomes = Vec::new();
        for sent in sent {
            let mut pace = Pace::new(&limits, None);
            // A fresh connection each time: nothing is pooled from a closed one.
            wire.idle.lock().unwrap().clear();
            outcomes.push(match wire.get_range(0, Some(99), &mut pace) {
                Ok(mut resp) => {
                    let length = resp.body.framing.remaining();
                    let (mut body, mut buf) = (0usize, [0u8; 512]);
                    loop {
                        match resp.body.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => body += n,
                        }
                    }
                    assert!(
                        body as u64 <= length && body <= sent,
                        "{body} of {length}, {sent} sent"
                    );
                    Ok((resp.status(), body))
                }
                Err(WireError::Io(e)) => Err(e.to_string()),
                Err(WireError::Unsupported) => Err("unsupported".into()),
            });
        }
        server.join().unwrap();
        outcomes
    }

    #[test]
    fn hostile_responses_are_errors_or_bounded_bodies() {
        let huge_head = [
            &b"HTTP/1.1 206 P\r\n"[..],
            &b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(2000),
            b"\r\n",
        ]
        .concat();
        let many_headers = [
            &b"HTTP/1.1 206 P\r\n"[..],
            &b"A: b\r\n".repeat(http_response::MAX_HEADERS + 1),
            b"\r\n",
        ]
        .concat();
        type Outcome = Result<(u16, usize), &'static str>;
        let cases: Vec<(&[u8], Outcome)> = vec![
            (b"", Err("connection closed before a complete response head")),
            (
                b"HTTP/1.1 206 Partial Content\r\nContent-Le",
                Err("connection closed before a complete response head"),
            ),
            (&huge_head, Err("unsupported")),
            (&many_headers, Err("unsupported")),
            (b"SSH-2.0-OpenSSH\r\n\r\n", Err("unsupported")),
            (b"HTTP/1.1 206 P\r\n\r\nabc", Err("unsupported")),
            (
                b"HTTP/1.1 206 P\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                Err("unsupported"),
            ),
            (b"HTTP/1.1 206 P\r\nContent-Length: -1\r\n\r\nabc", Err("unsupported")),
            (
                b"HTTP/1.1 206 P\r\nContent-Length: 99999999999999999999\r\n\r\nabc",
                Err("unsupported"),
            ),
            // Two lengths that differ: which one frames the body is unclear.
            (
                b"HTTP/1.1 206 P\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
                Err("unsupported"),
            ),
            // A length the body never reaches: what came, no more.
            (b"HTTP/1.1 206 P\r\nContent-Length: 18446744073709551615\r\n\r\nabc", Ok((206, 3))),
            // More body than the length: the length.
            (b"HTTP/1.1 206 P\r\nContent-Length: 2\r\n\r\nabcdef", Ok((206, 2))),
            (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Ok((200, 0))),
        ];
        let outcomes = survives(cases.iter().map(|(r, _)| r.to_vec()).collect());
        for ((response, expected), got) in cases.iter().zip(outcomes) {
            let expected = expected.map_err(str::to_string);
            assert_eq!(
                got,
                expected,
                "{:?}",
                String::from_utf8_lossy(&response[..response.len().min(60)])
            );
        }
    }

    #[test]
    fn random_responses_are_errors_or_bounded_bodies() {
        // xorshift64: the same cases every run.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let prefixes: [&[u8]; 4] =
            [b"", b"HTTP/1.1 206 P\r\n", b"HTTP/1.1 206 P\r\nContent-Length: ", b"HTTP/1.1 "];
        let alphabet = b"HTTP/1.1 206\r\n:Content-Length: 0123456789abc\r\n\r\n\0\xff";
        let responses = (0..300)
            .map(|_| {
                let mut r = prefixes[(next() % 4) as usize].to_vec();
                let len = (next() % 300) as usize;
                r.extend((0..len).map(|_| match next() % 3 {
                    0 => (next() & 0xff) as u8,
                    _ => alphabet[(next() % alphabet.len() as u64) as usize],
                }));
                r
            })
            .collect();
        for outcome in survives(responses) {
            if let Err(e) = outcome {
                assert!(!e.is_empty());
            }
        }
    }
}
