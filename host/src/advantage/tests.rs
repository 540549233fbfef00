//! Hand-computed examples for every estimator, the penalty and the diagnostics; property tests
//! for the invariants the estimators promise; the registry's errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

const EPS: f64 = 1e-6;

/// A call of `agent` in episode `trajectory` of prompt group `uid`, rewarded `reward`.
pub(super) fn call(uid: u32, trajectory: u32, agent: u16, reward: f64) -> Sample {
    Sample {
        uid,
        trajectory,
        agent,
        worker_group: 0,
        reward,
        step: 0,
        step_reward: reward,
        call_reward: None,
        state: 0,
        valid: true,
        padding: false,
    }
}

fn raw(samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(|s| s.reward).collect()
}

fn assert_close(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() < 1e-12,
            "sample {i}: got {a}, expected {e}\n{actual:?}"
        );
    }
}

fn estimator(name: &str) -> Box<dyn Estimator> {
    build(name, &toml::Table::new()).expect("built-in estimator")
}

/// Asserts that the built-in `name` with default params gives `expected` for `samples` with
/// penalised `rewards`.
fn assert_advantages(name: &str, samples: &[Sample], rewards: &[f64], expected: &[f64]) {
    let advantages = estimator(name)
        .advantages(samples, rewards)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_close(&advantages, expected);
}

/// The built-ins with a per-call form.
fn outcome_names() -> impl Iterator<Item = &'static str> {
    // `ppo` and `reinforce_pp` give one advantage per token and refuse the per-call form.
    names().filter(|name| estimator(name).advantages(&[], &[]).is_ok())
}

fn estimator_with(name: &str, params: &str) -> Box<dyn Estimator> {
    build(name, &toml::from_str(params).expect("toml")).expect("valid params")
}

/// Three prompt groups:
/// - uid 0: trajectory 0 (reward 1; agents 0, 1), trajectory 1 (reward 0; agents 0, 1, 0),
///   trajectory 2 (reward 0; agent 0 only) — agent 1 is absent from trajectory 2;
/// - uid 1: trajectories 3 and 4, reward 0.5 each, agent 0 only (σ = 0, agent 1 absent);
/// - uid 2: one trajectory (5), reward 0.7, two calls of agent 0 (a group of one).
fn batch() -> Vec<Sample> {
    vec![
        call(0, 0, 0, 1.0),
        call(0, 0, 1, 1.0),
        call(0, 1, 0, 0.0),
        call(0, 1, 1, 0.0),
        call(0, 1, 0, 0.0),
        call(0, 2, 0, 0.0),
        call(1, 3, 0, 0.5),
        call(1, 4, 0, 0.5),
        call(2, 5, 0, 0.7),
        call(2, 5, 0, 0.7),
    ]
}

#[test]
fn grpo_counts_each_trajectory_once() {
    // uid 0 scores {1, 0, 0}: μ = 1/3, unbiased σ = 1/√3.
    let sigma = 1.0 / 3f64.sqrt();
    let hi = (2.0 / 3.0) / (sigma + EPS);
    let lo = (-1.0 / 3.0) / (sigma + EPS);
    let single = 0.7 / (1.0 + EPS);
    let expected = [hi, hi, lo, lo, lo, lo, 0.0, 0.0, single, single];
    let samples = batch();
    assert_advantages("grpo", &samples, &raw(&samples), &expected);
    assert!(
        (hi - 2.0 / 3f64.sqrt()).abs() < 1e-5,
        "A = 2/√3 ≈ 1.1547 up to ε"
    );
}

#[test]
fn grpo_without_std_only_centres() {
    let expected = [
        2.0 / 3.0,
        2.0 / 3.0,
        -1.0 / 3.0,
        -1.0 / 3.0,
        -1.0 / 3.0,
        -1.0 / 3.0,
    ]
    .into_iter()
    .chain([0.0, 0.0, 0.7, 0.7]);
    let samples = batch();
    let got = estimator_with("grpo", "norm_by_std = false")
        .advantages(&samples, &raw(&samples))
        .unwrap();
    assert_close(&got, &expected.collect::<Vec<_>>());
}

#[test]
fn grpo_step_pools_every_call() {
    // uid 0 calls {1, 1, 0, 0, 0, 0}: μ = 1/3, σ² = (2·4/9 + 4·1/9)/5 = 4/15.
    // uid 2: two equal calls, so σ = 0 and A = 0 (not a group of one any more).
    let sigma = (4.0f64 / 15.0).sqrt();
    let hi = (2.0 / 3.0) / (sigma + EPS);
    let lo = (-1.0 / 3.0) / (sigma + EPS);
    let expected = [hi, hi, lo, lo, lo, lo, 0.0, 0.0, 0.0, 0.0];
    let samples = batch();
    assert_advantages("grpo_step", &samples, &raw(&samples), &expected);
}

#[test]
fn drmas_normalises_each_agent_over_all_its_calls() {
    // uid 0, agent 0 calls {1, 0, 0, 0}: μ = 1/4, σ = 1/2 → A = 1.5 / −0.5 (up to ε).
    // uid 0, agent 1 calls {1, 0}: μ = 1/2, σ = 1/√2 → A = ±(1/2)/(1/√2).
    let a0_hi = 0.75 / (0.5 + EPS);
    let a0_lo = -0.25 / (0.5 + EPS);
    let a1 = 0.5 / (1.0 / 2f64.sqrt() + EPS);
    let expected = [a0_hi, a1, a0_lo, -a1, a0_lo, a0_lo, 0.0, 0.0, 0.0, 0.0];
    let samples = batch();
    assert_advantages("drmas", &samples, &raw(&samples), &expected);
    let centred = [0.75, 0.5, -0.25, -0.5, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0];
    let got = estimator_with("drmas", "norm_by_std = false")
        .advantages(&samples, &raw(&samples))
        .unwrap();
    assert_close(&got, &centred);
}

#[test]
fn drmas_traj_normalises_each_agent_over_its_trajectories() {
    // Agent 0 acted in trajectories {0, 1, 2} of uid 0 → scores {1, 0, 0} (as grpo);
    // agent 1 in {0, 1} → scores {1, 0} (as drmas); uid 2 is one trajectory → r / (1 + ε).
    let sigma0 = 1.0 / 3f64.sqrt();
    let a0_hi = (2.0 / 3.0) / (sigma0 + EPS);
    let a0_lo = (-1.0 / 3.0) / (sigma0 + EPS);
    let a1 = 0.5 / (1.0 / 2f64.sqrt() + EPS);
    let single = 0.7 / (1.0 + EPS);
    let expected = [
        a0_hi, a1, a0_lo, -a1, a0_lo, a0_lo, 0.0, 0.0, single, single,
    ];
    let samples = batch();
    assert_advantages("drmas_traj", &samples, &raw(&samples), &expected);
}

#[test]
fn drmas_traj_handles_agent_indices_past_64() {
    // Agent 70 calls twice in trajectory 0 (reward 1) and once in trajectory 1 (reward 0):
    // scores {1, 0} → ±(1/2)/(1/√2 + ε). Agent 3 acts once, in trajectory 0 → r / (1 + ε).
    let samples = [
        call(0, 0, 70, 1.0),
        call(0, 0, 3, 1.0),
        call(0, 0, 70, 1.0),
        call(0, 1, 70, 0.0),
    ];
    let a = 0.5 / (1.0 / 2f64.sqrt() + EPS);
    let expected = [a, 1.0 / (1.0 + EPS), a, -a];
    assert_advantages("drmas_traj", &samples, &raw(&samples), &expected);
}

#[test]
fn grpo_scores_a_trajectory_by_the_mean_of_its_calls_and_shares_the_advantage() {
    // Trajectory 0's second call was invalid and penalised by 0.5: its score is the mean of
    // {1, 0.5} = 0.75, trajectory 1's is 0 (μ = 0.375, σ = 0.375·√2), and both calls of
    // trajectory 0 get the same advantage (Dr. MAS's GRPO since its "update adv" change).
    let samples = [call(0, 0, 0, 1.0), call(0, 0, 1, 1.0), call(0, 1, 0, 0.0)];
    let rewards = [1.0, 0.5, 0.0];
    let sigma = 0.375 * 2f64.sqrt();
    let a = 0.375 / (sigma + EPS);
    assert_close(
        &estimator("grpo").advantages(&samples, &rewards).unwrap(),
        &[a, a, -a],
    );
    // The same batch never gives the δ/ε advantage of the first-call form when the scores
    // are equal: trajectories {1, 0.5} and {1, 1} → scores 0.75 and 1.
    let samples = [
        call(0, 0, 0, 1.0),
        call(0, 0, 1, 1.0),
        call(0, 1, 0, 1.0),
        call(0, 1, 1, 1.0),
    ];
    let rewards = [1.0, 0.5, 1.0, 1.0];
    let got = estimator("grpo").advantages(&samples, &rewards).unwrap();
    assert!(got.iter().all(|a| a.abs() < 1.0), "{got:?}");
    let old = estimator("grpo_first_call")
        .advantages(&samples, &rewards)
        .unwrap();
    assert!((old[1] + 0.5 / EPS).abs() < 1e-3, "{old:?}");
}

#[test]
fn dr_grpo_centres_the_trajectory_mean_and_needs_its_aggregation() {
    // The batch of the trajectory-mean test: scores {0.75, 0}, μ = 0.375, no σ division.
    let samples = [call(0, 0, 0, 1.0), call(0, 0, 1, 1.0), call(0, 1, 0, 0.0)];
    let rewards = [1.0, 0.5, 0.0];
    let dr_grpo = estimator("dr_grpo");
    assert_close(
        &dr_grpo.advantages(&samples, &rewards).unwrap(),
        &[0.375, 0.375, -0.375],
    );
    assert_eq!(
        dr_grpo.loss_aggregation(),
        Some(crate::config::LossAggregation::SeqMeanTokenSumNorm)
    );
    assert_eq!(estimator("grpo").loss_aggregation(), None);
    let err = build("dr_grpo", &toml::from_str("norm_by_std = true").unwrap()).unwrap_err();
    assert!(err.to_string().contains("never divides"), "{err}");
}

/// A call of a multi-step trajectory: its step, that step's reward and state key.
fn step_call(
    uid: u32,
    trajectory: u32,
    agent: u16,
    reward: f64,
    step: u16,
    step_reward: f64,
    state: u64,
) -> Sample {
    Sample {
        step,
        step_reward,
        state,
        ..call(uid, trajectory, agent, reward)
    }
}

#[test]
fn gigpo_adds_the_anchor_state_advantage_of_discounted_step_returns() {
    // Trajectory 0: state 10 (reward 0) then state 11 (reward 1); trajectory 1: state 10
    // (reward 0) then state 12 (reward 0). γ = 0.5, ω = 1, no σ division.
    // Episode: scores {1, 0} → ±0.5. Step returns: t0 {0.5, 1}, t1 {0, 0}; state 10 holds
    // {0.5, 0} → ±0.25; states 11 and 12 are groups of one → 0.
    let samples = [
        step_call(0, 0, 0, 1.0, 0, 0.0, 10),
        step_call(0, 0, 0, 1.0, 1, 1.0, 11),
        step_call(0, 1, 0, 0.0, 0, 0.0, 10),
        step_call(0, 1, 0, 0.0, 1, 0.0, 12),
    ];
    let gigpo = estimator_with("gigpo", "gamma = 0.5\nnorm_by_std = false");
    assert_close(
        &gigpo.advantages(&samples, &raw(&samples)).unwrap(),
        &[0.75, 0.5, -0.75, -0.5],
    );
    // ω scales the step level only.
    let half = estimator_with(
        "gigpo",
        "gamma = 0.5\nnorm_by_std = false\nstep_advantage_w = 0.5",
    );
    assert_close(
        &half.advantages(&samples, &raw(&samples)).unwrap(),
        &[0.625, 0.5, -0.625, -0.5],
    );
    // A penalty of 0.2 on trajectory 1's first call enters both levels, as the Dr. MAS code
    // takes it off that call's step return too: episode scores {1, −0.1} → ±0.55; state 10
    // holds {0.5, 0 − 0.2} → ±0.35.
    let mut penalised = raw(&samples);
    penalised[2] -= 0.2;
    assert_close(
        &gigpo.advantages(&samples, &penalised).unwrap(),
        &[0.9, 0.55, -0.9, -0.55],
    );
    let err = build("gigpo", &toml::from_str("gamma = 1.5").unwrap()).unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
}

#[test]
fn gigpo_with_similarity_groups_alike_anchor_texts_as_one_state() {
    // The same two trajectories, but every step has its own state key: alike anchor texts
    // must group them. "France"/"Germany" are 0.854 alike (Python's difflib).
    let samples = [
        step_call(0, 0, 0, 1.0, 0, 0.0, 1),
        step_call(0, 0, 0, 1.0, 1, 1.0, 2),
        step_call(0, 1, 0, 0.0, 0, 0.0, 3),
        step_call(0, 1, 0, 0.0, 1, 0.0, 4),
    ];
    let anchors = [
        "Search results: Paris is the capital of France.",
        "Answer it now.",
        "Search results: Berlin is the capital of Germany.",
        "Say it in one word.",
    ];
    let rewards = raw(&samples);
    let lengths = [1; 4];
    let with = |thresh: f64| {
        estimator_with(
            "gigpo",
            &format!("gamma = 0.5\nnorm_by_std = false\nsimilarity_thresh = {thresh}"),
        )
    };
    let input = TokenInput {
        samples: &samples,
        rewards: &rewards,
        lengths: &lengths,
        values: None,
        baselines: None,
        anchors: Some(&anchors),
        kl_penalties: None,
    };
    // At 0.85 the two first steps are one state, as equal keys are without similarity.
    let alike = with(0.85).token_advantages(&input).unwrap();
    assert_close(alike.advantages.values(), &[0.75, 0.5, -0.75, -0.5]);
    assert_eq!(alike.diagnostics, [("step_group_size_mean", 4.0 / 3.0)]);
    // At 0.9 no two steps are alike: every step group holds one call and gets 0.
    let apart = with(0.9).token_advantages(&input).unwrap();
    assert_close(apart.advantages.values(), &[0.5, 0.5, -0.5, -0.5]);
    assert_eq!(apart.diagnostics, [("step_group_size_mean", 1.0)]);
    assert!(with(0.85).uses_anchor_texts());
    assert!(!estimator("gigpo").uses_anchor_texts());
    let error = with(0.85)
        .advantages(&samples, &rewards)
        .expect_err("no anchor texts");
    assert!(error.to_string().contains("anchor texts"), "{error}");
    for bad in ["0.0", "1.0", "1.5"] {
        let err = build(
            "gigpo",
            &toml::from_str(&format!("similarity_thresh = {bad}")).unwrap(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("similarity_thresh must be in (0, 1)"),
            "{err}"
        );
    }
}

#[test]
fn first_call_statistics_normalise_each_calls_own_reward() {
    // grpo_first_call: the group's scores are the first calls' {1, 0} (μ = 1/2, σ = 1/√2), but
    // the penalised call is normalised with its own 0.5.
    let samples = [call(0, 0, 0, 1.0), call(0, 0, 1, 1.0), call(0, 1, 0, 0.0)];
    let rewards = [1.0, 0.5, 0.0];
    let sigma = 1.0 / 2f64.sqrt();
    let expected = [0.5 / (sigma + EPS), 0.0, -0.5 / (sigma + EPS)];
    assert_advantages("grpo_first_call", &samples, &rewards, &expected);
}

#[test]
fn drmas_traj_averages_each_agents_calls_within_a_trajectory() {
    // Agent 0 calls twice in trajectory 0 ({1, 0.5}, mean 0.75) and once in trajectory 1 (0):
    // scores {0.75, 0} shared by the agent's calls; agent 1 acts once per trajectory {1, 0}.
    let samples = [
        call(0, 0, 0, 1.0),
        call(0, 0, 1, 1.0),
        call(0, 0, 0, 1.0),
        call(0, 1, 0, 0.0),
        call(0, 1, 1, 0.0),
    ];
    let rewards = [1.0, 1.0, 0.5, 0.0, 0.0];
    let a0 = 0.375 / (0.375 * 2f64.sqrt() + EPS);
    let a1 = 0.5 / (1.0 / 2f64.sqrt() + EPS);
    assert_close(
        &estimator("drmas_traj")
            .advantages(&samples, &rewards)
            .unwrap(),
        &[a0, a1, a0, -a0, -a1],
    );
}

#[test]
fn rloo_subtracts_the_mean_of_the_other_trajectories() {
    // uid 0 scores {1, 0, 0}, n = 3: A = r·3/2 − (1/3)·3/2 → 1 and −1/2.
    // uid 1: equal rewards → 0. uid 2: one trajectory → A = r.
    let expected = [1.0, 1.0, -0.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.7, 0.7];
    let samples = batch();
    assert_advantages("rloo", &samples, &raw(&samples), &expected);
}

#[test]
fn reinforce_pp_baseline_centres_per_group_then_whitens_the_batch() {
    // x = r − μ_uid: uid 0 → 2/3 (×2), −1/3 (×4); uid 1 → 0 (×2); uid 2 (group of one,
    // baseline 0) → 0.7 (×2). Batch mean 0.14, unbiased variance 0.2352592592...
    let hi = 1.085_831_559_950_273_7;
    let lo = -0.975_873_933_626_195_3;
    let zero = -0.288_638_769_100_705_7;
    let single = 1.154_555_076_402_822_7;
    let expected = [hi, hi, lo, lo, lo, lo, zero, zero, single, single];
    let samples = batch();
    let got = estimator("reinforce_pp_baseline")
        .advantages(&samples, &raw(&samples))
        .unwrap();
    assert_close(&got, &expected);
}

#[test]
fn reinforce_pp_baseline_of_one_call_is_zero() {
    let samples = [call(0, 0, 0, 3.0)];
    assert_close(
        &estimator("reinforce_pp_baseline")
            .advantages(&samples, &[3.0])
            .unwrap(),
        &[0.0],
    );
}

#[test]
fn grpo_passk_rewards_only_the_best_trajectory() {
    // uid 0: best 1, runner-up 0, σ = 1/√3 → the first call of trajectory 0 (the one that
    // scored, as in Dr. MAS) gets 1/(1/√3 + ε). uid 1: a tie → margin 0. uid 2: no runner-up.
    let best = 1.0 / (1.0 / 3f64.sqrt() + EPS);
    let expected = [best, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let samples = batch();
    assert_advantages("grpo_passk", &samples, &raw(&samples), &expected);
    let got = estimator_with("grpo_passk", "norm_by_std = false")
        .advantages(&samples, &raw(&samples))
        .unwrap();
    assert_close(&got, &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn per_agent_outcome_estimators_score_every_call_of_the_agent() {
    // uid 0, agent 0 calls {1, 0, 0, 0} (n = 4, μ = 1/4); agent 1 calls {1, 0} (n = 2, μ = 1/2).
    // uid 1 agent 0 {0.5, 0.5}; uid 2 agent 0 {0.7, 0.7}: two equal scores.
    let samples = batch();
    let rloo = [
        1.0,
        1.0,
        -1.0 / 3.0,
        -1.0,
        -1.0 / 3.0,
        -1.0 / 3.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    assert_advantages("rloo_agent", &samples, &raw(&samples), &rloo);
    // pass@k per agent: agent 0 of uid 0 has best 1 (its first call), runner-up 0, σ = 1/2;
    // agent 1: best 1, runner-up 0, σ = 1/√2; the ties of uids 1 and 2 give 0.
    let expected = [
        1.0 / (0.5 + EPS),
        1.0 / (1.0 / 2f64.sqrt() + EPS),
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ];
    assert_advantages("grpo_passk_agent", &samples, &raw(&samples), &expected);
}

#[test]
fn grpo_passk_margin_is_over_the_runner_up() {
    // Scores {0.2, 0.8, 0.5}: margin 0.3; μ = 0.5, σ² = (0.09 + 0.09 + 0)/2 → σ = 0.3.
    let samples = [call(7, 1, 0, 0.2), call(7, 2, 0, 0.8), call(7, 3, 0, 0.5)];
    let expected = [0.0, 0.3 / (0.3 + EPS), 0.0];
    assert_advantages("grpo_passk", &samples, &raw(&samples), &expected);
}

#[test]
fn padding_gets_zero_and_changes_nothing() {
    let samples = batch();
    let mut padded = samples.clone();
    padded.insert(
        3,
        Sample {
            padding: true,
            reward: 100.0,
            ..samples[0]
        },
    );
    padded.push(Sample {
        padding: true,
        ..samples[8]
    });
    for name in outcome_names() {
        let plain = estimator(name)
            .advantages(&samples, &raw(&samples))
            .unwrap();
        let with = estimator(name).advantages(&padded, &raw(&padded)).unwrap();
        assert_eq!(with[3], 0.0, "{name}");
        assert_eq!(with[11], 0.0, "{name}");
        let kept: Vec<f64> = with
            .iter()
            .enumerate()
            .filter(|(i, _)| ![3, 11].contains(i))
            .map(|(_, a)| *a)
            .collect();
        assert_eq!(kept, plain, "{name}");
    }
}

#[test]
fn empty_batch_gives_no_advantages() {
    for name in outcome_names() {
        assert!(
            estimator(name).advantages(&[], &[]).unwrap().is_empty(),
            "{name}"
        );
    }
}

#[test]
fn outcome_estimators_score_a_call_by_its_reward_less_its_tokens_kl_penalties() {
    let samples = batch();
    let rewards = raw(&samples);
    let lengths: Vec<usize> = (0..samples.len()).map(|i| 1 + i % 3).collect();
    let penalties = PerToken::from_rows(
        lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| vec![0.01 * i as f64 - 0.02; n]),
    );
    let scored: Vec<f64> = rewards
        .iter()
        .zip(penalties.rows())
        .map(|(r, row)| r - row.iter().sum::<f64>())
        .collect();
    let input = |kl_penalties| TokenInput {
        samples: &samples,
        rewards: &rewards,
        lengths: &lengths,
        values: None,
        baselines: None,
        anchors: None,
        kl_penalties,
    };
    // GiGPO's step level reads no KL: checked below.
    for name in outcome_names().filter(|name| !name.starts_with("gigpo")) {
        let estimate = estimator(name)
            .token_advantages(&input(Some(&penalties)))
            .unwrap();
        let expected = estimator(name).advantages(&samples, &scored).unwrap();
        assert_eq!(
            estimate.advantages,
            PerToken::broadcast(&expected, &lengths),
            "{name}"
        );
    }
    // GiGPO: the KL moves the episode level (its advantages with ω = 0) and nothing else.
    for name in ["gigpo", "gigpo_drmas"] {
        let with = estimator(name).token_advantages(&input(Some(&penalties)));
        let without = estimator(name).token_advantages(&input(None));
        let episode = estimator_with(name, "step_advantage_w = 0.0");
        let moved: Vec<f64> = episode
            .advantages(&samples, &scored)
            .unwrap()
            .iter()
            .zip(episode.advantages(&samples, &rewards).unwrap())
            .map(|(a, b)| a - b)
            .collect();
        let found: Vec<f64> = with
            .unwrap()
            .advantages
            .row_means()
            .iter()
            .zip(without.unwrap().advantages.row_means())
            .map(|(a, b)| a - b)
            .collect();
        assert_close(&found, &moved);
    }
}

#[test]
#[should_panic(expected = "one KL penalty per response token")]
fn misaligned_kl_penalties_panic() {
    let samples = batch();
    let rewards = raw(&samples);
    let lengths = vec![2; samples.len()];
    let penalties = PerToken::from_rows(vec![vec![0.0]; samples.len()]);
    let _ = estimator("drmas").token_advantages(&TokenInput {
        samples: &samples,
        rewards: &rewards,
        lengths: &lengths,
        values: None,
        baselines: None,
        anchors: None,
        kl_penalties: Some(&penalties),
    });
}

#[test]
#[should_panic(expected = "one reward per sample")]
fn misaligned_rewards_panic() {
    estimator("drmas").advantages(&batch(), &[1.0]).unwrap();
}

#[test]
fn penalty_subtracts_each_agents_coefficient_from_invalid_calls() {
    let penalty = Penalty::new(vec![0.1, 0.5]);
    let samples = [
        Sample {
            valid: false,
            ..call(0, 0, 0, 1.0)
        },
        Sample {
            valid: false,
            ..call(0, 0, 1, 1.0)
        },
        call(0, 0, 1, 1.0),
    ];
    assert_close(&penalty.apply(&samples), &[0.9, 0.5, 1.0]);
    assert_close(
        &Penalty::uniform(0.25, 2).apply(&samples),
        &[0.75, 0.75, 1.0],
    );
}

#[test]
#[should_panic(expected = "no invalid-action penalty for agent 2")]
fn penalty_without_a_coefficient_for_the_agent_panics() {
    Penalty::uniform(0.1, 2).reward(&call(0, 0, 2, 1.0));
}

#[test]
fn diagnostics_report_the_amplification_factor() {
    // Agent 0: {1, 0} (μ0 = 1/2, σ0² = 1/4); agent 1: {1, 1, 1, 0} (μ1 = 3/4, σ1² = 3/16).
    // All six: μ = 2/3, σ² = 2/9. Amplification: (1/4 + 1/36)/(2/9) = 1.25 and
    // (3/16 + 1/144)/(2/9) = 0.875; weighted by call share they sum to 1.
    let mut samples = vec![
        call(0, 0, 0, 1.0),
        call(0, 0, 1, 1.0),
        call(0, 1, 0, 0.0),
        call(0, 1, 1, 1.0),
        call(1, 2, 1, 1.0),
        call(1, 3, 1, 0.0),
    ];
    samples.push(Sample {
        padding: true,
        reward: 50.0,
        ..call(1, 3, 3, 50.0)
    });
    let d = Diagnostics::compute(&samples, &raw(&samples));
    assert_eq!(d.count, 6);
    assert_close(&[d.mean, d.std], &[2.0 / 3.0, (2.0f64 / 9.0).sqrt()]);
    assert_eq!(d.agents.len(), 2, "padding-only agent 3 is not reported");
    let (a0, a1) = (&d.agents[0], &d.agents[1]);
    assert_eq!((a0.agent, a0.count, a1.agent, a1.count), (0, 2, 1, 4));
    assert_close(
        &[a0.mean, a0.std, a1.mean, a1.std],
        &[0.5, 0.5, 0.75, 0.1875f64.sqrt()],
    );
    let (amp0, amp1) = (a0.amplification.unwrap(), a1.amplification.unwrap());
    assert_close(
        &[amp0, amp1, amp0 * 2.0 / 6.0 + amp1 * 4.0 / 6.0],
        &[1.25, 0.875, 1.0],
    );
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["agents"][1]["amplification"], 0.875);
}

#[test]
fn diagnostics_of_equal_rewards_have_no_amplification() {
    let samples = [call(0, 0, 0, 1.0), call(0, 1, 1, 1.0)];
    let d = Diagnostics::compute(&samples, &raw(&samples));
    assert_eq!(d.std, 0.0);
    assert!(d.agents.iter().all(|a| a.amplification.is_none()));
    assert_eq!(
        serde_json::to_value(&d).unwrap()["agents"][0]["amplification"],
        serde_json::Value::Null
    );
}

#[test]
fn registry_lists_every_builtin_and_builds_it_under_its_name() {
    let all: Vec<&str> = names().collect();
    assert_eq!(
        all,
        [
            "grpo",
            "grpo_step",
            "drmas",
            "drmas_traj",
            "dr_grpo",
            "grpo_first_call",
            "drmas_traj_first_call",
            "rloo",
            "rloo_agent",
            "reinforce_pp_baseline",
            "reinforce_pp_baseline_agent",
            "remax",
            "grpo_passk",
            "grpo_passk_agent",
            "gigpo",
            "gigpo_drmas",
            "reinforce_pp",
            "ppo",
        ]
    );
    for name in all {
        assert_eq!(estimator(name).name(), name);
    }
}

#[test]
fn unknown_name_lists_the_valid_names_and_the_closest() {
    let err = build("dr_mas", &toml::Table::new()).unwrap_err();
    assert_eq!(
        err,
        EstimatorError::Unknown {
            name: "dr_mas".into(),
            suggestion: Some("drmas".into()),
            plugin_names: Vec::new(),
        }
    );
    let text = err.to_string();
    assert!(text.contains("did you mean `drmas`?"), "{text}");
    for name in names() {
        assert!(text.contains(name), "{text}");
    }
    assert!(
        text.contains("no loaded plugin offers an estimator"),
        "{text}"
    );
    let with_plugins = EstimatorError::unknown("sing", &["sign".to_owned()]).to_string();
    assert!(
        with_plugins.contains("did you mean `sign`?")
            && with_plugins.contains("built-in: grpo, ")
            && with_plugins.ends_with("; from plugins: sign"),
        "{with_plugins}"
    );
    let err = build("grop", &toml::Table::new()).unwrap_err();
    assert_eq!(
        err,
        EstimatorError::Unknown {
            name: "grop".into(),
            suggestion: Some("grpo".into()),
            plugin_names: Vec::new(),
        }
    );
    let err = build("xyzzy", &toml::Table::new()).unwrap_err();
    assert_eq!(
        err,
        EstimatorError::Unknown {
            name: "xyzzy".into(),
            suggestion: None,
            plugin_names: Vec::new(),
        }
    );
}

#[test]
fn bad_param_names_the_estimator_and_the_param() {
    for (name, params, needle) in [
        ("drmas", "norm_by_sd = true", "norm_by_sd"),
        ("grpo", "epsilon = \"small\"", "epsilon"),
        ("grpo_passk", "epsilon = -1.0", "epsilon"),
        ("rloo", "epsilon = 1e-6", "epsilon"),
        ("ppo", "lam = 1.5", "lam"),
        ("ppo", "whiten = \"group\"", "whiten"),
        ("reinforce_pp", "gamma = 2.0", "gamma"),
        (
            "reinforce_pp_baseline_agent",
            "norm_by_std = true",
            "norm_by_std",
        ),
    ] {
        let err = build(name, &toml::from_str(params).unwrap()).unwrap_err();
        let EstimatorError::Params {
            estimator,
            ref message,
        } = err
        else {
            panic!("{name}: {err}");
        };
        assert_eq!(estimator, name);
        assert!(message.contains(needle), "{name}: {message}");
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn params_override_the_defaults() {
    let samples = [call(0, 0, 0, 1.0), call(0, 1, 0, 0.0)];
    // σ = 1/√2; ε = 0.5 → A = ±0.5 / (1/√2 + 0.5).
    let got = estimator_with("drmas", "epsilon = 0.5")
        .advantages(&samples, &raw(&samples))
        .unwrap();
    let a = 0.5 / (1.0 / 2f64.sqrt() + 0.5);
    assert_close(&got, &[a, -a]);
}

/// A random batch: prompt groups of trajectories in which each of `agents` agents calls 0–3
/// times (at least one call per trajectory); every call carries its trajectory's reward.
fn batches() -> impl Strategy<Value = Vec<Sample>> {
    let trajectory = (
        proptest::collection::vec(0..=3usize, 1..=4),
        prop_oneof![Just(0.0), Just(0.5), Just(1.0), -2.0..2.0f64],
    );
    let group = proptest::collection::vec(trajectory, 1..=6);
    proptest::collection::vec(group, 1..=4).prop_map(|groups| {
        let mut samples = Vec::new();
        let mut next_trajectory = 0;
        for (uid, group) in groups.into_iter().enumerate() {
            for (calls, reward) in group {
                for (agent, &n) in calls.iter().enumerate() {
                    for _ in 0..n.max(usize::from(agent == 0)) {
                        samples.push(call(uid as u32, next_trajectory, agent as u16, reward));
                    }
                }
                next_trajectory += 1;
            }
        }
        samples
    })
}

/// A random batch in which every one of 1–4 agents calls exactly once per trajectory, each
/// call carrying its trajectory's reward.
fn once_batches() -> impl Strategy<Value = Vec<Sample>> {
    let reward = prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64];
    let groups = proptest::collection::vec(proptest::collection::vec(reward, 1..=6), 1..=4);
    (1..=4u16, groups).prop_map(|(agents, groups)| {
        let mut samples = Vec::new();
        let mut next_trajectory = 0;
        for (uid, rewards) in groups.into_iter().enumerate() {
            for reward in rewards {
                for agent in 0..agents {
                    samples.push(call(uid as u32, next_trajectory, agent, reward));
                }
                next_trajectory += 1;
            }
        }
        samples
    })
}

/// A random batch of multi-step episodes: prompt groups of trajectories of 1–3 steps, each
/// step 1–2 calls of agents 0–2, a step reward from a small set (so groups tie) and a state key
/// from three (so anchor-state groups form across trajectories); the episode reward is the sum
/// of the step rewards.
fn multi_step_batches() -> impl Strategy<Value = Vec<Sample>> {
    let step = (
        proptest::collection::vec(0..3u16, 1..=2),
        prop_oneof![Just(0.0), Just(1.0), -1.0..1.0f64],
        0..3u64,
    );
    let trajectory = proptest::collection::vec(step, 1..=3);
    let group = proptest::collection::vec(trajectory, 1..=5);
    proptest::collection::vec(group, 1..=3).prop_map(|groups| {
        let mut samples = Vec::new();
        let mut next_trajectory = 0;
        for (uid, group) in groups.into_iter().enumerate() {
            for steps in group {
                let reward: f64 = steps.iter().map(|s| s.1).sum();
                for (index, (agents, step_reward, state)) in steps.into_iter().enumerate() {
                    for agent in agents {
                        samples.push(step_call(
                            uid as u32,
                            next_trajectory,
                            agent,
                            reward,
                            index as u16,
                            step_reward,
                            state,
                        ));
                    }
                }
                next_trajectory += 1;
            }
        }
        samples
    })
}

proptest! {
    #[test]
    fn reinforce_pp_equals_the_dr_mas_reference(
        samples in batches().prop_shuffle(),
        lengths in proptest::collection::vec(2..=6usize, 200),
        padding in proptest::collection::vec(any::<bool>(), 200),
        gamma in prop_oneof![Just(1.0), Just(0.9), 0.5..1.0f64],
        kl in proptest::collection::vec(-0.05..0.2f64, 1200),
        kl_in_reward in any::<bool>(),
    ) {
        // Padding samples (never the first, so some real tokens remain) are left out by the
        // reference.
        let samples: Vec<Sample> = samples
            .iter()
            .zip(padding.iter().cycle())
            .enumerate()
            .map(|(i, (s, &pad))| Sample { padding: pad && i > 0, ..*s })
            .collect();
        let lengths = &lengths[..samples.len()];
        let rewards = raw(&samples);
        // Each token's KL penalty (k1 can be negative), and the token-level rewards verl's
        // `apply_kl_penalty` would hand the reference: the score on the last token, less each.
        let mut draws = kl.iter().cycle();
        let penalties = PerToken::from_rows(
            lengths.iter().map(|&n| draws.by_ref().take(n).copied().collect::<Vec<f64>>()),
        );
        let token_rewards: Vec<Vec<f64>> = (0..samples.len())
            .map(|i| {
                let mut row: Vec<f64> = penalties
                    .row(i)
                    .iter()
                    .map(|p| if kl_in_reward { -p } else { 0.0 })
                    .collect();
                *row.last_mut().unwrap() += rewards[i];
                row
            })
            .collect();
        let estimate = estimator_with("reinforce_pp", &format!("gamma = {gamma}"))
            .token_advantages(&TokenInput {
                samples: &samples,
                rewards: &rewards,
                lengths,
                values: None,
                baselines: None,
                anchors: None,
                kl_penalties: kl_in_reward.then_some(&penalties),
            })
            .unwrap();
        let expected = reference::reinforce_plus_plus(&samples, &token_rewards, gamma);
        for (i, row) in expected.iter().enumerate() {
            for (t, e) in row.iter().enumerate() {
                let g = estimate.advantages.row(i)[t];
                prop_assert!((g - e).abs() <= 1e-9 * e.abs().max(1.0), "call {i} token {t}: {g} vs {e}");
            }
        }
    }

    #[test]
    fn gigpo_equals_the_dr_mas_reference(
        samples in multi_step_batches().prop_shuffle(),
        noise in proptest::collection::vec(prop_oneof![Just(0.0), Just(-0.1)], 100),
    ) {
        let rewards: Vec<f64> =
            samples.iter().zip(noise.iter().cycle()).map(|(s, n)| s.reward + n).collect();
        for (name, by_agent) in [("gigpo", false), ("gigpo_drmas", true)] {
            for (params, mean, gamma, norm) in [
                ("", true, 0.95, true),
                ("episode_score = \"first_call\"\ngamma = 0.8", false, 0.8, true),
                ("norm_by_std = false\nstep_advantage_w = 0.3", true, 0.95, false),
            ] {
                let omega = if params.contains("0.3") { 0.3 } else { 1.0 };
                let got = estimator_with(name, params).advantages(&samples, &rewards).unwrap();
                let expected =
                    reference::gigpo(&samples, &rewards, by_agent, mean, omega, gamma, norm, EPS);
                for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                    prop_assert!(
                        (g - e).abs() <= 1e-9 * e.abs().max(1.0),
                        "{name} [{params}] sample {i}: {g} vs {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn drmas_groups_have_mean_zero_and_unit_std(
        samples in batches().prop_shuffle(),
        noise in proptest::collection::vec(-0.3..0.3f64, 200),
    ) {
        // Per-call rewards differ (penalties, noise), as in a real batch.
        let rewards: Vec<f64> =
            samples.iter().zip(noise.iter().cycle()).map(|(s, n)| s.reward + n).collect();
        let advantages = estimator("drmas").advantages(&samples, &rewards).unwrap();
        let mut groups = std::collections::BTreeMap::<(u32, u16), Vec<(f64, f64)>>::new();
        for ((s, &r), &a) in samples.iter().zip(&rewards).zip(&advantages) {
            groups.entry((s.uid, s.agent)).or_default().push((r, a));
        }
        for pairs in groups.values().filter(|pairs| pairs.len() > 1) {
            let n = pairs.len() as f64;
            let unbiased_std = |xs: &mut dyn Iterator<Item = f64>| {
                let xs: Vec<f64> = xs.collect();
                let mean = xs.iter().sum::<f64>() / n;
                (mean, (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt())
            };
            let (_, sigma) = unbiased_std(&mut pairs.iter().map(|p| p.0));
            if sigma < 1e-9 {
                continue;
            }
            let (mean, std) = unbiased_std(&mut pairs.iter().map(|p| p.1));
            prop_assert!(mean.abs() < 1e-9, "mean {mean}");
            // The std is σ/(σ + ε), so it falls short of 1 by at most ε/σ.
            prop_assert!((std - 1.0).abs() <= EPS / sigma + 1e-9, "std {std}, σ {sigma}");
        }
    }

    #[test]
    fn estimators_agree_when_every_agent_acts_once(samples in once_batches().prop_shuffle()) {
        // The same scores summed in another order: equal up to rounding.
        let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        let rewards = raw(&samples);
        let grpo = estimator("grpo").advantages(&samples, &rewards).unwrap();
        for name in ["drmas", "drmas_traj"] {
            let other = estimator(name).advantages(&samples, &rewards).unwrap();
            prop_assert!(same(&other, &grpo), "{name}: {other:?} vs grpo {grpo:?}");
        }
        // grpo_step counts every call: it matches only when a trajectory is a single call.
        let step = estimator("grpo_step").advantages(&samples, &rewards).unwrap();
        if samples.iter().all(|s| s.agent == 0) {
            prop_assert!(same(&step, &grpo), "grpo_step: {step:?} vs grpo {grpo:?}");
        }
    }

    #[test]
    fn estimators_equal_the_dr_mas_reference(
        samples in batches().prop_shuffle(),
        noise in proptest::collection::vec(prop_oneof![Just(0.0), Just(-0.1), -0.3..0.3f64], 200),
        padding in proptest::collection::vec(any::<bool>(), 200),
    ) {
        // Penalties and noise make a trajectory's calls differ, as in a real batch; some calls
        // are padding, which the reference leaves out.
        let samples: Vec<Sample> = samples
            .iter()
            .zip(padding.iter().cycle())
            .map(|(s, &pad)| Sample { padding: pad && s.trajectory % 3 == 0, ..*s })
            .collect();
        let rewards: Vec<f64> =
            samples.iter().zip(noise.iter().cycle()).map(|(s, n)| s.reward + n).collect();
        let close = |name: &str, expected: Vec<f64>| -> Result<(), TestCaseError> {
            let got = estimator(name).advantages(&samples, &rewards).unwrap();
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                // Relative: a σ near 0 makes advantages up to 1/ε.
                prop_assert!((g - e).abs() <= 1e-9 * e.abs().max(1.0), "{name} sample {i}: {g} vs {e}");
            }
            Ok(())
        };
        close("grpo", reference::grpo(&samples, &rewards, false, false, true, EPS))?;
        close("drmas", reference::grpo(&samples, &rewards, true, false, true, EPS))?;
        close("drmas_traj", reference::grpo(&samples, &rewards, false, true, true, EPS))?;
        close("grpo_first_call", reference::first_call_normalised(&samples, &rewards, false, EPS))?;
        close("drmas_traj_first_call", reference::first_call_normalised(&samples, &rewards, true, EPS))?;
        close("rloo", reference::rloo(&samples, &rewards, false))?;
        close("rloo_agent", reference::rloo(&samples, &rewards, true))?;
        close("reinforce_pp_baseline", reference::reinforce_pp_baseline(&samples, &rewards, false))?;
        close("reinforce_pp_baseline_agent", reference::reinforce_pp_baseline(&samples, &rewards, true))?;
        close("grpo_passk", reference::grpo_passk(&samples, &rewards, false, true, EPS))?;
        close("grpo_passk_agent", reference::grpo_passk(&samples, &rewards, true, true, EPS))?;
        close("dr_grpo", reference::grpo(&samples, &rewards, false, false, false, EPS))?;
        let got = estimator_with("grpo", "norm_by_std = false").advantages(&samples, &rewards).unwrap();
        let expected = reference::grpo(&samples, &rewards, false, false, false, EPS);
        prop_assert!(got.iter().zip(&expected).all(|(g, e)| (g - e).abs() < 1e-9));
    }

    #[test]
    fn padding_copies_change_no_advantage(
        samples in batches().prop_shuffle(),
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), -5.0..5.0f64), 1..10),
    ) {
        let mut padded: Vec<(Option<usize>, Sample)> = samples.iter().copied().enumerate().map(|(i, s)| (Some(i), s)).collect();
        for (source, at, reward) in picks {
            let copy = Sample { padding: true, reward, ..samples[source.index(samples.len())] };
            padded.insert(at.index(padded.len() + 1), (None, copy));
        }
        let padded_samples: Vec<Sample> = padded.iter().map(|(_, s)| *s).collect();
        for name in outcome_names() {
            let plain = estimator(name).advantages(&samples, &raw(&samples)).unwrap();
            let with = estimator(name).advantages(&padded_samples, &raw(&padded_samples)).unwrap();
            for ((origin, _), a) in padded.iter().zip(&with) {
                match origin {
                    Some(i) => prop_assert_eq!(*a, plain[*i], "{}", name),
                    None => prop_assert_eq!(*a, 0.0, "{}", name),
                }
            }
        }
    }
}
