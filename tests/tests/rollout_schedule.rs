//! The two rollout schedules on tiny random models through the fixture plugin, with a `pair`
//! orchestra whose two agents sit on two worker groups and an environment whose resets of some
//! tasks are slow: under `rounds` the first generation waits for the slowest reset; under
//! `async` both groups generate for the other episodes meanwhile. Both run every episode to the
//! end with one call per agent turn, in order. Under `async` a group sends the calls that become
//! ready while one of its batches runs without waiting for it, in process and to a server.

mod common;

use std::time::Duration;

use drmas_host::config::Schedule;
use drmas_host::engine::remote::{Protocol, RemoteGenerator, RemoteSettings, WeightLoading};
use drmas_host::engine::{Generator, LocalGenerator, SamplingParams};
use drmas_host::model::chat_codec::ChatCodec;
use drmas_host::model::pretrained::Pretrained;
use drmas_host::rng::SeededRng;
use drmas_host::rollout::{self, Crew, Rollout, RolloutLimits, TeamMember};
use drmas_host::serve::{ServeOptions, Server};
use drmas_sdk::DatasetSpec;
use tch::{Device, Kind};

/// How long the environment takes to reset a task starting with `s`.
const SLOW_RESET_S: f64 = 3.0;

fn rollout(schedule: Schedule) -> Rollout {
    let registry = common::fixture_registry();
    let orchestra = registry.orchestra("pair", "").expect("pair orchestra");
    let environment = registry
        .environment(
            "slow-parity",
            format!("sleep_ms = {}", SLOW_RESET_S * 1000.0),
        )
        .expect("slow-parity environment");
    let model = |family: &str| {
        let path = common::repo().join("host/tests/fixtures/hf").join(family);
        Pretrained::load(&path, Device::Cpu, Kind::Float).expect("tiny model loads")
    };
    let (mut llama, mut qwen2) = (model("llama"), model("qwen2"));
    let (llama_generator, llama_codec) = LocalGenerator::split(&mut llama);
    let (qwen2_generator, qwen2_codec) = LocalGenerator::split(&mut qwen2);
    let member = |role: &str, group| TeamMember {
        role: role.to_owned(),
        actions: drmas_sdk::Actions::Text,
        agent: registry.agent("Shout Agent", "").expect("agent"),
        group,
        adapter: None,
        sampling: SamplingParams::with_temperature(1.0),
        max_new_tokens: 4,
        stop: Vec::new(),
    };
    let team = [member("first", 0), member("second", 1)];
    let tasks = environment
        .load_tasks(&DatasetSpec {
            path: "sloth, alpha, beta, gamma, delta".into(),
            split: String::new(),
            limit: None,
            base_dir: String::new(),
        })
        .expect("tasks");
    let tasks: Vec<_> = tasks.iter().collect();
    let mut finished = Vec::new();
    let rollout = rollout::run(
        &Crew {
            orchestra: &orchestra,
            environment: &environment,
            team: &team,
            codecs: &[llama_codec, qwen2_codec],
            generators: &[&llama_generator, &qwen2_generator],
        },
        &tasks,
        RolloutLimits {
            max_prompt_tokens: 64,
            max_batch: 64,
            schedule,
            batch_wait: Duration::from_millis(50),
            max_failure_rate: 0.0,
        },
        &mut SeededRng::new(3),
        &mut |done| finished.push(done),
    )
    .expect("the rollout runs");
    assert_eq!(
        finished.last(),
        Some(&tasks.len()),
        "{schedule:?}: {finished:?}"
    );
    // Every episode: one call of `first` (group 0), then one of `second` (group 1).
    assert_eq!(rollout.episodes.len(), tasks.len());
    assert_eq!(rollout.calls.len(), 2 * tasks.len(), "{schedule:?}");
    for episode in 0..tasks.len() {
        let agents: Vec<usize> = rollout
            .calls
            .iter()
            .filter(|c| c.episode == episode)
            .map(|c| c.agent)
            .collect();
        assert_eq!(agents, [0, 1], "{schedule:?}: episode {episode}");
        assert_eq!(rollout.episodes[episode].calls, 2);
        assert_eq!(rollout.episodes[episode].steps, 1);
    }
    for group in 0..2 {
        let rows: usize = rollout
            .batches
            .iter()
            .filter(|b| b.group == group)
            .map(|b| b.rows)
            .sum();
        assert_eq!(rows, tasks.len(), "{schedule:?}: group {group}");
    }
    rollout
}

#[test]
fn rounds_wait_for_the_slowest_environment_step() {
    let rollout = rollout(Schedule::Rounds);
    // One batch per group, each holding every episode, after every reset.
    assert_eq!(rollout.batches.len(), 2, "{:?}", rollout.batches);
    assert!(
        rollout.batches[0].started >= SLOW_RESET_S,
        "{:?}",
        rollout.batches
    );
}

#[test]
fn async_generates_for_other_episodes_while_one_environment_is_slow() {
    let rollout = rollout(Schedule::Async);
    let before_slow_reset_ended = |group| {
        rollout
            .batches
            .iter()
            .any(|b| b.group == group && b.started + b.seconds < SLOW_RESET_S)
    };
    // Both groups finished a batch for the fast episodes while `sloth` was still resetting.
    assert!(before_slow_reset_ended(0), "{:?}", rollout.batches);
    assert!(before_slow_reset_ended(1), "{:?}", rollout.batches);
    // The slow episode came later, in its own batches.
    assert!(rollout.batches.len() >= 4, "{:?}", rollout.batches);
}

/// A `drmas-host serve` of the tiny llama in this process, on a free port; its URL.
fn serve_in_process() -> String {
    let server = Server::bind(ServeOptions {
        model: common::repo().join("host/tests/fixtures/hf/llama"),
        served_model_name: "llama".into(),
        addr: "127.0.0.1:0".into(),
        device: Device::Cpu,
        kind: Kind::Float,
        seed: 0,
        max_batch: 64,
        max_running_requests: 64,
        max_body_bytes: 1 << 20,
        batch_wait: Duration::ZERO,
        idle_timeout: Duration::from_secs(60),
        threads: 1,
        max_loras: 0,
        max_lora_rank: None,
        lora_target_modules: None,
        prefix_cache_bytes: 0,
    })
    .expect("the server binds");
    let url = server.url();
    // Serves until the test's process ends.
    std::thread::spawn(move || server.run());
    url
}

/// An `async` rollout on one worker group whose generator is `generator` (both agents on it,
/// 400-token responses, so a batch runs for a while): sixteen episodes whose resets are fast
/// and one whose reset ends 100 ms later, while their batch runs. Asserts that the slow
/// episode's first call was handed to the generator while that batch still ran (whether it
/// comes back first depends on how long each samples on).
fn a_slow_call_goes_while_a_batch_runs(generator: &dyn Generator, codec: ChatCodec<'_>) {
    let registry = common::fixture_registry();
    let orchestra = registry.orchestra("pair", "").expect("pair orchestra");
    let environment = registry
        .environment("slow-parity", "sleep_ms = 100")
        .expect("slow-parity environment");
    let member = |role: &str| TeamMember {
        role: role.to_owned(),
        actions: drmas_sdk::Actions::Text,
        agent: registry.agent("Shout Agent", "").expect("agent"),
        group: 0,
        adapter: None,
        sampling: SamplingParams::with_temperature(1.0),
        max_new_tokens: 400,
        stop: Vec::new(),
    };
    let team = [member("first"), member("second")];
    let words: Vec<String> = (0..16).map(|i| format!("word{i}")).collect();
    let tasks = environment
        .load_tasks(&DatasetSpec {
            path: format!("{}, sloth", words.join(", ")),
            split: String::new(),
            limit: None,
            base_dir: String::new(),
        })
        .expect("tasks");
    let tasks: Vec<_> = tasks.iter().collect();
    let rollout = rollout::run(
        &Crew {
            orchestra: &orchestra,
            environment: &environment,
            team: &team,
            codecs: &[codec],
            generators: &[generator],
        },
        &tasks,
        RolloutLimits {
            max_prompt_tokens: 64,
            max_batch: 64,
            schedule: Schedule::Async,
            batch_wait: Duration::from_millis(20),
            max_failure_rate: 0.0,
        },
        &mut SeededRng::new(3),
        &mut |_| {},
    )
    .expect("the rollout runs");
    assert_eq!(rollout.calls.len(), 2 * tasks.len());
    // Batches are recorded as they end; the first to start held the fast episodes' first calls.
    let batches = &rollout.batches;
    let first = (batches.iter())
        .min_by(|a, b| a.started.total_cmp(&b.started))
        .expect("batches");
    assert_eq!(first.rows, 16, "{batches:?}");
    let slow = batches.iter().find(|b| b.rows == 1).expect("the slow call");
    assert!(
        slow.started > first.started && slow.started < first.started + first.seconds,
        "{batches:?}"
    );
}

#[test]
fn async_sends_a_groups_next_batch_to_its_server_while_one_runs() {
    let path = common::repo().join("host/tests/fixtures/hf/llama");
    let mut llama = Pretrained::load(&path, Device::Cpu, Kind::Float).expect("tiny model loads");
    let (_, codec) = LocalGenerator::split(&mut llama);
    let server = RemoteGenerator::new(RemoteSettings {
        group: "shared".into(),
        urls: vec![serve_in_process()],
        router: None,
        request_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        max_in_flight: 8,
        max_tries: 1,
        first_backoff: Duration::from_millis(250),
        max_batch_per_request: 64,
        protocol: Protocol::Sglang,
        weight_loading: WeightLoading::None,
        adapter_needs: None,
    });
    assert_eq!(server.concurrent_batches(), 8);
    a_slow_call_goes_while_a_batch_runs(&server, codec);
}

/// In process, the slow call is handed in while the batch runs (and joins its decoding: see
/// `host/tests/shared_batch.rs`).
#[test]
fn async_hands_a_groups_next_batch_to_its_model_while_one_runs() {
    let path = common::repo().join("host/tests/fixtures/hf/llama");
    let mut llama = Pretrained::load(&path, Device::Cpu, Kind::Float).expect("tiny model loads");
    let (generator, codec) = LocalGenerator::split(&mut llama);
    assert_eq!(generator.concurrent_batches(), 2);
    a_slow_call_goes_while_a_batch_runs(&generator, codec);
}
