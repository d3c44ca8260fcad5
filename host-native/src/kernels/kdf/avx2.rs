//! Argon2's block compression in AVX2 registers: the 1 KiB block is 32
//! 256-bit registers (4 words each); P runs on two rows, or two column
//! pairs, at once, 4 BlaMka mixes per instruction. The only `unsafe` of the
//! Argon2id host code: the intrinsics, and a call into a function compiled
//! for AVX2, made only after run-time detection found it.

use std::arch::x86_64::*;

use super::{BLOCK_WORDS, Block};

/// `next`/`state` ← G(`state`, `refb`) (`next ^=` when `xor`). Only handed
/// out by [`super::detect`] after it saw AVX2.
pub(super) fn fill(state: &mut Block, refb: &Block, next: &mut Block, xor: bool) {
    debug_assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: `detect` returns this kernel only when the CPU reports AVX2.
    #[allow(unsafe_code)]
    unsafe {
        fill_avx2(state, refb, next, xor)
    }
}

/// Each 64-bit lane rotated right by 32, 24, 16 and 63 bits.
macro_rules! rotr32 {
    ($x:expr) => {
        _mm256_shuffle_epi32::<0b10_11_00_01>($x)
    };
}
macro_rules! rotr24 {
    ($x:expr) => {
        _mm256_shuffle_epi8(
            $x,
            _mm256_setr_epi8(
                3, 4, 5, 6, 7, 0, 1, 2, 11, 12, 13, 14, 15, 8, 9, 10, 3, 4, 5, 6, 7, 0, 1, 2, 11,
                12, 13, 14, 15, 8, 9, 10,
            ),
        )
    };
}
macro_rules! rotr16 {
    ($x:expr) => {
        _mm256_shuffle_epi8(
            $x,
            _mm256_setr_epi8(
                2, 3, 4, 5, 6, 7, 0, 1, 10, 11, 12, 13, 14, 15, 8, 9, 2, 3, 4, 5, 6, 7, 0, 1, 10,
                11, 12, 13, 14, 15, 8, 9,
            ),
        )
    };
}
macro_rules! rotr63 {
    ($x:expr) => {
        _mm256_xor_si256(_mm256_srli_epi64::<63>($x), _mm256_add_epi64($x, $x))
    };
}

/// `a + b + 2·lo(a)·lo(b)` per lane.
macro_rules! blamka {
    ($a:expr, $b:expr) => {{
        let ml = _mm256_mul_epu32($a, $b);
        _mm256_add_epi64($a, _mm256_add_epi64($b, _mm256_add_epi64(ml, ml)))
    }};
}

/// The first half of four BlaMka mixes per register set (rotations 32, 24).
macro_rules! g1 {
    ($a0:ident, $a1:ident, $b0:ident, $b1:ident, $c0:ident, $c1:ident, $d0:ident, $d1:ident) => {
        $a0 = blamka!($a0, $b0);
        $a1 = blamka!($a1, $b1);
        $d0 = rotr32!(_mm256_xor_si256($d0, $a0));
        $d1 = rotr32!(_mm256_xor_si256($d1, $a1));
        $c0 = blamka!($c0, $d0);
        $c1 = blamka!($c1, $d1);
        $b0 = rotr24!(_mm256_xor_si256($b0, $c0));
        $b1 = rotr24!(_mm256_xor_si256($b1, $c1));
    };
}

/// The second half (rotations 16, 63).
macro_rules! g2 {
    ($a0:ident, $a1:ident, $b0:ident, $b1:ident, $c0:ident, $c1:ident, $d0:ident, $d1:ident) => {
        $a0 = blamka!($a0, $b0);
        $a1 = blamka!($a1, $b1);
        $d0 = rotr16!(_mm256_xor_si256($d0, $a0));
        $d1 = rotr16!(_mm256_xor_si256($d1, $a1));
        $c0 = blamka!($c0, $d0);
        $c1 = blamka!($c1, $d1);
        $b0 = rotr63!(_mm256_xor_si256($b0, $c0));
        $b1 = rotr63!(_mm256_xor_si256($b1, $c1));
    };
}

/// P on two rows of 16 words (registers A, B, C, D each): the column
/// step, rotate B, C, D to the diagonals, the diagonal step, rotate back.
macro_rules! round_rows {
    ($a0:ident, $a1:ident, $b0:ident, $b1:ident, $c0:ident, $c1:ident, $d0:ident, $d1:ident) => {
        g1!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        g2!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        $b0 = _mm256_permute4x64_epi64::<0b00_11_10_01>($b0);
        $c0 = _mm256_permute4x64_epi64::<0b01_00_11_10>($c0);
        $d0 = _mm256_permute4x64_epi64::<0b10_01_00_11>($d0);
        $b1 = _mm256_permute4x64_epi64::<0b00_11_10_01>($b1);
        $c1 = _mm256_permute4x64_epi64::<0b01_00_11_10>($c1);
        $d1 = _mm256_permute4x64_epi64::<0b10_01_00_11>($d1);
        g1!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        g2!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        $b0 = _mm256_permute4x64_epi64::<0b10_01_00_11>($b0);
        $c0 = _mm256_permute4x64_epi64::<0b01_00_11_10>($c0);
        $d0 = _mm256_permute4x64_epi64::<0b00_11_10_01>($d0);
        $b1 = _mm256_permute4x64_epi64::<0b10_01_00_11>($b1);
        $c1 = _mm256_permute4x64_epi64::<0b01_00_11_10>($c1);
        $d1 = _mm256_permute4x64_epi64::<0b00_11_10_01>($d1);
    };
}

/// P on two columns at once: register `X0` holds words (0, 1) of both
/// columns' X quarter, `X1` words (2, 3); the diagonal step regroups them
/// with blends and in-lane swaps.
macro_rules! round_cols {
    ($a0:ident, $a1:ident, $b0:ident, $b1:ident, $c0:ident, $c1:ident, $d0:ident, $d1:ident) => {
        g1!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        g2!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        {
            let t1 = _mm256_blend_epi32::<0xCC>($b0, $b1);
            let t2 = _mm256_blend_epi32::<0x33>($b0, $b1);
            $b1 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t1);
            $b0 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t2);
            std::mem::swap(&mut $c0, &mut $c1);
            let t1 = _mm256_blend_epi32::<0xCC>($d0, $d1);
            let t2 = _mm256_blend_epi32::<0x33>($d0, $d1);
            $d0 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t1);
            $d1 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t2);
        }
        g1!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        g2!($a0, $a1, $b0, $b1, $c0, $c1, $d0, $d1);
        {
            let t1 = _mm256_blend_epi32::<0xCC>($b0, $b1);
            let t2 = _mm256_blend_epi32::<0x33>($b0, $b1);
            $b0 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t1);
            $b1 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t2);
            std::mem::swap(&mut $c0, &mut $c1);
            let t1 = _mm256_blend_epi32::<0x33>($d0, $d1);
            let t2 = _mm256_blend_epi32::<0xCC>($d0, $d1);
            $d0 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t1);
            $d1 = _mm256_permute4x64_epi64::<0b10_11_00_01>(t2);
        }
    };
}

#[target_feature(enable = "avx2")]
fn fill_avx2(state: &mut Block, refb: &Block, next: &mut Block, xor: bool) {
    const REGS: usize = BLOCK_WORDS / 4;
    let mut s = [_mm256_setzero_si256(); REGS];
    let mut r = [_mm256_setzero_si256(); REGS];
    for i in 0..REGS {
        // SAFETY: word 4i..4i+4 of a 128-word block; unaligned loads.
        #[allow(unsafe_code)]
        let (a, b) = unsafe {
            (
                _mm256_loadu_si256(state.as_ptr().add(4 * i).cast()),
                _mm256_loadu_si256(refb.as_ptr().add(4 * i).cast()),
            )
        };
        s[i] = _mm256_xor_si256(a, b);
        r[i] = s[i];
        if xor {
            // SAFETY: as above, in `next`.
            #[allow(unsafe_code)]
            let n = unsafe { _mm256_loadu_si256(next.as_ptr().add(4 * i).cast()) };
            r[i] = _mm256_xor_si256(r[i], n);
        }
    }
    for i in 0..4 {
        let [mut a0, mut b0, mut c0, mut d0, mut a1, mut b1, mut c1, mut d1] = [
            s[8 * i],
            s[8 * i + 1],
            s[8 * i + 2],
            s[8 * i + 3],
            s[8 * i + 4],
            s[8 * i + 5],
            s[8 * i + 6],
            s[8 * i + 7],
        ];
        round_rows!(a0, a1, b0, b1, c0, c1, d0, d1);
        [
            s[8 * i],
            s[8 * i + 1],
            s[8 * i + 2],
            s[8 * i + 3],
            s[8 * i + 4],
            s[8 * i + 5],
            s[8 * i + 6],
            s[8 * i + 7],
        ] = [a0, b0, c0, d0, a1, b1, c1, d1];
    }
    for i in 0..4 {
        let [mut a0, mut a1, mut b0, mut b1, mut c0, mut c1, mut d0, mut d1] =
            [s[i], s[4 + i], s[8 + i], s[12 + i], s[16 + i], s[20 + i], s[24 + i], s[28 + i]];
        round_cols!(a0, a1, b0, b1, c0, c1, d0, d1);
        [s[i], s[4 + i], s[8 + i], s[12 + i], s[16 + i], s[20 + i], s[24 + i], s[28 + i]] =
            [a0, a1, b0, b1, c0, c1, d0, d1];
    }
    for i in 0..REGS {
        let v = _mm256_xor_si256(s[i], r[i]);
        // SAFETY: word 4i..4i+4 of `state` and of `next`; unaligned stores.
        #[allow(unsafe_code)]
        unsafe {
            _mm256_storeu_si256(state.as_mut_ptr().add(4 * i).cast(), v);
            _mm256_storeu_si256(next.as_mut_ptr().add(4 * i).cast(), v);
        }
    }
}
