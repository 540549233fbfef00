//! [`TransposedRows`]: the input rows of a product as columns (`xᵀ`, `K × rows`), the layout in
//! which the [`super::broadcast_weights`] kernel loads sixteen rows' values of one `k` as a vector.
//!
//! The input is small next to the weights (a decode step's `x` is a few rows of `K` floats
//! against `N × K` weights), so transposing it once per product costs little, and lets the
//! kernel read the weights where libtorch keeps them.

use std::cell::RefCell;

use super::isa::Isa;

/// Rows per group: one 16-lane AVX-512 vector, two AVX2 ones.
pub const GROUP: usize = 16;

/// Sixteen floats on a 64-byte boundary, so the kernels' loads are aligned cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line(pub [f32; 16]);

/// A thread's buffer for `xᵀ`: `K` lines of `stride` floats, column `j` holding input row `j`
/// (zero for the padding rows up to a multiple of [`GROUP`]), 64-byte aligned.
#[derive(Default)]
pub struct TransposedRows {
    lines: Vec<Line>,
    stride: usize,
    inputs: usize,
}

thread_local! {
    /// The buffer of this thread (grown to the largest product seen, then reused).
    static BUFFER: RefCell<TransposedRows> = RefCell::default();
}

impl TransposedRows {
    /// Runs `work` with this thread's buffer holding `x` (`rows × inputs`, row-major)
    /// transposed by the `isa` version of [`transpose_group`].
    ///
    /// # Panics
    /// When `x.len() != rows * inputs`, when called again from inside `work`, or when the CPU
    /// does not support `isa`.
    pub fn with<T>(
        x: &[f32],
        rows: usize,
        inputs: usize,
        isa: Isa,
        work: impl FnOnce(&Self) -> T,
    ) -> T {
        assert_eq!(x.len(), rows * inputs, "x is rows × K");
        BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            buffer.fill(x, rows, inputs, isa);
            work(&buffer)
        })
    }

    /// Floats between the lines of consecutive `k`s: the row count rounded up to [`GROUP`].
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The buffer: `K × stride` floats, 64-byte aligned.
    pub fn floats(&self) -> &[f32] {
        let lines = &self.lines[..self.inputs * self.stride / 16];
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64),
        // so the lines are `16 * lines.len()` initialised, contiguous floats borrowed with
        // `self`.
        unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), lines.len() * 16) }
    }

    /// Transposes `x` into the buffer, growing it if needed.
    fn fill(&mut self, x: &[f32], rows: usize, inputs: usize, isa: Isa) {
        self.stride = rows.div_ceil(GROUP) * GROUP;
        self.inputs = inputs;
        let lines = inputs * self.stride / 16;
        if self.lines.len() < lines {
            self.lines.resize(lines, Line([0.0; 16]));
        }
        let (stride, out) = (self.stride, &mut self.lines[..lines]);
        for group in 0..stride / GROUP {
            let first = group * GROUP;
            let count = GROUP.min(rows - first);
            let rows_of_group = &x[first * inputs..(first + count) * inputs];
            transpose_group(rows_of_group, count, inputs, out, stride, group, isa);
        }
    }
}

/// Writes rows `0..count` (at most 16) of `rows` (`count × k`, row-major) as the lanes of line
/// `group` of each `k`'s stretch of `stride` floats in `out` (zero lanes from `count` on).
///
/// # Panics
/// When `rows` is shorter than `count × k`, `count > 16`, `group >= stride / 16`, `out` is
/// shorter than `k × stride` floats, or the CPU does not support `isa`.
pub fn transpose_group(
    rows: &[f32],
    count: usize,
    k: usize,
    out: &mut [Line],
    stride: usize,
    group: usize,
    isa: Isa,
) {
    assert!(rows.len() >= count * k && count <= GROUP, "a group of rows");
    assert!(
        group < stride / 16 && out.len() * 16 >= k * stride,
        "the output lines"
    );
    isa.assert_supported();
    match isa {
        // SAFETY: the CPU supports AVX-512F (asserted above); sizes checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { transpose_avx512(rows, count, k, out, stride, group) },
        // SAFETY: the CPU supports AVX2 (asserted above); sizes checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { transpose_avx2(rows, count, k, out, stride, group) },
        _ => transpose_portable(rows, count, k, out, stride, group),
    }
}

/// [`transpose_group`] in plain Rust, for any CPU.
fn transpose_portable(
    rows: &[f32],
    count: usize,
    k: usize,
    out: &mut [Line],
    stride: usize,
    group: usize,
) {
    for kk in 0..k {
        let line = &mut out[kk * stride / 16 + group].0;
        for (lane, value) in line.iter_mut().enumerate() {
            *value = if lane < count {
                rows[lane * k + kk]
            } else {
                0.0
            };
        }
    }
}

/// [`transpose_group`] in AVX-512: per 16 `k`s, sixteen row loads (masked at the `k` tail,
/// zero for missing rows), a 16 × 16 in-register transpose and sixteen aligned stores.
///
/// # Safety
/// The CPU supports AVX-512F; `rows.len() >= count * k`, `count <= 16`, and `out` holds `k`
/// stretches of `stride` floats with `group < stride / 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_avx512(
    rows: &[f32],
    count: usize,
    k: usize,
    out: &mut [Line],
    stride: usize,
    group: usize,
) {
    use std::arch::x86_64::{
        _mm512_castpd_ps, _mm512_castps_pd, _mm512_maskz_loadu_ps, _mm512_setzero_ps,
        _mm512_shuffle_f32x4, _mm512_store_ps, _mm512_unpackhi_pd, _mm512_unpackhi_ps,
        _mm512_unpacklo_pd, _mm512_unpacklo_ps,
    };
    debug_assert!(rows.len() >= count * k && count <= GROUP);
    debug_assert!(out.len() * 16 >= k * stride && group < stride / 16);
    let out = out.as_mut_ptr().cast::<f32>();
    for k0 in (0..k).step_by(16) {
        let depth = (k - k0).min(16);
        let mask = ((1u32 << depth) - 1) as u16;
        let mut r = [_mm512_setzero_ps(); 16];
        for (i, r) in r.iter_mut().enumerate().take(count) {
            // SAFETY: row `i < count` holds `k` floats from `i * k`; the mask reads only
            // `k0..k0 + depth`, inside it.
            *r = unsafe { _mm512_maskz_loadu_ps(mask, rows.as_ptr().add(i * k + k0)) };
        }
        // Pairs of rows interleaved, then pairs of pairs: `u[4g + j]` holds, in 128-bit lane
        // `l`, input `4l + j` of rows `4g..4g + 4`.
        let mut t = [_mm512_setzero_ps(); 16];
        for p in 0..8 {
            t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
            t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (a, b) = (_mm512_castps_pd(t[4 * g]), _mm512_castps_pd(t[4 * g + 2]));
            let (c, d) = (
                _mm512_castps_pd(t[4 * g + 1]),
                _mm512_castps_pd(t[4 * g + 3]),
            );
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
        }
        // Lanes gathered across the four groups: input `4l + j` of all sixteen rows.
        for j in 0..4 {
            let even_low = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
            let odd_low = _mm512_shuffle_f32x4::<0xdd>(u[j], u[4 + j]);
            let even_high = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
            let odd_high = _mm512_shuffle_f32x4::<0xdd>(u[8 + j], u[12 + j]);
            let inputs = [
                (j, _mm512_shuffle_f32x4::<0x88>(even_low, even_high)),
                (4 + j, _mm512_shuffle_f32x4::<0x88>(odd_low, odd_high)),
                (8 + j, _mm512_shuffle_f32x4::<0xdd>(even_low, even_high)),
                (12 + j, _mm512_shuffle_f32x4::<0xdd>(odd_low, odd_high)),
            ];
            for (input, values) in inputs {
                if input < depth {
                    // SAFETY: `k0 + input < k`, so this line of `k0 + input`'s stretch is
                    // inside `out` and 64-byte aligned (`stride` is a multiple of 16).
                    unsafe { _mm512_store_ps(out.add((k0 + input) * stride + group * 16), values) };
                }
            }
        }
    }
}

/// [`transpose_group`] in AVX2: per 8 `k`s, each half of the group (rows `0..8`, `8..16`) as
/// eight row loads (masked at the `k` tail, zero for missing rows), an 8 × 8 in-register
/// transpose and eight aligned half-line stores.
///
/// # Safety
/// The CPU supports AVX2; `rows.len() >= count * k`, `count <= 16`, and `out` holds `k`
/// stretches of `stride` floats with `group < stride / 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_avx2(
    rows: &[f32],
    count: usize,
    k: usize,
    out: &mut [Line],
    stride: usize,
    group: usize,
) {
    use std::arch::x86_64::{
        _mm256_cmpgt_epi32, _mm256_maskload_ps, _mm256_permute2f128_ps, _mm256_set1_epi32,
        _mm256_setr_epi32, _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_store_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    debug_assert!(rows.len() >= count * k && count <= GROUP);
    debug_assert!(out.len() * 16 >= k * stride && group < stride / 16);
    let out = out.as_mut_ptr().cast::<f32>();
    for k0 in (0..k).step_by(8) {
        let depth = (k - k0).min(8);
        let mask = _mm256_cmpgt_epi32(
            _mm256_set1_epi32(depth as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        );
        for half in 0..2 {
            let mut r = [_mm256_setzero_ps(); 8];
            for (i, r) in r.iter_mut().enumerate() {
                let row = half * 8 + i;
                if row < count {
                    // SAFETY: row `row < count` holds `k` floats from `row * k`; the mask
                    // reads only `k0..k0 + depth`, inside it.
                    *r = unsafe { _mm256_maskload_ps(rows.as_ptr().add(row * k + k0), mask) };
                }
            }
            // Pairs of rows interleaved, then pairs of pairs: `u[j]` holds inputs `j` (low
            // 128 bits) and `4 + j` (high) of rows `0..4`, `u[4 + j]` the same of rows `4..8`.
            let t: [_; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            let u = [
                _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                _mm256_shuffle_ps::<0xee>(t[0], t[2]),
                _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                _mm256_shuffle_ps::<0xee>(t[1], t[3]),
                _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                _mm256_shuffle_ps::<0xee>(t[4], t[6]),
                _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                _mm256_shuffle_ps::<0xee>(t[5], t[7]),
            ];
            for j in 0..4 {
                let inputs = [
                    (j, _mm256_permute2f128_ps::<0x20>(u[j], u[4 + j])),
                    (4 + j, _mm256_permute2f128_ps::<0x31>(u[j], u[4 + j])),
                ];
                for (input, values) in inputs {
                    if input < depth {
                        // SAFETY: `k0 + input < k`, so this half line of `k0 + input`'s
                        // stretch is inside `out` and 32-byte aligned (`stride` is a multiple
                        // of 16 and the lines 64-byte aligned).
                        unsafe {
                            let line = out.add((k0 + input) * stride + group * 16 + half * 8);
                            _mm256_store_ps(line, values);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Odd shapes (a `k` tail, a partial last group) against the definition, in every version
    /// the CPU supports.
    #[test]
    fn holds_each_row_as_a_column_with_zero_padding() {
        for isa in Isa::supported() {
            for (rows, k) in [(1, 1), (3, 17), (9, 8), (16, 16), (35, 37), (64, 576)] {
                let x: Vec<f32> = (0..rows * k).map(|i| i as f32 + 0.5).collect();
                TransposedRows::with(&x, rows, k, isa, |t| {
                    let stride = t.stride();
                    assert_eq!(stride, rows.div_ceil(16) * 16);
                    let floats = t.floats();
                    assert_eq!(floats.len(), k * stride);
                    assert_eq!(floats.as_ptr() as usize % 64, 0);
                    let mut portable = vec![Line([f32::NAN; 16]); k * stride / 16];
                    for group in 0..stride / 16 {
                        let count = 16.min(rows - group * 16);
                        let of_group = &x[group * 16 * k..(group * 16 + count) * k];
                        transpose_portable(of_group, count, k, &mut portable, stride, group);
                    }
                    for kk in 0..k {
                        for j in 0..stride {
                            let want = if j < rows { x[j * k + kk] } else { 0.0 };
                            assert_eq!(
                                floats[kk * stride + j],
                                want,
                                "{isa}: rows {rows} k {kk} row {j}"
                            );
                            let portable = portable[(kk * stride + j) / 16].0[j % 16];
                            assert_eq!(portable, want, "portable: rows {rows} k {kk} row {j}");
                        }
                    }
                });
            }
        }
    }
}
