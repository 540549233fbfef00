//! `rloo`: REINFORCE leave-one-out (Ahmadian et al. 2024), verl's
//! `compute_rloo_outcome_advantage`.

use super::estimator::{assert_aligned, Estimator};
use super::grouping::{GroupBy, Grouping};
use super::stats::moments;
use super::Sample;

/// `rloo`: each call's baseline is the mean of the *other* scores of its group.
///
/// `rloo` groups by prompt with one score per trajectory (its first call's reward); `rloo_agent`
/// groups by (prompt, agent) with every call a score (Dr. MAS's `group_by_agent_id = true`).
/// With n scores of mean μ: A = r·n/(n−1) − μ·n/(n−1) = r − mean of the others. A group with a
/// single score keeps A = r (verl leaves the score untouched). Padding gets 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rloo {
    /// The statistics group.
    pub by: GroupBy,
}

impl Estimator for Rloo {
    fn name(&self) -> &'static str {
        match self.by {
            GroupBy::Prompt => "rloo",
            GroupBy::PromptAgent => "rloo_agent",
        }
    }

    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_aligned(samples, rewards);
        let grouping = Grouping::new(samples, self.by, self.by.outcome_scores());
        let stats = moments(&grouping, rewards);
        Ok(grouping
            .group
            .iter()
            .zip(rewards)
            .map(|(&g, &r)| match stats.get(g as usize) {
                None => 0.0,
                Some(m) if m.count > 1 => {
                    let scale = f64::from(m.count) / f64::from(m.count - 1);
                    r * scale - m.mean * scale
                }
                Some(_) => r,
            })
            .collect())
    }
}
