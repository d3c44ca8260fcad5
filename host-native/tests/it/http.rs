//! Reading over HTTP from a real nginx on 127.0.0.1, with and without
//! injected faults.

use std::time::{Duration, Instant};

use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::http::{HttpOptions, HttpSource};
use tensorizer_native::{RangeSource, ReadOptions, Reader, WriteOptions, write_file};

use crate::common::vectors;
use crate::servers::{Fault, FaultProxy, Framing, Nginx, OddOrigin};

fn load_all<S: RangeSource>(reader: &Reader<S>) -> tensorizer_native::Result<Vec<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = reader.entries().iter().map(|e| vec![0; e.nbytes() as usize]).collect();
    reader.load_many(bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect())?;
    Ok(bufs)
}

/// A 24 MiB file of 6 tensors (several 8 MiB pieces) served by nginx.
fn big_file(dir: &std::path::Path) -> Vec<Vec<u8>> {
    let tensors: Vec<(TensorSpec, Vec<u8>)> = (0..6u32)
        .map(|i| {
            let data: Vec<u8> = (0..(4u32 << 20)).map(|b| (b.wrapping_mul(2654435761) >> 13) as u8 ^ i as u8).collect();
            let spec =
                TensorSpec::state_dict(format!("w{i}").as_str(), Dtype::from_element(ElementType::U8), vec![4 << 20]);
            (spec, data)
        })
        .collect();
    let input: Vec<(TensorSpec, &[u8])> = tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    write_file(dir.join("big.tensors"), &input, &WriteOptions::default()).unwrap();
    tensors.into_iter().map(|(_, d)| d).collect()
}

#[test]
fn every_vector_loads_over_http() {
    let Some(nginx) = Nginx::serve(&crate::common::vectors_dir()) else { return };
    for v in vectors().iter().filter(|v| !v.name().contains("long")) {
        let local = Reader::open(&v.path, ReadOptions { key: v.key(), ..ReadOptions::default() }).unwrap();
        let options = ReadOptions { key: v.key(), verify_hash: true, num_readers: 4 };
        let remote = Reader::open_uri(&nginx.url(&v.name()), options).unwrap();
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
        let options = HttpOptions { backoff: Duration::from_millis(5), read_all, ..HttpOptions::default() };
        let source = HttpSource::open(&proxy.url("big.tensors"), options).unwrap();
        let reader = Reader::new(source, ReadOptions { verify_hash: true, num_readers: 4, key: None }).unwrap();
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
        let reader = Reader::new(source, ReadOptions { verify_hash: true, num_readers: 4, key: None }).unwrap();
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
    let cases = [(false, 1, 2), (true, 1, 1), (false, 4, 5), (true, 4, 4)].map(|c| (Framing::Plain, c));
    // A server that answers `bytes=0-` with 200: asked again for the first MiB, then as without `read_all`.
    let odd = [(true, 1, 3), (true, 4, 6)].map(|c| (Framing::WholeAs200, c));
    for (framing, (read_all, readers, requests)) in cases.into_iter().chain(odd) {
        let origin = OddOrigin::start(bytes.clone(), framing);
        let source = HttpSource::open(&origin.url(), HttpOptions { read_all, ..HttpOptions::default() }).unwrap();
        let reader = Reader::new(source, ReadOptions { verify_hash: true, num_readers: readers, key: None }).unwrap();
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
        backoff: Duration::from_millis(5),
        read_timeout: Duration::from_millis(300),
        ..HttpOptions::default()
    };
    let started = Instant::now();
    let reader =
        Reader::new(HttpSource::open(&proxy.url("big.tensors"), options).unwrap(), ReadOptions::default()).unwrap();
    load_all(&reader).unwrap();
    assert!(started.elapsed() < Duration::from_secs(60));
    // Every new connection failing, with a single attempt allowed: the error names the URL and range.
    // (The opening response is parked, so the read past it needs a new connection.)
    let proxy = FaultProxy::start(nginx.port, Fault::Status503AfterFirst);
    let once = HttpOptions { attempts: 1, read_all: true, ..HttpOptions::default() };
    let err = HttpSource::open(&proxy.url("big.tensors"), once)
        .and_then(|s| {
            let mut buf = vec![0u8; 1 << 20];
            s.read_exact_at(0, &mut buf)?;
            s.read_exact_at(4 << 20, &mut buf)
        })
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("big.tensors") && text.contains("range") && text.contains("503"), "{text}");
    // A missing object is a plain 404 error, not a hang.
    let err = HttpSource::open(&nginx.url("missing.tensors"), HttpOptions::default()).unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}
