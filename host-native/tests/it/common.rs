//! The committed tensorizer vectors and their keys.

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
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector { path: dir.join(v["file"].as_str().unwrap()), info: v.clone() })
        .collect()
}

pub(crate) const TEST_KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
