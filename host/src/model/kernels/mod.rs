//! CPU kernels for generation: `y = x Wᵀ + b` of prefills and decode steps against f32
//! weights, where libtorch's bundled MKL takes the AVX2 path on this AMD CPU and reaches a
//! fraction of its bandwidth (decode) and FLOP rate (prefill, wide decode batches).
//!
//! [`GenerationMatmul`] decides per call whether the kernel applies (inside
//! [`while_generating`], f32 on the CPU, no autograd) and keeps the weight [`pack`]ed into
//! panels, repacked whenever libtorch's version counter says the weight changed; [`matmul`]
//! splits the panels over the threads of libtorch's OpenMP team ([`pool`]); the [`microkernel`]
//! computes one tile in registers (AVX-512 when the CPU has it, portable Rust otherwise).

pub mod generation;
pub mod matmul;
pub mod microkernel;
pub mod pack;
pub mod pool;

pub use generation::{set_enabled, while_generating, GenerationMatmul};
pub use pack::PackedWeights;
