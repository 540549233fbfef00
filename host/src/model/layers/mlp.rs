//! [`Mlp`]: the SwiGLU feed-forward block, `down(silu(gate(x)) · up(x))`.

use tch::{nn, Tensor};

use super::{AdapterRows, Projection};
use crate::model::backend::Backend;

/// The gated MLP of Llama-family decoders (`mlp.gate_proj`, `mlp.up_proj`, `mlp.down_proj`).
#[derive(Debug)]
pub struct Mlp {
    gate: Projection,
    up: Projection,
    down: Projection,
}

impl Mlp {
    /// Allocates the three projections under `p` (`p` is the layer's `mlp` path).
    pub fn new(p: &nn::Path, hidden: i64, intermediate: i64) -> Self {
        Self {
            gate: Projection::new(&(p / "gate_proj"), hidden, intermediate, false),
            up: Projection::new(&(p / "up_proj"), hidden, intermediate, false),
            down: Projection::new(&(p / "down_proj"), intermediate, hidden, false),
        }
    }

    /// The projections with their names under `mlp`, for attaching LoRA adapters.
    pub fn projections_mut(&mut self) -> [(&'static str, &mut Projection); 3] {
        [
            ("gate_proj", &mut self.gate),
            ("up_proj", &mut self.up),
            ("down_proj", &mut self.down),
        ]
    }

    /// The projections with their names, as [`Self::projections_mut`].
    pub fn projections(&self) -> [(&'static str, &Projection); 3] {
        [
            ("gate_proj", &self.gate),
            ("up_proj", &self.up),
            ("down_proj", &self.down),
        ]
    }

    /// Applies the block to `x` `[.., hidden]`, each row through the adapter `rows` gives it,
    /// the products on `backend`.
    pub fn forward(&self, x: &Tensor, rows: &AdapterRows, backend: &dyn Backend) -> Tensor {
        let (gate, up) = (
            self.gate.forward(x, rows, backend),
            self.up.forward(x, rows, backend),
        );
        let gated = backend
            .silu_mul(&gate, &up)
            .unwrap_or_else(|| gate.silu() * up);
        self.down.forward(&gated, rows, backend)
    }
}
