//! `grpo_passk`: the Pass@k advantage (Chen et al. 2025, arXiv 2503.19595), verl's
//! `compute_grpo_passk_outcome_advantage` as Dr. MAS runs it on multi-agent batches.

use super::estimator::{assert_aligned, Estimator};
use super::grouping::{GroupBy, Grouping};
use super::normalise::NormParams;
use super::stats::moments;
use super::Sample;

/// `grpo_passk`: within each group only the best score is rewarded, by its margin over the
/// runner-up; every other call gets 0.
///
/// `grpo_passk` groups by prompt with one score per trajectory — the trajectory's first call in
/// batch order, which is also the only call the advantage goes to (as in Dr. MAS); `grpo_passk_agent`
/// groups by (prompt, agent) with every call a score, and the best call gets it.
/// A = r_max − r_second (÷ (σ_g + ε) with `norm_by_std`, σ the unbiased std of the group's
/// scores). On a tie for the best the margin is 0 and the first best in batch order is the one
/// "rewarded" with 0. A group with a single score has no runner-up and gets 0 (verl raises).
/// Padding gets 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct GrpoPassk {
    /// The statistics group.
    pub by: GroupBy,
    /// Standard-deviation switch and ε.
    pub params: NormParams,
}

/// The best and second-best score of one group, and the sample that holds the best.
#[derive(Debug, Clone, Copy)]
struct Podium {
    best: f64,
    best_sample: u32,
    second: f64,
}

impl Estimator for GrpoPassk {
    fn name(&self) -> &'static str {
        match self.by {
            GroupBy::Prompt => "grpo_passk",
            GroupBy::PromptAgent => "grpo_passk_agent",
        }
    }

    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_aligned(samples, rewards);
        let grouping = Grouping::new(samples, self.by, self.by.outcome_scores());
        let stats = moments(&grouping, rewards);
        let mut podiums = vec![
            Podium {
                best: f64::NEG_INFINITY,
                best_sample: u32::MAX,
                second: f64::NEG_INFINITY
            };
            grouping.len
        ];
        for &i in &grouping.scorers {
            let podium = &mut podiums[grouping.group[i as usize] as usize];
            let score = rewards[i as usize];
            if score > podium.best {
                podium.second = podium.best;
                podium.best = score;
                podium.best_sample = i;
            } else if score > podium.second {
                podium.second = score;
            }
        }
        let mut advantages = vec![0.0; samples.len()];
        for (podium, m) in podiums.iter().zip(&stats) {
            if m.count < 2 {
                continue;
            }
            let margin = podium.best - podium.second;
            advantages[podium.best_sample as usize] = if self.params.norm_by_std {
                margin / (m.std + self.params.epsilon)
            } else {
                margin
            };
        }
        Ok(advantages)
    }
}
