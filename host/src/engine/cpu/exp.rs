//! `eˣ` for vectors of f32 (AVX-512 and AVX2): the softmax of decode attention and SwiGLU's
//! SiLU, where libm's scalar `expf` would cost more than the rest of the kernel.
//!
//! Both versions reduce `x = n ln 2 + r` with `|r| ≤ ln 2 / 2`, take `eʳ` from its Taylor
//! polynomial and scale it by `2ⁿ`, with the same constants, so they agree lane for lane.

/// The lowest input taken: `e^−87.3` ≈ 1e-38, still a normal float.
pub(super) const LOWEST: f32 = -87.3;

/// ln 2 in two parts (Cephes): `n · LN2_HIGH` is exact for `|n| ≤ 127`, and `LN2_LOW` holds the
/// rest.
const LN2_HIGH: f32 = 0.693_359_4;
const LN2_LOW: f32 = -2.121_944_4e-4;

/// `eʳ`'s Taylor coefficients to degree 7, highest first (error below 5e-9 for
/// `|r| ≤ ln 2 / 2`).
const TAYLOR: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// `eˣ` for 16 floats to within ~2 ulp, `2ⁿ` applied by `vscalefps`. Inputs below −87.3 give
/// ~1e-38 (callers zero masked lanes themselves); above 88.7, `f32::MAX`-ish.
#[target_feature(enable = "avx512f")]
pub(super) fn exp_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::{
        _mm512_fmadd_ps, _mm512_fnmadd_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
        _mm512_roundscale_ps, _mm512_scalef_ps, _mm512_set1_ps, _MM_FROUND_NO_EXC,
        _MM_FROUND_TO_NEAREST_INT,
    };
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(LOWEST)),
        _mm512_set1_ps(88.7),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HIGH), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LOW), r);
    let mut p = _mm512_set1_ps(TAYLOR[0]);
    for c in &TAYLOR[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    _mm512_scalef_ps(p, n)
}

/// [`exp_avx512`] for 8 floats in AVX2, `2ⁿ` built in the exponent bits (inputs clamped to
/// [−87.3, 88.3], so `n` stays in the normal range).
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::{
        _mm256_add_epi32, _mm256_castsi256_ps, _mm256_cvtps_epi32, _mm256_fmadd_ps,
        _mm256_fnmadd_ps, _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_round_ps,
        _mm256_set1_epi32, _mm256_set1_ps, _mm256_slli_epi32, _MM_FROUND_NO_EXC,
        _MM_FROUND_TO_NEAREST_INT,
    };
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(LOWEST)),
        _mm256_set1_ps(88.3),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HIGH), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LOW), r);
    let mut p = _mm256_set1_ps(TAYLOR[0]);
    for c in &TAYLOR[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    // `2ⁿ` for `n` in −126..=127: the biased exponent `n + 127` in bits 23..31.
    let two_n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    )));
    _mm256_mul_ps(p, two_n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::isa::Isa;

    #[test]
    fn the_vector_exps_are_within_two_ulp_of_libm() {
        let inputs: Vec<f32> = (0..4096)
            .map(|i| -87.0 + i as f32 * (87.0 + 88.0) / 4096.0)
            .collect();
        for isa in Isa::supported() {
            for chunk in inputs.chunks_exact(16) {
                let mut got = [0.0f32; 16];
                match isa {
                    // SAFETY: the CPU supports the ISA; 16 floats in and out.
                    Isa::Avx512 => unsafe {
                        use std::arch::x86_64::{_mm512_loadu_ps, _mm512_storeu_ps};
                        _mm512_storeu_ps(
                            got.as_mut_ptr(),
                            exp_avx512(_mm512_loadu_ps(chunk.as_ptr())),
                        );
                    },
                    // SAFETY: the CPU supports the ISA; 16 floats in and out, 8 at a time.
                    Isa::Avx2 => unsafe {
                        use std::arch::x86_64::{_mm256_loadu_ps, _mm256_storeu_ps};
                        for half in 0..2 {
                            let x = _mm256_loadu_ps(chunk.as_ptr().add(8 * half));
                            _mm256_storeu_ps(got.as_mut_ptr().add(8 * half), exp_avx2(x));
                        }
                    },
                    Isa::Portable => continue,
                }
                for (&x, &got) in chunk.iter().zip(&got) {
                    let want = x.exp();
                    assert!(
                        (got - want).abs() <= 2.5e-7 * want,
                        "{isa}: exp({x}) = {got}, libm {want}"
                    );
                }
            }
        }
    }
}
