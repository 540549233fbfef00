//! Peak memory of batch-64 generation at 512 tokens (prompt + new tokens) with SmolLM2-135M
//! f32 on CPU, against what it must hold: the f32 weights plus a KV cache of 64 × 512 positions.
//! The issue allows 20 % over that sum.
//!
//! A process of its own that does only this, so its peak resident set (`getrusage`'s
//! `ru_maxrss`) is the generation's. Also printed: the peak before the model loads (the
//! process and its libraries) and after (weights in place, plus what loading touched: the
//! mapped GGUF file and dequantisation buffers). Before generating, the kernel's peak counter
//! is reset (`/proc/self/clear_refs`, Linux) to the current resident set, so the last figure is
//! the generation's own peak with the weights in memory. Run with
//! `cargo bench -p drmas-host --bench generate_memory`; `DRMAS_BENCH_THREADS` (2),
//! `DRMAS_BENCH_BATCH` (64) and `DRMAS_BENCH_TOTAL` (512) change the defaults.

#[path = "common/settings.rs"]
mod settings;

use std::time::Instant;

use drmas_host::engine::cpu::backend_for;
use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::gguf::GgufModel;
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use settings::setting;
use tch::Device;

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    drmas_host::allocator::keep_freed_memory();
    let (threads, batch, total): (usize, usize, usize) = (
        setting("DRMAS_BENCH_THREADS", 2),
        setting("DRMAS_BENCH_BATCH", 64),
        setting("DRMAS_BENCH_TOTAL", 512),
    );
    tch::set_num_threads(threads as i32);
    let start_peak = peak_rss();
    let path = drmas_host::model::default_model_path();
    let gguf = GgufModel::open(&path).expect("the model file opens (scripts/install-model.sh)");
    let tokenizer = gguf.tokenizer().expect("the tokenizer loads");
    let mut llama = Llama::from_gguf(&gguf, Device::Cpu).expect("the model loads");
    // The CPU kernels, as a worker group builds the model.
    llama.set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
    drop(gguf);
    let loaded_peak = peak_rss();
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    if !reset {
        println!("could not reset the peak (no /proc/self/clear_refs): it includes loading");
    }
    let before = peak_rss();

    let prompts: Vec<Vec<i64>> = (0..batch)
        .map(|i| {
            let text = format!(
                "<|im_start|>user\nFarmer {i} has 17 sheep, 3 cows and twice as many chickens \
                 as cows. He sells 5 sheep and buys 4 more cows. How many animals does he have \
                 now? Explain your reasoning step by step.<|im_end|>\n<|im_start|>assistant\n"
            );
            let encoding = tokenizer.encode(text, false).expect("encodes");
            encoding.get_ids().iter().map(|&id| i64::from(id)).collect()
        })
        .collect();
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let new_tokens = total
        .checked_sub(longest)
        .expect("DRMAS_BENCH_TOTAL is longer than the prompt");
    let requests: Vec<GenerationRequest> = prompts
        .into_iter()
        .map(|prompt| {
            GenerationRequest::new(prompt, SamplingParams::with_temperature(1.0), new_tokens)
        })
        .collect();

    let c = llama.config();
    let weights: usize = llama
        .var_store()
        .variables()
        .values()
        .map(|t| t.numel() * t.kind().elt_size_in_bytes())
        .sum();
    let cache = 2 * c.num_hidden_layers * batch * c.num_key_value_heads * c.head_dim * total * 4;
    let budget = (weights + cache) as f64 * 1.2;

    let started = Instant::now();
    let generations =
        generate(&llama, &tokenizer, &requests, &mut SeededRng::new(1)).expect("generates");
    let elapsed = started.elapsed().as_secs_f64();
    let peak = peak_rss();
    let tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    let at_length = generations
        .iter()
        .filter(|g| g.tokens.len() == new_tokens)
        .count();
    println!(
        "SmolLM2-135M f32, {threads} threads, batch {batch}, {longest}-token prompts + up to \
         {new_tokens} new tokens = {total}: {tokens} tokens in {elapsed:.1} s, {at_length} of \
         {batch} rows ran to the full length"
    );
    println!(
        "weights {:.0} MiB + KV cache {:.0} MiB = {:.0} MiB; +20 % = {budget_mb:.0} MiB",
        weights as f64 / MIB,
        cache as f64 / MIB,
        (weights + cache) as f64 / MIB,
        budget_mb = budget / MIB
    );
    println!(
        "peak RSS: {:.0} MiB at start, {:.0} MiB while loading, {:.0} MiB before generating, \
         {:.0} MiB generating = {:.2} x (weights + KV cache): {}",
        start_peak / MIB,
        loaded_peak / MIB,
        before / MIB,
        peak / MIB,
        peak / (weights + cache) as f64,
        if peak <= budget {
            "within the budget"
        } else {
            "OVER the budget"
        }
    );
}

/// The process's peak resident set in bytes (`ru_maxrss` is in KiB on Linux).
fn peak_rss() -> f64 {
    // SAFETY: getrusage only writes the struct it is given; a zeroed rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    usage.ru_maxrss as f64 * 1024.0
}
