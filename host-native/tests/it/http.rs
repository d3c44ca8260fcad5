//! Reading over HTTP from a real nginx on 127.0.0.1, with and without
//! injected faults.

use std::time::{Duration, Instant};

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::error::StoreErrorKind;
use tensorizer_native::source::TransferLimits;
use tensorizer_native::store::http::{HttpOptions, HttpSource, RetryPolicy};
use tensorizer_native::{Error, RangeSource, ReadOptions, Reader, WriteOptions, write_file};

use crate::common::vectors;
use crate::servers::{Drip, Fault, FaultProxy, Framing, Nginx, OddOrigin, SlowOrigin, within};

fn load_all<S: RangeSource>(reader: &Reader<S>) -> tensorizer_native::Result<Vec<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> =
        reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader.load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())?;
    Ok(bufs)
}

/// A 24 MiB file of 6 tensors (several 8 MiB pieces) served by nginx.
fn big_file(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let tensors: Vec<(TensorSpec, Vec<u8>)> = (0..6u32)
        .map(|i| {
            let data: Vec<u8> = (0..(4u32 << 20))
                .map(|b| (b.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8)
                .collect();
            let spec = TensorSpec::state_dict(
                format!("w{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![4 << 20],
            );
            (spec, data)
        })
        .collect();
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    write_file(dir.join("big.tensors"), &input, &WriteOptions::default()).unwrap();
    tensors.into_iter().map(|(_, d)| d).collect()
}

#[test]
fn every_vector_loads_over_http() {
    let Some(nginx) = Nginx::serve(&crate::common::vectors_dir()) else { return };
    for v in vectors().iter().filter(|v| !v.name().contains("long")) {
        let local =
            Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let options = ReadOptions { key: v.key(), verify_hash: true, num_readers: 4 };
        let remote = tensorizer_native::store::open_reader(&nginx.url(&v.name()), options).unwrap();
        assert_eq!(load_all(&remote).unwrap(), load_all(&local).unwrap(), "{}", v.name());
    }
}

#[test]
fn faults_refetch_only_the_failed_range() {
    let dir = tempfile::tempdir().unwrap();
    let expected = big_file(dir.path());
    let Some(nginx) = Nginx::serve(dir.path()) else { return };
    let faults = [Fault::Status503, Fault::ResetAfter(300_000), Fault::ResetFirstAfter(3 << 20)];
    for (fault, read_all) in faults.into_iter().flat_map(|f| [(f, false), (f, true)]) {
        let proxy = FaultProxy::start(nginx.port, fault);
        let options = HttpOptions {
            retry: RetryPolicy::new(6, Duration::from_millis(5)),
            read_all,
            ..HttpOptions::default()
        };
        let source = HttpSource::open(&proxy.url("big.tensors"), options).unwrap();
        let reader =
            Reader::new(source, ReadOptions { verify_hash: true, num_readers: 4, key: None })
                .unwrap();
        assert_eq!(load_all(&reader).unwrap(), expected);
        assert!(proxy.connections.load(std::sync::atomic::Ordering::Relaxed) > 2);
    }
}

#[test]
fn chunked_answers_and_silently_closed_connections_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let expected = big_file(dir.path());
    let bytes = std::fs::read(dir.path().join("big.tensors")).unwrap();
    for framing in [Framing::Chunked, Framing::SilentClose] {
        let origin = OddOrigin::start(bytes.clone(), framing);
        let source = HttpSource::open(&origin.url(), HttpOptions::default()).unwrap();
        let reader =
            Reader::new(source, ReadOptions { verify_hash: true, num_readers: 4, key: None })
                .unwrap();
        assert_eq!(load_all(&reader).unwrap(), expected);
        // Load again on the same source: its pooled connections are stale now.
        assert_eq!(load_all(&reader).unwrap(), expected);
        assert!(origin.requests.load(std::sync::atomic::Ordering::Relaxed) > 2);
    }
}

#[test]
fn a_load_continues_the_opening_response() {
    let dir = tempfile::tempdir().unwrap();
    let expected = big_file(dir.path());
    let bytes = std::fs::read(dir.path().join("big.tensors")).unwrap();
    let cases =
        [(false, 1, 2), (true, 1, 1), (false, 4, 5), (true, 4, 4)].map(|c| (Framing::Plain, c));
    // A server that answers `bytes=0-` with 200: asked again for the first MiB, then as without `read_all`.
    let odd = [(true, 1, 3), (true, 4, 6)].map(|c| (Framing::WholeAs200, c));
    for (framing, (read_all, readers, requests)) in cases.into_iter().chain(odd) {
        let origin = OddOrigin::start(bytes.clone(), framing);
        let source =
            HttpSource::open(&origin.url(), HttpOptions { read_all, ..HttpOptions::default() })
                .unwrap();
        let reader =
            Reader::new(source, ReadOptions { verify_hash: true, num_readers: readers, key: None })
                .unwrap();
        assert_eq!(load_all(&reader).unwrap(), expected);
        let made = origin.requests.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(made, requests, "read_all {read_all}, {readers} readers");
    }
}

#[test]
fn stalls_and_exhausted_retries_end_in_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    big_file(dir.path());
    let Some(nginx) = Nginx::serve(dir.path()) else { return };
    // A stalled connection is abandoned after the read timeout and retried.
    let proxy = FaultProxy::start(nginx.port, Fault::StallAfter(100_000));
    let options = HttpOptions {
        retry: RetryPolicy::new(6, Duration::from_millis(5)),
        read_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let started = Instant::now();
    let reader = Reader::new(
        HttpSource::open(&proxy.url("big.tensors"), options).unwrap(),
        ReadOptions::default(),
    )
    .unwrap();
    load_all(&reader).unwrap();
    assert!(started.elapsed() < Duration::from_secs(60));
    // Every new connection failing, with a single attempt allowed: the error names the URL and range.
    // (The opening response is parked, so the read past it needs a new connection.)
    let proxy = FaultProxy::start(nginx.port, Fault::Status503AfterFirst);
    let once = HttpOptions {
        retry: RetryPolicy::new(1, Duration::ZERO),
        read_all: true,
        ..HttpOptions::default()
    };
    let err = HttpSource::open(&proxy.url("big.tensors"), once)
        .and_then(|s| {
            let mut buf = vec![0u8; 1 << 20];
            s.read_exact_at(0, &mut buf)?;
            s.read_exact_at(4 << 20, &mut buf)
        })
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("big.tensors") && text.contains("range") && text.contains("503"),
        "{text}"
    );
    // A missing object is a plain 404 error, not a hang.
    let err = HttpSource::open(&nginx.url("missing.tensors"), HttpOptions::default()).unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}

/// An object just over the opening request's 1 MiB, so that a read past
/// that goes to the server.
fn slow_object() -> Vec<u8> {
    (0..(1u32 << 20) + (64 << 10)).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect()
}

/// A minimum rate of 1 KiB/s over 1 s windows, no retry delay.
fn low_limits(attempts: u32) -> HttpOptions {
    HttpOptions {
        retry: RetryPolicy::new(attempts, Duration::from_millis(5)),
        limits: TransferLimits {
            min_rate: 1 << 10,
            rate_window: Duration::from_secs(1),
            deadline: None,
        },
        ..HttpOptions::default()
    }
}

fn timed_out(err: &Error) -> bool {
    err.store_kind() == Some(StoreErrorKind::TimedOut)
}

#[test]
fn a_trickling_server_is_cut_off_by_the_minimum_rate() {
    let object = slow_object();
    let trickle = Drip { bytes: 1, gap: Duration::from_millis(100) };
    // Direct client (Content-Length) and ureq (chunked), for a tensor read and for the opening request.
    for (chunked, slow_from) in [(false, 1 << 20), (true, 1 << 20), (false, 0), (true, 0)] {
        let origin = SlowOrigin::start(object.clone(), trickle, slow_from, chunked);
        let url = origin.url();
        let started = Instant::now();
        let err = within(Duration::from_secs(20), move || {
            let source = HttpSource::open(&url, low_limits(2))?;
            let mut buf = vec![0u8; 32 << 10];
            source.read_exact_at(1 << 20, &mut buf)
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(timed_out(&err), "chunked {chunked}, from {slow_from}: {err:?}");
        assert!(
            text.contains(&origin.url()) && text.contains("range ") && text.contains("min_rate"),
            "{text}"
        );
        // Two attempts of about one window each.
        assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    }
}

#[test]
fn a_slow_but_steady_transfer_is_not_cut_off() {
    let object = slow_object();
    // 2 KiB every 100 ms: about 20 KiB/s, slower than any real link but above 1 KiB/s.
    let steady = Drip { bytes: 2 << 10, gap: Duration::from_millis(100) };
    for chunked in [false, true] {
        let origin = SlowOrigin::start(object.clone(), steady, 1 << 20, chunked);
        let url = origin.url();
        let tail = within(Duration::from_secs(30), move || {
            let source = HttpSource::open(&url, low_limits(1))?;
            let mut buf = vec![0u8; 40 << 10];
            source.read_exact_at(1 << 20, &mut buf).map(|()| buf)
        })
        .unwrap();
        assert!(tail == object[1 << 20..(1 << 20) + (40 << 10)], "chunked {chunked}");
    }
}

#[test]
fn a_read_deadline_ends_a_slow_read_without_retries() {
    let object = slow_object();
    let steady = Drip { bytes: 2 << 10, gap: Duration::from_millis(100) };
    for chunked in [false, true] {
        let origin = SlowOrigin::start(object.clone(), steady, 1 << 20, chunked);
        let url = origin.url();
        let mut options = low_limits(6);
        options.limits.deadline = Some(Duration::from_millis(700));
        let started = Instant::now();
        let err = within(Duration::from_secs(20), move || {
            let source = HttpSource::open(&url, options)?;
            let mut buf = vec![0u8; 60 << 10];
            source.read_exact_at(1 << 20, &mut buf)
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(timed_out(&err) && text.contains("deadline") && text.contains("range "), "{err:?}");
        // Final: not retried six times.
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    }
}
