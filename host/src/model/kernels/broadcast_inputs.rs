//! The microkernel for prefills: a tile of up to [`MAX_ROWS`] input rows, each value
//! broadcast, times one transposed panel of [`PANEL`] outputs ([`super::panel`]), in AVX-512
//! where the CPU has it and portable Rust elsewhere. Per `k`: two aligned loads of the panel,
//! one broadcast per row, two FMAs per row.

use super::panel::PANEL;
use super::K_BLOCK;

/// Most rows per tile: 12 rows × 2 registers = 24 accumulators of AVX-512's 32 registers,
/// leaving room for the two weight vectors and the broadcast input.
pub const MAX_ROWS: usize = 12;

/// One tile's operands. `out` is a raw pointer because tiles of the same rows but different
/// panels are written by different threads into one row-major output.
pub struct Tile<'a> {
    /// `rows × inputs` input values, row-major.
    pub x: &'a [f32],
    /// Input rows in this tile, `1..=MAX_ROWS`.
    pub rows: usize,
    /// `K`.
    pub inputs: usize,
    /// The panel: `inputs × PANEL` floats, `k`-major, 64-byte aligned.
    pub panel: &'a [f32],
    /// The weights of the panel to compute next, if any (its rows of `W`, at most
    /// `inputs × PANEL` floats), prefetched into L2 while this tile computes: memory then
    /// streams weights during all the tiles of a panel, not only before the first.
    pub next_panel: Option<&'a [f32]>,
    /// The bias of this panel's first `columns` outputs, if any.
    pub bias: Option<&'a [f32]>,
    /// Real (unpadded) outputs of this panel, `1..=PANEL`.
    pub columns: usize,
    /// Where output `(r, c)` goes: `out + r * out_stride + c`.
    pub out: *mut f32,
    /// Floats between consecutive output rows.
    pub out_stride: usize,
}

/// Computes `out[r][c] = Σ_k x[r][k] · panel[k][c] (+ bias[c])` for every row `r < rows` and
/// column `c < columns`: sums over blocks of [`K_BLOCK`] `k`s in order, then of the blocks'
/// sums, then adds the bias (as `addmm` does).
///
/// # Safety
/// `out + r * out_stride + c` must be valid for writes, and written by no one else during the
/// call, for every `r < rows` and `c < columns`.
///
/// # Panics
/// When the slices are shorter than the sizes say, or `rows`/`columns` are out of range.
pub unsafe fn run(tile: &Tile<'_>) {
    assert!((1..=MAX_ROWS).contains(&tile.rows), "tile rows");
    assert!((1..=PANEL).contains(&tile.columns), "tile columns");
    assert!(tile.x.len() >= tile.rows * tile.inputs, "tile input");
    assert!(tile.panel.len() >= tile.inputs * PANEL, "tile panel");
    assert!(
        tile.bias.is_none_or(|b| b.len() >= tile.columns),
        "tile bias"
    );
    assert_eq!(tile.panel.as_ptr() as usize % 64, 0, "panel alignment");
    macro_rules! dispatch {
        ($kernel:ident, $($rows:literal)*) => {
            match tile.rows {
                $($rows => $kernel::<$rows>(tile),)*
                _ => unreachable!("rows checked above"),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (just detected); the operand sizes were checked above
        // and the caller vouches for `out`.
        unsafe { dispatch!(avx512, 1 2 3 4 5 6 7 8 9 10 11 12) };
        return;
    }
    // SAFETY: as above, minus the CPU feature the portable kernel does not need.
    unsafe { dispatch!(portable, 1 2 3 4 5 6 7 8 9 10 11 12) };
}

/// The AVX-512F kernel for `R` rows: per `k`, two aligned loads of the panel's weights, one
/// broadcast per row, two FMAs per row into registers; masked stores for a partial panel.
///
/// # Safety
/// The CPU supports AVX-512F and `tile` satisfies [`run`]'s contract and checks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512<const R: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_fmadd_ps, _mm512_load_ps, _mm512_mask_storeu_ps,
        _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm_prefetch, _MM_HINT_T1,
    };
    let (x, k, w) = (tile.x.as_ptr(), tile.inputs, tile.panel.as_ptr());
    let next = tile.next_panel.unwrap_or_default();
    let mut total = [[_mm512_setzero_ps(); 2]; R];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for kk in block..k.min(block + K_BLOCK) {
            // SAFETY: `kk < k`, the panel holds `k * PANEL` floats aligned to 64 bytes
            // (checked by `run`), so both 16-float loads are in bounds and aligned; `x` holds
            // `R * k` floats, so `r * k + kk` is in bounds; prefetches stay inside `next`.
            unsafe {
                // Two cache lines of the next panel per `k`: all of it over the tile.
                if kk * PANEL + 16 < next.len() {
                    let line = next.as_ptr().add(kk * PANEL);
                    _mm_prefetch::<_MM_HINT_T1>(line.cast());
                    _mm_prefetch::<_MM_HINT_T1>(line.add(16).cast());
                } else if kk * PANEL < next.len() {
                    _mm_prefetch::<_MM_HINT_T1>(next.as_ptr().add(kk * PANEL).cast());
                }
                let w0 = _mm512_load_ps(w.add(kk * PANEL));
                let w1 = _mm512_load_ps(w.add(kk * PANEL + 16));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm512_set1_ps(*x.add(r * k + kk));
                    acc[0] = _mm512_fmadd_ps(xv, w0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(xv, w1, acc[1]);
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            total[0] = _mm512_add_ps(total[0], acc[0]);
            total[1] = _mm512_add_ps(total[1], acc[1]);
        }
    }
    let acc = total;
    let low = tile.columns.min(16);
    let high = tile.columns - low;
    let (mask0, mask1) = (lane_mask(low), lane_mask(high));
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: the masks cover exactly the `columns` outputs, which `run`'s contract makes
        // writable at `out + r * out_stride`; the bias slice holds `columns` floats and masked
        // lanes are not read.
        unsafe {
            let (mut lo, mut hi) = (acc[0], acc[1]);
            if let Some(bias) = tile.bias {
                lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(mask0, bias.as_ptr()));
                hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(mask1, bias.as_ptr().add(low)));
            }
            let out = tile.out.add(r * tile.out_stride);
            _mm512_mask_storeu_ps(out, mask0, lo);
            _mm512_mask_storeu_ps(out.add(low), mask1, hi);
        }
    }
}

/// The first `lanes` (≤ 16) lanes of a 16-lane mask.
#[cfg(target_arch = "x86_64")]
fn lane_mask(lanes: usize) -> u16 {
    ((1u32 << lanes) - 1) as u16
}

/// The same tile in plain Rust (the compiler vectorises the column loop for the baseline
/// target), for CPUs without AVX-512F.
///
/// # Safety
/// `tile` satisfies [`run`]'s contract and checks.
unsafe fn portable<const R: usize>(tile: &Tile<'_>) {
    let k = tile.inputs;
    let mut total = [[0.0f32; PANEL]; R];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [[0.0f32; PANEL]; R];
        for kk in block..k.min(block + K_BLOCK) {
            let w = &tile.panel[kk * PANEL..][..PANEL];
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = tile.x[r * k + kk];
                for (a, &w) in acc.iter_mut().zip(w) {
                    *a += xv * w;
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            for (t, a) in total.iter_mut().zip(acc) {
                *t += a;
            }
        }
    }
    let acc = total;
    for (r, acc) in acc.iter().enumerate() {
        for (c, &value) in acc.iter().enumerate().take(tile.columns) {
            let bias = tile.bias.map_or(0.0, |b| b[c]);
            // SAFETY: `c < columns`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + c) = value + bias };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernels::panel::PanelBuffer;

    /// The portable kernel (which AVX-512 machines never pick) against `run`'s choice.
    #[test]
    fn the_portable_kernel_matches_the_dispatched_one() {
        let (k, columns) = (37, 29);
        let x: Vec<f32> = (0..5 * k)
            .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let w: Vec<f32> = (0..columns * k)
            .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let bias: Vec<f32> = (0..columns).map(|i| i as f32 / 10.0).collect();
        let mut dispatched = vec![0.0f32; 5 * columns];
        let mut portable_out = vec![0.0f32; 5 * columns];
        PanelBuffer::with(k, |buffer| {
            buffer.load(&w, 0, columns);
            for (out, portable_only) in [(&mut dispatched, false), (&mut portable_out, true)] {
                let tile = Tile {
                    x: &x,
                    rows: 5,
                    inputs: k,
                    panel: buffer.panel(),
                    next_panel: None,
                    bias: Some(&bias),
                    columns,
                    out: out.as_mut_ptr(),
                    out_stride: columns,
                };
                // SAFETY: `out` holds 5 rows of `columns` floats.
                unsafe {
                    if portable_only {
                        portable::<5>(&tile);
                    } else {
                        run(&tile);
                    }
                }
            }
        });
        for (a, b) in dispatched.iter().zip(&portable_out) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
        let expected: f32 = (0..k).map(|i| x[i] * w[i]).sum::<f32>() + bias[0];
        assert!((portable_out[0] - expected).abs() < 1e-5);
    }
}
