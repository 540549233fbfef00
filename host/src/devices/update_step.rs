//! [`update_step`]: one optimizer step of a worker group on a device, over a fixed batch of one
//! or more agents' calls, and optionally the same step on the CPU in f32 to compare its loss and
//! gradient norms against — the check that training on a GPU computes what it does on the CPU,
//! and the measurement of a long-response update (with or without activation checkpointing).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use tch::{Device, Kind};

use super::compare::{device_name, load};
use super::profile::{Profile, Profiler};
use super::synchronize;
use crate::advantage::PerToken;
use crate::config::LossSection;
use crate::model::llama::Llama;
use crate::rng::SeededRng;
use crate::rollout::AgentCall;
use crate::update::{
    update_group, AdamW, AgentTraining, ChunkedHead, MicroBatch, Reference, RolloutCorrection,
    TrainingBatch, UpdateInputs, UpdateReport, UpdateSettings,
};

/// Tokens of each prompt of the batch.
const PROMPT_TOKENS: usize = 32;
/// Responses continuing each prompt (a GRPO group).
const RESPONSES_PER_PROMPT: usize = 4;
/// The learning rate of the step (it does not change what is compared).
const LEARNING_RATE: f64 = 1e-6;

/// The batch of one [`update_step`].
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UpdateShape {
    /// Agent calls, alternating between the agents; every `RESPONSES_PER_PROMPT` share a prompt.
    pub calls: usize,
    /// Agents of the batch. Each trains in passes of its own, for its own gradient norm, so one
    /// agent is the step a plain trainer runs, and more measure what per-agent norms cost.
    pub agents: usize,
    /// The longest response; the others are up to a fifth shorter.
    pub response_tokens: usize,
    /// Whether the update recomputes each layer in the backward.
    pub activation_checkpointing: bool,
}

/// One update's figures.
#[derive(Debug, Clone, Serialize)]
pub struct StepFigures {
    /// The policy loss (the PPO surrogate over every call).
    pub policy_loss: f64,
    /// The mean entropy of the predicted distributions.
    pub entropy: f64,
    /// The group's gradient norm before clipping.
    pub grad_norm: f64,
    /// Each agent's gradient norm.
    pub agent_grad_norms: Vec<f64>,
    /// Seconds of the step (forward, backward, AdamW), after one warm-up step.
    pub seconds: f64,
}

/// What [`update_step`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateStep {
    /// The model.
    pub model: String,
    /// The device and dtype of the step.
    pub device: String,
    /// The dtype on the device.
    pub dtype: String,
    /// The batch.
    pub shape: UpdateShape,
    /// Tokens through the forward pass (prompts once, responses).
    pub forward_tokens: usize,
    /// The step on the device.
    pub on_device: StepFigures,
    /// The same step on the CPU in f32, when compared.
    pub cpu: Option<StepFigures>,
    /// The largest relative difference of the loss parts and gradient norms against the CPU.
    pub relative_diff: Option<f64>,
    /// The largest relative difference allowed: 1e-3 in f32; 1e-1 in bf16/f16, whose logprobs
    /// move the PPO ratio off 1 against the f32 sampler's (4 % on the tiny Qwen3 on the CPU).
    pub tolerance: f64,
    /// Every figure finite and, when compared, within the tolerance.
    pub pass: bool,
    /// The process's peak resident memory so far (MiB, Linux), for CPU measurements.
    pub peak_rss_mib: Option<f64>,
    /// With `--profile`: a third step on the device under libtorch's profiler.
    pub profile: Option<Profile>,
}

/// Loads `model` on `device` in `kind` and runs two update steps of a fixed batch of `shape`
/// (the first warms up; the second is measured); with `against_cpu`, the same on the CPU in f32,
/// whose logprobs then serve both as the sampler's (so both sides see the same inputs); with
/// `profile`, a third step on the device under libtorch's profiler.
pub fn update_step(
    model: &Path,
    device: Device,
    kind: Kind,
    shape: UpdateShape,
    against_cpu: bool,
    profile: bool,
) -> anyhow::Result<UpdateStep> {
    if shape.calls < 2 || shape.response_tokens < 2 {
        bail!("an update check needs at least 2 calls of at least 2 tokens");
    }
    if shape.agents == 0 || shape.agents > shape.calls {
        bail!(
            "an update check of {} calls needs 1 to {} agents, not {}; change --agents",
            shape.calls,
            shape.calls,
            shape.agents
        );
    }
    let on_device = load(model, device, kind)?;
    let config = on_device.model.config();
    let positions = PROMPT_TOKENS + shape.response_tokens;
    if positions > config.max_position_embeddings {
        bail!(
            "{}: {PROMPT_TOKENS} prompt + {} response tokens exceed the model's {} positions; \
             ask for fewer --response-tokens",
            model.display(),
            shape.response_tokens,
            config.max_position_embeddings
        );
    }
    let mut calls = synthetic_calls(shape, config.vocab_size);
    let cpu = against_cpu
        .then(|| load(model, Device::Cpu, Kind::Float))
        .transpose()?;
    let sampler = cpu.as_ref().map_or(&on_device.model, |cpu| &cpu.model);
    set_sampler_logprobs(sampler, &mut calls)?;
    let (device_figures, profile) = measure(&on_device.model, &calls, shape, profile)
        .with_context(|| format!("the update on {}", device_name(device)))?;
    let cpu_figures = cpu
        .as_ref()
        .map(|cpu| {
            measure(&cpu.model, &calls, shape, false)
                .map(|(figures, _)| figures)
                .context("the update on the CPU")
        })
        .transpose()?;
    let tolerance = if kind == Kind::Float { 1e-3 } else { 1e-1 };
    let relative_diff = cpu_figures
        .as_ref()
        .map(|c| largest_gap(c, &device_figures));
    let finite = [device_figures.policy_loss, device_figures.grad_norm]
        .iter()
        .chain(&device_figures.agent_grad_norms)
        .all(|v| v.is_finite());
    Ok(UpdateStep {
        model: model.display().to_string(),
        device: device_name(device),
        dtype: format!("{kind:?}"),
        shape,
        forward_tokens: batch_of(&calls).forward_tokens,
        pass: finite && relative_diff.is_none_or(|d| d <= tolerance),
        on_device: device_figures,
        cpu: cpu_figures,
        relative_diff,
        tolerance,
        peak_rss_mib: peak_rss_mib(),
        profile,
    })
}

/// `shape.calls` calls alternating between `shape.agents` agents, every [`RESPONSES_PER_PROMPT`] sharing a
/// prompt, with token ids drawn from a fixed seed below `vocab`.
fn synthetic_calls(shape: UpdateShape, vocab: usize) -> Vec<AgentCall> {
    let mut rng = SeededRng::new(24);
    let mut tokens = |n: usize| -> Vec<i64> {
        (0..n)
            .map(|_| (rng.next_u64() % vocab as u64) as i64)
            .collect()
    };
    let mut prompt = Vec::new();
    (0..shape.calls)
        .map(|i| {
            if i % RESPONSES_PER_PROMPT == 0 {
                prompt = tokens(PROMPT_TOKENS);
            }
            let shorter = shape.response_tokens * (i % 5) / 25;
            let response = tokens(shape.response_tokens - shorter);
            AgentCall {
                index: i % RESPONSES_PER_PROMPT,
                ..AgentCall::synthetic(
                    i / RESPONSES_PER_PROMPT,
                    i % shape.agents,
                    prompt.clone(),
                    response,
                )
            }
        })
        .collect()
}

fn batch_of(calls: &[AgentCall]) -> TrainingBatch {
    let refs: Vec<&AgentCall> = calls.iter().collect();
    TrainingBatch::new(&refs, &advantages(&refs), Device::Cpu)
}

/// A fixed spread of advantages per call, not summing to zero, over each call's tokens.
fn advantages(calls: &[&AgentCall]) -> PerToken {
    let per_call: Vec<f64> = (0..calls.len())
        .map(|i| [1.0, -0.5, 0.75, -1.25, 0.5][i % 5])
        .collect();
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    PerToken::broadcast(&per_call, &lengths)
}

/// Records `model`'s logprobs of each call's response as the sampler's, in one batch.
fn set_sampler_logprobs(model: &Llama, calls: &mut [AgentCall]) -> anyhow::Result<()> {
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let batch = TrainingBatch::new(&refs, &advantages(&refs), model.device());
    let logprobs = ChunkedHead::logprobs_without_grad(model, &batch, None)?.to_device(Device::Cpu);
    let values = Vec::<f32>::try_from(logprobs.flatten(0, -1)).context("logprobs")?;
    let width = batch.response_len as usize;
    for (row, call) in calls.iter_mut().enumerate() {
        let len = call.logprobs.len();
        call.logprobs
            .copy_from_slice(&values[row * width..row * width + len]);
    }
    Ok(())
}

/// Two update steps of `calls` on `model` with its own optimizer; the second's figures.
fn measure(
    model: &Llama,
    calls: &[AgentCall],
    shape: UpdateShape,
    profile: bool,
) -> anyhow::Result<(StepFigures, Option<Profile>)> {
    let mut params: Vec<(String, tch::Tensor)> =
        model.var_store().variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let mut optimizer = AdamW::new(params, 0.0);
    let loss = LossSection {
        entropy_coef: 0.01,
        loss_scale_factor: Some(shape.response_tokens as f64),
        ..LossSection::default()
    };
    let agent = AgentTraining {
        loss,
        micro_batch: MicroBatch::Calls(shape.calls),
        adapter: None,
        activation_checkpointing: shape.activation_checkpointing,
        // The sampler's logprobs here are the model's own (`set_sampler_logprobs`).
        correction: RolloutCorrection::default(),
    };
    let agents = vec![agent; shape.agents];
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let advantages = advantages(&refs);
    let step = |optimizer: &mut AdamW| -> anyhow::Result<UpdateReport> {
        Ok(update_group(
            model,
            Reference::None,
            optimizer,
            &UpdateInputs::new(&refs, &advantages),
            &agents,
            &UpdateSettings::one_step(1.0, LEARNING_RATE),
        )?)
    };
    // The first step warms up libtorch and moves the weights: the loss and norms compared are
    // the first step's, the seconds the second's.
    tch::manual_seed(0);
    let first = step(&mut optimizer)?;
    synchronize(model.device());
    let started = Instant::now();
    step(&mut optimizer)?;
    synchronize(model.device());
    let seconds = started.elapsed().as_secs_f64();
    let profile = profile
        .then(|| -> anyhow::Result<Profile> {
            let profiler = Profiler::start(model.device())?;
            step(&mut optimizer)?;
            synchronize(model.device());
            profiler.finish()
        })
        .transpose()?;
    let figures = StepFigures {
        policy_loss: first.stats.policy_loss,
        entropy: first.stats.entropy,
        grad_norm: first.grad_norm,
        agent_grad_norms: first.agent_grad_norms.values().copied().collect(),
        seconds,
    };
    Ok((figures, profile))
}

/// The largest relative difference of the device's loss parts and norms from the CPU's.
fn largest_gap(cpu: &StepFigures, device: &StepFigures) -> f64 {
    let pairs = [
        (cpu.policy_loss, device.policy_loss),
        (cpu.entropy, device.entropy),
        (cpu.grad_norm, device.grad_norm),
    ]
    .into_iter()
    .chain(
        cpu.agent_grad_norms
            .iter()
            .copied()
            .zip(device.agent_grad_norms.iter().copied()),
    );
    pairs
        .map(|(c, d)| (c - d).abs() / c.abs().max(1e-6))
        .fold(0.0, f64::max)
}

/// The process's peak resident set (`VmHWM`), in MiB, where /proc says it.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn tiny(family: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hf")
            .join(family)
    }

    fn shape(activation_checkpointing: bool) -> UpdateShape {
        UpdateShape {
            calls: 8,
            agents: 2,
            response_tokens: 24,
            activation_checkpointing,
        }
    }

    #[test]
    fn the_cpu_against_itself_agrees_exactly_and_bf16_within_its_tolerance() {
        let same = update_step(
            &tiny("llama"),
            Device::Cpu,
            Kind::Float,
            shape(false),
            true,
            false,
        )
        .expect("f32 step");
        assert_eq!(same.relative_diff, Some(0.0));
        assert!(same.pass);
        assert_eq!(same.on_device.agent_grad_norms.len(), 2, "two agents");
        assert!(same.on_device.grad_norm > 0.0);

        let bf16 = update_step(
            &tiny("qwen2"),
            Device::Cpu,
            Kind::BFloat16,
            shape(false),
            true,
            false,
        )
        .expect("bf16 step");
        let gap = bf16.relative_diff.expect("compared");
        assert!(gap > 0.0 && gap <= bf16.tolerance, "{gap}");
    }

    #[test]
    fn activation_checkpointing_leaves_the_step_as_it_was() {
        let step = |checkpointing| {
            update_step(
                &tiny("qwen3"),
                Device::Cpu,
                Kind::Float,
                shape(checkpointing),
                false,
                false,
            )
            .expect("step")
            .on_device
        };
        let (plain, checkpointed) = (step(false), step(true));
        assert_eq!(plain.policy_loss, checkpointed.policy_loss);
        for (a, b) in [(plain.grad_norm, checkpointed.grad_norm)]
            .into_iter()
            .chain(
                plain
                    .agent_grad_norms
                    .into_iter()
                    .zip(checkpointed.agent_grad_norms),
            )
        {
            assert!((a - b).abs() <= 1e-5 * a, "{a} vs {b}");
        }
    }

    #[test]
    fn one_agent_trains_the_calls_as_two_do_with_one_norm() {
        let step = |agents| {
            let shape = UpdateShape {
                agents,
                ..shape(false)
            };
            update_step(
                &tiny("qwen2"),
                Device::Cpu,
                Kind::Float,
                shape,
                false,
                false,
            )
            .expect("step")
            .on_device
        };
        let (one, two) = (step(1), step(2));
        assert_eq!(one.agent_grad_norms, [one.grad_norm]);
        assert_eq!(two.agent_grad_norms.len(), 2);
        // The same calls and advantages: only the passes' split and summation order differ.
        for (a, b) in [
            (one.policy_loss, two.policy_loss),
            (one.entropy, two.entropy),
            (one.grad_norm, two.grad_norm),
        ] {
            assert!((a - b).abs() <= 1e-5 * a.abs(), "{a} vs {b}");
        }
        // The group's gradient is the sum of the agents': its norm is at most theirs summed.
        let parts: f64 = two.agent_grad_norms.iter().sum();
        assert!(two.agent_grad_norms.iter().all(|&n| n > 0.0));
        assert!(
            two.grad_norm <= parts * (1.0 + 1e-9),
            "{} vs {parts}",
            two.grad_norm
        );
    }

    #[test]
    fn shapes_the_check_cannot_run_are_refused_naming_the_option() {
        let too_long = UpdateShape {
            response_tokens: 4096,
            ..shape(false)
        };
        let too_many_agents = UpdateShape {
            agents: 9,
            ..shape(false)
        };
        for (refused, option) in [
            (too_long, "--response-tokens"),
            (too_many_agents, "--agents"),
        ] {
            let error = update_step(
                &tiny("llama"),
                Device::Cpu,
                Kind::Float,
                refused,
                false,
                false,
            )
            .expect_err("refused");
            assert!(error.to_string().contains(option), "{error}");
        }
    }
}
