//! [`Attention`]: grouped-query self-attention with RoPE, optional q/k/v biases (Qwen2) and
//! per-head q/k RMSNorm (Qwen3), over the keys of earlier tokens a [`Past`] holds.

use tch::{nn, Tensor};

use super::{AdapterRows, AttentionContext, Past, Projection, RmsNorm, RotaryAngles};
use crate::model::backend::Backend;

/// The sizes and options of one attention block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionConfig {
    /// Width of the residual stream.
    pub hidden: i64,
    /// Query heads.
    pub heads: i64,
    /// Key/value heads (divides `heads`).
    pub kv_heads: i64,
    /// Width of one head.
    pub head_dim: i64,
    /// Whether q/k/v projections have biases.
    pub qkv_bias: bool,
    /// Whether queries and keys are RMS-normalised per head (with this epsilon).
    pub qk_norm: Option<f64>,
}

/// `self_attn`: q/k/v/o projections, optional q/k norms.
#[derive(Debug)]
pub struct Attention {
    q_proj: Projection,
    k_proj: Projection,
    v_proj: Projection,
    o_proj: Projection,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    config: AttentionConfig,
}

impl Attention {
    /// Allocates the block's weights under `p` (the layer's `self_attn` path).
    pub fn new(p: &nn::Path, config: AttentionConfig) -> Self {
        let c = config;
        let norm = |name: &str| {
            c.qk_norm
                .map(|eps| RmsNorm::new(&(p / name), c.head_dim, eps))
        };
        Self {
            q_proj: Projection::new(&(p / "q_proj"), c.hidden, c.heads * c.head_dim, c.qkv_bias),
            k_proj: Projection::new(
                &(p / "k_proj"),
                c.hidden,
                c.kv_heads * c.head_dim,
                c.qkv_bias,
            ),
            v_proj: Projection::new(
                &(p / "v_proj"),
                c.hidden,
                c.kv_heads * c.head_dim,
                c.qkv_bias,
            ),
            o_proj: Projection::new(&(p / "o_proj"), c.heads * c.head_dim, c.hidden, false),
            q_norm: norm("q_norm"),
            k_norm: norm("k_norm"),
            config,
        }
    }

    /// The projections with their names under `self_attn` (`q_proj`, `k_proj`, `v_proj`,
    /// `o_proj`), for attaching LoRA adapters.
    pub fn projections_mut(&mut self) -> [(&'static str, &mut Projection); 4] {
        [
            ("q_proj", &mut self.q_proj),
            ("k_proj", &mut self.k_proj),
            ("v_proj", &mut self.v_proj),
            ("o_proj", &mut self.o_proj),
        ]
    }

    /// The projections with their names, as [`Self::projections_mut`].
    pub fn projections(&self) -> [(&'static str, &Projection); 4] {
        [
            ("q_proj", &self.q_proj),
            ("k_proj", &self.k_proj),
            ("v_proj", &self.v_proj),
            ("o_proj", &self.o_proj),
        ]
    }

    /// Attends from `x` `[B, T, hidden]` to the earlier tokens `past` holds for this block
    /// (layer `layer`) and to the new ones, as `context` allows; each row's projections go
    /// through the LoRA adapter `rows` gives it; products and decode attention on `backend`
    /// where it takes them.
    pub fn forward(
        &self,
        x: &Tensor,
        angles: &RotaryAngles,
        context: &AttentionContext,
        (past, layer): (&mut Past<'_>, usize),
        rows: &AdapterRows,
        backend: &dyn Backend,
    ) -> Tensor {
        let c = &self.config;
        let size = x.size();
        let (b, t) = (size[0], size[1]);
        let heads = |y: Tensor, n: i64, norm: &Option<RmsNorm>| {
            let y = y.view([b, t, n, c.head_dim]);
            let y = match norm {
                Some(norm) => norm.forward(&y, backend),
                None => y,
            };
            y.transpose(1, 2)
        };
        let q = heads(self.q_proj.forward(x, rows, backend), c.heads, &self.q_norm);
        let k = heads(
            self.k_proj.forward(x, rows, backend),
            c.kv_heads,
            &self.k_norm,
        );
        let v = heads(self.v_proj.forward(x, rows, backend), c.kv_heads, &None);
        let (q, k) = (angles.apply(&q, backend), angles.apply(&k, backend));
        let (k, v) = past.keys_values(layer, context.offset, k, v);
        let y = backend
            .decode_attention(&q, &k, &v, &context.mask, context.shared.as_ref())
            .or_else(|| backend.attention(&q, &k, &v, &context.mask))
            .unwrap_or_else(|| {
                Tensor::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    Some(&context.mask),
                    0.0,
                    false,
                    None,
                    c.kv_heads != c.heads,
                )
            });
        self.o_proj.forward(
            &y.transpose(1, 2).reshape([b, t, c.heads * c.head_dim]),
            rows,
            backend,
        )
    }
}
