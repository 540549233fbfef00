//! Batches handed to one in-process generator from two threads share one decoding
//! (`engine::shared_batch`): a short batch handed in while a long one runs joins it and comes
//! back first, with the tokens each gets alone; and with a prefix cache, a next turn reuses the
//! sequence it continues.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use drmas_host::engine::{GenerationRequest, Generator, LocalGenerator, SamplingParams};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use tch::{Device, Kind};

#[test]
fn a_short_batch_handed_in_while_a_long_one_runs_comes_back_first() {
    let path = common::repo().join("host/tests/fixtures/hf/llama");
    let mut pretrained = Pretrained::load(&path, Device::Cpu, Kind::Float).expect("the fixture");
    let (generator, _) = LocalGenerator::split(&mut pretrained);
    let greedy = |prompt: &[i64], tokens| {
        GenerationRequest::new(prompt.to_vec(), SamplingParams::GREEDY, tokens)
    };
    let long: Vec<GenerationRequest> = (0..16).map(|i| greedy(&[1, 2, 3, 4 + i], 500)).collect();
    let short = [greedy(&[7, 8], 3)];
    let tokens = |batch: &[GenerationRequest]| {
        let generated = generator.generate(batch, &mut SeededRng::new(0));
        let generated = generated.expect("generates");
        generated.into_iter().map(|g| g.tokens).collect::<Vec<_>>()
    };
    let (long_alone, short_alone) = (tokens(&long), tokens(&short));
    assert!(
        long_alone.iter().any(|t| t.len() == 500),
        "the long batch runs its 500 steps: {long_alone:?}"
    );

    let (finished, long_done) = mpsc::channel();
    let (long_together, short_together) = std::thread::scope(|scope| {
        let long_thread = scope.spawn(|| {
            let generated = tokens(&long);
            let _ = finished.send(());
            generated
        });
        // Well inside the long batch's 500 steps (the short one comes back first even if the
        // long one has not started yet: both then start together).
        std::thread::sleep(Duration::from_millis(50));
        let short_together = tokens(&short);
        assert!(
            long_done.try_recv().is_err(),
            "the long batch ended before the short one that joined it came back"
        );
        (long_thread.join().expect("the long batch"), short_together)
    });
    assert_eq!(short_together, short_alone);
    assert_eq!(long_together, long_alone);
}

/// With a prefix cache, an agent's next turn (its last prompt and answer, then new tokens)
/// reuses the finished sequence's keys and values, and gets the tokens it gets without them.
#[test]
fn a_generator_with_a_prefix_cache_prefills_only_a_next_turns_new_tokens() {
    let path = common::repo().join("host/tests/fixtures/hf/llama");
    let mut pretrained = Pretrained::load(&path, Device::Cpu, Kind::Float).expect("the fixture");
    let (plain, _) = LocalGenerator::split(&mut pretrained);
    let caching = plain.with_prefix_cache(16 << 20);
    let greedy = |prompt: Vec<i64>| GenerationRequest::new(prompt, SamplingParams::GREEDY, 12);
    let first: Vec<i64> = (1..=30).collect();
    let answer = caching
        .generate(&[greedy(first.clone())], &mut SeededRng::new(0))
        .expect("generates")
        .remove(0);
    assert_eq!(answer.cached_tokens, 0);
    let next: Vec<i64> = (first.iter().chain(&answer.tokens).copied())
        .chain([40, 41, 42])
        .collect();
    let reusing = caching
        .generate(&[greedy(next.clone())], &mut SeededRng::new(0))
        .expect("generates")
        .remove(0);
    assert_eq!(reusing.cached_tokens, first.len() + answer.tokens.len() - 1);
    drop(caching);
    let (computed, _) = LocalGenerator::split(&mut pretrained);
    let computed = computed
        .generate(&[greedy(next)], &mut SeededRng::new(0))
        .expect("generates")
        .remove(0);
    assert_eq!(computed.cached_tokens, 0);
    assert_eq!(reusing.tokens, computed.tokens);
    for (a, b) in reusing.logprobs.iter().zip(&computed.logprobs) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}
