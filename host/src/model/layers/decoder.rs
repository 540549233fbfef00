//! [`DecoderLayer`]: one pre-norm transformer block, `x + attn(norm(x))` then `x + mlp(norm(x))`.

use tch::{nn, Tensor};

use super::{
    AdapterRows, Attention, AttentionConfig, AttentionContext, Mlp, Past, Projection, RmsNorm,
    RotaryAngles,
};
use crate::model::backend::Backend;

/// `model.layers.N`: `input_layernorm`, `self_attn`, `post_attention_layernorm`, `mlp`.
#[derive(Debug)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl DecoderLayer {
    /// Allocates the layer under `p` (`model.layers.N`).
    pub fn new(p: &nn::Path, attention: AttentionConfig, intermediate: i64, eps: f64) -> Self {
        Self {
            input_layernorm: RmsNorm::new(&(p / "input_layernorm"), attention.hidden, eps),
            self_attn: Attention::new(&(p / "self_attn"), attention),
            post_attention_layernorm: RmsNorm::new(
                &(p / "post_attention_layernorm"),
                attention.hidden,
                eps,
            ),
            mlp: Mlp::new(&(p / "mlp"), attention.hidden, intermediate),
        }
    }

    /// The seven projections with their names under the layer (`self_attn.q_proj`, …,
    /// `mlp.down_proj`), for attaching LoRA adapters.
    pub fn projections_mut(&mut self) -> Vec<(String, &mut Projection)> {
        let attention = self.self_attn.projections_mut().into_iter();
        let attention = attention.map(|(n, p)| (format!("self_attn.{n}"), p));
        let mlp = self.mlp.projections_mut().into_iter();
        attention
            .chain(mlp.map(|(n, p)| (format!("mlp.{n}"), p)))
            .collect()
    }

    /// The projections with their names, as [`Self::projections_mut`].
    pub fn projections(&self) -> Vec<(String, &Projection)> {
        let attention = self.self_attn.projections().into_iter();
        let attention = attention.map(|(n, p)| (format!("self_attn.{n}"), p));
        let mlp = self.mlp.projections().into_iter();
        attention
            .chain(mlp.map(|(n, p)| (format!("mlp.{n}"), p)))
            .collect()
    }

    /// Applies the layer to `x` `[B, T, hidden]`, each row through the LoRA adapter `rows`
    /// gives it; `past` holds the earlier tokens (with this layer's index); products and
    /// decode attention on `backend` where it takes them.
    pub fn forward(
        &self,
        x: &Tensor,
        angles: &RotaryAngles,
        context: &AttentionContext,
        past: (&mut Past<'_>, usize),
        rows: &AdapterRows,
        backend: &dyn Backend,
    ) -> Tensor {
        let h = x + self.self_attn.forward(
            &self.input_layernorm.forward(x, backend),
            angles,
            context,
            past,
            rows,
            backend,
        );
        let out = self.mlp.forward(
            &self.post_attention_layernorm.forward(&h, backend),
            rows,
            backend,
        );
        h + out
    }
}
