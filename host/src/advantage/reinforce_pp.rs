//! `reinforce_pp`: REINFORCE++ (Hu 2025, arXiv 2501.03262) without a baseline, as the Dr. MAS
//! code's `compute_reinforce_plus_plus_outcome_advantage` computes it — each token's discounted
//! return of its call's reward, whitened over the batch's response tokens (or each agent's).

use anyhow::bail;
use serde::Deserialize;

use super::estimator::{assert_token_input_aligned, Estimator, TokenEstimate, TokenInput};
use super::whiten::{whiten, Whiten};
use super::{PerToken, Sample};

/// Parameters of `reinforce_pp`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReinforcePpParams {
    /// γ: the discount per token between a token and its call's last, where the reward is.
    pub gamma: f64,
    /// Over which tokens the returns are whitened.
    pub whiten: Whiten,
}

impl Default for ReinforcePpParams {
    fn default() -> Self {
        Self {
            gamma: 1.0,
            whiten: Whiten::Batch,
        }
    }
}

impl ReinforcePpParams {
    /// Rejects a γ outside [0, 1].
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(self.gamma.is_finite() && (0.0..=1.0).contains(&self.gamma)) {
            return Err(format!("gamma must be in [0, 1], got {}", self.gamma));
        }
        Ok(())
    }
}

/// Each call is one sequence whose reward is its own (penalised) reward on its last token, less
/// each token's KL penalty when the KL is in the reward ([`TokenInput::token_rewards`]): token
/// `t` returns G_t = r_t + γ·G_{t+1} (γ^(T−1−t)·r without KL), and the returns, whitened over
/// the tokens [`Whiten`] says (padding samples get 0 and stay out of the statistics), are the
/// advantages. No baseline but the whitening's mean; no critic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ReinforcePp {
    /// γ and the whitening.
    pub params: ReinforcePpParams,
}

impl Estimator for ReinforcePp {
    fn name(&self) -> &str {
        "reinforce_pp"
    }

    fn advantages(&self, _samples: &[Sample], _rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        bail!("`reinforce_pp` gives one advantage per token; it has no per-call form")
    }

    fn token_advantages(&self, input: &TokenInput<'_>) -> anyhow::Result<TokenEstimate> {
        assert_token_input_aligned(input);
        let rows = input.samples.iter().enumerate().map(|(i, sample)| {
            if sample.padding {
                vec![0.0; input.lengths[i]]
            } else {
                discounted_returns(&input.token_rewards(i), self.params.gamma)
            }
        });
        let mut advantages = PerToken::from_rows(rows);
        whiten(&mut advantages, input.samples, self.params.whiten);
        Ok(TokenEstimate {
            advantages,
            returns: None,
            diagnostics: Vec::new(),
        })
    }
}

/// Each token's discounted return G_t = r_t + γ·G_{t+1} from its tokens' `rewards`.
pub(super) fn discounted_returns(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut running = 0.0;
    let mut returns: Vec<f64> = rewards
        .iter()
        .rev()
        .map(|reward| {
            running = reward + gamma * running;
            running
        })
        .collect();
    returns.reverse();
    returns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(agent: u16, padding: bool) -> Sample {
        Sample {
            uid: 0,
            trajectory: 0,
            agent,
            worker_group: 0,
            reward: 0.0,
            step: 0,
            step_reward: 0.0,
            call_reward: None,
            state: 0,
            valid: true,
            padding,
        }
    }

    fn estimate(params: ReinforcePpParams, samples: &[Sample], rewards: &[f64]) -> Vec<f64> {
        let lengths: Vec<usize> = (0..samples.len()).map(|i| [3, 1, 2][i % 3]).collect();
        let estimate = ReinforcePp { params }
            .token_advantages(&TokenInput {
                samples,
                rewards,
                lengths: &lengths,
                values: None,
                baselines: None,
                anchors: None,
                kl_penalties: None,
            })
            .expect("reinforce_pp");
        assert!(estimate.returns.is_none(), "no critic, no returns");
        estimate.advantages.values().to_vec()
    }

    #[test]
    fn discounted_returns_by_hand() {
        assert_eq!(
            discounted_returns(&[0.0, 0.0, 2.0], 0.5),
            vec![0.5, 1.0, 2.0]
        );
        assert_eq!(discounted_returns(&[-1.0], 0.9), vec![-1.0]);
        assert!(discounted_returns(&[], 0.9).is_empty());
        // A KL penalty on each token: G = [−0.25 + 0.5·0.375, −0.5 + 0.5·1.75, 1.75].
        assert_eq!(
            discounted_returns(&[-0.25, -0.5, 1.75], 0.5),
            vec![-0.0625, 0.375, 1.75]
        );
    }

    #[test]
    fn returns_are_whitened_over_the_batchs_tokens_or_each_agents() {
        let samples = [sample(0, false), sample(0, false), sample(1, false)];
        let rewards = [1.0, 3.0, -2.0];
        let raw = |gamma| ReinforcePpParams {
            gamma,
            whiten: Whiten::None,
        };
        // Lengths 3, 1, 2; γ = 0.5: [0.25, 0.5, 1], [3], [−1, −2].
        assert_eq!(
            estimate(raw(0.5), &samples, &rewards),
            vec![0.25, 0.5, 1.0, 3.0, -1.0, -2.0]
        );
        // γ = 1 over the batch: tokens [1, 1, 1, 3, −2, −2], mean 1/3, unbiased var
        // (3·4/9 + 64/9 + 2·49/9) / 5 = 174/45.
        let batch = estimate(ReinforcePpParams::default(), &samples, &rewards);
        let scale = 1.0 / (174.0f64 / 45.0 + 1e-8).sqrt();
        let expected = [2.0, 2.0, 2.0, 8.0, -7.0, -7.0].map(|d| d / 3.0 * scale);
        for (got, want) in batch.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{batch:?}");
        }
        // Per agent: agent 1's two equal tokens centre to 0.
        let agent = estimate(
            ReinforcePpParams {
                gamma: 1.0,
                whiten: Whiten::Agent,
            },
            &samples,
            &rewards,
        );
        assert_eq!(&agent[4..], &[0.0, 0.0]);
    }

    #[test]
    fn padding_gets_zero_and_stays_out_of_the_statistics() {
        let samples = [sample(0, false), sample(0, false), sample(0, true)];
        let with_padding = estimate(ReinforcePpParams::default(), &samples, &[1.0, 3.0, 100.0]);
        let without = estimate(ReinforcePpParams::default(), &samples[..2], &[1.0, 3.0]);
        assert_eq!(&with_padding[..4], &without[..]);
        assert_eq!(&with_padding[4..], &[0.0, 0.0]);
    }

    #[test]
    fn gamma_outside_the_unit_interval_is_refused() {
        for gamma in [-0.1, 1.5, f64::NAN] {
            let params = ReinforcePpParams {
                gamma,
                whiten: Whiten::Batch,
            };
            assert!(params.validate().is_err(), "{gamma}");
        }
    }
}
