//! `gigpo` and `gigpo_drmas`: Group-in-Group Policy Optimization (Feng et al. 2025, arXiv
//! 2505.10978), as verl-agent and the Dr. MAS code compute it: an episode-level group advantage
//! plus ω times a step-level one, whose groups are the calls that acted on the same
//! environment state (its anchor state) within a prompt group.

use std::collections::HashMap;

use anyhow::bail;
use serde::Deserialize;

use super::estimator::{
    assert_aligned, assert_token_input_aligned, Estimator, TokenEstimate, TokenInput,
};
use super::grouping::GroupBy;
use super::normalise::{group_normalise, NormParams};
use super::penalty::unshaped_reward;
use super::similarity::alike;
use super::trajectory_mean::trajectory_means;
use super::{PerToken, Sample};

/// How the episode level scores a trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeScore {
    /// The mean of its calls' penalised rewards, shared by its calls (as `grpo`).
    TrajectoryMean,
    /// Its first call's, each call normalised with its own reward (verl-agent's and Dr. MAS's
    /// `episode_norm_reward`; meets the δ/ε artifact of `grpo_first_call`).
    FirstCall,
}

/// Parameters of `gigpo` and `gigpo_drmas`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GigpoParams {
    /// ω: the weight of the step-level advantage (`step_advantage_w`).
    pub step_advantage_w: f64,
    /// γ: the discount of the step returns the step level compares.
    pub gamma: f64,
    /// Divide both levels by their group's σ + ε (`mode = "mean_std_norm"`); `false` only
    /// centres (`"mean_norm"`).
    pub norm_by_std: bool,
    /// Added to σ before dividing.
    pub epsilon: f64,
    /// How the episode level scores a trajectory.
    pub episode_score: EpisodeScore,
    /// With a threshold in (0, 1), the step level's anchor states are clusters of alike
    /// anchor texts (difflib's ratio at least this), not equal state keys (the Dr. MAS code's
    /// `enable_similarity` and `similarity_thresh`).
    pub similarity_thresh: Option<f64>,
}

impl Default for GigpoParams {
    fn default() -> Self {
        Self {
            step_advantage_w: 1.0,
            gamma: 0.95,
            norm_by_std: true,
            epsilon: 1e-6,
            episode_score: EpisodeScore::TrajectoryMean,
            similarity_thresh: None,
        }
    }
}

impl GigpoParams {
    /// Rejects values outside their ranges.
    pub(super) fn validate(&self) -> Result<(), String> {
        NormParams {
            norm_by_std: self.norm_by_std,
            epsilon: self.epsilon,
        }
        .validate()?;
        if !(self.gamma.is_finite() && (0.0..=1.0).contains(&self.gamma)) {
            return Err(format!("gamma must be in [0, 1], got {}", self.gamma));
        }
        if let Some(thresh) = self.similarity_thresh {
            if !(thresh > 0.0 && thresh < 1.0) {
                return Err(format!(
                    "similarity_thresh must be in (0, 1) (leave it out to group equal states), \
                     got {thresh}"
                ));
            }
        }
        if !self.step_advantage_w.is_finite() {
            return Err(format!(
                "step_advantage_w must be finite, got {}",
                self.step_advantage_w
            ));
        }
        Ok(())
    }
}

/// A = A_episode + ω · A_step.
///
/// - Episode level: groups by prompt (`gigpo`) or by (prompt, agent) (`gigpo_drmas`), scored as
///   [`EpisodeScore`] says under the prompt grouping; per agent every call of the agent is a
///   score (Dr. MAS's `group_by_agent_id = true`).
/// - Step level: each call's discounted step return G_s = r_s + γ·G_{s+1} over its trajectory's
///   step rewards, less the call's own shaping (its invalid-action and overlong penalties, as
///   the Dr. MAS code's `apply_invalid_action_penalty` takes the penalty off each call's step
///   return), normalised within the calls of its prompt group (and agent, for `gigpo_drmas`)
///   that acted on the same state key; a group of one call gets 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Gigpo {
    /// Episode and step groups by prompt, or by prompt and agent.
    pub by: GroupBy,
    /// ω, γ, normalisation and the episode score.
    pub params: GigpoParams,
}

impl Estimator for Gigpo {
    fn name(&self) -> &'static str {
        match self.by {
            GroupBy::Prompt => "gigpo",
            GroupBy::PromptAgent => "gigpo_drmas",
        }
    }

    fn advantages(&self, samples: &[Sample], rewards: &[f64]) -> anyhow::Result<Vec<f64>> {
        assert_aligned(samples, rewards);
        if self.params.similarity_thresh.is_some() {
            bail!(
                "`{}` with similarity_thresh compares the calls' anchor texts, which only its \
                 token form is given",
                self.name()
            );
        }
        Ok(self.combine(samples, rewards, rewards))
    }

    /// The per-call advantages broadcast over each call's tokens; the KL in the reward enters
    /// the episode level only (verl-agent's step rewards never carry it).
    fn token_advantages(&self, input: &TokenInput<'_>) -> anyhow::Result<TokenEstimate> {
        assert_token_input_aligned(input);
        let clustered;
        let samples = match (self.params.similarity_thresh, input.anchors) {
            (None, _) => input.samples,
            (Some(thresh), Some(anchors)) => {
                clustered = alike_states(input.samples, anchors, self.by, thresh);
                &clustered
            }
            (Some(_), None) => bail!(
                "`{}` with similarity_thresh needs each call's anchor text, and none were given",
                self.name()
            ),
        };
        let per_call = self.combine(samples, &input.call_rewards(), input.rewards);
        Ok(TokenEstimate {
            advantages: PerToken::broadcast(&per_call, input.lengths),
            returns: None,
            diagnostics: vec![(
                "step_group_size_mean",
                step_group_size_mean(samples, self.by),
            )],
        })
    }

    fn uses_anchor_texts(&self) -> bool {
        self.params.similarity_thresh.is_some()
    }
}

/// The mean number of calls in a step-level group (the Dr. MAS code prints it as "Avg size of
/// step-level group"): how often calls met the same anchor state; 1 when none did.
fn step_group_size_mean(samples: &[Sample], by: GroupBy) -> f64 {
    let live: Vec<&Sample> = samples.iter().filter(|s| !s.padding).collect();
    let groups: std::collections::HashSet<(u32, Option<u16>, u64)> = live
        .iter()
        .map(|s| {
            (
                s.uid,
                (by == GroupBy::PromptAgent).then_some(s.agent),
                s.state,
            )
        })
        .collect();
    live.len() as f64 / groups.len().max(1) as f64
}

/// A cluster of alike anchor texts: its first text and the state key its calls get.
type Cluster<'t> = (&'t str, u64);

/// `samples` with each state key replaced by its cluster's: within each prompt group (and
/// agent, for `gigpo_drmas`), in call order, a call joins the first cluster whose first call's
/// anchor text is alike to its own (difflib's ratio at least `thresh`), else starts one (the
/// Dr. MAS code's `build_step_group` with `enable_similarity`).
fn alike_states(samples: &[Sample], anchors: &[&str], by: GroupBy, thresh: f64) -> Vec<Sample> {
    // Per group: each cluster's first anchor text and key.
    let mut clusters: HashMap<(u32, Option<u16>), Vec<Cluster<'_>>> = HashMap::new();
    let mut next_key = 0u64;
    samples
        .iter()
        .zip(anchors)
        .map(|(sample, &anchor)| {
            if sample.padding {
                return *sample;
            }
            let agent = (by == GroupBy::PromptAgent).then_some(sample.agent);
            let group = clusters.entry((sample.uid, agent)).or_default();
            let found = group
                .iter()
                .find(|(first, _)| *first == anchor || alike(anchor, first, thresh))
                .map(|&(_, key)| key);
            let key = found.unwrap_or_else(|| {
                next_key += 1;
                group.push((anchor, next_key));
                next_key
            });
            Sample {
                state: key,
                ..*sample
            }
        })
        .collect()
}

impl Gigpo {
    /// The episode level over `episode_rewards` plus ω times the step level, whose returns each
    /// lose what shaping took off the call's reward in `shaped_rewards`.
    fn combine(
        &self,
        samples: &[Sample],
        episode_rewards: &[f64],
        shaped_rewards: &[f64],
    ) -> Vec<f64> {
        let norm = NormParams {
            norm_by_std: self.params.norm_by_std,
            epsilon: self.params.epsilon,
        };
        let scores = self.by.outcome_scores();
        let episode = match (self.params.episode_score, self.by) {
            (EpisodeScore::TrajectoryMean, GroupBy::Prompt) => group_normalise(
                samples,
                &trajectory_means(samples, episode_rewards, self.by),
                self.by,
                scores,
                &norm,
            ),
            _ => group_normalise(samples, episode_rewards, self.by, scores, &norm),
        };
        let step = step_advantages(samples, shaped_rewards, self.by, &self.params);
        episode
            .iter()
            .zip(step)
            .map(|(e, s)| e + self.params.step_advantage_w * s)
            .collect()
    }
}

/// The step level: discounted step returns, each less its call's shaping (`shaped_rewards[i]`
/// short of the call's unshaped reward), normalised within anchor-state groups.
fn step_advantages(
    samples: &[Sample],
    shaped_rewards: &[f64],
    by: GroupBy,
    params: &GigpoParams,
) -> Vec<f64> {
    let returns: Vec<f64> = discounted_step_returns(samples, params.gamma)
        .iter()
        .zip(samples.iter().zip(shaped_rewards))
        .map(|(step_return, (sample, shaped))| step_return + shaped - unshaped_reward(sample))
        .collect();
    // Anchor-state group of each live sample: (uid, agent if per agent, state).
    let mut groups: HashMap<(u32, Option<u16>, u64), usize> = HashMap::new();
    let mut group_of = Vec::with_capacity(samples.len());
    for sample in samples {
        if sample.padding {
            group_of.push(usize::MAX);
            continue;
        }
        let agent = (by == GroupBy::PromptAgent).then_some(sample.agent);
        let next = groups.len();
        group_of.push(
            *groups
                .entry((sample.uid, agent, sample.state))
                .or_insert(next),
        );
    }
    let mut sums = vec![(0u32, 0.0f64); groups.len()];
    for (&g, &r) in group_of.iter().zip(&returns) {
        if let Some(sum) = sums.get_mut(g) {
            sum.0 += 1;
            sum.1 += r;
        }
    }
    let means: Vec<f64> = sums.iter().map(|&(n, s)| s / f64::from(n)).collect();
    let mut squares = vec![0.0f64; groups.len()];
    for (&g, &r) in group_of.iter().zip(&returns) {
        if let Some(square) = squares.get_mut(g) {
            *square += (r - means[g]).powi(2);
        }
    }
    group_of
        .iter()
        .zip(&returns)
        .map(|(&g, &r)| {
            let Some(&(count, _)) = sums.get(g) else {
                return 0.0;
            };
            // A group of one: μ is its own return (σ = 1), so its advantage is 0.
            let std = if count > 1 {
                (squares[g] / f64::from(count - 1)).sqrt()
            } else {
                1.0
            };
            if params.norm_by_std {
                (r - means[g]) / (std + params.epsilon)
            } else {
                r - means[g]
            }
        })
        .collect()
}

/// Each sample's discounted return from its step on: G_s = r_s + γ·G_{s+1} over the step
/// rewards of its trajectory, where a step's reward is read from any of its calls. Steps in
/// which no agent acted are not in the batch and add nothing.
fn discounted_step_returns(samples: &[Sample], gamma: f64) -> Vec<f64> {
    // Per trajectory: the reward of each step that has a call.
    let mut steps: HashMap<(u32, u32), Vec<(u16, f64)>> = HashMap::new();
    for sample in samples.iter().filter(|s| !s.padding) {
        let list = steps.entry((sample.uid, sample.trajectory)).or_default();
        if !list.iter().any(|&(step, _)| step == sample.step) {
            list.push((sample.step, sample.step_reward));
        }
    }
    let mut returns: HashMap<(u32, u32, u16), f64> = HashMap::new();
    for (&(uid, trajectory), list) in &mut steps {
        list.sort_by_key(|&(step, _)| step);
        let mut running = 0.0;
        for &(step, reward) in list.iter().rev() {
            running = reward + gamma * running;
            returns.insert((uid, trajectory, step), running);
        }
    }
    samples
        .iter()
        .map(|s| {
            returns
                .get(&(s.uid, s.trajectory, s.step))
                .copied()
                .unwrap_or(0.0)
        })
        .collect()
}
