//! The critic on a tiny real model: where it starts, that its values do not depend on how calls
//! are batched, that its update learns the returns, and that its weights survive a checkpoint.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::config::CriticSection;
use drmas_host::model::llama::Llama;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{Critic, MicroBatch};
use tch::{Device, Kind, Tensor};

fn fixture() -> Llama {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    Pretrained::load(&path, Device::Cpu, Kind::Float)
        .expect("fixture loads")
        .model
}

/// Six calls on two prompts, responses of 1 to 5 tokens.
fn calls() -> Vec<AgentCall> {
    let prompts: [&[i64]; 2] = [&[5, 17, 3, 29, 8], &[11, 2, 40]];
    let responses: [&[i64]; 6] = [
        &[7, 1, 33, 12],
        &[9],
        &[4, 21, 6],
        &[3, 14, 27, 5, 1],
        &[8, 8],
        &[13],
    ];
    responses
        .iter()
        .enumerate()
        .map(|(i, response)| {
            AgentCall::synthetic(i / 2, i % 2, prompts[i % 2].to_vec(), response.to_vec())
        })
        .collect()
}

/// Returns of +1 for even calls and −1 for odd ones, on every token.
fn returns(calls: &[&AgentCall]) -> PerToken {
    PerToken::from_rows(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| vec![if i % 2 == 0 { 1.0 } else { -1.0 }; c.response.len()]),
    )
}

fn settings(micro_batch_size: usize) -> CriticSection {
    CriticSection {
        learning_rate: 1e-2,
        weight_decay: 0.0,
        cliprange_value: 10.0,
        grad_clip: 0.0,
        micro_batch_size,
        micro_batch_tokens: None,
        warmup_iterations: 0,
    }
}

#[test]
fn a_new_critic_copies_the_policy_and_values_every_state_at_zero() {
    let policy = fixture();
    let critic = Critic::new(&policy, 0.0).expect("critic");
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let values = critic.values(&refs, MicroBatch::Calls(2)).expect("values");
    assert_eq!(values.lengths(), vec![4, 1, 3, 5, 2, 1]);
    assert!(values.values().iter().all(|&v| v == 0.0));
    let policy_weights = policy.var_store().variables();
    let mut copied = 0;
    for (name, weight) in critic.weights() {
        if let Some(original) = policy_weights.get(&name) {
            assert!(weight.equal(original), "{name} differs from the policy's");
            copied += 1;
        }
    }
    assert_eq!(
        copied,
        policy_weights.len(),
        "every policy weight is in the critic"
    );
}

#[test]
fn updates_learn_the_returns_and_values_do_not_depend_on_batching() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let targets = returns(&refs);
    let mut critic = Critic::new(&fixture(), 0.0).expect("critic");
    let mut losses = Vec::new();
    for _ in 0..15 {
        let old = critic.values(&refs, MicroBatch::Calls(6)).expect("values");
        let report = critic
            .update(&refs, &targets, &old, &settings(4), 1, 1)
            .expect("update");
        assert!(report.skipped_steps == 0 && report.grad_norm.is_finite());
        losses.push(report.stats.loss);
    }
    // Zero values against returns of ±1: the first loss is 1.
    assert!((losses[0] - 1.0).abs() < 1e-6, "{losses:?}");
    assert!(
        *losses.last().expect("losses") < 0.25 * losses[0],
        "the value loss did not fall: {losses:?}"
    );
    let together = critic.values(&refs, MicroBatch::Calls(6)).expect("values");
    let alone = critic.values(&refs, MicroBatch::Calls(1)).expect("values");
    for (a, b) in together.values().iter().zip(alone.values()) {
        assert!((a - b).abs() < 1e-5, "batched {a} vs alone {b}");
    }
}

#[test]
fn the_step_is_the_same_for_every_micro_batch_size() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let targets = returns(&refs);
    let step = |micro: MicroBatch| {
        let mut critic = Critic::new(&fixture(), 0.0).expect("critic");
        let old = critic.values(&refs, MicroBatch::Calls(6)).expect("values");
        // A first step so the head is not zero and gradients reach the whole model.
        critic
            .update(&refs, &targets, &old, &settings(6), 1, 1)
            .expect("update");
        let old = critic.values(&refs, micro).expect("values");
        let settings = match micro {
            MicroBatch::Calls(size) => settings(size),
            MicroBatch::Tokens(tokens) => CriticSection {
                micro_batch_tokens: Some(tokens),
                ..settings(6)
            },
        };
        let report = critic
            .update(&refs, &targets, &old, &settings, 1, 1)
            .expect("update");
        (report.stats.loss, report.grad_norm)
    };
    let (loss, norm) = step(MicroBatch::Calls(6));
    // Prompts of 5 and 3 tokens, responses of 1 to 5: 16 tokens hold one to three calls.
    for micro in [
        MicroBatch::Calls(1),
        MicroBatch::Calls(4),
        MicroBatch::Tokens(16),
    ] {
        let (other_loss, other_norm) = step(micro);
        assert!(
            (loss - other_loss).abs() <= 1e-5 * loss.abs(),
            "{micro:?}: loss {other_loss} vs {loss}"
        );
        assert!(
            (norm - other_norm).abs() <= 1e-4 * norm,
            "{micro:?}: norm {other_norm} vs {norm}"
        );
    }
}

#[test]
fn mini_batches_and_epochs_are_one_step_after_another_on_each_episode_run() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let targets = returns(&refs);
    let mut critic = Critic::new(&fixture(), 0.0).expect("critic");
    let old = critic.values(&refs, MicroBatch::Calls(6)).expect("values");
    let report = critic
        .update(&refs, &targets, &old, &settings(6), 3, 2)
        .expect("update");

    // By hand: episodes 0, 1 and 2 (two calls each) one step each, twice over, against the
    // same old values.
    let mut manual = Critic::new(&fixture(), 0.0).expect("critic");
    let mut losses = Vec::new();
    for _ in 0..2 {
        for episode in 0..3 {
            let part: Vec<usize> = (0..refs.len())
                .filter(|&i| refs[i].episode == episode)
                .collect();
            let part_refs: Vec<&AgentCall> = part.iter().map(|&i| refs[i]).collect();
            let step = manual
                .update(
                    &part_refs,
                    &targets.select(&part),
                    &old.select(&part),
                    &settings(6),
                    1,
                    1,
                )
                .expect("a step");
            losses.push(step.stats.loss);
        }
    }
    let mean = losses.iter().sum::<f64>() / losses.len() as f64;
    assert!(
        (report.stats.loss - mean).abs() < 1e-6,
        "{} vs {mean}",
        report.stats.loss
    );
    let found = critic.values(&refs, MicroBatch::Calls(6)).expect("values");
    let expected = manual.values(&refs, MicroBatch::Calls(6)).expect("values");
    for (a, b) in found.values().iter().zip(expected.values()) {
        assert!((a - b).abs() < 1e-5, "mini-batched {a} vs by hand {b}");
    }
    assert!(
        losses[3] < losses[0],
        "episode 0's loss fell between the epochs: {losses:?}"
    );
}

#[test]
fn weights_survive_a_checkpoint_bit_for_bit() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let targets = returns(&refs);
    let mut trained = Critic::new(&fixture(), 0.0).expect("critic");
    let old = trained.values(&refs, MicroBatch::Calls(6)).expect("values");
    trained
        .update(&refs, &targets, &old, &settings(6), 1, 1)
        .expect("update");
    let dir = std::env::temp_dir().join(format!("drmas-critic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("critic.safetensors");
    let weights = trained.weights();
    let refs_to_save: Vec<(&str, &Tensor)> = weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
    Tensor::write_safetensors(&refs_to_save, &file).expect("write");

    let mut restored = Critic::new(&fixture(), 0.0).expect("critic");
    restored
        .load_weights(&Tensor::read_safetensors(&file).expect("read"))
        .expect("load");
    let before = trained.values(&refs, MicroBatch::Calls(6)).expect("values");
    let after = restored
        .values(&refs, MicroBatch::Calls(6))
        .expect("values");
    assert_eq!(before, after);
    assert!(
        before.values().iter().any(|&v| v != 0.0),
        "the trained head is not zero"
    );
    let missing = restored.load_weights(&[]).expect_err("nothing to load");
    assert!(missing.to_string().contains("critic weight"), "{missing}");
    std::fs::remove_dir_all(&dir).ok();
}
