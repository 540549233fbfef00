//! [`RmsNorm`]: root-mean-square layer normalisation, as in Llama.

use tch::{nn, Kind, Tensor};

use crate::model::backend::Backend;

/// `x / sqrt(mean(x²) + eps) * weight` over the last dimension, statistics in f32.
#[derive(Debug)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// Allocates `weight` `[dim]` (ones) under `p`.
    pub fn new(p: &nn::Path, dim: i64, eps: f64) -> Self {
        Self {
            weight: p.ones("weight", &[dim]),
            eps,
        }
    }

    /// Normalises the last dimension of `x`, on `backend` where it takes it.
    pub fn forward(&self, x: &Tensor, backend: &dyn Backend) -> Tensor {
        backend
            .rms_norm(x, &self.weight, self.eps)
            .unwrap_or_else(|| {
                let kind = x.kind();
                let x32 = x.to_kind(Kind::Float);
                let variance = x32.square().mean_dim(-1, true, Kind::Float);
                let normed = (x32 * (variance + self.eps).rsqrt()).to_kind(kind);
                normed * &self.weight
            })
    }
}
