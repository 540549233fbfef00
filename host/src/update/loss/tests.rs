use super::*;
use crate::config::{KlType, LossAggregation, PolicyLoss};
use crate::update::BatchTotals;

fn t(rows: &[&[f32]]) -> Tensor {
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_slice(&flat).view([rows.len() as i64, rows[0].len() as i64])
}

fn loss(aggregation: LossAggregation) -> LossSection {
    LossSection {
        clip_low: 0.2,
        clip_high: 0.28,
        dual_clip: 3.0,
        aggregation,
        entropy_coef: 0.0,
        kl_coef: 0.0,
        kl_type: KlType::LowVarKl,
        ..LossSection::default()
    }
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-6, "{a} vs {b}");
}

/// Two samples: 3 response tokens and 1 (then padding).
fn mask() -> Tensor {
    t(&[&[1.0, 1.0, 1.0], &[1.0, 0.0, 0.0]])
}

/// The inputs of one micro-batch that is the whole step, with no entropy, reference or TIS
/// weights (struct update syntax adds them).
fn inputs<'a>(
    logprobs: &'a Tensor,
    old_logprobs: &'a Tensor,
    advantages: &'a Tensor,
    mask: &'a Tensor,
) -> LossInputs<'a> {
    LossInputs {
        logprobs,
        old_logprobs,
        advantages,
        mask,
        entropy: None,
        ref_logprobs: None,
        tis_weights: None,
        totals: BatchTotals::of_mask(mask),
    }
}

#[test]
fn at_ratio_one_the_loss_is_minus_the_mean_advantage_under_each_aggregation() {
    let logprobs = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let advantages = Tensor::from_slice(&[2.0f32, -1.0]);
    let mask = mask();
    let inputs = inputs(&logprobs, &logprobs, &advantages, &mask);
    // token-mean: tokens weigh equally: −(3·2 + 1·(−1)) / 4.
    let (value, stats) = policy_loss(&loss(LossAggregation::TokenMean), &inputs);
    close(value.double_value(&[]), -(3.0 * 2.0 - 1.0) / 4.0);
    close(stats.clip_fraction, 0.0);
    // seq-mean-token-sum: mean over samples of −A·tokens.
    let (value, _) = policy_loss(&loss(LossAggregation::SeqMeanTokenSum), &inputs);
    close(value.double_value(&[]), -(2.0 * 3.0 - 1.0) / 2.0);
    // seq-mean-token-mean: mean over samples of −A.
    let (value, _) = policy_loss(&loss(LossAggregation::SeqMeanTokenMean), &inputs);
    close(value.double_value(&[]), -(2.0 - 1.0) / 2.0);
    // seq-mean-token-sum-norm: Σ −A·tokens / (samples × C), C = 8 here.
    let mut norm = loss(LossAggregation::SeqMeanTokenSumNorm);
    norm.loss_scale_factor = Some(8.0);
    let (value, _) = policy_loss(&norm, &inputs);
    close(value.double_value(&[]), -(2.0 * 3.0 - 1.0) / (2.0 * 8.0));
    // Without a constant: the padded response length (3), as verl.
    norm.loss_scale_factor = None;
    let (value, _) = policy_loss(&norm, &inputs);
    close(value.double_value(&[]), -(2.0 * 3.0 - 1.0) / (2.0 * 3.0));
}

#[test]
fn micro_batch_shares_add_up_to_the_whole_batch_under_each_aggregation() {
    // The two samples as two micro-batches of one, each divided by the whole batch's totals:
    // their losses and stats add up to the batch's.
    let logprobs = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let old = t(&[&[-1.3, -1.7, -0.5], &[-0.6, -9.0, -9.0]]);
    let advantages = Tensor::from_slice(&[2.0f32, -1.0]);
    let whole_mask = mask();
    let totals = BatchTotals::of_mask(&whole_mask);
    for mode in [
        LossAggregation::TokenMean,
        LossAggregation::SeqMeanTokenSum,
        LossAggregation::SeqMeanTokenMean,
        LossAggregation::SeqMeanTokenSumNorm,
    ] {
        let mut settings = loss(mode);
        settings.loss_scale_factor = Some(5.0);
        let run = |rows: std::ops::Range<i64>| {
            let (logprobs, old, mask) = (
                logprobs.narrow(0, rows.start, rows.end - rows.start),
                old.narrow(0, rows.start, rows.end - rows.start),
                whole_mask.narrow(0, rows.start, rows.end - rows.start),
            );
            let advantages = advantages.narrow(0, rows.start, rows.end - rows.start);
            let (value, stats) = policy_loss(
                &settings,
                &LossInputs {
                    totals,
                    ..inputs(&logprobs, &old, &advantages, &mask)
                },
            );
            (value.double_value(&[]), stats)
        };
        let (whole, whole_stats) = run(0..2);
        let (first, first_stats) = run(0..1);
        let (second, second_stats) = run(1..2);
        close(first + second, whole);
        close(
            first_stats.clip_fraction + second_stats.clip_fraction,
            whole_stats.clip_fraction,
        );
        assert!(
            whole_stats.clip_fraction > 0.0,
            "{mode:?}: a ratio is clipped"
        );
    }
}

/// One token per sample with the given ratio and advantage; returns (loss, gradient wrt logp,
/// stats).
fn single(ratio: f64, advantage: f32) -> (f64, f64, LossStats) {
    single_under(&loss(LossAggregation::TokenMean), ratio, advantage)
}

/// [`single`] under `settings`, the old log-probability −1.
fn single_under(settings: &LossSection, ratio: f64, advantage: f32) -> (f64, f64, LossStats) {
    let old = Tensor::from_slice(&[-1.0f32]).view([1, 1]);
    let logprobs = (&old + ratio.ln()).set_requires_grad(true);
    let advantages = Tensor::from_slice(&[advantage]);
    let mask = Tensor::ones([1, 1], (Kind::Float, tch::Device::Cpu));
    let inputs = inputs(&logprobs, &old, &advantages, &mask);
    let (value, stats) = policy_loss(settings, &inputs);
    value.backward();
    (
        value.double_value(&[]),
        logprobs.grad().double_value(&[0, 0]),
        stats,
    )
}

#[test]
fn the_clipping_branches_on_crafted_ratios() {
    // Positive advantage inside the range: −A·r, gradient −A·r.
    let (value, grad, stats) = single(1.1, 2.0);
    close(value, -2.2);
    close(grad, -2.2);
    close(stats.clip_fraction, 0.0);

    // Positive advantage above 1 + clip_high: −A·1.28, no gradient.
    let (value, grad, stats) = single(1.5, 2.0);
    close(value, -2.0 * 1.28);
    close(grad, 0.0);
    close(stats.clip_fraction, 1.0);

    // Negative advantage below 1 − clip_low: the clipped −A·0.8 is larger, no gradient.
    let (value, grad, stats) = single(0.5, -1.0);
    close(value, 0.8);
    close(grad, 0.0);
    close(stats.clip_fraction, 1.0);

    // Negative advantage, ratio 5: the loss would be 5·|A|; the dual clip bounds it at 3·|A|.
    let (value, grad, stats) = single(5.0, -1.0);
    close(value, 3.0);
    close(grad, 0.0);
    close(stats.dual_clip_fraction, 1.0);

    // Negative advantage, ratio 2 (< c): unclipped −A·r, gradient −A·r.
    let (value, grad, stats) = single(2.0, -1.0);
    close(value, 2.0);
    close(grad, 2.0);
    close(stats.dual_clip_fraction, 0.0);
}

#[test]
fn entropy_and_kl_terms_enter_with_their_coefficients() {
    let logprobs = t(&[&[-1.0, -2.0]]);
    let reference = t(&[&[-1.5, -2.0]]);
    let entropy = t(&[&[0.4, 0.6]]);
    let advantages = Tensor::from_slice(&[0.0f32]);
    let mask = t(&[&[1.0, 1.0]]);
    let inputs = LossInputs {
        entropy: Some(&entropy),
        ref_logprobs: Some(&reference),
        ..inputs(&logprobs, &logprobs, &advantages, &mask)
    };
    let mut config = loss(LossAggregation::TokenMean);
    config.entropy_coef = 0.1;
    config.kl_coef = 0.5;
    config.kl_type = KlType::K1;
    let (value, stats) = policy_loss(&config, &inputs);
    close(stats.entropy, 0.5);
    close(stats.kl, 0.25); // mean of (−1 − −1.5, 0)
    close(value.double_value(&[]), -0.1 * 0.5 + 0.5 * 0.25);
}

#[test]
fn kl_estimators_match_their_formulas() {
    let logprobs = Tensor::from_slice(&[-1.0f32]);
    let reference = Tensor::from_slice(&[-1.5f32]);
    close(
        kl_penalty(&logprobs, &reference, KlType::K1).double_value(&[0]),
        0.5,
    );
    close(
        kl_penalty(&logprobs, &reference, KlType::K2).double_value(&[0]),
        0.125,
    );
    let k3 = (-0.5f64).exp() + 0.5 - 1.0;
    close(
        kl_penalty(&logprobs, &reference, KlType::LowVarKl).double_value(&[0]),
        k3,
    );
    close(
        kl_penalty(&reference, &logprobs, KlType::Abs).double_value(&[0]),
        0.5,
    );
}

#[test]
fn gradients_of_a_tiny_policy_match_finite_differences() {
    // A tiny "model": logits = x · Wᵀ over a vocabulary of 4, two samples of 3 tokens, in f64.
    let opts = (Kind::Double, tch::Device::Cpu);
    let x = Tensor::from_slice(&[
        0.3, -1.2, 0.8, 1.5, 0.1, -0.4, -0.7, 0.9, 0.2, 0.5, -0.3, 1.1, 0.6, 0.4, -0.9, -1.0, 0.2,
        0.3,
    ])
    .view([2, 3, 3]);
    let tokens = Tensor::from_slice(&[0i64, 3, 1, 2, 2, 0]).view([2, 3, 1]);
    let w0 = Tensor::from_slice(&[
        0.2, -0.1, 0.4, 0.0, 0.3, -0.5, -0.2, 0.1, 0.6, 0.5, -0.3, 0.1,
    ])
    .view([4, 3]);
    let logprobs_of = |w: &Tensor| {
        x.matmul(&w.tr())
            .log_softmax(-1, Kind::Double)
            .gather(2, &tokens, false)
            .squeeze_dim(2)
    };
    // Old log-probabilities chosen so that some tokens are clipped and one is dual-clipped.
    let old = logprobs_of(&w0).detach()
        + Tensor::from_slice(&[0.0, 0.5, -0.1, -1.8, 0.05, 0.3]).view([2, 3]);
    let advantages = Tensor::from_slice(&[1.3, -0.7]);
    let mask = Tensor::from_slice(&[1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
        .view([2, 3])
        .to_kind(Kind::Double);
    let config = loss(LossAggregation::SeqMeanTokenMean);
    let value = |w: &Tensor| {
        let logprobs = logprobs_of(w);
        let entropy = Tensor::zeros([2, 3], opts);
        let inputs = LossInputs {
            entropy: Some(&entropy),
            ..inputs(&logprobs, &old, &advantages, &mask)
        };
        policy_loss(&config, &inputs).0
    };

    let w = w0.copy().set_requires_grad(true);
    value(&w).backward();
    let analytic = Vec::<f64>::try_from(w.grad().view([-1])).expect("grad");
    let eps = 1e-6;
    for (i, analytic) in analytic.iter().enumerate() {
        let bump = |sign: f64| {
            let w = w0.copy();
            let flat = w.view([-1]);
            let _ = flat
                .get(i as i64)
                .fill_(w0.view([-1]).double_value(&[i as i64]) + sign * eps);
            value(&w).double_value(&[])
        };
        let numeric = (bump(1.0) - bump(-1.0)) / (2.0 * eps);
        assert!(
            (numeric - analytic).abs() < 1e-6,
            "weight {i}: numeric {numeric} vs autograd {analytic}"
        );
    }
}

#[test]
fn per_token_advantages_equal_to_the_calls_give_the_per_call_loss_bit_for_bit() {
    let logprobs = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let old = t(&[&[-1.4, -1.5, -0.5], &[0.1, -9.0, -9.0]]);
    let per_call = Tensor::from_slice(&[2.0f32, -1.0]);
    let per_token = per_call.unsqueeze(1).expand([2, 3], false).contiguous();
    let mut settings = loss(LossAggregation::TokenMean);
    settings.entropy_coef = 0.01;
    let run = |advantages: &Tensor| {
        let entropy = t(&[&[0.3, 0.2, 0.1], &[0.5, 0.0, 0.0]]);
        policy_loss(
            &settings,
            &LossInputs {
                entropy: Some(&entropy),
                ..inputs(&logprobs, &old, advantages, &mask())
            },
        )
    };
    let (call_loss, call_stats) = run(&per_call);
    let (token_loss, token_stats) = run(&per_token);
    assert_eq!(call_loss.double_value(&[]), token_loss.double_value(&[]));
    assert_eq!(call_stats, token_stats);
    assert!(call_stats.clip_fraction > 0.0, "the case clips some tokens");
}

#[test]
fn each_token_is_weighted_by_its_own_advantage() {
    // At ratio 1 under token-mean the loss is minus the mean advantage over the real tokens.
    let logprobs = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let advantages = t(&[&[1.0, -3.0, 0.5], &[4.0, 100.0, 100.0]]);
    let (value, _) = policy_loss(
        &loss(LossAggregation::TokenMean),
        &inputs(&logprobs, &logprobs, &advantages, &mask()),
    );
    // Padding's 100s never enter.
    close(value.double_value(&[]), -(1.0 - 3.0 + 0.5 + 4.0) / 4.0);
}

#[test]
fn tis_weights_multiply_each_tokens_policy_loss_and_its_gradient() {
    let logprobs = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]).set_requires_grad(true);
    let old = logprobs.detach();
    let advantages = Tensor::from_slice(&[2.0f32, -1.0]);
    let weights = t(&[&[1.5, 0.5, 1.0], &[2.0, 7.0, 7.0]]);
    let mask = mask();
    let inputs = LossInputs {
        tis_weights: Some(&weights),
        ..inputs(&logprobs, &old, &advantages, &mask)
    };
    // token-mean at ratio 1: −Σ w·A / 4 over the real tokens (padding's weight 7 ignored).
    let (value, stats) = policy_loss(&loss(LossAggregation::TokenMean), &inputs);
    let expected = -(2.0 * (1.5 + 0.5 + 1.0) - 2.0) / 4.0;
    close(value.double_value(&[]), expected);
    close(stats.policy_loss, expected);
    value.backward();
    // d/dlogp of −w·A·exp(logp − old) at ratio 1 is −w·A / 4.
    close(logprobs.grad().double_value(&[0, 0]), -1.5 * 2.0 / 4.0);
    close(logprobs.grad().double_value(&[1, 0]), 2.0 * 1.0 / 4.0);
    close(logprobs.grad().double_value(&[1, 1]), 0.0);
}

/// GSPO's loss and gradient written out for two responses: `s = exp(mean log-ratio)` per
/// response, loss `mean over responses of max(−A·s, −A·clip(s))`, and each token's
/// log-probability gradient `−A·s / (N·|y|)` where the response's ratio is not clipped, 0
/// where it is.
#[test]
fn gspo_clips_each_responses_geometric_mean_ratio_and_spreads_its_gradient_over_its_tokens() {
    let old = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    // Response 0: log-ratios 0.1, −0.05, 0.01 (mean 0.02, inside the clip range); response 1:
    // log-ratio 0.5 on its one token (s = e^0.5, above 1 + clip_high).
    let shift = t(&[&[0.1, -0.05, 0.01], &[0.5, 7.0, -3.0]]);
    let logprobs = (&old + &shift).set_requires_grad(true);
    let advantages = Tensor::from_slice(&[2.0f32, 1.5]);
    let mask = mask();
    let mut settings = loss(LossAggregation::SeqMeanTokenMean);
    settings.policy_loss = PolicyLoss::Gspo;
    let (value, stats) = policy_loss(&settings, &inputs(&logprobs, &old, &advantages, &mask));

    let s0 = (0.02f64).exp();
    let s1 = (0.5f64).exp();
    let clipped1 = 1.28f64;
    close(value.double_value(&[]), (-2.0 * s0 - 1.5 * clipped1) / 2.0);
    // The one token of the clipped response, of four.
    close(stats.clip_fraction, 0.25);
    assert!(s1 > clipped1);

    value.backward();
    let gradient = logprobs.grad();
    let expected = [-2.0 * s0 / (2.0 * 3.0); 3];
    for (token, want) in expected.iter().enumerate() {
        close(gradient.double_value(&[0, token as i64]), *want);
    }
    for token in 0..3 {
        close(gradient.double_value(&[1, token]), 0.0);
    }
}

#[test]
fn gspo_at_ratio_one_is_ppo_and_differs_from_it_off_policy() {
    let old = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let advantages = Tensor::from_slice(&[2.0f32, -1.0]);
    let mask = mask();
    let mut gspo = loss(LossAggregation::SeqMeanTokenMean);
    gspo.policy_loss = PolicyLoss::Gspo;
    let ppo = loss(LossAggregation::SeqMeanTokenMean);
    let on_policy = inputs(&old, &old, &advantages, &mask);
    close(
        policy_loss(&gspo, &on_policy).0.double_value(&[]),
        policy_loss(&ppo, &on_policy).0.double_value(&[]),
    );
    // Token log-ratios of ±0.1 that cancel: GSPO's response ratio is 1, PPO's tokens are not.
    let logprobs = &old + t(&[&[0.1, -0.1, 0.0], &[0.0, 0.0, 0.0]]);
    let off_policy = inputs(&logprobs, &old, &advantages, &mask);
    close(
        policy_loss(&gspo, &off_policy).0.double_value(&[]),
        -(2.0 - 1.0) / 2.0,
    );
    let ppo_value = policy_loss(&ppo, &off_policy).0.double_value(&[]);
    let ppo_expected = (-2.0 * ((0.1f64).exp() + (-0.1f64).exp() + 1.0) / 3.0 + 1.0) / 2.0;
    close(ppo_value, ppo_expected);
}

/// CISPO: value −ŵ·A·log π and gradient −ŵ·A per token, ŵ the ratio clipped to [0.8, 1.28]:
/// where PPO's clip leaves a token no gradient, CISPO keeps it at the clipped weight, and the
/// dual clip plays no part.
#[test]
fn cispo_weights_every_tokens_gradient_by_its_clipped_ratio() {
    let mut cispo = loss(LossAggregation::TokenMean);
    cispo.policy_loss = PolicyLoss::Cispo;
    for (ratio, advantage, weight, clipped) in [
        (1.1, 2.0, 1.1, 0.0),
        (1.5, 2.0, 1.28, 1.0),
        (0.5, -1.0, 0.8, 1.0),
        (5.0, -1.0, 1.28, 1.0),
    ] {
        let (value, grad, stats) = single_under(&cispo, ratio, advantage);
        let logprob = -1.0 + ratio.ln();
        close(value, -weight * f64::from(advantage) * logprob);
        close(grad, -weight * f64::from(advantage));
        close(stats.clip_fraction, clipped);
        close(stats.dual_clip_fraction, 0.0);
        // PPO's clip (or, at ratio 5, its dual clip) leaves these tokens no gradient.
        let (_, ppo_grad, _) = single(ratio, advantage);
        if clipped == 1.0 {
            close(ppo_grad, 0.0);
        }
    }
}

#[test]
fn cispo_on_policy_has_ppos_gradient() {
    let old = t(&[&[-1.0, -2.0, -0.5], &[-0.3, -9.0, -9.0]]);
    let advantages = Tensor::from_slice(&[2.0f32, -1.0]);
    let mask = mask();
    let gradient = |policy_loss_kind: PolicyLoss| {
        let logprobs = old.copy().set_requires_grad(true);
        let mut settings = loss(LossAggregation::TokenMean);
        settings.policy_loss = policy_loss_kind;
        let (value, _) = policy_loss(&settings, &inputs(&logprobs, &old, &advantages, &mask));
        value.backward();
        logprobs.grad()
    };
    let (cispo, ppo) = (gradient(PolicyLoss::Cispo), gradient(PolicyLoss::Ppo));
    let difference = (&cispo - &ppo).abs().max().double_value(&[]);
    assert!(difference < 1e-7, "{cispo} vs {ppo}");
    close(cispo.double_value(&[0, 0]), -2.0 / 4.0);
}
