//! CRC-32 and SHA-256 over a tensor's hashable header followed by its data,
//! computed incrementally so hosts can feed data in any chunking.
//!
//! When a tensor stores both hashes, a host may pass a [`BlockKernel`]
//! that computes both in one pass over each 64-byte block (the CRC folding
//! fills the cycles SHA-256's dependency chain leaves idle); this module
//! keeps the SHA-256 state, the partial block and the final padding, so a
//! kernel only ever sees whole blocks.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

use crate::codec::tensor_header::{HashValue, TensorHeader};
use crate::error::{Error, Result};

/// Data is fed to both hashes in blocks of this size (fits in L1/L2).
const BLOCK: usize = 32 * 1024;

/// SHA-256 block length in bytes.
pub const SHA256_BLOCK: usize = 64;

/// SHA-256's initial state words (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Hashes whole blocks for both digests at once: advances the SHA-256
/// state words `sha` over `blocks` (a multiple of [`SHA256_BLOCK`] bytes,
/// possibly empty) and returns the CRC-32 value continued from `crc` over
/// the same bytes. Every kernel must give the results of
/// [`blocks_portable`].
pub type BlockKernel = fn(sha: &mut [u32; 8], crc: u32, blocks: &[u8]) -> u32;

/// The CRC-32 value continued from `crc` (the value so far; 0 to start)
/// over `data`.
pub fn crc32_continue(crc: u32, data: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new_with_initial(crc);
    c.update(data);
    c.finalize()
}

/// The reference [`BlockKernel`]: `sha2`'s compression function per block,
/// then `crc32fast` over the run.
pub fn blocks_portable(sha: &mut [u32; 8], crc: u32, blocks: &[u8]) -> u32 {
    for block in blocks.chunks_exact(SHA256_BLOCK) {
        sha2::compress256(sha, core::slice::from_ref(GenericArray::from_slice(block)));
    }
    crc32_continue(crc, blocks)
}

/// Incremental hasher for one tensor.
#[derive(Clone)]
pub struct TensorHasher {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    /// Each hash on its own (the libraries' buffering and padding).
    Separate { crc: Option<crc32fast::Hasher>, sha: Option<Sha256> },
    /// Both hashes through one [`BlockKernel`].
    Joint(Joint),
}

/// Both hashes driven block by block through a kernel. Bytes wait in
/// `pending` until a block is whole; they are in neither hash until then.
#[derive(Clone)]
struct Joint {
    sha: [u32; 8],
    crc: u32,
    pending: [u8; SHA256_BLOCK],
    pending_len: usize,
    /// Bytes fed so far, modulo 2^64 (SHA-256 encodes the bit length modulo 2^64).
    total: u64,
    kernel: BlockKernel,
}

impl Joint {
    fn update(&mut self, mut data: &[u8]) {
        self.total = self.total.wrapping_add(data.len() as u64);
        if self.pending_len > 0 {
            let take = (SHA256_BLOCK - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < SHA256_BLOCK {
                return;
            }
            self.crc = (self.kernel)(&mut self.sha, self.crc, &self.pending);
            self.pending_len = 0;
        }
        let whole = data.len() - data.len() % SHA256_BLOCK;
        if whole > 0 {
            self.crc = (self.kernel)(&mut self.sha, self.crc, &data[..whole]);
        }
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    fn finish(mut self) -> (u32, [u8; 32]) {
        let tail = &self.pending[..self.pending_len];
        let crc = crc32_continue(self.crc, tail);
        // Padding: 0x80, zeros, then the bit length big-endian in the last
        // 8 bytes of the last block; one block more when the tail leaves
        // fewer than 9 bytes.
        let mut last = [0u8; 2 * SHA256_BLOCK];
        last[..tail.len()].copy_from_slice(tail);
        last[tail.len()] = 0x80;
        let blocks = if tail.len() < SHA256_BLOCK - 8 { 1 } else { 2 };
        let end = blocks * SHA256_BLOCK;
        last[end - 8..end].copy_from_slice(&self.total.wrapping_mul(8).to_be_bytes());
        for block in last[..end].chunks_exact(SHA256_BLOCK) {
            sha2::compress256(
                &mut self.sha,
                core::slice::from_ref(GenericArray::from_slice(block)),
            );
        }
        let mut digest = [0u8; 32];
        for (out, word) in digest.chunks_exact_mut(4).zip(self.sha) {
            out.copy_from_slice(&word.to_be_bytes());
        }
        (crc, digest)
    }
}

impl TensorHasher {
    /// Starts hashing with the hashable header bytes. Only the hashes the
    /// caller asks for are computed.
    pub fn new(hashable_header: &[u8], crc32: bool, sha256: bool) -> Self {
        Self::with_kernel(hashable_header, crc32, sha256, None)
    }

    /// [`TensorHasher::new`], computing both hashes through `kernel` when
    /// both are asked for and a kernel is given.
    pub fn with_kernel(
        hashable_header: &[u8],
        crc32: bool,
        sha256: bool,
        kernel: Option<BlockKernel>,
    ) -> Self {
        let inner = match kernel {
            Some(kernel) if crc32 && sha256 => Inner::Joint(Joint {
                sha: SHA256_IV,
                crc: 0,
                pending: [0; SHA256_BLOCK],
                pending_len: 0,
                total: 0,
                kernel,
            }),
            _ => Inner::Separate {
                crc: crc32.then(crc32fast::Hasher::new),
                sha: sha256.then(Sha256::new),
            },
        };
        let mut this = Self { inner };
        this.update(hashable_header);
        this
    }

    /// Starts hashing for exactly the hashes `header` stores.
    pub fn for_header(header: &TensorHeader, hashable_header: &[u8]) -> Self {
        Self::for_header_on(header, hashable_header, None)
    }

    /// [`TensorHasher::for_header`] with an optional [`BlockKernel`].
    pub fn for_header_on(
        header: &TensorHeader,
        hashable_header: &[u8],
        kernel: Option<BlockKernel>,
    ) -> Self {
        let crc = header.hashes.iter().any(|h| matches!(h, HashValue::Crc32(_)));
        let sha = header.hashes.iter().any(|h| matches!(h, HashValue::Sha256(_)));
        Self::with_kernel(hashable_header, crc, sha, kernel)
    }

    /// Feeds the next piece of plaintext data.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.inner {
            Inner::Separate { crc, sha } => {
                // Both hashes take each block while it is still in cache.
                for block in data.chunks(BLOCK) {
                    if let Some(c) = crc {
                        c.update(block);
                    }
                    if let Some(s) = sha {
                        s.update(block);
                    }
                }
            }
            Inner::Joint(joint) => joint.update(data),
        }
    }

    /// The finished hashes, CRC-32 first (the order tensorizer writes).
    pub fn finish(self) -> Vec<HashValue> {
        let mut out = Vec::with_capacity(2);
        match self.inner {
            Inner::Separate { crc, sha } => {
                if let Some(c) = crc {
                    out.push(HashValue::Crc32(c.finalize()));
                }
                if let Some(s) = sha {
                    out.push(HashValue::Sha256(s.finalize().into()));
                }
            }
            Inner::Joint(joint) => {
                let (crc, sha) = joint.finish();
                out.push(HashValue::Crc32(crc));
                out.push(HashValue::Sha256(sha));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    fn the_joint_path_matches_the_libraries_for_every_split() {
        for (header_len, data_len) in
            [(0, 0), (1, 0), (0, 63), (55, 0), (56, 0), (64, 64), (77, 1000), (3, 4097)]
        {
            let header = bytes(header_len, 1);
            let data = bytes(data_len, 2);
            let mut separate = TensorHasher::new(&header, true, true);
            separate.update(&data);
            let expected = separate.finish();
            for step in [1, 7, 63, 64, 65, 200, 4096] {
                let mut joint =
                    TensorHasher::with_kernel(&header, true, true, Some(blocks_portable));
                for piece in data.chunks(step) {
                    joint.update(piece);
                }
                assert!(
                    joint.finish() == expected,
                    "header {header_len}, data {data_len}, pieces of {step}"
                );
            }
        }
    }

    #[test]
    fn a_kernel_is_used_only_when_both_hashes_are_wanted() {
        let data = bytes(300, 3);
        for (crc, sha) in [(true, false), (false, true), (false, false)] {
            let mut plain = TensorHasher::new(b"h", crc, sha);
            plain.update(&data);
            let mut with = TensorHasher::with_kernel(b"h", crc, sha, Some(blocks_portable));
            with.update(&data);
            assert!(plain.finish() == with.finish());
        }
    }
}
