//! The fastest joint CRC-32 + SHA-256 block kernel this CPU runs, chosen
//! once at run time (see [`tensorizer_core::hash::BlockKernel`]).
//!
//! With the SHA extensions, SHA-256 runs at about one round's latency per
//! two rounds and leaves most execution ports idle; CRC-32 by carry-less
//! multiplication (the folding of Intel's "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ") needs exactly those idle ports. This
//! kernel loads each 64-byte block once and feeds it to both: four 128-bit
//! CRC lanes folded 512 bits forward per block, interleaved with the block's
//! 64 SHA rounds, so CRC-32 costs almost nothing beside SHA-256. Without
//! the SHA extensions there is no kernel and the core hashes each on its
//! own.

use std::sync::OnceLock;

use tensorizer_core::hash::BlockKernel;

/// The kernel to hand to the core's hashers, if this CPU has one.
pub fn kernel() -> Option<BlockKernel> {
    static CHOSEN: OnceLock<Option<BlockKernel>> = OnceLock::new();
    *CHOSEN.get_or_init(detect)
}

/// Name of the kernel [`kernel`] picks (for benchmarks and diagnostics).
pub fn kernel_name() -> &'static str {
    if kernel().is_some() { "sha-ni + pclmulqdq (one pass)" } else { "separate (crc32fast, sha2)" }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Option<BlockKernel> {
    (std::arch::is_x86_feature_detected!("sha")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("ssse3")
        && std::arch::is_x86_feature_detected!("pclmulqdq"))
    .then_some(x86::joint as BlockKernel)
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Option<BlockKernel> {
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use tensorizer_core::hash::{SHA256_BLOCK, crc32_continue};

    /// SHA-256 round constants (FIPS 180-4, 4.2.2).
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// CRC-32 (reflected 0xEDB88320) folding constants: x^(4*128+32) and
    /// x^(4*128-32) mod P, bit-reflected, for folding a lane 512 bits
    /// forward; x^(128+32) and x^(128-32) for folding 128 bits forward.
    const FOLD_512: (i64, i64) = (0x1_5444_2bd4, 0x1_c6e4_1596);
    const FOLD_128: (i64, i64) = (0x1_7519_97d0, 0x0_ccaa_009e);

    /// `lane` carried `k` forward and added to `next`.
    #[target_feature(enable = "sse2,pclmulqdq")]
    fn fold(lane: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(lane, k);
        let hi = _mm_clmulepi64_si128::<0x11>(lane, k);
        _mm_xor_si128(_mm_xor_si128(lo, hi), next)
    }

    /// Round constants `4g .. 4g+4`, lowest lane first.
    #[target_feature(enable = "sse2")]
    fn round_constants(g: usize) -> __m128i {
        let k = &K[4 * g..4 * g + 4];
        _mm_set_epi32(k[3] as i32, k[2] as i32, k[1] as i32, k[0] as i32)
    }

    /// The next four message words from the previous sixteen.
    #[target_feature(enable = "sha,sse2,ssse3")]
    fn schedule(w0: __m128i, w1: __m128i, w2: __m128i, w3: __m128i) -> __m128i {
        let t = _mm_add_epi32(_mm_sha256msg1_epu32(w0, w1), _mm_alignr_epi8::<4>(w3, w2));
        _mm_sha256msg2_epu32(t, w3)
    }

    /// The joint kernel; only handed out after the CPU reported the SHA
    /// extensions, SSSE3, SSE4.1 and PCLMULQDQ.
    pub(super) fn joint(sha: &mut [u32; 8], crc: u32, blocks: &[u8]) -> u32 {
        // SAFETY: `detect` returns this function only when the CPU has
        // every feature `joint_blocks` is compiled for.
        #[allow(unsafe_code)]
        unsafe {
            joint_blocks(sha, crc, blocks)
        }
    }

    #[target_feature(enable = "sha,sse2,ssse3,sse4.1,pclmulqdq")]
    fn joint_blocks(sha: &mut [u32; 8], crc: u32, blocks: &[u8]) -> u32 {
        assert!(blocks.len().is_multiple_of(SHA256_BLOCK), "whole blocks only");
        if blocks.is_empty() {
            return crc;
        }
        let big_endian = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
        let fold_512 = _mm_set_epi64x(FOLD_512.1, FOLD_512.0);
        let [mut abef, mut cdgh] = sha_state_in(sha);

        let mut lanes = [_mm_setzero_si128(); 4];
        for (n, block) in blocks.chunks_exact(SHA256_BLOCK).enumerate() {
            let mut m = [_mm_setzero_si128(); 4];
            for (i, mi) in m.iter_mut().enumerate() {
                // SAFETY: `block` is 64 bytes, so bytes 16*i .. 16*i+16
                // (i < 4) are inside it; `loadu` takes any alignment.
                #[allow(unsafe_code)]
                unsafe {
                    *mi = _mm_loadu_si128(block.as_ptr().add(16 * i).cast());
                }
            }
            // CRC: the first block starts the lanes (with the running CRC
            // register, the complement of the CRC value, added to its first
            // 4 bytes); every later block folds them 512 bits forward.
            if n == 0 {
                lanes = m;
                lanes[0] = _mm_xor_si128(lanes[0], _mm_cvtsi32_si128(!crc as i32));
            } else {
                for (lane, mi) in lanes.iter_mut().zip(m) {
                    *lane = fold(*lane, fold_512, mi);
                }
            }
            // SHA-256: 16 groups of four rounds, written out so the message
            // words stay in registers.
            let (abef_in, cdgh_in) = (abef, cdgh);
            let [mut w0, mut w1, mut w2, mut w3] = m.map(|mi| _mm_shuffle_epi8(mi, big_endian));
            macro_rules! four {
                ($w:expr, $g:literal) => {{
                    let wk = _mm_add_epi32($w, round_constants($g));
                    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
                    abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32::<0x0e>(wk));
                }};
            }
            macro_rules! next {
                ($a:ident, $b:ident, $c:ident, $d:ident, $g:literal) => {{
                    $a = schedule($a, $b, $c, $d);
                    four!($a, $g);
                }};
            }
            four!(w0, 0);
            four!(w1, 1);
            four!(w2, 2);
            four!(w3, 3);
            next!(w0, w1, w2, w3, 4);
            next!(w1, w2, w3, w0, 5);
            next!(w2, w3, w0, w1, 6);
            next!(w3, w0, w1, w2, 7);
            next!(w0, w1, w2, w3, 8);
            next!(w1, w2, w3, w0, 9);
            next!(w2, w3, w0, w1, 10);
            next!(w3, w0, w1, w2, 11);
            next!(w0, w1, w2, w3, 12);
            next!(w1, w2, w3, w0, 13);
            next!(w2, w3, w0, w1, 14);
            next!(w3, w0, w1, w2, 15);
            abef = _mm_add_epi32(abef, abef_in);
            cdgh = _mm_add_epi32(cdgh, cdgh_in);
        }
        sha_state_out(sha, abef, cdgh);
        crc_of_lanes(lanes)
    }

    /// The state words a..h as the SHA instructions want them: ABEF and CDGH.
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    fn sha_state_in(sha: &[u32; 8]) -> [__m128i; 2] {
        let dcba = _mm_set_epi32(sha[3] as i32, sha[2] as i32, sha[1] as i32, sha[0] as i32);
        let hgfe = _mm_set_epi32(sha[7] as i32, sha[6] as i32, sha[5] as i32, sha[4] as i32);
        let cdab = _mm_shuffle_epi32::<0xb1>(dcba);
        let efgh = _mm_shuffle_epi32::<0x1b>(hgfe);
        [_mm_alignr_epi8::<8>(cdab, efgh), _mm_blend_epi16::<0xf0>(efgh, cdab)]
    }

    /// ABEF and CDGH back into the state words a..h.
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    fn sha_state_out(sha: &mut [u32; 8], abef: __m128i, cdgh: __m128i) {
        let feba = _mm_shuffle_epi32::<0x1b>(abef);
        let dchg = _mm_shuffle_epi32::<0xb1>(cdgh);
        let dcba = _mm_blend_epi16::<0xf0>(feba, dchg);
        let hgef = _mm_alignr_epi8::<8>(dchg, feba);
        for (i, w) in sha.iter_mut().enumerate() {
            *w = lane32(if i < 4 { dcba } else { hgef }, i % 4);
        }
    }

    /// The CRC value of the four lanes: folded into one, whose 16 bytes
    /// have the CRC register of everything folded, so CRC-32 from a zero
    /// register over them (a CRC value of all ones is a zero register)
    /// finishes.
    #[target_feature(enable = "sse2,sse4.1,pclmulqdq")]
    fn crc_of_lanes(lanes: [__m128i; 4]) -> u32 {
        let fold_128 = _mm_set_epi64x(FOLD_128.1, FOLD_128.0);
        let mut one = fold(lanes[0], fold_128, lanes[1]);
        one = fold(one, fold_128, lanes[2]);
        one = fold(one, fold_128, lanes[3]);
        let mut rest = [0u8; 16];
        for (i, b) in rest.chunks_exact_mut(4).enumerate() {
            b.copy_from_slice(&lane32(one, i).to_le_bytes());
        }
        crc32_continue(u32::MAX, &rest)
    }

    /// 32-bit lane `i` (0..4) of `v`.
    #[target_feature(enable = "sse4.1")]
    fn lane32(v: __m128i, i: usize) -> u32 {
        (match i {
            0 => _mm_extract_epi32::<0>(v),
            1 => _mm_extract_epi32::<1>(v),
            2 => _mm_extract_epi32::<2>(v),
            _ => _mm_extract_epi32::<3>(v),
        }) as u32
    }
}

#[cfg(test)]
mod tests {
    use tensorizer_core::hash::{TensorHasher, blocks_portable};

    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
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
    fn the_kernel_matches_the_portable_one() {
        let Some(k) = kernel() else {
            eprintln!("SKIPPED: no joint kernel on this CPU");
            return;
        };
        for blocks in [0, 1, 2, 3, 17, 1000] {
            for crc in [0, 1, 0xdead_beef, u32::MAX] {
                let data = bytes(64 * blocks, crc.wrapping_add(blocks as u32));
                let mut a = [7u32, 6, 5, 4, 3, 2, 1, 0];
                let mut b = a;
                let ca = k(&mut a, crc, &data);
                let cb = blocks_portable(&mut b, crc, &data);
                assert_eq!((a, ca), (b, cb), "{blocks} blocks, crc {crc:#x}");
            }
        }
    }

    #[test]
    fn hashes_through_the_kernel_match_the_libraries() {
        for (header, data) in [(0, 0), (9, 100), (120, 64 * 1024 + 5), (1, 3 << 20)] {
            let header = bytes(header, 3);
            let data = bytes(data, 4);
            let mut separate = TensorHasher::new(&header, true, true);
            separate.update(&data);
            let mut joint = TensorHasher::with_kernel(&header, true, true, kernel());
            for piece in data.chunks(100_003) {
                joint.update(piece);
            }
            assert!(joint.finish() == separate.finish());
        }
    }
}
