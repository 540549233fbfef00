//! `remax`: ReMax (Li et al. 2023), verl's `compute_remax_outcome_advantage`: a call's baseline
//! is the reward of its prompt's greedy episode, which the trainer rolls out beside the sampled
//! ones.

use anyhow::bail;

use super::estimator::{assert_token_input_aligned, Estimator, TokenEstimate, TokenInput};
use super::per_token::PerToken;
use super::reinforce_pp::discounted_returns;
use super::Sample;

/// `remax`: each response token's advantage is its return to go (the call's reward less the KL
/// penalties of this and later tokens when the KL is in the reward) less the greedy baseline
/// b of the call's prompt; without the KL in the reward every token of a call gets r − b. No
/// normalisation. Padding gets 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Remax;

impl Estimator for Remax {
    fn name(&self) -> &'static str {
        "remax"
    }

    fn advantages(&self, _samples: &[Sample], _rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        bail!("`remax` needs each prompt's greedy baseline, which only its token form is given")
    }

    fn token_advantages(&self, input: &TokenInput<'_>) -> anyhow::Result<TokenEstimate> {
        assert_token_input_aligned(input);
        let Some(baselines) = input.baselines else {
            bail!("`remax` needs the greedy episodes' rewards, and none were given")
        };
        let rows = input.samples.iter().enumerate().map(|(i, sample)| {
            if sample.padding {
                return vec![0.0; input.lengths[i]];
            }
            let mut returns = discounted_returns(&input.token_rewards(i), 1.0);
            for value in &mut returns {
                *value -= baselines[i];
            }
            returns
        });
        Ok(TokenEstimate {
            advantages: PerToken::from_rows(rows),
            returns: None,
            diagnostics: Vec::new(),
        })
    }

    fn uses_greedy_baseline(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advantage::tests::call;

    fn sample(uid: u32, padding: bool) -> Sample {
        Sample {
            padding,
            ..call(uid, 0, 0, 0.0)
        }
    }

    #[test]
    fn each_token_gets_its_return_to_go_less_the_greedy_reward() {
        let samples = [sample(0, false), sample(1, false), sample(1, true)];
        let rewards = [1.0, 0.5, 0.7];
        let lengths = [2, 3, 2];
        let baselines = [0.25, 1.0, 1.0];
        let input = |kl_penalties| TokenInput {
            samples: &samples,
            rewards: &rewards,
            lengths: &lengths,
            values: None,
            baselines: Some(&baselines),
            anchors: None,
            kl_penalties,
        };
        let plain = Remax.token_advantages(&input(None)).expect("remax");
        assert_eq!(plain.advantages.row(0), [0.75, 0.75]);
        assert_eq!(plain.advantages.row(1), [-0.5, -0.5, -0.5]);
        assert_eq!(plain.advantages.row(2), [0.0, 0.0], "padding");
        assert!(plain.returns.is_none());
        // verl: returns = reversed cumulative sum of the token rewards (−KL, reward on the last
        // token), less the baseline on every token.
        let kl = PerToken::from_rows([vec![0.125, 0.25], vec![0.5, 0.0, 0.25], vec![0.0, 0.0]]);
        let with_kl = Remax.token_advantages(&input(Some(&kl))).expect("remax");
        assert_eq!(with_kl.advantages.row(0), [1.0 - 0.375 - 0.25, 0.75 - 0.25]);
        assert_eq!(
            with_kl.advantages.row(1),
            [0.5 - 0.75 - 1.0, 0.5 - 0.25 - 1.0, 0.25 - 1.0]
        );
    }

    #[test]
    fn without_baselines_it_refuses() {
        let samples = [sample(0, false)];
        let error = Remax
            .token_advantages(&TokenInput {
                samples: &samples,
                rewards: &[1.0],
                lengths: &[1],
                values: None,
                baselines: None,
                anchors: None,
                kl_penalties: None,
            })
            .expect_err("no baselines");
        assert!(error.to_string().contains("greedy"), "{error}");
        assert!(Remax.uses_greedy_baseline());
    }
}
