//! [`matmul`]: `y = x Wᵀ (+ b)` for a few input rows, panels shared out over the cores.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::microkernel::{self, Tile, MAX_ROWS};
use super::pack::{PackedWeights, PANEL};
use super::pool::Pool;

/// Below this many multiply-adds a product runs on the calling thread alone: waking a helper
/// costs more than it saves.
const PARALLEL_MIN: usize = 1 << 16;

/// Below this many rows a product runs on the calling thread alone: it is bound by reading the
/// weights, which one core does as fast as two (SmolLM2's LM head at batch 1: 26 GB/s on one
/// thread, 25 on two), and helpers would only cost wake-ups.
const PARALLEL_ROWS: usize = 4;

/// Chunks of panels per participating thread: enough that a core slowed by another process
/// leaves its share to the others, few enough that claiming them costs nothing.
const CHUNKS_PER_THREAD: usize = 8;

/// The output pointer, shared by the threads that write disjoint columns of it.
#[derive(Clone, Copy)]
struct Out(*mut f32);

// SAFETY: threads write through it only to the disjoint panels they claim (see `matmul`).
unsafe impl Sync for Out {}

impl Out {
    /// The address `offset` floats in (a method, so closures capture the `Sync` wrapper).
    ///
    /// # Safety
    /// `offset` is within the output.
    unsafe fn at(&self, offset: usize) -> *mut f32 {
        // SAFETY: per this function's contract.
        unsafe { self.0.add(offset) }
    }
}

/// `out[r][n] = Σ_k x[r][k] · W[n][k] (+ bias[n])` for `x` `rows × K` and `out` `rows × N`
/// (both row-major), `W` packed. Uses up to `threads` threads.
///
/// Rows are cut into tiles of at most [`MAX_ROWS`] (sizes balanced); each thread claims chunks
/// of panels and, per panel, runs every row tile, so each weight is read from memory once and
/// then from cache.
///
/// # Panics
/// When the slice lengths do not match `rows`, `K` and `N`.
pub fn matmul(
    x: &[f32],
    rows: usize,
    weights: &PackedWeights,
    bias: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
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
    let threads = if rows < PARALLEL_ROWS || rows * n * k < PARALLEL_MIN {
        1
    } else {
        threads.clamp(1, panels)
    };
    let chunk = panels.div_ceil(threads * CHUNKS_PER_THREAD).max(1);
    let next = AtomicUsize::new(0);
    let out_ptr = Out(out.as_mut_ptr());
    let work = || {
        loop {
            let first = next.fetch_add(chunk, Ordering::Relaxed);
            if first >= panels {
                break;
            }
            for panel in first..(first + chunk).min(panels) {
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
                        out: unsafe { out_ptr.at(row * n + column) },
                        out_stride: n,
                    };
                    // SAFETY: the tile writes rows `row..row + height`, columns
                    // `column..column + columns` of `out`, all inside it; this panel's columns
                    // were claimed by this thread alone (the atomic counter hands each chunk
                    // out once), and `out` is borrowed mutably for the whole call.
                    unsafe { microkernel::run(&tile) };
                    row += height;
                }
            }
        }
    };
    if threads == 1 {
        work();
    } else {
        Pool::global().run(threads, &work);
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
            for threads in [1, 2] {
                let (x, w, b) = (values(rows * k, 1), values(n * k, 2), values(n, 3));
                let packed = PackedWeights::pack(&w, n, k);
                let mut out = vec![f32::NAN; rows * n];
                matmul(&x, rows, &packed, Some(&b), &mut out, threads);
                let expected = reference(&x, &w, Some(&b), rows, n);
                for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "rows {rows} n {n} k {k} threads {threads} at {i}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
