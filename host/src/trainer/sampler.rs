//! [`Sampler`]: the rollout half of an iteration (its prompts, episodes and their metrics),
//! borrowing only the plugins, the team, the generators and the data cursor, so that on
//! servers it can run beside the updates (`[rollout] one_step_off_policy`).

use std::time::Instant;

use drmas_sdk::Task;

use super::dynamic_sampling::{append, groups_with_call_spread, groups_with_spread, keep_groups};
use super::failed_episodes::{groups_with_failures, warn_failures};
use super::metrics::{record_dynamic_sampling, record_penalised_reward, record_rollout, Metrics};
use super::{out_of_memory, phase_bar, SampledGroups, TaskOrder, MAX_GENERATION_BATCH};
use crate::advantage::{Penalty, Sample};
use crate::config::{RunConfig, SpreadMetric};
use crate::rng::SeededRng;
use crate::rollout::{self, Crew, Rollout, RolloutLimits, TeamMember};

/// What an iteration's rollout reads and advances.
pub(super) struct Sampler<'a> {
    /// The plugins, the team and each worker group's codec and generator.
    pub crew: Crew<'a>,
    pub config: &'a RunConfig,
    pub penalty: &'a Penalty,
    pub train_tasks: &'a [Task],
    /// The data cursor, advanced past the prompts rolled out.
    pub order: &'a mut TaskOrder,
    /// The sampler's RNG, advanced by the rollout.
    pub rng: &'a mut SeededRng,
    /// The iteration the rollout is for.
    pub iteration: u32,
    /// The last update whose weights sample (0: the model files'); the iteration's update
    /// starts from those of the iteration before it.
    pub sampled_by: u32,
    /// Draw a progress bar (not beside the update's).
    pub show_progress: bool,
}

/// An iteration's rollout and the metrics it recorded.
pub(super) struct Sampled {
    pub groups: SampledGroups,
    pub metrics: Metrics,
}

impl Sampler<'_> {
    /// Rolls out the iteration's prompt groups and records their rollout metrics: calls,
    /// lengths and time, penalised rewards, dynamic sampling, failures and the policy lag.
    pub(super) fn sample(mut self) -> anyhow::Result<Sampled> {
        let mut metrics = Metrics::new(self.iteration);
        let started = Instant::now();
        let sampled = self.sample_groups()?;
        let team = self.crew.team;
        record_rollout(
            &mut metrics,
            &sampled.generated,
            team,
            started.elapsed().as_secs_f64(),
        );
        let policy_lag = self.iteration.saturating_sub(1 + self.sampled_by);
        metrics.set("rollout/policy_lag", f64::from(policy_lag));
        let generated_samples = samples(team, self.config, &sampled.generated);
        let generated_rewards = shaped_rewards(
            team,
            self.config,
            self.penalty,
            &sampled.generated,
            &generated_samples,
            None,
        );
        record_penalised_reward(&mut metrics, &sampled.generated, &generated_rewards);
        let group_size = self.config.rollout.group_size;
        if let Some(kept) = sampled
            .kept
            .as_ref()
            .filter(|_| self.config.algorithm.dynamic_sampling.enabled)
        {
            record_dynamic_sampling(&mut metrics, &sampled.generated, kept, group_size);
        }
        metrics.set(
            "episodes/failed",
            sampled.generated.failed_episodes() as f64,
        );
        metrics.set("groups/dropped_failed", sampled.failed_groups as f64);
        Ok(Sampled {
            groups: sampled,
            metrics,
        })
    }

    /// The iteration's rollouts: the next `prompts_per_batch` prompts, each `group_size` times;
    /// with dynamic sampling, as many such rollouts as it takes (up to its cap) to fill the batch
    /// with prompt groups whose rewards differ (episode or penalised call rewards, by its
    /// `metric`).
    fn sample_groups(&mut self) -> anyhow::Result<SampledGroups> {
        let prompts = self.config.rollout.prompts_per_batch;
        let group_size = self.config.rollout.group_size;
        let dynamic = self.config.algorithm.dynamic_sampling;
        let mut sampled = SampledGroups::default();
        let mut keep = Vec::new();
        let mut kept_groups = 0;
        let rounds = if dynamic.enabled {
            dynamic.max_rollout_batches.max(1)
        } else {
            1
        };
        for _ in 0..rounds {
            let picks = self.order.next_batch(prompts);
            let batch: Vec<Task> = picks.iter().map(|&i| self.train_tasks[i].clone()).collect();
            let tasks: Vec<&Task> = batch
                .iter()
                .flat_map(|task| std::iter::repeat_n(task, group_size))
                .collect();
            let label = self.show_progress.then_some("rollout");
            let rollout = run_rollout(&self.crew, self.config, &tasks, label, self.rng)?;
            warn_failures(&rollout, "rollout", "its prompt group is dropped");
            let failed = groups_with_failures(&rollout, group_size);
            sampled.failed_groups += failed.iter().filter(|&&f| f).count();
            let spread = match dynamic.metric {
                SpreadMetric::Reward => groups_with_spread(&rollout, group_size),
                SpreadMetric::PenalisedReward => {
                    let rewards = shaped_rewards(
                        self.crew.team,
                        self.config,
                        self.penalty,
                        &rollout,
                        &samples(self.crew.team, self.config, &rollout),
                        None,
                    );
                    groups_with_call_spread(&rollout, &rewards, group_size)
                }
            };
            for (spread, failed) in spread.into_iter().zip(failed) {
                // A failed episode spoils its group's baseline: the group is dropped like one
                // without spread (and, under dynamic sampling, replaced the same way).
                let take = !failed && (spread || !dynamic.enabled) && kept_groups < prompts;
                kept_groups += usize::from(take);
                keep.push(take);
            }
            append(&mut sampled.generated, rollout);
            sampled.tasks.extend(batch);
            if kept_groups == prompts {
                break;
            }
        }
        if dynamic.enabled || sampled.failed_groups > 0 {
            sampled.kept = Some(keep_groups(sampled.generated.clone(), &keep, group_size));
        }
        sampled.keep = keep;
        if dynamic.enabled && kept_groups < prompts {
            tracing::warn!(
                "dynamic sampling: {kept_groups} of {prompts} prompt groups with reward spread \
                 (and no failed episode) after {rounds} rollouts ([algorithm.dynamic_sampling] \
                 max_rollout_batches); training on those"
            );
        }
        Ok(sampled)
    }
}

/// Rolls out one episode per task with the team's current sampling settings, drawing a
/// progress bar under `label` when given.
pub(super) fn run_rollout(
    crew: &Crew<'_>,
    config: &RunConfig,
    tasks: &[&Task],
    label: Option<&str>,
    rng: &mut SeededRng,
) -> anyhow::Result<Rollout> {
    let bar = match label {
        Some(label) => phase_bar(tasks.len() as u64, label),
        None => indicatif::ProgressBar::hidden(),
    };
    let rollout = rollout::run(
        crew,
        tasks,
        RolloutLimits {
            max_prompt_tokens: config.rollout.max_prompt_tokens,
            max_batch: MAX_GENERATION_BATCH,
            schedule: config.rollout.schedule,
            batch_wait: std::time::Duration::from_millis(config.rollout.batch_wait_ms),
            max_failure_rate: config.rollout.max_episode_failure_rate,
        },
        rng,
        &mut |finished| bar.set_position(finished as u64),
    )
    .map_err(|error| out_of_memory::in_rollout(error, config))?;
    bar.finish_and_clear();
    if rollout.truncated_prompts > 0 {
        tracing::warn!(
            "{} prompts were longer than [rollout] max_prompt_tokens = {} and lost their \
             beginning",
            rollout.truncated_prompts,
            config.rollout.max_prompt_tokens
        );
    }
    Ok(rollout)
}

/// Each call's reward as the estimator sees it (`samples` are `rollout`'s): the
/// invalid-action penalty applied, plus DAPO's overlong penalty when
/// `[algorithm.overlong_penalty]` is on, whose mean goes into `metrics` when given.
pub(super) fn shaped_rewards(
    team: &[TeamMember],
    config: &RunConfig,
    penalty: &Penalty,
    rollout: &Rollout,
    samples: &[Sample],
    metrics: Option<&mut Metrics>,
) -> Vec<f64> {
    let mut rewards = penalty.apply(samples);
    let shaping = config.algorithm.overlong_penalty;
    if shaping.buffer == 0 {
        return rewards;
    }
    let mut total = 0.0;
    for (call, reward) in rollout.calls.iter().zip(rewards.iter_mut()) {
        let penalty = shaping.penalty(call.response.len(), team[call.agent].max_new_tokens);
        *reward += penalty;
        total += penalty;
    }
    if let Some(metrics) = metrics {
        metrics.set(
            "reward/overlong_penalty_mean",
            total / rewards.len().max(1) as f64,
        );
    }
    rewards
}

/// One training sample per agent call of `rollout`, for the estimator.
pub(super) fn samples(team: &[TeamMember], config: &RunConfig, rollout: &Rollout) -> Vec<Sample> {
    let group_size = config.rollout.group_size;
    rollout
        .calls
        .iter()
        .map(|call| Sample {
            uid: (call.episode / group_size) as u32,
            trajectory: call.episode as u32,
            agent: call.agent as u16,
            worker_group: team[call.agent].group as u16,
            reward: rollout.episodes[call.episode].reward(),
            step: call.step as u16,
            step_reward: rollout.episodes[call.episode].step_reward(call.step),
            call_reward: rollout.episodes[call.episode].call_reward(call.index),
            state: rollout.episodes[call.episode].step_state(call.step),
            valid: call.valid,
            padding: false,
        })
        .collect()
}
