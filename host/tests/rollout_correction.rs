//! The old log-probabilities recomputed with the training forward against the sampler's, on the
//! tiny Llama fixture with the CPU kernels (as worker groups run it): equal within 1e-4 in f32,
//! as generation's logprobs are to a training forward's (host/tests/engine.rs). With the
//! sampler's logprobs perturbed by known amounts, the update reports that log-ratio and the TIS
//! weight truncates at its cap, in the mismatch statistics and in the loss.

use std::path::Path;

use drmas_host::advantage::PerToken;
use drmas_host::config::KlType;
use drmas_host::config::LossSection;
use drmas_host::engine::cpu::backend_for;
use drmas_host::engine::{generate, GenerationRequest, SamplingParams};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use drmas_host::rollout::AgentCall;
use drmas_host::update::{
    recompute_old_logprobs, reference_kl, update_group, AdamW, AgentTraining, MicroBatch,
    Reference, RolloutCorrection, TrainingBatch, UpdateInputs, UpdateReport, UpdateSettings,
};
use tch::{Device, Kind};

/// The tolerance between sampler and trainer log-probabilities in f32 on one machine.
const F32_TOLERANCE: f64 = 1e-4;

fn fixture() -> Pretrained {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama");
    let mut pretrained = Pretrained::load(&path, Device::Cpu, Kind::Float).expect("fixture loads");
    pretrained
        .model
        .set_backend(backend_for(Device::Cpu).expect("the CPU kernels"));
    pretrained
}

/// Six calls sampled by the engine from the fixture (two prompts, three temperatures), with the
/// sampler's log-probabilities.
fn sampled_calls(pretrained: &Pretrained) -> Vec<AgentCall> {
    let prompts: [Vec<i64>; 2] = [vec![5, 17, 3, 29, 8], vec![11, 2, 40]];
    let requests: Vec<GenerationRequest> = (0..6)
        .map(|i| {
            GenerationRequest::new(
                prompts[i % 2].clone(),
                SamplingParams::with_temperature([1.0, 0.7, 1.3][i % 3]),
                3 + i,
            )
        })
        .collect();
    let generations = generate(
        &pretrained.model,
        &pretrained.tokenizer,
        &requests,
        &mut SeededRng::new(3),
    )
    .expect("generates");
    requests
        .iter()
        .zip(generations)
        .enumerate()
        .map(|(i, (request, generation))| AgentCall {
            episode: i,
            index: 0,
            agent: 0,
            step: 0,
            prompt: request.prompt.clone(),
            cached_prompt_tokens: generation.cached_tokens,
            response: generation.tokens,
            text: String::new(),
            logprobs: generation.logprobs,
            temperature: request.params.temperature,
            valid: true,
            breaks_contract: false,
            finish: generation.finish,
        })
        .collect()
}

/// One update step over `calls` with the old log-probabilities recomputed, truncated
/// importance sampling at `tis_cap`.
fn update(pretrained: &Pretrained, calls: &[AgentCall], tis_cap: Option<f64>) -> UpdateReport {
    update_at(pretrained, calls, tis_cap, 0.0, &[])
}

/// [`update`] at learning rate `lr`, given the old log-probabilities `recomputed` (see
/// [`UpdateInputs`]).
fn update_at(
    pretrained: &Pretrained,
    calls: &[AgentCall],
    tis_cap: Option<f64>,
    lr: f64,
    recomputed: &[Option<Vec<f32>>],
) -> UpdateReport {
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let per_call: Vec<f64> = (0..calls.len()).map(|i| [1.0, -0.5][i % 2]).collect();
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    let advantages = PerToken::broadcast(&per_call, &lengths);
    // In name order: the gradient norm sums the parameters' squares in this order, and two
    // loads of the fixture list their variables in different orders.
    let mut params: Vec<_> = pretrained
        .model
        .var_store()
        .variables()
        .into_iter()
        .collect();
    params.sort_by(|(a, _), (b, _)| a.cmp(b));
    let mut optimizer = AdamW::new(params, 0.0);
    let rows: Vec<Option<&[f32]>> = recomputed.iter().map(Option::as_deref).collect();
    let inputs = UpdateInputs {
        calls: &refs,
        advantages: &advantages,
        recomputed: &rows,
    };
    update_group(
        &pretrained.model,
        Reference::None,
        &mut optimizer,
        &inputs,
        &[recomputing_agent(tis_cap)],
        &UpdateSettings::one_step(0.0, lr),
    )
    .expect("update")
}

/// An agent that recomputes its old log-probabilities, in micro-batches of 4 calls.
fn recomputing_agent(tis_cap: Option<f64>) -> AgentTraining {
    AgentTraining {
        loss: LossSection::default(),
        micro_batch: MicroBatch::Calls(4),
        adapter: None,
        activation_checkpointing: false,
        correction: RolloutCorrection {
            recompute: true,
            tis_cap,
        },
    }
}

#[test]
fn the_update_takes_the_old_logprobs_the_kl_in_the_reward_recomputed() {
    let (computing, reusing) = (fixture(), fixture());
    let calls = sampled_calls(&computing);
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let agents = [recomputing_agent(None)];
    let recomputed = reference_kl(&reusing.model, &reusing.model, &refs, &agents, KlType::K1)
        .expect("the KL pass")
        .recomputed;
    assert!(recomputed.iter().all(Option::is_some), "every call's row");
    // Reused, they give the step the update's own recomputation gives, bit for bit.
    let own = update_at(&computing, &calls, None, 1e-3, &[]);
    let reused = update_at(&reusing, &calls, None, 1e-3, &recomputed);
    assert_eq!(
        own.stats.policy_loss.to_bits(),
        reused.stats.policy_loss.to_bits()
    );
    assert_eq!(own.grad_norm.to_bits(), reused.grad_norm.to_bits());
    assert_eq!(own.mismatch[&0], reused.mismatch[&0]);
    let after = reusing.model.var_store().variables();
    for (name, a) in computing.model.var_store().variables() {
        assert!(a.equal(&after[&name]), "{name} after the step");
    }
    // And they are what it takes: shifted by 0.25, the log-ratio against the sampler moves by
    // 0.25.
    let shifted: Vec<Option<Vec<f32>>> = recomputed
        .iter()
        .map(|row| row.as_ref().map(|r| r.iter().map(|x| x + 0.25).collect()))
        .collect();
    let moved = update_at(&fixture(), &calls, None, 0.0, &shifted).mismatch[&0];
    assert!(
        (moved.log_ratio_mean() - own.mismatch[&0].log_ratio_mean() - 0.25).abs() < 1e-6,
        "{moved:?}"
    );
}

#[test]
fn in_f32_the_recomputed_logprobs_are_the_samplers() {
    let pretrained = fixture();
    let calls = sampled_calls(&pretrained);
    let refs: Vec<&AgentCall> = calls.iter().collect();
    let lengths: Vec<usize> = calls.iter().map(|c| c.response.len()).collect();
    let zeros = PerToken::broadcast(&vec![0.0; calls.len()], &lengths);
    let batch = TrainingBatch::new(&refs, &zeros, Device::Cpu);
    let recomputed = recompute_old_logprobs(&pretrained.model, &batch, None).expect("forward");
    let mut largest = 0.0f64;
    for (row, call) in calls.iter().enumerate() {
        assert!(!call.response.is_empty());
        for (column, &sampled) in call.logprobs.iter().enumerate() {
            let trained = recomputed.double_value(&[row as i64, column as i64]);
            largest = largest.max((trained - f64::from(sampled)).abs());
        }
    }
    eprintln!("largest |recomputed − sampled| logprob: {largest:e}");
    assert!(
        largest < F32_TOLERANCE,
        "recomputed and sampled logprobs differ by {largest}"
    );

    let report = update(&pretrained, &calls, None);
    let mismatch = report.mismatch[&0];
    let tokens: usize = calls.iter().map(|c| c.response.len()).sum();
    assert_eq!(mismatch.tokens, tokens as f64);
    assert!(mismatch.log_ratio_abs_max < F32_TOLERANCE, "{mismatch:?}");
    assert_eq!(mismatch.fraction_above_threshold(), 0.0);
    assert_eq!(mismatch.capped_fraction(), None);
}

#[test]
fn a_forced_mismatch_shows_in_the_stats_and_the_tis_weight_stops_at_its_cap() {
    let pretrained = fixture();
    let mut calls = sampled_calls(&pretrained);
    // The sampler "saw" every even token 0.5 less likely than the trainer does (weight e^0.5 ≈
    // 1.65, over a cap of 1.5) and every odd token 0.05 more likely (weight e^−0.05).
    let (mut even, mut odd) = (0usize, 0usize);
    for call in &mut calls {
        for (position, logprob) in call.logprobs.iter_mut().enumerate() {
            if position % 2 == 0 {
                *logprob -= 0.5;
                even += 1;
            } else {
                *logprob += 0.05;
                odd += 1;
            }
        }
    }
    let tokens = (even + odd) as f64;
    let cap = 1.5;
    let report = update(&pretrained, &calls, Some(cap));
    let mismatch = report.mismatch[&0];
    let near = |found: f64, expected: f64, what: &str| {
        assert!(
            (found - expected).abs() < 1e-3,
            "{what}: {found} vs {expected}"
        );
    };
    near(
        mismatch.log_ratio_mean(),
        (0.5 * even as f64 - 0.05 * odd as f64) / tokens,
        "mean log-ratio",
    );
    near(mismatch.log_ratio_abs_max, 0.5, "max |log-ratio|");
    near(
        mismatch.fraction_above_threshold(),
        even as f64 / tokens,
        "fraction above 0.1",
    );
    near(
        mismatch.capped_fraction().expect("a cap"),
        even as f64 / tokens,
        "fraction capped",
    );

    // At ratio 1 (old = recomputed), token-mean, no clipping: the policy loss is
    // −Σ w·A / tokens, w the cap on even tokens and e^−0.05 on odd ones.
    let weighted: f64 = calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let advantage = [1.0, -0.5][i % 2];
            (0..call.response.len())
                .map(|position| {
                    let weight = if position % 2 == 0 {
                        cap
                    } else {
                        (-0.05f64).exp()
                    };
                    weight * advantage
                })
                .sum::<f64>()
        })
        .sum();
    near(report.stats.policy_loss, -weighted / tokens, "policy loss");
    near(report.stats.clip_fraction, 0.0, "clip fraction");

    // Without a cap no weight: the plain −Σ A / tokens, the mismatch still measured.
    let uncapped = update(&pretrained, &calls, None);
    assert!(uncapped.mismatch[&0].capped.is_none());
    near(
        uncapped.mismatch[&0].log_ratio_abs_max,
        0.5,
        "max |log-ratio| without a cap",
    );
    let plain: f64 = calls
        .iter()
        .enumerate()
        .map(|(i, call)| [1.0, -0.5][i % 2] * call.response.len() as f64)
        .sum();
    near(
        uncapped.stats.policy_loss,
        -plain / tokens,
        "unweighted loss",
    );
}
