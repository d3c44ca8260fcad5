//! The crypt-info block of encrypted files: parse and emit side by side.

use alloc::vec::Vec;

use super::cursor::{Cursor, Emit};
use crate::error::{Error, Result};
use crate::layout::{
    CRYPT_CHUNK_QUANTUM, MAC_LEN, MIN_CRYPT_CHUNK_SIZE, NONCE_LEN, PWHASH_ALG_ARGON2ID13, SALT_LEN,
};

const CHUNK_KEY_DERIVATION: u16 = 1;
const CHUNK_XSALSA20_PARALLEL: u16 = 2;
const CHUNK_XSALSA20_SEQUENTIAL: u16 = 3;
const KDF_METHOD_PWHASH: u16 = 1;

/// Argon2id parameters stored in a key-derivation chunk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KdfParams {
    /// libsodium opslimit = Argon2 time cost.
    pub opslimit: u64,
    /// libsodium memlimit in bytes (Argon2 memory cost × 1024).
    pub memlimit: u64,
    /// libsodium algorithm id (2 = Argon2id v1.3).
    pub alg: i32,
    /// The salt (16 bytes in files tensorizer writes).
    pub salt: Vec<u8>,
}

impl KdfParams {
    /// Argon2id v1.3 (libsodium's `crypto_pwhash_ALG_ARGON2ID13`, the only
    /// algorithm tensorizer writes) with these costs and salt.
    pub fn argon2id(opslimit: u64, memlimit: u64, salt: Vec<u8>) -> Self {
        Self { opslimit, memlimit, alg: PWHASH_ALG_ARGON2ID13, salt }
    }
}

/// One chunk of a crypt-info block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CryptChunk {
    /// How to derive the key from a passphrase.
    KeyDerivation(KdfParams),
    /// XSalsa20-Poly1305 over fixed-size chunks with counter nonces.
    Parallel {
        /// Plaintext bytes per chunk (the last may be shorter).
        chunk_size: u64,
        /// Nonce of chunk 0; chunk `i` uses `nonce + i` (192-bit LE).
        nonce: [u8; NONCE_LEN],
        /// One Poly1305 tag per chunk.
        macs: Vec<[u8; MAC_LEN]>,
    },
    /// One XSalsa20-Poly1305 box over the whole data (read-only support).
    Sequential {
        /// The nonce.
        nonce: [u8; NONCE_LEN],
        /// The tag.
        mac: [u8; MAC_LEN],
    },
}

/// A crypt-info block: a list of chunks. Empty for tensors with no data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CryptInfo {
    /// The chunks, in stored order.
    pub chunks: Vec<CryptChunk>,
}

impl CryptInfo {
    /// Parses the block body (after its u64 length); `offset` is absolute.
    pub fn parse(bytes: &[u8], offset: u64) -> Result<Self> {
        let mut c = Cursor::new(bytes, offset);
        let count = c.u16()?;
        let mut chunks = Vec::with_capacity(usize::from(count).min(c.remaining() / 10));
        for _ in 0..count {
            let len = c.u64()?;
            let at = c.offset();
            let body = c.take(len)?;
            chunks.push(CryptChunk::parse(body, at)?);
        }
        Ok(Self { chunks })
    }

    /// Appends the block including its u64 length prefix.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u64(self.encoded_len() - 8);
        out.put_u16(self.chunks.len() as u16);
        for chunk in &self.chunks {
            out.put_u64(chunk.encoded_len());
            chunk.emit(out);
        }
    }

    /// Length of the block including its u64 length prefix.
    pub fn encoded_len(&self) -> u64 {
        8 + 2 + self.chunks.iter().map(|c| 8 + c.encoded_len()).sum::<u64>()
    }

    /// The key-derivation parameters, if there is exactly one such chunk.
    pub fn kdf(&self) -> Result<&KdfParams> {
        let mut found = self.chunks.iter().filter_map(|c| match c {
            CryptChunk::KeyDerivation(p) => Some(p),
            _ => None,
        });
        match (found.next(), found.next()) {
            (Some(p), None) => Ok(p),
            _ => Err(Error::Encryption {
                reason: "a passphrase needs exactly one key-derivation chunk in the tensor header",
            }),
        }
    }

    /// The single encryption chunk, or `None` when the tensor is stored in
    /// plain text (no chunks at all).
    pub fn cipher(&self) -> Result<Option<&CryptChunk>> {
        if self.chunks.is_empty() {
            return Ok(None);
        }
        let mut found = self.chunks.iter().filter(|c| !matches!(c, CryptChunk::KeyDerivation(_)));
        match (found.next(), found.next()) {
            (Some(c), None) => Ok(Some(c)),
            _ => Err(Error::Encryption { reason: "expected exactly one encryption chunk" }),
        }
    }
}

impl CryptChunk {
    fn parse(bytes: &[u8], offset: u64) -> Result<Self> {
        let mut c = Cursor::new(bytes, offset);
        match c.u16()? {
            CHUNK_KEY_DERIVATION => {
                let at = c.offset();
                if c.u16()? != KDF_METHOD_PWHASH {
                    return Err(Error::malformed(at, "unknown key derivation method"));
                }
                let opslimit = c.u64()?;
                let memlimit = c.u64()?;
                let alg = c.i32()?;
                let salt_at = c.offset();
                let salt_len = c.u16()?;
                if usize::from(salt_len) != SALT_LEN {
                    return Err(Error::malformed(salt_at, "key derivation salt is not 16 bytes"));
                }
                let salt = c.take(salt_len.into())?.to_vec();
                Ok(Self::KeyDerivation(KdfParams { opslimit, memlimit, alg, salt }))
            }
            CHUNK_XSALSA20_PARALLEL => {
                let at = c.offset();
                let chunk_size = c.u64()?;
                if chunk_size < MIN_CRYPT_CHUNK_SIZE || chunk_size % CRYPT_CHUNK_QUANTUM != 0 {
                    return Err(Error::malformed(at, "invalid encryption chunk size"));
                }
                let nonce = c.array()?;
                let count_at = c.offset();
                let count = c.u64()?;
                let Some(len) = count.checked_mul(MAC_LEN as u64) else {
                    return Err(Error::malformed(count_at, "MAC count overflows"));
                };
                let raw = c.take(len)?;
                let macs = raw
                    .chunks_exact(MAC_LEN)
                    .map(|m| {
                        let mut mac = [0u8; MAC_LEN];
                        mac.copy_from_slice(m);
                        mac
                    })
                    .collect();
                Ok(Self::Parallel { chunk_size, nonce, macs })
            }
            CHUNK_XSALSA20_SEQUENTIAL => {
                Ok(Self::Sequential { nonce: c.array()?, mac: c.array()? })
            }
            _ => Err(Error::malformed(offset, "unknown crypt-info chunk type")),
        }
    }

    fn emit(&self, out: &mut Vec<u8>) {
        match self {
            Self::KeyDerivation(p) => {
                out.put_u16(CHUNK_KEY_DERIVATION);
                out.put_u16(KDF_METHOD_PWHASH);
                out.put_u64(p.opslimit);
                out.put_u64(p.memlimit);
                out.put_i32(p.alg);
                out.put_u16(p.salt.len() as u16);
                out.put(&p.salt);
            }
            Self::Parallel { chunk_size, nonce, macs } => {
                out.put_u16(CHUNK_XSALSA20_PARALLEL);
                out.put_u64(*chunk_size);
                out.put(nonce);
                out.put_u64(macs.len() as u64);
                for mac in macs {
                    out.put(mac);
                }
            }
            Self::Sequential { nonce, mac } => {
                out.put_u16(CHUNK_XSALSA20_SEQUENTIAL);
                out.put(nonce);
                out.put(mac);
            }
        }
    }

    /// Length of the chunk (type and body, without its u64 length).
    pub fn encoded_len(&self) -> u64 {
        match self {
            Self::KeyDerivation(p) => 2 + 2 + 8 + 8 + 4 + 2 + p.salt.len() as u64,
            Self::Parallel { macs, .. } => {
                2 + 8 + NONCE_LEN as u64 + 8 + (MAC_LEN * macs.len()) as u64
            }
            Self::Sequential { .. } => 2 + (NONCE_LEN + MAC_LEN) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_chunk_kinds() {
        let info = CryptInfo {
            chunks: alloc::vec![
                CryptChunk::KeyDerivation(KdfParams::argon2id(1, 8192, alloc::vec![0; SALT_LEN])),
                CryptChunk::Parallel {
                    chunk_size: 2 << 20,
                    nonce: [7; 24],
                    macs: alloc::vec![[1; 16], [2; 16]]
                },
                CryptChunk::Sequential { nonce: [3; 24], mac: [4; 16] },
            ],
        };
        let mut out = Vec::new();
        info.emit(&mut out);
        assert_eq!(out.len() as u64, info.encoded_len());
        assert_eq!(CryptInfo::parse(&out[8..], 8).unwrap(), info);
        // The KDF chunk is 42 bytes, the parallel chunk 42 + 16n (spec §9).
        assert_eq!(info.chunks[0].encoded_len(), 42);
        assert_eq!(info.chunks[1].encoded_len(), 42 + 32);
    }

    #[test]
    fn hostile_mac_count_does_not_allocate() {
        let mut body = Vec::new();
        body.put_u16(1);
        body.put_u64(42);
        body.put_u16(2);
        body.put_u64(2 << 20);
        body.put(&[0; 24]);
        body.put_u64(u64::MAX / 8);
        assert!(matches!(
            CryptInfo::parse(&body, 0),
            Err(Error::Truncated { .. } | Error::Malformed { .. })
        ));
    }
}
