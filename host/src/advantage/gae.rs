//! `ppo`: generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438) over a
//! critic's per-token values, as verl's and the Dr. MAS code's `compute_gae_advantage_return`
//! computes it, then whitened over the batch — or per agent, Dr. MAS's idea applied to PPO.

use anyhow::bail;
use serde::Deserialize;

use super::estimator::{assert_token_input_aligned, Estimator, TokenEstimate, TokenInput};
use super::whiten::{whiten, Whiten};
use super::{PerToken, Sample};

/// Parameters of `ppo`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GaeParams {
    /// γ: the discount per token.
    pub gamma: f64,
    /// λ: GAE's bias–variance trade-off (1: Monte-Carlo returns minus the value; 0: one-step
    /// temporal differences).
    pub lam: f64,
    /// Over which tokens the advantages are whitened.
    pub whiten: Whiten,
}

impl Default for GaeParams {
    fn default() -> Self {
        Self {
            gamma: 1.0,
            lam: 1.0,
            whiten: Whiten::Batch,
        }
    }
}

impl GaeParams {
    /// Rejects values outside their ranges.
    pub(super) fn validate(&self) -> Result<(), String> {
        for (name, value) in [("gamma", self.gamma), ("lam", self.lam)] {
            if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
                return Err(format!("{name} must be in [0, 1], got {value}"));
            }
        }
        Ok(())
    }
}

/// PPO's advantages from a critic: each call is one sequence whose reward is its own
/// (penalised) reward on its last token, less each token's KL penalty when the KL is in the
/// reward ([`TokenInput::token_rewards`]); with the critic's values `V_t` of each token's state,
///
/// δ_t = r_t + γ·V_{t+1} − V_t (V after the last token is 0),
/// A_t = δ_t + γλ·A_{t+1}, returns R_t = A_t + V_t,
///
/// then A is whitened, (A − mean) / √(var + 1e-8) with the unbiased variance, over the
/// tokens [`Whiten`] says (padding samples get 0 and stay out of the statistics). The returns
/// are the critic's targets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Gae {
    /// γ, λ and the whitening.
    pub params: GaeParams,
}

impl Estimator for Gae {
    fn name(&self) -> &str {
        "ppo"
    }

    fn advantages(&self, _samples: &[Sample], _rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        bail!(
            "`ppo` gives one advantage per token from its critic's values; it has no per-call \
             form"
        )
    }

    fn token_advantages(&self, input: &TokenInput<'_>) -> anyhow::Result<TokenEstimate> {
        assert_token_input_aligned(input);
        let Some(values) = input.values else {
            bail!("`ppo` needs its critic's values, and none were given")
        };
        if values.lengths() != input.lengths {
            bail!("the critic's values are not one per response token of each call");
        }
        let mut advantages = Vec::with_capacity(values.len());
        let mut returns = Vec::with_capacity(values.len());
        for (i, sample) in input.samples.iter().enumerate() {
            let (own_advantages, own_returns) = gae(
                values.row(i),
                &input.token_rewards(i),
                self.params.gamma,
                self.params.lam,
            );
            advantages.push(if sample.padding {
                vec![0.0; own_advantages.len()]
            } else {
                own_advantages
            });
            returns.push(own_returns);
        }
        let mut advantages = PerToken::from_rows(advantages);
        whiten(&mut advantages, input.samples, self.params.whiten);
        Ok(TokenEstimate {
            advantages,
            returns: Some(PerToken::from_rows(returns)),
            diagnostics: Vec::new(),
        })
    }

    fn uses_critic(&self) -> bool {
        true
    }
}

/// One sequence's GAE advantages and returns from its tokens' `rewards` and `values`.
fn gae(values: &[f64], rewards: &[f64], gamma: f64, lam: f64) -> (Vec<f64>, Vec<f64>) {
    let mut advantages = vec![0.0; values.len()];
    let mut next_value = 0.0;
    let mut next_advantage = 0.0;
    for t in (0..values.len()).rev() {
        let delta = rewards[t] + gamma * next_value - values[t];
        next_advantage = delta + gamma * lam * next_advantage;
        advantages[t] = next_advantage;
        next_value = values[t];
    }
    let returns = advantages.iter().zip(values).map(|(a, v)| a + v).collect();
    (advantages, returns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(agent: u16) -> Sample {
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
            padding: false,
        }
    }

    #[test]
    fn gae_by_hand() {
        // V = [0.5, 0.2, 0.4], reward 1 on the last token, γ = 0.9, λ = 0.8:
        // δ2 = 1 − 0.4 = 0.6;               A2 = 0.6
        // δ1 = 0.9·0.4 − 0.2 = 0.16;        A1 = 0.16 + 0.72·0.6 = 0.592
        // δ0 = 0.9·0.2 − 0.5 = −0.32;       A0 = −0.32 + 0.72·0.592 = 0.10624
        let (advantages, returns) = gae(&[0.5, 0.2, 0.4], &[0.0, 0.0, 1.0], 0.9, 0.8);
        let expected = [0.10624, 0.592, 0.6];
        for (got, want) in advantages.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{advantages:?}");
        }
        for ((r, a), v) in returns.iter().zip(&expected).zip([0.5, 0.2, 0.4]) {
            assert!((r - (a + v)).abs() < 1e-12);
        }
    }

    #[test]
    fn with_gamma_and_lambda_one_the_advantage_is_the_reward_minus_the_value() {
        let (advantages, returns) = gae(&[0.1, -0.3, 0.7, 0.2], &[0.0, 0.0, 0.0, 2.0], 1.0, 1.0);
        for (a, v) in advantages.iter().zip([0.1, -0.3, 0.7, 0.2]) {
            assert!((a - (2.0 - v)).abs() < 1e-12);
        }
        assert!(returns.iter().all(|r| (r - 2.0).abs() < 1e-12));
    }

    #[test]
    fn a_kl_penalty_in_the_reward_is_each_tokens_own_reward() {
        // V = 0, γ = λ = 1: each token's advantage is the sum of the rewards from it on,
        // [−0.1, −0.2, 1 − 0.3] → [0.4, 0.5, 0.7].
        let samples = [sample(0)];
        let values = PerToken::from_rows([vec![0.0; 3]]);
        let penalties = PerToken::from_rows([vec![0.1, 0.2, 0.3]]);
        let estimate = Gae {
            params: GaeParams {
                whiten: Whiten::None,
                ..GaeParams::default()
            },
        }
        .token_advantages(&TokenInput {
            samples: &samples,
            rewards: &[1.0],
            lengths: &[3],
            values: Some(&values),
            baselines: None,
            anchors: None,
            kl_penalties: Some(&penalties),
        })
        .expect("gae");
        for (got, want) in estimate.advantages.values().iter().zip([0.4, 0.5, 0.7]) {
            assert!((got - want).abs() < 1e-12, "{:?}", estimate.advantages);
        }
        assert_eq!(estimate.returns.expect("returns"), estimate.advantages);
    }

    #[test]
    fn whitening_over_the_batch_and_per_agent() {
        let samples = [sample(0), sample(0), sample(1)];
        let values = PerToken::from_rows([vec![0.0, 0.0], vec![0.0], vec![0.0, 0.0]]);
        let rewards = [1.0, 3.0, 10.0];
        let estimate = |whiten| {
            Gae {
                params: GaeParams {
                    gamma: 1.0,
                    lam: 1.0,
                    whiten,
                },
            }
            .token_advantages(&TokenInput {
                samples: &samples,
                rewards: &rewards,
                lengths: &[2, 1, 2],
                values: Some(&values),
                baselines: None,
                anchors: None,
                kl_penalties: None,
            })
            .expect("gae")
        };
        // Raw: [1, 1], [3], [10, 10]; returns equal them (V = 0).
        let raw = estimate(Whiten::None);
        assert_eq!(raw.advantages.values(), &[1.0, 1.0, 3.0, 10.0, 10.0]);
        assert_eq!(
            raw.returns.expect("returns").values(),
            raw.advantages.values()
        );
        // Batch: mean 5, unbiased var ((16+16+4+25+25)/4) = 21.5.
        let batch = estimate(Whiten::Batch);
        let scale = 1.0 / (21.5f64 + 1e-8).sqrt();
        let expected = [-4.0, -4.0, -2.0, 5.0, 5.0].map(|d| d * scale);
        for (got, want) in batch.advantages.values().iter().zip(expected) {
            assert!((got - want).abs() < 1e-12);
        }
        // Per agent: agent 0's tokens [1, 1, 3] (mean 5/3, var 4/3); agent 1's two equal
        // tokens centre to 0.
        let agent = estimate(Whiten::Agent);
        let scale = 1.0 / (4.0f64 / 3.0 + 1e-8).sqrt();
        let expected = [-2.0 / 3.0, -2.0 / 3.0, 4.0 / 3.0].map(|d| d * scale);
        for (got, want) in agent.advantages.values()[..3].iter().zip(expected) {
            assert!((got - want).abs() < 1e-9);
        }
        assert_eq!(&agent.advantages.values()[3..], &[0.0, 0.0]);
    }

    #[test]
    fn padding_gets_zero_and_stays_out_of_the_statistics() {
        let mut padding = sample(0);
        padding.padding = true;
        let samples = [sample(0), sample(0), padding];
        let values = PerToken::from_rows([vec![0.0], vec![0.0], vec![0.0, 0.0]]);
        let estimate = Gae {
            params: GaeParams::default(),
        }
        .token_advantages(&TokenInput {
            samples: &samples,
            rewards: &[0.0, 2.0, 100.0],
            lengths: &[1, 1, 2],
            values: Some(&values),
            baselines: None,
            anchors: None,
            kl_penalties: None,
        })
        .expect("gae");
        let scale = 1.0 / (2.0f64 + 1e-8).sqrt();
        let values = estimate.advantages.values();
        assert!((values[0] + scale).abs() < 1e-12 && (values[1] - scale).abs() < 1e-12);
        assert_eq!(&values[2..], &[0.0, 0.0]);
    }

    #[test]
    fn values_of_the_wrong_shape_or_none_are_errors() {
        let gae = Gae {
            params: GaeParams::default(),
        };
        let samples = [sample(0)];
        let input = |values| TokenInput {
            samples: &samples,
            rewards: &[1.0],
            lengths: &[2],
            values,
            baselines: None,
            anchors: None,
            kl_penalties: None,
        };
        let none = gae.token_advantages(&input(None)).expect_err("no values");
        assert!(none.to_string().contains("critic"), "{none}");
        let short = PerToken::from_rows([vec![0.0]]);
        assert!(gae.token_advantages(&input(Some(&short))).is_err());
        assert!(gae.advantages(&samples, &[1.0]).is_err());
    }
}
