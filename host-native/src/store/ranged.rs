//! The one ranged-read engine of the stores read with ranged `GET`s:
//! direct HTTP (and S3 through presigned URLs, GCS and Azure through signed
//! ones) and the cloud stores read through `object_store`.
//!
//! A store supplies only its transport ([`Transport`]: send a ranged `GET`,
//! say what its response holds, read its body into buffers), as
//! `object_store`'s `GetClient` does; [`Ranged`] does the rest, once:
//!
//! - **The opening** is one request, for the object's first [`PREFIX`]
//!   bytes, or, when the caller will read all of it, for the whole object.
//!   It learns the length and the validators (ETag, else last-modified
//!   date) and keeps the first [`PREFIX`] bytes (the file header and
//!   usually the whole index). The rest of a whole-object response is
//!   parked and continued by the first read that wants the bytes where the
//!   prefix ends, so a load costs one request fewer.
//! - **Reads** are ranged requests for the bytes not yet received, retried
//!   under the shared [`RetryPolicy`]; a broken body is resumed from the
//!   bytes already received, at once and without using up an attempt when
//!   it brought [`RESUMABLE_PROGRESS`]. Every request is paced
//!   ([`TransferLimits`]: a minimum rate, and a deadline per read).
//! - **Change detection**: a response from another version of the object
//!   (another ETag; another size; without an ETag, another last-modified
//!   date) ends the read with an [`Error::Store`](crate::error::Error::Store)
//!   of kind `Changed`.
//! - **Errors** name the location and the byte range.

mod transport;

use std::io;
use std::sync::Mutex;
use std::time::Instant;

use crate::error::{Result, StoreErrorKind};
use crate::source::{TransferLimits, check_range};
use crate::store::retry::{
    Attempt, Pace, RESUMABLE_PROGRESS, RetryPolicy, Target, deadline, retry,
};
pub(crate) use transport::{Ask, Head, Response, Span, Transport, Validators, broken};

/// Bytes fetched (and kept) by the opening request: the file header and
/// (usually) the whole index, so opening a file costs one request.
pub const PREFIX: u64 = 1 << 20;

/// An opening response read as far as the end of the prefix (its next byte
/// is at the prefix's length).
pub(crate) struct Parked<B> {
    /// The offset one past its last byte.
    end: u64,
    body: B,
}

/// What the opening request learnt.
struct Opened<B> {
    len: u64,
    validators: Validators,
    prefix: Vec<u8>,
    parked: Option<Parked<B>>,
}

/// One object read with ranged `GET`s through transport `T`.
pub(crate) struct Ranged<T: Transport> {
    pub(crate) transport: T,
    name: String,
    len: u64,
    /// What the object was when opened.
    validators: Validators,
    limits: TransferLimits,
    retry: RetryPolicy,
    /// The object's first bytes, from the opening request.
    prefix: Vec<u8>,
    /// With a whole-object opening: the rest of its response.
    pub(crate) parked: Mutex<Option<Parked<T::Body>>>,
}

impl<T: Transport> Ranged<T> {
    /// Opens the object that `transport` reaches, named `name` in messages,
    /// with one request (retried): for its first [`PREFIX`] bytes, or, with
    /// `all`, for all of it.
    pub(crate) fn open(
        transport: T,
        name: String,
        limits: TransferLimits,
        retry_policy: RetryPolicy,
        all: bool,
    ) -> Result<Self> {
        let mut this = Self {
            transport,
            name,
            len: 0,
            validators: Validators::default(),
            limits,
            retry: retry_policy,
            prefix: Vec::new(),
            parked: Mutex::new(None),
        };
        let until = deadline(&this.limits);
        let target = Target { location: &this.name, range: None };
        let opened = retry(&this.retry, target, || this.opening(all, until))?;
        this.len = opened.len;
        this.validators = opened.validators;
        this.prefix = opened.prefix;
        this.parked = Mutex::new(opened.parked);
        Ok(this)
    }

    /// The object's length.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The name used in messages.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The object's ETag when it was opened, if it had one.
    #[cfg_attr(not(feature = "cloud"), allow(dead_code))]
    pub(crate) fn etag(&self) -> Option<&str> {
        self.validators.etag.as_deref()
    }

    /// One attempt at the opening request, to end by `until`: the prefix is
    /// read here, the rest is parked.
    fn opening(&self, all: bool, until: Option<Instant>) -> Attempt<Opened<T::Body>> {
        let span = Span { name: &self.name, start: 0, len: PREFIX };
        let pace = Pace::new(&self.limits, until);
        let Response { head, mut body } =
            match self.transport.get(Ask::Opening { all }, &span, pace) {
                Attempt::Ok(response) => response,
                Attempt::Retry(e) | Attempt::Resumable(e) => return Attempt::Retry(e),
                Attempt::Final(e) => return Attempt::Final(e),
            };
        let Some((range, len)) = head.range else {
            return Attempt::Final(
                span.io(io::ErrorKind::Other, "missing or invalid Content-Range"),
            );
        };
        if range.start != 0 || range.end > len || (!all && range.end > PREFIX) {
            let why = format!("the {} returned a different range", T::WHO);
            return Attempt::Final(span.io(io::ErrorKind::InvalidData, why));
        }
        // At most PREFIX bytes.
        let mut prefix = vec![0u8; range.end.min(PREFIX) as usize];
        let kept = prefix.len() as u64;
        let mut done = 0;
        match self.transport.fill(&mut body, &mut [&mut prefix], &mut done, kept, &span) {
            Attempt::Ok(()) => {}
            // At most a MiB: asked for again whole.
            Attempt::Retry(e) | Attempt::Resumable(e) => return Attempt::Retry(e),
            Attempt::Final(e) => return Attempt::Final(e),
        }
        let parked = (range.end > kept).then_some(Parked { end: range.end, body });
        Attempt::Ok(Opened { len, validators: head.validators, prefix, parked })
    }

    /// Fills `bufs` (consecutive bytes from `offset`, `total` in all).
    pub(crate) fn read(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if total == 0 {
            return Ok(());
        }
        check_range(&self.name, self.len, offset, usize::try_from(total).unwrap_or(usize::MAX))?;
        if let Some(cached) =
            usize::try_from(offset).ok().and_then(|start| self.prefix.get(start..))
            && cached.len() as u64 >= total
        {
            copy_into(bufs, 0, cached);
            return Ok(());
        }
        let until = deadline(&self.limits);
        let mut done = 0u64;
        self.continue_opening(offset, bufs, total, &mut done, until);
        if done == total {
            return Ok(());
        }
        // `offset + total` ≤ the length (checked above).
        let target = Target { location: &self.name, range: Some(offset..offset + total) };
        retry(&self.retry, target, || self.fetch(offset, bufs, total, &mut done, until))
    }

    /// Fills `bufs` (consecutive bytes from `offset`, `total` in all) as far
    /// as the prefix reaches and, if the parked opening response continues
    /// exactly where this read needs it, as far as that goes; advances
    /// `*done`. A
    /// failure only stops early: the caller fetches whatever is missing. The
    /// response is paced afresh from here, to end by `until`.
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
        // `offset` ≤ the prefix's length, which is a usize.
        let cached = &self.prefix[offset as usize..];
        copy_into(bufs, 0, cached);
        *done = cached.len() as u64;
        let Some(mut parked) = self.parked.lock().ok().and_then(|mut p| p.take()) else { return };
        T::repace(&mut parked.body, Pace::new(&self.limits, until));
        let stop = total.min(parked.end - offset);
        let span = Span { name: &self.name, start: offset, len: total };
        // Whatever arrived stays in `bufs`; the rest is asked for afresh.
        let _ = self.transport.fill(&mut parked.body, bufs, done, stop, &span);
    }

    /// One attempt at filling what is left of `bufs` (consecutive bytes from
    /// `offset`, `total` in all) after the first `*done`, to end by `until`;
    /// progress survives failures, and a failure after
    /// [`RESUMABLE_PROGRESS`] is resumed at once.
    fn fetch(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        total: u64,
        done: &mut u64,
        until: Option<Instant>,
    ) -> Attempt<()> {
        let range = offset + *done..offset + total;
        let span = Span { name: &self.name, start: range.start, len: range.end - range.start };
        let pace = Pace::new(&self.limits, until);
        let ask = Ask::Range { range: &range, pinned: &self.validators };
        let Response { head, mut body } = match self.transport.get(ask, &span, pace) {
            Attempt::Ok(response) => response,
            Attempt::Retry(e) => return Attempt::Retry(e),
            Attempt::Resumable(e) => return Attempt::Resumable(e),
            Attempt::Final(e) => return Attempt::Final(e),
        };
        if let Some(why) = self.changed(&head) {
            return Attempt::Final(span.store(StoreErrorKind::Changed, why));
        }
        match &head.range {
            Some((got, len)) if *got == range && *len == self.len => {}
            _ => {
                let why = format!("the {} returned a different range", T::WHO);
                return Attempt::Final(span.io(io::ErrorKind::Other, why));
            }
        }
        let began = *done;
        match self.transport.fill(&mut body, bufs, done, total, &span) {
            Attempt::Ok(()) if T::overran(&body) => {
                let why = format!("the {} sent more bytes than asked", T::WHO);
                Attempt::Final(span.io(io::ErrorKind::InvalidData, why))
            }
            Attempt::Retry(e) if *done - began >= RESUMABLE_PROGRESS => Attempt::Resumable(e),
            other => other,
        }
    }

    /// What tells that the object a response comes from is not the one
    /// opened: another ETag; another total size; without an ETag at
    /// opening, another last-modified date. `None` when nothing does (an
    /// object replaced by one of the same size and date, from a store that
    /// gives no ETag, goes unnoticed: only stored hashes catch it).
    fn changed(&self, head: &Head) -> Option<String> {
        let shown = |v: Option<&String>| {
            v.map_or_else(|| "none".to_string(), |v| format!("{:?}", shorten(v)))
        };
        let (was, now) = (&self.validators, &head.validators);
        if let Some(expected) = &was.etag
            && now.etag.as_ref() != Some(expected)
        {
            let (was, now) = (shown(Some(expected)), shown(now.etag.as_ref()));
            return Some(format!(
                "the object changed during the load (ETag differs: was {was}, is now {now}); open it again"
            ));
        }
        if let Some((_, total)) = head.range
            && total != self.len
        {
            let was = self.len;
            return Some(format!(
                "the object changed during the load (it was {was} bytes long, is now {total}); open it again"
            ));
        }
        match (&was.etag, &was.last_modified) {
            (None, Some(expected)) if now.last_modified.as_ref() != Some(expected) => {
                let (was, now) = (shown(Some(expected)), shown(now.last_modified.as_ref()));
                Some(format!(
                    "the object changed during the load ({} was {was}, is now {now}); open it again",
                    T::NO_ETAG
                ))
            }
            _ => None,
        }
    }
}

/// At most 80 characters of a header value, for a message.
fn shorten(value: &str) -> &str {
    value.char_indices().nth(80).map_or(value, |(at, _)| &value[..at])
}

/// Copies `chunk` into the concatenation of `bufs` at position `at`, as
/// far as `bufs` reach.
pub(crate) fn copy_into(bufs: &mut [&mut [u8]], mut at: u64, mut chunk: &[u8]) {
    for buf in bufs.iter_mut() {
        let len = buf.len() as u64;
        if at >= len {
            at -= len;
            continue;
        }
        // `at` < the buffer's length.
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

#[cfg(test)]
mod tests;
