//! `reinforce_pp_baseline`: REINFORCE++ with a group-mean baseline (Hu et al. 2025), verl's
//! `compute_reinforce_plus_plus_baseline_outcome_advantage`.

use super::estimator::{assert_aligned, Estimator};
use super::grouping::{GroupBy, Grouping, NO_GROUP};
use super::stats::moments;
use super::Sample;

/// Added to the batch variance before the square root when whitening (verl's
/// `masked_whiten`).
const WHITEN_EPSILON: f64 = 1e-8;

/// `reinforce_pp_baseline`: subtract the group's mean, then whiten over the whole batch.
///
/// `reinforce_pp_baseline` groups by prompt with one score per trajectory (its first call's
/// reward); `reinforce_pp_baseline_agent` groups by (prompt, agent) with every call a score
/// (Dr. MAS's `group_by_agent_id = true`). A group of one has baseline 0.
/// x = r − μ_g, then A = (x − mean(x)) / sqrt(var(x) + 1e-8) where mean and the unbiased
/// (n − 1) variance run over every non-padding call, each call weighing one. verl whitens
/// over response tokens instead, so there a call weighs its token count. With fewer than two
/// calls the variance is taken as 0 (verl raises), which gives A = 0. Padding gets 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReinforcePpBaseline {
    /// The statistics group.
    pub by: GroupBy,
}

impl Estimator for ReinforcePpBaseline {
    fn name(&self) -> &'static str {
        match self.by {
            GroupBy::Prompt => "reinforce_pp_baseline",
            GroupBy::PromptAgent => "reinforce_pp_baseline_agent",
        }
    }

    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_aligned(samples, rewards);
        let grouping = Grouping::new(samples, self.by, self.by.outcome_scores());
        let stats = moments(&grouping, rewards);
        let mut centred: Vec<f64> = grouping
            .group
            .iter()
            .zip(rewards)
            .map(|(&g, &r)| match stats.get(g as usize) {
                None => 0.0,
                Some(m) => r - m.baseline().0,
            })
            .collect();
        let live = || {
            grouping
                .group
                .iter()
                .zip(&centred)
                .filter(|(&g, _)| g != NO_GROUP)
        };
        let n = live().count();
        if n == 0 {
            return Ok(centred);
        }
        let mean = live().map(|(_, &x)| x).sum::<f64>() / n as f64;
        let var = if n > 1 {
            live().map(|(_, &x)| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let scale = 1.0 / (var + WHITEN_EPSILON).sqrt();
        for (x, &g) in centred.iter_mut().zip(&grouping.group) {
            *x = if g == NO_GROUP {
                0.0
            } else {
                (*x - mean) * scale
            };
        }
        Ok(centred)
    }
}
