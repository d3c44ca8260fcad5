//! HTTP/1.1 responses to a ranged `GET`, without I/O: the head is decoded
//! from the bytes received so far, and the body is framed by its
//! `Content-Length`, so that a server can make the direct client
//! (`store::http`'s `wire`) take neither more bytes than it declared nor a
//! short body as whole. The connection code only reads into a buffer and
//! asks these functions what the bytes mean; `fuzz/fuzz_targets/http_response.rs`
//! feeds them any bytes, split anywhere.
//!
//! The head is parsed by `httparse`; what this module adds is the limits,
//! the framing rules a client of ranged reads needs, and the headers kept.

use std::fmt;

/// Longest response head accepted (status line and headers).
pub const MAX_HEAD: usize = 64 << 10;

/// Most headers parsed in one response.
pub const MAX_HEADERS: usize = 64;

/// The headers kept from a head (lowercase): those the ranged-read engine
/// reads. The framing headers are decided on here and not kept.
pub const KEPT: [&str; 3] = ["content-range", "etag", "last-modified"];

/// A complete response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The [`KEPT`] headers present, names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body's length (`Content-Length`).
    pub length: u64,
    /// HTTP/1.1 without `Connection: close`: the connection may carry the
    /// next request once the body has been read.
    pub keep_alive: bool,
    /// Bytes the head took from the start of the input; the body follows.
    pub used: usize,
}

/// A response the direct client does not take: each makes the caller fall
/// back to a general client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No end of the head within [`MAX_HEAD`] bytes.
    TooLong,
    /// More than [`MAX_HEADERS`] headers.
    TooManyHeaders,
    /// Not an HTTP/1.x response head: what `httparse` found wrong.
    Malformed(String),
    /// A `Transfer-Encoding` (chunked framing).
    Chunked,
    /// No `Content-Length`.
    NoLength,
    /// A `Content-Length` that is not a decimal `u64`, or two that differ.
    BadLength,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => write!(f, "response head longer than {MAX_HEAD} bytes"),
            Self::TooManyHeaders => write!(f, "more than {MAX_HEADERS} response headers"),
            Self::Malformed(why) => write!(f, "malformed response head: {why}"),
            Self::Chunked => f.write_str("response with a Transfer-Encoding"),
            Self::NoLength => f.write_str("response without Content-Length"),
            Self::BadLength => f.write_str("response with an invalid Content-Length"),
        }
    }
}

/// Decodes the response head at the start of `input`: `Ok(None)` until all
/// of it has arrived, then the head. The answer depends only on the bytes,
/// never on how they were split into reads.
pub fn decode_head(input: &[u8]) -> Result<Option<Head>, Refused> {
    let window = &input[..input.len().min(MAX_HEAD)];
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut slots);
    match parsed.parse(window) {
        Ok(httparse::Status::Partial) if input.len() >= MAX_HEAD => Err(Refused::TooLong),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Refused::TooManyHeaders),
        Err(e) => Err(Refused::Malformed(e.to_string())),
        Ok(httparse::Status::Complete(used)) => framed(&parsed, used).map(Some),
    }
}

/// The head of a complete `parsed` response that took `used` bytes.
fn framed(parsed: &httparse::Response<'_, '_>, used: usize) -> Result<Head, Refused> {
    let mut length = None;
    let mut close = false;
    let mut headers = Vec::new();
    for h in parsed.headers.iter() {
        let value = || String::from_utf8_lossy(h.value).trim().to_string();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refused::Chunked);
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value)?;
            if length.is_some_and(|l| l != n) {
                return Err(Refused::BadLength);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("connection") {
            close |= value().eq_ignore_ascii_case("close");
        } else if let Some(name) = KEPT.iter().find(|k| h.name.eq_ignore_ascii_case(k)) {
            headers.push((name.to_string(), value()));
        }
    }
    Ok(Head {
        // A complete head always has a status code.
        status: parsed.code.unwrap_or(0),
        headers,
        length: length.ok_or(Refused::NoLength)?,
        keep_alive: parsed.version == Some(1) && !close,
        used,
    })
}

/// A `Content-Length` value: ASCII digits only (no sign), around which
/// spaces and tabs are allowed, within `u64`.
fn parse_length(value: &[u8]) -> Result<u64, Refused> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Refused::BadLength);
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10).and_then(|n| n.checked_add(u64::from(d - b'0'))).ok_or(Refused::BadLength)
    })
}

impl Head {
    /// The value of header `name` (lowercase, one of [`KEPT`]).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Whether the connection may carry another request once the body is
    /// read, given that `extra` bytes followed the head in the same reads:
    /// only if they all belong to this body (more would be a response
    /// nobody asked for).
    pub fn reusable(&self, extra: usize) -> bool {
        self.keep_alive && u64::try_from(extra).is_ok_and(|e| e <= self.length)
    }
}

/// The body of a response of known length, as it is read: how much may be
/// taken from each read, and when it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    remaining: u64,
}

/// A body that did not arrive as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// The connection ended with this many bytes still to come.
    Short(u64),
    /// A read reported more bytes than [`Framing::room`] allowed.
    Overrun,
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short(left) => {
                write!(f, "connection closed early (short body, {left} bytes missing)")
            }
            Self::Overrun => f.write_str("a read past the end of the body"),
        }
    }
}

impl Framing {
    /// The framing of a body of `length` bytes.
    pub fn new(length: u64) -> Self {
        Self { remaining: length }
    }

    /// Body bytes still to come.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How many bytes of a read of up to `offered` bytes belong to the body.
    pub fn room(&self, offered: usize) -> usize {
        usize::try_from(self.remaining).map_or(offered, |r| r.min(offered))
    }

    /// Accounts for a read that gave `n` bytes into at most [`Self::room`]
    /// bytes (`0`: the connection ended): the bytes it adds to the body.
    pub fn took(&mut self, n: usize) -> Result<usize, BodyError> {
        if n == 0 && self.remaining > 0 {
            return Err(BodyError::Short(self.remaining));
        }
        let left = u64::try_from(n).ok().and_then(|n| self.remaining.checked_sub(n));
        self.remaining = left.ok_or(BodyError::Overrun)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
