//! [`Rotary`]: rotary position embeddings (RoPE) with precomputed cos/sin tables, and
//! [`RotaryAngles`]: the tables gathered for one forward's positions.

use tch::{Device, Kind, Tensor};

use super::super::config::RopeScaling;
use crate::model::backend::Backend;

/// Cos/sin tables `[max_positions, head_dim / 2]` for HF's "rotate half" layout (the first
/// half of a head pairs with the second).
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

    /// The angles of `positions` `[B, T]` (int64, each below [`Rotary::max_positions`]) in
    /// `kind`, gathered once per forward and shared by every layer's queries and keys.
    pub fn angles(&self, positions: &Tensor, kind: Kind) -> RotaryAngles {
        let size = positions.size();
        let (b, t) = (size[0], size[1]);
        let half = self.cos.size()[1];
        let flat = positions.reshape([-1]);
        let gather = |table: &Tensor| table.index_select(0, &flat).view([b, 1, t, half]);
        let (cos, sin) = (gather(&self.cos), gather(&self.sin));
        RotaryAngles {
            cos: Tensor::cat(&[&cos, &cos], -1).to_kind(kind),
            sin: Tensor::cat(&[-&sin, sin], -1).to_kind(kind),
        }
    }
}

/// The cos/sin of one forward's positions, `[B, 1, T, head_dim]` each, laid out so that
/// rotating a head is `x · cos + swap_halves(x) · sin`: `cos` repeats `cos θ` over both halves
/// and `sin` holds `-sin θ` in the first half and `sin θ` in the second.
#[derive(Debug)]
pub struct RotaryAngles {
    cos: Tensor,
    sin: Tensor,
}

impl RotaryAngles {
    /// Rotates `x` `[B, heads, T, head_dim]`: `(x₁ cos − x₂ sin, x₂ cos + x₁ sin)` for the
    /// halves `x₁`, `x₂` of each head, as HF's `apply_rotary_pos_emb` (bit for bit: negating a
    /// factor is exact), on `backend` where it takes it.
    pub fn apply(&self, x: &Tensor, backend: &dyn Backend) -> Tensor {
        backend.rotate(x, &self.cos, &self.sin).unwrap_or_else(|| {
            let half = x.size()[3] / 2;
            let swapped = Tensor::cat(&[x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1);
            x * &self.cos + swapped * &self.sin
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::backend::Libtorch;

    #[test]
    fn rotates_each_half_by_its_positions_angle_exactly() {
        let (head_dim, half) = (8, 4);
        let rotary = Rotary::new(head_dim, 10_000.0, None, 32, Device::Cpu);
        let positions = Tensor::from_slice(&[0i64, 5, 31, 7, 2, 30]).view([2, 3]);
        let x = Tensor::randn([2, 3, 3, head_dim as i64], (Kind::Float, Device::Cpu));
        let rotated = rotary.angles(&positions, Kind::Float).apply(&x, &Libtorch);

        let flat = positions.reshape([-1]);
        let table = |t: &Tensor| t.index_select(0, &flat).view([2, 1, 3, half]);
        let (cos, sin) = (table(&rotary.cos), table(&rotary.sin));
        let (x1, x2) = (x.narrow(-1, 0, half), x.narrow(-1, half, half));
        let expected = Tensor::cat(&[&x1 * &cos - &x2 * &sin, &x2 * &cos + &x1 * &sin], -1);
        assert!(
            rotated.equal(&expected),
            "not bit-identical to the explicit rotation"
        );

        // Position 0 is the identity; rotating preserves each pair's norm.
        let first = rotated.select(0, 0).select(1, 0);
        assert!(first.equal(&x.select(0, 0).select(1, 0)));
        let pair_norms = |t: &Tensor| {
            (t.narrow(-1, 0, half).square() + t.narrow(-1, half, half).square()).sqrt()
        };
        assert!(pair_norms(&rotated).allclose(&pair_norms(&x), 1e-5, 1e-6, false));
    }
}
