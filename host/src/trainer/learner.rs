//! [`Learner`]: the update half of an iteration, borrowing only what the updates change and
//! read, so that the next iteration's rollout can run on servers beside it
//! (`[rollout] one_step_off_policy`).

use std::time::Instant;

use anyhow::Context;

use super::kl_coefficient::KlCoefficient;
use super::metrics::{record_critic, record_update, record_update_time, Metrics};
use super::{out_of_memory, phase_bar, trained_calls_of_group, Collected, WorkerGroup};
use crate::advantage::PerToken;
use crate::config::RunConfig;
use crate::rollout::{AgentCall, Rollout, TeamMember};
use crate::update::{
    update_group, AgentTraining, LrSchedule, NonFinite, Reference, UpdateInputs, UpdateReport,
    UpdateSettings,
};

/// What an iteration's updates touch: every worker group, the run's settings and team, and
/// the counters the updates advance.
pub(super) struct Learner<'a> {
    pub groups: &'a mut [WorkerGroup],
    pub config: &'a RunConfig,
    pub team: &'a [TeamMember],
    /// Whether each agent trains.
    pub trains: &'a [bool],
    pub agent_training: &'a [AgentTraining],
    pub skipped_steps: &'a mut u64,
    pub kl_coefficient: &'a mut KlCoefficient,
    /// The iteration being trained.
    pub iteration: u32,
}

impl Learner<'_> {
    /// The second half of an iteration: one update per worker group on what [`Trainer::collect`]
    /// gathered; returns the iteration's metrics. Never interrupted: once one group's weights
    /// change, the iteration has to finish.
    pub(super) fn learn(&mut self, collected: &Collected) -> anyhow::Result<Metrics> {
        let _updating = crate::interrupt::updating();
        tracing::debug!("iteration {}: updating the worker groups", self.iteration);
        let mut metrics = collected.metrics.clone();
        let rollout = collected.sampled.batch();
        let started = Instant::now();
        let bar = phase_bar(self.groups.len() as u64, "update");
        let mut trained_tokens = 0;
        let critic_warmup = collected.values.is_some()
            && self.iteration <= self.config.algorithm.critic_settings().warmup_iterations;
        for index in 0..self.groups.len() {
            if self.groups[index].trains {
                if let (Some(values), Some(returns)) = (&collected.values, &collected.returns) {
                    self.update_critic(index, rollout, values, returns, &mut metrics)?;
                }
                if !critic_warmup {
                    let report =
                        self.update(index, rollout, &collected.advantages, &collected.recomputed)?;
                    trained_tokens += report.forward_tokens;
                    record_update(&mut metrics, &self.groups[index], &report, self.team);
                }
            } else {
                // It never updates: with offload its weights leave the device here, where a
                // trained group's leave after its update, so the groups that train have them.
                self.groups[index].offload_after_update();
            }
            let group = &mut self.groups[index];
            if let Some(seconds) = group.take_offload_seconds() {
                metrics.set(format!("time/offload_s/{}", group.name), seconds);
            }
            bar.inc(1);
        }
        if let (Some(values), Some(returns)) = (&collected.values, &collected.returns) {
            record_critic(&mut metrics, values, returns, critic_warmup);
        }
        if let Some(kl) = collected.reference_kl {
            self.kl_coefficient.update(kl, rollout.calls.len());
        }
        bar.finish_and_clear();
        record_update_time(
            &mut metrics,
            started.elapsed().as_secs_f64(),
            trained_tokens,
            *self.skipped_steps,
        );
        Ok(metrics)
    }

    /// Worker group `index`'s critic update on its calls of `rollout` towards their `returns`
    /// (`values`: the critic's values the returns were computed with; both one row per call).
    fn update_critic(
        &mut self,
        index: usize,
        rollout: &Rollout,
        values: &PerToken,
        returns: &PerToken,
        metrics: &mut Metrics,
    ) -> anyhow::Result<()> {
        let own = trained_calls_of_group(self.team, self.trains, rollout, index);
        let calls: Vec<&AgentCall> = own.iter().map(|&i| &rollout.calls[i]).collect();
        let group = &mut self.groups[index];
        let Some(critic) = &mut group.critic else {
            return Ok(());
        };
        let report = critic
            .update(
                &calls,
                &returns.select(&own),
                &values.select(&own),
                &self.config.algorithm.critic_settings(),
                self.config.algorithm.loss.mini_batches,
                self.config.algorithm.loss.ppo_epochs,
            )
            .with_context(|| format!("updating the critic of worker group `{}`", group.name))
            .map_err(|error| out_of_memory::in_critic(error, &group.name, self.config))?;
        if report.skipped_steps > 0 {
            *self.skipped_steps += report.skipped_steps as u64;
            tracing::warn!(
                "worker group `{}`, iteration {}: the critic's loss or gradient is not finite; \
                 {} of its optimizer steps skipped. Check [algorithm.critic] learning_rate and \
                 the rewards",
                group.name,
                self.iteration,
                report.skipped_steps
            );
        }
        metrics.set(format!("critic/vf_loss/{}", group.name), report.stats.loss);
        metrics.set(
            format!("critic/vf_clipfrac/{}", group.name),
            report.stats.clip_fraction,
        );
        metrics.set(format!("critic/grad_norm/{}", group.name), report.grad_norm);
        Ok(())
    }

    /// Worker group `index`'s update on its calls of `rollout` (`advantages` has one row per
    /// call; `recomputed`, empty or one per call, the old log-probabilities already computed).
    fn update(
        &mut self,
        index: usize,
        rollout: &Rollout,
        advantages: &PerToken,
        recomputed: &[Option<Vec<f32>>],
    ) -> anyhow::Result<UpdateReport> {
        let group = &mut self.groups[index];
        group.prepare_update();
        let own = trained_calls_of_group(self.team, self.trains, rollout, index);
        let calls: Vec<_> = own.iter().map(|&i| &rollout.calls[i]).collect();
        let group_advantages = advantages.select(&own);
        let group_recomputed: Vec<Option<&[f32]>> = own
            .iter()
            .map(|&i| recomputed.get(i).and_then(Option::as_deref))
            .collect();
        let loss = &self.config.algorithm.loss;
        let settings = UpdateSettings {
            mini_batches: loss.mini_batches,
            epochs: loss.ppo_epochs,
            grad_clip: loss.grad_clip,
            schedule: LrSchedule {
                peak: group.learning_rate,
                warmup_steps: loss.warmup_steps,
                decay: loss.lr_schedule,
                total_steps: self.config.optimizer_steps(),
                min_lr_ratio: loss.min_lr_ratio,
            },
        };
        let reference = Reference::for_group(
            group.reference.as_ref().map(|reference| &reference.model),
            !group.adapter_names.is_empty(),
        );
        // LoRA dropout draws from libtorch's generator: seeded per iteration and group so a
        // resumed run draws what an uninterrupted one does.
        tch::manual_seed(
            (self.config.run.seed ^ (u64::from(self.iteration) << 20) ^ index as u64) as i64,
        );
        let inputs = UpdateInputs {
            calls: &calls,
            advantages: &group_advantages,
            recomputed: &group_recomputed,
        };
        let report = update_group(
            &group.pretrained.model,
            reference,
            &mut group.optimizer,
            &inputs,
            self.agent_training,
            &settings,
        )
        .with_context(|| format!("updating worker group `{}`", group.name))
        .map_err(|error| {
            out_of_memory::in_update(error, &group.name, self.config, self.agent_training)
        })?;
        group.offload_after_update();
        group.untouched = false;
        if let Some(reason) = &report.skipped {
            *self.skipped_steps += report.skipped_steps as u64;
            let what = match reason {
                NonFinite::Loss { agent } => format!(
                    "the loss of agent `{}`'s calls is not finite",
                    self.team[*agent].role
                ),
                NonFinite::Gradient { parameter } => {
                    format!("the gradient of {parameter} (the first such parameter) is not finite")
                }
            };
            let skipped = match report.skipped_steps + report.steps {
                1 => "the optimizer step was skipped".to_owned(),
                all => format!(
                    "{} of its {all} optimizer steps were skipped",
                    report.skipped_steps
                ),
            };
            tracing::warn!(
                "worker group `{}`, iteration {}: {what}; {skipped} ({} skipped so far). Check \
                 the group's learning_rate, its model's weights and the rewards",
                group.name,
                self.iteration,
                self.skipped_steps
            );
        }
        Ok(report)
    }
}
