//! The staging ring (`tensorizer_native::device::staging`) against the host-memory
//! stand-in for a GPU copy engine: the same bytes as `Reader::load_into`
//! for every vector and for tensors split across buffers, hashes checked,
//! memory bounded by the ring, and no buffer refilled while a copy out of
//! it is in flight. The CUDA engine's own test skips without a driver.

use std::time::Duration;

use tensorizer_core::write::WriterOptions;
use tensorizer_core::{Dtype, ElementType, TensorSpec};
use tensorizer_native::device::staging::{HostEngine, StagingOptions, load_staged};
use tensorizer_native::store::redis::{RedisOptions, RedisSource, write_redis};
use tensorizer_native::store::s3;
use tensorizer_native::{
    Error, MemorySource, RangeSource, ReadOptions, Reader, WriteOptions, write_file,
};

use crate::common::{vectors, write_tensors};

/// Every tensor of `reader` through `Reader::load_into`.
fn expected<S: RangeSource>(reader: &Reader<S>) -> Vec<Vec<u8>> {
    (0..reader.entries().len())
        .map(|i| {
            let mut out = vec![0xAA; reader.entries()[i].nbytes() as usize];
            reader.load_into(i, &mut out).unwrap();
            out
        })
        .collect()
}

/// Every tensor of `reader` through the ring; returns the outputs and the engine's counters.
fn staged<S: RangeSource>(
    reader: &Reader<S>,
    options: &StagingOptions,
    latency: Duration,
) -> (Vec<Vec<u8>>, Stats) {
    let all: Vec<usize> = (0..reader.entries().len()).collect();
    let sizes: Vec<u64> = reader.entries().iter().map(|e| e.nbytes()).collect();
    let engine = HostEngine::new(&sizes).unwrap().with_latency(latency);
    load_staged(reader, &all, &engine, options).unwrap();
    let stats = Stats {
        buffers: engine.buffers_allocated(),
        bytes: engine.buffer_bytes_allocated(),
        blocked: engine.blocked_waits(),
        violations: engine.violations(),
    };
    (engine.into_outputs(), stats)
}

#[derive(Debug)]
struct Stats {
    buffers: usize,
    bytes: usize,
    blocked: usize,
    violations: usize,
}

fn ring(buffers: usize, buffer_len: usize, threads: usize) -> StagingOptions {
    StagingOptions { buffers, buffer_len, threads, verify_hash: true }
}

#[test]
fn every_vector_matches_load_into() {
    for v in vectors() {
        if v.name().contains("long") {
            continue; // a 4 GiB meta tensor: covered by the core tests
        }
        let options = ReadOptions { num_readers: 3, verify_hash: true, key: v.key() };
        let reader = Reader::open(&v.path, options).unwrap();
        let want = expected(&reader);
        // Encrypted tensors split only at chunk boundaries: buffers shorter
        // than a chunk grow to one (spec §19.2).
        for (buffers, len, threads) in [(2, 1 << 20, 1), (3, 61, 3), (5, 4096, 4)] {
            let (got, stats) = staged(&reader, &ring(buffers, len, threads), Duration::ZERO);
            assert_eq!(got, want, "{} with {buffers} x {len} bytes, {threads} threads", v.name());
            assert!(stats.buffers <= buffers && stats.violations == 0, "{stats:?}");
        }
    }
}

/// A file with one 12 MiB tensor, a 3 MiB one and many small ones.
fn write_model(
    dir: &std::path::Path,
    encrypted: bool,
) -> (std::path::PathBuf, Option<tensorizer_core::KeySource>) {
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for (name, n) in [("big", 3u32 << 20), ("mid", 3 << 18)] {
        let data: Vec<u8> = (0..n).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
        tensors.push((
            TensorSpec::state_dict(name, Dtype::from_element(ElementType::F32), vec![u64::from(n)]),
            data,
        ));
    }
    for i in 0..200u32 {
        let data: Vec<u8> = (0..i % 23).flat_map(|v| (v as u16 ^ i as u16).to_le_bytes()).collect();
        let spec = TensorSpec::state_dict(
            format!("small.{i}").as_str(),
            Dtype::from_element(ElementType::BF16),
            vec![u64::from(i % 23)],
        );
        tensors.push((spec, data));
    }
    let path = dir.join(format!("model{encrypted}.tensors"));
    let key = tensorizer_core::crypto::Key::from_bytes([9; 32]);
    let options = WriteOptions {
        layout: WriterOptions { encryption: encrypted.then_some(None), ..WriterOptions::default() },
        key: encrypted.then(|| key.clone()),
        num_writers: 2,
    };
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    write_file(&path, &input, &options).unwrap();
    (path, encrypted.then(|| tensorizer_core::KeySource::Key(key)))
}

#[test]
fn big_tensors_split_across_buffers_and_small_ones_share() {
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let (path, key) = write_model(dir.path(), encrypted);
        let reader =
            Reader::open(&path, ReadOptions { num_readers: 4, verify_hash: true, key }).unwrap();
        let want = expected(&reader);
        // 4 MiB buffers: the 12 MiB tensor takes at least three, and with
        // encryption every piece is whole 2 MiB chunks.
        for threads in [1, 2, 4] {
            let (got, stats) = staged(&reader, &ring(3, 4 << 20, threads), Duration::ZERO);
            assert!(got == want, "encrypted={encrypted}, {threads} threads: bytes differ");
            // (Each buffer has two 4 KiB blocks of room for reads around
            // the page cache.)
            assert_eq!(
                (stats.buffers, stats.bytes),
                (3, 3 * ((4 << 20) + 8192)),
                "memory is the ring: {stats:?}"
            );
        }
    }
}

#[test]
fn a_cold_file_stages_the_same_bytes_around_the_cache() {
    // 90 MiB in tensors of odd lengths, so most fills start and end off
    // a 4 KiB block; encrypted too (pieces at chunk boundaries).
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for i in 0..9u32 {
        let n = (5 << 19) + 7 * i as usize + 1;
        let data: Vec<u8> = (0..n as u32).flat_map(|v| (v ^ (i << 9)).to_le_bytes()).collect();
        tensors.push((
            TensorSpec::state_dict(
                format!("w{i}").as_str(),
                Dtype::from_element(ElementType::F32),
                vec![n as u64],
            ),
            data,
        ));
        let small: Vec<u8> = (0..3 * i + 1).map(|v| v as u8).collect();
        tensors.push((
            TensorSpec::state_dict(
                format!("b{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![u64::from(3 * i + 1)],
            ),
            small,
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let path = dir.path().join(format!("cold{encrypted}.tensors"));
        let key = write_tensors(
            &path,
            &tensors,
            encrypted.then(|| tensorizer_core::crypto::Key::from_bytes([3; 32])),
        );
        crate::cold::evict(&path);
        let reader =
            Reader::open(&path, ReadOptions { num_readers: 3, verify_hash: true, key }).unwrap();
        // Where O_DIRECT is not allowed (tmpfs) the ring reads through the
        // cache, and the bytes must be the same all the same.
        let direct = reader.source().is_cold();
        for (buffers, len) in [(4, 4 << 20), (3, 2 << 20)] {
            let (got, stats) = staged(&reader, &ring(buffers, len, 3), Duration::from_millis(1));
            for ((i, got), (spec, want)) in got.iter().enumerate().zip(&tensors) {
                assert!(
                    got == want,
                    "encrypted={encrypted}, {buffers} x {len}: tensor {i} ({spec:?}) differs"
                );
            }
            assert_eq!(stats.violations, 0, "{stats:?}");
            if direct {
                assert!(reader.source().is_cold(), "the ring read around the page cache");
            }
        }
    }
}

/// An in-memory file that says it is cold, and checks that every read
/// around the page cache keeps [`RangeSource::read_uncached_at`]'s
/// contract: offset, length and address on 4 KiB blocks, starting inside
/// the file.
struct ColdMemory {
    inner: MemorySource,
    uncached_reads: std::sync::atomic::AtomicUsize,
}

impl RangeSource for ColdMemory {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> tensorizer_native::Result<()> {
        self.inner.read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        "cold.tensors"
    }

    fn is_cold(&self) -> bool {
        true
    }

    fn read_uncached_at(&self, offset: u64, buf: &mut [u8]) -> tensorizer_native::Result<()> {
        assert_eq!(offset % 4096, 0, "offset {offset}");
        assert_eq!(buf.len() % 4096, 0, "length {}", buf.len());
        assert_eq!(buf.as_ptr() as usize % 4096, 0, "address");
        assert!(offset < self.len(), "a read starting past the end");
        self.uncached_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = usize::try_from(self.len() - offset).unwrap().min(buf.len());
        self.inner.read_exact_at(offset, &mut buf[..n])
    }
}

#[test]
fn reads_around_the_cache_keep_their_contract_and_land_at_their_shift() {
    // Any machine (no O_DIRECT needed): the ring's block arithmetic.
    let dir = tempfile::tempdir().unwrap();
    let mut tensors: Vec<(TensorSpec, Vec<u8>)> = Vec::new();
    for i in 0..5u32 {
        let n = (1 << 20) + 13 * i as usize + 3;
        let data: Vec<u8> =
            (0..n as u32).flat_map(|v| (v.wrapping_mul(2654435761) ^ i).to_le_bytes()).collect();
        tensors.push((
            TensorSpec::state_dict(
                format!("w{i}").as_str(),
                Dtype::from_element(ElementType::F32),
                vec![n as u64],
            ),
            data,
        ));
    }
    for encrypted in [false, true] {
        let path = dir.path().join(format!("m{encrypted}.tensors"));
        let key = write_tensors(
            &path,
            &tensors,
            encrypted.then(|| tensorizer_core::crypto::Key::from_bytes([5; 32])),
        );
        let source = ColdMemory {
            inner: MemorySource::new(std::fs::read(&path).unwrap(), "cold.tensors"),
            uncached_reads: Default::default(),
        };
        let reader =
            Reader::new(source, ReadOptions { num_readers: 3, verify_hash: true, key }).unwrap();
        for (buffers, len) in [(4, 4 << 20), (3, 3 << 20), (5, 1 << 20)] {
            let before = reader.source().uncached_reads.load(std::sync::atomic::Ordering::Relaxed);
            let (got, stats) = staged(&reader, &ring(buffers, len, 3), Duration::ZERO);
            for (i, (got, (_, want))) in got.iter().zip(&tensors).enumerate() {
                assert!(
                    got == want,
                    "encrypted={encrypted}, {buffers} x {len}: tensor {i} differs"
                );
            }
            assert_eq!(stats.violations, 0, "{stats:?}");
            let after = reader.source().uncached_reads.load(std::sync::atomic::Ordering::Relaxed);
            assert!(after > before, "the load read around the cache");
        }
    }
}

#[test]
fn a_verified_load_gets_long_buffers() {
    use tensorizer_native::device::staging::{DEFAULT_BUFFER_LEN, LONG_BUFFER_LEN};
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), false);
    let reader =
        Reader::open(&path, ReadOptions { num_readers: 3, verify_hash: false, key }).unwrap();
    let plain = StagingOptions::for_reader(&reader);
    assert_eq!(
        (plain.buffers, plain.buffer_len, plain.verify_hash),
        (5, DEFAULT_BUFFER_LEN, false)
    );
    let verified = StagingOptions::for_load(&reader, true);
    assert_eq!((verified.buffer_len, verified.verify_hash), (LONG_BUFFER_LEN, true));
}

#[test]
fn memory_is_bounded_by_the_ring_not_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), false);
    let reader =
        Reader::open(&path, ReadOptions { num_readers: 2, verify_hash: true, key }).unwrap();
    let model: u64 = reader.entries().iter().map(|e| e.data_length).sum();
    let (got, stats) = staged(&reader, &ring(2, 1 << 20, 2), Duration::ZERO);
    assert_eq!(got, expected(&reader));
    assert_eq!(stats.buffers, 2);
    assert!(
        (stats.bytes as u64) * 6 < model,
        "{} bytes of buffers for a {model}-byte model",
        stats.bytes
    );
}

#[test]
fn slow_copies_make_buffers_wait_and_nothing_is_overwritten_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), true);
    let reader =
        Reader::open(&path, ReadOptions { num_readers: 3, verify_hash: true, key }).unwrap();
    let (got, stats) = staged(&reader, &ring(2, 2 << 20, 3), Duration::from_millis(15));
    assert!(got == expected(&reader), "bytes differ");
    assert!(stats.blocked > 0, "a 2-buffer ring with slow copies must wait: {stats:?}");
    assert_eq!(stats.violations, 0, "{stats:?}");
}

#[test]
fn corruption_is_detected_with_verify_on() {
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let (path, key) = write_model(dir.path(), encrypted);
        let reader = Reader::open(&path, ReadOptions::default()).unwrap();
        // Flip a byte in the middle of the 12 MiB tensor (its third piece).
        let big = &reader.entries()[0];
        let mut bytes = std::fs::read(&path).unwrap();
        let at = (big.data_offset + (9 << 20)) as usize;
        bytes[at] ^= 0x10;
        let options = ReadOptions { num_readers: 2, verify_hash: true, key: key.clone() };
        let reader = Reader::new(MemorySource::new(bytes.clone(), "corrupt"), options).unwrap();
        let sizes: Vec<u64> = reader.entries().iter().map(|e| e.nbytes()).collect();
        let engine = HostEngine::new(&sizes).unwrap();
        let all: Vec<usize> = (0..sizes.len()).collect();
        let err = load_staged(&reader, &all, &engine, &ring(3, 4 << 20, 2)).unwrap_err();
        assert!(err.is_verification_failure(), "{err}");
        assert!(err.to_string().contains("big"), "{err}");
        if !encrypted {
            // Without verification a plain file loads the flipped byte.
            let engine = HostEngine::new(&sizes).unwrap();
            let options = StagingOptions { verify_hash: false, ..ring(3, 4 << 20, 2) };
            load_staged(&reader, &all, &engine, &options).unwrap();
            assert_ne!(engine.into_outputs()[0], expected_plain(&path)[0]);
        }
    }
}

/// `path`'s bytes with one bit flipped at `at` bytes into tensor `i`'s data.
fn flipped(path: &std::path::Path, i: usize, at: u64) -> Vec<u8> {
    let data_offset = Reader::open(path, ReadOptions::default()).unwrap().entries()[i].data_offset;
    let mut bytes = std::fs::read(path).unwrap();
    bytes[(data_offset + at) as usize] ^= 0x04;
    bytes
}

/// Loads every tensor of `bytes` through a ring whose copies take a while;
/// returns the error and the engine's violation count.
fn failing_load(
    bytes: Vec<u8>,
    key: Option<tensorizer_core::KeySource>,
    verify_hash: bool,
) -> (Error, usize, Vec<Vec<u8>>) {
    let options = ReadOptions { num_readers: 3, verify_hash, key };
    let reader = Reader::new(MemorySource::new(bytes, "tampered.tensors"), options).unwrap();
    let sizes: Vec<u64> = reader.entries().iter().map(|e| e.nbytes()).collect();
    let engine = HostEngine::new(&sizes).unwrap().with_latency(Duration::from_millis(5));
    let all: Vec<usize> = (0..sizes.len()).collect();
    let options = StagingOptions { verify_hash, ..ring(2, 2 << 20, 3) };
    let err =
        load_staged(&reader, &all, &engine, &options).expect_err("a tampered file must not load");
    let violations = engine.violations();
    (err, violations, engine.into_outputs())
}

#[test]
fn a_tampered_encrypted_chunk_is_a_decryption_error_with_or_without_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), true);
    // The fourth 2 MiB chunk of the 12 MiB tensor, and a small tensor.
    for (i, at) in [(0usize, (6 << 20) + 17), (5, 3)] {
        for verify in [false, true] {
            let (err, violations, _) = failing_load(flipped(&path, i, at), key.clone(), verify);
            assert!(
                matches!(err.format_error(), Some(tensorizer_core::Error::Decryption)),
                "tensor {i}, verify={verify}: {err}"
            );
            let msg = err.to_string();
            assert!(msg.contains("tampered.tensors"), "the error names the file: {msg}");
            let name = if i == 0 { "big" } else { "small.3" };
            assert!(msg.contains(name), "the error names the tensor: {msg}");
            assert_eq!(
                violations, 0,
                "no buffer refilled while a copy was in flight after the error"
            );
        }
    }
}

#[test]
fn a_hash_mismatch_is_a_typed_error_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_model(dir.path(), false);
    // A bit of the second piece of the 12 MiB tensor (2 MiB buffers).
    let (err, violations, _) = failing_load(flipped(&path, 0, (2 << 20) + 5), None, true);
    assert!(
        matches!(err.format_error(), Some(tensorizer_core::Error::HashMismatch { .. })),
        "{err}"
    );
    assert!(err.is_verification_failure());
    assert!(err.to_string().contains("big"), "{err}");
    assert_eq!(violations, 0);
    // A small tensor sharing a buffer with others.
    let (err, _, _) = failing_load(flipped(&path, 9, 0), None, true);
    assert!(
        matches!(err.format_error(), Some(tensorizer_core::Error::HashMismatch { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("small.7"), "{err}");
}

#[test]
fn a_passphrase_vector_and_a_key_vector_stage_over_http_verified() {
    let encrypted: Vec<_> =
        vectors().into_iter().filter(|v| v.key().is_some() && !v.name().contains("long")).collect();
    assert!(!encrypted.is_empty());
    let dir = tempfile::tempdir().unwrap();
    for v in &encrypted {
        std::fs::copy(&v.path, dir.path().join(v.name())).unwrap();
    }
    let Some(nginx) = crate::servers::Nginx::serve(dir.path()) else { return };
    for v in &encrypted {
        let options = ReadOptions { num_readers: 2, verify_hash: true, key: v.key() };
        let remote =
            tensorizer_native::store::open_reader(&nginx.url(&v.name()), options.clone()).unwrap();
        let (got, _) = staged(&remote, &ring(2, 2 << 20, 2), Duration::ZERO);
        assert!(got == expected(&Reader::open(&v.path, options).unwrap()), "{}", v.name());
    }
}

#[test]
fn over_s3_the_ring_gives_the_same_bytes_encrypted_and_verified() {
    let Some(moto) = crate::s3::Moto::start() else { return };
    moto.create_bucket("staging");
    let options = moto.options(moto.port);
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), true);
    let uri = "s3://staging/model.tensors";
    s3::upload(&path, uri, &options).unwrap();
    let read = ReadOptions { num_readers: 3, verify_hash: true, key };
    let remote = Reader::new(s3::open(uri, &options).unwrap(), read.clone()).unwrap();
    let (got, stats) = staged(&remote, &ring(3, 4 << 20, 3), Duration::from_millis(2));
    assert!(got == expected(&Reader::open(&path, read).unwrap()), "bytes differ");
    assert_eq!(stats.violations, 0);
}

#[test]
fn over_redis_the_ring_gives_the_same_bytes_encrypted_and_verified() {
    let Some(server) = crate::servers::RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), true);
    let read = ReadOptions { num_readers: 3, verify_hash: true, key };
    let local = Reader::open(&path, read.clone()).unwrap();
    let uri = server.uri("staging/model");
    write_redis(&uri, &local, false).unwrap();
    let remote =
        Reader::new(RedisSource::open(&uri, RedisOptions::default()).unwrap(), read).unwrap();
    let (got, stats) = staged(&remote, &ring(3, 4 << 20, 3), Duration::ZERO);
    assert!(got == expected(&local), "bytes differ");
    assert_eq!(stats.violations, 0);
}

fn expected_plain(path: &std::path::Path) -> Vec<Vec<u8>> {
    expected(&Reader::open(path, ReadOptions::default()).unwrap())
}

#[test]
fn a_subset_in_any_order_lands_in_its_destinations() {
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), false);
    let reader =
        Reader::open(&path, ReadOptions { num_readers: 2, verify_hash: true, key }).unwrap();
    let want = expected(&reader);
    let pick = [150usize, 0, 7, 1, 42];
    let sizes: Vec<u64> = pick.iter().map(|&i| reader.entries()[i].nbytes()).collect();
    let engine = HostEngine::new(&sizes).unwrap();
    load_staged(&reader, &pick, &engine, &ring(2, 1 << 20, 2)).unwrap();
    for (got, &i) in engine.into_outputs().iter().zip(&pick) {
        assert_eq!(got, &want[i], "tensor {i}");
    }
    let engine = HostEngine::new(&sizes).unwrap();
    assert!(load_staged(&reader, &[10_000], &engine, &ring(2, 1 << 20, 2)).is_err());
}

#[test]
fn over_http_the_ring_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, key) = write_model(dir.path(), true);
    let Some(nginx) = crate::servers::Nginx::serve(dir.path()) else { return };
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let options = ReadOptions { num_readers: 3, verify_hash: true, key: key.clone() };
    let remote = tensorizer_native::store::open_reader(&nginx.url(&name), options).unwrap();
    let local =
        Reader::open(&path, ReadOptions { num_readers: 3, verify_hash: true, key }).unwrap();
    let (got, stats) = staged(&remote, &ring(3, 4 << 20, 3), Duration::ZERO);
    assert!(got == expected(&local), "bytes differ");
    assert_eq!(stats.violations, 0);
}

/// CUDA device 0, or `None` (with the reason printed) where there is no
/// driver or device; with `TZR_REQUIRE_GPU` set (tests/gpu-tests.sh) a
/// missing device fails the test instead.
#[cfg(feature = "cuda")]
fn cuda_device_or_skip(what: &str) -> Option<tensorizer_native::device::cuda::Device> {
    match tensorizer_native::device::cuda::Device::open(0) {
        Ok(d) => Some(d),
        Err(e) if std::env::var_os("TZR_REQUIRE_GPU").is_some() => {
            panic!("TZR_REQUIRE_GPU is set: {e}")
        }
        Err(e) => {
            eprintln!("skipping {what}: {e}");
            None
        }
    }
}

/// Loads a vector into device memory and copies it back; skips (with the
/// reason) where no CUDA driver or device is present.
#[cfg(feature = "cuda")]
#[test]
fn cuda_round_trip_or_skip() {
    use tensorizer_native::device::cuda;
    let Some(device) = cuda_device_or_skip("the CUDA round trip") else { return };
    for v in vectors() {
        if v.name().contains("long") {
            continue;
        }
        let reader =
            Reader::open(&v.path, ReadOptions { num_readers: 2, verify_hash: true, key: v.key() })
                .unwrap();
        let want = expected(&reader);
        let all: Vec<usize> = (0..want.len()).collect();
        let options = StagingOptions { buffer_len: 4 << 20, ..StagingOptions::for_reader(&reader) };
        let loaded = cuda::load_to_device(&device, &reader, &all, &options).unwrap();
        for (i, want) in want.iter().enumerate() {
            assert_eq!(&loaded.to_host(i).unwrap(), want, "{} tensor {i}", v.name());
        }
    }
}

/// Tampered files fail with the same typed errors on the device path, and
/// the device and its staging pool stay usable afterwards.
#[cfg(feature = "cuda")]
#[test]
fn cuda_tampered_files_are_typed_errors_or_skip() {
    use tensorizer_native::device::cuda;
    let Some(device) = cuda_device_or_skip("the CUDA tampering test") else { return };
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let (path, key) = write_model(dir.path(), encrypted);
        let read = ReadOptions { num_readers: 3, verify_hash: true, key };
        let bytes = flipped(&path, 0, (6 << 20) + 17);
        let reader =
            Reader::new(MemorySource::new(bytes, "tampered.tensors"), read.clone()).unwrap();
        let all: Vec<usize> = (0..reader.entries().len()).collect();
        let options = StagingOptions { buffer_len: 4 << 20, ..StagingOptions::for_reader(&reader) };
        let err = cuda::load_to_device(&device, &reader, &all, &options)
            .err()
            .expect("a tampered file must not load");
        let want_decryption =
            matches!(err.format_error(), Some(tensorizer_core::Error::Decryption));
        let want_hash =
            matches!(err.format_error(), Some(tensorizer_core::Error::HashMismatch { .. }));
        assert!(
            if encrypted { want_decryption } else { want_hash },
            "encrypted={encrypted}: {err}"
        );
        // The intact file loads right after, through the same pool.
        let reader = Reader::open(&path, read).unwrap();
        let want = expected(&reader);
        let loaded = cuda::load_to_device(&device, &reader, &all, &options).unwrap();
        for (j, want) in want.iter().enumerate() {
            assert!(&loaded.to_host(j).unwrap() == want, "encrypted={encrypted}: tensor {j}");
        }
    }
}

/// A file of `TZR_STAGING_MIB` MiB (default 256) in 64 tensors.
fn throughput_file() -> (tempfile::TempDir, std::path::PathBuf, usize) {
    let mib: usize =
        std::env::var("TZR_STAGING_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tensors");
    let per = (mib << 20) / 64;
    let data: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; per]).collect();
    let input: Vec<(TensorSpec, &[u8])> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let spec = TensorSpec::state_dict(
                format!("w{i}").as_str(),
                Dtype::from_element(ElementType::U8),
                vec![per as u64],
            );
            (spec, d.as_slice())
        })
        .collect();
    write_file(&path, &input, &WriteOptions::default()).unwrap();
    drop(data);
    (dir, path, mib)
}

/// Throughput of the ring with the host engine beside `Reader::load_many`,
/// from page cache: `TZR_STAGING_MIB=512 cargo test --release -p
/// tensorizer-native --test it staging_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn staging_throughput() {
    let (_dir, path, mib) = throughput_file();
    for verify in [false, true] {
        let reader =
            Reader::open(&path, ReadOptions { verify_hash: verify, ..ReadOptions::default() })
                .unwrap();
        let sizes: Vec<u64> = reader.entries().iter().map(|e| e.nbytes()).collect();
        let all: Vec<usize> = (0..sizes.len()).collect();
        let gbs = |t: std::time::Duration| (mib << 20) as f64 / t.as_secs_f64() / 1e9;
        for _ in 0..2 {
            let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n as usize]).collect();
            let t = std::time::Instant::now();
            reader
                .load_many(
                    bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect(),
                )
                .unwrap();
            let direct = t.elapsed();
            let engine = HostEngine::new(&sizes).unwrap();
            let t = std::time::Instant::now();
            load_staged(&reader, &all, &engine, &StagingOptions::for_reader(&reader)).unwrap();
            let staged = t.elapsed();
            println!(
                "{mib} MiB, verify={verify}, {} readers: load_many {:.2} GB/s, staging ring (host engine) {:.2} GB/s",
                reader.options().num_readers,
                gbs(direct),
                gbs(staged)
            );
        }
    }
}

/// Device load throughput (one allocation carved into views), from page
/// cache: `TZR_STAGING_MIB=1024 cargo test --release -p tensorizer-native
/// --features cuda --test it cuda_throughput -- --ignored --nocapture`.
#[cfg(feature = "cuda")]
#[test]
#[ignore = "a measurement, not a check"]
fn cuda_throughput() {
    use tensorizer_native::device::cuda;
    let Some(device) = cuda_device_or_skip("the CUDA throughput measurement") else { return };
    let (_dir, path, mib) = throughput_file();
    for verify in [false, true] {
        let reader =
            Reader::open(&path, ReadOptions { verify_hash: verify, ..ReadOptions::default() })
                .unwrap();
        let all: Vec<usize> = (0..reader.entries().len()).collect();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let loaded =
                cuda::load_to_device(&device, &reader, &all, &StagingOptions::for_reader(&reader))
                    .unwrap();
            let took = t.elapsed();
            println!(
                "{mib} MiB to device, verify={verify}: {:.2} GB/s",
                (mib << 20) as f64 / took.as_secs_f64() / 1e9
            );
            drop(loaded);
        }
    }
}
