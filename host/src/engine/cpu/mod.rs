//! The CPU backend: kernels of our own for the dense products, decode attention, RMSNorm, RoPE,
//! SwiGLU and sampling of f32 models on the CPU, where libtorch's bundled MKL may not take the
//! CPU's widest vector path, its one-token attention is mostly call overhead, and its
//! elementwise steps cost more in fixed overhead per operation than in arithmetic at a decode
//! step's size.
//!
//! [`CpuKernels`] is the [`Backend`](crate::model::backend::Backend) a CPU model is built with
//! (see [`backend_for`]); it takes only f32 CPU work under `no_grad`, so training forwards
//! (with autograd) always stay on libtorch. It hands the kernels the weights where libtorch
//! keeps them: no copy is made. [`matmul`] picks a kernel by row count — [`dot`] products for
//! a few rows (bound by reading the weights), [`broadcast_weights`] over the input rows
//! [`transpose`]d for decode steps of a batch, [`broadcast_inputs`] over weight [`panel`]s
//! transposed per block of rows for prefills — and splits the outputs over the threads of
//! libtorch's OpenMP team ([`pool`]). Decode steps' attention runs on [`decode_attention()`],
//! RMSNorm on [`rms_norm()`] and RoPE on [`rotate()`] (one pass each instead of six libtorch
//! operations), SwiGLU's activation on [`silu_mul()`], and the sampler's plain-temperature
//! draws on `sample_categorical` (three passes over a row instead of five libtorch operations
//! over the batch). Every product and attention kernel has an AVX-512 version and a portable
//! one, SwiGLU and the draws an AVX-512 and an AVX2 one; RMSNorm and RoPE are plain Rust that
//! the compiler vectorises.

pub mod backend;
pub mod broadcast_inputs;
pub mod broadcast_weights;
#[cfg(target_arch = "x86_64")]
pub mod categorical;
pub mod decode_attention;
pub mod dot;
#[cfg(target_arch = "x86_64")]
mod exp;
pub mod isa;
pub mod matmul;
pub mod panel;
pub mod pool;
mod prefetch;
pub mod rms_norm;
pub mod rotary;
pub mod swiglu;
pub mod transpose;

pub use backend::{backend_for, CpuKernels, Routes, KERNELS_VAR};
#[cfg(target_arch = "x86_64")]
pub use categorical::sample_categorical;
pub use decode_attention::decode_attention;
pub use isa::Isa;
pub use rms_norm::rms_norm;
pub use rotary::rotate;
pub use swiglu::silu_mul;

/// Inputs summed in one run before a partial sum is added to the total: rounding error grows
/// with the block length plus the number of blocks instead of with `K`, as in BLAS kernels
/// (whose depth blocking does the same), so decode logits stay within 1e-4 of libtorch's.
pub const K_BLOCK: usize = 128;

/// `Σ term(x)` over `values`: the whole runs of 16 into 16 partial sums (which the compiler keeps
/// in vector registers) added at the end, then the rest. RMSNorm's mean of squares and the
/// sampler's block weights sum this way.
fn sum_in_lanes(values: &[f32], term: impl Fn(f32) -> f32) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [0.0f32; LANES];
    let chunks = values.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&x| term(x)).sum();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += term(x);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The largest difference between `a` and `b` relative to `b`'s largest magnitude (tests).
#[cfg(test)]
pub(crate) fn relative_difference(a: &tch::Tensor, b: &tch::Tensor) -> f64 {
    let scale = b.abs().max().double_value(&[]).max(1e-30);
    (a - b).abs().max().double_value(&[]) / scale
}
