//! Shared helpers: the committed vectors and their manifest.

use std::path::PathBuf;

use serde_json::Value;
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::{File, KeySource};

pub(crate) fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

pub(crate) struct Vector {
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
    pub(crate) info: Value,
}

impl Vector {
    pub(crate) fn key(&self) -> Option<KeySource> {
        let enc = self.info.get("encryption")?;
        if let Some(hex_key) = enc.get("key_hex").and_then(Value::as_str) {
            let k = hex::decode(hex_key).unwrap();
            return Some(KeySource::Key(Key::from_slice(&k).unwrap()));
        }
        let pass = enc.get("passphrase")?.as_str()?;
        Some(KeySource::Passphrase(Passphrase::new(pass.as_bytes()), KdfLimits::default()))
    }

    pub(crate) fn readable_by_tensorizer(&self) -> bool {
        self.info["tensorizer_can_read"].as_bool().unwrap_or(false)
    }

    pub(crate) fn encrypted(&self) -> bool {
        !self.info["encryption"].is_null()
    }

    /// Every tensor's plaintext, or the first error.
    pub(crate) fn load_all(
        bytes: &[u8],
        key: Option<&KeySource>,
    ) -> tensorizer_core::Result<Vec<Vec<u8>>> {
        File::parse(bytes)?.load_all(key)
    }
}

pub(crate) fn vectors() -> Vec<Vector> {
    let dir = vectors_dir();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json"))
            .unwrap();
    manifest["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let name = v["file"].as_str().unwrap().to_string();
            let bytes = std::fs::read(dir.join(&name)).unwrap();
            Vector { name, bytes, info: v.clone() }
        })
        .collect()
}
