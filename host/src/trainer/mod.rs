//! The trainer behind `drmas-host train` and `eval`: rollouts → rewards (+ invalid-action
//! penalties) → the estimator's advantages → one update per worker group, with evaluation,
//! metrics and checkpoints along the way.

mod checkpoint;
mod dynamic_sampling;
mod eval;
mod failed_episodes;
mod fleet;
mod kl_coefficient;
mod learner;
mod metrics;
mod offload;
mod out_of_memory;
pub mod run_folder;
mod sampler;
mod setup;
mod stopped;
mod task_order;
mod tensorboard;
mod worker_group;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use drmas_sdk::{Environment, Orchestra, Task};
use indicatif::{ProgressBar, ProgressStyle};
use tokenizers::Tokenizer;

pub use checkpoint::{untrained_model, Checkpoint};
pub use eval::{eval_path, score, EvalReport, SourceScore, SOLVED_REWARD};
use failed_episodes::{nothing_left_to_train, warn_failures};
pub use fleet::probe_servers;
use fleet::StagedWeights;
use kl_coefficient::{mean_kl, KlCoefficient};
use learner::Learner;
use metrics::{iteration_line, record_advantages, record_eval};
pub use metrics::{Metrics, MetricsLog};
pub use offload::{Offload, Residency};
use sampler::{run_rollout, samples, shaped_rewards, Sampled, Sampler};
pub use setup::adapter_names;
pub use setup::Phase;
pub use task_order::TaskOrder;
pub use worker_group::{tch_device, tch_kind, WorkerGroup};

use crate::advantage::{Estimator, Penalty, PerToken, Sample, TokenInput};
use crate::config::{RunConfig, RunFile};
use crate::engine::{Generator, LocalGenerator};
use crate::model::chat_codec::ChatCodec;
use crate::model::chat_template::ChatTemplate;
use crate::plugins::Hosted;
use crate::preflight::{resolve_model, Plan};
use crate::rng::SeededRng;
use crate::rollout::{AgentCall, Crew, Rollout, TeamMember};
use crate::update::{reference_kl, AgentTraining, MicroBatch, Reference};

/// The indices of `rollout`'s calls made by agents of worker group `group` (of `team`).
fn calls_of_group(team: &[TeamMember], rollout: &Rollout, group: usize) -> Vec<usize> {
    (0..rollout.calls.len())
        .filter(|&i| team[rollout.calls[i].agent].group == group)
        .collect()
}

/// [`calls_of_group`] without the calls of agents that do not train (`trains`, by agent).
fn trained_calls_of_group(
    team: &[TeamMember],
    trains: &[bool],
    rollout: &Rollout,
    group: usize,
) -> Vec<usize> {
    let mut calls = calls_of_group(team, rollout, group);
    calls.retain(|&i| trains[rollout.calls[i].agent]);
    calls
}

/// Sequences in one generation batch at most (bounds KV-cache memory).
const MAX_GENERATION_BATCH: usize = 64;

/// A run in progress: components, models, optimizers and the data/RNG position.
pub struct Trainer {
    config: RunConfig,
    environment: Hosted<dyn Environment>,
    orchestra: Hosted<dyn Orchestra>,
    team: Vec<TeamMember>,
    agent_training: Vec<AgentTraining>,
    /// Whether each agent (run-file order) trains: `train = false` leaves its calls out of
    /// every update.
    trains: Vec<bool>,
    groups: Vec<WorkerGroup>,
    /// Per worker group: its servers when it generates remotely.
    fleets: Vec<Option<fleet::Fleet>>,
    /// Each worker group's tokenizer and chat template, copied for rollouts beside the updates
    /// (empty unless `[rollout] one_step_off_policy`).
    codec_copies: Vec<(Tokenizer, ChatTemplate)>,
    /// Under `[rollout] one_step_off_policy`: the next iteration's rollout, made beside this
    /// iteration's update.
    in_flight: Option<InFlight>,
    estimator: Box<dyn Estimator>,
    penalty: Penalty,
    train_tasks: Vec<Task>,
    eval_tasks: Vec<Task>,
    order: TaskOrder,
    rng: SeededRng,
    iteration: u32,
    /// The last iteration whose update the worker groups' weights hold: 0 for the model files'
    /// weights, a resumed checkpoint's iteration. Servers are told which weights they serve by
    /// it ([`weight_version`]).
    trained_through: u32,
    skipped_steps: u64,
    /// β of the KL in the reward (`[algorithm.kl_in_reward]`).
    kl_coefficient: KlCoefficient,
    /// Episodes failed, and prompt groups dropped for them, in this process's iterations.
    failed: FailedCount,
    /// An evaluation of these same weights to take as the one before training, and where it
    /// came from (see [`Self::reuse_initial_eval`]).
    initial_eval: Option<(EvalReport, PathBuf)>,
    out_dir: PathBuf,
}

/// Failed training episodes and the prompt groups dropped for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailedCount {
    /// Episodes whose own plugin calls failed.
    pub episodes: u64,
    /// Prompt groups left out of the update because one of their episodes failed.
    pub groups: u64,
}

/// What a finished training run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    /// Iterations run by this process (a resumed run counts only its own).
    pub iterations: u32,
    /// The metrics of the first and the last iteration run (rewards, format validity, ...).
    pub first_last: Option<(Metrics, Metrics)>,
    /// Evaluation before the first and after the last iteration (when there is eval data).
    pub eval_before_after: Option<(EvalReport, EvalReport)>,
    /// Optimizer steps skipped because of non-finite values.
    pub skipped_steps: u64,
    /// Training episodes that failed in this process's iterations, and the groups dropped.
    pub failed: FailedCount,
    /// The run folder (metrics, evaluations, checkpoints).
    pub out_dir: PathBuf,
    /// The newest checkpoint.
    pub checkpoint: Option<PathBuf>,
    /// The TensorBoard folder, when the run writes one.
    pub tensorboard: Option<PathBuf>,
}

impl TrainSummary {
    /// The summary printed at the end of `train`.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::from("\n== summary ==\n");
        let _ = writeln!(out, "iterations run          {}", self.iterations);
        if let Some((first, last)) = &self.first_last {
            // What the run optimised, first → last iteration: the environment's reward, the
            // reward with the format penalty (what the estimator sees), and format validity.
            let keys = ["reward/mean", "reward/penalised_mean"]
                .into_iter()
                .map(str::to_owned)
                .chain(
                    last.keys()
                        .filter(|k| k.starts_with("invalid_rate/"))
                        .map(str::to_owned),
                );
            for key in keys {
                if let (Some(a), Some(b)) = (first.get(&key), last.get(&key)) {
                    let _ = writeln!(out, "{key:<24}{a:.3} (first) → {b:.3} (last)");
                }
            }
        }
        if let Some((before, after)) = &self.eval_before_after {
            let k = before.overall.k;
            let _ = writeln!(
                out,
                "{:<24}{:.3} → {:.3}",
                format!("eval avg@{k}"),
                before.overall.avg_at_k,
                after.overall.avg_at_k
            );
            let _ = writeln!(
                out,
                "{:<24}{:.3} → {:.3}",
                format!("eval pass@{k}"),
                before.overall.pass_at_k,
                after.overall.pass_at_k
            );
        }
        let _ = writeln!(out, "skipped steps           {}", self.skipped_steps);
        let _ = writeln!(
            out,
            "failed episodes         {} ({} prompt groups dropped)",
            self.failed.episodes, self.failed.groups
        );
        let _ = writeln!(
            out,
            "metrics                 {}",
            self.out_dir.join("metrics.jsonl").display()
        );
        if let Some(tensorboard) = &self.tensorboard {
            let _ = writeln!(out, "tensorboard             {}", tensorboard.display());
        }
        if let Some(checkpoint) = &self.checkpoint {
            let _ = writeln!(out, "checkpoint              {}", checkpoint.display());
        }
        out
    }
}

impl Trainer {
    /// Loads every worker group's model and sets up the run `plan` describes.
    pub fn new(config: RunConfig, file: &RunFile, mut plan: Plan) -> anyhow::Result<Self> {
        let learning_rates = setup::group_learning_rates(&config, &file.origin)?;
        let mut groups = Vec::new();
        for ((name, section), learning_rate) in config.worker_groups.iter().zip(learning_rates) {
            let model = resolve_model(&section.model, file)?;
            let reference = section
                .reference_model
                .as_deref()
                .map(|m| resolve_model(m, file))
                .transpose()?;
            tracing::info!("worker group `{name}`: loading {}", model.display());
            let lora = section.lora.as_ref().map(crate::preflight::lora_settings);
            let mut group = WorkerGroup::load(
                name,
                section,
                &model,
                reference.as_deref(),
                lora.as_ref().map(|s| (s, adapter_names(&config, name))),
                config.run.seed,
                learning_rate,
                config.algorithm.loss.weight_decay,
            )?;
            let [beta1, beta2] = config.algorithm.loss.adam_betas;
            group
                .optimizer
                .set_betas_and_epsilon((beta1, beta2), config.algorithm.loss.adam_epsilon);
            group.set_adapter_learning_rates(setup::adapter_learning_rates(&config, name));
            if let Some(folder) = section.lora.as_ref().and_then(|l| l.init_from.as_deref()) {
                group
                    .start_adapters_from(&file.resolve(folder))
                    .with_context(|| format!("worker group `{name}`: [lora] init_from"))?;
            }
            if plan.estimator.uses_critic() {
                group.add_critic(config.algorithm.critic_settings().weight_decay)?;
            }
            group.trains = config.group_trains(name);
            groups.push(group);
        }
        let team = setup::team(&config, &mut plan, Phase::Train);
        let penalty = Penalty::new(
            config
                .agents
                .iter()
                .map(|a| {
                    a.invalid_action_penalty
                        .unwrap_or(config.algorithm.invalid_action_penalty)
                })
                .collect(),
        );
        let out_dir = file.resolve(&config.run.output_dir.to_string_lossy());
        std::fs::create_dir_all(&out_dir)
            .with_context(|| format!("creating the run folder {}", out_dir.display()))?;
        let out_dir = std::fs::canonicalize(&out_dir).unwrap_or(out_dir);
        let fleets = groups
            .iter()
            .zip(config.worker_groups.values())
            .map(|(group, section)| fleet::Fleet::for_group(group, section, file, &out_dir))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let codec_copies = if config.rollout.one_step_off_policy {
            groups
                .iter()
                .map(|g| {
                    (
                        g.pretrained.tokenizer.clone(),
                        g.pretrained.chat_template.clone(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            codec_copies,
            in_flight: None,
            agent_training: setup::agent_training(&config),
            trains: config.agents.iter().map(|a| a.trains()).collect(),
            order: TaskOrder::new(plan.train_tasks.len(), config.run.seed),
            rng: SeededRng::new(config.run.seed),
            environment: plan.environment,
            orchestra: plan.orchestra,
            estimator: plan.estimator,
            train_tasks: plan.train_tasks,
            eval_tasks: plan.eval_tasks,
            team,
            groups,
            fleets,
            penalty,
            iteration: 0,
            trained_through: 0,
            skipped_steps: 0,
            kl_coefficient: KlCoefficient::new(config.algorithm.kl_in_reward),
            failed: FailedCount::default(),
            initial_eval: None,
            out_dir,
            config,
        })
    }

    /// Takes `report`, read from `source`, as the evaluation before training instead of running
    /// it. Only sound for an evaluation of the same weights, eval tasks and `[eval]` settings
    /// with the same `[run] seed` (the eval sampler's RNG depends on the seed and the iteration
    /// only): `drmas-host experiment` passes one run's to the other estimators of its seed.
    pub fn reuse_initial_eval(&mut self, report: EvalReport, source: PathBuf) {
        self.initial_eval = Some((report, source));
    }

    /// With `offload = true` on worker group `group`: where its parts are now.
    pub fn residency(&self, group: &str) -> Option<Residency> {
        self.groups
            .iter()
            .find(|g| g.name == group)
            .and_then(WorkerGroup::residency)
    }

    /// The run folder.
    pub fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    /// Loads the weights of `checkpoint` for an evaluation (`drmas-host eval --checkpoint`),
    /// at that iteration's eval seed. Servers that cannot load weights would evaluate their
    /// own: refused.
    pub fn load_checkpoint_weights(&mut self, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        for (group, fleet) in self.groups.iter().zip(&self.fleets) {
            if fleet.as_ref().is_some_and(|f| !f.loads_weights()) {
                anyhow::bail!(
                    "worker group `{}` generates on servers that cannot load weights \
                     (weight_sync = \"none\"), so they would evaluate their own, not {}'s; \
                     give them a weight_sync, or serve the checkpoint's weights yourself and \
                     evaluate without --checkpoint",
                    group.name,
                    checkpoint.dir().display()
                );
            }
        }
        checkpoint.restore_weights(&mut self.groups)?;
        self.iteration = checkpoint.iteration();
        self.trained_through = checkpoint.iteration();
        Ok(())
    }

    /// Continues from the newest checkpoint in the run folder, if there is one; returns the
    /// iteration it resumes after. Without one the run starts over: the metrics and samples of
    /// a run killed before its first checkpoint are dropped, as they would be redone.
    pub fn resume(&mut self) -> anyhow::Result<Option<u32>> {
        Checkpoint::discard_unfinished(&self.out_dir)?;
        let Some(checkpoint) = Checkpoint::latest(&self.out_dir)? else {
            MetricsLog::truncate_after(&self.out_dir, None)?;
            return Ok(None);
        };
        let state = checkpoint.restore(&mut self.groups)?;
        self.iteration = state.iteration;
        self.trained_through = state.iteration;
        self.order = state.task_order;
        self.rng = SeededRng::from_state(&state.rng).with_context(|| {
            format!(
                "{}: the sampler state is not four words",
                checkpoint.dir().display()
            )
        })?;
        self.skipped_steps = state.skipped_steps;
        if let Some(coef) = state.kl_in_reward_coef {
            self.kl_coefficient.restore(coef);
        }
        MetricsLog::truncate_after(&self.out_dir, Some(state.iteration))?;
        Ok(Some(state.iteration))
    }

    /// Trains until `[run] iterations`, evaluating and saving at the configured cadence. When a
    /// stop signal or an error ends the run early, the last finished iteration is saved first
    /// (see `Self::stopped`).
    pub fn train(&mut self) -> anyhow::Result<TrainSummary> {
        let cut_short_eval = self.finish_cut_short_eval()?;
        let mut log = MetricsLog::open(&self.out_dir, self.config.run.tensorboard)?;
        let total = self.config.run.iterations;
        let first = self.iteration + 1;
        let before = if self.has_eval() && self.iteration == 0 {
            let report = match self.initial_eval.take() {
                Some((report, source)) => {
                    let label = format!("before training (that of {})", source.display());
                    self.publish_eval(&label, &eval_path(&self.out_dir, 0), &report)?;
                    report
                }
                None => self
                    .evaluate("before training")
                    .map_err(|error| self.stopped(error, Stage::Finished))?,
            };
            let mut metrics = Metrics::new(0);
            record_eval(&mut metrics, &report);
            log.write(&metrics)?;
            Some(report)
        } else {
            None
        };
        let mut first_last: Option<(Metrics, Metrics)> = None;
        let mut after = cut_short_eval.filter(|_| self.iteration == total);
        let mut checkpoint = None;
        for iteration in first..=total {
            self.iteration = iteration;
            let in_flight = self.in_flight.take();
            let start = match &in_flight {
                Some(in_flight) => in_flight.start.clone(),
                None => (self.order, self.rng.clone()),
            };
            let collected = match in_flight {
                Some(in_flight) => self.prepare(in_flight.sampled),
                None => self.collect(),
            };
            let collected = match collected {
                Ok(collected) => collected,
                Err(error) => {
                    // Nothing has changed but the data cursor and the sampler: rewinding them
                    // makes the state exactly the last finished iteration's.
                    (self.order, self.rng) = start;
                    self.iteration -= 1;
                    return Err(self.stopped(error, Stage::Dropped(iteration)));
                }
            };
            let beside = self.config.rollout.one_step_off_policy && iteration < total;
            let Learned {
                mut metrics,
                next_rollout,
                staged,
            } = self
                .learn(&collected, beside)
                .map_err(|error| self.stopped(error, Stage::Updating))?;
            self.trained_through = iteration;
            // A failed next rollout leaves the data cursor and the sampler where it began:
            // this iteration finishes and is saved, and a resumed run rolls it out again.
            let mut stop = match next_rollout {
                Some(Ok(next)) => {
                    self.in_flight = Some(next);
                    None
                }
                Some(Err(error)) => Some(error),
                None => None,
            };
            println!("{}", iteration_line(&metrics, total));
            let last = iteration == total;
            // From here on the iteration is finished: an error or a stop signal still lets its
            // metrics line and its checkpoint be written.
            if stop.is_none() {
                stop = staged
                    .and_then(|staged| self.sync_fleets(&mut metrics, staged))
                    .err();
            }
            if !last && stop.is_none() {
                stop = crate::interrupt::check().err().map(anyhow::Error::from);
            }
            if stop.is_none() && self.eval_due(iteration) {
                match self.evaluate(&format!("after iteration {iteration}")) {
                    Ok(report) => {
                        record_eval(&mut metrics, &report);
                        if last {
                            after = Some(report);
                        }
                    }
                    Err(error) => stop = Some(error),
                }
            }
            for (group, fleet) in self.groups.iter().zip(&self.fleets) {
                if let Some(fleet) = fleet {
                    fleet.record_health(&group.name, &mut metrics);
                }
            }
            log.write(&metrics)?;
            first_last = Some(match first_last {
                Some((first, _)) => (first, metrics),
                None => (metrics.clone(), metrics),
            });
            if self.config.run.saves_after(iteration, last) {
                checkpoint = Some(self.save()?);
            }
            if let Some(error) = stop {
                return Err(self.stopped(error, Stage::Finished));
            }
        }
        Ok(TrainSummary {
            iterations: total.saturating_sub(first - 1),
            first_last,
            eval_before_after: before.zip(after),
            skipped_steps: self.skipped_steps,
            failed: self.failed,
            out_dir: self.out_dir.clone(),
            checkpoint,
            tensorboard: log.tensorboard_dir(),
        })
    }

    /// On a resumed run: does the evaluation the iteration it resumes after was due, when a stop
    /// signal or an error skipped it or cut it short (its `eval/iteration_NNNNN.json` is
    /// missing), and adds its scores to that iteration's metrics line, as an uninterrupted run
    /// has them. It draws from its own RNG, so the scores are the ones that run gets.
    fn finish_cut_short_eval(&mut self) -> anyhow::Result<Option<EvalReport>> {
        let iteration = self.iteration;
        if iteration == 0
            || !self.eval_due(iteration)
            || eval_path(&self.out_dir, iteration).exists()
        {
            return Ok(None);
        }
        let report = self
            .evaluate(&format!("after iteration {iteration} (cut short before)"))
            .map_err(|error| self.stopped(error, Stage::Finished))?;
        let mut metrics = Metrics::new(iteration);
        record_eval(&mut metrics, &report);
        MetricsLog::amend(&self.out_dir, &metrics)?;
        Ok(Some(report))
    }

    /// Whether an evaluation follows `iteration`: every `[run] eval_every` iterations and after
    /// the last one.
    fn eval_due(&self, iteration: u32) -> bool {
        let every = self.config.run.eval_every;
        self.has_eval()
            && ((every > 0 && iteration.is_multiple_of(every))
                || iteration == self.config.run.iterations)
    }

    /// Ends a run that `error` (or a stop signal) cut short at `stage`: saves the last finished
    /// iteration unless a checkpoint of it exists, there is none or the run saves nothing, says
    /// on stderr what was saved and how to continue, and hands the error back.
    fn stopped(&self, error: anyhow::Error, stage: Stage) -> anyhow::Error {
        let interrupted = crate::interrupt::interruption(&error);
        let what = match interrupted {
            Some(interrupted) => interrupted.to_string(),
            None => "an error".to_owned(),
        };
        // A signal during an update is honoured once the update (and its iteration) is done.
        let finished_first = match interrupted {
            Some(interrupted) if interrupted.during_update && matches!(stage, Stage::Finished) => {
                format!(
                    "{} came during the update of iteration {}, which was finished first. ",
                    interrupted.signal_name(),
                    self.iteration
                )
            }
            _ => String::new(),
        };
        let note = match stage {
            Stage::Updating => format!(
                "{what} in the update of iteration {}: the weights are between two iterations, \
                 so nothing is saved. {}",
                self.iteration,
                stopped::resume_hint(Checkpoint::latest(&self.out_dir).ok().flatten().as_ref())
            ),
            Stage::Dropped(_) | Stage::Finished if self.iteration == 0 => {
                format!("{what} before the first iteration finished: nothing to save.")
            }
            Stage::Dropped(_) | Stage::Finished => {
                let dropped = match stage {
                    Stage::Dropped(iteration) => {
                        format!("iteration {iteration} was dropped ({what} in its rollout). ")
                    }
                    _ => String::new(),
                };
                match self.config.run.saves().then(|| self.save_unless_saved()) {
                    None => format!(
                        "{dropped}{finished_first}Iteration {} is not saved: the run file's \
                         `[run] save_every = -1` writes no checkpoint.",
                        self.iteration
                    ),
                    Some(Ok(saved)) => format!(
                        "{dropped}{finished_first}{}",
                        stopped::resume_hint(Some(&saved))
                    ),
                    Some(Err(save_error)) => format!(
                        "{dropped}saving iteration {} failed too: {save_error:#}",
                        self.iteration
                    ),
                }
            }
        };
        eprintln!("{note}");
        error
    }

    /// The checkpoint of the current iteration: the one in the run folder, else a new one.
    fn save_unless_saved(&self) -> anyhow::Result<Checkpoint> {
        if let Some(latest) = Checkpoint::latest(&self.out_dir)? {
            if latest.iteration() == self.iteration {
                return Ok(latest);
            }
        }
        self.save()?;
        Checkpoint::latest(&self.out_dir)?
            .context("the checkpoint just written is not in the run folder")
    }

    /// Writes a checkpoint of the current iteration; returns its folder.
    pub fn save(&self) -> anyhow::Result<PathBuf> {
        // A rollout made beside the update is not saved: the checkpoint resumes before it.
        let (task_order, rng) = match &self.in_flight {
            Some(in_flight) => (in_flight.start.0, &in_flight.start.1),
            None => (self.order, &self.rng),
        };
        Checkpoint::write(
            &self.out_dir,
            &checkpoint::TrainerState {
                iteration: self.iteration,
                task_order,
                rng: rng.state(),
                skipped_steps: self.skipped_steps,
                kl_in_reward_coef: self
                    .config
                    .algorithm
                    .kl_in_reward
                    .enabled()
                    .then(|| self.kl_coefficient.value()),
            },
            &self.groups,
        )
    }

    fn has_eval(&self) -> bool {
        !self.eval_tasks.is_empty() && self.config.eval.k > 0
    }

    /// The first half of an iteration, as the data walks: the next prompts, each `group_size`
    /// times → rollout (one call per agent turn) → penalised rewards → the estimator's
    /// advantages. It changes no weights, so a failed or interrupted one can be dropped.
    fn collect(&mut self) -> anyhow::Result<Collected> {
        let sampled = self.sample()?;
        self.prepare(sampled)
    }

    /// Rolls out the iteration's prompt groups on the worker groups' current weights.
    fn sample(&mut self) -> anyhow::Result<Sampled> {
        self.prepare_generators()?;
        let (local, codecs) = split_groups(&mut self.groups, &self.config);
        let generators = generators(&local, &self.fleets);
        Sampler {
            crew: Crew {
                orchestra: &self.orchestra,
                environment: &self.environment,
                team: &self.team,
                codecs: &codecs,
                generators: &generators,
            },
            config: &self.config,
            penalty: &self.penalty,
            train_tasks: &self.train_tasks,
            order: &mut self.order,
            rng: &mut self.rng,
            iteration: self.iteration,
            sampled_by: self.trained_through,
            show_progress: true,
        }
        .sample()
    }

    /// The rest of the first half of an iteration on `sampled`, its rollout: the samples
    /// written, the critic's values, the greedy baselines and the KL in the reward where the
    /// run has them, and the estimator's advantages, all from the current weights.
    fn prepare(&mut self, sampled: Sampled) -> anyhow::Result<Collected> {
        let Sampled {
            groups: sampled,
            mut metrics,
        } = sampled;
        let group_size = self.config.rollout.group_size;
        self.write_samples(&sampled.generated, &sampled.tasks, group_size)?;
        if sampled.batch().episodes.is_empty() && sampled.failed_groups > 0 {
            return Err(nothing_left_to_train(&sampled.generated, self.iteration));
        }
        self.failed.episodes += sampled.generated.failed_episodes() as u64;
        self.failed.groups += sampled.failed_groups as u64;

        let rollout = sampled.batch();
        let samples = samples(&self.team, &self.config, rollout);
        let rewards = shaped_rewards(
            &self.team,
            &self.config,
            &self.penalty,
            rollout,
            &samples,
            Some(&mut metrics),
        );
        let lengths: Vec<usize> = rollout.calls.iter().map(|c| c.response.len()).collect();
        let values = if self.estimator.uses_critic() {
            Some(self.critic_values(rollout)?)
        } else {
            None
        };
        let baselines = if self.estimator.uses_greedy_baseline() {
            Some(self.greedy_baselines(&sampled, &samples, &mut metrics)?)
        } else {
            None
        };
        let kl_penalties = if self.config.algorithm.kl_in_reward.enabled() {
            Some(self.kl_penalties(rollout, &mut metrics)?)
        } else {
            None
        };
        let anchors: Option<Vec<&str>> = self.estimator.uses_anchor_texts().then(|| {
            rollout
                .calls
                .iter()
                .map(|call| rollout.episodes[call.episode].step_anchor(call.step))
                .collect()
        });
        let estimate = self.estimator.token_advantages(&TokenInput {
            samples: &samples,
            rewards: &rewards,
            lengths: &lengths,
            values: values.as_ref(),
            baselines: baselines.as_deref(),
            anchors: anchors.as_deref(),
            kl_penalties: kl_penalties.as_ref().map(|kl| &kl.penalties),
        })?;
        record_advantages(
            &mut metrics,
            &samples,
            &rewards,
            &estimate.advantages.row_means(),
            &self.team,
        );
        for &(name, value) in &estimate.diagnostics {
            metrics.set(format!("advantage/{name}"), value);
        }
        Ok(Collected {
            metrics,
            sampled,
            advantages: estimate.advantages,
            values,
            returns: estimate.returns,
            reference_kl: kl_penalties.as_ref().map(|kl| kl.mean_kl),
            recomputed: kl_penalties.map(|kl| kl.recomputed).unwrap_or_default(),
        })
    }

    /// The second half of the current iteration: its update. With `next_rollout_beside`, the
    /// next iteration's rollout runs on the servers meanwhile, sampled by the weights they hold:
    /// one update behind; the new weights are written for the servers while it goes on, and
    /// loaded once it is done. A failed rollout leaves the data cursor and the sampler where it
    /// began.
    fn learn(
        &mut self,
        collected: &Collected,
        next_rollout_beside: bool,
    ) -> anyhow::Result<Learned> {
        if next_rollout_beside {
            self.prepare_generators()?;
        }
        let codecs: Vec<ChatCodec<'_>> = self
            .codec_copies
            .iter()
            .map(|(tokenizer, template)| ChatCodec::new(tokenizer, template))
            .collect();
        let generators: Vec<&dyn Generator> = if next_rollout_beside {
            self.fleets
                .iter()
                .map(|fleet| fleet.as_ref().map(|f| &f.generator as &dyn Generator))
                .collect::<Option<_>>()
                .context("[rollout] one_step_off_policy needs every worker group on servers")?
        } else {
            Vec::new()
        };
        let start = (self.order, self.rng.clone());
        let (mut order, mut rng) = start.clone();
        let sampler = next_rollout_beside.then(|| Sampler {
            crew: Crew {
                orchestra: &self.orchestra,
                environment: &self.environment,
                team: &self.team,
                codecs: &codecs,
                generators: &generators,
            },
            config: &self.config,
            penalty: &self.penalty,
            train_tasks: &self.train_tasks,
            order: &mut order,
            rng: &mut rng,
            iteration: self.iteration + 1,
            sampled_by: self.trained_through,
            show_progress: false,
        });
        let version = weight_version(self.iteration);
        let (learned, staged, sampled, waited) = std::thread::scope(|scope| {
            let rollout = sampler.map(|sampler| scope.spawn(move || sampler.sample()));
            let learned = Learner {
                groups: &mut self.groups,
                config: &self.config,
                team: &self.team,
                trains: &self.trains,
                agent_training: &self.agent_training,
                skipped_steps: &mut self.skipped_steps,
                kl_coefficient: &mut self.kl_coefficient,
                iteration: self.iteration,
            }
            .learn(collected);
            let staged = match (&learned, &rollout) {
                (Ok(_), Some(_)) => stage_weights(&self.groups, &self.fleets, &version),
                _ => Ok(Vec::new()),
            };
            let staged_at = Instant::now();
            let sampled = rollout.map(|rollout| {
                rollout
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            });
            (learned, staged, sampled, staged_at.elapsed())
        });
        let mut metrics = learned?;
        if sampled.is_some() {
            metrics.set("time/next_rollout_wait_s", waited.as_secs_f64());
        }
        let next_rollout = sampled.map(|sampled| {
            sampled.map(|sampled| {
                (self.order, self.rng) = (order, rng);
                InFlight { sampled, start }
            })
        });
        Ok(Learned {
            metrics,
            next_rollout,
            staged,
        })
    }

    /// Sends the new weights of every remote worker group that trains to its servers: those
    /// `staged` holds for a group (one per group, or none) are loaded, the others written
    /// first.
    fn sync_fleets(
        &self,
        metrics: &mut Metrics,
        mut staged: Vec<Option<StagedWeights>>,
    ) -> anyhow::Result<()> {
        let version = weight_version(self.trained_through);
        for (index, (group, fleet)) in self.groups.iter().zip(&self.fleets).enumerate() {
            if let Some(fleet) = fleet.as_ref().filter(|_| group.trains) {
                let seconds = match staged.get_mut(index).and_then(Option::take) {
                    Some(staged) => fleet.load(&group.name, staged)?,
                    None => fleet.sync(group, &version)?,
                };
                metrics.set(format!("time/weight_sync_s/{}", group.name), seconds);
            }
        }
        Ok(())
    }

    /// ReMax's baselines: each prompt group of `sampled`'s batch rolled out once more, greedily
    /// and from an RNG of its own (so the training samples do not shift); each of `samples`
    /// (the batch's calls) gets the reward of its group's greedy episode, 0 when that episode
    /// failed.
    fn greedy_baselines(
        &mut self,
        sampled: &SampledGroups,
        samples: &[Sample],
        metrics: &mut Metrics,
    ) -> anyhow::Result<Vec<f64>> {
        let started = Instant::now();
        let tasks = sampled.batch_tasks();
        let rollout = self.rollout_aside(&tasks, Phase::Greedy, 0x6EED, "greedy baseline")?;
        warn_failures(&rollout, "greedy baseline", "its prompt's baseline is 0");
        let rewards: Vec<f64> = rollout.episodes.iter().map(|e| e.reward()).collect();
        metrics.set(
            "reward/greedy_baseline_mean",
            rewards.iter().sum::<f64>() / rewards.len().max(1) as f64,
        );
        metrics.set("time/greedy_baseline_s", started.elapsed().as_secs_f64());
        Ok(samples.iter().map(|s| rewards[s.uid as usize]).collect())
    }

    /// Each group's critic's values of its calls of `rollout`, in call order (an offloaded
    /// group's training state, the critic with it, comes back first).
    fn critic_values(&mut self, rollout: &Rollout) -> anyhow::Result<PerToken> {
        let mut rows: Vec<Vec<f64>> = vec![Vec::new(); rollout.calls.len()];
        for (index, group) in self.groups.iter_mut().enumerate() {
            if group.critic.is_none() {
                continue;
            }
            group.prepare_update();
            let Some(critic) = &group.critic else {
                continue;
            };
            let own = calls_of_group(&self.team, rollout, index);
            let calls: Vec<&AgentCall> = own.iter().map(|&i| &rollout.calls[i]).collect();
            let values = critic
                .values(
                    &calls,
                    MicroBatch::for_critic(&self.config.algorithm.critic_settings()),
                )
                .with_context(|| format!("worker group `{}`: the critic's values", group.name))
                .map_err(|error| out_of_memory::in_critic(error, &group.name, &self.config))?;
            for (&i, row) in own.iter().zip(values.rows()) {
                rows[i] = row.to_vec();
            }
        }
        Ok(PerToken::from_rows(rows))
    }

    /// The KL penalty β·KL of each response token of `rollout` against its worker group's
    /// reference (`[algorithm.kl_in_reward]`), with what the update reuses; the KL (overall and
    /// per agent, over the agents that train), β and the seconds the reference took go into
    /// `metrics`. Only the calls of agents that train are penalised: a frozen agent's policy is
    /// not steered, so a group no agent trains needs no reference.
    fn kl_penalties(
        &mut self,
        rollout: &Rollout,
        metrics: &mut Metrics,
    ) -> anyhow::Result<KlInReward> {
        let started = Instant::now();
        let settings = self.config.algorithm.kl_in_reward;
        let mut rows: Vec<Vec<f64>> = rollout
            .calls
            .iter()
            .map(|call| vec![0.0; call.response.len()])
            .collect();
        let mut recomputed: Vec<Option<Vec<f32>>> = vec![None; rollout.calls.len()];
        for (index, group) in self.groups.iter_mut().enumerate() {
            let own = trained_calls_of_group(&self.team, &self.trains, rollout, index);
            if own.is_empty() {
                continue;
            }
            // The reference (and, offloaded, the rest of the training state) comes back first.
            group.prepare_update();
            let model = &group.pretrained.model;
            let reference = Reference::for_group(
                group.reference.as_ref().map(|reference| &reference.model),
                !group.adapter_names.is_empty(),
            );
            let Some(reference) = reference.model(model) else {
                anyhow::bail!(
                    "worker group `{}` has no reference for [algorithm.kl_in_reward]; set its \
                     reference_model or train LoRA adapters",
                    group.name
                );
            };
            let calls: Vec<&AgentCall> = own.iter().map(|&i| &rollout.calls[i]).collect();
            let kl = reference_kl(
                model,
                reference,
                &calls,
                &self.agent_training,
                settings.kl_type,
            )
            .with_context(|| {
                format!(
                    "worker group `{}`: the KL against its reference for the reward",
                    group.name
                )
            })
            .map_err(|error| {
                out_of_memory::in_reference_kl(
                    error,
                    &group.name,
                    &self.config,
                    &self.agent_training,
                )
            })?;
            for (&i, row) in own.iter().zip(kl.kl.rows()) {
                rows[i] = row.to_vec();
            }
            for (&i, row) in own.iter().zip(kl.recomputed) {
                recomputed[i] = row;
            }
        }
        let kl = PerToken::from_rows(rows);
        metrics.set("time/kl_in_reward_s", started.elapsed().as_secs_f64());
        let beta = self.kl_coefficient.value();
        // The KL the coefficient steers is the trained policies'.
        let trained: Vec<usize> = (0..rollout.calls.len())
            .filter(|&i| self.trains[rollout.calls[i].agent])
            .collect();
        let mean = mean_kl(&kl.select(&trained));
        metrics.set("kl_in_reward/kl", mean);
        metrics.set("kl_in_reward/coef", beta);
        for (agent, member) in self.team.iter().enumerate() {
            if !self.trains[agent] {
                continue;
            }
            let own: Vec<usize> = (0..rollout.calls.len())
                .filter(|&i| rollout.calls[i].agent == agent)
                .collect();
            if !own.is_empty() {
                metrics.set(
                    format!("kl_in_reward/kl/{}", member.role),
                    mean_kl(&kl.select(&own)),
                );
            }
        }
        let penalties = PerToken::from_rows(
            kl.rows()
                .map(|row| row.iter().map(|k| beta * k).collect::<Vec<f64>>()),
        );
        Ok(KlInReward {
            penalties,
            mean_kl: mean,
            recomputed,
        })
    }

    /// Appends the first prompt group's calls (role, text, validity, episode and own reward,
    /// token counts, why generation stopped) to `samples.jsonl`, so what the agents actually write can be read along the metrics.
    fn write_samples(
        &self,
        rollout: &Rollout,
        batch: &[Task],
        group_size: usize,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.out_dir.join("samples.jsonl");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        for call in rollout.calls.iter().filter(|c| c.episode < group_size) {
            let line = serde_json::json!({
                "iteration": self.iteration,
                "episode": call.episode,
                "task": batch.first().map(|t| t.prompt.as_str()),
                "role": self.team[call.agent].role,
                "valid": call.valid,
                "reward": rollout.episodes[call.episode].reward(),
                "failed": rollout.episodes[call.episode].is_failed(),
                "call_reward": rollout.episodes[call.episode].call_reward(call.index),
                "prompt_tokens": call.prompt.len(),
                "response_tokens": call.response.len(),
                "finish": call.finish.name(),
                "text": call.text,
            });
            writeln!(file, "{line}").with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Rolls out one episode per task with the team's current sampling settings.
    fn rollout(&mut self, tasks: &[&Task], label: &str) -> anyhow::Result<Rollout> {
        self.prepare_generators()?;
        let (local, codecs) = split_groups(&mut self.groups, &self.config);
        let generators = generators(&local, &self.fleets);
        let crew = Crew {
            orchestra: &self.orchestra,
            environment: &self.environment,
            team: &self.team,
            codecs: &codecs,
            generators: &generators,
        };
        run_rollout(&crew, &self.config, tasks, Some(label), &mut self.rng)
    }

    /// Readies every worker group to generate: servers get the trainer's weights where they
    /// have not yet (a resumed run's are not the model file's), local groups' offloaded weights
    /// come back (a group on servers leaves its weights in host memory until its update).
    fn prepare_generators(&mut self) -> anyhow::Result<()> {
        for (group, fleet) in self.groups.iter().zip(&self.fleets) {
            if let Some(fleet) = fleet.as_ref().filter(|f| !f.synced()) {
                fleet.sync(group, &weight_version(self.trained_through))?;
            }
        }
        for (group, fleet) in self.groups.iter_mut().zip(&self.fleets) {
            if fleet.is_none() {
                group.prepare_rollout();
            }
        }
        Ok(())
    }

    /// Rolls out `tasks` with the team's `phase` sampling settings and an RNG of its own (seeded
    /// by the run's seed, `salt` and the iteration), so the training samples never shift; the
    /// team is back on its training settings afterwards, whatever the outcome.
    fn rollout_aside(
        &mut self,
        tasks: &[&Task],
        phase: Phase,
        salt: u64,
        label: &str,
    ) -> anyhow::Result<Rollout> {
        setup::set_phase(&self.config, &mut self.team, phase);
        let training_rng = std::mem::replace(
            &mut self.rng,
            SeededRng::new(self.config.run.seed ^ salt ^ u64::from(self.iteration)),
        );
        let result = self.rollout(tasks, label);
        self.rng = training_rng;
        setup::set_phase(&self.config, &mut self.team, Phase::Train);
        result
    }

    /// Runs `[eval] k` episodes per evaluation task at the eval sampling settings, writes
    /// `eval/iteration_NNNNN.json` (the current iteration) in the run folder and prints the
    /// scores under `label`.
    pub fn evaluate(&mut self, label: &str) -> anyhow::Result<EvalReport> {
        let path = eval_path(&self.out_dir, self.iteration);
        self.evaluate_into(label, &path)
    }

    /// [`Self::evaluate`] outside training (`drmas-host eval`): writes
    /// `eval/standalone_<unix seconds>.json` (`standalone_iteration_NNNNN_<unix seconds>.json`
    /// for a checkpoint's weights), so it never replaces a training run's own evaluations in
    /// the same folder.
    pub fn evaluate_standalone(&mut self) -> anyhow::Result<EvalReport> {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = match self.iteration {
            0 => format!("standalone_{seconds}.json"),
            iteration => format!("standalone_iteration_{iteration:05}_{seconds}.json"),
        };
        let path = self.out_dir.join("eval").join(name);
        self.evaluate_into("eval", &path)
    }

    /// Runs the evaluation and writes it to `path`.
    fn evaluate_into(&mut self, label: &str, path: &Path) -> anyhow::Result<EvalReport> {
        let k = self.config.eval.k;
        let tasks: Vec<Task> = self.eval_tasks.clone();
        let episodes: Vec<&Task> = tasks
            .iter()
            .flat_map(|t| std::iter::repeat_n(t, k))
            .collect();
        let rollout = self.rollout_aside(&episodes, Phase::Eval, 0xE7A1, "eval")?;
        warn_failures(&rollout, "eval", "scored 0");
        let rewards: Vec<Vec<f64>> = rollout
            .episodes
            .chunks(k)
            .map(|chunk| chunk.iter().map(|e| e.reward()).collect())
            .collect();
        let sources: Vec<&str> = tasks.iter().map(|t| t.data_source.as_str()).collect();
        let report = EvalReport {
            failed_episodes: rollout.failed_episodes(),
            ..score(&sources, &rewards)
        };
        self.publish_eval(label, path, &report)?;
        Ok(report)
    }

    /// Writes `report` to `path` and prints its scores under `label`.
    fn publish_eval(&self, label: &str, path: &Path, report: &EvalReport) -> anyhow::Result<()> {
        let k = report.overall.k;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        let failed = match report.failed_episodes {
            0 => String::new(),
            n => format!(", {n} failed episodes scored 0"),
        };
        println!(
            "eval {label}: avg@{k} {:.3}  pass@{k} {:.3}  mean reward {:.3}  ({} questions{failed})",
            report.overall.avg_at_k,
            report.overall.pass_at_k,
            report.overall.mean_reward,
            report.overall.questions
        );
        Ok(())
    }
}

/// Each worker group's in-process generator (with the prefix cache its rollout section asks
/// for) and chat codec.
fn split_groups<'g>(
    groups: &'g mut [WorkerGroup],
    config: &RunConfig,
) -> (Vec<LocalGenerator<'g>>, Vec<ChatCodec<'g>>) {
    groups
        .iter_mut()
        .map(|group| {
            let section = config.worker_groups.get(&group.name);
            let bytes = section.map_or(0, |section| section.rollout.prefix_cache_bytes());
            let (generator, codec) = LocalGenerator::split(&mut group.pretrained);
            match bytes {
                0 => (generator, codec),
                bytes => (generator.with_prefix_cache(bytes), codec),
            }
        })
        .unzip()
}

/// The generator each worker group's calls go to: its servers, else its own model (`local`).
fn generators<'a>(
    local: &'a [LocalGenerator<'_>],
    fleets: &'a [Option<fleet::Fleet>],
) -> Vec<&'a dyn Generator> {
    local
        .iter()
        .zip(fleets)
        .map(|(local, fleet)| match fleet {
            Some(fleet) => &fleet.generator as &dyn Generator,
            None => local as &dyn Generator,
        })
        .collect()
}

/// The weight version of the weights after `iteration` (0: before training).
fn weight_version(iteration: u32) -> String {
    format!("iteration-{iteration}")
}

/// What an iteration rolled out, and what it trains on.
#[derive(Debug, Default)]
struct SampledGroups {
    /// Every episode rolled out, in prompt groups of `group_size`.
    generated: Rollout,
    /// The task of each prompt group of `generated`.
    tasks: Vec<Task>,
    /// Under dynamic sampling or when episodes failed, the groups of `generated` kept for
    /// training.
    kept: Option<Rollout>,
    /// Prompt groups of `generated` dropped because one of their episodes failed.
    failed_groups: usize,
    /// Whether each prompt group of `generated` is trained on (all of them when `kept` is
    /// `None`).
    keep: Vec<bool>,
}

impl SampledGroups {
    /// The rollout the iteration trains on.
    fn batch(&self) -> &Rollout {
        self.kept.as_ref().unwrap_or(&self.generated)
    }

    /// The task of each prompt group of [`Self::batch`].
    fn batch_tasks(&self) -> Vec<&Task> {
        self.tasks
            .iter()
            .zip(&self.keep)
            .filter(|(_, &kept)| kept)
            .map(|(task, _)| task)
            .collect()
    }
}

/// The first half of an iteration (see [`Trainer::collect`]).
struct Collected {
    /// The rollout's metrics so far.
    metrics: Metrics,
    /// What was rolled out.
    sampled: SampledGroups,
    /// The advantages of each response token of `sampled.batch()`'s calls.
    advantages: PerToken,
    /// With a critic: its values of the same tokens, and the returns it trains on.
    values: Option<PerToken>,
    /// See `values`.
    returns: Option<PerToken>,
    /// With the KL in the reward: the batch's mean KL, which steers its coefficient once the
    /// iteration is trained.
    reference_kl: Option<f64>,
    /// With the KL in the reward: each call's old log-probabilities where its agent recomputes
    /// them (computed for the KL, reused by the update); empty otherwise.
    recomputed: Vec<Option<Vec<f32>>>,
}

/// What an iteration's update half leaves.
struct Learned {
    /// The iteration's metrics.
    metrics: Metrics,
    /// Under `[rollout] one_step_off_policy`, the next iteration's rollout made beside the
    /// update, or the error that ended it.
    next_rollout: Option<anyhow::Result<InFlight>>,
    /// The new weights written for each group's servers while that rollout went on, or the
    /// error that ended the writing; empty when nothing was written ahead.
    staged: anyhow::Result<Vec<Option<StagedWeights>>>,
}

/// Writes the weights of every worker group that trains on servers for them to load as
/// `version` (see [`fleet::Fleet::stage`]); one entry per group.
fn stage_weights(
    groups: &[WorkerGroup],
    fleets: &[Option<fleet::Fleet>],
    version: &str,
) -> anyhow::Result<Vec<Option<StagedWeights>>> {
    groups
        .iter()
        .zip(fleets)
        .map(
            |(group, fleet)| match fleet.as_ref().filter(|_| group.trains) {
                Some(fleet) => fleet.stage(group, version).map(Some),
                None => Ok(None),
            },
        )
        .collect()
}

/// The next iteration's rollout, made beside an update (`[rollout] one_step_off_policy`).
struct InFlight {
    sampled: Sampled,
    /// The data cursor and the sampler's RNG before it: where a checkpoint of the iteration
    /// it was made beside resumes.
    start: (TaskOrder, SeededRng),
}

/// What the KL in the reward computed for a rollout.
struct KlInReward {
    /// β·KL of each response token, one row per call.
    penalties: PerToken,
    /// The batch's mean KL, for the coefficient's controller.
    mean_kl: f64,
    /// Each call's recomputed old log-probabilities (see [`Collected::recomputed`]).
    recomputed: Vec<Option<Vec<f32>>>,
}

/// Where in an iteration a run was cut short, which decides what can be saved.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// In the rollout half of this iteration, which is dropped: the previous one is saved.
    Dropped(u32),
    /// In an update: some weights may have changed, nothing consistent can be saved.
    Updating,
    /// After the current iteration finished (or before the first one began).
    Finished,
}

/// A progress bar on stderr for one phase (drawn only when stderr is a terminal).
fn phase_bar(len: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {elapsed_precise}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label.to_owned());
    bar
}
