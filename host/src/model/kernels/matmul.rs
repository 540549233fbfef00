//! [`matmul`]: `y = x Wᵀ (+ b)` for a few input rows on the calling thread.
//!
//! One thread, because decode steps of a few rows are bound by reading the weights, which one
//! core does as fast as two (SmolLM2's LM head at batch 1: 26 GB/s on one thread, 25 on two);
//! wider products go to libtorch (see [`super::decode::MAX_ROWS`]).

use super::microkernel::{self, Tile, MAX_ROWS};
use super::pack::{PackedWeights, PANEL};

/// `out[r][n] = Σ_k x[r][k] · W[n][k] (+ bias[n])` for `x` `rows × K` and `out` `rows × N`
/// (both row-major), `W` packed.
///
/// Rows are cut into tiles of at most [`MAX_ROWS`] (sizes balanced); per panel every row tile
/// runs, so each weight is read from memory once and then from cache.
///
/// # Panics
/// When the slice lengths do not match `rows`, `K` and `N`.
pub fn matmul(
    x: &[f32],
    rows: usize,
    weights: &PackedWeights,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (n, k) = (weights.outputs(), weights.inputs());
    assert_eq!(x.len(), rows * k, "x is rows × K");
    assert_eq!(out.len(), rows * n, "out is rows × N");
    assert!(bias.is_none_or(|b| b.len() == n), "bias has N values");
    if rows == 0 || n == 0 {
        return;
    }
    let tiles = rows.div_ceil(MAX_ROWS);
    let panels = weights.panels();
    let out_ptr = out.as_mut_ptr();
    for panel in 0..panels {
        let column = panel * PANEL;
        let columns = PANEL.min(n - column);
        let mut row = 0;
        for t in 0..tiles {
            // Balanced tile sizes: the first `rows % tiles` tiles get one row more.
            let height = rows / tiles + usize::from(t < rows % tiles);
            let tile = Tile {
                x: &x[row * k..(row + height) * k],
                rows: height,
                inputs: k,
                panel: weights.panel(panel),
                next_panel: (panel + 1 < panels).then(|| weights.panel(panel + 1)),
                bias: bias.map(|b| &b[column..column + columns]),
                columns,
                // SAFETY: `row * n + column` is inside `out` (row < rows, column < n).
                out: unsafe { out_ptr.add(row * n + column) },
                out_stride: n,
            };
            // SAFETY: the tile writes rows `row..row + height`, columns
            // `column..column + columns` of `out`, all inside it, and `out` is borrowed
            // mutably for the whole call.
            unsafe { microkernel::run(&tile) };
            row += height;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x Wᵀ + b` in f64, the reference.
    fn reference(x: &[f32], w: &[f32], b: Option<&[f32]>, rows: usize, n: usize) -> Vec<f64> {
        let k = w.len() / n;
        let mut out = vec![0.0; rows * n];
        for r in 0..rows {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[c * k + i]))
                    .sum();
                out[r * n + c] = dot + b.map_or(0.0, |b| f64::from(b[c]));
            }
        }
        out
    }

    /// Deterministic values in [-1, 1).
    fn values(count: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..count)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_a_float64_reference_on_odd_shapes() {
        for (rows, n, k) in [
            (1, 1, 1),
            (3, 17, 5),
            (17, 33, 64),
            (64, 100, 3),
            (13, 32, 40),
        ] {
            let (x, w, b) = (values(rows * k, 1), values(n * k, 2), values(n, 3));
            let packed = PackedWeights::pack(&w, n, k);
            let mut out = vec![f32::NAN; rows * n];
            matmul(&x, rows, &packed, Some(&b), &mut out);
            let expected = reference(&x, &w, Some(&b), rows, n);
            for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "rows {rows} n {n} k {k} at {i}: {got} vs {want}"
                );
            }
        }
    }
}
