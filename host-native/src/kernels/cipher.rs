//! The fastest XSalsa20 keystream kernel this CPU runs, chosen once at run
//! time. The core's portable kernel is plain safe Rust, which compilers
//! leave mostly scalar; on x86-64 this module computes 4 blocks at once in
//! SSE2 registers (always present there), 8 at once in AVX2 registers
//! when the CPU reports AVX2, or 16 at once in AVX-512 registers (with
//! one-instruction rotates) when it reports AVX-512F and AVX-512VL, one
//! register per state word. Every kernel gives the same bytes; wheels stay
//! built for the x86-64 baseline.

use std::sync::OnceLock;

use tensorizer_core::crypto::{Kernel, xor_keystream_portable};

/// The kernel to hand to [`tensorizer_core::crypto::open_chunk_on`] and
/// [`tensorizer_core::crypto::seal_chunk_on`].
pub fn kernel() -> Kernel {
    static CHOSEN: OnceLock<(Kernel, &'static str)> = OnceLock::new();
    CHOSEN.get_or_init(detect).0
}

/// Name of the kernel [`kernel`] picks (for benchmarks and diagnostics).
pub fn kernel_name() -> &'static str {
    detect().1
}

/// The core's portable kernel, for comparisons.
pub fn portable() -> Kernel {
    xor_keystream_portable
}

#[cfg(target_arch = "x86_64")]
fn detect() -> (Kernel, &'static str) {
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
    {
        (x86::avx512, "avx512 (16 blocks per step)")
    } else if std::arch::is_x86_feature_detected!("avx2") {
        (x86::avx2, "avx2 (8 blocks per step)")
    } else {
        (x86::sse2, "sse2 (4 blocks per step)")
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> (Kernel, &'static str) {
    (xor_keystream_portable, "portable")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use tensorizer_core::crypto::{SALSA_BLOCK_LEN, StreamState, xor_keystream};

    /// `v` rotated left by `N` bits in every 32-bit lane: two shifts and
    /// an OR, or one rotate instruction where the CPU has it (AVX-512).
    macro_rules! rotl {
        (($sl:ident, $sr:ident, $or:ident), $v:expr, $n:literal) => {
            $or($sl::<$n>($v), $sr::<{ 32 - $n }>($v))
        };
        (($rol:ident), $v:expr, $n:literal) => {
            $rol::<$n>($v)
        };
    }

    /// One quarter round on state words `a`, `b`, `c`, `d`.
    macro_rules! quarter {
        ($x:ident, $add:ident, $xor:ident, $rot:tt, $a:literal, $b:literal, $c:literal, $d:literal) => {
            $x[$b] = $xor($x[$b], rotl!($rot, $add($x[$a], $x[$d]), 7));
            $x[$c] = $xor($x[$c], rotl!($rot, $add($x[$b], $x[$a]), 9));
            $x[$d] = $xor($x[$d], rotl!($rot, $add($x[$c], $x[$b]), 13));
            $x[$a] = $xor($x[$a], rotl!($rot, $add($x[$d], $x[$c]), 18));
        };
    }

    /// Twenty Salsa20 rounds over state words held one per register.
    macro_rules! rounds {
        ($x:ident, $add:ident, $xor:ident, $rot:tt) => {
            for _ in 0..10 {
                quarter!($x, $add, $xor, $rot, 0, 4, 8, 12);
                quarter!($x, $add, $xor, $rot, 5, 9, 13, 1);
                quarter!($x, $add, $xor, $rot, 10, 14, 2, 6);
                quarter!($x, $add, $xor, $rot, 15, 3, 7, 11);
                quarter!($x, $add, $xor, $rot, 0, 1, 2, 3);
                quarter!($x, $add, $xor, $rot, 5, 6, 7, 4);
                quarter!($x, $add, $xor, $rot, 10, 11, 8, 9);
                quarter!($x, $add, $xor, $rot, 15, 12, 13, 14);
            }
        };
    }

    /// Block counters `block + lane`: (low words, high words).
    fn counters<const L: usize>(block: u64) -> ([i32; L], [i32; L]) {
        let mut lo = [0i32; L];
        let mut hi = [0i32; L];
        for l in 0..L {
            let n = block.wrapping_add(l as u64);
            lo[l] = n as u32 as i32;
            hi[l] = (n >> 32) as u32 as i32;
        }
        (lo, hi)
    }

    /// Four blocks per step in SSE2 registers (part of x86-64 itself).
    pub(super) fn sse2(state: &StreamState, mut block: u64, data: &mut [u8]) {
        const STEP: usize = 4 * SALSA_BLOCK_LEN;
        let mut steps = data.chunks_exact_mut(STEP);
        for step in &mut steps {
            // SAFETY: SSE2 is part of x86-64; every x86-64 CPU has it.
            #[allow(unsafe_code)]
            unsafe {
                sse2_step(state.words(), block, step);
            }
            block = block.wrapping_add(4);
        }
        xor_keystream::<1>(state, block, steps.into_remainder());
    }

    #[target_feature(enable = "sse2")]
    fn sse2_step(words: &[u32; 16], block: u64, out: &mut [u8]) {
        assert_eq!(out.len(), 4 * SALSA_BLOCK_LEN);
        let mut x = [_mm_setzero_si128(); 16];
        for (xi, w) in x.iter_mut().zip(words) {
            *xi = _mm_set1_epi32(*w as i32);
        }
        let (lo, hi) = counters::<4>(block);
        x[8] = _mm_setr_epi32(lo[0], lo[1], lo[2], lo[3]);
        x[9] = _mm_setr_epi32(hi[0], hi[1], hi[2], hi[3]);
        let input = x;
        rounds!(x, _mm_add_epi32, _mm_xor_si128, (_mm_slli_epi32, _mm_srli_epi32, _mm_or_si128));
        for (xi, ii) in x.iter_mut().zip(&input) {
            *xi = _mm_add_epi32(*xi, *ii);
        }
        // Transpose each group of four words from one-block-per-lane to
        // one-block-per-register and XOR it into the data.
        for g in 0..4 {
            let [w0, w1, w2, w3] = [x[4 * g], x[4 * g + 1], x[4 * g + 2], x[4 * g + 3]];
            let t0 = _mm_unpacklo_epi32(w0, w1);
            let t1 = _mm_unpackhi_epi32(w0, w1);
            let t2 = _mm_unpacklo_epi32(w2, w3);
            let t3 = _mm_unpackhi_epi32(w2, w3);
            let per_block = [
                _mm_unpacklo_epi64(t0, t2),
                _mm_unpackhi_epi64(t0, t2),
                _mm_unpacklo_epi64(t1, t3),
                _mm_unpackhi_epi64(t1, t3),
            ];
            for (b, ks) in per_block.into_iter().enumerate() {
                let at = b * SALSA_BLOCK_LEN + 16 * g;
                let bytes = &mut out[at..at + 16];
                // SAFETY: `bytes` is exactly 16 bytes long; unaligned loads
                // and stores are what `loadu`/`storeu` are for.
                #[allow(unsafe_code)]
                unsafe {
                    let p = bytes.as_mut_ptr().cast::<__m128i>();
                    _mm_storeu_si128(p, _mm_xor_si128(_mm_loadu_si128(p), ks));
                }
            }
        }
    }

    /// Eight blocks per step in AVX2 registers; only handed out after the
    /// CPU reported AVX2.
    pub(super) fn avx2(state: &StreamState, block: u64, data: &mut [u8]) {
        // SAFETY: `detect` hands out `avx2` only when the CPU reports AVX2,
        // the feature `avx2_rounds` is compiled for.
        #[allow(unsafe_code)]
        unsafe {
            eight_per_step(state, block, data, avx2_rounds);
        }
    }

    /// [`avx2`] with AVX-512's one-instruction rotates on the same 256-bit
    /// registers (a third of the rounds' instructions were shifts and ORs);
    /// only handed out after the CPU reported AVX2, AVX-512F and AVX-512VL.
    pub(super) fn avx512vl(state: &StreamState, block: u64, data: &mut [u8]) {
        // SAFETY: `detect` hands out `avx512vl` (and `avx512`, which calls
        // it) only when the CPU reports AVX2, AVX-512F and AVX-512VL, the
        // features `avx512vl_rounds` is compiled for.
        #[allow(unsafe_code)]
        unsafe {
            eight_per_step(state, block, data, avx512vl_rounds);
        }
    }

    /// Eight blocks per step through `rounds`, the rest by [`sse2`].
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2 and every feature `rounds` is compiled for.
    #[allow(unsafe_code)]
    unsafe fn eight_per_step(
        state: &StreamState,
        mut block: u64,
        data: &mut [u8],
        rounds: unsafe fn(&mut [__m256i; 16]),
    ) {
        const STEP: usize = 8 * SALSA_BLOCK_LEN;
        let mut steps = data.chunks_exact_mut(STEP);
        for step in &mut steps {
            // SAFETY: the caller vouches for AVX2 and for `rounds`' features.
            unsafe {
                let mut x = avx2_input(state.words(), block);
                rounds(&mut x);
                avx2_finish(x, state.words(), block, step);
            }
            block = block.wrapping_add(8);
        }
        sse2(state, block, steps.into_remainder());
    }

    /// Sixteen blocks per step: the rounds in 512-bit registers, each
    /// half then finished like [`avx2`]'s eight blocks; only handed out
    /// after the CPU reported AVX2 and AVX-512F.
    pub(super) fn avx512(state: &StreamState, mut block: u64, data: &mut [u8]) {
        const STEP: usize = 16 * SALSA_BLOCK_LEN;
        let mut steps = data.chunks_exact_mut(STEP);
        for step in &mut steps {
            // SAFETY: `detect` hands out `avx512` only when the CPU reports
            // AVX2 and AVX-512F, the features these functions are compiled for.
            #[allow(unsafe_code)]
            unsafe {
                let (low, high) = avx512_rounds(state.words(), block);
                let (first, second) = step.split_at_mut(8 * SALSA_BLOCK_LEN);
                avx2_finish(low, state.words(), block, first);
                avx2_finish(high, state.words(), block.wrapping_add(8), second);
            }
            block = block.wrapping_add(16);
        }
        avx512vl(state, block, steps.into_remainder());
    }

    /// The rounds of sixteen blocks from `block` on, split into blocks
    /// 0..8 and 8..16 (one state word per register, one block per lane).
    #[target_feature(enable = "avx2,avx512f")]
    fn avx512_rounds(words: &[u32; 16], block: u64) -> ([__m256i; 16], [__m256i; 16]) {
        let mut x = [_mm512_setzero_si512(); 16];
        for (xi, w) in x.iter_mut().zip(words) {
            *xi = _mm512_set1_epi32(*w as i32);
        }
        let (lo, hi) = counters::<16>(block);
        x[8] = _mm512_setr_epi32(
            lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7], lo[8], lo[9], lo[10], lo[11],
            lo[12], lo[13], lo[14], lo[15],
        );
        x[9] = _mm512_setr_epi32(
            hi[0], hi[1], hi[2], hi[3], hi[4], hi[5], hi[6], hi[7], hi[8], hi[9], hi[10], hi[11],
            hi[12], hi[13], hi[14], hi[15],
        );
        rounds!(x, _mm512_add_epi32, _mm512_xor_si512, (_mm512_rol_epi32));
        let mut low = [_mm256_setzero_si256(); 16];
        let mut high = low;
        for ((l, h), xi) in low.iter_mut().zip(high.iter_mut()).zip(x) {
            *l = _mm512_castsi512_si256(xi);
            *h = _mm512_extracti64x4_epi64::<1>(xi);
        }
        (low, high)
    }

    /// The input of eight blocks from `block` on: one state word per
    /// register, one block per lane.
    #[target_feature(enable = "avx2")]
    fn avx2_input(words: &[u32; 16], block: u64) -> [__m256i; 16] {
        let mut x = [_mm256_setzero_si256(); 16];
        for (xi, w) in x.iter_mut().zip(words) {
            *xi = _mm256_set1_epi32(*w as i32);
        }
        let (lo, hi) = counters::<8>(block);
        x[8] = _mm256_setr_epi32(lo[0], lo[1], lo[2], lo[3], lo[4], lo[5], lo[6], lo[7]);
        x[9] = _mm256_setr_epi32(hi[0], hi[1], hi[2], hi[3], hi[4], hi[5], hi[6], hi[7]);
        x
    }

    #[target_feature(enable = "avx2")]
    fn avx2_rounds(x: &mut [__m256i; 16]) {
        rounds!(
            x,
            _mm256_add_epi32,
            _mm256_xor_si256,
            (_mm256_slli_epi32, _mm256_srli_epi32, _mm256_or_si256)
        );
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    fn avx512vl_rounds(x: &mut [__m256i; 16]) {
        rounds!(x, _mm256_add_epi32, _mm256_xor_si256, (_mm256_rol_epi32));
    }

    /// Adds the input to the rounds' output `x` and XORs the eight blocks
    /// of keystream into `out`.
    #[target_feature(enable = "avx2")]
    fn avx2_finish(mut x: [__m256i; 16], words: &[u32; 16], block: u64, out: &mut [u8]) {
        assert_eq!(out.len(), 8 * SALSA_BLOCK_LEN);
        let input = avx2_input(words, block);
        for (xi, ii) in x.iter_mut().zip(&input) {
            *xi = _mm256_add_epi32(*xi, *ii);
        }
        // 8×8 transposes of words 0..8 and 8..16: afterwards each register
        // holds 8 consecutive words of one block.
        for half in 0..2 {
            let w = &x[8 * half..8 * half + 8];
            let t0 = _mm256_unpacklo_epi32(w[0], w[1]);
            let t1 = _mm256_unpackhi_epi32(w[0], w[1]);
            let t2 = _mm256_unpacklo_epi32(w[2], w[3]);
            let t3 = _mm256_unpackhi_epi32(w[2], w[3]);
            let t4 = _mm256_unpacklo_epi32(w[4], w[5]);
            let t5 = _mm256_unpackhi_epi32(w[4], w[5]);
            let t6 = _mm256_unpacklo_epi32(w[6], w[7]);
            let t7 = _mm256_unpackhi_epi32(w[6], w[7]);
            let u0 = _mm256_unpacklo_epi64(t0, t2);
            let u1 = _mm256_unpackhi_epi64(t0, t2);
            let u2 = _mm256_unpacklo_epi64(t1, t3);
            let u3 = _mm256_unpackhi_epi64(t1, t3);
            let u4 = _mm256_unpacklo_epi64(t4, t6);
            let u5 = _mm256_unpackhi_epi64(t4, t6);
            let u6 = _mm256_unpacklo_epi64(t5, t7);
            let u7 = _mm256_unpackhi_epi64(t5, t7);
            let per_block = [
                _mm256_permute2x128_si256::<0x20>(u0, u4),
                _mm256_permute2x128_si256::<0x20>(u1, u5),
                _mm256_permute2x128_si256::<0x20>(u2, u6),
                _mm256_permute2x128_si256::<0x20>(u3, u7),
                _mm256_permute2x128_si256::<0x31>(u0, u4),
                _mm256_permute2x128_si256::<0x31>(u1, u5),
                _mm256_permute2x128_si256::<0x31>(u2, u6),
                _mm256_permute2x128_si256::<0x31>(u3, u7),
            ];
            for (b, ks) in per_block.into_iter().enumerate() {
                let at = b * SALSA_BLOCK_LEN + 32 * half;
                let bytes = &mut out[at..at + 32];
                // SAFETY: `bytes` is exactly 32 bytes long; unaligned loads
                // and stores are what `loadu`/`storeu` are for.
                #[allow(unsafe_code)]
                unsafe {
                    let p = bytes.as_mut_ptr().cast::<__m256i>();
                    _mm256_storeu_si256(p, _mm256_xor_si256(_mm256_loadu_si256(p), ks));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tensorizer_core::crypto::StreamState;

    use super::*;

    #[test]
    fn every_kernel_matches_the_portable_one() {
        let state = StreamState::xsalsa20(&[5; 32], &[9; 24]);
        let mut kernels = vec![kernel()];
        #[cfg(target_arch = "x86_64")]
        {
            kernels.push(x86::sse2);
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(x86::avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512vl") {
                kernels.push(x86::avx512vl);
            }
        }
        for k in kernels {
            for len in [0, 1, 64, 255, 256, 511, 512, 513, 4096 + 77] {
                // Counters near 2^32 check the carry into the high word.
                for start in [3u64, u64::from(u32::MAX) - 5] {
                    let mut a = vec![0u8; len];
                    let mut b = a.clone();
                    k(&state, start, &mut a);
                    portable()(&state, start, &mut b);
                    assert_eq!(a, b, "len {len}, start {start}");
                }
            }
        }
    }
}
