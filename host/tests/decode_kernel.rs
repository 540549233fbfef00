//! The CPU kernels inside the model (tiny random Llama fixture on the CPU backend): a decode
//! step gives the logits of libtorch's training forward, before and after the weights change
//! in place (an optimizer step, a checkpoint load), so the kernels never read stale weights.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use drmas_host::engine::cpu::{CpuKernels, Isa, Routes};
use drmas_host::model::llama::Llama;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::model::safetensors_io::load_checkpoint;
use drmas_host::update::AdamW;
use tch::{Device, Kind, Tensor};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama")
}

const PROMPT: [i64; 6] = [1, 17, 42, 99, 5, 63];

/// The last position's logits by a cached decode step after prefilling the rest (the kernel's
/// path), for a batch of `batch` copies of the prompt.
fn decode_step(model: &Llama, batch: i64) -> Tensor {
    let n = PROMPT.len() as i64;
    let ids = Tensor::from_slice(&PROMPT).view([1, n]).repeat([batch, 1]);
    let mut cache = model.new_cache(batch, n).expect("a cache");
    tch::no_grad(|| {
        let _ = model
            .forward(&ids.narrow(1, 0, n - 1), None, Some(&mut cache))
            .expect("prefill");
        model
            .forward(&ids.narrow(1, n - 1, 1), None, Some(&mut cache))
            .expect("decode step")
            .select(1, 0)
    })
}

/// The last position's logits by libtorch's training forward (grad mode on: never the kernel).
fn training_forward(model: &Llama) -> Tensor {
    let n = PROMPT.len() as i64;
    let ids = Tensor::from_slice(&PROMPT).view([1, n]);
    let logits = model.forward(&ids, None, None).expect("forward");
    logits.select(1, n - 1).detach()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Asserts that every row of a batch-3 decode step equals the training forward (1e-4).
fn assert_decode_matches(model: &Llama, when: &str) -> Tensor {
    let expected = training_forward(model);
    let decoded = decode_step(model, 3);
    for row in 0..3 {
        let diff = max_diff(&decoded.get(row), &expected.get(0));
        assert!(diff < 1e-4, "{when}, row {row}: logits differ by {diff}");
    }
    expected
}

#[test]
fn decode_steps_follow_optimizer_steps_and_loads() {
    let mut pretrained = Pretrained::load(&fixture(), Device::Cpu, Kind::Float).expect("loads");
    // Every product on the kernels, whichever this CPU's routes leave to libtorch.
    let all = CpuKernels::new(Isa::best(), Routes::ALL).expect("the best version runs");
    pretrained.model.set_backend(Arc::new(all));
    let model = &pretrained.model;
    let original = assert_decode_matches(model, "as loaded");

    let params: Vec<(String, Tensor)> = model.var_store().variables().into_iter().collect();
    let mut optimizer = AdamW::new(params, 0.0);
    training_forward_with_grad(model).backward();
    optimizer.step(0.05).expect("an optimizer step");
    let trained = assert_decode_matches(model, "after an optimizer step");
    assert!(
        max_diff(&trained, &original) > 1e-2,
        "the step changed the logits"
    );

    load_checkpoint(model.var_store(), &fixture(), |_| false).expect("reloads");
    let reloaded = assert_decode_matches(model, "after reloading the checkpoint");
    assert!(
        max_diff(&reloaded, &original) < 1e-6,
        "back to the original"
    );
}

/// A scalar loss over the training forward's logits, for a gradient.
fn training_forward_with_grad(model: &Llama) -> Tensor {
    let ids = Tensor::from_slice(&PROMPT).view([1, PROMPT.len() as i64]);
    let logits = model.forward(&ids, None, None).expect("forward");
    logits
        .log_softmax(-1, Kind::Float)
        .select(2, 7)
        .sum(Kind::Float)
}
