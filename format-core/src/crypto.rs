//! XSalsa20-Poly1305 chunk encryption (libsodium `crypto_secretbox`
//! compatible, detached MACs) and Argon2id key derivation.
//!
//! Each chunk is sealed or opened independently, so hosts can spread the
//! chunks of one tensor over threads. Randomness (keys, nonces, salts) is
//! the host's business: this crate never generates any.

use alloc::vec::Vec;
use core::fmt;

use crypto_secretbox::aead::AeadInPlace;
use crypto_secretbox::aead::generic_array::GenericArray;
use crypto_secretbox::{KeyInit, XSalsa20Poly1305};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::codec::crypt_info::KdfParams;
use crate::error::{Error, Result};
use crate::layout::{
    DEFAULT_MAX_KDF_DERIVATIONS, DEFAULT_MAX_KDF_MEMLIMIT, DEFAULT_MAX_KDF_OPSLIMIT, DEFAULT_MAX_KDF_WORK, KEY_LEN,
    MAC_LEN, MIN_KDF_MEMLIMIT, NONCE_LEN, PWHASH_ALG_ARGON2ID13,
};

/// A 32-byte secretbox key. Zeroed on drop; `Debug` never prints it.
#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl Key {
    /// Wraps raw key bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Wraps a key given as a slice; it must be exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let arr: [u8; KEY_LEN] =
            bytes.try_into().map_err(|_| Error::Encryption { reason: "a key must be exactly 32 bytes" })?;
        Ok(Self(arr))
    }

    /// The raw key bytes (for hosts that must hand them to a user).
    pub fn expose_secret(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Derives a key from a passphrase with the stored Argon2id parameters,
    /// refusing costs above `limits` before doing any work.
    pub fn derive(passphrase: &[u8], params: &KdfParams, limits: &KdfLimits) -> Result<Self> {
        if params.alg != PWHASH_ALG_ARGON2ID13 {
            return Err(Error::Encryption { reason: "unsupported password hash algorithm" });
        }
        if params.memlimit > limits.max_memlimit || params.opslimit > limits.max_opslimit {
            return Err(Error::Encryption { reason: "key derivation cost is above the configured limit" });
        }
        if passphrase.is_empty() {
            return Err(Error::Encryption { reason: "empty passphrase" });
        }
        let m_cost = u32::try_from(params.memlimit / 1024)
            .map_err(|_| Error::Encryption { reason: "key derivation memory cost too large" })?;
        let t_cost = u32::try_from(params.opslimit)
            .map_err(|_| Error::Encryption { reason: "key derivation time cost too large" })?;
        if params.memlimit < MIN_KDF_MEMLIMIT || t_cost == 0 {
            return Err(Error::Encryption { reason: "key derivation cost below libsodium's minimum" });
        }
        let argon_params = argon2::Params::new(m_cost, t_cost, 1, Some(KEY_LEN))
            .map_err(|_| Error::Encryption { reason: "invalid key derivation parameters" })?;
        let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, argon_params);
        let mut key = [0u8; KEY_LEN];
        argon
            .hash_password_into(passphrase, &params.salt, &mut key)
            .map_err(|_| Error::Encryption { reason: "key derivation failed (check the salt length)" })?;
        Ok(Self(key))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// Upper bounds on key-derivation cost taken from an untrusted file: per
/// derivation, and for the whole file (see [`KeyRing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KdfLimits {
    /// Largest memlimit (bytes) accepted.
    pub max_memlimit: u64,
    /// Largest opslimit accepted.
    pub max_opslimit: u64,
    /// Most distinct derivations (salts and costs) one file may ask for.
    pub max_derivations: u32,
    /// Most Argon2id work one file may ask for, in KiB × passes summed over
    /// its distinct derivations.
    pub max_work: u64,
}

impl Default for KdfLimits {
    fn default() -> Self {
        Self {
            max_memlimit: DEFAULT_MAX_KDF_MEMLIMIT,
            max_opslimit: DEFAULT_MAX_KDF_OPSLIMIT,
            max_derivations: DEFAULT_MAX_KDF_DERIVATIONS,
            max_work: DEFAULT_MAX_KDF_WORK,
        }
    }
}

/// The keys derived from one passphrase for one file: each distinct
/// key-derivation setting is derived once, and the file as a whole stays
/// within [`KdfLimits::max_derivations`] and [`KdfLimits::max_work`]. Hosts
/// keep one per open file and share it between their readers (behind a
/// lock held while deriving, so two readers never derive the same key).
#[derive(Default)]
pub struct KeyRing {
    derived: Vec<(KdfParams, Key)>,
    work: u64,
}

impl KeyRing {
    /// The key for `params`, derived now unless it was derived before.
    /// Refuses, before doing any work, a derivation past the file's budget.
    pub fn key(&mut self, passphrase: &[u8], params: &KdfParams, limits: &KdfLimits) -> Result<Key> {
        if let Some((_, key)) = self.derived.iter().find(|(p, _)| p == params) {
            return Ok(key.clone());
        }
        if self.derived.len() >= limits.max_derivations as usize {
            return Err(Error::Encryption {
                reason: "the file asks for more distinct key derivations than KdfLimits::max_derivations allows",
            });
        }
        let work = (params.memlimit / 1024).saturating_mul(params.opslimit);
        let total = self.work.saturating_add(work);
        if total > limits.max_work {
            return Err(Error::Encryption {
                reason: "the file asks for more key derivation work than KdfLimits::max_work allows",
            });
        }
        let key = Key::derive(passphrase, params, limits)?;
        self.work = total;
        self.derived.push((params.clone(), key.clone()));
        Ok(key)
    }

    /// How many keys were derived so far.
    pub fn derivations(&self) -> usize {
        self.derived.len()
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing").field("derivations", &self.derived.len()).field("work", &self.work).finish()
    }
}

/// libsodium's named Argon2id cost presets: (opslimit, memlimit).
pub mod presets {
    /// `crypto_pwhash_*_MIN`.
    pub const MIN: (u64, u64) = (1, 8192);
    /// `crypto_pwhash_*_INTERACTIVE`.
    pub const INTERACTIVE: (u64, u64) = (2, 67_108_864);
    /// `crypto_pwhash_*_MODERATE` (tensorizer's default).
    pub const MODERATE: (u64, u64) = (3, 268_435_456);
    /// `crypto_pwhash_*_SENSITIVE`.
    pub const SENSITIVE: (u64, u64) = (4, 1_073_741_824);
}

/// Nonce of chunk `index`: the initial nonce plus `index`, as a 192-bit
/// little-endian counter (libsodium `sodium_increment`), wrapping.
pub fn chunk_nonce(initial: &[u8; NONCE_LEN], index: u64) -> [u8; NONCE_LEN] {
    let mut out = *initial;
    let mut carry = u128::from(index);
    for byte in &mut out {
        if carry == 0 {
            break;
        }
        let sum = u128::from(*byte) + (carry & 0xff);
        *byte = sum as u8;
        carry = (carry >> 8) + (sum >> 8);
    }
    out
}

/// Number of encryption chunks for `len` bytes.
pub fn chunk_count(len: u64, chunk_size: u64) -> u64 {
    if chunk_size == 0 { 0 } else { len.div_ceil(chunk_size) }
}

fn cipher(key: &Key) -> XSalsa20Poly1305 {
    XSalsa20Poly1305::new(GenericArray::from_slice(&key.0))
}

/// Encrypts chunk `index` in place and returns its MAC.
pub fn seal_chunk(key: &Key, initial_nonce: &[u8; NONCE_LEN], index: u64, buf: &mut [u8]) -> [u8; MAC_LEN] {
    let nonce = chunk_nonce(initial_nonce, index);
    let tag = cipher(key).encrypt_in_place_detached(GenericArray::from_slice(&nonce), b"", buf).unwrap_or_default();
    tag.into()
}

/// Decrypts chunk `index` in place, checking its MAC. On failure the
/// buffer keeps the ciphertext and the error says nothing more.
pub fn open_chunk(
    key: &Key,
    initial_nonce: &[u8; NONCE_LEN],
    index: u64,
    buf: &mut [u8],
    mac: &[u8; MAC_LEN],
) -> Result<()> {
    let nonce = chunk_nonce(initial_nonce, index);
    cipher(key)
        .decrypt_in_place_detached(GenericArray::from_slice(&nonce), b"", buf, GenericArray::from_slice(mac))
        .map_err(|_| Error::Decryption)
}

/// A passphrase, zeroed on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Passphrase(Vec<u8>);

impl Passphrase {
    /// Wraps passphrase bytes (a `str` passphrase is its UTF-8).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The bytes.
    pub fn expose_secret(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Passphrase(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn secretbox_vector_from_spec() {
        let key = Key::from_bytes(core::array::from_fn(|i| i as u8));
        let nonce: [u8; 24] = unhex("508820da74212a752fe698534bcd5167838e79c7a10db61c").try_into().unwrap();
        let mut buf = unhex("000000000000803f0000004000004040000080400000a040");
        let mac = seal_chunk(&key, &nonce, 0, &mut buf);
        assert_eq!(buf, unhex("bfde81e03bd2291999b93180570600ac9533ce0d7046ac98"));
        assert_eq!(mac.to_vec(), unhex("06c0e0a6cc1ef6874a1e2ea37abed1eb"));
        open_chunk(&key, &nonce, 0, &mut buf, &mac).unwrap();
        assert_eq!(buf, unhex("000000000000803f0000004000004040000080400000a040"));
        let wrong = Key::from_bytes([9; 32]);
        assert_eq!(open_chunk(&wrong, &nonce, 0, &mut buf, &mac), Err(Error::Decryption));
    }

    #[test]
    fn argon2id_vector_from_spec() {
        let params = KdfParams { opslimit: 1, memlimit: 8192, alg: 2, salt: alloc::vec![0; 16] };
        let key = Key::derive(b"hunter2", &params, &KdfLimits::default()).unwrap();
        assert_eq!(
            key.expose_secret().to_vec(),
            unhex("8315324b07f486af074d47a9d137668c1fc304a159cc9acd6ba5cf3adf7df577")
        );
        let greedy = KdfParams { memlimit: 1 << 40, ..params };
        assert!(Key::derive(b"hunter2", &greedy, &KdfLimits::default()).is_err());
    }

    #[test]
    fn nonce_counter_carries_and_wraps() {
        let mut n = [0xffu8; 24];
        n[23] = 0;
        let next = chunk_nonce(&n, 1);
        assert_eq!(&next[..23], &[0u8; 23]);
        assert_eq!(next[23], 1);
        assert_eq!(chunk_nonce(&[0xff; 24], 1), [0; 24]);
        assert_eq!(chunk_nonce(&[0; 24], 0x0102)[..3], [2, 1, 0]);
        assert_eq!(alloc::format!("{:?}", Key::from_bytes([1; 32])), "Key(<redacted>)");
    }

    #[test]
    fn key_ring_derives_once_per_setting_within_the_budget() {
        let params = |salt: u8| KdfParams { alg: 2, opslimit: 1, memlimit: 8192, salt: [salt; 16].to_vec() };
        let limits = KdfLimits { max_derivations: 2, ..KdfLimits::default() };
        let mut ring = KeyRing::default();
        let a = ring.key(b"pw", &params(1), &limits).unwrap();
        assert_eq!(ring.key(b"pw", &params(1), &limits).unwrap(), a);
        ring.key(b"pw", &params(2), &limits).unwrap();
        assert_eq!(ring.derivations(), 2);
        assert!(matches!(ring.key(b"pw", &params(3), &limits), Err(Error::Encryption { .. })));
        // Work: 8 KiB × 1 pass each; a budget of 12 admits one derivation.
        let tight = KdfLimits { max_work: 12, ..KdfLimits::default() };
        let mut ring = KeyRing::default();
        ring.key(b"pw", &params(1), &tight).unwrap();
        assert!(ring.key(b"pw", &params(2), &tight).is_err());
        assert_eq!(ring.derivations(), 1);
    }
}
