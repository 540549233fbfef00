//! [`update_group`]: a worker group's optimizer steps over its agents' calls — mini-batches of
//! episodes and epochs, micro-batches with gradient accumulation, per-agent gradient norms,
//! clipping, and a skipped step when anything is non-finite.

use std::collections::BTreeMap;
use std::time::Instant;

use tch::{Kind, Tensor};

use super::mini_batch::split_by_episode;
use super::{
    padded_rows, policy_loss, recompute_old_logprobs, tis_weights, AdamW, BatchTotals, ChunkedHead,
    GradientLedger, LossInputs, LossStats, LrSchedule, MicroBatch, Mismatch, RolloutCorrection,
    TrainingBatch,
};
use crate::advantage::PerToken;
use crate::config::{LossSection, LrDecay};
use crate::model::error::ModelError;
use crate::model::llama::Llama;
use crate::rollout::AgentCall;

/// An agent's training settings (the run's, with the agent's overrides applied).
#[derive(Debug, Clone)]
pub struct AgentTraining {
    /// Its loss settings.
    pub loss: LossSection,
    /// The size of its forward/backward passes.
    pub micro_batch: MicroBatch,
    /// Its LoRA adapter in the worker group's model (`None`: the model's own weights).
    pub adapter: Option<usize>,
    /// Keep only each layer's input in the forward and recompute the layer in the backward
    /// (its worker group's `activation_checkpointing`).
    pub activation_checkpointing: bool,
    /// Where its old log-probabilities come from, and the TIS correction.
    pub correction: RolloutCorrection,
}

/// Where the KL term's reference log-probabilities come from.
#[derive(Debug, Clone, Copy)]
pub enum Reference<'a> {
    /// No reference: no KL term.
    None,
    /// A frozen model of its own.
    Model(&'a Llama),
    /// The trained model with its LoRA adapters off (the base model, no second copy).
    Base,
}

impl<'a> Reference<'a> {
    /// A worker group's reference: its `reference_model` when it loads one, else its own model
    /// with the adapters off when it trains LoRA adapters, else none.
    pub fn for_group(reference_model: Option<&'a Llama>, has_adapters: bool) -> Self {
        match (reference_model, has_adapters) {
            (Some(reference), _) => Self::Model(reference),
            (None, true) => Self::Base,
            (None, false) => Self::None,
        }
    }

    /// The model whose forward without adapters gives the reference log-probabilities, for a
    /// group training `policy`; `None` without a reference.
    pub fn model(self, policy: &'a Llama) -> Option<&'a Llama> {
        match self {
            Self::None => None,
            Self::Model(reference) => Some(reference),
            Self::Base => Some(policy),
        }
    }
}

/// The first value that was not finite in a skipped step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NonFinite {
    /// The policy loss of a micro-batch of this agent's calls (agent index).
    Loss {
        /// The agent (index in the team).
        agent: usize,
    },
    /// The gradient of this parameter (its name in the model or adapter store).
    Gradient {
        /// The parameter's name.
        parameter: String,
    },
}

/// How a worker group's update steps through its calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateSettings {
    /// Optimizer steps per pass over the calls: their episodes split into this many
    /// mini-batches (`split_by_episode`).
    pub mini_batches: usize,
    /// Passes over the calls (PPO's epochs), each through the same mini-batches.
    pub epochs: usize,
    /// Clip each step's gradient to this global norm (0: off).
    pub grad_clip: f64,
    /// The learning rate of each optimizer step.
    pub schedule: LrSchedule,
}

impl UpdateSettings {
    /// One optimizer step over every call at learning rate `lr`, the gradient clipped to
    /// `grad_clip`.
    pub fn one_step(grad_clip: f64, lr: f64) -> Self {
        Self {
            mini_batches: 1,
            epochs: 1,
            grad_clip,
            schedule: LrSchedule {
                peak: lr,
                warmup_steps: 0,
                decay: LrDecay::Constant,
                total_steps: 1,
                min_lr_ratio: 0.0,
            },
        }
    }
}

/// What one update did: over every optimizer step, the loss parts and gradient norms averaged,
/// the tokens added up.
#[derive(Debug, Clone, Default)]
pub struct UpdateReport {
    /// The group's gradient norm before clipping, averaged over the steps taken (NaN when
    /// every step was skipped).
    pub grad_norm: f64,
    /// Each agent's own gradient norm (what its calls alone contributed), averaged over the
    /// steps that had its calls, by agent index.
    pub agent_grad_norms: BTreeMap<usize, f64>,
    /// Loss parts, each step's over its mini-batch (the micro-batches' shares added up),
    /// averaged over the steps.
    pub stats: LossStats,
    /// Why the first skipped step was skipped, when a loss or gradient was not finite.
    pub skipped: Option<NonFinite>,
    /// Optimizer steps skipped.
    pub skipped_steps: usize,
    /// Optimizer steps taken.
    pub steps: usize,
    /// The learning rate of the first step.
    pub learning_rate: f64,
    /// Calls trained on.
    pub calls: usize,
    /// Response tokens trained on, every epoch counted.
    pub response_tokens: usize,
    /// Tokens through the training forward passes (prompts, responses and padding), every
    /// epoch counted.
    pub forward_tokens: usize,
    /// Each recomputing agent's trainer-vs-sampler log-ratio, by agent index.
    pub mismatch: BTreeMap<usize, Mismatch>,
    /// Seconds spent recomputing old log-probabilities (and measuring the mismatch); 0 when no
    /// agent of the group recomputes.
    pub recompute_seconds: f64,
}

/// Trains `model` on `inputs`' calls (all generated by its worker group) with their advantages:
/// `settings.epochs` passes, each one optimizer step per mini-batch of episodes.
///
/// Old log-probabilities that an agent recomputes are computed for every call before the first step
/// (unless `inputs` holds them), so every step's ratio is against the model that sampled. In a
/// mini-batch, calls are grouped by agent (each agent's settings from `agents[call.agent]`) and
/// sorted by length so micro-batches carry little padding. Each micro-batch's sums are divided by
/// the whole mini-batch's call and token counts ([`BatchTotals`]), so the accumulated gradient is
/// that of one batch of the mini-batch's calls, whatever the micro-batch size; an agent's gradient
/// norm is the norm of what its micro-batches accumulated. A step is skipped, gradients dropped,
/// when its loss or any gradient is not finite. `reference` gives the KL term's log-probabilities.
/// An agent with a LoRA adapter trains through it (dropout on), so only its adapter receives its
/// calls' gradients.
pub fn update_group(
    model: &Llama,
    reference: Reference<'_>,
    optimizer: &mut AdamW,
    inputs: &UpdateInputs<'_>,
    agents: &[AgentTraining],
    settings: &UpdateSettings,
) -> Result<UpdateReport, ModelError> {
    let calls = inputs.calls;
    let mut report = UpdateReport {
        calls: calls.len(),
        learning_rate: settings.schedule.at(optimizer.steps() + 1),
        ..UpdateReport::default()
    };
    if calls.is_empty() {
        return Ok(report);
    }
    let mini_batches = split_by_episode(calls, settings.mini_batches)
        .iter()
        .map(|indices| prepare(model, inputs, indices, agents, &mut report))
        .collect::<Result<Vec<_>, _>>()?;
    let mut steps = Vec::with_capacity(settings.epochs * mini_batches.len());
    for _ in 0..settings.epochs.max(1) {
        for mini_batch in &mini_batches {
            let lr = settings.schedule.at(optimizer.steps() + 1);
            let step = take_step(
                model,
                reference,
                optimizer,
                mini_batch,
                agents,
                settings.grad_clip,
                lr,
            )?;
            report.response_tokens += mini_batch.response_tokens;
            report.forward_tokens += mini_batch.forward_tokens;
            steps.push(step);
        }
    }
    average_steps(&mut report, steps);
    Ok(report)
}

/// One mini-batch as the steps train it: each agent's micro-batches, with the old
/// log-probabilities recomputed where the agent asks.
struct MiniBatch {
    /// Its call and response-token counts, which each micro-batch's loss is divided by.
    totals: BatchTotals,
    /// Each agent's micro-batches, by agent index.
    agents: BTreeMap<usize, Vec<Pass>>,
    response_tokens: usize,
    forward_tokens: usize,
}

/// One micro-batch: its tensors and, when its agent recomputes them, the old
/// log-probabilities and TIS weights.
struct Pass {
    batch: TrainingBatch,
    recomputed: Option<Tensor>,
    tis_weights: Option<Tensor>,
}

/// What one optimizer step did.
struct StepReport {
    grad_norm: f64,
    agent_grad_norms: BTreeMap<usize, f64>,
    stats: LossStats,
    skipped: Option<NonFinite>,
}

/// What an update trains on: a worker group's calls, the advantages of their response tokens
/// (row `i` for `calls[i]`), and the old log-probabilities the training forward already
/// computed for some of them with the model as it is now (`recomputed[i]`, as
/// [`super::reference_kl`] leaves them; missing or `None`: computed by the update). A
/// micro-batch whose calls all have theirs takes them instead of another forward.
pub struct UpdateInputs<'a> {
    /// The calls, all generated by the group.
    pub calls: &'a [&'a AgentCall],
    /// One row per call.
    pub advantages: &'a PerToken,
    /// Empty, or one entry per call.
    pub recomputed: &'a [Option<&'a [f32]>],
}

impl<'a> UpdateInputs<'a> {
    /// `calls` and their `advantages`, every old log-probability left to the update.
    pub fn new(calls: &'a [&'a AgentCall], advantages: &'a PerToken) -> Self {
        Self {
            calls,
            advantages,
            recomputed: &[],
        }
    }
}

/// The calls `indices` (of `inputs.calls`) as a [`MiniBatch`], recomputing the old
/// log-probabilities of the agents that recompute them (unless given) and adding their mismatch
/// and its seconds to `report`.
fn prepare(
    model: &Llama,
    inputs: &UpdateInputs<'_>,
    indices: &[usize],
    agents: &[AgentTraining],
    report: &mut UpdateReport,
) -> Result<MiniBatch, ModelError> {
    let UpdateInputs {
        calls,
        advantages,
        recomputed: known,
    } = *inputs;
    let device = model.var_store().device();
    let mut by_agent: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &index in indices {
        by_agent.entry(calls[index].agent).or_default().push(index);
    }
    let mut mini_batch = MiniBatch {
        totals: BatchTotals::of_calls(calls, indices),
        agents: BTreeMap::new(),
        response_tokens: 0,
        forward_tokens: 0,
    };
    for (agent, indices) in by_agent {
        let settings = &agents[agent];
        let correction = settings.correction;
        let order = batching_order(indices, calls);
        let mut passes = Vec::new();
        for chunk in settings.micro_batch.cut(&order, calls) {
            let micro: Vec<&AgentCall> = chunk.iter().map(|&i| calls[i]).collect();
            let batch = TrainingBatch::new(&micro, &advantages.select(chunk), device);
            mini_batch.response_tokens += batch.response_tokens;
            mini_batch.forward_tokens += batch.forward_tokens;
            let (mut recomputed, mut tis) = (None, None);
            if correction.recompute {
                let started = Instant::now();
                let given: Option<Vec<&[f32]>> = chunk
                    .iter()
                    .map(|&i| known.get(i).copied().flatten())
                    .collect();
                let old = match given {
                    Some(rows) => padded_rows(&rows, batch.response_len, device),
                    None => recompute_old_logprobs(model, &batch, settings.adapter)?,
                };
                // Reading the statistics waits for the device, so the time covers the
                // recomputation.
                let mismatch = Mismatch::measure(
                    &old,
                    &batch.old_logprobs,
                    &batch.response_mask,
                    correction.tis_cap,
                );
                report.recompute_seconds += started.elapsed().as_secs_f64();
                let total = report.mismatch.entry(agent).or_default();
                *total = total.merge(mismatch);
                tis = correction
                    .tis_cap
                    .map(|cap| tis_weights(&old, &batch.old_logprobs, cap));
                recomputed = Some(old);
            }
            passes.push(Pass {
                batch,
                recomputed,
                tis_weights: tis,
            });
        }
        mini_batch.agents.insert(agent, passes);
    }
    Ok(mini_batch)
}

/// One optimizer step on `mini_batch` at learning rate `lr`, skipped when its loss or a
/// gradient is not finite.
fn take_step(
    model: &Llama,
    reference: Reference<'_>,
    optimizer: &mut AdamW,
    mini_batch: &MiniBatch,
    agents: &[AgentTraining],
    grad_clip: f64,
    lr: f64,
) -> Result<StepReport, ModelError> {
    optimizer.zero_grad()?;
    let mut ledger = GradientLedger::new(optimizer.params().map(Tensor::shallow_clone).collect());
    let mut report = StepReport {
        grad_norm: f64::NAN,
        agent_grad_norms: BTreeMap::new(),
        stats: LossStats::default(),
        skipped: None,
    };
    for (position, (&agent, passes)) in mini_batch.agents.iter().enumerate() {
        // The first agent's gradients start from zero; a later one's from the earlier agents'.
        let after_others = position > 0;
        if after_others {
            ledger.mark()?;
        }
        for pass in passes {
            let stats = accumulate(model, reference, pass, &agents[agent], mini_batch.totals)?;
            if report.skipped.is_none() && !stats.policy_loss.is_finite() {
                report.skipped = Some(NonFinite::Loss { agent });
            }
            report.stats = add(report.stats, stats);
        }
        let norm = if after_others {
            ledger.norm_since_mark()?
        } else {
            ledger.norm()?
        };
        report.agent_grad_norms.insert(agent, norm);
    }
    let grad_norm = match report.agent_grad_norms.values().next() {
        Some(&alone) if mini_batch.agents.len() == 1 => alone,
        _ => ledger.norm()?,
    };
    // A finite norm means every gradient is finite; only a non-finite one needs the search.
    if report.skipped.is_none() && !grad_norm.is_finite() {
        report.skipped = ledger.first_non_finite().map(|index| {
            let parameter = optimizer
                .param_name(index)
                .map_or_else(|| format!("parameter {index}"), str::to_owned);
            NonFinite::Gradient { parameter }
        });
    }
    if report.skipped.is_some() {
        optimizer.zero_grad()?;
        return Ok(report);
    }
    ledger.clip(grad_norm, grad_clip)?;
    report.grad_norm = grad_norm;
    optimizer.step(lr)?;
    optimizer.zero_grad()?;
    Ok(report)
}

/// Forward and backward of one micro-batch `pass` of an agent's calls (trained with its
/// `settings`), its loss its share of the mini-batch of `totals`.
fn accumulate(
    model: &Llama,
    reference: Reference<'_>,
    pass: &Pass,
    settings: &AgentTraining,
    totals: BatchTotals,
) -> Result<LossStats, ModelError> {
    let batch = &pass.batch;
    let loss = &settings.loss;
    let with_entropy = loss.entropy_coef != 0.0;
    // With activation checkpointing the LM head runs a chunk of positions at a time too.
    let (logprobs, entropy, head, checkpoints) = if settings.activation_checkpointing {
        let (hidden, checkpoints) = batch.response_hidden_checkpointed(model, settings.adapter)?;
        let rows = ChunkedHead::rows_for(model);
        let head = ChunkedHead::forward(model, batch, &hidden, with_entropy, rows);
        let (logprobs, entropy) = (
            head.logprobs().shallow_clone(),
            head.entropy().map(Tensor::shallow_clone),
        );
        (logprobs, entropy, Some(head), Some(checkpoints))
    } else {
        let logits = batch.response_logits(model, settings.adapter, true)?;
        let (logprobs, entropy) = batch.token_logprobs(&logits, with_entropy);
        (logprobs, entropy, None, None)
    };
    let ref_logprobs = match reference.model(model) {
        Some(reference) if loss.kl_coef != 0.0 => {
            Some(ChunkedHead::logprobs_without_grad(reference, batch, None)?)
        }
        _ => None,
    };
    let (value, stats) = policy_loss(
        loss,
        &LossInputs {
            logprobs: &logprobs,
            old_logprobs: pass.recomputed.as_ref().unwrap_or(&batch.old_logprobs),
            advantages: &batch.advantages,
            mask: &batch.response_mask,
            entropy: entropy.as_ref(),
            ref_logprobs: ref_logprobs.as_ref(),
            tis_weights: pass.tis_weights.as_ref(),
            totals,
        },
    );
    value.to_kind(Kind::Float).backward();
    if let Some(head) = head {
        head.backward();
    }
    if let Some(checkpoints) = checkpoints {
        checkpoints.backward();
    }
    Ok(stats)
}

/// Adds the `steps`' averages to `report`: the loss parts over every step, the gradient norms
/// over the steps taken (an agent's over the steps that had its calls), and the skipped ones.
fn average_steps(report: &mut UpdateReport, steps: Vec<StepReport>) {
    let count = steps.len().max(1) as f64;
    let mut norms: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
    let mut grad_norm_sum = 0.0;
    for step in steps {
        report.stats = add(report.stats, step.stats);
        for (agent, norm) in step.agent_grad_norms {
            let (sum, steps) = norms.entry(agent).or_default();
            *sum += norm;
            *steps += 1.0;
        }
        if step.skipped.is_some() {
            report.skipped_steps += 1;
            report.skipped = report.skipped.take().or(step.skipped);
        } else {
            report.steps += 1;
            grad_norm_sum += step.grad_norm;
        }
    }
    report.stats = scale(report.stats, 1.0 / count);
    report.agent_grad_norms = norms
        .into_iter()
        .map(|(agent, (sum, steps))| (agent, sum / steps))
        .collect();
    report.grad_norm = if report.steps == 0 {
        f64::NAN
    } else {
        grad_norm_sum / report.steps as f64
    };
}

/// `indices` (of `calls`) in the order micro-batches take them: calls with the same prompt side
/// by side, so a micro-batch trains their prompt once; prompts by length and responses by length
/// within a prompt, for little padding.
pub(super) fn batching_order(mut indices: Vec<usize>, calls: &[&AgentCall]) -> Vec<usize> {
    indices.sort_by(|&a, &b| {
        let key = |i: usize| {
            (
                calls[i].prompt.len(),
                &calls[i].prompt,
                calls[i].response.len(),
            )
        };
        key(a).cmp(&key(b))
    });
    indices
}

fn add(total: LossStats, part: LossStats) -> LossStats {
    LossStats {
        policy_loss: total.policy_loss + part.policy_loss,
        clip_fraction: total.clip_fraction + part.clip_fraction,
        dual_clip_fraction: total.dual_clip_fraction + part.dual_clip_fraction,
        kl: total.kl + part.kl,
        entropy: total.entropy + part.entropy,
    }
}

fn scale(stats: LossStats, factor: f64) -> LossStats {
    LossStats {
        policy_loss: stats.policy_loss * factor,
        clip_fraction: stats.clip_fraction * factor,
        dual_clip_fraction: stats.dual_clip_fraction * factor,
        kl: stats.kl * factor,
        entropy: stats.entropy * factor,
    }
}
