//! The GRPO normalisation shared by the group-normalising family (`grpo`, `grpo_step`, `drmas`,
//! `drmas_traj`, ...): its members differ only in how they group samples and which values count
//! as scores.

use serde::Deserialize;

use super::grouping::{GroupBy, Grouping, Scores};
use super::stats::moments;
use super::Sample;

/// Parameters of the group-normalising estimators (`grpo`, `grpo_step`, `drmas`, `drmas_traj`,
/// and the first-call variants) and of `grpo_passk`, which divides its margin the same way.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NormParams {
    /// Divide by the group's standard deviation (GRPO); `false` only subtracts the mean
    /// (Dr. GRPO). verl: `norm_adv_by_std_in_grpo`.
    pub norm_by_std: bool,
    /// Added to σ before dividing, so a group of equal rewards gives 0, not NaN.
    pub epsilon: f64,
}

impl Default for NormParams {
    fn default() -> Self {
        Self {
            norm_by_std: true,
            epsilon: 1e-6,
        }
    }
}

impl NormParams {
    /// Rejects an ε that is not finite and positive: with ε = 0 a group of equal rewards
    /// divides 0 by 0.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.epsilon.is_finite() && self.epsilon > 0.0 {
            Ok(())
        } else {
            Err(format!(
                "epsilon must be finite and > 0, got {}",
                self.epsilon
            ))
        }
    }
}

/// A = (r − μ_g) / (σ_g + ε) (or r − μ_g without `norm_by_std`) with each sample's own reward
/// r and its group's moments; a group with one score uses μ = 0, σ = 1. Padding gets 0.
pub(super) fn group_normalise(
    samples: &[Sample],
    rewards: &[f64],
    by: GroupBy,
    scores: Scores,
    params: &NormParams,
) -> Vec<f64> {
    let grouping = Grouping::new(samples, by, scores);
    let baselines: Vec<(f64, f64)> = moments(&grouping, rewards)
        .iter()
        .map(|m| m.baseline())
        .collect();
    grouping
        .group
        .iter()
        .zip(rewards)
        .map(|(&g, &r)| match baselines.get(g as usize) {
            None => 0.0,
            Some(&(mean, std)) if params.norm_by_std => (r - mean) / (std + params.epsilon),
            Some(&(mean, _)) => r - mean,
        })
        .collect()
}
