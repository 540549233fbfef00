//! Several optimizer steps per iteration (`[algorithm.loss] mini_batches`, `ppo_epochs`) on the
//! tiny Llama fixture: the update equals one step after another on each mini-batch of
//! episodes, every step's ratio taken against the log-probabilities of the model before the
//! first step, each step at its scheduled learning rate; and a non-finite mini-batch skips its
//! step alone.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::config::{LossSection, LrDecay};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{
    recompute_old_logprobs, update_group, AdamW, AgentTraining, LrSchedule, MicroBatch, NonFinite,
    Reference, RolloutCorrection, TrainingBatch, UpdateInputs, UpdateReport, UpdateSettings,
};
use tch::{Device, Kind, Tensor};

fn fixture() -> Pretrained {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    Pretrained::load(&path, Device::Cpu, Kind::Float).expect("fixture loads")
}

fn optimizer(pretrained: &Pretrained) -> AdamW {
    let mut params: Vec<(String, Tensor)> = pretrained
        .model
        .var_store()
        .variables()
        .into_iter()
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    AdamW::new(params, 0.01)
}

/// Six calls of one agent, one per episode, over two prompts, with made-up sampler
/// log-probabilities (the old log-probabilities are recomputed).
fn calls() -> Vec<AgentCall> {
    (0..6)
        .map(|episode| {
            let prompt = if episode % 2 == 0 {
                vec![5, 17, 3, 29]
            } else {
                vec![11, 2, 40]
            };
            let response: Vec<i64> = (0..3 + episode as i64).map(|t| 7 + 3 * t).collect();
            AgentCall {
                logprobs: vec![-2.0; response.len()],
                ..AgentCall::synthetic(episode, 0, prompt, response)
            }
        })
        .collect()
}

fn advantages(calls: &[&AgentCall]) -> PerToken {
    let per_call: Vec<f64> = calls.iter().map(|c| [1.0, -0.5][c.episode % 2]).collect();
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    PerToken::broadcast(&per_call, &lengths)
}

fn training(recompute: bool) -> AgentTraining {
    AgentTraining {
        loss: LossSection::default(),
        micro_batch: MicroBatch::Calls(2),
        adapter: None,
        activation_checkpointing: false,
        correction: RolloutCorrection {
            recompute,
            tis_cap: None,
        },
    }
}

fn weights(pretrained: &Pretrained) -> Vec<(String, Tensor)> {
    let mut weights: Vec<(String, Tensor)> = pretrained
        .model
        .var_store()
        .variables()
        .into_iter()
        .collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    weights
}

const PEAK_LR: f64 = 1e-4;

fn schedule() -> LrSchedule {
    LrSchedule {
        peak: PEAK_LR,
        warmup_steps: 0,
        decay: LrDecay::Linear,
        total_steps: 4,
        min_lr_ratio: 0.0,
    }
}

#[test]
fn two_epochs_of_two_mini_batches_are_four_steps_against_the_first_model() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();

    let trained = fixture();
    let mut trained_optimizer = optimizer(&trained);
    let report = update_group(
        &trained.model,
        Reference::None,
        &mut trained_optimizer,
        &UpdateInputs::new(&refs, &advantages(&refs)),
        &[training(true)],
        &UpdateSettings {
            mini_batches: 2,
            epochs: 2,
            grad_clip: 1.0,
            schedule: schedule(),
        },
    )
    .expect("the update runs");

    // By hand: the model's log-probabilities before any step become the sampler's, then one
    // step on episodes 0–2, one on 3–5, and both again, each at the schedule's rate.
    let manual = fixture();
    let mut manual_optimizer = optimizer(&manual);
    let halves: [Vec<AgentCall>; 2] = [calls[..3].to_vec(), calls[3..].to_vec()].map(|mut half| {
        let half_refs: Vec<&AgentCall> = half.iter().collect();
        let batch = TrainingBatch::new(&half_refs, &advantages(&half_refs), Device::Cpu);
        let old = recompute_old_logprobs(&manual.model, &batch, None).expect("forward");
        for (row, call) in half.iter_mut().enumerate() {
            call.logprobs = (0..call.response.len())
                .map(|column| old.double_value(&[row as i64, column as i64]) as f32)
                .collect();
        }
        half
    });
    let mut steps: Vec<UpdateReport> = Vec::new();
    for step in 0..4 {
        let half: Vec<&AgentCall> = halves[step % 2].iter().collect();
        steps.push(
            update_group(
                &manual.model,
                Reference::None,
                &mut manual_optimizer,
                &UpdateInputs::new(&half, &advantages(&half)),
                &[training(false)],
                &UpdateSettings::one_step(1.0, schedule().at(step as u64 + 1)),
            )
            .expect("a step runs"),
        );
    }

    assert_eq!((report.steps, report.skipped_steps), (4, 0));
    assert_eq!(trained_optimizer.steps(), 4);
    assert_eq!(report.learning_rate, PEAK_LR);
    let tokens: usize = calls.iter().map(|c| c.response.len()).sum();
    assert_eq!(
        report.mismatch[&0].tokens, tokens as f64,
        "each call's old log-probabilities recomputed once"
    );
    assert_eq!(report.response_tokens, 2 * tokens, "two epochs of tokens");
    // The two sides recompute in batches of different shapes: their log-probabilities, and so
    // the weights, agree to float rounding.
    for ((name, found), (_, expected)) in weights(&trained).iter().zip(weights(&manual)) {
        let difference = (found - &expected).abs().max().double_value(&[]);
        assert!(difference < 1e-5, "{name} differs by {difference}");
    }
    let mean = |value: fn(&UpdateReport) -> f64| steps.iter().map(value).sum::<f64>() / 4.0;
    // f32 sums over batches of different shapes round differently, by about 1e-6 relative
    // with some CPUs' kernels: within 1e-5 is the same step.
    let near = |found: f64, expected: f64, what: &str| {
        assert!(
            (found - expected).abs() < 1e-5 * expected.abs().max(1.0),
            "{what}: {found} vs {expected}"
        );
    };
    near(
        report.grad_norm,
        mean(|s| s.grad_norm),
        "mean gradient norm",
    );
    near(
        report.stats.policy_loss,
        mean(|s| s.stats.policy_loss),
        "mean policy loss",
    );
    near(
        report.stats.clip_fraction,
        mean(|s| s.stats.clip_fraction),
        "mean clip fraction",
    );
    // The first epoch's ratios are 1; the second's moved by the first epoch's steps, some
    // past the clip.
    assert_eq!(steps[0].stats.clip_fraction, 0.0);
    assert!(
        steps[2].stats.clip_fraction + steps[3].stats.clip_fraction > 0.0,
        "the second epoch clips: {:?}",
        steps
            .iter()
            .map(|s| s.stats.clip_fraction)
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_non_finite_mini_batch_skips_its_own_step_only() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let per_call = [1.0, -0.5, 1.0, f64::NAN, -0.5, 1.0];
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    let pretrained = fixture();
    let mut optimizer = optimizer(&pretrained);
    let report = update_group(
        &pretrained.model,
        Reference::None,
        &mut optimizer,
        &UpdateInputs::new(&refs, &PerToken::broadcast(&per_call, &lengths)),
        &[training(false)],
        &UpdateSettings {
            mini_batches: 2,
            epochs: 1,
            grad_clip: 1.0,
            schedule: schedule(),
        },
    )
    .expect("the update runs");
    assert_eq!(report.skipped, Some(NonFinite::Loss { agent: 0 }));
    assert_eq!((report.steps, report.skipped_steps), (1, 1));
    assert_eq!(
        optimizer.steps(),
        1,
        "the first mini-batch's step was taken"
    );
    assert!(
        report.grad_norm.is_finite() && report.grad_norm > 0.0,
        "the taken step's norm: {}",
        report.grad_norm
    );
}
