//! The interface every advantage estimator implements.

use std::fmt;

use super::Sample;
use crate::config::LossAggregation;

/// Turns the rewards of a batch into one advantage per sample: a built-in estimator, or a
/// plugin's behind [`PluginEstimator`](crate::plugins::PluginEstimator).
///
/// Implementations are pure functions of their input (no state between batches), so one
/// instance can serve every worker group from any thread.
pub trait Estimator: Send + Sync + fmt::Debug {
    /// The name a run file gives it (`grpo`, `drmas`, a plugin's name), for logs and messages.
    fn name(&self) -> &str;

    /// One advantage per sample, in the order of `samples`.
    ///
    /// `rewards[i]` is the reward of `samples[i]` after the invalid-action penalty (see
    /// [`Penalty::apply`](super::Penalty::apply)). Padding samples never enter a statistic and
    /// get advantage 0. Built-in estimators never fail; a plugin's fails when its code does or
    /// its answer is not one finite advantage per sample.
    ///
    /// # Panics
    /// If `samples` and `rewards` differ in length.
    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>>;

    /// Where a plugin's estimator comes from (its plugin and library), for the plan's summary;
    /// `None` for the built-in ones.
    fn origin(&self) -> Option<&str> {
        None
    }

    /// The loss aggregation the method is defined with, when it is part of the method (Dr.
    /// GRPO's `seq-mean-token-sum-norm`); the run is refused with another one.
    fn loss_aggregation(&self) -> Option<LossAggregation> {
        None
    }
}

/// Panics unless there is exactly one reward per sample: a mismatch is a caller bug that would
/// otherwise silently pair rewards with the wrong calls.
pub(super) fn assert_aligned(samples: &[Sample], rewards: &[f64]) {
    assert_eq!(
        samples.len(),
        rewards.len(),
        "advantage estimation needs one reward per sample"
    );
}
