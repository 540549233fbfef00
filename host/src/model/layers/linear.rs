//! [`Linear`]: `y = x Wᵀ + b` with HF's `[out_features, in_features]` weight layout.

use tch::{nn, Tensor};

use crate::model::backend::Backend;

/// A dense layer whose `weight` (and optional `bias`) are variables of its path.
#[derive(Debug)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// Allocates `weight` `[out_dim, in_dim]` (and `bias` `[out_dim]` if `bias`) under `p`,
    /// zeroed: a checkpoint is expected to overwrite them.
    pub fn new(p: &nn::Path, in_dim: i64, out_dim: i64, bias: bool) -> Self {
        Self {
            weight: p.zeros("weight", &[out_dim, in_dim]),
            bias: bias.then(|| p.zeros("bias", &[out_dim])),
        }
    }

    /// Applies the layer to the last dimension of `x`, on `backend` where it takes the product
    /// and on libtorch otherwise.
    pub fn forward(&self, x: &Tensor, backend: &dyn Backend) -> Tensor {
        let bias = self.bias.as_ref();
        backend
            .linear(x, &self.weight, bias)
            .unwrap_or_else(|| x.linear(&self.weight, bias))
    }
}
