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

/// [`RmsNorm`] over the last dimension of `x` as one libtorch operator, `_fused_rms_norm`: one
/// kernel (and one for its gradient) on CUDA instead of the eight of the layer's own formula.
/// The weight multiplies in f32 before the one rounding to `x`'s dtype, where transformers (and
/// [`RmsNorm::forward`]) round first: the same in f32, within one ulp in bf16.
pub fn fused_rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let width = x.size().last().copied().unwrap_or(0);
    x.internal_fused_rms_norm([width], Some(weight), eps).0
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;
    use crate::model::backend::Libtorch;

    #[test]
    fn fused_equals_the_layer_in_f32_and_rounds_once_in_bf16() {
        tch::manual_seed(2);
        let vs = nn::VarStore::new(Device::Cpu);
        let mut norm = RmsNorm::new(&vs.root(), 96, 1e-6);
        norm.weight = Tensor::randn([96], (Kind::Float, Device::Cpu)) * 0.5 + 1.0;
        let x = Tensor::randn([4, 7, 96], (Kind::Float, Device::Cpu)) * 3.0;
        let layer = norm.forward(&x, &Libtorch);
        assert!(fused_rms_norm(&x, &norm.weight, norm.eps).equal(&layer));

        let (x16, weight16) = (
            x.to_kind(Kind::BFloat16),
            norm.weight.to_kind(Kind::BFloat16),
        );
        let fused = fused_rms_norm(&x16, &weight16, norm.eps);
        assert_eq!(fused.kind(), Kind::BFloat16);
        let x32 = x16.to_kind(Kind::Float);
        let rstd = (x32.square().mean_dim(-1, true, Kind::Float) + norm.eps).rsqrt();
        let once = (x32 * rstd * weight16.to_kind(Kind::Float)).to_kind(Kind::BFloat16);
        assert!(fused.equal(&once), "not the f32 product rounded once");
        norm.weight = weight16;
        let rounded_first = norm.forward(&x16, &Libtorch).to_kind(Kind::Float);
        let ulp = rounded_first.abs() / 128.0;
        let apart = (fused.to_kind(Kind::Float) - &rounded_first).abs();
        assert!(
            apart.le_tensor(&ulp).all().int64_value(&[]) == 1,
            "more than one bf16 ulp from the layer's formula"
        );
    }
}
