//! [`Backend`]: who computes a model's dense products, decode attention, RMSNorm, RoPE and
//! SwiGLU, and the draws of sampling from its logits — libtorch, or kernels of another layer of
//! the crate (the engine's CPU kernels) — chosen when the model is built and held by it.
//!
//! The model asks its backend first and falls back to libtorch when the backend declines
//! (returns `None`), so a backend only takes the products it is faster or better at and never
//! has to implement the rest. The model knows nothing of any backend but [`Libtorch`]: the
//! others are defined where they run (e.g. `crate::engine::cpu`) and handed to
//! [`crate::model::llama::Llama::set_backend`].

use std::fmt::Debug;
use std::sync::Arc;

use tch::{Device, Tensor};

use super::cuda_attention::{attention_with_repeated_heads, CudaAttention};
use super::eager_attention::eager_decode_attention;
use super::layers::{fused_rms_norm, SharedCacheRows};
use super::process_setting::ProcessSetting;

/// The operations a backend may compute in libtorch's place. Every method returns `None` to
/// leave the product to libtorch (the default), and must otherwise return what libtorch
/// would, to within rounding.
pub trait Backend: Debug + Send + Sync {
    /// A short name for logs and benchmarks (`libtorch`, `cpu-avx512`, …).
    fn name(&self) -> String;

    /// `x.linear(weight, bias)` for `x` `[…, K]`, `weight` `[N, K]`, `bias` `[N]`.
    fn linear(&self, _x: &Tensor, _weight: &Tensor, _bias: Option<&Tensor>) -> Option<Tensor> {
        None
    }

    /// `softmax(q kᵀ / √d + mask) v` of one new token per row: `q` `[B, H, 1, D]`, `k`, `v`
    /// `[B, H_kv, S, D]` (grouped-query attention when `H_kv < H`), `mask` `[B, 1, 1, S]` bool
    /// (true = attend). Rows `shared` names hold their first keys and values in another row
    /// too, which a backend may read instead.
    fn decode_attention(
        &self,
        _q: &Tensor,
        _k: &Tensor,
        _v: &Tensor,
        _mask: &Tensor,
        _shared: Option<&SharedCacheRows>,
    ) -> Option<Tensor> {
        None
    }

    /// `softmax(q kᵀ / √d + mask) v` of several new tokens per row (prompts, training
    /// sequences): `q` `[B, H, T, D]`, `k`, `v` `[B, H_kv, S, D]` (`H_kv` divides `H`), `mask`
    /// `[B, 1, T, S]` bool (true = attend).
    fn attention(&self, _q: &Tensor, _k: &Tensor, _v: &Tensor, _mask: &Tensor) -> Option<Tensor> {
        None
    }

    /// `x / sqrt(mean(x²) + eps) · weight` over the last dimension of `x` (`weight` `[D]`),
    /// statistics in f32.
    fn rms_norm(&self, _x: &Tensor, _weight: &Tensor, _eps: f64) -> Option<Tensor> {
        None
    }

    /// `x · cos + swap_halves(x) · sin` for `x` `[B, H, T, D]` and `cos`, `sin` `[B, 1, T, D]`:
    /// RoPE in the layout of [`crate::model::layers::RotaryAngles`].
    fn rotate(&self, _x: &Tensor, _cos: &Tensor, _sin: &Tensor) -> Option<Tensor> {
        None
    }

    /// `silu(gate) · up`, elementwise: SwiGLU's activation.
    fn silu_mul(&self, _gate: &Tensor, _up: &Tensor) -> Option<Tensor> {
        None
    }

    /// One draw per row of `logits` `[B, V]` from `softmax(logits / temperature[row])` by
    /// inverse CDF with `uniform[row]` in `[0, 1)`: tokens `[B, 1]` int64 and their
    /// log-probabilities `log_softmax(logits / T)` `[B, 1]` f32, as
    /// [`crate::engine::Sampler`] draws rows without top-k or top-p.
    fn sample(
        &self,
        _logits: &Tensor,
        _temperature: &[f32],
        _uniform: &[f32],
    ) -> Option<(Tensor, Tensor)> {
        None
    }
}

/// libtorch for everything: the default of every model, and what CUDA models use. On an
/// accelerator, where every operator is a kernel launch, a decode step's attention is
/// [`eager_decode_attention`] rather than `scaled_dot_product_attention`, whose fused kernels
/// set up per shape (see there), and RMSNorm is libtorch's fused operator
/// ([`fused_rms_norm`]); on a CUDA device, prompts and training sequences attend as
/// [`CudaAttention`] says; on the CPU the layers' own formulas stay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Libtorch;

impl Backend for Libtorch {
    fn name(&self) -> String {
        "libtorch".to_owned()
    }

    fn decode_attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        _shared: Option<&SharedCacheRows>,
    ) -> Option<Tensor> {
        let one_token = q.size().get(2) == Some(&1);
        (one_token && q.device() != Device::Cpu).then(|| eager_decode_attention(q, k, v, mask))
    }

    fn attention(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Option<Tensor> {
        let repeated =
            q.device().is_cuda() && CudaAttention::current() == CudaAttention::RepeatedHeads;
        repeated.then(|| attention_with_repeated_heads(q, k, v, mask))
    }

    fn rms_norm(&self, x: &Tensor, weight: &Tensor, eps: f64) -> Option<Tensor> {
        (x.device() != Device::Cpu).then(|| fused_rms_norm(x, weight, eps))
    }
}

/// The [`Libtorch`] backend, shared.
pub fn libtorch() -> Arc<dyn Backend> {
    Arc::new(Libtorch)
}
