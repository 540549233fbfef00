//! [`Rotary`]: rotary position embeddings (RoPE) with precomputed cos/sin tables.

use tch::{Device, Kind, Tensor};

use super::super::config::RopeScaling;

/// Cos/sin tables `[max_positions, head_dim / 2]` and their application in HF's
/// "rotate half" layout (the first half of a head pairs with the second).
#[derive(Debug)]
pub struct Rotary {
    cos: Tensor,
    sin: Tensor,
    max_positions: i64,
}

impl Rotary {
    /// Tables for positions `0..max_positions` of heads `head_dim` wide, with base `theta`
    /// and optional frequency `scaling` (computed in f64, stored as f32).
    pub fn new(
        head_dim: usize,
        theta: f64,
        scaling: Option<&RopeScaling>,
        max_positions: usize,
        device: Device,
    ) -> Self {
        let half = head_dim / 2;
        let mut inv_freq: Vec<f64> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
            .collect();
        if let Some(scaling) = scaling {
            scaling.apply(&mut inv_freq);
        }
        let inv_freq = Tensor::from_slice(&inv_freq);
        let positions = Tensor::arange(max_positions as i64, (Kind::Double, Device::Cpu));
        let angles = positions.outer(&inv_freq);
        Self {
            cos: angles.cos().to_kind(Kind::Float).to_device(device),
            sin: angles.sin().to_kind(Kind::Float).to_device(device),
            max_positions: max_positions as i64,
        }
    }

    /// Moves the tables to `device`.
    pub fn to_device(&mut self, device: Device) {
        self.cos = self.cos.to_device(device);
        self.sin = self.sin.to_device(device);
    }

    /// The number of positions the tables cover.
    pub fn max_positions(&self) -> i64 {
        self.max_positions
    }

    /// Rotates `x` `[B, heads, T, head_dim]` by the angles of `positions` `[B, T]` (int64,
    /// each below [`Rotary::max_positions`]).
    pub fn apply(&self, x: &Tensor, positions: &Tensor) -> Tensor {
        let size = positions.size();
        let (b, t) = (size[0], size[1]);
        let half = self.cos.size()[1];
        let flat = positions.reshape([-1]);
        let kind = x.kind();
        let cos = self
            .cos
            .index_select(0, &flat)
            .view([b, 1, t, half])
            .to_kind(kind);
        let sin = self
            .sin
            .index_select(0, &flat)
            .view([b, 1, t, half])
            .to_kind(kind);
        let x1 = x.narrow(-1, 0, half);
        let x2 = x.narrow(-1, half, half);
        Tensor::cat(&[&x1 * &cos - &x2 * &sin, &x2 * &cos + &x1 * &sin], -1)
    }
}
