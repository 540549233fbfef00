//! The Llama engine against the embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF
//! dequantised to f32): greedy answers, KV-cache and padding consistency, load errors.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use drmas_host::engine::cpu::{backend_for, CpuKernels, Isa, Routes};
use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::backend;
use drmas_host::model::error::ModelError;
use drmas_host::model::gguf::model::HfTensor;
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::llama::Llama;
use drmas_host::model::weights::load_into;
use drmas_host::rng::SeededRng;
use tch::{nn::VarStore, Device, Kind, Tensor};

/// Runs `f` with the GGUF file and the model loaded from it (on the CPU backend, as worker
/// groups build it), loaded once and shared by the tests (behind a lock: libtorch tensors are
/// not `Sync`).
fn with_model<R>(f: impl FnOnce(&GgufModel, &mut Llama) -> R) -> R {
    static MODEL: OnceLock<Mutex<(GgufModel, Llama)>> = OnceLock::new();
    let model = MODEL.get_or_init(|| {
        let gguf = GgufModel::open(common::model_path()).expect("the GGUF opens");
        let start = Instant::now();
        let mut llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
        llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
        eprintln!("loaded in {:.2?}", start.elapsed());
        Mutex::new((gguf, llama))
    });
    let mut guard = model
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let (gguf, llama) = &mut *guard;
    f(gguf, llama)
}

fn chatml(question: &str) -> String {
    format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )
}

fn encode(gguf: &GgufModel, text: &str) -> Vec<i64> {
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let encoding = tokenizer.encode(text, false).expect("encodes");
    encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
}

/// Greedy continuations of `prompts` through the sampling engine, up to `max_new` tokens each.
fn greedy(gguf: &GgufModel, llama: &Llama, prompts: &[Vec<i64>], max_new: usize) -> Vec<Vec<i64>> {
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let requests: Vec<GenerationRequest> = prompts
        .iter()
        .map(|prompt| GenerationRequest::new(prompt.clone(), SamplingParams::GREEDY, max_new))
        .collect();
    generate(llama, &tokenizer, &requests, &mut SeededRng::new(0))
        .expect("generates")
        .into_iter()
        .map(|g| g.tokens)
        .collect()
}

fn ids(tokens: &[i64]) -> Tensor {
    Tensor::from_slice(tokens).view([1, tokens.len() as i64])
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes");
    (a - b).abs().max().double_value(&[])
}

#[test]
fn greedy_answers_the_capital_of_france() {
    with_model(|gguf, llama| {
        let prompt = encode(gguf, &chatml("What is the capital of France?"));
        let max_new = 20;
        let start = Instant::now();
        let out = greedy(gguf, llama, std::slice::from_ref(&prompt), max_new);
        let elapsed = start.elapsed();
        let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
        let ids: Vec<u32> = out[0].iter().map(|&t| t as u32).collect();
        let answer = tokenizer.decode(&ids, true).expect("decodes");
        eprintln!(
            "{} prompt tokens, {} new in {elapsed:.2?} ({:.1} tokens/s incl. prefill): {answer:?}",
            prompt.len(),
            out[0].len(),
            out[0].len() as f64 / elapsed.as_secs_f64()
        );
        assert!(answer.contains("Paris"), "answer: {answer:?}");
        assert!(out[0].len() <= max_new);
    });
}

/// With libtorch's products and with the CPU kernels on every product (in-place matmuls of 5
/// and 1 rows, the decode attention, RMSNorm, RoPE and SwiGLU), against libtorch's full
/// forward.
#[test]
fn cached_decoding_matches_full_recompute() {
    with_model(|gguf, llama| {
        let tokens = encode(gguf, &chatml("Name a colour."));
        let n = tokens.len() as i64;
        llama.set_backend(backend::libtorch());
        let full = tch::no_grad(|| llama.forward(&ids(&tokens), None, None)).expect("forward");

        for kernels in [false, true] {
            if kernels {
                let all = CpuKernels::new(Isa::best(), Routes::ALL).expect("the best version runs");
                llama.set_backend(Arc::new(all));
            }
            let prefill = 5;
            let mut cache = llama.new_cache(1, n).expect("a cache");
            let mut forward = |range: std::ops::Range<usize>| {
                let step = || llama.forward(&ids(&tokens[range]), None, Some(&mut cache));
                tch::no_grad(step).expect("a cached forward")
            };
            let mut steps = vec![forward(0..prefill)];
            for t in prefill..tokens.len() {
                steps.push(forward(t..t + 1));
            }
            let cached = Tensor::cat(&steps, 1);
            let diff = max_abs_diff(&full, &cached);
            println!("kernels {kernels}: cached logits within {diff:e} of the full forward's");
            assert!(
                diff < 1e-4,
                "kernels {kernels}: cached logits differ by {diff}"
            );
            assert_eq!(cache.len(), n);
        }
    });
}

/// What a CUDA graph of a decode step needs from the model (`engine::decode_steps`): with the
/// cache's next slot held on the device and every slot attended to through the mask, decode
/// steps of a left-padded batch give the logits of steps over the slots filled so far, on
/// libtorch and on the CPU kernels; several tokens per row are refused in that mode.
#[test]
fn decode_steps_at_a_slot_held_on_the_device_match_steps_at_the_host_slot() {
    with_model(|gguf, llama| {
        let long = encode(gguf, &chatml("What is the capital of France?"));
        let short = encode(gguf, &chatml("Hi"));
        let width = long.len();
        let mut padded = vec![0; width - short.len()];
        padded.extend(&short);
        let prompts = Tensor::cat(&[ids(&long), ids(&padded)], 0);
        let mask = Tensor::ones([2, width as i64], (Kind::Int64, Device::Cpu));
        let _ = mask
            .get(1)
            .narrow(0, 0, (width - short.len()) as i64)
            .fill_(0i64);
        let steps = 6;
        for kernels in [false, true] {
            if kernels {
                llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
            } else {
                llama.set_backend(backend::libtorch());
            }
            let max_len = (width + steps + 3) as i64;
            let mut host = llama.new_cache(2, max_len).expect("a cache");
            let mut held = llama.new_cache(2, max_len).expect("a cache");
            let prefill = |cache: &mut _| {
                tch::no_grad(|| llama.forward_last(&prompts, Some(&mask), Some(cache)))
                    .expect("the prefill")
            };
            let mut want = prefill(&mut host);
            let mut got = prefill(&mut held);
            held.hold_slot_on_device();
            let mut largest = 0f64;
            for step in 0..steps {
                // Rounding only: attention sums over more (masked) slots.
                let diff = max_abs_diff(&want, &got);
                largest = largest.max(diff);
                assert!(
                    diff < 1e-4,
                    "kernels {kernels}, step {step}: logits differ by {diff}"
                );
                let next = want.select(1, -1).argmax(-1, true);
                let forward = |cache: &mut _| {
                    tch::no_grad(|| llama.forward_last(&next, None, Some(cache))).expect("a step")
                };
                want = forward(&mut host);
                got = forward(&mut held);
                assert_eq!(held.len(), host.len());
            }
            println!("kernels {kernels}: held-slot steps within {largest:e} of host-slot steps");
            let two = Tensor::zeros([2, 2], (Kind::Int64, Device::Cpu));
            let error = tch::no_grad(|| llama.forward_last(&two, None, Some(&mut held)))
                .expect_err("two tokens per row")
                .to_string();
            assert!(error.contains("one at a time"), "{error}");
        }
        llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
    });
}

#[test]
fn left_padding_does_not_change_a_sequence() {
    with_model(|gguf, llama| {
        let long = encode(gguf, &chatml("What is the capital of France?"));
        let short = encode(gguf, &chatml("Hi"));
        let alone = tch::no_grad(|| llama.forward(&ids(&short), None, None)).expect("forward");

        let pad = long.len() - short.len();
        let mut padded = vec![0; pad];
        padded.extend(&short);
        let batch = Tensor::cat(&[ids(&long), ids(&padded)], 0);
        let mask = Tensor::ones([2, long.len() as i64], (Kind::Int64, Device::Cpu));
        let _ = mask.get(1).narrow(0, 0, pad as i64).fill_(0i64);
        let both = tch::no_grad(|| llama.forward(&batch, Some(&mask), None)).expect("forward");
        let diff = max_abs_diff(
            &alone.get(0),
            &both.get(1).narrow(0, pad as i64, short.len() as i64),
        );
        assert!(diff < 1e-4, "padded logits differ by {diff}");

        let answers = greedy(gguf, llama, &[long.clone(), short.clone()], 6);
        let single = greedy(gguf, llama, &[short], 6);
        assert_eq!(answers[1], single[0], "batched vs alone");
    });
}

#[test]
fn a_wrong_shape_names_the_tensor_and_both_shapes() {
    let vs = VarStore::new(Device::Cpu);
    let _ = (&vs.root() / "model" / "norm").ones("weight", &[4]);
    let tensor = |shape: Vec<usize>| -> Result<HfTensor, ModelError> {
        Ok(HfTensor {
            name: "model.norm.weight".to_owned(),
            data: vec![1.0; shape.iter().product()],
            shape,
        })
    };
    let err = load_into(&vs, [tensor(vec![5])]).expect_err("a wrong shape");
    assert!(matches!(err, ModelError::Shape { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("model.norm.weight") && message.contains("[4]") && message.contains("[5]"),
        "{message}"
    );

    let err = load_into(&vs, Vec::<Result<HfTensor, ModelError>>::new()).expect_err("missing");
    assert!(err.to_string().contains("model.norm.weight"), "{err}");

    load_into(&vs, [tensor(vec![4])]).expect("the right shape loads");
}
