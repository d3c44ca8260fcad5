//! XSalsa20-Poly1305 chunk encryption (libsodium `crypto_secretbox`
//! compatible, detached MACs) and Argon2id key derivation.
//!
//! Each chunk is sealed or opened independently, so hosts can spread the
//! chunks of one tensor over threads. Randomness (keys, nonces, salts) is
//! the host's business: this crate never generates any.

use alloc::vec::Vec;
use core::fmt;

use poly1305::Poly1305;
use poly1305::universal_hash::{KeyInit, UniversalHash};
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::codec::crypt_info::KdfParams;
use crate::error::{Error, Result};
mod salsa;

pub use salsa::{BLOCK_LEN as SALSA_BLOCK_LEN, StreamState, xor_keystream, xor_keystream_portable};

use crate::layout::{
    DEFAULT_MAX_KDF_DERIVATIONS, DEFAULT_MAX_KDF_MEMLIMIT, DEFAULT_MAX_KDF_OPSLIMIT,
    DEFAULT_MAX_KDF_WORK, KEY_LEN, MAC_LEN, MAX_KDF_MEMLIMIT, MAX_KDF_OPSLIMIT, MIN_KDF_MEMLIMIT,
    MIN_KDF_OPSLIMIT, NONCE_LEN, PWHASH_ALG_ARGON2ID13,
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
        let arr: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| Error::Encryption { reason: "a key must be exactly 32 bytes" })?;
        Ok(Self(arr))
    }

    /// The raw key bytes (for hosts that must hand them to a user).
    pub fn expose_secret(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Derives a key from a passphrase with the stored Argon2id parameters,
    /// refusing costs above `limits` before doing any work. Portable (the
    /// RustCrypto `argon2` crate); hosts may pass their own [`DeriveFn`] to
    /// [`KeyRing::key_deriving`] and use this one as the oracle.
    pub fn derive(passphrase: &[u8], params: &KdfParams, limits: &KdfLimits) -> Result<Self> {
        let (m_cost, t_cost) = argon2id_costs(passphrase, params, limits)?;
        let argon_params = argon2::Params::new(m_cost, t_cost, 1, Some(KEY_LEN))
            .map_err(|_| Error::Encryption { reason: "invalid key derivation parameters" })?;
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, argon_params);
        let mut key = [0u8; KEY_LEN];
        argon.hash_password_into(passphrase, &params.salt, &mut key).map_err(|_| {
            Error::Encryption { reason: "key derivation failed (check the salt length)" }
        })?;
        Ok(Self(key))
    }
}

/// A key-derivation function with [`Key::derive`]'s contract: libsodium
/// `crypto_pwhash` Argon2id (version 1.3, one lane), the same checks first.
pub type DeriveFn = fn(&[u8], &KdfParams, &KdfLimits) -> Result<Key>;

/// The checks every [`DeriveFn`] makes before any work: the algorithm, the
/// configured limits, libsodium's bounds on the costs ([`MIN_KDF_MEMLIMIT`]
/// to [`MAX_KDF_MEMLIMIT`], [`MIN_KDF_OPSLIMIT`] to [`MAX_KDF_OPSLIMIT`]), a
/// non-empty passphrase, and a salt of [`MIN_KDF_SALT_LEN`] to
/// [`MAX_KDF_SALT_LEN`] bytes. Returns Argon2id's
/// (memory cost in KiB, passes).
pub fn argon2id_costs(
    passphrase: &[u8],
    params: &KdfParams,
    limits: &KdfLimits,
) -> Result<(u32, u32)> {
    if params.alg != PWHASH_ALG_ARGON2ID13 {
        return Err(Error::Encryption { reason: "unsupported password hash algorithm" });
    }
    if params.memlimit > limits.max_memlimit || params.opslimit > limits.max_opslimit {
        return Err(Error::Encryption {
            reason: "key derivation cost is above the configured limit",
        });
    }
    if params.memlimit > MAX_KDF_MEMLIMIT || params.opslimit > MAX_KDF_OPSLIMIT {
        // Past what libsodium accepts, even when the caller lifted the
        // configured limits entirely.
        return Err(Error::Encryption { reason: "key derivation cost above libsodium's maximum" });
    }
    if passphrase.is_empty() {
        return Err(Error::Encryption { reason: "empty passphrase" });
    }
    let m_cost = u32::try_from(params.memlimit / 1024)
        .map_err(|_| Error::Encryption { reason: "key derivation memory cost too large" })?;
    let t_cost = u32::try_from(params.opslimit)
        .map_err(|_| Error::Encryption { reason: "key derivation time cost too large" })?;
    if params.memlimit < MIN_KDF_MEMLIMIT || params.opslimit < MIN_KDF_OPSLIMIT {
        return Err(Error::Encryption { reason: "key derivation cost below libsodium's minimum" });
    }
    if params.salt.len() < MIN_KDF_SALT_LEN || params.salt.len() > MAX_KDF_SALT_LEN {
        return Err(Error::Encryption { reason: "key derivation failed (check the salt length)" });
    }
    Ok((m_cost, t_cost))
}

/// Shortest Argon2 salt accepted (the Argon2 specification's minimum).
pub const MIN_KDF_SALT_LEN: usize = 8;
/// Longest Argon2 salt accepted (what the `argon2` crate takes).
pub const MAX_KDF_SALT_LEN: usize = 64;

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
    pub fn key(
        &mut self,
        passphrase: &[u8],
        params: &KdfParams,
        limits: &KdfLimits,
    ) -> Result<Key> {
        self.key_deriving(passphrase, params, limits, Key::derive)
    }

    /// [`KeyRing::key`] deriving with `derive` (a host's faster Argon2id).
    pub fn key_deriving(
        &mut self,
        passphrase: &[u8],
        params: &KdfParams,
        limits: &KdfLimits,
        derive: DeriveFn,
    ) -> Result<Key> {
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
        let key = derive(passphrase, params, limits)?;
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
        f.debug_struct("KeyRing")
            .field("derivations", &self.derived.len())
            .field("work", &self.work)
            .finish()
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

/// A Salsa20 keystream kernel: XORs the keystream of `state` from block
/// number `block` on into `data` (which may end in a partial block).
/// [`xor_keystream_portable`] is the default; hosts may pass a faster
/// instantiation of [`xor_keystream`] (for example 8 lanes compiled for
/// AVX2 after detecting it at run time). Every kernel gives the same bytes.
pub type Kernel = fn(&StreamState, u64, &mut [u8]);

/// Data is MACed and XORed in steps of this many bytes, so the second pass
/// over each step finds it in L1 cache (a multiple of the Salsa20 block
/// and of the Poly1305 block).
const STEP: usize = 16384;

/// The keystream of one chunk: libsodium's secretbox spends the first 32
/// bytes of block 0 on the Poly1305 key and XORs the data from byte 32 on.
struct Keystream {
    stream: StreamState,
    /// Keystream bytes 32..64 of block 0, for the first 32 data bytes.
    head: Zeroizing<[u8; 32]>,
}

impl Keystream {
    /// The chunk's keystream and its Poly1305 instance.
    fn new(
        key: &Key,
        initial_nonce: &[u8; NONCE_LEN],
        index: u64,
        kernel: Kernel,
    ) -> (Self, Poly1305) {
        let stream = StreamState::xsalsa20(&key.0, &chunk_nonce(initial_nonce, index));
        let mut block0 = Zeroizing::new([0u8; SALSA_BLOCK_LEN]);
        kernel(&stream, 0, &mut block0[..]);
        let mac = Poly1305::new(poly1305::Key::from_slice(&block0[..32]));
        let mut head = Zeroizing::new([0u8; 32]);
        head.copy_from_slice(&block0[32..]);
        (Self { stream, head }, mac)
    }

    /// XORs the keystream into `step`, which starts `at` bytes into the data.
    fn xor(&self, kernel: Kernel, at: usize, step: &mut [u8]) {
        if at == 0 {
            let (first, rest) = step.split_at_mut(step.len().min(32));
            for (b, k) in first.iter_mut().zip(self.head.iter()) {
                *b ^= k;
            }
            kernel(&self.stream, 1, rest);
        } else {
            kernel(&self.stream, 1 + ((at - 32) / SALSA_BLOCK_LEN) as u64, step);
        }
    }
}

/// Poly1305 over data fed in steps whose lengths are multiples of 16
/// except the last; the last partial block waits in `tail`.
struct Authenticator {
    mac: Poly1305,
    tail: [u8; 16],
    tail_len: usize,
}

impl Authenticator {
    fn update(&mut self, step: &[u8]) {
        let full = step.len() - step.len() % 16;
        self.mac.update_padded(&step[..full]);
        let rest = &step[full..];
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_len = rest.len();
    }

    fn tag(self) -> [u8; MAC_LEN] {
        self.mac.compute_unpadded(&self.tail[..self.tail_len]).into()
    }
}

/// Offsets and lengths of the steps of `len` data bytes: 32 bytes (block
/// 0's share), then [`STEP`] bytes at a time.
fn steps(len: usize) -> impl Iterator<Item = (usize, usize)> {
    let first = len.min(32);
    core::iter::once((0, first))
        .filter(|(_, n)| *n > 0)
        .chain((first..len).step_by(STEP).map(move |at| (at, STEP.min(len - at))))
}

/// Encrypts chunk `index` in place and returns its MAC.
pub fn seal_chunk(
    key: &Key,
    initial_nonce: &[u8; NONCE_LEN],
    index: u64,
    buf: &mut [u8],
) -> [u8; MAC_LEN] {
    seal_chunk_on(key, initial_nonce, index, buf, xor_keystream_portable)
}

/// [`seal_chunk`] with a chosen keystream kernel.
pub fn seal_chunk_on(
    key: &Key,
    initial_nonce: &[u8; NONCE_LEN],
    index: u64,
    buf: &mut [u8],
    kernel: Kernel,
) -> [u8; MAC_LEN] {
    let (keystream, mac) = Keystream::new(key, initial_nonce, index, kernel);
    let mut auth = Authenticator { mac, tail: [0; 16], tail_len: 0 };
    for (at, n) in steps(buf.len()) {
        let step = &mut buf[at..at + n];
        keystream.xor(kernel, at, step);
        auth.update(step);
    }
    auth.tag()
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
    open_chunk_on(key, initial_nonce, index, buf, mac, xor_keystream_portable)
}

/// [`open_chunk`] with a chosen keystream kernel. Each step of the data is
/// MACed and then decrypted while it is in cache; when the tag does not
/// match, the keystream is applied again, which restores the ciphertext.
pub fn open_chunk_on(
    key: &Key,
    initial_nonce: &[u8; NONCE_LEN],
    index: u64,
    buf: &mut [u8],
    mac: &[u8; MAC_LEN],
    kernel: Kernel,
) -> Result<()> {
    let (keystream, poly) = Keystream::new(key, initial_nonce, index, kernel);
    let mut auth = Authenticator { mac: poly, tail: [0; 16], tail_len: 0 };
    for (at, n) in steps(buf.len()) {
        let step = &mut buf[at..at + n];
        auth.update(step);
        keystream.xor(kernel, at, step);
    }
    if bool::from(auth.tag().ct_eq(mac)) {
        return Ok(());
    }
    for (at, n) in steps(buf.len()) {
        keystream.xor(kernel, at, &mut buf[at..at + n]);
    }
    Err(Error::Decryption)
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
        let nonce: [u8; 24] =
            unhex("508820da74212a752fe698534bcd5167838e79c7a10db61c").try_into().unwrap();
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
        let params = KdfParams::argon2id(1, 8192, alloc::vec![0; 16]);
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
        let params = |salt: u8| KdfParams::argon2id(1, 8192, [salt; 16].to_vec());
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

    /// libsodium's construction as RustCrypto implements it, for comparison.
    fn reference_seal(key: &Key, nonce: &[u8; 24], buf: &mut [u8]) -> [u8; 16] {
        use crypto_secretbox::aead::AeadInPlace;
        use crypto_secretbox::aead::generic_array::GenericArray;
        use crypto_secretbox::{KeyInit as _, XSalsa20Poly1305};
        let c = XSalsa20Poly1305::new(GenericArray::from_slice(key.expose_secret()));
        c.encrypt_in_place_detached(GenericArray::from_slice(nonce), b"", buf).unwrap().into()
    }

    fn lanes8(state: &StreamState, block: u64, data: &mut [u8]) {
        xor_keystream::<8>(state, block, data);
    }

    proptest::proptest! {
        #[test]
        fn seal_and_open_match_the_reference(
            key in proptest::array::uniform32(proptest::num::u8::ANY),
            nonce in proptest::collection::vec(proptest::num::u8::ANY, 24),
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..9000),
            index in 0u64..1000,
            flip in proptest::option::of(0usize..9000),
        ) {
            let key = Key::from_bytes(key);
            let initial: [u8; 24] = nonce.try_into().unwrap();
            let mut expected = data.clone();
            let expected_mac = reference_seal(&key, &chunk_nonce(&initial, index), &mut expected);
            for kernel in [xor_keystream_portable as Kernel, lanes8] {
                let mut buf = data.clone();
                let mac = seal_chunk_on(&key, &initial, index, &mut buf, kernel);
                proptest::prop_assert_eq!(&buf, &expected);
                proptest::prop_assert_eq!(mac, expected_mac);
                let mut bad_mac = mac;
                match flip {
                    Some(i) if i < buf.len() => buf[i] ^= 1,
                    Some(_) => bad_mac[0] ^= 1,
                    None => {}
                }
                let tampered = buf.clone();
                let opened = open_chunk_on(&key, &initial, index, &mut buf, &bad_mac, kernel);
                if flip.is_some() {
                    proptest::prop_assert_eq!(opened, Err(Error::Decryption));
                    proptest::prop_assert_eq!(&buf, &tampered);
                } else {
                    proptest::prop_assert_eq!(opened, Ok(()));
                    proptest::prop_assert_eq!(&buf, &data);
                }
            }
        }
    }
}
