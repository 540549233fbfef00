//! Shared-prompt training on the tiny Llama, Qwen2 and Qwen3 fixtures: a prompt several calls
//! share runs through the model once ([`TrainingBatch`]), calls sharing none (or, on a GPU, too
//! little) run as whole sequences in one pass, and neither changes anything but the cost — each
//! call's
//! log-probabilities (at its sampling temperature) are those of its own whole-sequence forward
//! pass, and the gradients those of training every call alone. Prompt indices the prefix does
//! not have are errors that say so.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::model::llama::Llama;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rollout::AgentCall;
use drmas_host::update::TrainingBatch;
use tch::{Device, Kind, Tensor};

fn fixture(name: &str) -> Llama {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name);
    Pretrained::load(&path, Device::Cpu, Kind::Float)
        .expect("fixture loads")
        .model
}

fn call(prompt: &[i64], response: &[i64], temperature: f64) -> AgentCall {
    AgentCall {
        temperature,
        ..AgentCall::synthetic(0, 0, prompt.to_vec(), response.to_vec())
    }
}

/// Two prompts of different lengths, shared by three and two calls whose responses have
/// different lengths (one of a single token), sampled at different temperatures (0: greedy).
fn calls() -> Vec<AgentCall> {
    let first = [5, 17, 3, 29, 8];
    let second = [11, 2, 40];
    vec![
        call(&first, &[7, 1, 33, 12], 1.0),
        call(&second, &[9, 9], 0.7),
        call(&first, &[4], 0.0),
        call(&first, &[21, 6, 6, 30, 2, 18], 1.3),
        call(&second, &[3, 14, 27, 5, 1], 0.5),
    ]
}

/// Five calls of distinct prompts of different lengths (the first two differ in one token),
/// responses of different lengths (one of a single token) and temperatures.
fn distinct_calls() -> Vec<AgentCall> {
    vec![
        call(&[5, 17, 3, 29, 8], &[7, 1, 33, 12], 1.0),
        call(&[5, 17, 3, 29, 9], &[9, 9], 0.7),
        call(&[11, 2, 40], &[4], 0.0),
        call(&[6], &[21, 6, 6, 30, 2, 18], 1.3),
        call(&[13, 2, 40, 8], &[3, 14, 27, 5, 1], 0.5),
    ]
}

/// Each call's response log-probabilities under `model`, `[B, R]`, through a shared-prompt batch.
fn batch_logprobs(model: &Llama, batch: &TrainingBatch) -> Tensor {
    let logits = batch.response_logits(model, None, false).expect("forward");
    batch.token_logprobs(&logits, false).0
}

/// Asserts that row `i` of `batch`'s log-probabilities is `calls[i]`'s response under its own
/// whole-sequence forward pass at its temperature.
fn assert_each_call_alone(name: &str, model: &Llama, calls: &[AgentCall], batch: &TrainingBatch) {
    let batched = tch::no_grad(|| batch_logprobs(model, batch));
    for (row, call) in calls.iter().enumerate() {
        let sequence: Vec<i64> = call.prompt.iter().chain(&call.response).copied().collect();
        let temperature = if call.temperature > 0.0 {
            call.temperature
        } else {
            1.0
        };
        let whole = tch::no_grad(|| {
            let ids = Tensor::from_slice(&sequence).unsqueeze(0);
            model.forward(&ids, None, None).expect("forward")
        })
        .get(0)
        .divide_scalar(temperature)
        .log_softmax(-1, Kind::Float);
        for (j, &token) in call.response.iter().enumerate() {
            let position = (call.prompt.len() + j - 1) as i64;
            let want = whole.double_value(&[position, token]);
            let got = batched.double_value(&[row as i64, j as i64]);
            // f32 sums in another order; the bound of the padding and cache tests.
            assert!(
                (got - want).abs() < 1e-4,
                "{name}: call {row} token {j}: {got} batched, {want} alone"
            );
        }
    }
}

#[test]
fn a_shared_prompt_gives_each_call_its_own_logprobs() {
    let calls = calls();
    let refs: Vec<&AgentCall> = calls.iter().collect();
    for name in ["llama", "qwen2", "qwen3"] {
        let model = fixture(name);
        let batch = TrainingBatch::new(&refs, &broadcast(&refs, &[0.0; 5]), Device::Cpu);
        assert_eq!(batch.prompts(), 2, "{name}: two distinct prompts");
        assert_eq!(
            batch.forward_tokens,
            2 * 5 + 5 * 5,
            "{name}: G × P + B × (R − 1)"
        );
        assert!(
            batch.response_inputs.is_some(),
            "{name}: responses continue the prompts"
        );
        assert_each_call_alone(name, &model, &calls, &batch);
    }
}

#[test]
fn calls_run_whole_in_one_pass_with_each_its_own_logprobs() {
    // Calls sharing no prompt, and calls sharing prompts laid out in one pass all the same.
    let layouts: [(&str, _, BatchOf); 2] = [
        ("distinct", distinct_calls(), TrainingBatch::new),
        ("shared in one pass", calls(), TrainingBatch::in_one_pass),
    ];
    for (layout, calls, batch_of) in layouts {
        let refs: Vec<&AgentCall> = calls.iter().collect();
        for name in ["llama", "qwen2", "qwen3"] {
            let model = fixture(name);
            let batch = batch_of(&refs, &broadcast(&refs, &[0.0; 5]), Device::Cpu);
            let context = format!("{name}, {layout}");
            assert_eq!(batch.prompts(), 5, "{context}: a row per call");
            assert!(batch.response_inputs.is_none(), "{context}: one pass");
            assert_eq!(
                batch.prompt_ids.size(),
                [5, 5 + 5],
                "{context}: [B, P + R − 1]"
            );
            assert_eq!(
                batch.forward_tokens,
                5 * (5 + 5),
                "{context}: B × (P + R − 1)"
            );
            assert_each_call_alone(&context, &model, &calls, &batch);
        }
    }
}

/// A way to lay calls out as a training batch.
type BatchOf = fn(&[&AgentCall], &PerToken, Device) -> TrainingBatch;

/// The gradient of Σ_calls advantage × Σ_tokens log π over all trainable weights, flattened.
fn gradient(model: &Llama, batches: &[TrainingBatch]) -> Tensor {
    let variables = model.var_store().trainable_variables();
    for variable in &variables {
        variable.shallow_clone().zero_grad();
    }
    for batch in batches {
        let logprobs = batch_logprobs(model, batch);
        let objective = logprobs * &batch.response_mask * &batch.advantages;
        objective.sum(Kind::Float).backward();
    }
    let grads: Vec<Tensor> = variables.iter().map(|v| v.grad().flatten(0, -1)).collect();
    Tensor::cat(&grads, 0)
}

#[test]
fn batching_calls_leaves_the_gradient_of_training_each_alone_unchanged() {
    let advantages = [1.0, -0.5, 0.25, -1.5, 0.75];
    let model = fixture("llama");
    // Shared prompts (a prefix pass, then the responses, or whole sequences) and distinct ones
    // (whole sequences).
    let layouts: [(&str, _, BatchOf); 3] = [
        ("shared", calls(), TrainingBatch::new),
        ("shared in one pass", calls(), TrainingBatch::in_one_pass),
        ("distinct", distinct_calls(), TrainingBatch::new),
    ];
    for (layout, calls, batch_of) in layouts {
        let refs: Vec<&AgentCall> = calls.iter().collect();
        let batched = gradient(
            &model,
            &[batch_of(&refs, &broadcast(&refs, &advantages), Device::Cpu)],
        );
        let alone: Vec<TrainingBatch> = calls
            .iter()
            .zip(advantages)
            .map(|(call, advantage)| {
                TrainingBatch::new(&[call], &broadcast(&[call], &[advantage]), Device::Cpu)
            })
            .collect();
        let alone = gradient(&model, &alone);
        let scale = alone.abs().max().double_value(&[]);
        let worst = (&batched - &alone).abs().max().double_value(&[]);
        assert!(scale > 0.0, "the objective has a gradient");
        assert!(
            worst <= 1e-5 * scale,
            "{layout} prompts: batched and separate calls differ by {worst} (largest gradient \
             {scale})"
        );
    }
}

#[test]
fn continuing_a_prompt_the_prefix_lacks_is_an_error_naming_the_indices() {
    let llama = fixture("llama");
    let rows = drmas_host::model::layers::AdapterRows::base();
    let prompts = Tensor::from_slice(&[5i64, 17, 3]).view([1, 3]);
    let (_, prefix) =
        tch::no_grad(|| llama.forward_prompts(&prompts, None, &rows)).expect("prompts");
    let response = Tensor::from_slice(&[7i64, 1]).view([1, 2]);
    let continue_with = |indices: &[i64]| {
        let indices = Tensor::from_slice(indices);
        llama
            .forward_continuations(&prefix, &indices, &response, None, &rows)
            .expect_err("invalid prompt indices")
            .to_string()
    };
    let missing = continue_with(&[1]);
    assert!(
        missing.contains("indices must be in 0..1, found 1..=1"),
        "{missing}"
    );
    let too_many = continue_with(&[0, 0]);
    assert!(
        too_many.contains("one prompt index per row, shape [1]"),
        "{too_many}"
    );
}

/// Each call's advantage over its response tokens.
fn broadcast(calls: &[&AgentCall], per_call: &[f64]) -> PerToken {
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    PerToken::broadcast(per_call, &lengths)
}
