//! CPU kernels for decode steps: `y = x Wᵀ + b` for a handful of rows (one per sequence in the
//! batch) against large f32 weights, where libtorch's bundled MKL reaches a fraction of this
//! machine's bandwidth and FLOP rate.
//!
//! [`DecodeMatmul`] decides per call whether the kernel applies (f32 on the CPU, few rows, no
//! autograd) and keeps the weight [`pack`]ed into panels, repacked whenever libtorch's version
//! counter says the weight changed; [`matmul`] runs the panels on the calling thread; the
//! [`microkernel`] computes one tile in registers (AVX-512 when the CPU has it, portable Rust
//! otherwise).

pub mod decode;
pub mod matmul;
pub mod microkernel;
pub mod pack;

pub use decode::{set_enabled, DecodeMatmul};
pub use pack::PackedWeights;
