//! The critic's loss: PPO's clipped value loss, as verl's and the Dr. MAS code's
//! `compute_value_loss` computes it.

use tch::{Kind, Tensor};

use super::{Aggregation, BatchTotals};
use crate::config::LossAggregation;

/// Numbers for the metrics, detached: this micro-batch's share of the mini-batch's values.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ValueLossStats {
    /// The value loss.
    pub loss: f64,
    /// Fraction of response tokens where the clipped prediction gave the larger loss.
    pub clip_fraction: f64,
}

/// max((V − R)², (clip(V, V_old − c, V_old + c) − R)²) averaged over the mini-batch's response
/// tokens (`totals`), with V the predictions `[B, T]`, V_old the values the returns R were
/// computed with and c `cliprange`: the critic moves at most c from its old values per update
/// unless that lowers the loss.
pub fn value_loss(
    predictions: &Tensor,
    old_values: &Tensor,
    returns: &Tensor,
    mask: &Tensor,
    cliprange: f64,
    totals: BatchTotals,
) -> (Tensor, ValueLossStats) {
    let clipped =
        predictions.clamp_tensor(Some(old_values - cliprange), Some(old_values + cliprange));
    let unclipped_loss = (predictions - returns).square();
    let clipped_loss = (clipped - returns).square();
    let token_losses = unclipped_loss.maximum(&clipped_loss);
    let aggregation = Aggregation {
        mode: LossAggregation::TokenMean,
        scale_factor: None,
        totals,
    };
    let loss = aggregation.reduce(&token_losses, mask);
    let clip_fraction = (clipped_loss
        .gt_tensor(&unclipped_loss)
        .to_kind(Kind::Double)
        * mask)
        .sum(Kind::Double)
        / totals.tokens.max(1.0);
    let stats = ValueLossStats {
        loss: loss.double_value(&[]),
        clip_fraction: clip_fraction.double_value(&[]),
    };
    (loss, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(values: &[f64]) -> Tensor {
        Tensor::from_slice(values).view([1, values.len() as i64])
    }

    #[test]
    fn clipped_and_unclipped_branches_by_hand() {
        // Token 0: V 0.9 from V_old 0 (clip 0.5 → 0.5), R 1: unclipped 0.01, clipped 0.25
        //          → 0.25, counted as clipped.
        // Token 1: V 0.2 from V_old 0 (inside), R 1: both 0.64.
        // Token 2: V −0.9 from V_old 0 (clip → −0.5), R −1: unclipped 0.01, clipped 0.25.
        // Token 3: padding.
        let predictions = t(&[0.9, 0.2, -0.9, 7.0]);
        let old = t(&[0.0, 0.0, 0.0, 0.0]);
        let returns = t(&[1.0, 1.0, -1.0, 0.0]);
        let mask = t(&[1.0, 1.0, 1.0, 0.0]);
        let totals = BatchTotals::of_mask(&mask);
        let (loss, stats) = value_loss(&predictions, &old, &returns, &mask, 0.5, totals);
        let expected = (0.25 + 0.64 + 0.25) / 3.0;
        assert!(
            (loss.double_value(&[]) - expected).abs() < 1e-12,
            "{stats:?}"
        );
        assert!((stats.clip_fraction - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_gradient_stops_where_the_clipped_loss_wins() {
        let predictions = t(&[0.9, 0.2]).set_requires_grad(true);
        let old = t(&[0.0, 0.0]);
        let returns = t(&[1.0, 1.0]);
        let mask = t(&[1.0, 1.0]);
        let (loss, _) = value_loss(
            &predictions,
            &old,
            &returns,
            &mask,
            0.5,
            BatchTotals::of_mask(&mask),
        );
        loss.backward();
        let grad = Vec::<f64>::try_from(predictions.grad().view([-1])).expect("grad");
        // Token 0 is clipped (constant loss); token 1: d/dV (V − 1)² / 2 = (0.2 − 1).
        assert_eq!(grad[0], 0.0);
        assert!((grad[1] - (0.2 - 1.0)).abs() < 1e-12);
    }
}
