//! The kernel for products of at most [`MAX_ROWS`] rows (decode steps of small batches): dot
//! products along `k` over [`OUTPUTS`] rows of `W` at a time, read where libtorch keeps them.
//!
//! Such products are bound by reading the weights (a batch-1 step reads every weight once for
//! two FLOPs each), so the kernel is shaped for one linear pass: per vector of `k`s, one
//! vector of each weight row and each input row and `rows × OUTPUTS` FMAs into lane-wise
//! accumulators, while the next rows are prefetched; each accumulator's lanes are summed once
//! at the end, four outputs per shuffle tree. For more rows this shape loses to
//! [`super::broadcast_weights`], which reuses one broadcast weight across sixteen rows instead
//! of loading a vector of `x` per row and `k`.

use super::isa::Isa;

/// Most input rows of a product that runs on this kernel.
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
/// When the slices are shorter than the sizes say, `rows`/`outputs` are out of range, or the
/// CPU does not support `isa`.
pub unsafe fn run(tile: &Tile<'_>, isa: Isa) {
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
    isa.assert_supported();
    macro_rules! dispatch {
        ($kernel:ident, $outputs:literal: $($rows:literal)*) => {
            match tile.rows {
                // SAFETY: the CPU supports `isa` (asserted above); sizes checked above and the
                // caller vouches for `out`.
                $($rows => unsafe { $kernel::<$rows, $outputs>(tile) },)*
                _ => unreachable!("rows checked above"),
            }
        };
    }
    macro_rules! by_outputs {
        ($kernel:ident) => {
            match tile.outputs {
                4 => dispatch!($kernel, 4: 1 2 3),
                3 => dispatch!($kernel, 3: 1 2 3),
                2 => dispatch!($kernel, 2: 1 2 3),
                _ => dispatch!($kernel, 1: 1 2 3),
            }
        };
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => by_outputs!(avx512),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => by_outputs!(avx2),
        // SAFETY: as above, minus the CPU feature the portable kernel does not need.
        _ => unsafe { portable(tile) },
    }
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

/// The AVX2 kernel for `R` rows and `C` outputs: as [`avx512`] with 8-float vectors and a
/// masked load at the `k` tail, then [`sum4_avx2`] per row and four outputs.
///
/// # Safety
/// The CPU supports AVX2 and FMA and `tile` satisfies [`run`]'s contract and checks with
/// `rows = R`, `outputs = C`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const R: usize, const C: usize>(tile: &Tile<'_>) {
    use std::arch::x86_64::{
        _mm256_cmpgt_epi32, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps,
        _mm256_set1_epi32, _mm256_setr_epi32, _mm256_setzero_ps, _mm_add_ps, _mm_loadu_ps,
        _mm_prefetch, _mm_storeu_ps, _MM_HINT_T1,
    };
    let (k, x, w) = (tile.inputs, tile.x.as_ptr(), tile.weights.as_ptr());
    let prefetch = tile.prefetch;
    let mut next_line = 0;
    let tail = k % 8;
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    // SAFETY (all loads below): weight row `o < C` has `k` floats from `o * k` and input row
    // `r < R` has `k` from `r * k` (checked by `run`); full loads end by `k - tail`, the
    // masked ones read `tail` floats from there.
    let mut kk = 0;
    while kk + 8 <= k {
        // `C` cache lines of the prefetch block per 16 `k`s: all of it for a block of `C` rows.
        if kk % 16 == 0 {
            for _ in 0..C {
                if next_line < prefetch.len() {
                    // SAFETY: `next_line` is inside `prefetch`.
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T1>(prefetch.as_ptr().add(next_line).cast());
                    }
                    next_line += 16;
                }
            }
        }
        let mut wv = [_mm256_setzero_ps(); C];
        for (o, wv) in wv.iter_mut().enumerate() {
            *wv = unsafe { _mm256_loadu_ps(w.add(o * k + kk)) };
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let xv = unsafe { _mm256_loadu_ps(x.add(r * k + kk)) };
            for (acc, &wv) in acc.iter_mut().zip(&wv) {
                *acc = _mm256_fmadd_ps(xv, wv, *acc);
            }
        }
        kk += 8;
    }
    if tail > 0 {
        let mask = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(tail as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        let mut wv = [_mm256_setzero_ps(); C];
        for (o, wv) in wv.iter_mut().enumerate() {
            *wv = unsafe { _mm256_maskload_ps(w.add(o * k + kk), mask) };
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let xv = unsafe { _mm256_maskload_ps(x.add(r * k + kk), mask) };
            for (acc, &wv) in acc.iter_mut().zip(&wv) {
                *acc = _mm256_fmadd_ps(xv, wv, *acc);
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
        let mut four = [_mm256_setzero_ps(); 4];
        four[..C].copy_from_slice(acc);
        let mut sums = [0.0f32; 4];
        unsafe { _mm_storeu_ps(sums.as_mut_ptr(), _mm_add_ps(sum4_avx2(four), bias)) };
        for (o, &sum) in sums[..C].iter().enumerate() {
            // SAFETY: `r < R`, `o < C`: writable per `run`'s contract.
            unsafe { *tile.out.add(r * tile.out_stride + o) = sum };
        }
    }
}

/// The lane sums of four 8-lane accumulators, as the four lanes of one 128-bit vector:
/// horizontal adds of pairs, then of pairs of pairs, then the two 128-bit halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum4_avx2(a: [std::arch::x86_64::__m256; 4]) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::{
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_hadd_ps, _mm_add_ps,
    };
    // Per 128-bit half: [a0, a1, a2, a3] summed over the half's four lanes.
    let s = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
}

/// The same tile in plain Rust, for any CPU.
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
    fn every_tile_shape_of_every_supported_isa_matches_a_float64_reference() {
        for isa in Isa::supported() {
            for k in [1, 7, 8, 15, 16, 37, 576] {
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
                            {
                                let out = &mut got;
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
                                unsafe { run(&tile, isa) };
                            }
                            for r in 0..MAX_ROWS {
                                for o in 0..=OUTPUTS {
                                    let got = got[r][o];
                                    if r >= rows || o >= outputs {
                                        assert!(got.is_nan(), "{isa}: written outside");
                                        continue;
                                    }
                                    let want = (0..k)
                                        .map(|i| f64::from(x[r * k + i]) * f64::from(w[o * k + i]))
                                        .sum::<f64>()
                                        + if with_bias { f64::from(bias[o]) } else { 0.0 };
                                    assert!(
                                    (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                    "{isa}: k {k}, {rows}×{outputs}, ({r}, {o}): {got} vs {want}"
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
