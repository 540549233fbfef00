//! [`matmul`]: `y = x Wᵀ (+ b)` for generation's products, reading `W` where libtorch keeps
//! it (row-major, no copy), split by outputs over the threads of libtorch's OpenMP team (see
//! [`super::pool`]).
//!
//! Every product is split into one contiguous range of outputs per thread. Products of at
//! most [`dot::MAX_ROWS`] rows run [`dot`] tiles: they are bound by reading the weights, and
//! on many CPUs one core cannot draw the memory bandwidth that two do. Wider ones are bound
//! by arithmetic: decode steps of up to [`DECODE_ROWS`] rows transpose `x` once
//! ([`TransposedRows`]) and run [`broadcast_weights`] tiles of 16 rows × 16–24 outputs (32
//! rows × 16 on AVX-512 where a batch has them);
//! prefills transpose each panel of 32 outputs once per block of rows ([`PanelBuffer`]) and
//! run [`broadcast_inputs`] tiles of up to 12 rows × 32 outputs. Every kernel runs the
//! version of one [`Isa`].

use super::broadcast_inputs::{self, MAX_ROWS};
use super::broadcast_weights::{self, outputs_per_tile, PAIR_ROWS};
use super::dot;
use super::isa::Isa;
use super::panel::{PanelBuffer, PANEL};
use super::pool;
use super::prefetch::share_of_lines;
use super::transpose::{TransposedRows, GROUP};

/// The most rows a product runs as a decode step (see the module documentation).
pub const DECODE_ROWS: usize = 64;

/// Input bytes per row block of a prefill: a block's rows are read once per panel, so they
/// should stay in the core's L2 cache beside the panel (half of a 1 MiB L2).
const ROW_BLOCK_BYTES: usize = 512 * 1024;

/// `W [N, K]` as libtorch (and HF's `Linear`) store it: row `n` holds output `n`'s weights.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    /// `N × K` floats, row-major.
    pub data: &'a [f32],
    /// `N`.
    pub outputs: usize,
    /// `K`.
    pub inputs: usize,
}

impl<'a> Weights<'a> {
    /// Rows `range` of `W`: one contiguous block.
    fn rows(&self, range: std::ops::Range<usize>) -> &'a [f32] {
        &self.data[range.start * self.inputs..range.end * self.inputs]
    }
}

/// `out[r][n] = Σ_k x[r][k] · W[n][k] (+ bias[n])` for `x` `rows × K` and `out` `rows × N`
/// (both row-major).
///
/// A decode step's tiles of [`GROUP`] rows (or [`PAIR_ROWS`] on AVX-512) each meet a run of
/// [`outputs_per_tile`] weight rows, read from memory once (while the next run is prefetched).
/// A prefill cuts its rows into blocks that fit in L2 (`ROW_BLOCK_BYTES`, 512 KiB) and each
/// block into tiles of at most [`MAX_ROWS`] (sizes balanced); per block, each panel of the
/// thread's range is read from memory once, transposed, and meets every tile of the block from
/// cache.
///
/// # Panics
/// When the slice lengths do not match `rows`, `K` and `N`, or the CPU does not support `isa`.
pub fn matmul(
    x: &[f32],
    rows: usize,
    weights: Weights<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    isa: Isa,
) {
    let (n, k) = (weights.outputs, weights.inputs);
    assert_eq!(weights.data.len(), n * k, "W is N × K");
    assert_eq!(x.len(), rows * k, "x is rows × K");
    assert_eq!(out.len(), rows * n, "out is rows × N");
    assert!(bias.is_none_or(|b| b.len() == n), "bias has N values");
    isa.assert_supported();
    if rows == 0 || n == 0 {
        return;
    }
    let out = OutPtr(out.as_mut_ptr());
    if rows <= dot::MAX_ROWS {
        let tiles = n.div_ceil(dot::OUTPUTS);
        let parts = pool::parts().min(tiles);
        pool::run_parts(parts, &|part| {
            let outputs = outputs_of(pool::share(part, parts, tiles), dot::OUTPUTS, n);
            // SAFETY: every part writes the columns of its own outputs only, the ranges
            // are disjoint, and `out` (rows × N floats) is borrowed mutably for the call.
            unsafe { run_few_rows(x, rows, weights, bias, out, outputs, isa) };
        });
    } else if rows <= DECODE_ROWS {
        let width = outputs_per_tile(isa);
        let runs = n.div_ceil(width);
        let parts = pool::parts().min(runs);
        TransposedRows::with(x, rows, k, isa, |x_t| {
            pool::run_parts(parts, &|part| {
                let outputs = outputs_of(pool::share(part, parts, runs), width, n);
                // SAFETY: every part writes the columns of its own outputs only, the ranges
                // are disjoint, and `out` (rows × N floats) is borrowed mutably for the call.
                unsafe { run_decode(x_t, rows, weights, bias, out, outputs, isa) };
            });
        });
    } else {
        let panels = n.div_ceil(PANEL);
        let parts = pool::parts().min(panels);
        pool::run_parts(parts, &|part| {
            let outputs = outputs_of(pool::share(part, parts, panels), PANEL, n);
            // SAFETY: as above.
            unsafe { run_prefill(x, rows, weights, bias, out, outputs, isa) };
        });
    }
}

/// The outputs of `runs` of `width` outputs each, the last clipped to `n`.
fn outputs_of(runs: std::ops::Range<usize>, width: usize, n: usize) -> std::ops::Range<usize> {
    runs.start * width..(runs.end * width).min(n)
}

/// Computes the columns `outputs` of a product of at most [`dot::MAX_ROWS`] rows: one [`dot`]
/// tile per [`dot::OUTPUTS`] outputs, each prefetching the next one's weights.
///
/// # Safety
/// `out` addresses `rows × N` floats that nothing else reads or writes in these columns
/// during the call.
unsafe fn run_few_rows(
    x: &[f32],
    rows: usize,
    weights: Weights<'_>,
    bias: Option<&[f32]>,
    out: OutPtr,
    outputs: std::ops::Range<usize>,
    isa: Isa,
) {
    let (n, k) = (weights.outputs, weights.inputs);
    for column in outputs.clone().step_by(dot::OUTPUTS) {
        let columns = dot::OUTPUTS.min(outputs.end - column);
        let next = column + columns..(column + columns + dot::OUTPUTS).min(outputs.end);
        let tile = dot::Tile {
            x,
            rows,
            inputs: k,
            weights: weights.rows(column..column + columns),
            prefetch: weights.rows(next),
            outputs: columns,
            bias: bias.map(|b| &b[column..column + columns]),
            // SAFETY: `column < n` is inside `out`'s first row.
            out: unsafe { out.0.add(column) },
            out_stride: n,
        };
        // SAFETY: the tile writes rows `0..rows`, columns `column..column + columns` of
        // `out`, inside it and in this call's outputs.
        unsafe { dot::run(&tile, isa) };
    }
}

/// The output's base pointer, shared by the parts that write disjoint columns of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: the parts of one product write disjoint elements (see `matmul`).
unsafe impl Sync for OutPtr {}

/// Computes the columns `outputs` of a decode step for all `rows` of `out` (see [`matmul`]).
///
/// # Safety
/// `out` addresses `rows × N` floats that nothing else reads or writes in these columns
/// during the call.
unsafe fn run_decode(
    x_t: &TransposedRows,
    rows: usize,
    weights: Weights<'_>,
    bias: Option<&[f32]>,
    out: OutPtr,
    outputs: std::ops::Range<usize>,
    isa: Isa,
) {
    let (n, k) = (weights.outputs, weights.inputs);
    let (floats, x_stride) = (x_t.floats(), x_t.stride());
    let width = outputs_per_tile(isa);
    let tiles = row_tiles(rows, isa);
    let count = tiles.clone().count();
    for column in outputs.clone().step_by(width) {
        let columns = width.min(outputs.end - column);
        let next = column + columns..(column + columns + width).min(outputs.end);
        let next_weights = weights.rows(next);
        for (tile_index, (row, height, pair)) in tiles.clone().enumerate() {
            // Each tile of the run fetches its share of the next run's weights.
            let prefetch = share_of_lines(next_weights, tile_index, count);
            let tile = broadcast_weights::Tile {
                x_t: &floats[row..],
                x_stride,
                rows: height,
                inputs: k,
                weights: weights.rows(column..column + columns),
                outputs: columns,
                prefetch,
                bias: bias.map(|b| &b[column..column + columns]),
                // SAFETY: `row * n + column` is inside `out` (row < rows, column < n).
                out: unsafe { out.0.add(row * n + column) },
                out_stride: n,
            };
            // SAFETY: the tile writes rows `row..row + height`, columns
            // `column..column + columns` of `out`, inside it and in this call's outputs.
            unsafe {
                if pair {
                    #[cfg(target_arch = "x86_64")]
                    broadcast_weights::run_pair(&tile);
                } else {
                    broadcast_weights::run(&tile, isa);
                }
            }
        }
    }
}

/// The row tiles of a decode product of `rows` rows: `(first row, rows, pair)`, pairs of
/// [`GROUP`]s ([`PAIR_ROWS`]) on AVX-512 where more than one group of rows is left (`xᵀ` holds
/// the rows rounded up to a group, so a pair's second vector is there), single groups elsewhere.
fn row_tiles(rows: usize, isa: Isa) -> impl Iterator<Item = (usize, usize, bool)> + Clone {
    let mut row = 0;
    std::iter::from_fn(move || {
        (row < rows).then(|| {
            let pair = isa == Isa::Avx512 && rows - row > GROUP;
            let height = if pair { PAIR_ROWS } else { GROUP }.min(rows - row);
            let tile = (row, height, pair);
            row += height;
            tile
        })
    })
}

/// Computes the columns `outputs` (whole panels but for the last) of a prefill for all
/// `rows` of `out` (see [`matmul`]).
///
/// # Safety
/// `out` addresses `rows × N` floats that nothing else reads or writes in these columns
/// during the call.
unsafe fn run_prefill(
    x: &[f32],
    rows: usize,
    weights: Weights<'_>,
    bias: Option<&[f32]>,
    out: OutPtr,
    outputs: std::ops::Range<usize>,
    isa: Isa,
) {
    let (n, k) = (weights.outputs, weights.inputs);
    let block_rows = (ROW_BLOCK_BYTES / (4 * k.max(1))).max(MAX_ROWS) / MAX_ROWS * MAX_ROWS;
    PanelBuffer::with(k, |panel| {
        for block in (0..rows).step_by(block_rows) {
            let block_height = block_rows.min(rows - block);
            let tiles = block_height.div_ceil(MAX_ROWS);
            for column in outputs.clone().step_by(PANEL) {
                let columns = PANEL.min(outputs.end - column);
                let next = column + columns..(column + columns + PANEL).min(outputs.end);
                panel.load(weights.data, column, columns, isa);
                let mut row = block;
                for t in 0..tiles {
                    // Balanced tile sizes: the first `block_height % tiles` get one row more.
                    let height = block_height / tiles + usize::from(t < block_height % tiles);
                    let tile = broadcast_inputs::Tile {
                        x: &x[row * k..(row + height) * k],
                        rows: height,
                        inputs: k,
                        panel: panel.panel(),
                        next_panel: (!next.is_empty()).then(|| weights.rows(next.clone())),
                        bias: bias.map(|b| &b[column..column + columns]),
                        columns,
                        // SAFETY: `row * n + column` is inside `out` (row < rows, column < n).
                        out: unsafe { out.0.add(row * n + column) },
                        out_stride: n,
                    };
                    // SAFETY: the tile writes rows `row..row + height`, columns
                    // `column..column + columns` of `out`, inside it and in this call's
                    // outputs.
                    unsafe { broadcast_inputs::run(&tile, isa) };
                    row += height;
                }
            }
        }
    });
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

    /// Every version sums a decode product's outputs in the same order, whatever its tile
    /// width, so the version that runs decode products changes their speed only.
    #[test]
    fn decode_products_are_bit_identical_in_every_supported_isa() {
        for (rows, n, k) in [
            (4, 161, 1536),
            (16, 100, 576),
            (17, 33, 100),
            (32, 100, 576),
            (37, 50, 300),
            (48, 40, 130),
            (64, 161, 64),
        ] {
            let (x, w, b) = (values(rows * k, 4), values(n * k, 5), values(n, 6));
            let weights = Weights {
                data: &w,
                outputs: n,
                inputs: k,
            };
            let outputs: Vec<(Isa, Vec<u32>)> = Isa::supported()
                .into_iter()
                .map(|isa| {
                    let mut out = vec![f32::NAN; rows * n];
                    matmul(&x, rows, weights, Some(&b), &mut out, isa);
                    (isa, out.iter().map(|v| v.to_bits()).collect())
                })
                .collect();
            for pair in outputs.windows(2) {
                assert!(
                    pair[0].1 == pair[1].1,
                    "rows {rows} n {n} k {k}: {} and {} differ",
                    pair[0].0,
                    pair[1].0
                );
            }
        }
    }

    #[test]
    fn matches_a_float64_reference_on_odd_shapes_in_every_supported_isa() {
        for isa in Isa::supported() {
            for (rows, n, k) in [
                (1, 1, 1),
                (3, 17, 5),
                (17, 33, 64),
                (64, 100, 3),
                (13, 32, 40),
                // Few rows split over the threads, a short tile at the end.
                (2, 161, 1536),
                // Decode steps: partial tiles, output ranges with short runs at their ends.
                (64, 161, 1536),
                // Prefills: several row blocks (84 rows each for K = 1536), panel ranges of
                // unequal size.
                (65, 161, 1536),
                (200, 161, 1536),
                (1000, 70, 64),
            ] {
                let (x, w, b) = (values(rows * k, 1), values(n * k, 2), values(n, 3));
                let weights = Weights {
                    data: &w,
                    outputs: n,
                    inputs: k,
                };
                let mut out = vec![f32::NAN; rows * n];
                matmul(&x, rows, weights, Some(&b), &mut out, isa);
                let expected = reference(&x, &w, Some(&b), rows, n);
                for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{isa}: rows {rows} n {n} k {k} at {i}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
