//! [`Projection`]: a frozen base [`Linear`] with optional LoRA adapters on top
//! ([`LoraLinear`]), each row of a batch through its own adapter or none.

use tch::{nn, Kind, Tensor};

use super::adapter_rows::Routing;
use super::{AdapterRows, Linear};
use crate::model::backend::Backend;

/// LoRA's low-rank update of one projection for several adapters ("slots"), as PEFT computes
/// it: `y = base(x) + (alpha / r) · B(A(dropout(x)))`, `A` `[r, in]`, `B` `[out, r]`.
#[derive(Debug)]
pub struct LoraLinear {
    /// `lora_A` of each slot, `[r, in]`.
    a: Vec<Tensor>,
    /// `lora_B` of each slot, `[out, r]`.
    b: Vec<Tensor>,
    scaling: f64,
    dropout: f64,
}

impl LoraLinear {
    /// Adapters `0..a.len()` from their `A` `[r, in]` and `B` `[out, r]` variables, scaled by
    /// `scaling` (`alpha / r`), with dropout probability `dropout` on the input in training.
    pub fn new(a: Vec<Tensor>, b: Vec<Tensor>, scaling: f64, dropout: f64) -> Self {
        Self {
            a,
            b,
            scaling,
            dropout,
        }
    }

    /// Adds the update of each row's adapter to `base` (the base layer's output for `x`,
    /// `[B, T, out]`); rows without an adapter keep `base` exactly.
    pub fn add_to(&self, base: Tensor, x: &Tensor, rows: &AdapterRows) -> Tensor {
        let x = if rows.training() && self.dropout > 0.0 {
            x.dropout(self.dropout, true)
        } else {
            x.shallow_clone()
        };
        let delta = match rows.routing() {
            Routing::Base => return base,
            Routing::One(slot) => x
                .linear::<Tensor>(&self.a[*slot], None)
                .linear::<Tensor>(&self.b[*slot], None),
            Routing::Mixed {
                used,
                index,
                present,
            } => {
                let gather = |slots: &[Tensor]| {
                    let used: Vec<&Tensor> = used.iter().map(|&slot| &slots[slot]).collect();
                    Tensor::stack(&used, 0).index_select(0, index)
                };
                let (a, b) = (gather(&self.a), gather(&self.b));
                let delta = x.bmm(&a.transpose(1, 2)).bmm(&b.transpose(1, 2));
                match present {
                    Some(present) => delta * present.view([-1, 1, 1]).to_kind(base.kind()),
                    None => delta,
                }
            }
        };
        base + delta * self.scaling
    }

    /// `(alpha / r) · B A` `[out, in]` of `slot` in f32: what merging the adapter adds to the
    /// base weight.
    pub fn delta_weight(&self, slot: usize) -> Tensor {
        self.b[slot]
            .to_kind(Kind::Float)
            .matmul(&self.a[slot].to_kind(Kind::Float))
            * self.scaling
    }
}

/// A projection of a decoder layer (`q_proj`, …, `down_proj`): the base layer, plus LoRA
/// adapters once [`Projection::attach`] gave it some.
#[derive(Debug)]
pub struct Projection {
    base: Linear,
    lora: Option<LoraLinear>,
    in_dim: i64,
    out_dim: i64,
}

impl Projection {
    /// Allocates the base layer's `weight` `[out_dim, in_dim]` (and `bias`) under `p`, as
    /// [`Linear::new`]; no adapters.
    pub fn new(p: &nn::Path, in_dim: i64, out_dim: i64, bias: bool) -> Self {
        Self {
            base: Linear::new(p, in_dim, out_dim, bias),
            lora: None,
            in_dim,
            out_dim,
        }
    }

    /// `(in_features, out_features)`.
    pub fn dims(&self) -> (i64, i64) {
        (self.in_dim, self.out_dim)
    }

    /// Puts `lora` on top of the base layer (replacing adapters attached before).
    pub fn attach(&mut self, lora: LoraLinear) {
        self.lora = Some(lora);
    }

    /// Removes the adapters (after merging one into the base weight).
    pub fn detach(&mut self) {
        self.lora = None;
    }

    /// The adapters on top of the base layer, if any.
    pub fn lora(&self) -> Option<&LoraLinear> {
        self.lora.as_ref()
    }

    /// The base layer's output for `x` (on `backend`), plus the adapter update of each row
    /// `rows` selects (on libtorch).
    pub fn forward(&self, x: &Tensor, rows: &AdapterRows, backend: &dyn Backend) -> Tensor {
        let y = self.base.forward(x, backend);
        match &self.lora {
            Some(lora) if !rows.is_base() => lora.add_to(y, x, rows),
            _ => y,
        }
    }
}
