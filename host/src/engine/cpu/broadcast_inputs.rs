//! The microkernel for prefills: a tile of up to [`MAX_ROWS`] input rows, each value
//! broadcast, times one transposed panel of [`PANEL`] outputs ([`super::panel`]). Per `k` in
//! AVX-512: two aligned loads of the panel, one broadcast per row, two FMAs per row. AVX2's
//! sixteen 8-float registers hold a quarter of that, so its kernel runs the tile in passes of
//! at most `AVX2_ROWS` rows × one half of the panel (12 accumulators, two weight vectors,
//! the broadcast input).

use super::isa::Isa;
use super::panel::PANEL;
use super::K_BLOCK;

/// Most rows per tile: 12 rows × 2 registers = 24 accumulators of AVX-512's 32 registers,
/// leaving room for the two weight vectors and the broadcast input.
pub const MAX_ROWS: usize = 12;

/// Most rows per pass of the AVX2 kernel.
const AVX2_ROWS: usize = 6;

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
/// When the slices are shorter than the sizes say, `rows`/`columns` are out of range, or the
/// CPU does not support `isa`.
pub unsafe fn run(tile: &Tile<'_>, isa: Isa) {
    assert!((1..=MAX_ROWS).contains(&tile.rows), "tile rows");
    assert!((1..=PANEL).contains(&tile.columns), "tile columns");
    assert!(tile.x.len() >= tile.rows * tile.inputs, "tile input");
    assert!(tile.panel.len() >= tile.inputs * PANEL, "tile panel");
    assert!(
        tile.bias.is_none_or(|b| b.len() >= tile.columns),
        "tile bias"
    );
    assert_eq!(tile.panel.as_ptr() as usize % 64, 0, "panel alignment");
    isa.assert_supported();
    macro_rules! dispatch {
        ($kernel:ident, $tile:expr, $($rows:literal)*) => {
            match $tile.rows {
                $($rows => $kernel::<$rows>($tile),)*
                _ => unreachable!("rows checked above"),
            }
        };
    }
    match isa {
        // SAFETY: the CPU supports AVX-512F (asserted above); the operand sizes were checked
        // above and the caller vouches for `out`.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { dispatch!(avx512, tile, 1 2 3 4 5 6 7 8 9 10 11 12) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            let passes = tile.rows.div_ceil(AVX2_ROWS);
            for half in 0..tile.columns.div_ceil(PANEL / 2) {
                let mut first = 0;
                for pass in 0..passes {
                    // Balanced passes: the first `rows % passes` get one row more.
                    let rows = tile.rows / passes + usize::from(pass < tile.rows % passes);
                    let part = Tile {
                        x: &tile.x[first * tile.inputs..],
                        rows,
                        // The first pass fetches the next panel for all of them.
                        next_panel: tile.next_panel.filter(|_| half == 0 && pass == 0),
                        out: tile.out.wrapping_add(first * tile.out_stride),
                        ..*tile
                    };
                    // SAFETY: the CPU supports AVX2 and FMA (asserted above); the part is
                    // rows `first..first + rows` of the tile, inside the caller's writable
                    // range, and `half` is one of the panel's halves with real columns.
                    unsafe {
                        match rows {
                            6 => avx2::<6>(&part, half),
                            5 => avx2::<5>(&part, half),
                            4 => avx2::<4>(&part, half),
                            3 => avx2::<3>(&part, half),
                            2 => avx2::<2>(&part, half),
                            _ => avx2::<1>(&part, half),
                        }
                    }
                    first += rows;
                }
            }
        }
        // SAFETY: as above, minus the CPU feature the portable kernel does not need.
        _ => unsafe { dispatch!(portable, tile, 1 2 3 4 5 6 7 8 9 10 11 12) },
    }
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

/// The AVX2 kernel for `R` rows (at most [`AVX2_ROWS`]) and columns `16 · half..` of the
/// panel: per `k`, two aligned loads of the half's weights, one broadcast per row, two FMAs
/// per row, summed in the same order as [`avx512`]; masked stores for a partial half.
///
/// # Safety
/// The CPU supports AVX2 and FMA, `tile` satisfies [`run`]'s contract and checks with
/// `rows = R`, and `16 · half < columns`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const R: usize>(tile: &Tile<'_>, half: usize) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_broadcast_ss, _mm256_cmpgt_epi32, _mm256_fmadd_ps, _mm256_load_ps,
        _mm256_maskload_ps, _mm256_maskstore_ps, _mm256_set1_epi32, _mm256_setr_epi32,
        _mm256_setzero_ps, _mm_prefetch, _MM_HINT_T1,
    };
    let (x, k) = (tile.x.as_ptr(), tile.inputs);
    // SAFETY: `16 · half < columns ≤ PANEL`, inside every `k`'s stretch of the panel.
    let w = unsafe { tile.panel.as_ptr().add(half * 16) };
    let next = tile.next_panel.unwrap_or_default();
    let mut total = [[_mm256_setzero_ps(); 2]; R];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for kk in block..k.min(block + K_BLOCK) {
            // SAFETY: `kk < k`, the panel holds `k * PANEL` floats aligned to 64 bytes
            // (checked by `run`), so both 8-float loads at `kk * PANEL + 16 · half` are in
            // bounds and 32-byte aligned; `x` holds `R * k` floats, so `r * k + kk` is in
            // bounds; prefetches stay inside `next`.
            unsafe {
                if kk * PANEL + 16 < next.len() {
                    let line = next.as_ptr().add(kk * PANEL);
                    _mm_prefetch::<_MM_HINT_T1>(line.cast());
                    _mm_prefetch::<_MM_HINT_T1>(line.add(16).cast());
                } else if kk * PANEL < next.len() {
                    _mm_prefetch::<_MM_HINT_T1>(next.as_ptr().add(kk * PANEL).cast());
                }
                let w0 = _mm256_load_ps(w.add(kk * PANEL));
                let w1 = _mm256_load_ps(w.add(kk * PANEL + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm256_broadcast_ss(&*x.add(r * k + kk));
                    acc[0] = _mm256_fmadd_ps(xv, w0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(xv, w1, acc[1]);
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            total[0] = _mm256_add_ps(total[0], acc[0]);
            total[1] = _mm256_add_ps(total[1], acc[1]);
        }
    }
    let columns = (tile.columns - half * 16).min(16);
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(columns as i32), lanes);
    let mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(columns as i32 - 8), lanes);
    for (r, acc) in total.iter().enumerate() {
        // SAFETY: the masks cover exactly the half's `columns` outputs, which `run`'s
        // contract makes writable at `out + r * out_stride + 16 · half`; the bias slice holds
        // the panel's `columns` floats and masked lanes are not read.
        unsafe {
            let (mut lo, mut hi) = (acc[0], acc[1]);
            if let Some(bias) = tile.bias {
                let bias = bias.as_ptr().add(half * 16);
                lo = _mm256_add_ps(lo, _mm256_maskload_ps(bias, mask0));
                // The second half may lie beyond the bias: no lane of it is read then.
                hi = _mm256_add_ps(hi, _mm256_maskload_ps(bias.wrapping_add(8), mask1));
            }
            let out = tile.out.add(r * tile.out_stride + half * 16);
            _mm256_maskstore_ps(out, mask0, lo);
            _mm256_maskstore_ps(out.wrapping_add(8), mask1, hi);
        }
    }
}

/// The first `lanes` (≤ 16) lanes of a 16-lane mask.
#[cfg(target_arch = "x86_64")]
fn lane_mask(lanes: usize) -> u16 {
    ((1u32 << lanes) - 1) as u16
}

/// The same tile in plain Rust (the compiler vectorises the column loop for the baseline
/// target), for any CPU.
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
    use crate::engine::cpu::panel::PanelBuffer;

    /// Every row count and partial panels (one half, both halves, a partial second half) in
    /// every version the CPU supports, against a float64 reference, with nothing written
    /// outside the tile.
    #[test]
    fn every_tile_shape_of_every_supported_isa_matches_a_float64_reference() {
        for isa in Isa::supported() {
            for (k, columns) in [(1, 32), (37, 29), (200, 16), (130, 7), (64, 20)] {
                let x: Vec<f32> = (0..MAX_ROWS * k)
                    .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
                    .collect();
                let w: Vec<f32> = (0..columns * k)
                    .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
                    .collect();
                let bias: Vec<f32> = (0..columns).map(|i| i as f32 / 10.0).collect();
                let stride = columns + 1;
                PanelBuffer::with(k, |buffer| {
                    buffer.load(&w, 0, columns, isa);
                    for rows in [1, 5, 6, 7, 11, MAX_ROWS] {
                        let mut out = vec![f32::NAN; (MAX_ROWS + 1) * stride];
                        let tile = Tile {
                            x: &x,
                            rows,
                            inputs: k,
                            panel: buffer.panel(),
                            next_panel: Some(&w),
                            bias: Some(&bias),
                            columns,
                            out: out.as_mut_ptr(),
                            out_stride: stride,
                        };
                        // SAFETY: `out` holds MAX_ROWS + 1 rows of `stride` floats.
                        unsafe { run(&tile, isa) };
                        for r in 0..=MAX_ROWS {
                            for c in 0..stride {
                                let got = out[r * stride + c];
                                if r >= rows || c >= columns {
                                    assert!(got.is_nan(), "{isa}: written outside");
                                    continue;
                                }
                                let want = (0..k)
                                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[c * k + i]))
                                    .sum::<f64>()
                                    + f64::from(bias[c]);
                                assert!(
                                    (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                    "{isa}: k {k}, {rows} rows × {columns}, ({r}, {c}): {got} vs {want}"
                                );
                            }
                        }
                    }
                });
            }
        }
    }
}
