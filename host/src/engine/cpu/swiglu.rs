//! [`silu_mul`]: SwiGLU's activation `silu(gate) · up` in one pass, in place of libtorch's two
//! operations and the tensor between them.

use tch::{Device, Kind, Tensor};

use super::backend::{grad_enabled, on_cpu_f32};
#[cfg(target_arch = "x86_64")]
use super::exp::{exp_avx2, exp_avx512};
use super::isa::Isa;
use super::matmul::DECODE_ROWS;

/// `gate / (1 + e^(−gate)) · up`, elementwise, for `gate` and `up` of one shape `[…, I]` with at
/// most [`DECODE_ROWS`] rows, by the `isa` version, or `None` when libtorch should do it: grad
/// mode on, not f32 on the CPU, shapes that differ, wider products (libtorch splits those over
/// its threads), or the portable version (libm's scalar `expf` is slower than libtorch's).
///
/// # Panics
/// When the CPU does not support `isa`.
pub fn silu_mul(gate: &Tensor, up: &Tensor, isa: Isa) -> Option<Tensor> {
    isa.assert_supported();
    if grad_enabled() || isa == Isa::Portable {
        return None;
    }
    let size = gate.size();
    let &width = size.last()?;
    if !on_cpu_f32(gate) || !on_cpu_f32(up) || up.size() != size || width == 0 {
        return None;
    }
    let len = gate.numel();
    if len / usize::try_from(width).ok()? > DECODE_ROWS {
        return None;
    }
    let (gate, up) = (gate.contiguous(), up.contiguous());
    let out = Tensor::empty(size.as_slice(), (Kind::Float, Device::Cpu));
    // SAFETY: `gate`, `up` and `out` are contiguous f32 CPU tensors of `len` elements (checked
    // above or just allocated); `out` is fresh, so nothing else reads or writes it while the
    // slice lives, and the others are only read.
    let (gate_data, up_data, out_data) = unsafe {
        (
            std::slice::from_raw_parts(gate.data_ptr().cast::<f32>().cast_const(), len),
            std::slice::from_raw_parts(up.data_ptr().cast::<f32>().cast_const(), len),
            std::slice::from_raw_parts_mut(out.data_ptr().cast::<f32>(), len),
        )
    };
    match isa {
        // SAFETY: the CPU supports the version (asserted above).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { silu_mul_avx512(gate_data, up_data, out_data) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { silu_mul_avx2(gate_data, up_data, out_data) },
        _ => silu_mul_scalar(gate_data, up_data, out_data),
    }
    Some(out)
}

/// The scalar form, for the elements after the last whole vector.
fn silu_mul_scalar(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((y, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *y = g / (1.0 + (-g).exp()) * u;
    }
}

/// Runs `vector` on each whole run of `LANES` elements of `gate`, `up` and `out`, and the
/// scalar form on the rest; inlined into each version, so `vector` runs with its features.
#[inline(always)]
fn in_vectors<const LANES: usize>(
    gate: &[f32],
    up: &[f32],
    out: &mut [f32],
    vector: impl Fn(&[f32], &[f32], &mut [f32]),
) {
    let whole = gate.len() / LANES * LANES;
    let vectors = out[..whole]
        .chunks_exact_mut(LANES)
        .zip(gate.chunks_exact(LANES).zip(up.chunks_exact(LANES)));
    for (y, (g, u)) in vectors {
        vector(g, u, y);
    }
    silu_mul_scalar(&gate[whole..], &up[whole..], &mut out[whole..]);
}

/// 16 elements at a time with [`exp_avx512`]: a division and a product rounded separately, as
/// libtorch's `silu` and `mul` do.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn silu_mul_avx512(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_div_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps, _mm512_sub_ps,
    };
    in_vectors::<16>(gate, up, out, |g, u, y| {
        // SAFETY: each run holds 16 floats; the CPU supports AVX-512F (this function's
        // feature, which the closure inherits).
        unsafe {
            let (g, u) = (_mm512_loadu_ps(g.as_ptr()), _mm512_loadu_ps(u.as_ptr()));
            let e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
            let silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e));
            _mm512_storeu_ps(y.as_mut_ptr(), _mm512_mul_ps(silu, u));
        }
    });
}

/// [`silu_mul_avx512`] 8 elements at a time with [`exp_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn silu_mul_avx2(gate: &[f32], up: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps,
        _mm256_setzero_ps, _mm256_storeu_ps, _mm256_sub_ps,
    };
    in_vectors::<8>(gate, up, out, |g, u, y| {
        // SAFETY: each run holds 8 floats; the CPU supports AVX2 and FMA (as above).
        unsafe {
            let (g, u) = (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr()));
            let e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
            let silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e));
            _mm256_storeu_ps(y.as_mut_ptr(), _mm256_mul_ps(silu, u));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::relative_difference;

    #[test]
    fn matches_libtorch_in_every_vector_version() {
        tch::manual_seed(9);
        let f32 = (Kind::Float, Device::Cpu);
        for isa in Isa::supported().into_iter().filter(|&i| i != Isa::Portable) {
            // Decode steps of 1 and 16 rows, widths with and without a partial vector, and
            // inputs far out in both tails of the sigmoid.
            for shape in [[1, 1, 1536], [16, 1, 1536], [3, 1, 37], [2, 5, 9]] {
                let gate = Tensor::randn(shape, f32) * 30.0;
                let up = Tensor::randn(shape, f32);
                let got = tch::no_grad(|| silu_mul(&gate, &up, isa)).expect("taken");
                let want = gate.silu() * &up;
                let diff = relative_difference(&got, &want);
                assert!(diff < 1e-6, "{isa} {shape:?}: {diff}");
            }
        }
    }

    #[test]
    fn leaves_grad_mode_prefills_other_shapes_and_the_portable_version_to_libtorch() {
        let f32 = (Kind::Float, Device::Cpu);
        let (gate, up) = (Tensor::randn([2, 1, 8], f32), Tensor::randn([2, 1, 8], f32));
        let isa = Isa::best();
        let taken = |g: &Tensor, u: &Tensor, isa| tch::no_grad(|| silu_mul(g, u, isa)).is_some();
        assert_eq!(taken(&gate, &up, isa), isa != Isa::Portable);
        assert!(silu_mul(&gate, &up, isa).is_none(), "grad mode");
        assert!(!taken(&gate, &up, Isa::Portable));
        assert!(!taken(&gate, &Tensor::randn([2, 1, 4], f32), isa));
        let prefill = Tensor::randn([2, 40, 8], f32);
        assert!(!taken(&prefill, &prefill, isa));
    }
}
