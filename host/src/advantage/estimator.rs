//! The interface every advantage estimator implements.

use std::borrow::Cow;
use std::fmt;

use super::{PerToken, Sample};
use crate::config::LossAggregation;

/// What [`Estimator::token_advantages`] reads: the batch, its rewards, each call's response
/// length, for an estimator with a critic the critic's values, for one with a greedy baseline
/// each call's, and the KL penalty of each response token when the run puts the KL in the
/// reward.
#[derive(Debug, Clone, Copy)]
pub struct TokenInput<'a> {
    /// One sample per agent call.
    pub samples: &'a [Sample],
    /// Each sample's reward, as [`Estimator::advantages`] takes them.
    pub rewards: &'a [f64],
    /// Each call's response tokens.
    pub lengths: &'a [usize],
    /// The critic's value of each response token's state, when the estimator has a critic
    /// ([`Estimator::uses_critic`]).
    pub values: Option<&'a PerToken>,
    /// The reward of the greedy episode of each call's prompt, when the estimator takes one
    /// ([`Estimator::uses_greedy_baseline`]).
    pub baselines: Option<&'a [f64]>,
    /// The anchor text of each call's state (the environment's state key, else its
    /// observation), when the estimator compares them ([`Estimator::uses_anchor_texts`]).
    pub anchors: Option<&'a [&'a str]>,
    /// β·KL(policy ‖ reference) of each response token (`[algorithm.kl_in_reward]`),
    /// subtracted from that token's reward; `None`: no KL in the reward.
    pub kl_penalties: Option<&'a PerToken>,
}

impl TokenInput<'_> {
    /// Each call's reward as one number: its reward less the KL penalties of its tokens (a
    /// response's token rewards summed, as verl scores a response for outcome estimators).
    pub fn call_rewards(&self) -> Cow<'_, [f64]> {
        match self.kl_penalties {
            None => Cow::Borrowed(self.rewards),
            Some(penalties) => Cow::Owned(
                self.rewards
                    .iter()
                    .zip(penalties.rows())
                    .map(|(reward, row)| reward - row.iter().sum::<f64>())
                    .collect(),
            ),
        }
    }

    /// Call `i`'s reward per response token: its reward on the last token, less each token's
    /// KL penalty.
    pub fn token_rewards(&self, i: usize) -> Vec<f64> {
        let length = self.lengths[i];
        let mut rewards = match self.kl_penalties {
            Some(penalties) => penalties.row(i).iter().map(|p| -p).collect(),
            None => vec![0.0; length],
        };
        if let Some(last) = rewards.last_mut() {
            *last += self.rewards[i];
        }
        rewards
    }
}

/// Token-level advantages, the returns a critic learns from when the estimator has one, and
/// what the estimator reports of how it grouped the batch.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEstimate {
    /// One advantage per response token of each call.
    pub advantages: PerToken,
    /// The value targets of the same tokens (`None` without a critic).
    pub returns: Option<PerToken>,
    /// The estimator's own statistics of the batch, by name, recorded as `advantage/NAME`
    /// (GiGPO's step-group size).
    pub diagnostics: Vec<(&'static str, f64)>,
}

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

    /// Advantages `[calls, tokens]`: what the update trains on. An outcome estimator's
    /// per-call advantage ([`Self::advantages`], of [`TokenInput::call_rewards`]) is repeated
    /// over the call's tokens (the default); a token-level estimator (`ppo`, `reinforce_pp`)
    /// computes one per token from [`TokenInput::token_rewards`].
    ///
    /// # Panics
    /// If the slices of `input` differ in length.
    fn token_advantages(&self, input: &TokenInput<'_>) -> anyhow::Result<TokenEstimate> {
        assert_token_input_aligned(input);
        let per_call = self.advantages(input.samples, &input.call_rewards())?;
        Ok(TokenEstimate {
            advantages: PerToken::broadcast(&per_call, input.lengths),
            returns: None,
            diagnostics: Vec::new(),
        })
    }

    /// Whether [`Self::token_advantages`] needs a critic's values (the trainer then keeps one
    /// per worker group and trains it on the returns).
    fn uses_critic(&self) -> bool {
        false
    }

    /// Whether [`Self::token_advantages`] needs a greedy baseline (ReMax): the trainer then
    /// rolls out each prompt of the batch once more, greedily, and passes its reward.
    fn uses_greedy_baseline(&self) -> bool {
        false
    }

    /// Whether [`Self::token_advantages`] reads each call's anchor text (GiGPO with
    /// similarity-based anchor states).
    fn uses_anchor_texts(&self) -> bool {
        false
    }

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

/// Panics unless a token-level input has exactly one reward and one length per sample (see
/// [`assert_aligned`]).
pub(super) fn assert_token_input_aligned(input: &TokenInput<'_>) {
    assert_aligned(input.samples, input.rewards);
    assert_eq!(
        input.samples.len(),
        input.lengths.len(),
        "one length per call"
    );
    if let Some(penalties) = input.kl_penalties {
        assert_eq!(
            penalties.lengths(),
            input.lengths,
            "one KL penalty per response token"
        );
    }
    if let Some(anchors) = input.anchors {
        assert_eq!(anchors.len(), input.samples.len(), "one anchor per call");
    }
    if let Some(baselines) = input.baselines {
        assert_eq!(
            baselines.len(),
            input.samples.len(),
            "one baseline per call"
        );
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
