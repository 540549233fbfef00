//! The group-normalising family — `grpo`, `grpo_step`, `drmas`, `drmas_traj`, `dr_grpo` and the
//! first-call variants — as one estimator described by its statistics group and its scores.

use super::estimator::{assert_aligned, Estimator};
use super::grouping::{GroupBy, Scores};
use super::normalise::{group_normalise, NormParams};
use super::trajectory_mean::trajectory_means;
use super::Sample;
use crate::config::LossAggregation;

/// Which values a group's statistics run over, and which value each call is normalised with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Score {
    /// Every call is one score and is normalised with its own reward (per-step statistics).
    EveryCall,
    /// One score per trajectory, the mean of its calls in the group; every one of those calls
    /// is normalised with that mean, so they share one advantage (Dr. MAS's current GRPO).
    TrajectoryMean,
    /// One score per trajectory, its first call's reward in batch order; every call is
    /// normalised with its own reward (verl-agent's GRPO with
    /// `compute_mean_std_cross_steps = false`, and Dr. MAS's before January 2026).
    TrajectoryFirstCall,
}

/// A = (v − μ_g) / (σ_g + ε) (or v − μ_g without `norm_by_std`), with g the call's statistics
/// group and v the value [`Score`] gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct GroupNormalised {
    /// The registry name.
    pub name: &'static str,
    /// The statistics group: the prompt, or the prompt and the calling agent.
    pub by: GroupBy,
    /// What enters the statistics and what each call is normalised with.
    pub score: Score,
    /// Standard-deviation switch and ε.
    pub params: NormParams,
    /// The loss aggregation the method requires, if any.
    pub loss_aggregation: Option<LossAggregation>,
}

impl Estimator for GroupNormalised {
    fn name(&self) -> &'static str {
        self.name
    }

    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_aligned(samples, rewards);
        Ok(match self.score {
            Score::EveryCall => {
                group_normalise(samples, rewards, self.by, Scores::PerCall, &self.params)
            }
            Score::TrajectoryFirstCall => group_normalise(
                samples,
                rewards,
                self.by,
                Scores::PerTrajectory,
                &self.params,
            ),
            Score::TrajectoryMean => group_normalise(
                samples,
                &trajectory_means(samples, rewards, self.by),
                self.by,
                Scores::PerTrajectory,
                &self.params,
            ),
        })
    }

    fn loss_aggregation(&self) -> Option<LossAggregation> {
        self.loss_aggregation
    }
}
