//! A slow, literal reference for the estimators, written from the Dr. MAS code
//! (langfengQ/DrMAS at 19c632bc, `verl/trainer/ppo/core_algos.py`: `compute_grpo_outcome_advantage`,
//! `compute_rloo_outcome_advantage`, `compute_reinforce_plus_plus_baseline_outcome_advantage`,
//! `compute_grpo_passk_outcome_advantage`, `compute_reinforce_plus_plus_outcome_advantage`,
//! and `ray_trainer.compute_advantage`'s grouping).
//!
//! It follows their dictionary walks step for step — group index `uid` or `uid_agent`
//! (`group_by_agent_id`), trajectory index `traj_uid`, scores in batch order — so the fast
//! estimators can be checked against it on random batches. Two things are drmas's own and
//! marked where they enter: padding samples (Dr. MAS has none: here they are left out and get
//! 0), and REINFORCE++'s whitening over calls (Dr. MAS whitens over response tokens).

use std::collections::HashMap;

use super::Sample;

/// The group index Dr. MAS's `compute_advantage` builds: `uid`, or `uid_agent` when
/// `group_by_agent_id`.
fn index(sample: &Sample, by_agent: bool) -> (u32, Option<u16>) {
    (sample.uid, by_agent.then_some(sample.agent))
}

type Index = (u32, Option<u16>);

/// `torch.mean` and `torch.std` (unbiased) of a score list, with the one-score rule (0, 1).
fn mean_std(scores: &[f64]) -> (f64, f64) {
    let n = scores.len() as f64;
    if scores.len() == 1 {
        return (0.0, 1.0);
    }
    let mean = scores.iter().sum::<f64>() / n;
    let var = scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The live (non-padding) sample indices, in batch order.
fn live(samples: &[Sample]) -> Vec<usize> {
    (0..samples.len())
        .filter(|&i| !samples[i].padding)
        .collect()
}

/// `compute_grpo_outcome_advantage`. Without `by_agent` each trajectory's calls are averaged
/// into one score that every call takes; with it every call is a score. `traj_mean_per_agent`
/// applies the averaging to each agent's calls within (uid, agent) groups — drmas's
/// `drmas_traj`, which Dr. MAS does not have.
pub(super) fn grpo(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    traj_mean_per_agent: bool,
    norm_by_std: bool,
    epsilon: f64,
) -> Vec<f64> {
    let group_of = |s: &Sample| index(s, by_agent || traj_mean_per_agent);
    let average = !by_agent;
    let mut traj_calls: Vec<((Index, u32), Vec<usize>)> = Vec::new();
    for i in live(samples) {
        let key = (group_of(&samples[i]), samples[i].trajectory);
        match traj_calls.iter_mut().find(|(k, _)| *k == key) {
            Some((_, calls)) => calls.push(i),
            None => traj_calls.push((key, vec![i])),
        }
    }
    let mut scores = rewards.to_vec();
    let mut id2score: HashMap<Index, Vec<f64>> = HashMap::new();
    for ((idx, _), calls) in &traj_calls {
        if average {
            let avg = calls.iter().map(|&i| rewards[i]).sum::<f64>() / calls.len() as f64;
            id2score.entry(*idx).or_default().push(avg);
            for &i in calls {
                scores[i] = avg;
            }
        } else {
            id2score
                .entry(*idx)
                .or_default()
                .extend(calls.iter().map(|&i| rewards[i]));
        }
    }
    let mut advantages = vec![0.0; samples.len()];
    for i in live(samples) {
        let (mean, std) = mean_std(&id2score[&group_of(&samples[i])]);
        advantages[i] = if norm_by_std {
            (scores[i] - mean) / (std + epsilon)
        } else {
            scores[i] - mean
        };
    }
    advantages
}

/// The `seen_pairs` walk shared by RLOO, REINFORCE++-baseline, pass@k and GiGPO's episode
/// level: per group index, the scores in batch order and the sample each came from — one per
/// (index, trajectory), its first call, unless `every_call` (Dr. MAS passes
/// `every_call = group_by_agent_id`).
fn scores_by_index(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    every_call: bool,
) -> HashMap<Index, Vec<(usize, f64)>> {
    let mut seen = Vec::new();
    let mut id2score: HashMap<Index, Vec<(usize, f64)>> = HashMap::new();
    for i in live(samples) {
        let idx = index(&samples[i], by_agent);
        let pair = (idx, samples[i].trajectory);
        if seen.contains(&pair) {
            continue;
        }
        id2score.entry(idx).or_default().push((i, rewards[i]));
        if !every_call {
            seen.push(pair);
        }
    }
    id2score
}

/// GiGPO's `episode_norm_reward`: scores by [`scores_by_index`], each call normalised with its
/// own reward (only centred without `norm_by_std`, its `remove_std`).
fn episode_norm_reward(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    every_call: bool,
    norm_by_std: bool,
    epsilon: f64,
) -> Vec<f64> {
    let id2score = scores_by_index(samples, rewards, by_agent, every_call);
    let mut advantages = vec![0.0; samples.len()];
    for i in live(samples) {
        let scores: Vec<f64> = id2score[&index(&samples[i], by_agent)]
            .iter()
            .map(|s| s.1)
            .collect();
        let (mean, std) = mean_std(&scores);
        advantages[i] = if norm_by_std {
            (rewards[i] - mean) / (std + epsilon)
        } else {
            rewards[i] - mean
        };
    }
    advantages
}

/// `episode_norm_reward` with one score per (index, trajectory) even under the agent index:
/// drmas's `grpo_first_call`, and `drmas_traj_first_call` with `by_agent`.
pub(super) fn first_call_normalised(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    epsilon: f64,
) -> Vec<f64> {
    episode_norm_reward(samples, rewards, by_agent, false, true, epsilon)
}

/// `compute_rloo_outcome_advantage`.
pub(super) fn rloo(samples: &[Sample], rewards: &[f64], by_agent: bool) -> Vec<f64> {
    let id2score = scores_by_index(samples, rewards, by_agent, by_agent);
    let mut advantages = vec![0.0; samples.len()];
    for i in live(samples) {
        let scores = &id2score[&index(&samples[i], by_agent)];
        let n = scores.len() as f64;
        advantages[i] = if scores.len() > 1 {
            let mean = scores.iter().map(|s| s.1).sum::<f64>() / n;
            rewards[i] * n / (n - 1.0) - mean * n / (n - 1.0)
        } else {
            rewards[i]
        };
    }
    advantages
}

/// `compute_reinforce_plus_plus_baseline_outcome_advantage`, whitened over calls (drmas) rather
/// than response tokens (Dr. MAS); fewer than two calls whiten to 0.
pub(super) fn reinforce_pp_baseline(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
) -> Vec<f64> {
    let id2score = scores_by_index(samples, rewards, by_agent, by_agent);
    let live = live(samples);
    let centred: Vec<f64> = live
        .iter()
        .map(|&i| {
            let scores = &id2score[&index(&samples[i], by_agent)];
            let mean = if scores.len() == 1 {
                0.0
            } else {
                scores.iter().map(|s| s.1).sum::<f64>() / scores.len() as f64
            };
            rewards[i] - mean
        })
        .collect();
    let mut advantages = vec![0.0; samples.len()];
    if live.len() < 2 {
        return advantages;
    }
    let n = live.len() as f64;
    let mean = centred.iter().sum::<f64>() / n;
    let var = centred.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    for (&i, x) in live.iter().zip(&centred) {
        advantages[i] = (x - mean) / (var + 1e-8).sqrt();
    }
    advantages
}

/// `compute_reinforce_plus_plus_outcome_advantage` on the calls that are not padding, from each
/// call's `token_rewards` (its `token_level_rewards` row; right-padded to the longest with 0):
/// the returns walked backwards with the running return reset past each row's end, then
/// `masked_whiten` (mean and unbiased variance over the real tokens, + 1e-8) and the mask. Rows
/// in the order of `samples`, padding samples' all 0.
pub(super) fn reinforce_plus_plus(
    samples: &[Sample],
    token_rewards: &[Vec<f64>],
    gamma: f64,
) -> Vec<Vec<f64>> {
    let lengths: Vec<usize> = token_rewards.iter().map(Vec::len).collect();
    let live = live(samples);
    let width = live.iter().map(|&i| lengths[i]).max().unwrap_or(0);
    let mask = |row: usize, t: usize| if t < lengths[live[row]] { 1.0 } else { 0.0 };
    let mut returns = vec![vec![0.0; width]; live.len()];
    for (row, &i) in live.iter().enumerate() {
        let mut running = 0.0;
        for t in (0..width).rev() {
            let token_reward = token_rewards[i].get(t).copied().unwrap_or(0.0);
            running = token_reward + gamma * running;
            returns[row][t] = running;
            running *= mask(row, t);
        }
    }
    let (mut sum, mut count) = (0.0, 0.0);
    for (row, values) in returns.iter().enumerate() {
        for (t, value) in values.iter().enumerate() {
            sum += value * mask(row, t);
            count += mask(row, t);
        }
    }
    let mean = sum / count;
    let mut squares = 0.0;
    for (row, values) in returns.iter().enumerate() {
        for (t, value) in values.iter().enumerate() {
            squares += (value - mean).powi(2) * mask(row, t);
        }
    }
    let variance = squares / count * (count / (count - 1.0));
    let mut rows = vec![Vec::new(); samples.len()];
    for (i, length) in lengths.iter().enumerate() {
        rows[i] = vec![0.0; *length];
    }
    for (row, &i) in live.iter().enumerate() {
        for t in 0..lengths[i] {
            rows[i][t] = (returns[row][t] - mean) / (variance + 1e-8).sqrt() * mask(row, t);
        }
    }
    rows
}

/// `compute_grpo_passk_outcome_advantage`: only the best score's sample gets the margin over
/// the runner-up. A group of one gets nothing (Dr. MAS raises).
pub(super) fn grpo_passk(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    norm_by_std: bool,
    epsilon: f64,
) -> Vec<f64> {
    let mut advantages = vec![0.0; samples.len()];
    for scores in scores_by_index(samples, rewards, by_agent, by_agent).values() {
        if scores.len() < 2 {
            continue;
        }
        let mut sorted: Vec<(usize, f64)> = scores.clone();
        // Stable: among equal scores the first in batch order stays first.
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let values: Vec<f64> = scores.iter().map(|s| s.1).collect();
        let margin = sorted[0].1 - sorted[1].1;
        // `torch.std` here has no one-score rule: the group has at least two.
        let std = mean_std(&values).1;
        advantages[sorted[0].0] = if norm_by_std {
            margin / (std + epsilon)
        } else {
            margin
        };
    }
    advantages
}

/// verl-agent's `compute_step_discounted_returns`: per trajectory, the calls of each step (in
/// step order) take G_k = r_k + γ·G_{k+1} over the steps that have calls.
fn step_returns(samples: &[Sample], gamma: f64) -> Vec<f64> {
    let mut returns = vec![0.0; samples.len()];
    let live = live(samples);
    let mut trajectories: Vec<(u32, u32)> = live
        .iter()
        .map(|&i| (samples[i].uid, samples[i].trajectory))
        .collect();
    trajectories.sort_unstable();
    trajectories.dedup();
    for (uid, trajectory) in trajectories {
        let mut calls: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&i| samples[i].uid == uid && samples[i].trajectory == trajectory)
            .collect();
        calls.sort_by_key(|&i| samples[i].step);
        let mut steps: Vec<u16> = calls.iter().map(|&i| samples[i].step).collect();
        steps.dedup();
        let mut running = 0.0;
        for &step in steps.iter().rev() {
            let first = calls
                .iter()
                .find(|&&i| samples[i].step == step)
                .copied()
                .unwrap_or_default();
            running = samples[first].step_reward + gamma * running;
            for &i in calls.iter().filter(|&&i| samples[i].step == step) {
                returns[i] = running;
            }
        }
    }
    returns
}

/// `compute_gigpo_outcome_advantage` with exact-match anchor states (`build_step_group` without
/// similarity): `episode_norm_reward` + ω·`step_norm_reward` over (index, state) groups, the step
/// returns each less its call's penalty (`reward − rewards[i]`), as the trainer's
/// `apply_invalid_action_penalty` leaves `step_rewards`.
/// `episode_mean` replaces the episode level's first-call scores by `grpo`'s trajectory means
/// (drmas's default; Dr. MAS's code has first-call scores).
#[allow(clippy::too_many_arguments)]
pub(super) fn gigpo(
    samples: &[Sample],
    rewards: &[f64],
    by_agent: bool,
    episode_mean: bool,
    omega: f64,
    gamma: f64,
    norm_by_std: bool,
    epsilon: f64,
) -> Vec<f64> {
    let episode = if episode_mean && !by_agent {
        grpo(samples, rewards, false, false, norm_by_std, epsilon)
    } else {
        episode_norm_reward(samples, rewards, by_agent, by_agent, norm_by_std, epsilon)
    };
    // `apply_invalid_action_penalty` takes each call's penalty off its step return as well.
    let returns: Vec<f64> = step_returns(samples, gamma)
        .iter()
        .zip(samples.iter().zip(rewards))
        .map(|(step_return, (sample, reward))| step_return - (sample.reward - reward))
        .collect();
    let mut step_groups: HashMap<(Index, u64), Vec<f64>> = HashMap::new();
    for i in live(samples) {
        step_groups
            .entry((index(&samples[i], by_agent), samples[i].state))
            .or_default()
            .push(returns[i]);
    }
    let mut advantages = vec![0.0; samples.len()];
    for i in live(samples) {
        let scores = &step_groups[&(index(&samples[i], by_agent), samples[i].state)];
        // `step_norm_reward`: a group of one has μ = its score, σ = 1.
        let (mean, std) = if scores.len() == 1 {
            (scores[0], 1.0)
        } else {
            mean_std(scores)
        };
        let step = if norm_by_std {
            (returns[i] - mean) / (std + epsilon)
        } else {
            returns[i] - mean
        };
        advantages[i] = episode[i] + omega * step;
    }
    advantages
}
