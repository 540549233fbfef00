//! What continuous batching costs on the embedded default model (SmolLM2-135M-Instruct, f32, on
//! the CPU kernels a worker group uses): a request admitted into a running batch between two
//! decode steps (`Decoding::admit`: its prompt prefilled alone, then every row's KV cache laid
//! out again), against one decode step of that batch and the prefill of the same prompt alone,
//! measured in the same run.
//!
//! Run with `cargo bench -p drmas-host --bench admission`. `DRMAS_BENCH_BATCHES=16,64` picks the
//! running batch sizes, `DRMAS_BENCH_THREADS` the thread count (2 by default). Each running row
//! has a distinct ~76-token prompt and has decoded 64 tokens when the admissions start.

#[path = "common/machine.rs"]
mod machine;
#[path = "common/settings.rs"]
mod settings;
#[path = "common/smollm2.rs"]
mod smollm2;

use std::time::Instant;

use drmas_host::engine::{Decoding, GenerationRequest, SamplingParams};
use drmas_host::model::llama::Llama;
use drmas_host::rng::SeededRng;
use machine::{print_cpu, print_load};
use settings::{setting, setting_list};
use tch::Tensor;

/// Tokens each running row has decoded before the admissions.
const DECODED: usize = 64;
/// Admissions (and decode steps) timed per batch size; the median is printed.
const RUNS: usize = 7;

fn main() {
    let threads: i32 = setting("DRMAS_BENCH_THREADS", 2);
    let batches: Vec<usize> = setting_list("DRMAS_BENCH_BATCHES", &[16, 64]);
    print_cpu();
    let (tokenizer, llama) = smollm2::load(threads);
    let prompt = |n: usize| smollm2::word_problem(&tokenizer, n);
    let request =
        |n: usize| GenerationRequest::new(prompt(n), SamplingParams::with_temperature(1.0), 256);
    println!(
        "SmolLM2-135M f32, {threads} threads, {}-token prompts, rows {DECODED} tokens in",
        prompt(0).len()
    );
    for batch in batches {
        let running: Vec<GenerationRequest> = (0..batch).map(request).collect();
        let mut rng = SeededRng::new(0);
        let mut decoding =
            Decoding::start(&llama, &tokenizer, running, &mut rng, None).expect("the batch starts");
        for _ in 0..DECODED {
            decoding.step().expect("a step");
        }
        let mut steps = Vec::with_capacity(RUNS);
        let mut admissions = Vec::with_capacity(RUNS);
        for run in 0..RUNS {
            let started = Instant::now();
            decoding.step().expect("a step");
            steps.push(started.elapsed().as_secs_f64() * 1e3);
            let joining = [request(batch + run)];
            let started = Instant::now();
            let admitted = decoding.admit(&joining).expect("admits");
            admissions.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(admitted.is_some(), "the request fits");
        }
        let alone = prefill_ms(&llama, &prompt(0));
        let (step, admission) = (median(steps), median(admissions));
        println!(
            "batch {batch:>3}: decode step {step:7.1} ms | admitting one request {admission:7.1} ms \
             = {:.2} decode steps (its prefill alone {alone:.1} ms; the cache layout about {:.1} ms)",
            admission / step,
            (admission - alone).max(0.0)
        );
    }
    print_load();
}

/// The median time of the prefill of `prompt` alone into a fresh cache, in milliseconds.
fn prefill_ms(llama: &Llama, prompt: &[i64]) -> f64 {
    let ids = Tensor::from_slice(prompt).view([1, prompt.len() as i64]);
    let times = (0..RUNS)
        .map(|_| {
            let mut cache = llama.new_cache(1, prompt.len() as i64).expect("a cache");
            let started = Instant::now();
            let logits = tch::no_grad(|| llama.forward_last(&ids, None, Some(&mut cache)));
            assert_eq!(logits.expect("prefill").size()[0], 1);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(times)
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
