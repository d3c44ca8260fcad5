//! The store layer end to end: one `Location`, `open_source` and
//! `open_sink` for every scheme, and typed errors a caller can act on
//! (not found, permission denied, changed during the read, range not
//! supported, timed out, retries exhausted), each naming the location.

use std::time::{Duration, Instant};

use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::store::http::{HttpOptions, RetryPolicy};
use tensorizer_native::{
    Error, Intent, Location, RangeSource, StoreOptions, open_sink, open_source,
};

use crate::common::vectors;
use crate::s3::Moto;
use crate::servers::{Fault, FaultProxy, Nginx, RedisServer, within};

fn options(intent: Intent) -> StoreOptions {
    let mut options = StoreOptions::default();
    options.intent = intent;
    options.http = HttpOptions {
        retry: RetryPolicy::new(2, Duration::from_millis(5)),
        ..HttpOptions::default()
    };
    options
}

fn open(uri: &str, options: &StoreOptions) -> Result<Box<dyn RangeSource>, Error> {
    open_source(&Location::parse(uri)?, options)
}

fn kind_of(result: Result<impl Sized, Error>) -> (Option<StoreErrorKind>, String) {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => (e.store_kind(), e.to_string()),
    }
}

/// A file whose first MiB the opening request keeps, with bytes after it.
fn two_mib() -> Vec<u8> {
    (0..2u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect()
}

#[test]
fn http_failures_are_typed_and_name_the_url() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.bin"), two_mib()).unwrap();
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    std::fs::write(dir.path().join("secret/f.bin"), b"x").unwrap();
    let root = dir.path().display().to_string();
    let Some(nginx) = Nginx::serve_block(&|port| {
        format!(
            "listen 127.0.0.1:{port}; root {root}; location / {{ }} location /secret/ {{ deny all; }} \
             location /norange/ {{ alias {root}/; max_ranges 0; }}"
        )
    }) else {
        return;
    };
    let peek = options(Intent::Peek);
    let (kind, text) = kind_of(open(&nginx.url("missing.bin"), &peek));
    assert_eq!(kind, Some(StoreErrorKind::NotFound), "{text}");
    assert!(
        text.contains(&nginx.url("missing.bin"))
            && text.contains("404")
            && text.contains("bytes 0-"),
        "{text}"
    );
    let (kind, text) = kind_of(open(&nginx.url("secret/f.bin"), &peek));
    assert_eq!(kind, Some(StoreErrorKind::PermissionDenied), "{text}");
    let (kind, text) = kind_of(open(&nginx.url("norange/f.bin"), &peek));
    assert_eq!(kind, Some(StoreErrorKind::RangeNotSupported), "{text}");
    assert!(text.contains("ignores Range"), "{text}");

    // Replaced between opening and reading past the opening request: the ETag changed.
    let source = open(&nginx.url("f.bin"), &peek).unwrap();
    std::fs::write(dir.path().join("f.bin"), &two_mib()[..(2 << 20) - 1]).unwrap();
    let mut buf = vec![0u8; 4096];
    let (kind, text) = kind_of(source.read_exact_at(1 << 20, &mut buf));
    assert_eq!(kind, Some(StoreErrorKind::Changed), "{text}");
    assert!(text.contains(&format!("(bytes {}-{})", 1 << 20, (1 << 20) + 4095)), "{text}");
}

/// Writes `bytes` at `path` with modification time `secs` after the epoch.
fn write_dated(path: &std::path::Path, bytes: &[u8], secs: u64) {
    std::fs::write(path, bytes).unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
}

#[test]
fn without_an_etag_the_date_and_the_size_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    let root = dir.path().display().to_string();
    // nginx with `etag off`: ranges and Last-Modified, no ETag.
    let Some(nginx) =
        Nginx::serve_block(&|port| format!("listen 127.0.0.1:{port}; root {root}; etag off;"))
    else {
        return;
    };
    let url = nginx.url("f.bin");
    let (old, new) = (two_mib(), two_mib().iter().map(|b| b ^ 0xff).collect::<Vec<u8>>());
    const THEN: u64 = 1_700_000_000;
    let mut buf = vec![0u8; 4096];
    // Each case: the object at opening, then swapped before a read past
    // the opening request's first MiB.
    let cases: [(&[u8], u64, Option<&str>); 3] = [
        (&new, THEN + 10, Some("Last-Modified was")),
        (&new[..(2 << 20) - 1], THEN, Some("bytes long, is now")),
        // Same size, same date: nothing tells the versions apart.
        (&new, THEN, None),
    ];
    for (swapped, secs, changed) in cases {
        write_dated(&path, &old, THEN);
        let source = open(&url, &options(Intent::Peek)).unwrap();
        write_dated(&path, swapped, secs);
        match changed {
            Some(what) => {
                let (kind, text) = kind_of(source.read_exact_at(1 << 20, &mut buf));
                assert_eq!(kind, Some(StoreErrorKind::Changed), "{text}");
                assert!(text.contains(&url) && text.contains(what), "{text}");
            }
            None => {
                source.read_exact_at(1 << 20, &mut buf).unwrap();
                assert_eq!(
                    buf,
                    new[1 << 20..(1 << 20) + 4096],
                    "undetectable without hashes (spec 14)"
                );
            }
        }
    }
}

#[test]
fn transient_failures_end_in_retries_exhausted_or_timed_out() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.bin"), two_mib()).unwrap();
    let Some(nginx) = Nginx::serve(dir.path()) else { return };
    // Every connection but the first answers 503.
    let proxy = FaultProxy::start(nginx.port, Fault::Status503AfterFirst);
    // (The opening response stays parked for a read from 1 MiB: this read needs a new connection.)
    let source = open(&proxy.url("f.bin"), &options(Intent::ReadAll)).unwrap();
    let mut buf = vec![0u8; 4096];
    let (kind, text) = kind_of(source.read_exact_at(3 << 19, &mut buf));
    assert_eq!(kind, Some(StoreErrorKind::RetriesExhausted), "{text}");
    assert!(text.contains("gave up after 2 failed attempts") && text.contains("503"), "{text}");

    // A server that accepts and never answers: each attempt stalls until the read timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/f.bin", silent.local_addr().unwrap().port());
    let mut stalling = options(Intent::Peek);
    stalling.http.read_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let (kind, text) = within(Duration::from_secs(30), move || kind_of(open(&url, &stalling)));
    assert_eq!(kind, Some(StoreErrorKind::TimedOut), "{text}");
    assert!(text.contains("gave up after 2 failed attempts"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    drop(silent);
}

#[test]
fn s3_missing_objects_and_buckets_are_not_found() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("here");
    let mut options = options(Intent::ReadAll);
    options.s3 = moto.options(moto.port);
    let (kind, text) = kind_of(open("s3://here/missing.tensors", &options));
    assert_eq!(kind, Some(StoreErrorKind::NotFound), "{text}");
    assert!(text.starts_with("s3://here/missing.tensors") && !text.contains("Signature"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let sink = open_sink(&Location::parse("s3://nobucket/f").unwrap(), &options).unwrap();
    let (kind, text) = kind_of(sink.put_file(&file));
    assert_eq!(kind, Some(StoreErrorKind::NotFound), "{text}");
    assert!(text.contains("NoSuchBucket"), "{text}");

    // A round trip through the sink and the source.
    let v = vectors().into_iter().find(|v| v.name() == "v1_module_root.tensors").unwrap();
    let sink = open_sink(&Location::parse("s3://here/v.tensors").unwrap(), &options).unwrap();
    sink.put_file(&v.path).unwrap();
    let source = open("s3://here/v.tensors", &options).unwrap();
    let mut bytes = vec![0u8; source.len() as usize];
    source.read_exact_at(0, &mut bytes).unwrap();
    assert!(bytes == std::fs::read(&v.path).unwrap());
}

#[test]
fn redis_sinks_and_sources_go_through_one_location() {
    let Some(redis) = RedisServer::start() else { return };
    let v = vectors().into_iter().find(|v| v.name() == "v1_module_root.tensors").unwrap();
    let uri = redis.uri("store-test");
    let location = Location::parse(&uri).unwrap();
    let (kind, text) = kind_of(open(&uri, &StoreOptions::default()));
    assert_eq!(kind, Some(StoreErrorKind::NotFound), "{text}");
    open_sink(&location, &StoreOptions::default()).unwrap().put_file(&v.path).unwrap();
    let (kind, text) =
        kind_of(open_sink(&location, &StoreOptions::default()).unwrap().put_file(&v.path));
    assert_eq!(kind, Some(StoreErrorKind::AlreadyExists), "{text}");
    let source = open(&uri, &StoreOptions::default()).unwrap();
    let original = std::fs::read(&v.path).unwrap();
    // Redis keeps the file without its 8-byte end marker.
    assert_eq!(source.len() as usize, original.len() - 8);
}

#[test]
fn unsupported_locations_say_so() {
    let http = Location::parse("http://127.0.0.1:9/f").unwrap();
    assert!(matches!(open_sink(&http, &StoreOptions::default()), Err(Error::Unsupported { .. })));
    #[cfg(not(feature = "cloud"))]
    {
        let err = open("gs://bucket/object", &StoreOptions::default()).err().unwrap().to_string();
        assert!(err.contains("build with feature cloud"), "{err}");
    }
    let err = Location::parse("ftp://h/f").unwrap_err().to_string();
    assert!(err.contains("unknown scheme ftp://"), "{err}");
}
