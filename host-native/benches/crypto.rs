//! Crypto benchmark: the cipher, hash and key-derivation kernels on one
//! core, and encrypted and verified loads through the reader.
//!
//! Run: `cargo bench -p tensorizer-native --bench crypto`
//! (`TZR_BENCH_MIB` sets the size of the file loads, default 1024;
//! `TZR_BENCH_DIR` the directory for the file, default the system temp
//! dir; `TZR_BENCH_KDF=0` skips Argon2id).
//!
//! Single-core rows: XSalsa20-Poly1305 open of 2 MiB chunks (RustCrypto's
//! `crypto_secretbox` 0.1, which the core used before, beside the core's
//! portable kernel and the kernel the host picks at run time), SHA-256 and
//! CRC-32 through the core's tensor hasher, and Argon2id with libsodium's
//! MODERATE cost (tensorizer's default). Load rows: the same file of 300
//! tensors read with one reader and with one per core, plain, encrypted and
//! verified (SHA-256 + CRC-32), into pre-faulted buffers, warm page cache.

use std::time::{Duration, Instant};

use tensorizer_core::crypto::{KdfLimits, Key, open_chunk_on, presets, seal_chunk};
use tensorizer_core::layout::PWHASH_ALG_ARGON2ID13;
use tensorizer_core::{Dtype, ElementType, KdfParams, KeySource, TensorSpec, WriterOptions};
use tensorizer_native::kernels::{cipher, digest};
use tensorizer_native::{ReadOptions, Reader, WriteOptions, default_readers, write_file};

const CHUNK: usize = 2 << 20;

fn median_best(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[0], times[times.len() / 2])
}

fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn row(name: &str, bytes: u64, times: Vec<Duration>) {
    let (best, median) = median_best(times);
    println!(
        "| {name} | {:.1} ms | {:.1} ms | {:.2} | {:.2} |",
        best.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3,
        bytes as f64 / best.as_secs_f64() / 1e9,
        bytes as f64 / median.as_secs_f64() / 1e9
    );
}

fn kernels(reps: usize) {
    let total = 256usize << 20;
    let key = Key::from_bytes([7; 32]);
    let nonce = [3u8; 24];
    let mut buf: Vec<u8> = (0..total).map(|i| (i as u8).wrapping_mul(31)).collect();
    let macs: Vec<[u8; 16]> = buf
        .chunks_mut(CHUNK)
        .enumerate()
        .map(|(i, c)| seal_chunk(&key, &nonce, i as u64, c))
        .collect();
    let reference = {
        use crypto_secretbox::aead::generic_array::GenericArray;
        use crypto_secretbox::{KeyInit, XSalsa20Poly1305};
        XSalsa20Poly1305::new(GenericArray::from_slice(key.expose_secret()))
    };
    let open_all = |buf: &mut [u8], kernel: tensorizer_core::crypto::Kernel| {
        for (i, c) in buf.chunks_mut(CHUNK).enumerate() {
            open_chunk_on(&key, &nonce, i as u64, c, &macs[i], kernel).unwrap();
        }
    };
    let seal_all = |buf: &mut [u8], kernel: tensorizer_core::crypto::Kernel| {
        for (i, c) in buf.chunks_mut(CHUNK).enumerate() {
            tensorizer_core::crypto::seal_chunk_on(&key, &nonce, i as u64, c, kernel);
        }
    };
    let mut t_ref = Vec::new();
    let mut t_portable = Vec::new();
    let mut t_best = Vec::new();
    for _ in 0..reps {
        // Each contender opens the sealed buffer; sealing again (untimed)
        // restores it for the next one.
        t_ref.push(timed(|| {
            use crypto_secretbox::aead::AeadInPlace;
            use crypto_secretbox::aead::generic_array::GenericArray;
            for (i, c) in buf.chunks_mut(CHUNK).enumerate() {
                let n = tensorizer_core::crypto::chunk_nonce(&nonce, i as u64);
                reference
                    .decrypt_in_place_detached(
                        GenericArray::from_slice(&n),
                        b"",
                        c,
                        GenericArray::from_slice(&macs[i]),
                    )
                    .unwrap();
            }
        }));
        seal_all(&mut buf, cipher::kernel());
        t_portable.push(timed(|| open_all(&mut buf, cipher::portable())));
        seal_all(&mut buf, cipher::kernel());
        t_best.push(timed(|| open_all(&mut buf, cipher::kernel())));
        seal_all(&mut buf, cipher::kernel());
    }
    let bytes = total as u64;
    let state = tensorizer_core::crypto::StreamState::xsalsa20(key.expose_secret(), &nonce);
    let t_stream: Vec<Duration> =
        (0..reps).map(|_| timed(|| cipher::kernel()(&state, 1, &mut buf))).collect();
    cipher::kernel()(&state, 1, &mut buf);
    row(
        &format!("XSalsa20 keystream alone, host kernel: {}", cipher::kernel_name()),
        bytes,
        t_stream,
    );
    row("XSalsa20-Poly1305 open, crypto_secretbox 0.1 (before)", bytes, t_ref);
    row("XSalsa20-Poly1305 open, core portable kernel (scalar)", bytes, t_portable);
    row(&format!("XSalsa20-Poly1305 open, host kernel: {}", cipher::kernel_name()), bytes, t_best);

    let mut t_sha = Vec::new();
    let mut t_crc = Vec::new();
    let mut t_both = Vec::new();
    let mut t_joint = Vec::new();
    for _ in 0..reps {
        t_sha.push(timed(|| {
            let mut h = tensorizer_core::hash::TensorHasher::new(b"", false, true);
            h.update(&buf);
            std::hint::black_box(h.finish());
        }));
        t_crc.push(timed(|| {
            let mut h = tensorizer_core::hash::TensorHasher::new(b"", true, false);
            h.update(&buf);
            std::hint::black_box(h.finish());
        }));
        t_both.push(timed(|| {
            let mut h = tensorizer_core::hash::TensorHasher::new(b"", true, true);
            h.update(&buf);
            std::hint::black_box(h.finish());
        }));
        t_joint.push(timed(|| {
            let mut h =
                tensorizer_core::hash::TensorHasher::with_kernel(b"", true, true, digest::kernel());
            h.update(&buf);
            std::hint::black_box(h.finish());
        }));
    }
    row("SHA-256 (core hasher)", bytes, t_sha);
    row("CRC-32 (core hasher)", bytes, t_crc);
    row("SHA-256 + CRC-32 (core hasher, one after the other)", bytes, t_both);
    row(&format!("SHA-256 + CRC-32, host kernel: {}", digest::kernel_name()), bytes, t_joint);
}

fn argon2(reps: usize) {
    let (ops, mem) = presets::MODERATE;
    let params =
        KdfParams { opslimit: ops, memlimit: mem, alg: PWHASH_ALG_ARGON2ID13, salt: vec![5; 16] };
    let limits = KdfLimits::default();
    let core: Vec<Duration> = (0..reps)
        .map(|_| timed(|| drop(Key::derive(b"correct horse", &params, &limits).unwrap())))
        .collect();
    let host: Vec<Duration> = (0..reps)
        .map(|_| {
            timed(|| {
                drop(
                    tensorizer_native::kernels::kdf::derive(b"correct horse", &params, &limits)
                        .unwrap(),
                )
            })
        })
        .collect();
    for (name, times) in [
        ("core (argon2 crate)".to_string(), core),
        (format!("host kernel: {}", tensorizer_native::kernels::kdf::kernel_name()), host),
    ] {
        let (best, median) = median_best(times);
        println!(
            "| Argon2id MODERATE (opslimit {ops}, memlimit {} MiB), {name} | {:.1} ms | {:.1} ms | | |",
            mem >> 20,
            best.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e3
        );
    }
}

fn loads(mib: usize, reps: usize) {
    let dir = std::env::var_os("TZR_BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let n = 300;
    let each = ((mib << 20) / n) & !1;
    let tensors: Vec<(TensorSpec, Vec<u8>)> = (0..n)
        .map(|i| {
            let data: Vec<u8> =
                (0..each).map(|b| (b as u8).wrapping_mul(31).wrapping_add(i as u8)).collect();
            let spec = TensorSpec::state_dict(
                format!("model.layers.{i}.weight").as_str(),
                Dtype::from_element(ElementType::BF16),
                vec![(each / 2) as u64],
            );
            (spec, data)
        })
        .collect();
    let input: Vec<(TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    let bytes = (each * n) as u64;
    let key = Key::from_bytes([9; 32]);
    let plain = dir.join("tzr-crypto-bench.tensors");
    let sealed = dir.join("tzr-crypto-bench.enc.tensors");
    write_file(&plain, &input, &WriteOptions::default()).unwrap();
    let enc = WriteOptions {
        layout: WriterOptions { encryption: Some(None), ..WriterOptions::default() },
        key: Some(key.clone()),
        ..WriteOptions::default()
    };
    write_file(&sealed, &input, &enc).unwrap();
    drop(input);
    let mut bufs: Vec<Vec<u8>> = tensors.iter().map(|(_, d)| vec![1u8; d.len()]).collect();
    drop(tensors);
    let cores = default_readers();
    let mut cases: Vec<(String, Reader)> = Vec::new();
    for readers in [1, cores] {
        let open = |path: &std::path::Path, verify_hash: bool, key: Option<KeySource>| {
            Reader::open(path, ReadOptions { num_readers: readers, verify_hash, key }).unwrap()
        };
        cases.push((format!("load, plain, {readers} reader(s)"), open(&plain, false, None)));
        cases.push((
            format!("load, verified (SHA-256 + CRC-32), {readers} reader(s)"),
            open(&plain, true, None),
        ));
        cases.push((
            format!("load, encrypted, {readers} reader(s)"),
            open(&sealed, false, Some(KeySource::Key(key.clone()))),
        ));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
    for rep in 0..=reps {
        for (k, (_, reader)) in cases.iter().enumerate() {
            let t = timed(|| {
                let jobs =
                    bufs.iter_mut().enumerate().map(|(i, b)| (i, b.as_mut_slice())).collect();
                reader.load_many(jobs).unwrap();
            });
            if rep > 0 {
                times[k].push(t);
            }
        }
    }
    for ((name, _), t) in cases.iter().zip(times) {
        row(name, bytes, t);
    }
    let _ = std::fs::remove_file(&plain);
    let _ = std::fs::remove_file(&sealed);
}

fn main() {
    let mib: usize =
        std::env::var("TZR_BENCH_MIB").ok().and_then(|s| s.parse().ok()).unwrap_or(1024);
    println!("| measurement | best | median | GB/s best | GB/s median |");
    println!("|---|---|---|---|---|");
    if std::env::var("TZR_BENCH_KDF_ONLY").is_err() {
        kernels(5);
    }
    if std::env::var("TZR_BENCH_KDF").as_deref() != Ok("0") {
        argon2(3);
    }
    if std::env::var("TZR_BENCH_KDF_ONLY").is_ok() {
        return;
    }
    loads(mib, 5);
}
