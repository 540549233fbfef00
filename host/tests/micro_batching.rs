//! One optimizer step does not depend on how its calls are split into micro-batches: every
//! micro-batch divides its sums by the whole step's call and token counts, so under each loss
//! aggregation the loss, the gradient norm and each agent's gradient norm are those of one batch
//! of every call — for micro-batches of 1, 3 and all calls, and of 8 and 20 padded tokens
//! (each agent's calls are micro-batched on their own), on the tiny Llama fixture; and no
//! gradient outlives the step.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::config::{LossAggregation, LossSection};
use drmas_host::model::llama::Llama;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{
    update_group, AdamW, AgentTraining, MicroBatch, Reference, RolloutCorrection, TrainingBatch,
    UpdateInputs, UpdateSettings,
};
use tch::{Device, Kind};

fn fixture() -> Llama {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    Pretrained::load(&path, Device::Cpu, Kind::Float)
        .expect("fixture loads")
        .model
}

/// Eight calls of two agents (four each), responses of 1 to 6 tokens, their sampling log-probabilities
/// those of the model itself (ratio 1 before the step).
fn calls(model: &Llama) -> Vec<AgentCall> {
    let prompts: [&[i64]; 2] = [&[5, 17, 3, 29, 8], &[11, 2, 40]];
    let responses: [&[i64]; 8] = [
        &[7, 1, 33, 12],
        &[9],
        &[4, 21, 6],
        &[21, 6, 6, 30, 2, 18],
        &[3, 14, 27, 5, 1],
        &[8, 8],
        &[2, 5, 9],
        &[13],
    ];
    let mut calls: Vec<AgentCall> = responses
        .iter()
        .enumerate()
        .map(|(i, response)| {
            AgentCall::synthetic(i / 2, i % 2, prompts[i % 2].to_vec(), response.to_vec())
        })
        .collect();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let batch = TrainingBatch::new(&refs, &broadcast(&refs, &[0.0; 8]), Device::Cpu);
    let logprobs = tch::no_grad(|| {
        let logits = batch.response_logits(model, None, false).expect("forward");
        batch.token_logprobs(&logits, false).0
    });
    for (row, call) in calls.iter_mut().enumerate() {
        for (column, logprob) in call.logprobs.iter_mut().enumerate() {
            *logprob = logprobs.double_value(&[row as i64, column as i64]) as f32;
        }
    }
    calls
}

/// (policy loss, gradient norm, agent 0's norm, agent 1's norm) of one step with micro-batches
/// of size `micro`.
fn step(aggregation: LossAggregation, micro: MicroBatch) -> [f64; 4] {
    let model = fixture();
    let calls = calls(&model);
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let advantages = [1.5, -0.5, 0.25, -1.0, 0.75, 2.0, -0.25, 1.0];
    let mut params: Vec<(String, tch::Tensor)> =
        model.var_store().variables().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let mut optimizer = AdamW::new(params, 0.0);
    let loss = LossSection {
        aggregation,
        loss_scale_factor: Some(8.0),
        ..LossSection::default()
    };
    let agent = AgentTraining {
        loss,
        micro_batch: micro,
        adapter: None,
        activation_checkpointing: false,
        correction: RolloutCorrection::default(),
    };
    let report = update_group(
        &model,
        Reference::None,
        &mut optimizer,
        &UpdateInputs::new(&refs, &broadcast(&refs, &advantages)),
        &[agent.clone(), agent],
        &UpdateSettings::one_step(0.0, 1e-3),
    )
    .expect("update");
    assert!(
        report.skipped.is_none(),
        "{aggregation:?}, {micro:?}: finite step"
    );
    let held = model.var_store().variables();
    let held: Vec<&String> = held
        .iter()
        .filter(|(_, p)| p.grad().defined())
        .map(|(n, _)| n)
        .collect();
    assert!(held.is_empty(), "gradients kept after the step: {held:?}");
    [
        report.stats.policy_loss,
        report.grad_norm,
        report.agent_grad_norms[&0],
        report.agent_grad_norms[&1],
    ]
}

#[test]
fn the_step_is_the_same_for_every_micro_batch_size() {
    for aggregation in [
        LossAggregation::TokenMean,
        LossAggregation::SeqMeanTokenSum,
        LossAggregation::SeqMeanTokenMean,
        LossAggregation::SeqMeanTokenSumNorm,
    ] {
        let whole = step(aggregation, MicroBatch::Calls(4));
        assert!(whole[1] > 0.0, "{aggregation:?}: a gradient");
        // The prompts are 5 and 3 tokens, the responses 1 to 6: 8 tokens hold one call or two
        // of the shortest, 20 two or three.
        let sizes = [
            MicroBatch::Calls(1),
            MicroBatch::Calls(3),
            MicroBatch::Tokens(8),
            MicroBatch::Tokens(20),
        ];
        for micro in sizes {
            let split = step(aggregation, micro);
            for (what, (a, b)) in ["loss", "grad norm", "agent 0 norm", "agent 1 norm"]
                .iter()
                .zip(split.iter().zip(&whole))
            {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1e-3),
                    "{aggregation:?}, {micro:?}: {what} {a} vs {b} with every call at once"
                );
            }
        }
    }
}

/// Each call's advantage over its response tokens.
fn broadcast(calls: &[&AgentCall], per_call: &[f64]) -> PerToken {
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    PerToken::broadcast(per_call, &lengths)
}
