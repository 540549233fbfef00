//! CPU kernels for generation: `y = x Wᵀ + b` of prefills and decode steps against f32
//! weights, where libtorch's bundled MKL takes the AVX2 path on this AMD CPU and reaches a
//! fraction of its bandwidth (decode) and FLOP rate (prefill, wide decode batches), and the
//! attention of decode steps.
//!
//! [`generation_linear`] decides per call whether the kernel applies (inside
//! [`while_generating`], f32 on the CPU, no autograd) and hands it the weight where libtorch
//! keeps it: no copy of the weights is made. [`matmul`] picks a kernel by row count — [`dot`]
//! products for a few rows (bound by reading the weights), [`broadcast_weights`] over the
//! input rows [`transpose`]d for decode steps of a batch, [`broadcast_inputs`] over weight
//! [`panel`]s transposed per block of rows for prefills — and splits the outputs over the
//! threads of libtorch's OpenMP team ([`pool`]). Decode steps' attention over the KV cache
//! runs on [`decode_attention()`]. Every kernel has an AVX-512 version and a portable one for
//! CPUs without it.

pub mod broadcast_inputs;
pub mod broadcast_weights;
pub mod decode_attention;
pub mod dot;
pub mod generation;
pub mod matmul;
pub mod panel;
pub mod pool;
pub mod transpose;

pub use decode_attention::decode_attention;
pub use generation::{generation_linear, set_enabled, while_generating};

/// Inputs summed in one run before a partial sum is added to the total: rounding error grows
/// with the block length plus the number of blocks instead of with `K`, as in BLAS kernels
/// (whose depth blocking does the same), so decode logits stay within 1e-4 of libtorch's.
pub const K_BLOCK: usize = 128;

/// The largest difference between `a` and `b` relative to `b`'s largest magnitude (tests).
#[cfg(test)]
pub(crate) fn relative_difference(a: &tch::Tensor, b: &tch::Tensor) -> f64 {
    let scale = b.abs().max().double_value(&[]).max(1e-30);
    (a - b).abs().max().double_value(&[]) / scale
}
