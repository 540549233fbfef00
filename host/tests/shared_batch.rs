//! Batches handed to one in-process generator from two threads share one decoding
//! (`engine::shared_batch`): a short batch handed in while a long one runs joins it and comes
//! back first, with the tokens each gets alone.

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
