//! Generation throughput of the embedded default model (SmolLM2-135M-Instruct, f32 on CPU):
//! a ~70-token chat prompt continued by 128 tokens at temperature 1, at batch 1, 16 and 64,
//! on 2 libtorch threads.
//!
//! Run with `cargo bench -p drmas-host --bench generate` (`$DRMAS_MODEL` or the default model
//! path must hold the GGUF). `DRMAS_BENCH_BATCHES=1,16` picks the batch sizes and
//! `DRMAS_BENCH_THREADS` the thread count (libtorch's and the kernel's). Prints, per batch and
//! mode, the prefill of distinct prompts, one decode step (the forward of one new token per row
//! over the prompt's cache) and the LM head alone; then for the same prompt in every row (a
//! sampling group: prefilled once) and for distinct prompts the tokens generated and tokens per
//! second over the whole `generate` call (prefill included).
//!
//! `DRMAS_BENCH_KERNEL` = `on` (default), `off` or `both` runs generation with the generation
//! matmul kernel, with libtorch's matmuls, or both interleaved per batch.
//!
//! When the Python peer is installed (`scripts/bench/peer-venv.sh`, or `$DRMAS_PEER_PYTHON`), the
//! distinct prompts of each batch also go through HF transformers `generate` on the same model
//! (converted to an HF folder), right after ours, and the ratio ours / HF (the last mode run) is
//! printed.

#[path = "common/peer.rs"]
mod peer;
#[path = "common/settings.rs"]
mod settings;

use std::time::Instant;

use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::kernels;
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use peer::Peer;
use serde_json::json;
use settings::{setting, setting_list};
use tch::{Device, Tensor};

const NEW_TOKENS: usize = 128;

fn main() {
    drmas_host::allocator::keep_freed_memory();
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let batches: Vec<usize> = setting_list("DRMAS_BENCH_BATCHES", &[1, 16, 64]);
    let modes: Vec<(&str, bool)> = match setting("DRMAS_BENCH_KERNEL", String::from("on")).as_str()
    {
        "on" => vec![("kernel", true)],
        "off" => vec![("libtorch", false)],
        "both" => vec![("kernel", true), ("libtorch", false)],
        other => {
            eprintln!("DRMAS_BENCH_KERNEL is on, off or both, not {other:?}");
            std::process::exit(2)
        }
    };
    tch::set_num_threads(threads);
    let path = drmas_host::model::default_model_path();
    let gguf = GgufModel::open(&path).expect("the model file opens (scripts/install-model.sh)");
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
    let text =
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
                Face<|im_end|>\n<|im_start|>user\nA farmer has 17 sheep, 3 cows and twice as many \
                chickens as cows. He sells 5 sheep and buys 4 more cows. How many animals does \
                he have now? Explain your reasoning step by step.<|im_end|>\n\
                <|im_start|>assistant\n";
    let prompt: Vec<i64> = tokenizer
        .encode(text, false)
        .expect("encodes")
        .get_ids()
        .iter()
        .map(|&id| i64::from(id))
        .collect();
    println!(
        "SmolLM2-135M f32, {threads} threads, {}-token prompt, {NEW_TOKENS} new tokens, \
         temperature 1",
        prompt.len()
    );
    let request = GenerationRequest {
        prompt: prompt.clone(),
        params: SamplingParams::with_temperature(1.0),
        max_new_tokens: NEW_TOKENS,
        stop: Vec::new(),
        adapter: None,
    };
    let mut peer = Peer::start(&path, threads);
    // Warm-up: libtorch's first calls allocate and pick kernels.
    let warm = GenerationRequest {
        max_new_tokens: 4,
        ..request.clone()
    };
    generate(
        &llama,
        &tokenizer,
        &[warm.clone(), warm],
        &mut SeededRng::new(0),
    )
    .expect("generates");
    for batch in batches {
        // Distinct prompts: the same question numbered differently, so nothing is shared.
        let distinct: Vec<Vec<i64>> = (0..batch)
            .map(|i| {
                let numbered = text.replace("A farmer", &format!("Farmer {i}"));
                let encoding = tokenizer.encode(numbered, false).expect("encodes");
                encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
            })
            .collect();
        let longest = distinct.iter().map(Vec::len).max().unwrap_or(0);
        let padded: Vec<i64> = distinct
            .iter()
            .flat_map(|p| std::iter::repeat_n(0, longest - p.len()).chain(p.iter().copied()))
            .collect();
        let valid: Vec<bool> = distinct
            .iter()
            .flat_map(|p| {
                std::iter::repeat_n(false, longest - p.len())
                    .chain(std::iter::repeat_n(true, p.len()))
            })
            .collect();
        let shape = [batch as i64, longest as i64];
        let (ids, mask) = (
            Tensor::from_slice(&padded).view(shape),
            Tensor::from_slice(&valid).view(shape),
        );
        let hidden = Tensor::randn([batch as i64, 1, 576], (tch::Kind::Float, Device::Cpu));
        let next = Tensor::zeros([batch as i64, 1], (tch::Kind::Int64, Device::Cpu));
        for &(mode, enabled) in &modes {
            kernels::set_enabled(enabled);
            // What `generate` runs, in its scope: the prefill of distinct prompts, the LM head
            // of one position per row, decode steps each adding one token to the cache.
            let (prefill, head, step) = kernels::while_generating(|| {
                let mut cache = llama
                    .new_cache(batch as i64, longest as i64 + 6)
                    .expect("a cache");
                let start = Instant::now();
                let _ = tch::no_grad(|| llama.forward_last(&ids, Some(&mask), Some(&mut cache)))
                    .expect("prefill");
                let prefill = start.elapsed().as_secs_f64() * 1e3;
                let head = time_ms(20, || {
                    let _ = tch::no_grad(|| llama.logits(&hidden));
                });
                let step = time_ms(5, || {
                    let _ = tch::no_grad(|| llama.forward_last(&next, None, Some(&mut cache)))
                        .expect("decode step");
                });
                (prefill, head, step)
            });
            println!(
                "batch {batch:>3} {mode:<9} prefill of {batch} distinct prompts {prefill:>7.1} \
                 ms, decode step {step:>7.1} ms, LM head alone {head:>6.2} ms"
            );
        }
        let peer_prompts = distinct.clone();
        let runs = [
            ("same prompt", vec![request.clone(); batch]),
            (
                "distinct prompts",
                distinct
                    .into_iter()
                    .map(|prompt| GenerationRequest {
                        prompt,
                        ..request.clone()
                    })
                    .collect(),
            ),
        ];
        let mut ours = 0.0;
        for (name, requests) in runs {
            for &(mode, enabled) in &modes {
                kernels::set_enabled(enabled);
                let start = Instant::now();
                let generations = generate(&llama, &tokenizer, &requests, &mut SeededRng::new(1))
                    .expect("generates");
                let elapsed = start.elapsed().as_secs_f64();
                let tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
                let longest = generations
                    .iter()
                    .map(|g| g.tokens.len())
                    .max()
                    .unwrap_or(0);
                println!(
                    "  {mode:<9} {name:<16}: {tokens:>5} tokens (longest {longest}) in \
                 {elapsed:>6.2} s = {:>7.1} tokens/s",
                    tokens as f64 / elapsed,
                );
                ours = tokens as f64 / elapsed;
            }
        }
        if let Some(p) = peer.as_mut() {
            let request = json!({"cmd": "generate", "prompts": peer_prompts,
                                 "max_new_tokens": NEW_TOKENS, "seed": 1});
            match p.call(&request) {
                Ok(answer) => {
                    let (tokens, seconds) = (
                        Peer::number(&answer, "tokens"),
                        Peer::number(&answer, "seconds"),
                    );
                    println!(
                        "  {:<16}: {tokens:>5} tokens (longest {}) in {seconds:>6.2} s = \
                         {:>7.1} tokens/s; ours / HF = {:.2}",
                        "HF transformers",
                        Peer::number(&answer, "longest"),
                        tokens / seconds,
                        ours / (tokens / seconds),
                    );
                }
                Err(error) => println!("  HF transformers: {error}"),
            }
        }
    }
}

/// The median of `runs` timings of `f`, in milliseconds, after one warm-up call.
fn time_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}
