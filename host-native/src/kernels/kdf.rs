//! Argon2id (version 1.3, one lane) byte-identical to libsodium's
//! `crypto_pwhash_argon2id`, with the block compression (BlaMka) in AVX2
//! registers when the CPU has them (`avx2`, picked once at run time) and
//! a portable kernel otherwise. The core's [`Key::derive`] (the RustCrypto
//! `argon2` crate) stays the portable implementation and the test oracle.

use std::sync::OnceLock;

use blake2::digest::{Digest, Update, VariableOutput};
use blake2::{Blake2b512, Blake2bVar};
use tensorizer_core::KdfParams;
use tensorizer_core::crypto::{KdfLimits, Key, argon2id_costs};
use zeroize::Zeroize;

#[cfg(target_arch = "x86_64")]
mod avx2;
mod memory;

/// 64-bit words per 1 KiB Argon2 block.
pub const BLOCK_WORDS: usize = 128;
/// One Argon2 block.
pub type Block = [u64; BLOCK_WORDS];
/// Segments per lane pass (Argon2's sync points).
const SYNC_POINTS: usize = 4;
/// Pseudo-random references per address block.
const ADDRESSES_PER_BLOCK: usize = BLOCK_WORDS;
/// Argon2 version 1.3.
const VERSION: u32 = 0x13;
/// Argon2id's type number.
const ARGON2ID: u64 = 2;
/// Output length (a secretbox key).
const TAG_LEN: usize = 32;

/// `state ← G(state, refb)`, written to `next` too (`next ^= …` when
/// `xor`): Argon2's compression of the previous and the reference block.
pub type FillFn = fn(state: &mut Block, refb: &Block, next: &mut Block, xor: bool);

/// Derives the key as [`Key::derive`] does (same checks, same bytes), with
/// the fastest kernel this CPU runs.
pub fn derive(
    passphrase: &[u8],
    params: &KdfParams,
    limits: &KdfLimits,
) -> tensorizer_core::Result<Key> {
    derive_on(passphrase, params, limits, kernel())
}

/// [`derive()`] with a chosen compression kernel (for tests and benchmarks).
pub fn derive_on(
    passphrase: &[u8],
    params: &KdfParams,
    limits: &KdfLimits,
    fill: FillFn,
) -> tensorizer_core::Result<Key> {
    let (m_cost, t_cost) = argon2id_costs(passphrase, params, limits)?;
    let mut tag = [0u8; TAG_LEN];
    hash(passphrase, &params.salt, m_cost, t_cost, &mut tag, fill);
    let key = Key::from_bytes(tag);
    tag.zeroize();
    Ok(key)
}

/// The kernel [`derive()`] uses, and its name.
pub fn kernel() -> FillFn {
    static CHOSEN: OnceLock<(FillFn, &'static str)> = OnceLock::new();
    CHOSEN.get_or_init(detect).0
}

/// Name of the kernel [`derive()`] uses (for benchmarks and diagnostics).
pub fn kernel_name() -> &'static str {
    detect().1
}

#[cfg(target_arch = "x86_64")]
fn detect() -> (FillFn, &'static str) {
    if std::arch::is_x86_feature_detected!("avx2") {
        (avx2::fill, "avx2")
    } else {
        (fill_portable, "portable")
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> (FillFn, &'static str) {
    (fill_portable, "portable")
}

/// Argon2id of `pwd` and `salt` with `m_cost` KiB and `t_cost` passes, one
/// lane, no secret or associated data, into `out` (at most 64 bytes).
fn hash(pwd: &[u8], salt: &[u8], m_cost: u32, t_cost: u32, out: &mut [u8; TAG_LEN], fill: FillFn) {
    // Memory: at least 2 blocks per segment, a whole number of segments.
    let segment = (m_cost as usize).max(2 * SYNC_POINTS) / SYNC_POINTS;
    let blocks = segment * SYNC_POINTS;

    let mut h0 = Blake2b512::new();
    for v in [1, TAG_LEN as u32, m_cost, t_cost, VERSION, ARGON2ID as u32] {
        Digest::update(&mut h0, v.to_le_bytes());
    }
    Digest::update(&mut h0, (pwd.len() as u32).to_le_bytes());
    Digest::update(&mut h0, pwd);
    Digest::update(&mut h0, (salt.len() as u32).to_le_bytes());
    Digest::update(&mut h0, salt);
    Digest::update(&mut h0, 0u32.to_le_bytes()); // secret
    Digest::update(&mut h0, 0u32.to_le_bytes()); // associated data
    let mut seed = [0u8; 72];
    seed[..64].copy_from_slice(&h0.finalize());

    // Every block is written before it is read.
    let mut memory = memory::zeroed(blocks * BLOCK_WORDS);
    let mut bytes = [0u8; 1024];
    for (i, block) in memory.chunks_exact_mut(BLOCK_WORDS).take(2).enumerate() {
        seed[64..68].copy_from_slice(&(i as u32).to_le_bytes());
        seed[68..72].copy_from_slice(&0u32.to_le_bytes());
        h_prime(&seed, &mut bytes);
        for (w, b) in block.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(b.try_into().unwrap_or_default());
        }
    }
    seed.zeroize();

    fill_memory(&mut memory, segment, t_cost as usize, fill);

    let last = &memory[(blocks - 1) * BLOCK_WORDS..];
    for (b, w) in bytes.chunks_exact_mut(8).zip(last) {
        b.copy_from_slice(&w.to_le_bytes());
    }
    h_prime(&bytes, out);
    bytes.zeroize();
    memory.zeroize();
}

/// Argon2's variable-length hash H' of `input` into `out`.
fn h_prime(input: &[u8], out: &mut [u8]) {
    let len = (out.len() as u32).to_le_bytes();
    if out.len() <= 64 {
        let mut h = Blake2bVar::new(out.len()).unwrap_or_else(|_| unreachable_len());
        h.update(&len);
        h.update(input);
        let _ = h.finalize_variable(out);
        return;
    }
    let mut v: [u8; 64] = {
        let mut h = Blake2b512::new();
        Digest::update(&mut h, len);
        Digest::update(&mut h, input);
        h.finalize().into()
    };
    let mut at = 0;
    while out.len() - at > 64 {
        out[at..at + 32].copy_from_slice(&v[..32]);
        at += 32;
        if out.len() - at > 64 {
            v = Blake2b512::digest(v).into();
        }
    }
    let rest = out.len() - at;
    let mut h = Blake2bVar::new(rest).unwrap_or_else(|_| unreachable_len());
    h.update(&v);
    let _ = h.finalize_variable(&mut out[at..]);
    v.zeroize();
}

#[cold]
fn unreachable_len() -> Blake2bVar {
    // 1..=64 is always a valid Blake2b output length.
    Blake2bVar::new(64).unwrap_or_else(|_| unreachable!("64 is a valid Blake2b length"))
}

/// The passes over memory (one lane, four segments per pass).
fn fill_memory(memory: &mut [u64], segment: usize, passes: usize, fill: FillFn) {
    let lane = segment * SYNC_POINTS;
    let mut state: Block = [0; BLOCK_WORDS];
    let zero: Block = [0; BLOCK_WORDS];
    let mut input: Block = [0; BLOCK_WORDS];
    let mut address: Block = [0; BLOCK_WORDS];
    state.copy_from_slice(&memory[BLOCK_WORDS..2 * BLOCK_WORDS]);
    for pass in 0..passes {
        for slice in 0..SYNC_POINTS {
            // Argon2id: data-independent addressing in the first half pass.
            let independent = pass == 0 && slice < SYNC_POINTS / 2;
            if independent {
                input = [0; BLOCK_WORDS];
                input[0] = pass as u64;
                input[1] = 0; // lane
                input[2] = slice as u64;
                input[3] = lane as u64;
                input[4] = passes as u64;
                input[5] = ARGON2ID;
            }
            let first = if pass == 0 && slice == 0 {
                if independent {
                    next_addresses(&mut input, &mut address, &zero);
                }
                2
            } else {
                0
            };
            for index in first..segment {
                let cur = slice * segment + index;
                let prev = if cur == 0 { lane - 1 } else { cur - 1 };
                let rand = if independent {
                    if index % ADDRESSES_PER_BLOCK == 0 {
                        next_addresses(&mut input, &mut address, &zero);
                    }
                    address[index % ADDRESSES_PER_BLOCK]
                } else {
                    // The previous block is what `state` holds.
                    debug_assert_eq!(state[0], memory[prev * BLOCK_WORDS]);
                    state[0]
                };
                let refi = reference(pass, slice, index, segment, rand as u32);
                let (lo, hi) = memory.split_at_mut(cur * BLOCK_WORDS);
                let (next, hi) = hi.split_at_mut(BLOCK_WORDS);
                let refb = if refi < cur {
                    &lo[refi * BLOCK_WORDS..(refi + 1) * BLOCK_WORDS]
                } else {
                    let at = (refi - cur - 1) * BLOCK_WORDS;
                    &hi[at..at + BLOCK_WORDS]
                };
                let (Ok(refb), Ok(next)) = (<&Block>::try_from(refb), <&mut Block>::try_from(next))
                else {
                    unreachable!("blocks are BLOCK_WORDS long");
                };
                fill(&mut state, refb, next, pass != 0);
            }
        }
    }
    state.zeroize();
    address.zeroize();
}

/// The next block of pseudo-random references: G(0, G(0, input)).
fn next_addresses(input: &mut Block, address: &mut Block, zero: &Block) {
    input[6] += 1;
    let mut state = *zero;
    fill_portable(&mut state, input, address, false);
    let mut state = *zero;
    let first = *address;
    fill_portable(&mut state, &first, address, false);
}

/// The block referenced at `index` of segment `slice` in pass `pass`, from
/// the low 32 bits of the pseudo-random value (one lane: always this lane).
fn reference(pass: usize, slice: usize, index: usize, segment: usize, rand: u32) -> usize {
    let lane = segment * SYNC_POINTS;
    let area = if pass == 0 { slice * segment + index - 1 } else { lane - segment + index - 1 };
    let x = (u64::from(rand) * u64::from(rand)) >> 32;
    let rel = area as u64 - 1 - ((area as u64 * x) >> 32);
    let start = if pass == 0 || slice == SYNC_POINTS - 1 { 0 } else { (slice + 1) * segment };
    (start + rel as usize) % lane
}

/// The BlaMka mix of four words.
#[inline(always)]
fn g(v: &mut Block, a: usize, b: usize, c: usize, d: usize) {
    let mul = |x: u64, y: u64| 2u64.wrapping_mul(x & 0xffff_ffff).wrapping_mul(y & 0xffff_ffff);
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(mul(v[a], v[b]));
    v[d] = (v[d] ^ v[a]).rotate_right(32);
    v[c] = v[c].wrapping_add(v[d]).wrapping_add(mul(v[c], v[d]));
    v[b] = (v[b] ^ v[c]).rotate_right(24);
    v[a] = v[a].wrapping_add(v[b]).wrapping_add(mul(v[a], v[b]));
    v[d] = (v[d] ^ v[a]).rotate_right(16);
    v[c] = v[c].wrapping_add(v[d]).wrapping_add(mul(v[c], v[d]));
    v[b] = (v[b] ^ v[c]).rotate_right(63);
}

/// The permutation P on the 16 words at `w`.
#[inline(always)]
fn p(v: &mut Block, w: [usize; 16]) {
    g(v, w[0], w[4], w[8], w[12]);
    g(v, w[1], w[5], w[9], w[13]);
    g(v, w[2], w[6], w[10], w[14]);
    g(v, w[3], w[7], w[11], w[15]);
    g(v, w[0], w[5], w[10], w[15]);
    g(v, w[1], w[6], w[11], w[12]);
    g(v, w[2], w[7], w[8], w[13]);
    g(v, w[3], w[4], w[9], w[14]);
}

/// The portable compression (also the oracle for `avx2`).
pub fn fill_portable(state: &mut Block, refb: &Block, next: &mut Block, xor: bool) {
    let mut r: Block = [0; BLOCK_WORDS];
    for ((r, s), x) in r.iter_mut().zip(state.iter()).zip(refb) {
        *r = s ^ x;
    }
    let mut q = r;
    for row in 0..8 {
        p(&mut q, core::array::from_fn(|k| 16 * row + k));
    }
    for col in 0..8 {
        p(&mut q, core::array::from_fn(|k| 2 * col + 16 * (k / 2) + (k % 2)));
    }
    for i in 0..BLOCK_WORDS {
        let v = q[i] ^ r[i] ^ if xor { next[i] } else { 0 };
        next[i] = v;
        state[i] = v;
    }
    r.zeroize();
    q.zeroize();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ops: u64, mem: u64, salt: &[u8]) -> KdfParams {
        KdfParams::argon2id(ops, mem, salt.to_vec())
    }

    #[test]
    fn matches_the_core_oracle() {
        let limits = KdfLimits::default();
        for (ops, mem, pw, salt) in [
            (1u64, 8192u64, &b"p"[..], &[7u8; 16][..]),
            (2, 65536, b"correct horse", &[0u8; 16]),
            (3, 1 << 20, b"another passphrase", b"saltsaltsaltsalt"),
            (1, 9 * 1024 + 512, b"odd memory", b"12345678"),
        ] {
            let p = params(ops, mem, salt);
            let want = Key::derive(pw, &p, &limits).unwrap();
            assert_eq!(
                derive_on(pw, &p, &limits, fill_portable).unwrap(),
                want,
                "portable {ops} {mem}"
            );
            assert_eq!(derive(pw, &p, &limits).unwrap(), want, "{} {ops} {mem}", kernel_name());
        }
    }

    #[test]
    fn libsodium_known_answer() {
        // crypto_pwhash(32, "correct horse", salt = 16 zero bytes,
        // opslimit 2, memlimit 64 MiB, ALG_ARGON2ID13), libsodium 1.0.18.
        let p = params(2, 64 << 20, &[0u8; 16]);
        let key = derive(b"correct horse", &p, &KdfLimits::default()).unwrap();
        assert_eq!(hex::encode(key.expose_secret()), LIBSODIUM_KAT);
    }

    const LIBSODIUM_KAT: &str = "45e967cef210393ba938027f2e22f0144a622c9ff3ac6d630f73377d5f98c18d";

    #[test]
    fn kernels_agree_on_random_blocks() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for xor in [false, true] {
            let mut s1: Block = core::array::from_fn(|_| rnd());
            let r: Block = core::array::from_fn(|_| rnd());
            let mut n1: Block = core::array::from_fn(|_| rnd());
            let (mut s2, mut n2) = (s1, n1);
            fill_portable(&mut s1, &r, &mut n1, xor);
            kernel()(&mut s2, &r, &mut n2, xor);
            assert_eq!(s1, s2);
            assert_eq!(n1, n2);
        }
    }

    #[test]
    fn refuses_what_the_core_refuses() {
        let limits = KdfLimits::default();
        assert!(derive(b"", &params(1, 8192, &[0; 16]), &limits).is_err());
        assert!(derive(b"x", &params(0, 8192, &[0; 16]), &limits).is_err());
        assert!(derive(b"x", &params(1, 8192, &[0; 4]), &limits).is_err());
    }
}
