//! [`matmul`]: `y = x Wᵀ (+ b)` for generation's products, split by output panels over the
//! threads of libtorch's OpenMP team (see [`super::pool`]).
//!
//! Products of at most [`FEW_ROWS`] rows run on the calling thread alone: they are bound by
//! reading the weights, which one core does as fast as two (SmolLM2's LM head at batch 1: 26
//! GB/s on one thread, 25 on two). Wider ones (decode steps of a batch, prefills) are bound by
//! arithmetic and split into one contiguous range of panels per thread.

use super::microkernel::{self, Tile, MAX_ROWS};
use super::pack::{PackedWeights, PANEL};
use super::pool;

/// The most rows a product runs on one thread (see the module documentation).
pub const FEW_ROWS: usize = 3;

/// Input bytes per row block: a block's rows are read once per panel, so they should stay in
/// the core's L2 cache (1 MB on the Zen 5 this was tuned on) beside the panel being streamed.
const ROW_BLOCK_BYTES: usize = 256 * 1024;

/// `out[r][n] = Σ_k x[r][k] · W[n][k] (+ bias[n])` for `x` `rows × K` and `out` `rows × N`
/// (both row-major), `W` packed.
///
/// Rows are cut into blocks that fit in L2 ([`ROW_BLOCK_BYTES`]) and each block into tiles of
/// at most [`MAX_ROWS`] (sizes balanced); per block, every panel of the thread's range runs
/// every tile, so a panel is read from memory once per block and then from cache.
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
    let panels = weights.panels();
    let parts = if rows <= FEW_ROWS {
        1
    } else {
        pool::parts().min(panels)
    };
    let out = OutPtr(out.as_mut_ptr());
    pool::run_parts(parts, &|part| {
        // Contiguous, balanced panel ranges: the first `panels % parts` get one panel more.
        let first = part * (panels / parts) + part.min(panels % parts);
        let count = panels / parts + usize::from(part < panels % parts);
        // SAFETY: every part writes the columns of its own panels only, the ranges are
        // disjoint, and `out` (rows × N floats) is borrowed mutably for the whole call.
        unsafe { run_panels(x, rows, weights, bias, out, first..first + count) };
    });
}

/// The output's base pointer, shared by the parts that write disjoint columns of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: the parts of one product write disjoint elements (see `matmul`).
unsafe impl Sync for OutPtr {}

/// Computes the columns of `panels` for all rows of `out` (see [`matmul`]).
///
/// # Safety
/// `out` addresses `rows × N` floats that nothing else reads or writes in these columns
/// during the call.
unsafe fn run_panels(
    x: &[f32],
    rows: usize,
    weights: &PackedWeights,
    bias: Option<&[f32]>,
    out: OutPtr,
    panels: std::ops::Range<usize>,
) {
    let (n, k) = (weights.outputs(), weights.inputs());
    let block_rows = (ROW_BLOCK_BYTES / (4 * k)).max(MAX_ROWS) / MAX_ROWS * MAX_ROWS;
    for block in (0..rows).step_by(block_rows) {
        let block_height = block_rows.min(rows - block);
        let tiles = block_height.div_ceil(MAX_ROWS);
        for panel in panels.clone() {
            let column = panel * PANEL;
            let columns = PANEL.min(n - column);
            let mut row = block;
            for t in 0..tiles {
                // Balanced tile sizes: the first `block_height % tiles` get one row more.
                let height = block_height / tiles + usize::from(t < block_height % tiles);
                let tile = Tile {
                    x: &x[row * k..(row + height) * k],
                    rows: height,
                    inputs: k,
                    panel: weights.panel(panel),
                    next_panel: (panel + 1 < panels.end).then(|| weights.panel(panel + 1)),
                    bias: bias.map(|b| &b[column..column + columns]),
                    columns,
                    // SAFETY: `row * n + column` is inside `out` (row < rows, column < n).
                    out: unsafe { out.0.add(row * n + column) },
                    out_stride: n,
                };
                // SAFETY: the tile writes rows `row..row + height`, columns
                // `column..column + columns` of `out`, inside it and in this call's panels.
                unsafe { microkernel::run(&tile) };
                row += height;
            }
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
            // Several row blocks (36 rows each for K = 1536) and panel ranges of unequal size.
            (100, 161, 1536),
            (1000, 70, 64),
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
