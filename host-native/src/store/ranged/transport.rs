//! What a store supplies to the engine ([`Transport`]), what it is asked
//! ([`Ask`]) and answers ([`Response`]), and the errors it names a byte
//! range with ([`Span`], [`broken`]).

use std::fmt;
use std::io;
use std::ops::Range;

use crate::error::{Error, StoreErrorKind};
use crate::store::retry::{Attempt, Pace, too_slow};

/// What a request asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask<'a> {
    /// The opening: bytes `0..PREFIX`, or, with `all`, the whole object.
    Opening { all: bool },
    /// Bytes `range` of the object opened, whose validators are `pinned`
    /// (HTTP compares them after the fact; a cloud store is asked to).
    Range {
        range: &'a Range<u64>,
        #[cfg_attr(not(feature = "cloud"), allow(dead_code))]
        pinned: &'a Validators,
    },
}

/// What tells one version of an object from another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Validators {
    /// The ETag, if the store gives one.
    pub(crate) etag: Option<String>,
    /// The last-modified date, compared when there is no ETag.
    pub(crate) last_modified: Option<String>,
}

/// What a response says of itself, once its transport has accepted its
/// status.
#[derive(Debug)]
pub(crate) struct Head {
    /// The bytes its body holds and the object's total length (HTTP's
    /// `Content-Range`); `None` if it does not say.
    pub(crate) range: Option<(Range<u64>, u64)>,
    pub(crate) validators: Validators,
}

/// A response: its head, and its body still to be read.
pub(crate) struct Response<B> {
    pub(crate) head: Head,
    pub(crate) body: B,
}

/// How one store sends ranged `GET`s and reads their bodies.
pub(crate) trait Transport: Send + Sync {
    /// A response body, paced by the [`Pace`] its request was sent with.
    type Body: Send;

    /// Who answers, in messages ("server", "store").
    const WHO: &'static str;

    /// What a change without an ETag is called, before "was …, is now …".
    const NO_ETAG: &'static str;

    /// One request for `ask`, paced by `pace` (the body keeps it); a
    /// failure names `span`.
    fn get(&self, ask: Ask<'_>, span: &Span<'_>, pace: Pace) -> Attempt<Response<Self::Body>>;

    /// Reads `body` into `bufs` (taken as one run of bytes) from position
    /// `*done` up to `stop`, advancing `*done` as bytes arrive; a failure
    /// (a transient one is `Retry`) names `span`.
    fn fill(
        &self,
        body: &mut Self::Body,
        bufs: &mut [&mut [u8]],
        done: &mut u64,
        stop: u64,
        span: &Span<'_>,
    ) -> Attempt<()>;

    /// Paces `body` afresh with `pace` (it sat idle while parked).
    fn repace(body: &mut Self::Body, pace: Pace);

    /// Whether `body` holds bytes past what was asked of it.
    fn overran(_body: &Self::Body) -> bool {
        false
    }
}

/// A byte range of a location, and the errors that name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'a> {
    pub(crate) name: &'a str,
    pub(crate) start: u64,
    pub(crate) len: u64,
}

impl Span<'_> {
    /// The bytes, at least one.
    pub(crate) fn range(&self) -> Range<u64> {
        self.start..self.start.saturating_add(self.len.max(1))
    }

    /// An I/O failure of `kind` over these bytes.
    pub(crate) fn io(&self, kind: io::ErrorKind, why: impl fmt::Display) -> Error {
        let last = self.range().end - 1;
        Error::Io {
            file: self.name.to_string(),
            offset: self.start,
            source: io::Error::new(kind, format!("range {}-{last}: {why}", self.start)),
        }
    }

    /// A failure the caller can act on, of `kind`, over these bytes.
    pub(crate) fn store(&self, kind: StoreErrorKind, why: impl fmt::Display) -> Error {
        Error::store(self.name, Some(self.range()), kind, why)
    }
}

/// How an attempt whose request or body failed with `e` ends: final once
/// the deadline has passed, else worth another attempt.
pub(crate) fn broken<T>(span: &Span<'_>, e: io::Error, pace: &Pace) -> Attempt<T> {
    if too_slow(&e).is_some_and(|t| t.deadline) || pace.expired() {
        let e = if too_slow(&e).is_some() { e } else { pace.deadline_error() };
        return Attempt::Final(span.io(e.kind(), e));
    }
    Attempt::Retry(span.io(e.kind(), e))
}
