//! [`decode_attention`]: attention of one new token per row over its cached keys and values,
//! for generation's decode steps.
//!
//! libtorch's CPU flash attention handles a one-token query as one pair of `sgemv` calls per
//! row and query head, most of it call overhead on products of a few hundred × 64. Here each
//! row's key/value head is read once for all the query heads that share it (grouped-query
//! attention), the scores, a vectorised `exp` and the weighted sum of values in one pass per
//! head, and the rows and key/value heads are split over the threads of libtorch's OpenMP team.
//! The samples of one prompt read its cached slots from one row ([`SharedCacheRows`]): those
//! keys and values then come from memory once per step for the group, and from cache after.

use std::cell::RefCell;

use tch::{Device, Kind, Tensor};

use super::backend::{grad_enabled, on_cpu_f32};
#[cfg(target_arch = "x86_64")]
use super::exp::{exp_avx2, exp_avx512};
use super::isa::Isa;
use super::pool;
use crate::model::layers::SharedCacheRows;

/// Floats per AVX-512 vector: heads are a whole number of them, and the scores are padded to
/// a multiple of them.
const LANES: usize = 16;

/// The widest head the kernel takes, in AVX-512 vectors (256 floats): the query stays in
/// registers.
const MAX_VECTORS: usize = 16;

/// Floats per AVX2 vector.
const AVX2_LANES: usize = 8;

thread_local! {
    /// This thread's scores of one key/value head (grown to the longest cache seen).
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `softmax(q kᵀ / √d + mask) v` for `q` `[B, H, 1, D]` and `k`, `v` `[B, H_kv, S, D]` (any
/// strides but a unit one along `D`) with `mask` `[B, 1, 1, S]` bool (true = attend) — what
/// `scaled_dot_product_attention` with `enable_gqa` computes for a decode step — or `None`
/// when libtorch should do it: grad mode on, more than one query position, not f32 on the
/// CPU, or `D` not a multiple of 16 or above 256. Runs the `isa` version of the kernel.
///
/// # Panics
/// When the CPU does not support `isa`.
pub fn decode_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &Tensor,
    shared: Option<&SharedCacheRows>,
    isa: Isa,
) -> Option<Tensor> {
    isa.assert_supported();
    if grad_enabled() {
        return None;
    }
    let &[b, heads, 1, d] = q.size().as_slice() else {
        return None;
    };
    let &[kb, kv_heads, s, kd] = k.size().as_slice() else {
        return None;
    };
    if !on_cpu_f32(q)
        || !on_cpu_f32(k)
        || !on_cpu_f32(v)
        || v.size() != k.size()
        || mask.kind() != Kind::Bool
        || mask.size() != [b, 1, 1, s]
        || kb != b
        || kd != d
        || kv_heads == 0
        || heads % kv_heads != 0
        || d % LANES as i64 != 0
        || d > (MAX_VECTORS * LANES) as i64
        || s == 0
        || k.stride()[3] != 1
        || v.stride()[3] != 1
    {
        return None;
    }
    let q = q.contiguous();
    let mask = mask.contiguous();
    let out = Tensor::empty([b, heads, 1, d], (Kind::Float, Device::Cpu));
    let usize_of = |x: i64| usize::try_from(x).ok();
    let shape = Shape {
        heads: usize_of(heads)?,
        kv_heads: usize_of(kv_heads)?,
        keys: usize_of(s)?,
        dim: usize_of(d)?,
        k_strides: [
            usize_of(k.stride()[0])?,
            usize_of(k.stride()[1])?,
            usize_of(k.stride()[2])?,
        ],
        v_strides: [
            usize_of(v.stride()[0])?,
            usize_of(v.stride()[1])?,
            usize_of(v.stride()[2])?,
        ],
    };
    let batch = usize_of(b)?;
    // Rows read their shared slots from their source row (the same values).
    let shared = shared.filter(|shared| {
        shared.slots <= shape.keys
            && shared.source.len() == batch
            && shared.source.iter().all(|&row| row < batch)
    });
    let pairs = batch * shape.kv_heads;
    let operands = Operands {
        q: q.data_ptr().cast::<f32>().cast_const(),
        k: k.data_ptr().cast::<f32>().cast_const(),
        v: v.data_ptr().cast::<f32>().cast_const(),
        mask: mask.data_ptr().cast::<u8>().cast_const(),
        out: out.data_ptr().cast::<f32>(),
    };
    let parts = pool::parts().min(pairs);
    pool::run_parts(parts, &|part| {
        SCORES.with(|scores| {
            let mut scores = scores.borrow_mut();
            let group = shape.heads / shape.kv_heads;
            let needed = group * shape.keys.next_multiple_of(LANES);
            if scores.len() < needed {
                scores.resize(needed, 0.0);
            }
            for pair in pool::share(part, parts, pairs) {
                // SAFETY: `pair < B × H_kv`; the operands are the tensors checked above, alive
                // until `run_parts` returns, and each pair writes only its own query heads of
                // `out`.
                unsafe { attend_pair(&operands, &shape, shared, pair, &mut scores, isa) };
            }
        });
    });
    Some(out)
}

/// Sizes and strides (in floats) of one call.
struct Shape {
    heads: usize,
    kv_heads: usize,
    keys: usize,
    dim: usize,
    k_strides: [usize; 3],
    v_strides: [usize; 3],
}

/// The tensors' data, shared by the threads of one call.
struct Operands {
    q: *const f32,
    k: *const f32,
    v: *const f32,
    mask: *const u8,
    out: *mut f32,
}

// SAFETY: the threads only read `q`, `k`, `v` and `mask`, and write disjoint query heads of
// `out` (see `decode_attention`).
unsafe impl Sync for Operands {}

/// Attention of row `pair / H_kv` for the query heads of key/value head `pair % H_kv`, its
/// first `shared.slots` keys and values read from its source row.
///
/// # Safety
/// The operands hold tensors of `shape` (`q` and `out` contiguous `[B, H, 1, D]`, `mask`
/// contiguous `[B, 1, 1, S]` bytes), `pair < B × H_kv`, `shared` names rows of `B` and at most
/// `S` slots, nothing else writes these query heads of `out`, `scores` holds `H / H_kv` × `S`
/// rounded up to 16 floats, and the CPU supports `isa`.
unsafe fn attend_pair(
    operands: &Operands,
    shape: &Shape,
    shared: Option<&SharedCacheRows>,
    pair: usize,
    scores: &mut [f32],
    isa: Isa,
) {
    let (row, head) = (pair / shape.kv_heads, pair % shape.kv_heads);
    let group = shape.heads / shape.kv_heads;
    let padded = shape.keys.next_multiple_of(LANES);
    let (d, s) = (shape.dim, shape.keys);
    let (source, shared_slots) =
        shared.map_or((row, 0), |shared| (shared.source[row], shared.slots));
    // SAFETY (pointers): inside the tensors per the contract.
    let head_of = |base: *const f32, strides: &[usize; 3], row: usize| unsafe {
        base.add(row * strides[0] + head * strides[1])
    };
    let (k, v, mask) = (
        head_of(operands.k, &shape.k_strides, row),
        head_of(operands.v, &shape.v_strides, row),
        // SAFETY: the row's `s` mask bytes.
        unsafe { std::slice::from_raw_parts(operands.mask.add(row * s), s) },
    );
    let (shared_k, shared_v) = (
        head_of(operands.k, &shape.k_strides, source),
        head_of(operands.v, &shape.v_strides, source),
    );
    let scale = 1.0 / (d as f32).sqrt();
    for g in 0..group {
        let query_head = row * shape.heads + head * group + g;
        // SAFETY: query head `query_head` has `d` floats in `q` and `out`, written only here.
        let (q, out) = unsafe {
            (
                std::slice::from_raw_parts(operands.q.add(query_head * d), d),
                std::slice::from_raw_parts_mut(operands.out.add(query_head * d), d),
            )
        };
        let scores = &mut scores[g * padded..(g + 1) * padded];
        let keys = (k, shared_k, shape.k_strides[2]);
        let values = (v, shared_v, shape.v_strides[2]);
        // SAFETY: as this function's contract, for one query head.
        unsafe {
            if shared_slots > 0 && source != row {
                let (keys, values) = (
                    Strided::<true>::new(keys, shared_slots, d),
                    Strided::new(values, shared_slots, d),
                );
                attend_head((q, &keys, &values, mask, scale, scores, out), isa);
            } else {
                let (keys, values) = (
                    Strided::<false>::new(keys, 0, d),
                    Strided::new(values, 0, d),
                );
                attend_head((q, &keys, &values, mask, scale, scores, out), isa);
            }
        }
    }
}

/// One query head on the `isa` kernel for its width, its shared keys and values read from
/// where `SHARED` says.
///
/// # Safety
/// The CPU supports `isa`; the head's width is a multiple of 16 of at most 256 floats and its
/// keys and values hold `mask.len()` rows of that width; `scores` holds `mask.len()` rounded
/// up to 16 floats.
unsafe fn attend_head<const SHARED: bool>(operands: Head<'_, SHARED>, isa: Isa) {
    let d = operands.0.len();
    match isa {
        // SAFETY: the CPU supports AVX-512F (the contract); `d` is a multiple of 16 of at
        // most `V` × 16 floats and the keys and values hold `s` rows of `d` floats.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe {
            match d / LANES {
                0..=4 => attend_avx512::<4, SHARED>(operands),
                5..=8 => attend_avx512::<8, SHARED>(operands),
                _ => attend_avx512::<MAX_VECTORS, SHARED>(operands),
            }
        },
        // SAFETY: the CPU supports AVX2 and FMA (the contract); `d` is a multiple of 16 of
        // at most `V` × 8 floats and the keys and values hold `s` rows of `d` floats.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe {
            match d / AVX2_LANES {
                0..=8 => attend_avx2::<8, SHARED>(operands),
                9..=16 => attend_avx2::<16, SHARED>(operands),
                _ => attend_avx2::<{ 2 * MAX_VECTORS }, SHARED>(operands),
            }
        },
        // SAFETY: as above.
        _ => unsafe { attend_portable::<SHARED>(operands) },
    }
}

/// One query head's operands: its query, the row's keys and values, the row's mask, the
/// score scale, the scores buffer and the head's output.
type Head<'a, const SHARED: bool> = (
    &'a [f32],
    &'a Strided<SHARED>,
    &'a Strided<SHARED>,
    &'a [u8],
    f32,
    &'a mut [f32],
    &'a mut [f32],
);

/// `S` rows of `dim` floats, `stride` floats apart: with `SHARED`, the first `shared` from
/// `shared_base` (another cache row holding the same values), the rest from `base`.
struct Strided<const SHARED: bool> {
    base: *const f32,
    shared_base: *const f32,
    shared: usize,
    stride: usize,
    dim: usize,
}

impl<const SHARED: bool> Strided<SHARED> {
    /// The rows from `base` (the first `shared` from `shared_base` with `SHARED`), `stride`
    /// floats apart, of `dim` floats.
    fn new(
        (base, shared_base, stride): (*const f32, *const f32, usize),
        shared: usize,
        dim: usize,
    ) -> Self {
        Self {
            base,
            shared_base,
            shared,
            stride,
            dim,
        }
    }

    /// Row `t`.
    ///
    /// # Safety
    /// `t < S`.
    unsafe fn row(&self, t: usize) -> &[f32] {
        let base = if SHARED && t < self.shared {
            self.shared_base
        } else {
            self.base
        };
        // SAFETY: the caller keeps `t` in range; rows hold `dim` floats.
        unsafe { std::slice::from_raw_parts(base.add(t * self.stride), self.dim) }
    }
}

/// One query head in plain Rust: scores, softmax, weighted sum of values.
///
/// # Safety
/// `keys` and `values` hold `mask.len()` rows; `scores` holds at least `mask.len()` floats.
unsafe fn attend_portable<const SHARED: bool>(
    (q, keys, values, mask, scale, scores, out): Head<'_, SHARED>,
) {
    let mut max = f32::NEG_INFINITY;
    for (t, score) in scores.iter_mut().enumerate().take(mask.len()) {
        *score = if mask[t] != 0 {
            // SAFETY: `t < S`.
            let key = unsafe { keys.row(t) };
            q.iter().zip(key).map(|(a, b)| a * b).sum::<f32>() * scale
        } else {
            f32::NEG_INFINITY
        };
        max = max.max(*score);
    }
    out.fill(0.0);
    let mut sum = 0.0;
    for (t, &score) in scores.iter().enumerate().take(mask.len()) {
        if mask[t] == 0 {
            continue;
        }
        let p = (score - max).exp();
        sum += p;
        // SAFETY: `t < S`.
        let value = unsafe { values.row(t) };
        for (o, &v) in out.iter_mut().zip(value) {
            *o += p * v;
        }
    }
    out.iter_mut().for_each(|o| *o /= sum);
}

/// [`attend_portable`] in AVX-512: dot products over `D / 16` vectors per key, the softmax
/// over 16 scores at a time with [`exp_avx512`], and the values summed key by key into `D / 16`
/// accumulators, independent chains of FMAs that `V` (the most vectors a head may have) lets
/// the compiler keep in registers.
///
/// # Safety
/// The CPU supports AVX-512F; `D` is a multiple of 16 and at most `V` × 16; `keys` and
/// `values` hold `mask.len()` rows; `scores` holds `mask.len()` rounded up to 16 floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512<const V: usize, const SHARED: bool>(
    (q, keys, values, mask, scale, scores, out): Head<'_, SHARED>,
) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_cmp_ps_mask, _mm512_div_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_mask_blend_ps, _mm512_max_ps, _mm512_reduce_add_ps, _mm512_reduce_max_ps,
        _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps, _mm512_sub_ps, _CMP_GT_OQ,
    };
    let (s, vectors) = (mask.len(), q.len() / LANES);
    let mut query = [_mm512_setzero_ps(); V];
    for (i, query) in query.iter_mut().enumerate().take(vectors) {
        // SAFETY: `q` holds `vectors × 16` floats.
        *query = unsafe { _mm512_loadu_ps(q.as_ptr().add(i * LANES)) };
    }
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut max = neg_inf;
    for t in 0..s {
        let score = if mask[t] != 0 {
            // SAFETY: `t < S`; the key has `vectors × 16` floats.
            let key = unsafe { keys.row(t) };
            let mut acc = _mm512_setzero_ps();
            for (i, &qv) in query.iter().enumerate().take(vectors) {
                // SAFETY: in bounds of `key`.
                let kv = unsafe { _mm512_loadu_ps(key.as_ptr().add(i * LANES)) };
                acc = _mm512_fmadd_ps(qv, kv, acc);
            }
            _mm512_reduce_add_ps(acc) * scale
        } else {
            f32::NEG_INFINITY
        };
        scores[t] = score;
    }
    scores[s..s.next_multiple_of(LANES)].fill(f32::NEG_INFINITY);
    for chunk in scores[..s.next_multiple_of(LANES)].chunks_exact(LANES) {
        // SAFETY: a chunk is 16 floats.
        max = _mm512_max_ps(max, unsafe { _mm512_loadu_ps(chunk.as_ptr()) });
    }
    let max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
    // Probabilities in place of the scores; masked keys exactly 0.
    let mut sum = _mm512_setzero_ps();
    for chunk in scores[..s.next_multiple_of(LANES)].chunks_exact_mut(LANES) {
        // SAFETY: a chunk is 16 floats.
        unsafe {
            let score = _mm512_loadu_ps(chunk.as_ptr());
            let valid = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(score, neg_inf);
            let p = _mm512_mask_blend_ps(
                valid,
                _mm512_setzero_ps(),
                exp_avx512(_mm512_sub_ps(score, max)),
            );
            sum = _mm512_add_ps(sum, p);
            _mm512_storeu_ps(chunk.as_mut_ptr(), p);
        }
    }
    let sum = _mm512_set1_ps(_mm512_reduce_add_ps(sum));
    let mut acc = [_mm512_setzero_ps(); V];
    for (t, &p) in scores.iter().enumerate().take(s) {
        if p != 0.0 {
            // SAFETY: `t < S`; the value has `vectors × 16` floats.
            let value = unsafe { values.row(t) };
            let p = _mm512_set1_ps(p);
            for (i, acc) in acc.iter_mut().enumerate().take(vectors) {
                // SAFETY: in bounds of `value`.
                let v = unsafe { _mm512_loadu_ps(value.as_ptr().add(i * LANES)) };
                *acc = _mm512_fmadd_ps(p, v, *acc);
            }
        }
    }
    for (i, &acc) in acc.iter().enumerate().take(vectors) {
        // SAFETY: `out` holds `vectors × 16` floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i * LANES), _mm512_div_ps(acc, sum)) };
    }
}

/// [`attend_avx512`] in AVX2: 8-float vectors, [`exp_avx2`], horizontal sums and maxima by
/// halving.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `D` is a multiple of 16 and at most `V` × 8; `keys` and
/// `values` hold `mask.len()` rows; `scores` holds `mask.len()` rounded up to 16 floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2<const V: usize, const SHARED: bool>(
    (q, keys, values, mask, scale, scores, out): Head<'_, SHARED>,
) {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_and_ps, _mm256_cmp_ps, _mm256_div_ps, _mm256_fmadd_ps,
        _mm256_loadu_ps, _mm256_max_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
        _mm256_sub_ps, _CMP_GT_OQ,
    };
    let (s, vectors) = (mask.len(), q.len() / AVX2_LANES);
    let mut query = [_mm256_setzero_ps(); V];
    for (i, query) in query.iter_mut().enumerate().take(vectors) {
        // SAFETY: `q` holds `vectors × 8` floats.
        *query = unsafe { _mm256_loadu_ps(q.as_ptr().add(i * AVX2_LANES)) };
    }
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    for t in 0..s {
        scores[t] = if mask[t] != 0 {
            // SAFETY: `t < S`; the key has `vectors × 8` floats.
            let key = unsafe { keys.row(t) };
            let mut acc = _mm256_setzero_ps();
            for (i, &qv) in query.iter().enumerate().take(vectors) {
                // SAFETY: in bounds of `key`.
                let kv = unsafe { _mm256_loadu_ps(key.as_ptr().add(i * AVX2_LANES)) };
                acc = _mm256_fmadd_ps(qv, kv, acc);
            }
            sum_avx2(acc) * scale
        } else {
            f32::NEG_INFINITY
        };
    }
    let padded = s.next_multiple_of(LANES);
    scores[s..padded].fill(f32::NEG_INFINITY);
    let mut max = neg_inf;
    for chunk in scores[..padded].chunks_exact(AVX2_LANES) {
        // SAFETY: a chunk is 8 floats.
        max = _mm256_max_ps(max, unsafe { _mm256_loadu_ps(chunk.as_ptr()) });
    }
    let max = _mm256_set1_ps(max_avx2(max));
    // Probabilities in place of the scores; masked keys exactly 0.
    let mut sum = _mm256_setzero_ps();
    for chunk in scores[..padded].chunks_exact_mut(AVX2_LANES) {
        // SAFETY: a chunk is 8 floats.
        unsafe {
            let score = _mm256_loadu_ps(chunk.as_ptr());
            let valid = _mm256_cmp_ps::<_CMP_GT_OQ>(score, neg_inf);
            let p = _mm256_and_ps(valid, exp_avx2(_mm256_sub_ps(score, max)));
            sum = _mm256_add_ps(sum, p);
            _mm256_storeu_ps(chunk.as_mut_ptr(), p);
        }
    }
    let sum = _mm256_set1_ps(sum_avx2(sum));
    let mut acc = [_mm256_setzero_ps(); V];
    for (t, &p) in scores.iter().enumerate().take(s) {
        if p != 0.0 {
            // SAFETY: `t < S`; the value has `vectors × 8` floats.
            let value = unsafe { values.row(t) };
            let p = _mm256_set1_ps(p);
            for (i, acc) in acc.iter_mut().enumerate().take(vectors) {
                // SAFETY: in bounds of `value`.
                let v = unsafe { _mm256_loadu_ps(value.as_ptr().add(i * AVX2_LANES)) };
                *acc = _mm256_fmadd_ps(p, v, *acc);
            }
        }
    }
    for (i, &acc) in acc.iter().enumerate().take(vectors) {
        // SAFETY: `out` holds `vectors × 8` floats.
        unsafe {
            _mm256_storeu_ps(
                out.as_mut_ptr().add(i * AVX2_LANES),
                _mm256_div_ps(acc, sum),
            );
        }
    }
}

/// The sum of 8 lanes: halves added until one lane is left.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2(x: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::{
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32,
        _mm_movehl_ps, _mm_shuffle_ps,
    };
    let four = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps::<1>(two, two)))
}

/// The largest of 8 lanes: halves compared until one lane is left.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn max_avx2(x: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::{
        _mm256_castps256_ps128, _mm256_extractf128_ps, _mm_cvtss_f32, _mm_max_ps, _mm_max_ss,
        _mm_movehl_ps, _mm_shuffle_ps,
    };
    let four = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let two = _mm_max_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_max_ss(two, _mm_shuffle_ps::<1>(two, two)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::relative_difference;
    use crate::model::eager_attention::{decode_step_inputs, sdpa_reference};

    #[test]
    fn matches_scaled_dot_product_attention_with_gqa_masks_and_strided_caches() {
        tch::manual_seed(3);
        for (heads, s) in [
            ((1, 1, 1, 16), (1, 1)),
            ((3, 9, 3, 64), (37, 50)),
            ((2, 8, 2, 128), (16, 16)),
            ((5, 4, 4, 32), (100, 130)),
            ((2, 6, 2, 80), (21, 24)),
            ((2, 4, 1, 192), (40, 40)),
        ] {
            let (q, k, v, mask) = decode_step_inputs(heads, s, Kind::Float);
            let want = sdpa_reference(&q, &k, &v, &mask);
            for isa in Isa::supported() {
                let got = tch::no_grad(|| decode_attention(&q, &k, &v, &mask, None, isa))
                    .expect("a decode step");
                let diff = relative_difference(&got, &want);
                assert!(diff < 1e-5, "{isa}: {heads:?} {s:?}: {diff}");
            }
        }
    }

    /// Rows that read their shared slots from a source row compute what they compute from
    /// their own copy of those slots, bit for bit; slots past the shared ones stay their own.
    #[test]
    fn rows_read_their_shared_slots_from_their_source_row() {
        tch::manual_seed(9);
        let (q, k, v, mask) = decode_step_inputs((4, 9, 3, 64), (30, 41), Kind::Float);
        let (b, shared_slots) = (4, 30);
        // Rows 1 and 3 continue row 0's prompt, row 2 its own: they hold row 0's first slots.
        let source = vec![0, 0, 2, 0];
        let copied = |t: &Tensor| {
            let t = t.copy();
            for (row, &from) in source.iter().enumerate() {
                let from_slots = t.get(from as i64).narrow(1, 0, shared_slots);
                t.get(row as i64)
                    .narrow(1, 0, shared_slots)
                    .copy_(&from_slots);
            }
            t
        };
        let (k, v) = (copied(&k), copied(&v));
        let mask = mask.copy();
        for row in [1, 3] {
            mask.get(row)
                .narrow(2, 0, shared_slots)
                .copy_(&mask.get(0).narrow(2, 0, shared_slots));
        }
        // The same cache with the shared slots of rows 1 and 3 overwritten: read from row 0.
        let scrambled = |t: &Tensor| {
            let t = t.copy();
            for row in [1, 3] {
                let _ = t.get(row).narrow(1, 0, shared_slots).fill_(1e3);
            }
            t
        };
        let shared = SharedCacheRows {
            slots: shared_slots as usize,
            source: source.clone(),
        };
        assert_eq!(k.size()[0], b);
        for isa in Isa::supported() {
            let run = |k: &Tensor, v: &Tensor, shared: Option<&SharedCacheRows>| {
                tch::no_grad(|| decode_attention(&q, k, v, &mask, shared, isa))
                    .expect("a decode step")
            };
            let own = run(&k, &v, None);
            let from_source = run(&scrambled(&k), &scrambled(&v), Some(&shared));
            assert!(own.equal(&from_source), "{isa}");
            assert!(
                !run(&scrambled(&k), &scrambled(&v), None).equal(&own),
                "{isa}: scrambled"
            );
        }
    }

    #[test]
    fn leaves_prefills_forwards_with_grad_and_other_shapes_to_libtorch() {
        let cpu = (Kind::Float, Device::Cpu);
        let q = Tensor::randn([2, 4, 1, 16], cpu);
        let k = Tensor::randn([2, 2, 5, 16], cpu);
        let mask = Tensor::ones([2, 1, 1, 5], (Kind::Bool, Device::Cpu));
        let run = |q: &Tensor, k: &Tensor, mask: &Tensor| {
            tch::no_grad(|| decode_attention(q, k, k, mask, None, Isa::best())).is_some()
        };
        assert!(run(&q, &k, &mask));
        assert!(
            decode_attention(&q, &k, &k, &mask, None, Isa::best()).is_none(),
            "grad mode"
        );
        let prefill = Tensor::randn([2, 4, 3, 16], cpu);
        assert!(!run(
            &prefill,
            &k,
            &Tensor::ones([2, 1, 3, 5], (Kind::Bool, Device::Cpu))
        ));
        let odd_width = Tensor::randn([2, 4, 1, 12], cpu);
        assert!(!run(&odd_width, &Tensor::randn([2, 2, 5, 12], cpu), &mask));
    }
}
