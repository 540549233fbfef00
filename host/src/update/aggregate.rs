//! Reducing per-token values to one number, as verl's `agg_loss` does — over the whole
//! mini-batch, whatever micro-batches it is split into.

use tch::{Kind, Tensor};

use crate::config::LossAggregation;
use crate::rollout::AgentCall;

/// The sizes of the mini-batch (every call one optimizer step trains on) that a micro-batch
/// belongs to.
///
/// A micro-batch's sums are divided by these totals rather than by its own sizes, so the
/// micro-batches' losses (and gradients) add up to the mini-batch's taken at once, whatever
/// the micro-batch size or how calls are grouped into micro-batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchTotals {
    /// Calls (sequences) in the mini-batch.
    pub sequences: f64,
    /// Response tokens in the mini-batch.
    pub tokens: f64,
}

impl BatchTotals {
    /// The totals of the calls `indices` of `calls`, a mini-batch.
    pub fn of_calls(calls: &[&AgentCall], indices: &[usize]) -> Self {
        Self {
            sequences: indices.len() as f64,
            tokens: indices
                .iter()
                .map(|&i| calls[i].response.len())
                .sum::<usize>() as f64,
        }
    }

    /// The totals of a batch trained at once, from its response mask `[B, T]`.
    pub fn of_mask(mask: &Tensor) -> Self {
        Self {
            sequences: mask.size()[0] as f64,
            tokens: mask.sum(Kind::Double).double_value(&[]),
        }
    }
}

/// How per-token values reduce to one number: the mode, the constant of the `-norm` mode, and
/// the mini-batch totals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aggregation {
    /// The reduction.
    pub mode: LossAggregation,
    /// The constant `seq-mean-token-sum-norm` divides by (Dr. GRPO's fixed length; verl's
    /// `loss_scale_factor`); `None` takes the micro-batch's padded response length, as verl.
    pub scale_factor: Option<f64>,
    /// The mini-batch's sizes.
    pub totals: BatchTotals,
}

impl Aggregation {
    /// Reduces `values` [B, T] over the response tokens marked by `mask` [B, T] (1.0 / 0.0),
    /// with N the mini-batch's sequences and M its response tokens:
    ///
    /// - `token-mean`: Σ v·m / M — every token of the mini-batch weighs the same;
    /// - `seq-mean-token-sum`: Σ over sequences of Σ v·m, / N;
    /// - `seq-mean-token-mean`: Σ over sequences of their token mean, / N;
    /// - `seq-mean-token-sum-norm`: Σ v·m / (N · C) with C the fixed `scale_factor` (Dr. GRPO).
    ///
    /// Sequences without a response token (an empty mask row) count as zero, and empty totals
    /// give 0 rather than NaN.
    pub fn reduce(&self, values: &Tensor, mask: &Tensor) -> Tensor {
        let masked = values * mask;
        let kind = masked.kind();
        let sequences = self.totals.sequences.max(1.0);
        match self.mode {
            LossAggregation::TokenMean => masked.sum(kind) / self.totals.tokens.max(1.0),
            LossAggregation::SeqMeanTokenSum => masked.sum(kind) / sequences,
            LossAggregation::SeqMeanTokenMean => {
                let tokens = mask
                    .sum_dim_intlist([1i64].as_slice(), false, kind)
                    .clamp_min(1.0);
                (masked.sum_dim_intlist([1i64].as_slice(), false, kind) / tokens).sum(kind)
                    / sequences
            }
            LossAggregation::SeqMeanTokenSumNorm => {
                let constant = self.scale_factor.unwrap_or(mask.size()[1] as f64).max(1.0);
                masked.sum(kind) / (sequences * constant)
            }
        }
    }
}
