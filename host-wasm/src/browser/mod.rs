//! The browser inspector's logic: tensorizer, safetensors, `torch.save`
//! and GGUF files opened from their header and index only, and verified tensor by
//! tensor, over asynchronous range reads ([`AsyncSource`]).
//!
//! Everything here is plain Rust, tested natively; the wasm-bindgen
//! exports the page calls (`bindings`, built only for
//! `wasm32-unknown-unknown`) wrap a JavaScript `Blob` or read function
//! as an [`AsyncSource`] and return JSON text.

pub mod findings;
pub mod fingerprint;
pub mod gguf;
pub mod open;
pub mod safetensors;
pub mod source;
pub mod summary;
pub mod torch;
pub mod verify;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub mod bindings;

use tensorizer_core::layout::ParseLimits;

use crate::error::ValidateError;

pub use open::Opened;
pub use source::{AsyncSource, Counted, MemSource};
pub use summary::{Row, Summary, error_line};

/// Opens `src` (a file named `file`) and returns its summary, with the
/// reads and bytes it took.
pub async fn inspect<S: AsyncSource>(src: S, file: &str) -> Result<Summary, ValidateError> {
    let mut src = Counted::new(src);
    let opened = open::open(&mut src, &ParseLimits::default()).await?;
    let mut summary = opened.summary(file);
    summary.reads = src.reads;
    summary.bytes_read = src.bytes;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::source::block_on_ready;
    use super::verify::{Events, Shard, assign, stored_hashes, verify};
    use super::*;
    use crate::report::{Status, TensorVerification};
    use tensorizer_core::KeySource;
    use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};

    fn vector(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/../tests/vectors/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    fn summary(bytes: Vec<u8>) -> Result<Summary, ValidateError> {
        block_on_ready(inspect(MemSource(bytes), "f")).unwrap()
    }

    #[derive(Debug, Default)]
    struct Log(Vec<(usize, TensorVerification)>, u64);

    impl Events for Log {
        fn tensor(&mut self, index: usize, result: &TensorVerification) {
            self.0.push((index, result.clone()));
        }
        fn progress(&mut self, done: u64, _total: u64) {
            self.1 = done;
        }
    }

    fn run_verify(
        bytes: Vec<u8>,
        key: Option<KeySource>,
    ) -> Result<(crate::report::VerifySummary, Log), ValidateError> {
        let mut src = MemSource(bytes.clone());
        let opened = block_on_ready(open::open(&mut src, &ParseLimits::default())).unwrap()?;
        let mut log = Log::default();
        let s = block_on_ready(verify(MemSource(bytes), &opened, key, Shard::ALL, &mut log))
            .unwrap()?;
        Ok((s, log))
    }

    fn manifest() -> serde_json::Value {
        serde_json::from_slice(&vector("manifest.json")).unwrap()
    }

    #[test]
    fn every_vector_opens_and_matches_the_manifest() {
        let m = manifest();
        for v in m["vectors"].as_array().unwrap() {
            let name = v["file"].as_str().unwrap();
            let s = summary(vector(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.format, "tensorizer");
            let want = v["tensors"].as_array().unwrap();
            assert_eq!(s.tensor_count, want.len(), "{name}");
            for (row, t) in s.tensors.iter().zip(want) {
                assert_eq!(serde_json::Value::from(row.components()), t["path"], "{name}");
                let shape: Vec<u64> = serde_json::from_value(t["shape"].clone()).unwrap();
                assert_eq!(row.shape, shape, "{name}");
                assert_eq!(row.data_offset, t["data_offset"].as_u64(), "{name}");
            }
            // Header and index: the first read, and the index's rest if longer.
            let index_end = 73 + v["metadata_index_length"].as_u64().unwrap();
            assert!(
                s.reads <= 2 && s.bytes_read <= index_end.max(open::FIRST_READ),
                "{name}: {}",
                s.bytes_read
            );
        }
    }

    #[test]
    fn a_safetensors_file_starting_with_0x80_opens_as_safetensors() {
        // A header length ≡ 128 (mod 256): byte 0 is a pickle's PROTO.
        for n in [128usize, 384, 8320] {
            let json = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
            let mut f = (n as u64).to_le_bytes().to_vec();
            f.extend_from_slice(json);
            f.resize(8 + n, b' ');
            f.extend_from_slice(&[0; 8]);
            assert_eq!(f[0], 0x80);
            let s = summary(f).unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!((s.format, s.tensor_count), ("safetensors", 1), "{n}");
        }
    }

    #[test]
    fn vectors_verify_and_a_flipped_byte_fails() {
        let (s, log) = run_verify(vector("v1_flat.tensors"), None).unwrap();
        assert!(s.ok && s.verified == 15, "{s:?}");
        assert_eq!(log.0.len(), 15);
        let mut bad = vector("v1_flat.tensors");
        let at = summary(bad.clone()).unwrap().tensors[0].data_offset.unwrap() as usize;
        bad[at] ^= 1;
        let (s, log) = run_verify(bad, None).unwrap();
        assert_eq!((s.ok, s.failed), (false, 1));
        let err = log.0[0].1.error.clone().unwrap();
        assert!(error_line(&err).contains("byte"), "{err}");
    }

    #[test]
    fn encrypted_vectors_need_the_key_and_check_it() {
        let key = Key::from_bytes(core::array::from_fn(|i| i as u8));
        let (s, _) = run_verify(vector("v3_enc_key.tensors"), Some(KeySource::Key(key))).unwrap();
        assert!(s.ok && s.verified == 5);
        let pass = KeySource::Passphrase(
            Passphrase::new(b"test-passphrase-not-secret".to_vec()),
            KdfLimits::default(),
        );
        let (s, _) = run_verify(vector("v3_enc_pass.tensors"), Some(pass)).unwrap();
        assert!(s.ok, "{s:?}");
        let wrong = KeySource::Key(Key::from_bytes([7; 32]));
        let (s, log) = run_verify(vector("v3_enc_key.tensors"), Some(wrong)).unwrap();
        assert!(!s.ok);
        assert!(log.0.iter().all(|(_, v)| v.status == Status::Failed));
        assert_eq!(run_verify(vector("v3_enc_key.tensors"), None).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn shards_split_the_work_and_together_cover_every_tensor() {
        assert_eq!(assign(&[100, 1 << 20, 5, 1 << 20], 2), [0, 0, 1, 1]);
        assert_eq!(assign(&[7, 7, 7], 1), [0, 0, 0]);
        let bytes = vector("v2_dtypes.tensors");
        let opened =
            block_on_ready(open::open(&mut MemSource(bytes.clone()), &ParseLimits::default()))
                .unwrap()
                .unwrap();
        let mut seen = Vec::new();
        let mut verified = 0;
        for index in 0..3 {
            let mut log = Log::default();
            let s = block_on_ready(verify(
                MemSource(bytes.clone()),
                &opened,
                None,
                Shard { index, count: 3 },
                &mut log,
            ))
            .unwrap()
            .unwrap();
            assert!(s.ok);
            verified += s.verified;
            seen.extend(log.0.iter().map(|(i, _)| *i));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..43).collect::<Vec<_>>());
        assert_eq!(verified, 43);
    }

    #[test]
    fn stored_hashes_come_from_tensor_headers() {
        let bytes = vector("v1_flat.tensors");
        let mut src = Counted::new(MemSource(bytes));
        let Opened::Tensorizer(ins) =
            block_on_ready(open::open(&mut src, &ParseLimits::default())).unwrap().unwrap()
        else {
            panic!()
        };
        let h = block_on_ready(stored_hashes(&mut src, &ins, 0, 100)).unwrap().unwrap();
        let m = manifest();
        let want = &m["vectors"][0]["tensors"];
        assert_eq!(h.len(), 15);
        for (got, t) in h.iter().zip(want.as_array().unwrap()) {
            assert_eq!(got.sha256.as_deref(), t["stored_sha256"].as_str());
            assert_eq!(got.crc32, t["stored_crc32"].as_u64().map(|c| format!("{c:08x}")));
        }
        assert_eq!(src.reads, 2 + 1, "all 15 headers lie close together: one read");
    }

    #[test]
    fn truncated_and_foreign_files_give_one_line_with_an_offset() {
        let bytes = vector("v1_flat.tensors");
        for cut in [0, 3, 40, 73, 1000, bytes.len() - 9] {
            let e = summary(bytes[..cut].to_vec())
                .and_then(|_| run_verify(bytes[..cut].to_vec(), None).map(|_| ()));
            let e = e.unwrap_err();
            let line = error_line(&e);
            assert!(line.contains("byte") && !line.contains('\n'), "cut {cut}: {line}");
        }
        let e = summary(b"hello world, not a model file".to_vec()).unwrap_err();
        assert_eq!(e.offset, Some(0));
    }

    #[test]
    fn torch_checkpoints_open_and_verify() {
        for name in ["torch/dtypes.pt", "torch/big_endian.pt"] {
            let bytes = vector(name);
            let s = summary(bytes.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.format, "torch");
            assert!(s.tensor_count > 0);
            let (v, log) = run_verify(bytes.clone(), None).unwrap();
            assert!(v.ok, "{name}: {v:?}");
            assert_eq!(log.0.len(), s.tensor_count);
        }
        for hostile in
            ["torch/hostile_eval.pt", "torch/hostile_legacy.pt", "torch/hostile_deflated.pt"]
        {
            let e = summary(vector(hostile)).unwrap_err();
            assert!(!error_line(&e).contains('\n'), "{hostile}");
        }
    }

    fn fingerprint_of(
        bytes: Vec<u8>,
        key: Option<KeySource>,
    ) -> Result<fingerprint::Fingerprinted, ValidateError> {
        let opened =
            block_on_ready(open::open(&mut MemSource(bytes.clone()), &ParseLimits::default()))
                .unwrap()?;
        let mut last = (0, 0);
        let done = block_on_ready(fingerprint::fingerprint(
            MemSource(bytes),
            &opened,
            key,
            &mut |d, t| last = (d, t),
        ));
        let done = done.unwrap()?;
        assert_eq!(last.0, last.1, "progress ends at the total");
        Ok(done)
    }

    #[test]
    fn fingerprints_equal_tzr_fingerprint() {
        // The digests `tzr fingerprint FILE` prints (spec §21): tensorizer
        // (structured names, meta tensors, encrypted), checkpoints (every
        // dtype, big-endian, strided views).
        for (name, want) in [
            (
                "v1_nested.tensors",
                "ebaf9023de26ee1d5cb791ca2143b039cd6732dc83f5499ad3cc328ac00436d4",
            ),
            ("v4_meta.tensors", "00d8feb8b8c8e34cce75dbf721999af7f9a285f5f8132d36e161b267ccafef2e"),
            ("torch/dtypes.pt", "bf9e9b63d0c2029e0d80578157250d404e1c718903ee6d54836d904e39ec0789"),
            (
                "torch/big_endian.pt",
                "4973bd95d9aec59c299445b07d512efdb3d6ccb528ba9d6c71c43dad0b8d431e",
            ),
            ("torch/views.pt", "649097fb9ed9a76428ae346d2acaddbbd92e923ba9d70857613c2eacf02252ad"),
        ] {
            let got = fingerprint_of(vector(name), None).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.fingerprint.hex(), want, "{name}");
        }
        let key = Key::from_bytes(core::array::from_fn(|i| i as u8));
        let got = fingerprint_of(vector("v3_enc_key.tensors"), Some(KeySource::Key(key))).unwrap();
        assert_eq!(
            got.fingerprint.hex(),
            "047a04e4fafea16c5d9379c38b4e4c33663d308cb0a4a2806e72bbae0d36659c"
        );
        assert_eq!(fingerprint_of(vector("v3_enc_key.tensors"), None).unwrap_err().exit_code(), 2);
        // The worked example of spec §21.4, as a safetensors file.
        let json = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}"#;
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json);
        f.extend_from_slice(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 7, 0, 0, 0, 0, 0, 0, 0]);
        let got = fingerprint_of(f.clone(), None).unwrap();
        let opened = block_on_ready(open::open(&mut MemSource(f), &ParseLimits::default()))
            .unwrap()
            .unwrap();
        assert_eq!(opened.format(), opened.summary("").format);
        assert_eq!(
            got.fingerprint.hex(),
            "eaee47bb4a4bb4a0ec23fd6fa9796776e0b8caeded42c31c0a5d364cb927ed30"
        );
        assert_eq!(got.to_json("safetensors")["data_bytes"], 16);
    }

    #[test]
    fn random_corruption_never_panics() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for name in ["v1_nested.tensors", "torch/dtypes.pt"] {
            let original = vector(name);
            for _ in 0..200 {
                let mut bytes = original.clone();
                for _ in 0..1 + next() % 4 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] = next() as u8;
                }
                if next() % 4 == 0 {
                    bytes.truncate((next() % original.len() as u64) as usize);
                }
                if summary(bytes.clone()).is_ok() {
                    let _ = run_verify(bytes.clone(), None);
                    let _ = fingerprint_of(bytes.clone(), None);
                }
                let _ = findings::scan_report(tensorizer_core::SliceSource::new(&bytes), name);
            }
        }
    }
}
