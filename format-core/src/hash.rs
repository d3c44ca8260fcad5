//! CRC-32 and SHA-256 over a tensor's hashable header followed by its data,
//! computed incrementally so hosts can feed data in any chunking.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::codec::tensor_header::{HashValue, TensorHeader};
use crate::error::{Error, Result};

/// Data is fed to both hashes in blocks of this size (fits in L1/L2).
const BLOCK: usize = 32 * 1024;

/// Incremental hasher for one tensor.
#[derive(Clone)]
pub struct TensorHasher {
    crc: Option<crc32fast::Hasher>,
    sha: Option<Sha256>,
}

impl TensorHasher {
    /// Starts hashing with the hashable header bytes. Only the hashes the
    /// caller asks for are computed.
    pub fn new(hashable_header: &[u8], crc32: bool, sha256: bool) -> Self {
        let mut this = Self { crc: crc32.then(crc32fast::Hasher::new), sha: sha256.then(Sha256::new) };
        this.update(hashable_header);
        this
    }

    /// Starts hashing for exactly the hashes `header` stores.
    pub fn for_header(header: &TensorHeader, hashable_header: &[u8]) -> Self {
        let crc = header.hashes.iter().any(|h| matches!(h, HashValue::Crc32(_)));
        let sha = header.hashes.iter().any(|h| matches!(h, HashValue::Sha256(_)));
        Self::new(hashable_header, crc, sha)
    }

    /// Feeds the next piece of plaintext data.
    pub fn update(&mut self, data: &[u8]) {
        // Both hashes take each block while it is still in cache.
        for block in data.chunks(BLOCK) {
            if let Some(c) = &mut self.crc {
                c.update(block);
            }
            if let Some(s) = &mut self.sha {
                s.update(block);
            }
        }
    }

    /// The finished hashes, CRC-32 first (the order tensorizer writes).
    pub fn finish(self) -> Vec<HashValue> {
        let mut out = Vec::with_capacity(2);
        if let Some(c) = self.crc {
            out.push(HashValue::Crc32(c.finalize()));
        }
        if let Some(s) = self.sha {
            out.push(HashValue::Sha256(s.finalize().into()));
        }
        out
    }
}

/// Checks every hash `header` stores against `computed`.
pub fn verify(header: &TensorHeader, computed: &[HashValue]) -> Result<()> {
    for stored in &header.hashes {
        let actual = computed.iter().find(|c| c.kind() == stored.kind());
        if actual != Some(stored) {
            return Err(Error::HashMismatch {
                tensor: alloc::format!("{}", header.path),
                kind: stored.kind(),
                expected: hex(stored),
                actual: actual.map_or_else(|| String::from("nothing"), hex),
            });
        }
    }
    Ok(())
}

fn hex(v: &HashValue) -> String {
    let mut s = String::new();
    match v {
        HashValue::Crc32(c) => {
            let _ = write!(s, "{c}");
        }
        HashValue::Sha256(d) => {
            for b in d {
                let _ = write!(s, "{b:02x}");
            }
        }
    }
    s
}
