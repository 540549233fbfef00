//! The kernel for products of at most [`MAX_ROWS`] rows (decode steps of small batches): dot
//! products along `k` over [`OUTPUTS`] rows of `W` at a time, read where libtorch keeps them.
//!
//! Such products are bound by reading the weights (a batch-1 step reads all 538 MB of
//! SmolLM2's for 270 MFLOP), so the kernel is shaped for one linear pass: per 16 `k`s, one
//! vector of each weight row and each input row and `rows × OUTPUTS` FMAs into lane-wise
//! accumulators, while the next rows are prefetched; each accumulator's lanes are summed once
//! at the end, four outputs per shuffle tree. (For many rows this shape loses to
//! [`super::broadcast_weights`]: it loads a vector of `x` per row and `k` instead of reusing one
//! broadcast weight across sixteen rows — measured: the LM head at batch 16 in 4.4 ms vs 3.2–3.5.)

/// Most input rows: the products the matmul keeps on one thread.
pub const MAX_ROWS: usize = 3;

/// Outputs (rows of `W`) per tile.
pub const OUTPUTS: usize = 4;

/// One tile's operands. `out` is a raw pointer: a tile writes a few columns of every row of a
/// row-major output that other tiles write too.
pub struct Tile<'a> {
    /// `rows × inputs` input values, row-major.
    pub x: &'a [f32],
    /// Input rows in this tile, `1..=MAX_ROWS`.
    pub rows: usize,
    /// `K`.
    pub inputs: usize,
    /// `outputs × inputs` weights: the tile's rows of `W`.
    pub weights: &'a [f32],
    /// Weights to fetch into L2 while this tile computes (the rows of `W` the next tile
    /// needs), spread over its `k` loop; empty for none.
    pub prefetch: &'a [f32],
    /// Outputs in this tile, `1..=OUTPUTS`.
    pub outputs: usize,
    /// The bias of the tile's outputs, if any.
    pub bias: Option<&'a [f32]>,
    /// Where output `(r, o)` goes: `out + r * out_stride + o`.
    pub out: *mut f32,
    /// Floats between consecutive output rows.
    pub out_stride: usize,
}

/// Computes `out[r][o] = Σ_k x[r][k] · weights[o][k] (+ bias[o])` for every row `r < rows` and
/// output `o < outputs`.
///
/// # Safety
/// `out + r * out_stride + o` must be valid for writes, and written by no one else during the
/// call, for every `r < rows` and `o < outputs`.
///
/// # Panics
/// When the slices are shorter than the sizes say, or `rows`/`outputs` are out of range.
pub unsafe fn run(tile: &Tile<'_>) {
    assert!((1..=MAX_ROWS).contains(&tile.rows), "tile rows");
    assert!((1..=OUTPUTS).contains(&tile.outputs), "tile outputs");
    assert!(tile.x.len() >= tile.rows * tile.inputs, "tile input");
    assert!(
        tile.weights.len() >= tile.outputs * tile.inputs,
        "tile weights"
    );
    assert!(
        tile.bias.is_none_or(|b| b.len() >= tile.outputs),
        "tile bias"
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        macro_rules! dispatch {
            ($outputs:literal: $($rows:literal)*) => {
                match tile.rows {
                    // SAFETY: the CPU has AVX-512F (just detected); sizes checked above and
                    // the caller vouches for `out`.
                    $($rows => unsafe { avx512::<$rows, $outputs>(tile) },)*
                    _ => unreachable!("rows checked above"),
                }
            };
        }
        match tile.outputs {
            4 => dispatch!(4: 1 2 3),
            3 => dispatch!(3: 1 2 3),
            2 => dispatch!(2: 1 2 3),
            _ => dispatch!(1: 1 2 3),
        }
        return;
    }
    // SAFETY: as above, minus the CPU feature the portable kernel does not need.
    unsafe { portable(tile) };
}

/// The AVX-512F kernel for `R` rows and `C` outputs: full 16-float loads, a masked one at the
/// `k` tail, lane-wise accumulators, then [`sum4`] per row and four outputs.
///
/// # Safety
/// The CPU supports AVX-512F and `tile` satisfies [`run`]'s contract and checks with
/// `rows = R`, `outputs = C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512<const R: usize, const C: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_maskz_loadu_ps, _mm512_setzero_ps, _mm_add_ps,
        _mm_loadu_ps, _mm_prefetch, _mm_storeu_ps, _MM_HINT_T1,
    };
    let (k, x, w) = (tile.inputs, tile.x.as_ptr(), tile.weights.as_ptr());
    let prefetch = tile.prefetch;
    let mut next_line = 0;
    let tail = k % 16;
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    // SAFETY (all loads below): weight row `o < C` has `k` floats from `o * k` and input row
    // `r < R` has `k` from `r * k` (checked by `run`); full loads end by `k - tail`, the
    // masked ones read `tail` floats from there.
    let mut kk = 0;
    while kk + 16 <= k {
        // `C` cache lines of the prefetch block per step: all of it for a block of `C` rows.
        for _ in 0..C {
            if next_line < prefetch.len() {
                // SAFETY: `next_line` is inside `prefetch`.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(prefetch.as_ptr().add(next_line).cast()) };
                next_line += 16;
            }
        }
        let mut wv = [_mm512_setzero_ps(); C];
        for (o, wv) in wv.iter_mut().enumerate() {
            *wv = unsafe { _mm512_loadu_ps(w.add(o * k + kk)) };
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let xv = unsafe { _mm512_loadu_ps(x.add(r * k + kk)) };
            for (acc, &wv) in acc.iter_mut().zip(&wv) {
                *acc = _mm512_fmadd_ps(xv, wv, *acc);
            }
        }
        kk += 16;
    }
    if tail > 0 {
        let mask = ((1u32 << tail) - 1) as u16;
        let mut wv = [_mm512_setzero_ps(); C];
        for (o, wv) in wv.iter_mut().enumerate() {
            *wv = unsafe { _mm512_maskz_loadu_ps(mask, w.add(o * k + kk)) };
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let xv = unsafe { _mm512_maskz_loadu_ps(mask, x.add(r * k + kk)) };
            for (acc, &wv) in acc.iter_mut().zip(&wv) {
                *acc = _mm512_fmadd_ps(xv, wv, *acc);
            }
        }
    }
    let mut bias = [0.0f32; 4];
    if let Some(b) = tile.bias {
        bias[..C].copy_from_slice(&b[..C]);
    }
    // SAFETY: `bias` and `sums` are four floats on the stack.
    let bias = unsafe { _mm_loadu_ps(bias.as_ptr()) };
    for (r, acc) in acc.iter().enumerate() {
        let mut four = [_mm512_setzero_ps(); 4];
        four[..C].copy_from_slice(acc);
        let mut sums = [0.0f32; 4];
        unsafe { _mm_storeu_ps(sums.as_mut_ptr(), _mm_add_ps(sum4(four), bias)) };
        for (o, &sum) in sums[..C].iter().enumerate() {
            // SAFETY: `r < R`, `o < C`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + o) = sum };
        }
    }
}

/// The lane sums of four 16-lane accumulators, as the four lanes of one 128-bit vector:
/// pairs interleaved and added, then pairs of pairs, then the four 128-bit quarters.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum4(a: [std::arch::x86_64::__m512; 4]) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_castpd_ps, _mm256_castps256_ps128, _mm256_extractf128_ps,
        _mm512_add_ps, _mm512_castpd_ps, _mm512_castps512_ps256, _mm512_castps_pd,
        _mm512_extractf64x4_pd, _mm512_unpackhi_pd, _mm512_unpackhi_ps, _mm512_unpacklo_pd,
        _mm512_unpacklo_ps, _mm_add_ps,
    };
    // Per 128-bit quarter: [a0₀+a0₂, a1₀+a1₂, a0₁+a0₃, a1₁+a1₃] and the same for a2, a3.
    let s01 = _mm512_add_ps(
        _mm512_unpacklo_ps(a[0], a[1]),
        _mm512_unpackhi_ps(a[0], a[1]),
    );
    let s23 = _mm512_add_ps(
        _mm512_unpacklo_ps(a[2], a[3]),
        _mm512_unpackhi_ps(a[2], a[3]),
    );
    // Per quarter: [a0, a1, a2, a3] summed over the quarter's four lanes.
    let (s01, s23) = (_mm512_castps_pd(s01), _mm512_castps_pd(s23));
    let s = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(s01, s23)),
        _mm512_castpd_ps(_mm512_unpackhi_pd(s01, s23)),
    );
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
    let half = _mm256_add_ps(_mm512_castps512_ps256(s), high);
    _mm_add_ps(
        _mm256_castps256_ps128(half),
        _mm256_extractf128_ps::<1>(half),
    )
}

/// The same tile in plain Rust, for CPUs without AVX-512F.
///
/// # Safety
/// `tile` satisfies [`run`]'s contract and checks.
unsafe fn portable(tile: &Tile<'_>) {
    let k = tile.inputs;
    for r in 0..tile.rows {
        let x = &tile.x[r * k..][..k];
        for o in 0..tile.outputs {
            let w = &tile.weights[o * k..][..k];
            let dot: f32 = x.iter().zip(w).map(|(a, b)| a * b).sum();
            let value = dot + tile.bias.map_or(0.0, |b| b[o]);
            // SAFETY: `r < rows`, `o < outputs`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + o) = value };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_shape_matches_a_float64_reference_and_the_portable_kernel() {
        for k in [1, 15, 16, 37, 576] {
            let x: Vec<f32> = (0..MAX_ROWS * k)
                .map(|i| ((i * 7) % 13) as f32 / 6.5 - 1.0)
                .collect();
            let w: Vec<f32> = (0..OUTPUTS * k)
                .map(|i| ((i * 5) % 11) as f32 / 5.5 - 1.0)
                .collect();
            let bias: Vec<f32> = (0..OUTPUTS).map(|i| i as f32 / 7.0 - 0.2).collect();
            for rows in 1..=MAX_ROWS {
                for outputs in 1..=OUTPUTS {
                    for with_bias in [false, true] {
                        let mut got = [[f32::NAN; OUTPUTS + 1]; MAX_ROWS];
                        let mut portable_got = got;
                        for (out, portable_only) in [(&mut got, false), (&mut portable_got, true)] {
                            let tile = Tile {
                                x: &x,
                                rows,
                                inputs: k,
                                weights: &w,
                                prefetch: &w,
                                outputs,
                                bias: with_bias.then_some(&bias[..]),
                                out: out.as_mut_ptr().cast(),
                                out_stride: OUTPUTS + 1,
                            };
                            // SAFETY: `out` holds MAX_ROWS rows of OUTPUTS + 1 floats.
                            unsafe {
                                if portable_only {
                                    portable(&tile);
                                } else {
                                    run(&tile);
                                }
                            }
                        }
                        for r in 0..MAX_ROWS {
                            for o in 0..=OUTPUTS {
                                let (got, portable) = (got[r][o], portable_got[r][o]);
                                if r >= rows || o >= outputs {
                                    assert!(got.is_nan() && portable.is_nan(), "written outside");
                                    continue;
                                }
                                let want = (0..k)
                                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[o * k + i]))
                                    .sum::<f64>()
                                    + if with_bias { f64::from(bias[o]) } else { 0.0 };
                                for (kernel, value) in [("avx", got), ("portable", portable)] {
                                    assert!(
                                        (f64::from(value) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                        "{kernel}: k {k}, {rows}×{outputs}, ({r}, {o}): {value} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
