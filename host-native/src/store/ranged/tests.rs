//! The engine over an in-memory transport whose bodies break.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::*;

/// An object in memory; every body after the first `clean` breaks after
/// `break_after` bytes.
struct Mem {
    data: Mutex<Vec<u8>>,
    validators: Mutex<Validators>,
    break_after: usize,
    clean: u32,
    gets: AtomicU32,
}

struct MemBody {
    bytes: Vec<u8>,
    at: usize,
    break_after: usize,
}

impl Transport for Mem {
    type Body = MemBody;

    const WHO: &'static str = "server";

    const NO_ETAG: &'static str = "the server sends no ETag; Last-Modified";

    fn get(&self, ask: Ask<'_>, _span: &Span<'_>, _pace: Pace) -> Attempt<Response<MemBody>> {
        let sent = self.gets.fetch_add(1, Ordering::Relaxed);
        let break_after = if sent < self.clean { usize::MAX } else { self.break_after };
        let data = self.data.lock().unwrap();
        let len = data.len() as u64;
        let range = match ask {
            Ask::Opening { all: true } => 0..len,
            Ask::Opening { all: false } => 0..len.min(PREFIX),
            Ask::Range { range, .. } => range.start..range.end.min(len),
        };
        let bytes = data[range.start as usize..range.end as usize].to_vec();
        let head =
            Head { range: Some((range, len)), validators: self.validators.lock().unwrap().clone() };
        Attempt::Ok(Response { head, body: MemBody { bytes, at: 0, break_after } })
    }

    fn fill(
        &self,
        body: &mut MemBody,
        bufs: &mut [&mut [u8]],
        done: &mut u64,
        stop: u64,
        span: &Span<'_>,
    ) -> Attempt<()> {
        while *done < stop {
            if body.at >= body.break_after {
                return Attempt::Retry(span.io(io::ErrorKind::ConnectionReset, "reset"));
            }
            let n = ((stop - *done) as usize)
                .min(body.bytes.len() - body.at)
                .min(body.break_after - body.at);
            if n == 0 {
                return Attempt::Final(span.io(io::ErrorKind::UnexpectedEof, "short body"));
            }
            copy_into(bufs, *done, &body.bytes[body.at..body.at + n]);
            body.at += n;
            *done += n as u64;
        }
        Attempt::Ok(())
    }

    fn repace(_body: &mut MemBody, _pace: Pace) {}
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8).collect()
}

/// A policy of `attempts` with no waits.
fn quick(attempts: u32) -> RetryPolicy {
    RetryPolicy {
        attempts,
        backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
        give_up_after: None,
    }
}

fn open(len: usize, break_after: usize, all: bool, attempts: u32) -> Ranged<Mem> {
    open_as(len, (break_after, 0), all, attempts, Some("v1"))
}

/// [`open`] for an object whose ETag is `etag`, last modified "then", whose
/// bodies after the first `clean` break after `break_after` bytes.
fn open_as(
    len: usize,
    (break_after, clean): (usize, u32),
    all: bool,
    attempts: u32,
    etag: Option<&str>,
) -> Ranged<Mem> {
    let validators =
        Validators { etag: etag.map(str::to_string), last_modified: Some("then".into()) };
    let mem = Mem {
        data: Mutex::new(pattern(len)),
        validators: Mutex::new(validators),
        break_after,
        clean,
        gets: AtomicU32::new(0),
    };
    Ranged::open(mem, "mem://o".into(), TransferLimits::default(), quick(attempts), all).unwrap()
}

fn gets(ranged: &Ranged<Mem>) -> u32 {
    ranged.transport.gets.load(Ordering::Relaxed)
}

#[test]
fn a_whole_opening_is_continued_by_the_read_that_needs_it() {
    let len = 3 << 20;
    let ranged = open(len, usize::MAX, true, 1);
    assert_eq!((ranged.len(), gets(&ranged)), (len as u64, 1));
    let mut head = [0u8; 100];
    ranged.read(0, &mut [&mut head]).unwrap();
    let (mut a, mut b) = (vec![0u8; 1 << 20], vec![0u8; len - (1 << 20) - 100]);
    ranged.read(100, &mut [&mut a, &mut b]).unwrap();
    assert_eq!(gets(&ranged), 1);
    assert_eq!([&head[..], &a, &b].concat(), pattern(len));
    // Parked once: a later read asks afresh, and only for what the prefix lacks.
    ranged.read(100, &mut [&mut a, &mut b]).unwrap();
    assert_eq!(gets(&ranged), 2);
    assert_eq!([&head[..], &a, &b].concat(), pattern(len));
}

#[test]
fn broken_bodies_resume_from_what_arrived() {
    // Each body brings 1.5 MiB, at least RESUMABLE_PROGRESS: resumed at
    // once even with a single attempt allowed.
    let len = 4 << 20;
    let ranged = open(len, 3 << 19, true, 1);
    let mut all = vec![0u8; len];
    ranged.read(0, &mut [&mut all]).unwrap();
    assert_eq!(all, pattern(len));
    // The opening's body went on to 1.5 MiB; 2.5 MiB took two more requests.
    assert_eq!(gets(&ranged), 1 + 2);
    // Bodies that bring less use up attempts.
    let ranged = open_as(len, (1 << 19, 1), false, 3, Some("v1"));
    let err = ranged.read(0, &mut [&mut all]).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::RetriesExhausted), "{err}");
    assert!(err.to_string().contains("gave up after 3 failed attempts"), "{err}");
    assert_eq!(gets(&ranged), 1 + 3);
}

#[test]
fn another_version_is_a_changed_error() {
    let len = (1 << 20) + 4096;
    // The ETag at opening; the ETag, date and length the object then has;
    // what the error says.
    type Case = (Option<&'static str>, Option<&'static str>, &'static str, usize, &'static str);
    let cases: [Case; 4] = [
        (Some("v1"), Some("v2"), "then", len, "ETag differs: was \"v1\", is now \"v2\""),
        (Some("v1"), Some("v1"), "then", len + 1, "it was 1052672 bytes long, is now 1052673"),
        (
            None,
            None,
            "later",
            len,
            "the server sends no ETag; Last-Modified was \"then\", is now \"later\"",
        ),
        (None, None, "then", len - 1, "it was 1052672 bytes long, is now 1052671"),
    ];
    for (opened, etag, last_modified, now, what) in cases {
        let ranged = open_as(len, (usize::MAX, 0), false, 1, opened);
        check(&ranged, etag, last_modified, now, what);
    }
    // With an ETag, a new date alone is no change.
    let ranged = open(len, usize::MAX, false, 1);
    ranged.transport.validators.lock().unwrap().last_modified = Some("later".into());
    ranged.read(1 << 20, &mut [&mut [0u8; 10]]).unwrap();
}

/// The object behind `ranged` becomes `now` bytes with these validators:
/// a read past the prefix fails as `Changed`, saying `what`.
fn check(ranged: &Ranged<Mem>, etag: Option<&str>, last_modified: &str, now: usize, what: &str) {
    *ranged.transport.validators.lock().unwrap() =
        Validators { etag: etag.map(str::to_string), last_modified: Some(last_modified.into()) };
    *ranged.transport.data.lock().unwrap() = pattern(now);
    let err = ranged.read(1 << 20, &mut [&mut [0u8; 10]]).unwrap_err();
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed), "{err}");
    assert!(err.to_string().contains(what) && err.to_string().contains("mem://o"), "{err}");
}

#[test]
fn spans_name_their_bytes() {
    let span = Span { name: "http://h/f", start: 10, len: 5 };
    assert!(span.io(io::ErrorKind::Other, "x").to_string().contains("range 10-14: x"));
    let err = span.store(StoreErrorKind::Changed, "y");
    assert_eq!(err.store_kind(), Some(StoreErrorKind::Changed));
    assert!(err.to_string().contains("bytes 10-14"), "{err}");
    // An empty span names one byte; one at the end of u64 does not overflow.
    assert_eq!(Span { name: "n", start: 3, len: 0 }.range(), 3..4);
    assert_eq!(Span { name: "n", start: u64::MAX, len: 9 }.range(), u64::MAX..u64::MAX);
}
