//! The sampler–trainer mismatch: old log-probabilities recomputed with the training forward,
//! the log-ratio between them and the sampler's, and truncated importance sampling (TIS) weights
//! for what remains.

use tch::{Kind, Tensor};

use super::{ChunkedHead, TrainingBatch};
use crate::model::error::ModelError;
use crate::model::llama::Llama;

/// |log π_trainer − log π_rollout| above this counts as a mismatched token in the metrics.
pub const MISMATCH_THRESHOLD: f64 = 0.1;

/// How an agent's update treats the log-probabilities its calls were sampled with.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RolloutCorrection {
    /// Recompute the old log-probabilities with the training forward (no dropout, no
    /// gradient) before the update, instead of trusting the sampler's.
    pub recompute: bool,
    /// Weight each token's policy loss by min(π_old / π_rollout, cap) (only when recomputing).
    pub tis_cap: Option<f64>,
}

/// How far the trainer's log-probabilities are from the sampler's over some response tokens:
/// sums and a maximum, so micro-batches add up to an agent's whole batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mismatch {
    /// Response tokens measured.
    pub tokens: f64,
    /// Σ (log π_trainer − log π_rollout).
    pub log_ratio_sum: f64,
    /// max |log π_trainer − log π_rollout|.
    pub log_ratio_abs_max: f64,
    /// Tokens with |log-ratio| > [`MISMATCH_THRESHOLD`].
    pub above_threshold: f64,
    /// Tokens whose importance weight the TIS cap truncated (`None` without a cap).
    pub capped: Option<f64>,
}

impl Mismatch {
    /// The mismatch of `trainer` against `rollout` log-probabilities (`[B, R]`) over the
    /// response tokens of `mask`, counting the tokens whose weight `tis_cap` truncates.
    pub fn measure(
        trainer: &Tensor,
        rollout: &Tensor,
        mask: &Tensor,
        tis_cap: Option<f64>,
    ) -> Self {
        let log_ratio = (trainer - rollout).to_kind(Kind::Double) * mask;
        let real = mask.gt(0.0);
        let count = |tokens: Tensor| {
            tokens
                .logical_and(&real)
                .sum(Kind::Double)
                .double_value(&[])
        };
        Self {
            tokens: mask.sum(Kind::Double).double_value(&[]),
            log_ratio_sum: log_ratio.sum(Kind::Double).double_value(&[]),
            log_ratio_abs_max: log_ratio.abs().max().double_value(&[]),
            above_threshold: count(log_ratio.abs().gt(MISMATCH_THRESHOLD)),
            capped: tis_cap.map(|cap| count(log_ratio.gt(cap.ln()))),
        }
    }

    /// Both measurements as one.
    pub fn merge(self, other: Self) -> Self {
        Self {
            tokens: self.tokens + other.tokens,
            log_ratio_sum: self.log_ratio_sum + other.log_ratio_sum,
            log_ratio_abs_max: self.log_ratio_abs_max.max(other.log_ratio_abs_max),
            above_threshold: self.above_threshold + other.above_threshold,
            capped: match (self.capped, other.capped) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
        }
    }

    /// Mean log-ratio per token.
    pub fn log_ratio_mean(&self) -> f64 {
        self.log_ratio_sum / self.tokens.max(1.0)
    }

    /// Fraction of tokens with |log-ratio| > [`MISMATCH_THRESHOLD`].
    pub fn fraction_above_threshold(&self) -> f64 {
        self.above_threshold / self.tokens.max(1.0)
    }

    /// Fraction of tokens whose importance weight was truncated (`None` without a cap).
    pub fn capped_fraction(&self) -> Option<f64> {
        self.capped.map(|capped| capped / self.tokens.max(1.0))
    }
}

/// The old log-probabilities `[B, R]` of `batch`'s responses under `model` through `adapter`:
/// the training forward at the calls' temperatures, without dropout or gradient, the LM head a
/// chunk of positions at a time ([`ChunkedHead::logprobs_without_grad`]).
pub fn recompute_old_logprobs(
    model: &Llama,
    batch: &TrainingBatch,
    adapter: Option<usize>,
) -> Result<Tensor, ModelError> {
    ChunkedHead::logprobs_without_grad(model, batch, adapter)
}

/// Truncated importance weights `[B, R]`, min(exp(old − rollout), cap), without gradient.
pub fn tis_weights(old: &Tensor, rollout: &Tensor, cap: f64) -> Tensor {
    (old - rollout).exp().clamp_max(cap).detach()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: &[&[f32]]) -> Tensor {
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }

    #[test]
    fn the_log_ratio_stats_count_only_response_tokens() {
        let rollout = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
        // Log-ratios 0.5, 0.05, −0.2 on the first row, 0.9 on the second; padding differs by 5.
        let trainer = t(&[&[-0.5, -1.95, -0.7], &[0.6, -4.0, -4.0]]);
        let mask = t(&[&[1.0, 1.0, 1.0], &[1.0, 0.0, 0.0]]);
        let cap: f64 = 2.0; // ln 2 ≈ 0.693: only the 0.9 token is truncated.
        let stats = Mismatch::measure(&trainer, &rollout, &mask, Some(cap));
        close(stats.tokens, 4.0);
        close(stats.log_ratio_mean(), (0.5 + 0.05 - 0.2 + 0.9) / 4.0);
        close(stats.log_ratio_abs_max, 0.9);
        close(stats.fraction_above_threshold(), 3.0 / 4.0);
        assert_eq!(stats.capped_fraction(), Some(1.0 / 4.0));
        let both = stats.merge(Mismatch::measure(&rollout, &rollout, &mask, Some(cap)));
        close(both.tokens, 8.0);
        close(both.log_ratio_mean(), (0.5 + 0.05 - 0.2 + 0.9) / 8.0);
        close(both.log_ratio_abs_max, 0.9);
        assert_eq!(both.capped_fraction(), Some(1.0 / 8.0));
    }

    #[test]
    fn tis_weights_are_the_probability_ratio_capped() {
        let rollout = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
        let trainer = t(&[&[-0.5, -1.95, -0.7], &[0.6, -4.0, -4.0]]);
        let cap = 2.0;
        let weights = tis_weights(&trainer, &rollout, cap);
        for (row, column, want) in [
            (0, 0, 0.5f64.exp()),
            (0, 1, 0.05f64.exp()),
            (0, 2, (-0.2f64).exp()),
            (1, 0, cap),
        ] {
            let found = weights.double_value(&[row, column]);
            assert!(
                (found - want).abs() < 1e-5,
                "[{row}, {column}]: {found} vs {want}"
            );
        }
    }
}
