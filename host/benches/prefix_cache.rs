//! What a prefix cache saves and costs on the embedded default model (SmolLM2-135M-Instruct,
//! f32, on the CPU kernels a worker group uses), the two sides measured in the same run:
//!
//! - the second turn of `B` conversations, whose prompts resend the first turn's prompt and
//!   answer: its prefill (`Decoding::start`) reusing the first turn's keys and values against
//!   computing them, and the whole turn;
//! - the first turn generated with the cache (each finished sequence's keys and values copied
//!   out) against without.
//!
//! Run with `cargo bench -p drmas-host --bench prefix_cache`. `DRMAS_BENCH_BATCHES=1,16` picks
//! the conversations, `DRMAS_BENCH_THREADS` the thread count (2 by default).

#[path = "common/machine.rs"]
mod machine;
#[path = "common/settings.rs"]
mod settings;
#[path = "common/smollm2.rs"]
mod smollm2;

use std::time::Instant;

use drmas_host::engine::{Decoding, GenerationRequest, PrefixCache, SamplingParams};
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use machine::{print_cpu, print_load};
use settings::{setting, setting_list};
use tokenizers::Tokenizer;

/// Tokens of each first-turn answer (and of each second turn, in the whole-turn timing).
const ANSWER: usize = 128;
/// Timings per figure; the median is printed.
const RUNS: usize = 3;

fn main() {
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let batches: Vec<usize> = setting_list("DRMAS_BENCH_BATCHES", &[1, 16]);
    print_cpu();
    let (tokenizer, llama) = smollm2::load(threads);
    println!("SmolLM2-135M f32, {threads} threads, first answers of {ANSWER} tokens");
    for batch in batches {
        let first: Vec<GenerationRequest> = (0..batch)
            .map(|n| turn(smollm2::word_problem(&tokenizer, n), n as u64))
            .collect();
        let mut times = (Vec::new(), Vec::new());
        let mut prefixes = PrefixCache::new(1 << 30);
        let mut answers = Vec::new();
        for _ in 0..RUNS {
            let started = Instant::now();
            let plain = run_to_end(&llama, &tokenizer, first.clone(), None);
            times.0.push(ms(started));
            prefixes.clear();
            let started = Instant::now();
            answers = run_to_end(&llama, &tokenizer, first.clone(), Some(&mut prefixes));
            times.1.push(ms(started));
            assert_eq!(answers, plain, "the same tokens with the cache");
        }
        let (plain, keeping) = (median(times.0), median(times.1));
        println!(
            "batch {batch:>3}, first turn: {plain:8.1} ms without the cache, {keeping:8.1} ms \
             keeping the sequences ({:+.1} %, {} MiB kept)",
            (keeping / plain - 1.0) * 100.0,
            prefixes.bytes() >> 20
        );

        let second: Vec<GenerationRequest> = (first.iter().zip(&answers))
            .enumerate()
            .map(|(n, (request, answer))| {
                let next = "<|im_end|>\n<|im_start|>user\nCheck your answer and give only the \
                            number.<|im_end|>\n<|im_start|>assistant\n";
                let prompt = (request.prompt.iter().chain(answer).copied())
                    .chain(smollm2::tokens(&tokenizer, next))
                    .collect();
                turn(prompt, (batch + n) as u64)
            })
            .collect();
        let prompt_tokens = second.iter().map(|r| r.prompt.len()).sum::<usize>() / batch;
        let mut prefill = (Vec::new(), Vec::new());
        let mut whole = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let mut rng = SeededRng::new(0);
            let started = Instant::now();
            let computed = Decoding::start(&llama, &tokenizer, second.clone(), &mut rng, None);
            prefill.0.push(ms(started));
            drop(computed.expect("starts"));
            let started = Instant::now();
            let reusing = Decoding::start(
                &llama,
                &tokenizer,
                second.clone(),
                &mut rng,
                Some(&mut prefixes),
            );
            prefill.1.push(ms(started));
            drop(reusing.expect("starts"));
            let started = Instant::now();
            run_to_end(&llama, &tokenizer, second.clone(), None);
            whole.0.push(ms(started));
            // A copy of the cache's entries is not at hand, so the whole turn with the cache
            // starts from one holding the first turns only: its own sequences are added after.
            let mut fresh = PrefixCache::new(1 << 30);
            run_to_end(&llama, &tokenizer, first.clone(), Some(&mut fresh));
            let started = Instant::now();
            run_to_end(&llama, &tokenizer, second.clone(), Some(&mut fresh));
            whole.1.push(ms(started));
        }
        let (computed, reusing) = (median(prefill.0), median(prefill.1));
        let (whole_computed, whole_reusing) = (median(whole.0), median(whole.1));
        println!(
            "batch {batch:>3}, second turn of ~{prompt_tokens} prompt tokens: prefill \
             {computed:8.1} ms computed, {reusing:8.1} ms reusing the first turn ({:.2}x); whole \
             turn of {ANSWER} tokens {whole_computed:8.1} ms against {whole_reusing:8.1} ms \
             ({:.2}x)",
            computed / reusing,
            whole_computed / whole_reusing
        );
    }
    print_load();
}

/// A turn answering `prompt` with up to [`ANSWER`] tokens sampled at temperature 1 from `seed`.
fn turn(prompt: Vec<i64>, seed: u64) -> GenerationRequest {
    GenerationRequest {
        seed: Some(seed),
        ..GenerationRequest::new(prompt, SamplingParams::with_temperature(1.0), ANSWER)
    }
}

/// Generates `requests` to the end; each one's tokens.
fn run_to_end(
    llama: &Llama,
    tokenizer: &Tokenizer,
    requests: Vec<GenerationRequest>,
    prefixes: Option<&mut PrefixCache>,
) -> Vec<Vec<i64>> {
    let mut rng = SeededRng::new(0);
    let mut decoding =
        Decoding::start(llama, tokenizer, requests, &mut rng, prefixes).expect("starts");
    while !decoding.is_done() {
        decoding.step().expect("a step");
    }
    (decoding.into_outputs().into_iter())
        .map(|g| g.tokens)
        .collect()
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
