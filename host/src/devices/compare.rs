//! [`compare`]: one model's logits and greedy generations on a device (and dtype) against the
//! same model on the CPU in f32 — the check that a GPU build computes what the CPU build does.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use crate::engine::cpu::backend_for;
use crate::engine::{generate, GenerationRequest, SamplingParams};
use crate::model::chat_template::TemplateMessage;
use crate::model::pretrained::Pretrained;
use crate::rng::SeededRng;

/// The user turns the comparison encodes with the model's chat template: short and long, so
/// the batch of greedy generations is left-padded.
const PROMPTS: [&str; 4] = [
    "What is 12 times 7?",
    "Name three primary colours.",
    "A train leaves at 9:40 and arrives at 11:05. How long is the journey, in minutes? Think \
     step by step, then give the number.",
    "Write one sentence about the sea.",
];

/// How close the device's numbers must be to the CPU's f32 ones.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    /// The largest logit difference allowed, as a fraction of the largest |logit| on the CPU.
    pub logits_relative: f64,
    /// Whether greedy generations must match token for token (a step where the CPU's two
    /// candidates are closer than the logits tolerance is a tie, not a mismatch).
    pub greedy_identical: bool,
}

impl Tolerance {
    /// The tolerance for weights in `kind`: f32 on any device sums in another order only
    /// (1e-3 of the largest logit, greedy identical up to ties); bf16 and f16 round every
    /// weight and activation (5e-2, and greedy paths may part after a near-tie).
    pub fn for_kind(kind: Kind) -> Self {
        match kind {
            Kind::Float | Kind::Double => Self {
                logits_relative: 1e-3,
                greedy_identical: true,
            },
            _ => Self {
                logits_relative: 5e-2,
                greedy_identical: false,
            },
        }
    }
}

/// What [`compare`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// The model compared.
    pub model: String,
    /// The device and dtype compared against the CPU in f32.
    pub device: String,
    /// The dtype on the device (`Float`, `BFloat16`, `Half`).
    pub dtype: String,
    /// Logits of every prompt position.
    pub logits: LogitsAgreement,
    /// Greedy generations of the prompts in one batch.
    pub greedy: GreedyAgreement,
    /// The tolerance applied.
    pub tolerance: Tolerance,
    /// Whether everything is within the tolerance.
    pub pass: bool,
}

/// Logits on the device against the CPU's.
#[derive(Debug, Clone, Serialize)]
pub struct LogitsAgreement {
    /// Prompt positions compared (all prompts together).
    pub positions: i64,
    /// The largest |device − CPU| over every position and token.
    pub max_abs_diff: f64,
    /// The largest |logit| on the CPU (the scale of the difference).
    pub cpu_max_abs: f64,
    /// `max_abs_diff / cpu_max_abs`.
    pub relative: f64,
    /// The share of positions whose most likely token is the same.
    pub top1_agreement: f64,
    /// Seconds of the device's forwards (after one warm-up forward).
    pub device_seconds: f64,
    /// Seconds of the CPU's forwards.
    pub cpu_seconds: f64,
}

/// Greedy generations on the device against the CPU's.
#[derive(Debug, Clone, Serialize)]
pub struct GreedyAgreement {
    /// The most new tokens per prompt.
    pub new_tokens: usize,
    /// Prompts whose generations match token for token.
    pub identical: usize,
    /// Prompts whose generations part at a tie (see [`Tolerance::greedy_identical`]).
    pub ties: usize,
    /// Prompts in the batch.
    pub prompts: usize,
    /// Where each generation that is not identical parts from the CPU's.
    pub differences: Vec<Divergence>,
    /// Seconds of the device's batch.
    pub device_seconds: f64,
    /// Seconds of the CPU's batch.
    pub cpu_seconds: f64,
}

/// The first token where a device's greedy generation parts from the CPU's.
#[derive(Debug, Clone, Serialize)]
pub struct Divergence {
    /// Which prompt (index into the batch).
    pub prompt: usize,
    /// Which new token.
    pub index: usize,
    /// The CPU's token there.
    pub cpu_token: i64,
    /// The device's token there.
    pub device_token: i64,
    /// The CPU's logit of its token minus its logit of the device's (≥ 0): how near a tie.
    pub cpu_gap: f64,
}

/// Loads `model` on the CPU in f32 and on `device` in `kind`, and compares their logits over
/// `PROMPTS` and their greedy generations of up to `new_tokens` tokens.
pub fn compare(
    model: &Path,
    device: Device,
    kind: Kind,
    new_tokens: usize,
    tolerance: Tolerance,
) -> anyhow::Result<Comparison> {
    let cpu = load(model, Device::Cpu, Kind::Float)?;
    let other = load(model, device, kind)?;
    let prompts = PROMPTS
        .iter()
        .map(|text| {
            cpu.encode_chat(&[TemplateMessage {
                role: "user",
                content: text,
            }])
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: encoding the comparison prompts", model.display()))?;

    let logits = compare_logits(&cpu, &other, &prompts)?;
    let scale = logits.cpu_max_abs;
    let greedy = compare_greedy(&cpu, &other, &prompts, new_tokens, |prefix, a, b| {
        let step = forward(&cpu, prefix)?;
        let last = step.select(1, -1).select(0, 0);
        Ok(last.double_value(&[a]) - last.double_value(&[b]))
    })?;
    let tie_gap = tolerance.logits_relative * scale;
    let greedy = GreedyAgreement {
        ties: greedy
            .differences
            .iter()
            .filter(|difference| difference.cpu_gap <= tie_gap)
            .count(),
        ..greedy
    };
    let pass = logits.relative <= tolerance.logits_relative
        && (!tolerance.greedy_identical || greedy.identical + greedy.ties == greedy.prompts);
    Ok(Comparison {
        model: model.display().to_string(),
        device: device_name(device),
        dtype: format!("{kind:?}"),
        logits,
        greedy,
        tolerance,
        pass,
    })
}

pub(super) fn device_name(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("cuda:{index}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The model at `path` on `device` in `kind`, with the kernels a worker group there gets.
pub(super) fn load(path: &Path, device: Device, kind: Kind) -> anyhow::Result<Pretrained> {
    let mut pretrained = Pretrained::load(path, device, kind)
        .with_context(|| format!("loading {} on {}", path.display(), device_name(device)))?;
    pretrained.model.set_backend(backend_for(device)?);
    Ok(pretrained)
}

/// Logits `[1, T, vocab]` of `tokens` as f32 on the CPU.
fn forward(pretrained: &Pretrained, tokens: &[i64]) -> anyhow::Result<Tensor> {
    let device = pretrained.model.device();
    let ids = Tensor::from_slice(tokens)
        .view([1, tokens.len() as i64])
        .to_device(device);
    let logits = tch::no_grad(|| pretrained.model.forward(&ids, None, None))?;
    Ok(logits.to_device(Device::Cpu).to_kind(Kind::Float))
}

fn compare_logits(
    cpu: &Pretrained,
    other: &Pretrained,
    prompts: &[Vec<i64>],
) -> anyhow::Result<LogitsAgreement> {
    // A warm-up: a device's first forward loads its kernels.
    let _ = forward(other, &prompts[0])?;
    let timed = |model: &Pretrained| -> anyhow::Result<(Vec<Tensor>, f64)> {
        let start = Instant::now();
        let logits = prompts
            .iter()
            .map(|prompt| forward(model, prompt))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((logits, start.elapsed().as_secs_f64()))
    };
    let (expected, cpu_seconds) = timed(cpu)?;
    let (actual, device_seconds) = timed(other)?;
    let expected = Tensor::cat(&expected, 1);
    let actual = Tensor::cat(&actual, 1);
    let max_abs_diff = (&actual - &expected).abs().max().double_value(&[]);
    let cpu_max_abs = expected.abs().max().double_value(&[]);
    let agree = expected
        .argmax(-1, false)
        .eq_tensor(&actual.argmax(-1, false))
        .to_kind(Kind::Double)
        .mean(Kind::Double)
        .double_value(&[]);
    Ok(LogitsAgreement {
        positions: expected.size()[1],
        max_abs_diff,
        cpu_max_abs,
        relative: max_abs_diff / cpu_max_abs.max(f64::MIN_POSITIVE),
        top1_agreement: agree,
        device_seconds,
        cpu_seconds,
    })
}

/// Greedy generations of `prompts` in one batch on both models; `gap(prefix, a, b)` is the
/// CPU's logit gap between tokens `a` and `b` after `prefix`, recorded where they part.
fn compare_greedy(
    cpu: &Pretrained,
    other: &Pretrained,
    prompts: &[Vec<i64>],
    new_tokens: usize,
    gap: impl Fn(&[i64], i64, i64) -> anyhow::Result<f64>,
) -> anyhow::Result<GreedyAgreement> {
    let requests: Vec<GenerationRequest> = prompts
        .iter()
        .map(|prompt| GenerationRequest::new(prompt.clone(), SamplingParams::GREEDY, new_tokens))
        .collect();
    let timed = |model: &Pretrained| -> anyhow::Result<(Vec<Vec<i64>>, f64)> {
        let start = Instant::now();
        let generations = generate(
            &model.model,
            &model.tokenizer,
            &requests,
            &mut SeededRng::new(0),
        )?;
        let tokens = generations.into_iter().map(|g| g.tokens).collect();
        Ok((tokens, start.elapsed().as_secs_f64()))
    };
    let (expected, cpu_seconds) = timed(cpu)?;
    let (actual, device_seconds) = timed(other)?;
    let mut differences = Vec::new();
    for (row, (want, got)) in expected.iter().zip(&actual).enumerate() {
        // Generations keep their EOS token, so two that agree up to the shorter one's end
        // are the same.
        let Some(at) = (0..want.len().min(got.len())).find(|&i| want[i] != got[i]) else {
            continue;
        };
        let prefix = [prompts[row].as_slice(), &want[..at]].concat();
        differences.push(Divergence {
            prompt: row,
            index: at,
            cpu_token: want[at],
            device_token: got[at],
            cpu_gap: gap(&prefix, want[at], got[at])?,
        });
    }
    Ok(GreedyAgreement {
        new_tokens,
        identical: prompts.len() - differences.len(),
        ties: 0,
        prompts: prompts.len(),
        differences,
        device_seconds,
        cpu_seconds,
    })
}
