//! XSalsa20 keystream (the cipher half of libsodium's `crypto_secretbox`),
//! written so that the compiler turns it into SIMD code: [`xor_keystream`]
//! computes `L` consecutive 64-byte blocks at once, one vector lane per
//! block, in plain safe Rust. With `L = 4` the x86-64 baseline (SSE2) holds
//! each state word of four blocks in one register; a host that detects
//! AVX2 at run time can instantiate `L = 8` inside a
//! `#[target_feature(enable = "avx2")]` function (the kernel is
//! `#[inline(always)]` for exactly that).

use zeroize::{Zeroize, ZeroizeOnDrop};

/// The four "expand 32-byte k" constants, at state words 0, 5, 10, 15.
const SIGMA: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// Bytes per Salsa20 block.
pub const BLOCK_LEN: usize = 64;

/// A Salsa20 input state with the block counter (words 8 and 9) left at
/// zero: the XSalsa20 subkey and the last 8 nonce bytes. Zeroed on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct StreamState {
    words: [u32; 16],
}

impl StreamState {
    /// The XSalsa20 stream for `key` and the 24-byte `nonce`: HSalsa20 of
    /// the key and the first 16 nonce bytes gives the Salsa20 key, the last
    /// 8 bytes are the Salsa20 nonce.
    pub fn xsalsa20(key: &[u8; 32], nonce: &[u8; 24]) -> Self {
        let mut h = [0u32; 16];
        h[0] = SIGMA[0];
        h[5] = SIGMA[1];
        h[10] = SIGMA[2];
        h[15] = SIGMA[3];
        for i in 0..4 {
            h[1 + i] = word(key, i);
            h[11 + i] = word(key, 4 + i);
            h[6 + i] = word(nonce, i);
        }
        let mut x = [[0u32; 1]; 16];
        for (xi, hi) in x.iter_mut().zip(&h) {
            *xi = [*hi];
        }
        rounds(&mut x);
        let mut words = [0u32; 16];
        words[0] = SIGMA[0];
        words[5] = SIGMA[1];
        words[10] = SIGMA[2];
        words[15] = SIGMA[3];
        // HSalsa20's output: words 0, 5, 10, 15, 6, 7, 8, 9 (no final addition).
        for (i, &w) in [0usize, 5, 10, 15].iter().enumerate() {
            words[1 + i] = x[w][0];
        }
        for (i, &w) in [6usize, 7, 8, 9].iter().enumerate() {
            words[11 + i] = x[w][0];
        }
        words[6] = word(nonce, 4);
        words[7] = word(nonce, 5);
        x.zeroize();
        h.zeroize();
        Self { words }
    }

    /// The 16 input words with the block counter (words 8 and 9) at zero,
    /// for hosts with their own SIMD kernels.
    pub fn words(&self) -> &[u32; 16] {
        &self.words
    }
}

fn word(bytes: &[u8], i: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[4 * i..4 * i + 4]);
    u32::from_le_bytes(w)
}

/// One quarter round on `L` lanes at once.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // lane-wise loops over several rows
fn quarter<const L: usize>(x: &mut [[u32; L]; 16], a: usize, b: usize, c: usize, d: usize) {
    for l in 0..L {
        x[b][l] ^= x[a][l].wrapping_add(x[d][l]).rotate_left(7);
    }
    for l in 0..L {
        x[c][l] ^= x[b][l].wrapping_add(x[a][l]).rotate_left(9);
    }
    for l in 0..L {
        x[d][l] ^= x[c][l].wrapping_add(x[b][l]).rotate_left(13);
    }
    for l in 0..L {
        x[a][l] ^= x[d][l].wrapping_add(x[c][l]).rotate_left(18);
    }
}

/// The 20 rounds (10 double rounds), without the final addition.
#[inline(always)]
fn rounds<const L: usize>(x: &mut [[u32; L]; 16]) {
    for _ in 0..10 {
        quarter(x, 0, 4, 8, 12);
        quarter(x, 5, 9, 13, 1);
        quarter(x, 10, 14, 2, 6);
        quarter(x, 15, 3, 7, 11);
        quarter(x, 0, 1, 2, 3);
        quarter(x, 5, 6, 7, 4);
        quarter(x, 10, 11, 8, 9);
        quarter(x, 15, 12, 13, 14);
    }
}

/// XORs keystream blocks `block .. block + L` into `out` (`L` × 64 bytes).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // lane-wise loops over several rows
fn xor_blocks<const L: usize>(state: &StreamState, block: u64, out: &mut [u8]) {
    let mut x = [[0u32; L]; 16];
    for (xi, s) in x.iter_mut().zip(&state.words) {
        *xi = [*s; L];
    }
    for l in 0..L {
        let n = block.wrapping_add(l as u64);
        x[8][l] = n as u32;
        x[9][l] = (n >> 32) as u32;
    }
    let input = x;
    rounds(&mut x);
    for (xi, ii) in x.iter_mut().zip(&input) {
        for l in 0..L {
            xi[l] = xi[l].wrapping_add(ii[l]);
        }
    }
    for (l, out) in out.chunks_exact_mut(BLOCK_LEN).enumerate().take(L) {
        for (w, bytes) in out.chunks_exact_mut(4).enumerate() {
            let mut v = [0u8; 4];
            v.copy_from_slice(bytes);
            bytes.copy_from_slice(&(u32::from_le_bytes(v) ^ x[w][l]).to_le_bytes());
        }
    }
}

/// XORs the keystream starting at block number `block` into `data`,
/// computing `L` blocks per step. `data` may end in a partial block.
#[inline(always)]
pub fn xor_keystream<const L: usize>(state: &StreamState, mut block: u64, data: &mut [u8]) {
    let mut steps = data.chunks_exact_mut(L * BLOCK_LEN);
    for step in &mut steps {
        xor_blocks::<L>(state, block, step);
        block = block.wrapping_add(L as u64);
    }
    let rest = steps.into_remainder();
    for part in rest.chunks_mut(BLOCK_LEN) {
        let mut one = [0u8; BLOCK_LEN];
        one[..part.len()].copy_from_slice(part);
        xor_blocks::<1>(state, block, &mut one);
        part.copy_from_slice(&one[..part.len()]);
        block = block.wrapping_add(1);
    }
}

/// The portable kernel: one block per step in scalar registers. (Compilers
/// keep the lane-wise form scalar too, with extra shuffling, so wider steps
/// only pay inside a host's `#[target_feature]` function or with explicit
/// SIMD.)
pub fn xor_keystream_portable(state: &StreamState, block: u64, data: &mut [u8]) {
    xor_keystream::<1>(state, block, data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_counts_agree_across_block_boundaries() {
        let state = StreamState::xsalsa20(&[7; 32], &[3; 24]);
        let mut one = [0u8; 1000];
        for (i, chunk) in one.chunks_mut(BLOCK_LEN).enumerate() {
            xor_keystream::<1>(&state, 5 + i as u64, chunk);
        }
        for len in [0, 1, 63, 64, 65, 255, 256, 257, 511, 513, 1000] {
            let mut four = [0u8; 1000];
            xor_keystream::<4>(&state, 5, &mut four[..len]);
            assert_eq!(four[..len], one[..len], "len {len}");
            let mut eight = [0u8; 1000];
            xor_keystream::<8>(&state, 5, &mut eight[..len]);
            assert_eq!(eight[..len], one[..len], "len {len}");
        }
    }

    #[test]
    fn counter_carries_into_the_high_word() {
        let state = StreamState::xsalsa20(&[1; 32], &[2; 24]);
        let mut a = [0u8; 512];
        xor_keystream::<4>(&state, u64::from(u32::MAX) - 2, &mut a);
        let mut b = [0u8; 512];
        for (i, chunk) in b.chunks_mut(BLOCK_LEN).enumerate() {
            xor_keystream::<1>(&state, u64::from(u32::MAX) - 2 + i as u64, chunk);
        }
        assert_eq!(a, b);
    }
}
