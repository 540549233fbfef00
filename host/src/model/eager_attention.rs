//! [`eager_decode_attention`]: a decode step's attention as two batched products and a
//! softmax (what transformers calls "eager" attention), for models on an accelerator.
//!
//! There `scaled_dot_product_attention` picks a fused kernel by shape, and a decode step's
//! shape is new every step (the keys grow by one slot). On CUDA with a mask and grouped-query
//! heads, flash attention declines (no mask) and libtorch 2.11's memory-efficient kernel
//! declines (no grouped heads), leaving cuDNN, which libtorch prefers on Hopper and Blackwell
//! data-centre GPUs and which builds an execution graph for every new shape ("excessive
//! recompilation", in libtorch's own warning), or elsewhere the math path, which copies the keys
//! and values to every query head and computes in f32. Here the query heads sharing a
//! key/value head are the rows of one product, so each step reads the cache once, in place,
//! with no per-shape setup.

use tch::{Kind, Tensor};

/// `softmax(q kᵀ / √d + mask) v` for one new token per row: `q` `[B, H, 1, D]`, `k`, `v`
/// `[B, H_kv, S, D]` (any strides along `S`; `H_kv` divides `H`), `mask` `[B, 1, 1, S]` bool
/// (true = attend; at least one key per row). Returns `[B, H, 1, D]` in `q`'s dtype.
///
/// The scores are computed in `q`'s dtype and the softmax in f32, as transformers' eager
/// attention does; this equals `scaled_dot_product_attention` with `enable_gqa` to within
/// rounding.
pub fn eager_decode_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
    let size = q.size();
    let (b, heads, d) = (size[0], size[1], size[3]);
    let kv_heads = k.size()[1];
    // Query head `h` attends with key/value head `h / (H / H_kv)`, as `enable_gqa` pairs them.
    let grouped = q.reshape([b, kv_heads, heads / kv_heads, d]);
    let scale = 1.0 / (d as f64).sqrt();
    let scores = (grouped * scale).matmul(&k.transpose(-2, -1));
    let weights = scores
        .where_scalarother(mask, f64::NEG_INFINITY)
        .softmax(-1, Kind::Float)
        .to_kind(q.kind());
    weights.matmul(v).reshape([b, heads, 1, d])
}

/// Random inputs `(q, k, v, mask)` of a decode step's attention in `kind`, laid out as
/// generation holds them: the query a transposed `[B, 1, H, D]` projection, the keys and values
/// a cache of `max_len` slots narrowed to the `s` in use, the mask random but always true on
/// the new token's own (last) slot (tests).
#[cfg(test)]
pub(crate) fn decode_step_inputs(
    (b, heads, kv_heads, d): (i64, i64, i64, i64),
    (s, max_len): (i64, i64),
    kind: Kind,
) -> (Tensor, Tensor, Tensor, Tensor) {
    let options = (kind, tch::Device::Cpu);
    let q = Tensor::randn([b, 1, heads, d], options).transpose(1, 2);
    let k = Tensor::randn([b, kv_heads, max_len, d], options).narrow(2, 0, s);
    let v = Tensor::randn([b, kv_heads, max_len, d], options).narrow(2, 0, s);
    let mask = Tensor::rand([b, 1, 1, s], (Kind::Float, tch::Device::Cpu)).gt(0.3);
    let _ = mask.narrow(3, s - 1, 1).fill_(1);
    (q, k, v, mask)
}

/// `scaled_dot_product_attention` with `enable_gqa` in f32: what decode attention must equal
/// (tests).
#[cfg(test)]
pub(crate) fn sdpa_reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Tensor {
    let f32 = |t: &Tensor| t.to_kind(Kind::Float);
    Tensor::scaled_dot_product_attention(
        &f32(q),
        &f32(k),
        &f32(v),
        Some(mask),
        0.0,
        false,
        None,
        k.size()[1] != q.size()[1],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_scaled_dot_product_attention_with_grouped_heads_masks_and_strided_caches() {
        tch::manual_seed(5);
        for (kind, tolerance) in [(Kind::Float, 1e-5), (Kind::BFloat16, 1e-2)] {
            for (heads, s) in [
                ((1, 1, 1, 16), (1, 1)),
                ((3, 12, 2, 128), (37, 50)),
                ((2, 8, 8, 64), (16, 16)),
                ((4, 14, 2, 64), (100, 130)),
                ((2, 28, 4, 128), (21, 24)),
            ] {
                let (q, k, v, mask) = decode_step_inputs(heads, s, kind);
                let got = eager_decode_attention(&q, &k, &v, &mask);
                assert_eq!(got.size(), q.size());
                assert_eq!(got.kind(), kind);
                let want = sdpa_reference(&q, &k, &v, &mask);
                let diff = (got.to_kind(Kind::Float) - &want)
                    .abs()
                    .max()
                    .double_value(&[])
                    / want.abs().max().double_value(&[]);
                assert!(diff < tolerance, "{kind:?} {heads:?} {s:?}: {diff}");
            }
        }
    }

    #[test]
    fn masked_keys_get_no_weight() {
        // Two rows over the same keys: row 0 may see only its last key, so it returns that
        // key's value exactly whatever the scores; row 1 sees both and mixes them.
        let k = Tensor::from_slice(&[1f32, 0., 0., 1.])
            .view([1, 1, 2, 2])
            .repeat([2, 1, 1, 1]);
        let v = Tensor::from_slice(&[10f32, 20., 30., 40.])
            .view([1, 1, 2, 2])
            .repeat([2, 1, 1, 1]);
        let q = Tensor::from_slice(&[5f32, 0., 5., 0.]).view([2, 1, 1, 2]);
        let mask = Tensor::from_slice(&[false, true, true, true]).view([2, 1, 1, 2]);
        let out = eager_decode_attention(&q, &k, &v, &mask);
        let row = |r: i64| Vec::<f32>::try_from(out.get(r).reshape([-1])).expect("f32 values");
        assert_eq!(row(0), [30.0, 40.0]);
        let (first, second) = (row(1)[0], row(1)[1]);
        assert!(first > 10.0 && first < 30.0 && second > 20.0 && second < 40.0);
    }
}
