//! Reducing per-token values to one number, as verl's `agg_loss` does.

use tch::Tensor;

use crate::config::LossAggregation;

/// Reduces `values` [B, T] over the response tokens marked by `mask` [B, T] (1.0 / 0.0).
///
/// - `token-mean`: Σ v·m / Σ m over the whole batch — every token weighs the same;
/// - `seq-mean-token-sum`: each sequence's Σ v·m, averaged over sequences;
/// - `seq-mean-token-mean`: each sequence's mean over its tokens, averaged over sequences.
///
/// Sequences without a response token (an empty mask row) count as zero in the sequence modes,
/// and an all-empty mask gives 0 rather than NaN.
pub fn aggregate(values: &Tensor, mask: &Tensor, mode: LossAggregation) -> Tensor {
    let masked = values * mask;
    let kind = masked.kind();
    match mode {
        LossAggregation::TokenMean => masked.sum(kind) / mask.sum(kind).clamp_min(1.0),
        LossAggregation::SeqMeanTokenSum => masked
            .sum_dim_intlist([1i64].as_slice(), false, kind)
            .mean(kind),
        LossAggregation::SeqMeanTokenMean => {
            let tokens = mask
                .sum_dim_intlist([1i64].as_slice(), false, kind)
                .clamp_min(1.0);
            (masked.sum_dim_intlist([1i64].as_slice(), false, kind) / tokens).mean(kind)
        }
    }
}
