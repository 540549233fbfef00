//! What an orchestra and an environment tell the host about single calls and states, end to end
//! through the fixture plugin on a tiny random model: a role's contract makes calls outside it
//! invalid (and counted); an orchestra's reward for one call reaches the estimator in place of
//! the episode reward; an environment's state key replaces the observation as the state; a
//! multi-step episode records each step, and one that never ends stops after 256 steps; an
//! episode whose environment errs, panics or hangs fails alone, and failures over
//! `max_episode_failure_rate` stop the rollout.

mod common;

use std::path::Path;
use std::time::Duration;

use drmas_host::config::{RunConfig, Schedule};
use drmas_host::engine::{LocalGenerator, SamplingParams};
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use drmas_host::rollout::{self, Crew, Rollout, RolloutLimits, TeamMember};
use drmas_host::trainer::Trainer;
use drmas_sdk::{Actions, DatasetSpec};
use serde_json::Value;
use tch::{Device, Kind};

fn tiny_llama() -> std::path::PathBuf {
    common::repo().join("host/tests/fixtures/hf/llama")
}

/// One iteration of `first` and `second` (a `pair` with `orchestra_params`) on one prompt of
/// four episodes, with `estimator`; returns the calls of `samples.jsonl` and the metrics.
fn train_pair(test: &str, orchestra_params: &str, estimator: &str) -> (Vec<Value>, Vec<Value>) {
    train_pair_with(test, orchestra_params, estimator, "")
}

/// [`train_pair`] with `first_agent` (run-file lines) added to the `first` agent's section.
fn train_pair_with(
    test: &str,
    orchestra_params: &str,
    estimator: &str,
    first_agent: &str,
) -> (Vec<Value>, Vec<Value>) {
    let dir = common::scratch(&format!("{test}-{}", std::process::id()));
    let text = format!(
        r#"
[run]
output_dir = "run"
seed = 11
iterations = 1
save_every = 0

[environment]
name = "parity"
train_data = {{ path = "alpha, beta, gamma" }}

[orchestra]
name = "pair"
params = {{ {orchestra_params} }}

[[agents]]
role = "first"
agent = "Shout Agent"
worker_group = "shared"
max_new_tokens = 4
{first_agent}

[[agents]]
role = "second"
agent = "Shout Agent"
worker_group = "shared"
max_new_tokens = 3

[worker_groups.shared]
model = "{}"
learning_rate = 1e-3

[algorithm]
estimator = "{estimator}"
invalid_action_penalty = 0.1

[rollout]
prompts_per_batch = 1
group_size = 4
max_response_tokens = 8
"#,
        tiny_llama().display()
    );
    let path = dir.join("run.toml");
    std::fs::write(&path, text).expect("write run.toml");
    let (config, file) = RunConfig::load(&path).expect("run file");
    let plan = drmas_host::preflight::prepare(&config, &file, &common::fixture_registry())
        .expect("the run file passes the checks");
    Trainer::new(config, &file, plan)
        .expect("trainer")
        .train()
        .expect("one iteration");
    (
        read_lines(&dir.join("run/samples.jsonl")),
        read_lines(&dir.join("run/metrics.jsonl")),
    )
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The metric `key` of the iteration that trained.
fn metric(metrics: &[Value], key: &str) -> f64 {
    metrics
        .iter()
        .find_map(|line| line[key].as_f64())
        .unwrap_or_else(|| panic!("no {key} in {metrics:?}"))
}

fn role(call: &Value) -> &str {
    call["role"].as_str().expect("role")
}

#[test]
fn an_action_outside_its_roles_contract_is_an_invalid_call_counted_per_agent() {
    let (calls, metrics) = train_pair("contract", r#"second_actions = ["ALPHA", "BETA"]"#, "drmas");
    let second: Vec<&Value> = calls.iter().filter(|c| role(c) == "second").collect();
    assert_eq!(second.len(), 4, "{calls:?}");
    let mut breaks = 0;
    for call in &second {
        // The Shout Agent's action is its text upper-cased, valid without lower-case letters.
        let text = call["text"].as_str().expect("text");
        let in_contract = ["ALPHA", "BETA"].contains(&text.to_uppercase().as_str());
        let well_formed = !text.chars().any(char::is_lowercase);
        breaks += usize::from(!in_contract);
        assert_eq!(call["valid"], in_contract && well_formed, "{call}");
    }
    assert!(breaks > 0, "a random model writes other words: {second:?}");
    assert_eq!(
        metric(&metrics, "contract_break_rate/second"),
        breaks as f64 / 4.0
    );
    assert_eq!(metric(&metrics, "contract_break_rate/first"), 0.0);
    assert!(metric(&metrics, "invalid_rate/second") >= breaks as f64 / 4.0);
}

#[test]
fn an_orchestras_reward_for_one_call_reaches_the_estimator() {
    let (calls, metrics) = train_pair("call-reward", "second_call_reward = 0.75", "sign");
    assert_eq!(calls.len(), 8, "4 episodes × 2 agents: {calls:?}");
    // `sign` gives ±1 by penalised reward against the mean of the prompt group's 8 calls; the
    // `second` calls start from their own reward, 0.75, the `first` ones from the episode's.
    let rewards: Vec<(String, f64)> = calls
        .iter()
        .map(|call| {
            let own = call["call_reward"].as_f64();
            match role(call) {
                "second" => assert_eq!(own, Some(0.75), "{call}"),
                _ => assert_eq!(own, None, "{call}"),
            }
            let reward = own.unwrap_or_else(|| call["reward"].as_f64().expect("reward"));
            let penalty = if call["valid"] == true { 0.0 } else { 0.1 };
            (role(call).to_owned(), reward - penalty)
        })
        .collect();
    let mean = rewards.iter().map(|(_, r)| r).sum::<f64>() / 8.0;
    for agent in ["first", "second"] {
        let own: Vec<f64> = rewards
            .iter()
            .filter(|(r, _)| r == agent)
            .map(|&(_, reward)| {
                if reward > mean {
                    1.0
                } else if reward < mean {
                    -1.0
                } else {
                    0.0
                }
            })
            .collect();
        let expected = own.iter().sum::<f64>() / own.len() as f64;
        let key = format!("advantage/mean/{agent}");
        assert!(
            (metric(&metrics, &key) - expected).abs() < 1e-12,
            "{key}: {} vs {expected} from {rewards:?}",
            metric(&metrics, &key)
        );
    }
}

/// The rollout of the `relay` orchestra (one `speaker` call per step) over tasks `words` of
/// the `parity` environment with `params`, one episode each, under `rounds`, the first failed
/// episode stopping it.
fn relay_rollout(params: &str, words: &str) -> anyhow::Result<Rollout> {
    relay_rollout_with(params, words, Schedule::Rounds, 0.0, None)
}

/// [`relay_rollout`] under `schedule`, `max_failure_rate` and the environment's `call_limit`.
fn relay_rollout_with(
    params: &str,
    words: &str,
    schedule: Schedule,
    max_failure_rate: f64,
    call_limit: Option<Duration>,
) -> anyhow::Result<Rollout> {
    let registry = common::fixture_registry();
    let orchestra = registry.orchestra("relay", "").expect("relay orchestra");
    let mut environment = registry
        .environment("parity", params)
        .expect("parity environment");
    environment.set_limit(call_limit);
    let mut model = Pretrained::load(&tiny_llama(), Device::Cpu, Kind::Float).expect("model");
    let (generator, codec) = LocalGenerator::split(&mut model);
    let team = [TeamMember {
        role: "speaker".into(),
        actions: Actions::Text,
        agent: registry.agent("Shout Agent", "").expect("agent"),
        group: 0,
        adapter: None,
        sampling: SamplingParams::with_temperature(1.0),
        max_new_tokens: 2,
        stop: Vec::new(),
    }];
    let tasks = environment
        .load_tasks(&DatasetSpec {
            path: words.into(),
            ..DatasetSpec::default()
        })
        .expect("tasks");
    let tasks: Vec<_> = tasks.iter().collect();
    rollout::run(
        &Crew {
            orchestra: &orchestra,
            environment: &environment,
            team: &team,
            codecs: &[codec],
            generators: &[&generator],
        },
        &tasks,
        RolloutLimits {
            max_prompt_tokens: 64,
            max_batch: 8,
            schedule,
            batch_wait: Duration::from_millis(10),
            max_failure_rate,
        },
        &mut SeededRng::new(1),
        &mut |_| {},
    )
}

/// Each episode's first state key, for tasks `words` of the `parity` environment with `params`.
fn first_states(params: &str, words: &str) -> Vec<u64> {
    let rollout = relay_rollout(params, words).expect("rollout");
    rollout.episodes.iter().map(|e| e.step_states[0]).collect()
}

#[test]
fn a_multi_step_episode_records_each_steps_reward_and_state() {
    let rollout = relay_rollout("steps = 3", "alpha, beta").expect("rollout");
    assert_eq!(rollout.calls.len(), 6, "one call per step");
    for episode in &rollout.episodes {
        assert_eq!(episode.steps, 3);
        assert_eq!(episode.step_rewards.len(), 3);
        assert_eq!(episode.step_states.len(), 3);
        // Each step starts from another observation ("2 steps left", "1 steps left").
        assert_ne!(episode.step_states[1], episode.step_states[2]);
    }
}

#[test]
fn an_environment_that_never_ends_its_episode_stops_the_rollout_after_256_steps() {
    let error = relay_rollout("steps = 300", "alpha")
        .map(|_| ())
        .expect_err("300 steps are more than an episode may take");
    let message = format!("{error:#}");
    assert!(
        message.contains("the environment took 256 steps in one episode without ending it"),
        "{message}"
    );
}

#[test]
fn a_state_key_from_the_environment_replaces_the_observation_as_the_state() {
    // Without a key the observation (the word) is the state: equal words, equal states.
    let by_observation = first_states("", "alpha, beta, alpha");
    assert_eq!(by_observation[0], by_observation[2]);
    assert_ne!(by_observation[0], by_observation[1]);
    // With one, every episode starts in the keyed state whatever its word.
    let by_key = first_states("start_state = \"start\"", "alpha, beta, alpha");
    assert!(by_key.iter().all(|&state| state == by_key[0]), "{by_key:?}");
    assert_ne!(by_key[0], by_observation[0]);
}

/// The failure of episode `gamma` (task 2 of "alpha, beta, gamma, delta") under each schedule,
/// with `params` making it fail and `call_limit` on the environment's calls; checks the other
/// episodes finished and returns the failure's message.
fn gamma_fails(params: &str, call_limit: Option<Duration>) -> Vec<String> {
    [Schedule::Rounds, Schedule::Async]
        .into_iter()
        .map(|schedule| {
            let rollout = relay_rollout_with(
                &format!("fail_words = [\"gamma\"]\n{params}"),
                "alpha, beta, gamma, delta",
                schedule,
                0.25,
                call_limit,
            )
            .unwrap_or_else(|e| panic!("{schedule:?}: 1 of 4 failing is within 0.25: {e:#}"));
            let failed: Vec<bool> = rollout.episodes.iter().map(|e| e.is_failed()).collect();
            assert_eq!(failed, [false, false, true, false], "{schedule:?}");
            assert_eq!(rollout.failed_episodes(), 1);
            for (episode, outcome) in rollout.episodes.iter().enumerate() {
                if episode != 2 {
                    assert_eq!(outcome.steps, 1, "{schedule:?}: episode {episode} finished");
                    let calls = rollout.calls.iter().filter(|c| c.episode == episode);
                    assert_eq!(calls.count(), 1, "{schedule:?}: episode {episode}");
                }
            }
            let message = rollout.episodes[2].failure.clone().expect("a failure");
            assert!(
                message.starts_with("episode of task `2`: ")
                    && message.contains("environment `parity` of plugin `fixture` ("),
                "{schedule:?}: {message}"
            );
            message
        })
        .collect()
}

#[test]
fn an_episode_whose_environment_errs_panics_or_rewards_nan_fails_alone_under_both_schedules() {
    for message in gamma_fails("fail_in = \"step\"\nfault = \"error\"", None) {
        assert!(message.ends_with("step: asked to fail"), "{message}");
    }
    for message in gamma_fails("fail_in = \"step\"\nfault = \"panic\"", None) {
        assert!(
            message.contains("panicked in step: step: asked to panic"),
            "{message}"
        );
    }
    for message in gamma_fails("fail_in = \"step\"\nfault = \"nanreward\"", None) {
        assert!(
            message.ends_with(
                "libdrmas_fixture_plugin.so) gave step 1 the reward NaN; rewards must be finite"
            ),
            "{message}"
        );
    }
    for message in gamma_fails("fault = \"error\"", None) {
        assert!(
            message.contains("resetting the environment on task `2`")
                && message.ends_with("reset on `gamma`: asked to fail"),
            "{message}"
        );
    }
}

#[test]
fn an_episode_whose_environment_call_times_out_fails_alone_under_both_schedules() {
    let started = std::time::Instant::now();
    for message in gamma_fails(
        "fail_in = \"step\"\nfault = \"hang\"",
        Some(Duration::from_secs(1)),
    ) {
        assert!(
            message.contains("did not return from `step` within 1 s")
                && message.contains("its thread is abandoned"),
            "{message}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn failures_over_the_bound_stop_the_rollout_naming_counts_bound_and_first_failure() {
    let words = "alpha, beta, gamma, delta";
    for schedule in [Schedule::Rounds, Schedule::Async] {
        let error = relay_rollout_with("fail_words = [\"beta\"]", words, schedule, 0.0, None)
            .map(|_| ())
            .expect_err("rate 0: the first failure stops");
        let message = format!("{error:#}");
        assert!(
            message.starts_with(
                "an episode failed, and [rollout] max_episode_failure_rate = 0 stops the run at \
                 the first failure"
            ) && message.contains("episode of task `1`: resetting the environment on task `1`")
                && message.ends_with("reset on `beta`: asked to fail"),
            "{schedule:?}: {message}"
        );

        let error = relay_rollout_with(
            "fail_words = [\"alpha\", \"beta\", \"gamma\"]",
            words,
            schedule,
            0.5,
            None,
        )
        .map(|_| ())
        .expect_err("3 of 4 is over 0.5");
        let message = format!("{error:#}");
        assert!(
            message.starts_with(
                "3 of the rollout's 4 episodes failed, more than [rollout] \
                 max_episode_failure_rate = 0.5 allows; the first failure: episode of task `"
            ) && message.contains("environment `parity` of plugin `fixture` ("),
            "{schedule:?}: {message}"
        );
    }
}

#[test]
fn each_agents_lengths_and_truncated_rate_are_those_of_its_calls() {
    let (calls, metrics) = train_pair("lengths", "", "drmas");
    for (name, max_new_tokens) in [("first", 4), ("second", 3)] {
        let own: Vec<&Value> = calls.iter().filter(|c| role(c) == name).collect();
        assert_eq!(own.len(), 4, "{calls:?}");
        let count = |call: &Value, key: &str| call[key].as_u64().expect(key) as f64;
        let mut cut = 0.0;
        for call in &own {
            let tokens = count(call, "response_tokens");
            match call["finish"].as_str() {
                Some("length") => {
                    assert_eq!(tokens, f64::from(max_new_tokens), "{call}");
                    cut += 1.0;
                }
                Some("eos" | "stop") => assert!(tokens <= f64::from(max_new_tokens), "{call}"),
                other => panic!("finish {other:?} in {call}"),
            }
        }
        assert_eq!(
            metric(&metrics, &format!("truncated_rate/{name}")),
            cut / 4.0
        );
        let longest = own
            .iter()
            .map(|c| count(c, "response_tokens"))
            .fold(0.0, f64::max);
        assert_eq!(
            metric(&metrics, &format!("response_len_max/{name}")),
            longest
        );
        let prompts: f64 = own.iter().map(|c| count(c, "prompt_tokens")).sum();
        assert_eq!(
            metric(&metrics, &format!("prompt_len/{name}")),
            prompts / 4.0
        );
        assert!(prompts > 0.0);
    }
}

#[test]
fn an_agents_stop_strings_end_its_calls_where_they_appear() {
    let (free, _) = train_pair("stop-free", "", "drmas");
    let first = |calls: &[Value]| {
        calls
            .iter()
            .find(|c| role(c) == "first")
            .cloned()
            .expect("a first call")
    };
    let unstopped = first(&free);
    // A piece of the first call's text (of whole characters: a random model writes bytes that
    // are no UTF-8 too) as the stop string: the same sampled tokens, ended where it appears.
    let text = unstopped["text"]
        .as_str()
        .expect("text")
        .split('\u{FFFD}')
        .map(str::trim)
        .find(|piece| !piece.is_empty())
        .unwrap_or_else(|| panic!("a random model writes some text: {unstopped}"))
        .to_owned();
    let stop = format!("stop = [{}]", serde_json::to_string(&text).expect("JSON"));
    let (stopped_calls, metrics) = train_pair_with("stop-set", "", "drmas", &stop);
    let stopped = first(&stopped_calls);
    assert_eq!(stopped["finish"], "stop", "{stopped}");
    assert!(
        stopped["text"].as_str().expect("text").contains(&text),
        "{stopped} against {unstopped}"
    );
    let tokens = |call: &Value| call["response_tokens"].as_u64().expect("tokens");
    assert!(
        tokens(&stopped) <= tokens(&unstopped),
        "{stopped} against {unstopped}"
    );
    // That call was not cut off, so not every `first` call was.
    assert!(metric(&metrics, "truncated_rate/first") < 1.0);
}
