//! The microkernel for decode steps of a batch: a tile of up to [`GROUP`] (16) input rows
//! times [`outputs_per_tile`] rows of `W`, read where libtorch keeps them, each weight
//! broadcast.
//!
//! Per `k` the tile loads one vector of its sixteen rows' inputs (from [`xᵀ`]) and broadcasts
//! each of its outputs' weights `W[n][k]`: one FMA per output into its own accumulator. The
//! weights of a tile are a contiguous run of `W`'s rows, streamed front to back while the next
//! run is prefetched; nothing is copied or packed. A run's tiles of rows share that prefetch,
//! each spreading its part over its `k` loop, so a batch of 64 rows draws the weights from
//! memory evenly over its tiles rather than all during the first.
//!
//! The AVX-512 tile is 16 outputs wide (`AVX512_OUTPUTS`) rather than 24: decode products
//! of a small batch are bound by reading the weights, and a core streams 16 weight rows at a
//! time faster than 24 (see docs/results.md, "Generation per kernel version, Intel Xeon").
//!
//! A 16-row tile loads a broadcast weight per FMA, so at 32 and more rows, where the step is
//! bound by arithmetic rather than by reading the weights, AVX-512 runs pair tiles
//! ([`run_pair`]): 32 rows as two vectors, each broadcast weight feeding two FMAs, the 16
//! outputs in two passes of 8 (16 accumulators). Both sum every row and output in the same
//! order, so which one runs changes speed only. Prefills, where a block of ~200 rows shares
//! each weight, go to [`super::broadcast_inputs`] instead.
//!
//! With AVX2's sixteen 8-float registers, a tile's sixteen rows are two vectors and its
//! outputs run `AVX2_OUTPUTS` at a time: 12 accumulators, the two input vectors and the
//! broadcast weight.
//!
//! [`xᵀ`]: super::transpose::TransposedRows

use super::isa::Isa;
#[cfg(target_arch = "x86_64")]
use super::prefetch::{share_of_lines, PacedPrefetch};
use super::transpose::GROUP;
use super::K_BLOCK;

/// Outputs per full tile of the AVX2 and portable kernels (four AVX2 passes).
const OUTPUTS: usize = 24;

/// Outputs per full tile of the AVX-512 kernel: 16 of its 32 registers accumulate, and the
/// next run's 16 rows are prefetched by one tile at exactly one cache line per `k`.
const AVX512_OUTPUTS: usize = 16;

/// Outputs per pass of the AVX2 kernel over a tile's rows.
const AVX2_OUTPUTS: usize = 6;

/// One tile's operands. `out` is a raw pointer because tiles of the same rows but different
/// outputs are written by different threads into one row-major output.
pub struct Tile<'a> {
    /// `xᵀ` from the tile's first row on: float `k * x_stride + j` is input `k` of the tile's
    /// row `j` (zero beyond `rows`), 64-byte aligned.
    pub x_t: &'a [f32],
    /// Floats between consecutive `k`s of `x_t`, a multiple of 16.
    pub x_stride: usize,
    /// Input rows in this tile, `1..=GROUP`.
    pub rows: usize,
    /// `K`.
    pub inputs: usize,
    /// `outputs × inputs` weights: the tile's rows of `W`.
    pub weights: &'a [f32],
    /// Outputs in this tile, `1..=outputs_per_tile(isa)`; on AVX-512 fewer than that (the end
    /// of a range) run one at a time.
    pub outputs: usize,
    /// Weights to fetch into L2 while this tile computes (the rows of `W` the next tiles
    /// need), spread over its `k` loop; empty for none.
    pub prefetch: &'a [f32],
    /// The bias of the tile's outputs, if any.
    pub bias: Option<&'a [f32]>,
    /// Where output `(r, o)` goes: `out + r * out_stride + o`.
    pub out: *mut f32,
    /// Floats between consecutive output rows.
    pub out_stride: usize,
}

/// Calls `kernel::<C>(part)` for `C` the part's output count, one of the listed counts or 1.
#[cfg(target_arch = "x86_64")]
macro_rules! by_outputs {
    ($kernel:ident, $part:expr, $($count:literal)*) => {
        match $part.outputs {
            $($count => $kernel::<$count>($part),)*
            _ => $kernel::<1>($part),
        }
    };
}

/// Outputs per full tile of `isa`'s kernel: the width of the weight runs a decode product is
/// cut into.
pub fn outputs_per_tile(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => AVX512_OUTPUTS,
        Isa::Avx2 | Isa::Portable => OUTPUTS,
    }
}

/// Computes `out[r][o] = Σ_k x[r][k] · weights[o][k] (+ bias[o])` for every row `r < rows` and
/// output `o < outputs`: sums over blocks of [`K_BLOCK`] `k`s in order, then of the blocks'
/// sums, then adds the bias (as `addmm` does).
///
/// # Safety
/// `out + r * out_stride + o` must be valid for writes, and written by no one else during the
/// call, for every `r < rows` and `o < outputs`.
///
/// # Panics
/// When the slices are shorter than the sizes say, the counts are out of range, or the CPU
/// does not support `isa`.
pub unsafe fn run(tile: &Tile<'_>, isa: Isa) {
    tile.check(1..=GROUP, outputs_per_tile(isa));
    isa.assert_supported();
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if tile.outputs == AVX512_OUTPUTS => {
            // SAFETY: the CPU supports AVX-512F (asserted above); sizes checked above and the
            // caller vouches for `out`.
            unsafe { avx512::<AVX512_OUTPUTS>(tile) };
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // A short run of outputs: one at a time, each its own tile.
            for o in 0..tile.outputs {
                // SAFETY: as above, for one output of the tile.
                unsafe { avx512::<1>(&tile.outputs_from(o, 1, o == 0)) };
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            for part in tile.passes(AVX2_OUTPUTS) {
                // SAFETY: the CPU supports AVX2 and FMA (asserted above); the part's outputs
                // are columns of the caller's writable range.
                unsafe { by_outputs!(avx2, &part, 6 5 4 3 2) };
            }
        }
        // SAFETY: as above, minus the CPU feature the portable kernel does not need.
        _ => unsafe { portable(tile) },
    }
}

impl<'a> Tile<'a> {
    /// Panics unless the tile has `rows` rows and up to `max_outputs` outputs, and its slices,
    /// strides and alignment hold what the kernels read: `x_t` whole vectors of 16 rows (as
    /// many as its rows need) at every `k`.
    fn check(&self, rows: std::ops::RangeInclusive<usize>, max_outputs: usize) {
        assert!(rows.contains(&self.rows), "tile rows");
        assert!((1..=max_outputs).contains(&self.outputs), "tile outputs");
        assert_eq!(self.x_stride % GROUP, 0, "x stride");
        let lanes = self.rows.next_multiple_of(GROUP);
        assert!(
            self.inputs == 0 || self.x_t.len() >= (self.inputs - 1) * self.x_stride + lanes,
            "tile input"
        );
        assert!(
            self.weights.len() >= self.outputs * self.inputs,
            "tile weights"
        );
        assert!(
            self.bias.is_none_or(|b| b.len() >= self.outputs),
            "tile bias"
        );
        assert_eq!(self.x_t.as_ptr() as usize % 64, 0, "x alignment");
        assert!(
            i32::try_from(self.out_stride * GROUP).is_ok(),
            "output offsets fit the scatter's 32-bit indices"
        );
    }

    /// This tile's outputs in passes of up to `width`, in order, each fetching its share of
    /// the tile's prefetch.
    fn passes(&self, width: usize) -> impl Iterator<Item = Tile<'a>> + '_ {
        let passes = self.outputs.div_ceil(width);
        (0..passes).map(move |pass| {
            let first = pass * width;
            let mut part = self.outputs_from(first, width.min(self.outputs - first), false);
            part.prefetch = share_of_lines(self.prefetch, pass, passes);
            part
        })
    }

    /// The tile of outputs `first..first + count` of this one (the same rows), prefetching
    /// this tile's `prefetch` if `prefetch`, nothing otherwise.
    fn outputs_from(&self, first: usize, count: usize, prefetch: bool) -> Tile<'a> {
        Tile {
            weights: &self.weights[first * self.inputs..],
            outputs: count,
            bias: self.bias.map(|b| &b[first..]),
            // Column `first` of the caller's range: `out` stays valid for what the part writes.
            out: self.out.wrapping_add(first),
            prefetch: if prefetch { self.prefetch } else { &[] },
            ..*self
        }
    }
}

/// The AVX-512F kernel for `C` outputs.
///
/// # Safety
/// The CPU supports AVX-512F; `tile` satisfies [`run`]'s contract and checks, with
/// `outputs == C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512<const C: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_fmadd_ps, _mm512_load_ps, _mm512_mask_i32scatter_ps, _mm512_set1_ps,
        _mm512_setzero_ps,
    };
    let (k, x, w) = (tile.inputs, tile.x_t.as_ptr(), tile.weights.as_ptr());
    let mut prefetch = PacedPrefetch::new(tile.prefetch, k);
    let mut total = [_mm512_setzero_ps(); C];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [_mm512_setzero_ps(); C];
        for kk in block..k.min(block + K_BLOCK) {
            prefetch.step(kk);
            // SAFETY (loads): `kk < k`; `x_t` holds an aligned vector at `kk * x_stride`
            // (checked by `run`; `x_stride` is a multiple of 16 and `x_t` 64-byte aligned),
            // and weight row `c < C` holds `k` floats from `c * k`.
            unsafe {
                let xv = _mm512_load_ps(x.add(kk * tile.x_stride));
                for (c, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(_mm512_set1_ps(*w.add(c * k + kk)), xv, *acc);
                }
            }
        }
        for (total, &acc) in total.iter_mut().zip(&acc) {
            *total = _mm512_add_ps(*total, acc);
        }
    }
    let row_offsets = row_offsets(tile.out_stride);
    let mask = ((1u32 << tile.rows) - 1) as u16;
    for (c, &sums) in total.iter().enumerate() {
        let bias = _mm512_set1_ps(tile.bias.map_or(0.0, |b| b[c]));
        // SAFETY: lane `i` writes `out + i * out_stride + c` for rows `i < rows` only (the
        // mask), writable per `run`'s contract; the offsets fit `i32` (checked by `run`).
        unsafe {
            _mm512_mask_i32scatter_ps::<4>(
                tile.out.add(c).cast(),
                mask,
                row_offsets,
                _mm512_add_ps(sums, bias),
            );
        }
    }
}

/// The offsets of sixteen consecutive output rows, `out_stride` floats apart: where a tile's
/// scatter writes one output's sums (the caller checked they fit `i32`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn row_offsets(out_stride: usize) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::{_mm512_loadu_si512, _mm512_mullo_epi32, _mm512_set1_epi32};
    let lanes: [i32; 16] = std::array::from_fn(|lane| lane as i32);
    // SAFETY: sixteen `i32`s on the stack; unaligned load.
    let lanes = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
    _mm512_mullo_epi32(lanes, _mm512_set1_epi32(out_stride as i32))
}

/// Rows of a pair tile: two vectors of input rows share each broadcast weight, so a `k` step
/// loads two inputs and `C` weights for `2 C` FMAs instead of one and `C` for `C`.
pub const PAIR_ROWS: usize = 2 * GROUP;

/// Outputs per pass of a pair tile: 16 accumulators, as the one-vector tile's 16 outputs.
const PAIR_OUTPUTS: usize = 8;

/// [`run`] for a tile of `GROUP + 1..=PAIR_ROWS` rows on AVX-512: its outputs in passes of
/// `PAIR_OUTPUTS` (8), each pass over both vectors of rows; the same sums as [`run`] on the two
/// halves (the same order per row and output).
///
/// # Safety
/// As [`run`]'s, for the tile's rows.
///
/// # Panics
/// As [`run`]'s, and when `x_t` holds fewer than `PAIR_ROWS` floats at its last `k` or the CPU
/// does not support AVX-512.
#[cfg(target_arch = "x86_64")]
pub unsafe fn run_pair(tile: &Tile<'_>) {
    tile.check(GROUP + 1..=PAIR_ROWS, AVX512_OUTPUTS);
    Isa::Avx512.assert_supported();
    for part in tile.passes(PAIR_OUTPUTS) {
        // SAFETY: the CPU supports AVX-512F (asserted above); the part's outputs are columns
        // of the caller's writable range.
        unsafe { by_outputs!(avx512_pair, &part, 8 7 6 5 4 3 2) };
    }
}

/// The AVX-512F pair kernel for `C` outputs: rows `0..16` and `16..rows` as two vectors.
///
/// # Safety
/// The CPU supports AVX-512F; `tile` satisfies [`run_pair`]'s contract and checks, with
/// `outputs == C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_pair<const C: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_fmadd_ps, _mm512_load_ps, _mm512_mask_i32scatter_ps, _mm512_set1_ps,
        _mm512_setzero_ps,
    };
    let (k, x, w) = (tile.inputs, tile.x_t.as_ptr(), tile.weights.as_ptr());
    let mut prefetch = PacedPrefetch::new(tile.prefetch, k);
    let mut total = [[_mm512_setzero_ps(); 2]; C];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [[_mm512_setzero_ps(); 2]; C];
        for kk in block..k.min(block + K_BLOCK) {
            prefetch.step(kk);
            // SAFETY (loads): `kk < k`; `x_t` holds two aligned vectors at `kk * x_stride`
            // (checked by `run_pair`), and weight row `c < C` holds `k` floats from `c * k`.
            unsafe {
                let line = x.add(kk * tile.x_stride);
                let (x0, x1) = (_mm512_load_ps(line), _mm512_load_ps(line.add(GROUP)));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let wv = _mm512_set1_ps(*w.add(c * k + kk));
                    acc[0] = _mm512_fmadd_ps(wv, x0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(wv, x1, acc[1]);
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            total[0] = _mm512_add_ps(total[0], acc[0]);
            total[1] = _mm512_add_ps(total[1], acc[1]);
        }
    }
    let row_offsets = row_offsets(tile.out_stride);
    let masks = [u16::MAX, ((1u32 << (tile.rows - GROUP)) - 1) as u16];
    for (c, total) in total.iter().enumerate() {
        let bias = _mm512_set1_ps(tile.bias.map_or(0.0, |b| b[c]));
        for (half, (&sums, &mask)) in total.iter().zip(&masks).enumerate() {
            // SAFETY: lane `i` of half `h` writes `out + (16 h + i) * out_stride + c` for rows
            // `16 h + i < rows` only (the mask), writable per `run_pair`'s contract; the
            // offsets fit `i32` (checked by `run_pair`).
            unsafe {
                _mm512_mask_i32scatter_ps::<4>(
                    tile.out.add(half * GROUP * tile.out_stride + c).cast(),
                    mask,
                    row_offsets,
                    _mm512_add_ps(sums, bias),
                );
            }
        }
    }
}

/// The AVX2 kernel for `C` outputs (at most [`AVX2_OUTPUTS`]): the sixteen rows as two
/// vectors, the same summation order as [`avx512`], the sums written row by row.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `tile` satisfies [`run`]'s contract and checks, with
/// `outputs == C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const C: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_load_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    let (k, x, w) = (tile.inputs, tile.x_t.as_ptr(), tile.weights.as_ptr());
    let mut prefetch = PacedPrefetch::new(tile.prefetch, k);
    // Per output, the sums of the tile's rows `0..8` and `8..16`.
    let mut total = [[_mm256_setzero_ps(); 2]; C];
    for block in (0..k).step_by(K_BLOCK) {
        let mut acc = [[_mm256_setzero_ps(); 2]; C];
        for kk in block..k.min(block + K_BLOCK) {
            prefetch.step(kk);
            // SAFETY (loads): `kk < k`; `x_t` holds an aligned line of 16 floats at
            // `kk * x_stride` (checked by `run`), and weight row `c < C` holds `k` floats from
            // `c * k`.
            unsafe {
                let line = x.add(kk * tile.x_stride);
                let (x0, x1) = (_mm256_load_ps(line), _mm256_load_ps(line.add(8)));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let wv = _mm256_broadcast_ss(&*w.add(c * k + kk));
                    acc[0] = _mm256_fmadd_ps(wv, x0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(wv, x1, acc[1]);
                }
            }
        }
        for (total, acc) in total.iter_mut().zip(&acc) {
            total[0] = _mm256_add_ps(total[0], acc[0]);
            total[1] = _mm256_add_ps(total[1], acc[1]);
        }
    }
    let mut sums = [[0.0f32; GROUP]; C];
    for (sums, total) in sums.iter_mut().zip(&total) {
        // SAFETY: sixteen floats on the stack, written as two halves of eight.
        unsafe {
            _mm256_storeu_ps(sums.as_mut_ptr(), total[0]);
            _mm256_storeu_ps(sums.as_mut_ptr().add(8), total[1]);
        }
    }
    for r in 0..tile.rows {
        for (c, sums) in sums.iter().enumerate() {
            let value = sums[r] + tile.bias.map_or(0.0, |b| b[c]);
            // SAFETY: `r < rows`, `c < outputs`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + c) = value };
        }
    }
}

/// The same tile in plain Rust, for any CPU (same summation order).
///
/// # Safety
/// `tile` satisfies [`run`]'s contract and checks.
unsafe fn portable(tile: &Tile<'_>) {
    let k = tile.inputs;
    for r in 0..tile.rows {
        for o in 0..tile.outputs {
            let w = &tile.weights[o * k..][..k];
            let mut total = 0.0f32;
            for block in (0..k).step_by(K_BLOCK) {
                let mut acc = 0.0f32;
                for (kk, &w) in w
                    .iter()
                    .enumerate()
                    .take(k.min(block + K_BLOCK))
                    .skip(block)
                {
                    acc = w.mul_add(tile.x_t[kk * tile.x_stride + r], acc);
                }
                total += acc;
            }
            let value = total + tile.bias.map_or(0.0, |b| b[o]);
            // SAFETY: `r < rows`, `o < outputs`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + o) = value };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::transpose::TransposedRows;

    /// A pair tile writes what the two 16-row tiles of its rows write, bit for bit, for every
    /// row count it takes and every output count, and nothing outside its rows and outputs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_pair_tile_writes_what_two_single_tiles_write() {
        if !Isa::Avx512.is_supported() {
            eprintln!("skipped: this CPU does not run AVX-512");
            return;
        }
        let k = 300;
        let x: Vec<f32> = (0..PAIR_ROWS * k)
            .map(|i| ((i * 7) % 13) as f32 / 6.5 - 1.0)
            .collect();
        let w: Vec<f32> = (0..AVX512_OUTPUTS * k)
            .map(|i| ((i * 5) % 11) as f32 / 5.5 - 1.0)
            .collect();
        let bias: Vec<f32> = (0..AVX512_OUTPUTS).map(|i| i as f32 / 7.0 - 0.2).collect();
        let stride = AVX512_OUTPUTS + 1;
        for rows in [GROUP + 1, 20, PAIR_ROWS - 1, PAIR_ROWS] {
            for outputs in [1, 5, 8, 9, AVX512_OUTPUTS] {
                let mut pair = vec![f32::NAN; (PAIR_ROWS + 1) * stride];
                let mut singles = pair.clone();
                TransposedRows::with(&x[..rows * k], rows, k, Isa::Avx512, |x_t| {
                    let tile = |out: &mut Vec<f32>, first: usize, rows: usize| Tile {
                        x_t: &x_t.floats()[first..],
                        x_stride: x_t.stride(),
                        rows,
                        inputs: k,
                        weights: &w,
                        outputs,
                        prefetch: &w,
                        bias: Some(&bias),
                        out: out.as_mut_ptr().wrapping_add(first * stride),
                        out_stride: stride,
                    };
                    // SAFETY: both outputs hold `PAIR_ROWS + 1` rows of `stride` floats.
                    unsafe {
                        run_pair(&tile(&mut pair, 0, rows));
                        run(&tile(&mut singles, 0, GROUP), Isa::Avx512);
                        run(&tile(&mut singles, GROUP, rows - GROUP), Isa::Avx512);
                    }
                });
                for (i, (p, s)) in pair.iter().zip(&singles).enumerate() {
                    let (r, o) = (i / stride, i % stride);
                    if r >= rows || o >= outputs {
                        assert!(p.is_nan(), "{rows} × {outputs}: written outside at {i}");
                    } else {
                        assert_eq!(p.to_bits(), s.to_bits(), "{rows} × {outputs} at ({r}, {o})");
                    }
                }
            }
        }
    }

    /// Every row count and the full and one-at-a-time output paths, against a float64
    /// reference, with nothing written outside the tile.
    #[test]
    fn every_tile_shape_of_every_supported_isa_matches_a_float64_reference() {
        for isa in Isa::supported() {
            for k in [1, 15, 16, 37, 300] {
                let max_rows = GROUP;
                let x: Vec<f32> = (0..max_rows * k)
                    .map(|i| ((i * 7) % 13) as f32 / 6.5 - 1.0)
                    .collect();
                let max_outputs = outputs_per_tile(isa);
                let w: Vec<f32> = (0..max_outputs * k)
                    .map(|i| ((i * 5) % 11) as f32 / 5.5 - 1.0)
                    .collect();
                let bias: Vec<f32> = (0..max_outputs).map(|i| i as f32 / 7.0 - 0.2).collect();
                for rows in [1, 5, 15, 16] {
                    for outputs in [1, 3, 7, max_outputs - 1, max_outputs] {
                        let stride = max_outputs + 1;
                        let mut got = vec![f32::NAN; (max_rows + 1) * stride];
                        TransposedRows::with(&x[..rows * k], rows, k, isa, |x_t| {
                            {
                                let out = &mut got;
                                let tile = Tile {
                                    x_t: x_t.floats(),
                                    x_stride: x_t.stride(),
                                    rows,
                                    inputs: k,
                                    weights: &w,
                                    outputs,
                                    prefetch: &w,
                                    bias: Some(&bias),
                                    out: out.as_mut_ptr(),
                                    out_stride: stride,
                                };
                                // SAFETY: `out` holds `max_rows + 1` rows of `stride` floats.
                                unsafe { run(&tile, isa) };
                            }
                        });
                        for r in 0..=max_rows {
                            for o in 0..stride {
                                let got = got[r * stride + o];
                                if r >= rows || o >= outputs {
                                    assert!(got.is_nan(), "{isa}: written outside");
                                    continue;
                                }
                                let want = (0..k)
                                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[o * k + i]))
                                    .sum::<f64>()
                                    + f64::from(bias[o]);
                                assert!(
                                (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                "{isa}: k {k}, {rows} rows × {outputs}, ({r}, {o}): {got} vs {want}"
                            );
                            }
                        }
                    }
                }
            }
        }
    }
}
