//! The committed tensorizer vectors and their keys, and a writer of test files.

use std::path::PathBuf;

use serde_json::Value;
use tensorizer_core::KeySource;
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};

pub(crate) fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

pub(crate) struct Vector {
    pub(crate) path: PathBuf,
    pub(crate) info: Value,
}

impl Vector {
    pub(crate) fn key(&self) -> Option<KeySource> {
        let enc = self.info.get("encryption").filter(|e| !e.is_null())?;
        if let Some(k) = enc.get("key_hex").and_then(Value::as_str) {
            return Some(KeySource::Key(Key::from_slice(&hex::decode(k).unwrap()).unwrap()));
        }
        let pass = enc["passphrase"].as_str()?;
        Some(KeySource::Passphrase(Passphrase::new(pass.as_bytes()), KdfLimits::default()))
    }

    pub(crate) fn name(&self) -> String {
        self.path.file_name().unwrap().to_string_lossy().into_owned()
    }
}

pub(crate) fn vectors() -> Vec<Vector> {
    let dir = vectors_dir();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector { path: dir.join(v["file"].as_str().unwrap()), info: v.clone() })
        .collect()
}

pub(crate) const TEST_KEY_HEX: &str =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// An unencrypted file of `specs` with every dtype string `from[i]`
/// replaced by `to[i]` (same length) and its hashes recomputed: how tests
/// get files our writer would not produce, such as big-endian tensors,
/// that still verify.
pub(crate) fn file_with_dtypes_patched(
    specs: &[tensorizer_core::TensorSpec],
    data: &[&[u8]],
    patches: &[(&[u8], &[u8])],
) -> Vec<u8> {
    use tensorizer_core::{WriterOptions, write};
    let mut bytes =
        write::to_vec(specs, data, &WriterOptions::default(), None, || [0; 24]).unwrap();
    for (from, to) in patches {
        replace_all(&mut bytes, from, to);
    }
    rehash(bytes)
}

fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut at = 0;
    while let Some(pos) = bytes[at..].windows(from.len()).position(|w| w == from) {
        bytes[at + pos..at + pos + from.len()].copy_from_slice(to);
        at += pos + from.len();
    }
}

/// Recomputes every stored hash of an unencrypted file.
fn rehash(mut bytes: Vec<u8>) -> Vec<u8> {
    use tensorizer_core::{File, HashValue, TensorRecord};
    let file = File::parse(&bytes).unwrap();
    let mut patches = Vec::new();
    for e in &file.metadata.entries {
        let raw = &bytes[e.header_offset as usize..e.data_offset as usize];
        let record = TensorRecord::parse(e, raw, &file.header).unwrap();
        let mut hasher = record.hasher();
        hasher.update(&bytes[e.data_offset as usize..e.data_end() as usize]);
        for (value, range) in hasher.finish().into_iter().zip(&record.layout.hash_values) {
            let at = e.header_offset as usize + range.start;
            patches.push(match value {
                HashValue::Crc32(c) => (at, c.to_le_bytes().to_vec()),
                HashValue::Sha256(d) => (at, d.to_vec()),
            });
        }
    }
    for (at, value) in patches {
        bytes[at..at + value.len()].copy_from_slice(&value);
    }
    bytes
}

/// The `tzr` binary of this build. It is package `tzr`'s, so cargo builds
/// it beside these tests in a workspace build (`cargo test --workspace`,
/// or `cargo build -p tzr` first); `TZR_BIN` names another.
pub(crate) fn tzr_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TZR_BIN") {
        return bin.into();
    }
    // The test binary is target/<profile>/deps/it-<hash>; tzr is in target/<profile>.
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).unwrap().join("tzr");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p tzr`, or set TZR_BIN",
        bin.display()
    );
    bin
}

/// Writes `tensors` to `path` with two writers, encrypted with `key` when
/// one is given; returns the key source a reader needs.
pub(crate) fn write_tensors(
    path: &std::path::Path,
    tensors: &[(tensorizer_core::TensorSpec, Vec<u8>)],
    key: Option<Key>,
) -> Option<KeySource> {
    let options = tensorizer_native::WriteOptions {
        layout: tensorizer_core::write::WriterOptions {
            encryption: key.is_some().then_some(None),
            ..tensorizer_core::write::WriterOptions::default()
        },
        key: key.clone(),
        num_writers: 2,
    };
    let input: Vec<(tensorizer_core::TensorSpec, &[u8])> =
        tensors.iter().map(|(s, d)| (s.clone(), d.as_slice())).collect();
    tensorizer_native::write_file(path, &input, &options).unwrap();
    key.map(KeySource::Key)
}

/// A source that asks for long reads, as network sources do, over any other.
pub(crate) struct LongReads<S>(pub(crate) S);

impl<S: tensorizer_native::RangeSource> tensorizer_native::RangeSource for LongReads<S> {
    fn len(&self) -> u64 {
        self.0.len()
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> tensorizer_native::Result<()> {
        self.0.read_exact_at(offset, buf)
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn prefers_long_reads(&self) -> bool {
        true
    }
}
