//! The trainer end to end on tiny random models (host/tests/fixtures/hf): rollouts through a real
//! plugin, advantages, updates, checkpoints and resume — shared, separate and heterogeneous
//! worker groups — plus run files that must fail before any work, and runs whose episodes fail.

mod common;

use std::path::Path;

use drmas_host::config::RunConfig;
use drmas_host::trainer::{Checkpoint, FailedCount, Residency, TaskOrder, TrainSummary, Trainer};
use serde_json::Value;

fn tiny_model(family: &str) -> String {
    common::repo()
        .join("host/tests/fixtures/hf")
        .join(family)
        .display()
        .to_string()
}

/// A two-agent run file (`first` and `second` in a `pair`) on `groups`, `iterations` long.
fn run_file(first_group: &str, second_group: &str, groups: &str, iterations: u32) -> String {
    format!(
        r#"
[run]
output_dir = "run"
seed = 5
iterations = {iterations}
save_every = 1

[environment]
name = "parity"
train_data = {{ path = "alpha, beta, gamma, delta, epsilon" }}
eval_data = {{ path = "alpha, beta" }}

[orchestra]
name = "pair"

[[agents]]
role = "first"
agent = "Shout Agent"
worker_group = "{first_group}"
max_new_tokens = 6

[[agents]]
role = "second"
agent = "Shout Agent"
worker_group = "{second_group}"
max_new_tokens = 5

{groups}

[algorithm]
estimator = "drmas"
invalid_action_penalty = 0.1

[rollout]
prompts_per_batch = 2
group_size = 4
max_response_tokens = 8

[eval]
k = 2
"#
    )
}

fn group(name: &str, family: &str) -> String {
    format!(
        "[worker_groups.{name}]\nmodel = \"{}\"\nlearning_rate = 1e-3\nmicro_batch_size = 3\n",
        tiny_model(family)
    )
}

/// Parses, checks and builds a trainer for `text` written to `dir/run.toml`.
fn trainer(dir: &Path, text: &str) -> anyhow::Result<Trainer> {
    let path = dir.join("run.toml");
    std::fs::write(&path, text)?;
    let (config, file) = RunConfig::load(&path)?;
    let plan = drmas_host::preflight::prepare(&config, &file, &common::fixture_registry())?;
    Trainer::new(config, &file, plan)
}

/// Trains the run file `text` in `dir` from the start to the end; returns its last checkpoint.
fn train_to_the_end(dir: &Path, text: &str) -> std::path::PathBuf {
    trainer(dir, text)
        .expect("trainer")
        .train()
        .expect("the run")
        .checkpoint
        .expect("checkpoint")
}

/// Resumes the run in `dir` from its checkpoint of iteration `after` with the run file `text`,
/// trains it to the end and returns its last checkpoint.
fn resume_to_the_end(dir: &Path, text: &str, after: u32) -> std::path::PathBuf {
    let mut rest = trainer(dir, text).expect("trainer");
    assert_eq!(rest.resume().expect("resume"), Some(after));
    rest.train()
        .expect("the rest of the run")
        .checkpoint
        .expect("checkpoint")
}

fn metrics(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("run/metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn weights(checkpoint: &Path, group: &str) -> Vec<u8> {
    std::fs::read(checkpoint.join(group).join("model.safetensors")).expect("checkpoint weights")
}

/// The largest absolute difference between same-named tensors of two safetensors files.
fn max_weight_change(a: &Path, b: &Path) -> f64 {
    let read = |p: &Path| tch::Tensor::read_safetensors(p).expect("safetensors");
    let (a, b) = (read(a), read(b));
    a.iter()
        .map(|(name, x)| {
            let (_, y) = b.iter().find(|(n, _)| n == name).expect("same tensors");
            (x - y).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_shared_model_trains_and_reports_each_agents_gradient() {
    let dir = common::scratch(&format!("trainer-shared-{}", std::process::id()));
    let text = run_file("shared", "shared", &group("shared", "llama"), 1);
    let summary = trainer(&dir, &text)
        .expect("trainer")
        .train()
        .expect("one iteration");
    assert_eq!(summary.iterations, 1);
    let checkpoint = summary.checkpoint.expect("a checkpoint at the end");
    let change = max_weight_change(
        &Path::new(&tiny_model("llama")).join("model.safetensors"),
        &checkpoint.join("shared/model.safetensors"),
    );
    assert!(change > 0.0, "the update changed the weights");

    let lines = metrics(&dir);
    assert_eq!(lines[0]["iteration"], 0, "eval before training");
    assert!(lines[0]["eval/avg@2"].is_number(), "{}", lines[0]);
    let first = &lines[1];
    for key in [
        "grad_norm/agent/first",
        "grad_norm/agent/second",
        "grad_norm/group/shared",
    ] {
        let norm = first[key].as_f64().unwrap_or(f64::NAN);
        assert!(norm.is_finite() && norm > 0.0, "{key} = {norm} in {first}");
    }
    assert_eq!(first["calls/first"], 8.0, "2 prompts × 4 samples");
    assert_eq!(first["calls/second"], 8.0);
    assert!(
        first["eval/pass@2"].is_number(),
        "eval after the last iteration"
    );
}

#[test]
fn remax_takes_each_prompts_greedy_episode_as_its_baseline() {
    // Every task in one batch, so runs of two seeds (which sample differently) see the same
    // prompts; their greedy episodes, before any update, are the same. The second agent's
    // action is its answer, which the environment rewards for an even length.
    let words = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
    ];
    let text = |seed: u32| {
        parity_run_file(&words, "", "")
            .replace("estimator = \"drmas\"", "estimator = \"remax\"")
            .replace("max_new_tokens = 5", "max_new_tokens = 4")
            .replace("seed = 5", &format!("seed = {seed}"))
    };
    let (_, _, five) = train_one("remax-5", &text(5));
    let (_, _, six) = train_one("remax-6", &text(6));
    let baseline = |line: &Value| {
        line["reward/greedy_baseline_mean"]
            .as_f64()
            .expect("baseline")
    };
    assert_eq!(baseline(&five), baseline(&six), "greedy, whatever the seed");
    // The untrained model's greedy answers have an even length: a baseline of 1 to subtract.
    assert_eq!(baseline(&five), 1.0);
    assert!(five["time/greedy_baseline_s"].as_f64().expect("seconds") > 0.0);
    for line in [&five, &six] {
        assert_ne!(
            line["advantage/reward_mean/first"], line["advantage/reward_mean/second"],
            "the two agents' rewards differ (the penalty), so the check below tells them apart"
        );
        // One call per agent and episode, four episodes a prompt: each agent's mean advantage
        // is its mean reward less the mean of the prompts' greedy rewards.
        for role in ["first", "second"] {
            let reward = line[&format!("advantage/reward_mean/{role}")]
                .as_f64()
                .expect("reward");
            let advantage = line[&format!("advantage/mean/{role}")]
                .as_f64()
                .expect("advantage");
            assert!(
                (advantage - (reward - baseline(line))).abs() < 1e-9,
                "{role}: advantage {advantage}, reward {reward}, baseline {}",
                baseline(line)
            );
        }
    }
}

#[test]
fn gigpo_reads_each_calls_anchor_text_from_the_rollout() {
    // Every episode of a prompt group sees the same observations (its word, then "1 steps
    // left"), so grouping alike texts gives the groups of equal states: the same advantages,
    // unless a call were handed another call's text (another word, never alike at 0.9).
    let text = |params: &str| {
        parity_run_file(&["alpha", "beta", "gamma"], "steps = 2", "").replace(
            "estimator = \"drmas\"",
            &format!("estimator = \"gigpo\"\nparams = {{ {params} }}"),
        )
    };
    let (_, _, exact) = train_one("gigpo-exact", &text(""));
    let (_, _, alike) = train_one("gigpo-alike", &text("similarity_thresh = 0.9"));
    for key in [
        "advantage/mean/first",
        "advantage/std/first",
        "advantage/mean/second",
        "advantage/std/second",
        "advantage/step_group_size_mean",
    ] {
        assert!(exact[key].is_number(), "{key} in {exact}");
        assert_eq!(exact[key], alike[key], "{key}");
    }
}

#[test]
fn dynamic_sampling_fills_the_batch_with_groups_that_have_reward_spread() {
    let dir = common::scratch(&format!("trainer-dynamic-{}", std::process::id()));
    let text = run_file("shared", "shared", &group("shared", "llama"), 3).replace(
        "[rollout]",
        "[algorithm.dynamic_sampling]\nenabled = true\nmax_rollout_batches = 3\n\n[rollout]",
    );
    trainer(&dir, &text)
        .expect("trainer")
        .train()
        .expect("three iterations");
    let lines = metrics(&dir);
    let iterations: Vec<&Value> = lines
        .iter()
        .filter(|l| l["reward/mean"].is_number())
        .collect();
    assert_eq!(iterations.len(), 3);
    for line in iterations {
        let number = |key: &str| {
            line[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {line}"))
        };
        let (generated, kept) = (
            number("dynamic_sampling/generated_groups"),
            number("dynamic_sampling/kept_groups"),
        );
        // Rollouts of 2 prompts until 2 groups with spread are kept, at most 3 rollouts.
        assert!([2.0, 4.0, 6.0].contains(&generated), "{line}");
        assert!(kept <= 2.0 && kept <= generated, "{line}");
        if kept < 2.0 {
            assert_eq!(generated, 6.0, "a short batch only at the cap: {line}");
        }
        // Rollout metrics cover every episode generated; training only the kept groups
        // (4 episodes each, one call per agent).
        assert_eq!(number("calls/first"), generated * 4.0, "{line}");
        assert_eq!(number("advantage/calls"), kept * 4.0 * 2.0, "{line}");
    }
}

#[test]
fn dynamic_sampling_on_penalised_rewards_keeps_groups_whose_calls_differ_in_format() {
    // `words` rewards only the word itself, which the random model never writes: every episode
    // reward is 0, so on `reward` no group has spread, while the calls' validity (and with it
    // their penalised rewards) varies.
    let kept_per_iteration = |metric: &str| {
        let dir = common::scratch(&format!("trainer-spread-{metric}-{}", std::process::id()));
        let text = run_file("shared", "shared", &group("shared", "llama"), 2)
            .replace("name = \"parity\"", "name = \"words\"")
            .replace(
                "[rollout]",
                &format!(
                    "[algorithm.dynamic_sampling]\nenabled = true\nmax_rollout_batches = 2\n\
                     metric = \"{metric}\"\n\n[rollout]"
                ),
            );
        trainer(&dir, &text)
            .expect("trainer")
            .train()
            .expect("two iterations");
        metrics(&dir)
            .iter()
            .filter(|line| line["reward/mean"].is_number())
            .map(|line| {
                let number = |key: &str| {
                    line[key]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{key}: {line}"))
                };
                assert_eq!(number("reward/mean"), 0.0, "{line}");
                let kept = number("dynamic_sampling/kept_groups");
                assert_eq!(number("advantage/calls"), kept * 4.0 * 2.0, "{line}");
                // Over every call rolled out, kept or not: 0.1 off each invalid one, and both
                // agents act once per episode.
                let invalid = (number("invalid_rate/first") + number("invalid_rate/second")) / 2.0;
                let penalised = number("reward/penalised_mean");
                assert!((penalised + 0.1 * invalid).abs() < 1e-12, "{line}");
                kept
            })
            .collect::<Vec<f64>>()
    };
    assert_eq!(kept_per_iteration("reward"), [0.0, 0.0]);
    let kept = kept_per_iteration("penalised_reward");
    assert_eq!(kept.len(), 2);
    assert!(
        kept.iter().sum::<f64>() > 0.0,
        "groups kept for their calls' format: {kept:?}"
    );
}

#[test]
fn overlong_responses_lose_reward_in_proportion() {
    let dir = common::scratch(&format!("trainer-overlong-{}", std::process::id()));
    // Budgets of 6 and 5 tokens with a buffer of 4: a response of L tokens loses
    // (L − (budget − 4)) / 4 × 0.5 once past budget − 4.
    let text = run_file("shared", "shared", &group("shared", "llama"), 1).replace(
        "[rollout]",
        "[algorithm.overlong_penalty]\nbuffer = 4\nfactor = 0.5\n\n[rollout]",
    );
    trainer(&dir, &text)
        .expect("trainer")
        .train()
        .expect("one iteration");
    let lines = metrics(&dir);
    let penalty = lines[1]["reward/overlong_penalty_mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no overlong metric in {}", lines[1]));
    // The tiny random model rarely stops early: most responses use their budget.
    assert!((-0.5..0.0).contains(&penalty), "{penalty}");
}

#[test]
fn a_response_prefix_is_continued_and_parsed_with_the_reply() {
    let dir = common::scratch(&format!("trainer-prefix-{}", std::process::id()));
    let text = run_file("shared", "shared", &group("shared", "qwen2"), 1).replacen(
        "agent = \"Shout Agent\"",
        "agent = \"Shout Agent\"\nparams = { response_prefix = \"LOUD:\" }",
        1,
    );
    trainer(&dir, &text)
        .expect("trainer")
        .train()
        .expect("one iteration");
    let samples = std::fs::read_to_string(dir.join("run/samples.jsonl")).expect("samples");
    let texts = |role: &str| -> Vec<String> {
        samples
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
            .filter(|sample| sample["role"] == role)
            .map(|sample| sample["text"].as_str().expect("text").to_owned())
            .collect()
    };
    let (first, second) = (texts("first"), texts("second"));
    assert!(!first.is_empty() && !second.is_empty());
    // The agent sees (and the samples record) the prefix followed by what the model wrote.
    assert!(first.iter().all(|t| t.starts_with("LOUD:")), "{first:?}");
    assert!(second.iter().all(|t| !t.starts_with("LOUD:")), "{second:?}");
}

#[test]
fn a_standalone_evaluation_keeps_the_runs_own_evaluations() {
    let dir = common::scratch(&format!("trainer-eval-{}", std::process::id()));
    let text = run_file("shared", "shared", &group("shared", "llama"), 0);
    let report = trainer(&dir, &text)
        .expect("trainer")
        .evaluate_standalone()
        .expect("evaluates");
    assert_eq!(report.overall.questions, 2, "alpha and beta");
    let names: Vec<String> = std::fs::read_dir(dir.join("run/eval"))
        .expect("eval folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].starts_with("standalone_") && names[0].ends_with(".json"),
        "{names:?}: not a training run's iteration_NNNNN.json"
    );
}

#[test]
fn separate_and_heterogeneous_groups_each_take_their_own_step() {
    let dir = common::scratch(&format!("trainer-hetero-{}", std::process::id()));
    let groups = format!("{}\n{}", group("llama", "llama"), group("qwen", "qwen2"));
    // The second agent's output decides the reward; the tiny Llama's sampled lengths vary, so
    // both agents see rewards that differ within their groups.
    let summary = trainer(&dir, &run_file("qwen", "llama", &groups, 1))
        .expect("trainer")
        .train()
        .expect("one iteration");
    let checkpoint = summary.checkpoint.expect("checkpoint");
    for (name, family) in [("llama", "llama"), ("qwen", "qwen2")] {
        let change = max_weight_change(
            &Path::new(&tiny_model(family)).join("model.safetensors"),
            &checkpoint.join(name).join("model.safetensors"),
        );
        assert!(change > 0.0, "group `{name}` stepped");
        let config: Value = serde_json::from_slice(
            &std::fs::read(checkpoint.join(name).join("config.json")).expect("config.json"),
        )
        .expect("json");
        assert!(
            config["architectures"][0]
                .as_str()
                .is_some_and(|a| a.to_lowercase().starts_with(family)),
            "{config}"
        );
    }
    let line = &metrics(&dir)[1];
    assert!(
        line["grad_norm/group/llama"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "{line}"
    );
    assert!(
        line["grad_norm/group/qwen"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "{line}"
    );
}

/// `text` (a [`run_file`]) with agent `second` frozen (`train = false`).
fn freeze_second(text: &str) -> String {
    text.replacen("max_new_tokens = 5", "max_new_tokens = 5\ntrain = false", 1)
}

#[test]
fn a_frozen_agent_samples_but_leaves_every_update() {
    let groups = format!("{}\n{}", group("one", "llama"), group("two", "llama"));
    let trained = run_file("one", "two", &groups, 2);
    let frozen = freeze_second(&trained);
    let dir = common::scratch(&format!("trainer-unfrozen-{}", std::process::id()));
    train_to_the_end(&dir, &trained);
    let unfrozen = metrics(&dir);
    let dir = common::scratch(&format!("trainer-frozen-{}", std::process::id()));
    let checkpoint = train_to_the_end(&dir, &frozen);
    let lines = metrics(&dir);
    // `second`'s group never steps: its checkpoint only notes that its weights are the model
    // file's.
    let two = checkpoint.join("two");
    assert!(two.join("untrained.json").is_file());
    assert!(!two.join("model.safetensors").exists());
    assert!(
        max_weight_change(
            &Path::new(&tiny_model("llama")).join("model.safetensors"),
            &checkpoint.join("one").join("model.safetensors"),
        ) > 0.0
    );
    // Resumed from the first iteration's checkpoint, the run ends where the straight one did.
    let resumed = common::scratch(&format!("trainer-frozen-resumed-{}", std::process::id()));
    trainer(
        &resumed,
        &frozen.replace("iterations = 2", "iterations = 1"),
    )
    .expect("trainer")
    .train()
    .expect("first iteration");
    let end = resume_to_the_end(&resumed, &frozen, 1);
    assert_eq!(weights(&end, "one"), weights(&checkpoint, "one"));
    assert!(end.join("two").join("untrained.json").is_file());
    // That folder serves as a `model`, standing for the model file it names.
    let from_checkpoint = format!(
        "{}[worker_groups.two]\nmodel = \"{}\"\nlearning_rate = 1e-3\n",
        group("one", "llama"),
        two.display()
    );
    let dir = common::scratch(&format!("trainer-frozen-model-{}", std::process::id()));
    let path = dir.join("run.toml");
    std::fs::write(&path, run_file("one", "two", &from_checkpoint, 1)).expect("run file");
    let (config, file) = RunConfig::load(&path).expect("run file");
    let plan = drmas_host::preflight::prepare(&config, &file, &common::fixture_registry())
        .expect("the note's model loads");
    let (_, model, _) = plan
        .models
        .iter()
        .find(|m| m.0 == "two")
        .expect("group two");
    assert_eq!(
        std::fs::canonicalize(model).expect("model"),
        std::fs::canonicalize(tiny_model("llama")).expect("fixture")
    );
    // A note whose model file is gone says so.
    std::fs::write(two.join("untrained.json"), r#"{"model": "/no/such/model"}"#).expect("note");
    let error = drmas_host::preflight::prepare(&config, &file, &common::fixture_registry())
        .err()
        .expect("the model is gone");
    assert!(
        format!("{error:#}").contains("whose weights are /no/such/model, which does not exist"),
        "{error:#}"
    );
    // Frozen after it trained, a group keeps (and saves) its trained weights.
    let after_training = common::scratch(&format!("trainer-frozen-later-{}", std::process::id()));
    let trained_once = trainer(
        &after_training,
        &trained.replace("iterations = 2", "iterations = 1"),
    )
    .expect("trainer")
    .train()
    .expect("first iteration")
    .checkpoint
    .expect("checkpoint");
    let trained_weights = weights(&trained_once, "two");
    let frozen_later = resume_to_the_end(&after_training, &frozen, 1);
    assert_eq!(
        weights(&frozen_later, "two"),
        trained_weights,
        "the trained weights were kept"
    );
    // The first iteration samples what the unfrozen run samples, and `first`'s update (drmas
    // normalises each agent's advantages on its own) is the same to the bit.
    let (first, unfrozen_first) = (&lines[1], &unfrozen[1]);
    for key in [
        "reward/mean",
        "grad_norm/group/one",
        "grad_norm/agent/first",
    ] {
        assert_eq!(first[key], unfrozen_first[key], "{key}");
        assert!(first[key].is_number(), "{key}: {first}");
    }
    assert!(unfrozen_first["grad_norm/group/two"].is_number());
    for line in &lines[1..] {
        for key in [
            "grad_norm/group/two",
            "grad_norm/agent/second",
            "loss/policy/two",
        ] {
            assert!(line.get(key).is_none(), "{key} in {line}");
        }
        assert_eq!(line["calls/second"], 8.0, "the frozen agent still acts");
    }

    // With the KL in the reward, a frozen group is its own reference: it needs none, its calls'
    // KL is 0, and the KL the coefficient steers is the trained agents'.
    let referenced = format!(
        "{}reference_model = \"{}\"\n\n{}",
        group("one", "llama"),
        tiny_model("llama"),
        group("two", "llama")
    );
    let kl_run = freeze_second(&run_file("one", "two", &referenced, 1)).replace(
        "[rollout]",
        "[algorithm.kl_in_reward]\ncoef = 0.5\n\n[rollout]",
    );
    let dir = common::scratch(&format!("trainer-frozen-kl-{}", std::process::id()));
    train_to_the_end(&dir, &kl_run);
    let line = &metrics(&dir)[1];
    assert!(line.get("kl_in_reward/kl/second").is_none(), "{line}");
    assert_eq!(
        line["kl_in_reward/kl"], line["kl_in_reward/kl/first"],
        "{line}"
    );

    // Sharing a group with an agent that trains: only that agent's calls reach the update.
    let shared = freeze_second(&run_file("shared", "shared", &group("shared", "llama"), 1));
    let dir = common::scratch(&format!("trainer-frozen-shared-{}", std::process::id()));
    train_to_the_end(&dir, &shared);
    let line = &metrics(&dir)[1];
    assert!(line["grad_norm/agent/first"].is_number(), "{line}");
    assert!(line.get("grad_norm/agent/second").is_none(), "{line}");

    // With an adapter per agent, the frozen agent's has no learning rate (it is never stepped).
    let adapters = freeze_second(&run_file(
        "shared",
        "shared",
        &lora_group("shared", true),
        1,
    ));
    let dir = common::scratch(&format!("trainer-frozen-adapter-{}", std::process::id()));
    train_to_the_end(&dir, &adapters);
    let line = &metrics(&dir)[1];
    assert!(line["lr/agent/first"].is_number(), "{line}");
    assert!(line.get("lr/agent/second").is_none(), "{line}");

    // With offload, a group no agent trains leaves the device while the others update, and
    // reports its moves' seconds as they do. Without an eval after the last iteration (which
    // brings the weights back), the run ends with them still away.
    let offloaded = frozen
        .replacen(
            "[worker_groups.two]",
            "[worker_groups.two]\noffload = true",
            1,
        )
        .replacen("eval_data = { path = \"alpha, beta\" }\n", "", 1);
    let dir = common::scratch(&format!("trainer-frozen-offload-{}", std::process::id()));
    let mut run = trainer(&dir, &offloaded).expect("trainer");
    run.train().expect("the run");
    let away = Residency {
        weights_home: false,
        training_state_home: false,
    };
    assert_eq!(run.residency("two"), Some(away));
    assert_eq!(run.residency("one"), None, "no offload there");
    for line in &metrics(&dir)[1..] {
        assert!(line["time/offload_s/two"].is_number(), "{line}");
    }
}

#[test]
fn a_resumed_run_ends_exactly_where_an_uninterrupted_one_does() {
    resumes_exactly("resume", &group("shared", "llama"));
}

#[test]
fn a_bf16_run_checkpoints_bf16_weights_with_f32_masters_and_resumes_exactly() {
    let groups = group("shared", "llama") + "dtype = \"bf16\"\n";
    let end = resumes_exactly("resume-bf16", &groups);
    let saved = |file: &str| {
        tch::Tensor::read_safetensors(end.join("shared").join(file)).expect("safetensors")
    };
    let weights = saved("model.safetensors");
    assert!(
        weights.iter().all(|(_, t)| t.kind() == tch::Kind::BFloat16),
        "the model folder holds the group's bf16 weights"
    );
    let optimizer = saved("optimizer.safetensors");
    for (name, weight) in &weights {
        let (_, master) = optimizer
            .iter()
            .find(|(n, _)| *n == format!("master.{name}"))
            .unwrap_or_else(|| panic!("no f32 master of {name}"));
        assert_eq!(master.kind(), tch::Kind::Float);
        assert!(
            master.to_kind(tch::Kind::BFloat16).equal(weight),
            "{name}: the bf16 weight is its master rounded"
        );
    }
}

/// Trains the two-agent run on `groups` for two iterations straight and for one, then resumed
/// for the second; asserts both end with the same weights and metrics, and returns the straight
/// run's last checkpoint.
fn resumes_exactly(label: &str, groups: &str) -> std::path::PathBuf {
    let straight = common::scratch(&format!("trainer-{label}-straight-{}", std::process::id()));
    let text = run_file("shared", "shared", groups, 2);
    let end = train_to_the_end(&straight, &text);

    let resumed = common::scratch(&format!("trainer-{label}-resumed-{}", std::process::id()));
    let first_half = run_file("shared", "shared", groups, 1);
    trainer(&resumed, &first_half)
        .expect("trainer")
        .train()
        .expect("first iteration");
    let mut second_half = trainer(&resumed, &text).expect("trainer");
    assert_eq!(second_half.resume().expect("resume"), Some(1));
    let summary = second_half.train().expect("second iteration");
    assert_eq!(summary.iterations, 1, "only the missing iteration ran");
    let resumed_end = summary.checkpoint.expect("checkpoint");

    for file in ["model.safetensors", "optimizer.safetensors"] {
        let read = |dir: &Path| std::fs::read(dir.join("shared").join(file)).expect("checkpoint");
        assert!(
            read(&end) == read(&resumed_end),
            "resumed {file} differs from the uninterrupted run's"
        );
    }
    let (a, b) = (metrics(&straight), metrics(&resumed));
    assert_eq!(a.len(), b.len(), "one line per iteration, no duplicates");
    for key in [
        "reward/mean",
        "grad_norm/agent/first",
        "advantage/mean/second",
        "loss/policy/shared",
    ] {
        assert_eq!(a[2][key], b[2][key], "{key}");
    }
    end
}

#[test]
fn offload_moves_a_group_between_phases_and_changes_no_number() {
    let run = |label: &str, groups: &str| {
        let dir = common::scratch(&format!("trainer-{label}-{}", std::process::id()));
        let text = run_file("shared", "shared", groups, 2);
        trainer(&dir, &text)
            .expect("trainer")
            .train()
            .expect("two iterations");
        metrics(&dir)
    };
    let stays = run("stays", &group("shared", "llama"));
    let offloaded = run(
        "offloaded",
        &(group("shared", "llama") + "offload = true\n"),
    );
    assert_eq!(stays.len(), offloaded.len());
    for (a, b) in stays.iter().zip(&offloaded).skip(1) {
        let seconds = b["time/offload_s/shared"].as_f64();
        assert!(seconds.is_some_and(|s| s >= 0.0), "{b}");
        let timing = |key: &str| key.starts_with("time/") || key.starts_with("tokens_per_s/");
        let numbers = |line: &Value| -> Vec<(String, Value)> {
            let object = line.as_object().expect("a JSON object");
            let kept = object.iter().filter(|(key, _)| !timing(key));
            kept.map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        };
        assert_eq!(
            numbers(a),
            numbers(b),
            "every metric but the timings is the same"
        );
    }
}

/// Recomputing each layer in the backward runs the same operations on the same shapes as the
/// plain forward, so on the CPU the update is the same to the bit.
#[test]
fn activation_checkpointing_trains_as_the_plain_update_does() {
    let run = |label: &str, groups: &str| {
        let dir = common::scratch(&format!("trainer-{label}-{}", std::process::id()));
        let text = run_file("shared", "shared", groups, 1);
        let checkpoint = train_to_the_end(&dir, &text);
        (metrics(&dir), checkpoint)
    };
    let (plain, plain_end) = run("plain-update", &group("shared", "llama"));
    let (checkpointed, checkpointed_end) = run(
        "checkpointed-update",
        &(group("shared", "llama") + "activation_checkpointing = true\n"),
    );
    let (a, b) = (&plain[1], &checkpointed[1]);
    for key in [
        "reward/mean",
        "loss/policy/shared",
        "grad_norm/group/shared",
        "grad_norm/agent/first",
        "grad_norm/agent/second",
    ] {
        assert!(a[key].is_number(), "{key} in {a}");
        assert_eq!(a[key], b[key], "{key}");
    }
    assert!(
        weights(&plain_end, "shared") == weights(&checkpointed_end, "shared"),
        "the updated weights differ"
    );
    assert!(
        max_weight_change(
            &plain_end.join("shared/model.safetensors"),
            &common::repo().join("host/tests/fixtures/hf/llama/model.safetensors"),
        ) > 0.0,
        "the update moved the weights"
    );
}

#[test]
fn ppo_trains_a_critic_per_group_waits_through_its_warmup_and_resumes_exactly() {
    let groups = format!("{}\n{}", group("llama", "llama"), group("qwen", "qwen2"));
    let ppo = |iterations| {
        run_file("llama", "qwen", &groups, iterations)
            .replace(
                "estimator = \"drmas\"",
                "estimator = \"ppo\"\nparams = { gamma = 1.0, lam = 0.95, whiten = \"agent\" }",
            )
            .replace(
                "[rollout]",
                "[algorithm.critic]\nlearning_rate = 1e-3\nwarmup_iterations = 1\n\
                 micro_batch_size = 2\n\n[rollout]",
            )
    };
    let straight = common::scratch(&format!("trainer-ppo-{}", std::process::id()));
    let end = train_to_the_end(&straight, &ppo(3));
    let lines = metrics(&straight);
    // Line 0 is the evaluation before training; iteration 1 trains only the critics.
    let (warmup, trained) = (&lines[1], &lines[2]);
    assert_eq!(warmup["critic/warmup"], 1.0, "{warmup}");
    assert!(warmup.get("grad_norm/agent/first").is_none(), "{warmup}");
    assert_eq!(trained["critic/warmup"], 0.0, "{trained}");
    for line in [warmup, trained] {
        for group in ["llama", "qwen"] {
            for key in ["critic/vf_loss", "critic/grad_norm"] {
                let value = line[format!("{key}/{group}")].as_f64().expect(key);
                assert!(value.is_finite() && value >= 0.0, "{key}/{group} = {value}");
            }
        }
        // The parity task's returns vary, so the explained variance is defined (at most 1).
        let explained = line["critic/vf_explained_var"].as_f64();
        assert!(
            explained.is_some_and(|e| e.is_finite() && e <= 1.0),
            "{line}"
        );
    }
    assert!(trained["grad_norm/agent/first"]
        .as_f64()
        .is_some_and(|n| n > 0.0));
    assert!(end.join("llama/critic.safetensors").is_file());

    let resumed = common::scratch(&format!("trainer-ppo-resumed-{}", std::process::id()));
    trainer(&resumed, &ppo(1))
        .expect("trainer")
        .train()
        .expect("first iteration");
    let first_checkpoint = resumed.join("run/checkpoints/iteration_00001");
    let saved = tch::Tensor::read_safetensors(first_checkpoint.join("llama/model.safetensors"))
        .expect("checkpoint weights");
    let original = drmas_host::model::pretrained::Pretrained::load(
        Path::new(&tiny_model("llama")),
        tch::Device::Cpu,
        tch::Kind::Float,
    )
    .expect("fixture");
    let original = original.model.var_store().variables();
    for (name, tensor) in &saved {
        assert!(
            tensor.equal(&original[name]),
            "{name}: the policy moved during the critic's warm-up"
        );
    }
    let resumed_end = resume_to_the_end(&resumed, &ppo(3), 1);
    for group in ["llama", "qwen"] {
        assert!(
            weights(&end, group) == weights(&resumed_end, group),
            "{group}"
        );
        let critic = |dir: &Path| std::fs::read(dir.join(group).join("critic.safetensors"));
        assert!(
            critic(&end).expect("critic") == critic(&resumed_end).expect("critic"),
            "{group}: resumed critic differs"
        );
    }
    let again = metrics(&resumed);
    for key in [
        "critic/vf_loss/llama",
        "critic/values_mean",
        "advantage/mean/second",
    ] {
        assert_eq!(lines[3][key], again[3][key], "{key}");
    }
}

#[test]
fn the_kl_in_the_reward_starts_at_zero_steers_its_coefficient_and_resumes_exactly() {
    let groups = format!(
        "{}reference_model = \"{}\"\n",
        group("shared", "llama"),
        tiny_model("llama")
    );
    let run = |iterations| {
        run_file("shared", "shared", &groups, iterations).replace(
            "[rollout]",
            "[algorithm.kl_in_reward]\ncoef = 0.5\nkl_type = \"low_var_kl\"\n\
             controller = \"adaptive\"\ntarget = 0.001\nhorizon = 16\n\n[rollout]",
        )
    };
    let straight = common::scratch(&format!("trainer-kl-reward-{}", std::process::id()));
    let end = train_to_the_end(&straight, &run(3));
    let lines = metrics(&straight);
    let value = |line: &Value, key: &str| {
        line[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    // Line 0 is the evaluation before training. In iteration 1 the policy is the reference:
    // the sampler's log-probabilities against the reference's forward differ by rounding only.
    let first = &lines[1];
    assert!(value(first, "kl_in_reward/kl").abs() < 1e-6, "{first}");
    assert!(
        value(first, "kl_in_reward/kl/second").abs() < 1e-6,
        "{first}"
    );
    assert_eq!(value(first, "kl_in_reward/coef"), 0.5);
    // KL ≈ 0 against a target of 0.001: the error −1 is clipped to −0.2, and each call of the
    // batch moves β by 0.2 / horizon.
    let calls = value(first, "calls/first") + value(first, "calls/second");
    let expected = 0.5 * (1.0 - 0.2 * calls / 16.0);
    let second = &lines[2];
    assert!(
        (value(second, "kl_in_reward/coef") - expected).abs() < 1e-12,
        "{second}"
    );
    // Once the policy has moved, its tokens have a KL (k3 is positive); above the target, β
    // grows again.
    let third = &lines[3];
    assert!(value(second, "kl_in_reward/kl") > 1e-6, "{second}");
    assert!(value(second, "kl_in_reward/kl") > 0.001);
    assert!(value(third, "kl_in_reward/coef") > value(second, "kl_in_reward/coef"));

    let resumed = common::scratch(&format!("trainer-kl-reward-resumed-{}", std::process::id()));
    trainer(&resumed, &run(2))
        .expect("trainer")
        .train()
        .expect("two iterations");
    let state: Value = serde_json::from_slice(
        &std::fs::read(resumed.join("run/checkpoints/iteration_00002/trainer_state.json"))
            .expect("trainer state"),
    )
    .expect("JSON");
    assert_eq!(
        state["kl_in_reward_coef"].as_f64(),
        Some(value(third, "kl_in_reward/coef")),
        "the checkpoint holds the next iteration's β"
    );
    let resumed_end = resume_to_the_end(&resumed, &run(3), 2);
    assert!(weights(&end, "shared") == weights(&resumed_end, "shared"));
    let again = metrics(&resumed);
    for key in [
        "kl_in_reward/coef",
        "kl_in_reward/kl",
        "advantage/mean/second",
    ] {
        assert_eq!(lines[3][key], again[3][key], "{key}");
    }
}

#[test]
fn the_kl_in_the_reward_reads_a_lora_groups_base_and_a_bf16_groups_recomputed_logprobs() {
    let with_kl = |groups: &str| {
        run_file("shared", "shared", groups, 2).replace(
            "[rollout]",
            "[algorithm.kl_in_reward]\ncoef = 0.5\nkl_type = \"k2\"\n\n[rollout]",
        )
    };
    let kl = |label: &str, groups: &str| -> Vec<f64> {
        let dir = common::scratch(&format!("trainer-kl-{label}-{}", std::process::id()));
        train_to_the_end(&dir, &with_kl(groups));
        metrics(&dir)[1..]
            .iter()
            .map(|line| line["kl_in_reward/kl"].as_f64().expect("kl_in_reward/kl"))
            .collect()
    };
    // LoRA: the adapters start at zero, so the policy is its base until the first update.
    let lora = kl("lora", &lora_group("shared", true));
    assert!(lora[0].abs() < 1e-9, "{lora:?}");
    assert!(lora[1] > 1e-9, "{lora:?}");
    // bf16: the policy's log-probabilities are the recomputed ones (a bf16 group recomputes),
    // the same forward as the reference's on the same weights, so the KL is exactly 0 before
    // the first update, whatever the bf16 sampler's own log-probabilities were.
    let bf16 = format!(
        "{}dtype = \"bf16\"\nreference_model = \"{}\"\n",
        group("shared", "llama"),
        tiny_model("llama")
    );
    let bf16 = kl("bf16", &bf16);
    assert_eq!(bf16[0], 0.0, "{bf16:?}");
    assert!(bf16[1] > 0.0, "{bf16:?}");
}

#[test]
fn run_files_that_cannot_train_fail_before_any_work() {
    let dir = common::scratch(&format!("trainer-bad-{}", std::process::id()));
    let conflict = run_file("shared", "shared", &group("shared", "llama"), 1).replacen(
        "max_new_tokens = 6",
        "max_new_tokens = 6\nlearning_rate = 1e-4",
        1,
    );
    let conflict = conflict.replacen(
        "max_new_tokens = 5",
        "max_new_tokens = 5\nlearning_rate = 2e-4",
        1,
    );
    let error = format!("{:#}", trainer(&dir, &conflict).err().expect("lr conflict"));
    assert!(
        error.contains("agents `first` and `second` share worker group `shared`"),
        "{error}"
    );

    let missing = run_file("shared", "shared", &group("shared", "llama"), 1)
        .replace(&tiny_model("llama"), "/nowhere/model");
    let error = format!(
        "{:#}",
        trainer(&dir, &missing).err().expect("missing model")
    );
    assert!(error.contains("/nowhere/model does not exist"), "{error}");

    let critic_without_ppo = run_file("shared", "shared", &group("shared", "llama"), 1).replace(
        "[rollout]",
        "[algorithm.critic]\nwarmup_iterations = 1\n\n[rollout]",
    );
    let error = format!(
        "{:#}",
        trainer(&dir, &critic_without_ppo)
            .err()
            .expect("a critic for drmas")
    );
    assert!(
        error.contains("[algorithm.critic] configures a critic, but estimator `drmas` has none")
            && error.contains("run.toml:"),
        "{error}"
    );
    assert!(!dir.join("run").exists(), "nothing was written");
}

#[test]
fn a_plugin_estimators_advantages_reach_the_update() {
    let dir = common::scratch(&format!("trainer-plugin-estimator-{}", std::process::id()));
    // One prompt: samples.jsonl then holds every call of the iteration.
    let text = run_file("shared", "shared", &group("shared", "llama"), 1)
        .replace("estimator = \"drmas\"", "estimator = \"sign\"")
        .replace("prompts_per_batch = 2", "prompts_per_batch = 1");
    trainer(&dir, &text)
        .expect("a run file naming a plugin estimator passes the checks")
        .train()
        .expect("one iteration");

    // What `sign` must give: ±1 by penalised reward (0.1 off for an invalid call) against the
    // mean of the prompt group's 8 calls.
    let calls: Vec<(String, f64)> = std::fs::read_to_string(dir.join("run/samples.jsonl"))
        .expect("samples.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .map(|call| {
            let penalty = if call["valid"] == true { 0.0 } else { 0.1 };
            let reward = call["reward"].as_f64().expect("reward");
            (
                call["role"].as_str().expect("role").to_owned(),
                reward - penalty,
            )
        })
        .collect();
    assert_eq!(calls.len(), 8, "4 episodes × 2 agents");
    let mean = calls.iter().map(|(_, r)| r).sum::<f64>() / 8.0;
    let sign = |r: f64| {
        if r > mean {
            1.0
        } else if r < mean {
            -1.0
        } else {
            0.0
        }
    };
    let trained = &metrics(&dir)[1];
    for role in ["first", "second"] {
        let own: Vec<f64> = calls
            .iter()
            .filter(|(r, _)| r == role)
            .map(|&(_, reward)| sign(reward))
            .collect();
        let expected = own.iter().sum::<f64>() / own.len() as f64;
        let key = format!("advantage/mean/{role}");
        let got = trained[&key].as_f64().unwrap_or(f64::NAN);
        assert!(
            (got - expected).abs() < 1e-12,
            "{key}: {got} vs {expected} from {calls:?}"
        );
    }
}

#[test]
fn a_plugin_estimators_bad_answer_stops_the_run_naming_it() {
    let dir = common::scratch(&format!("trainer-faulty-estimator-{}", std::process::id()));
    let text = run_file("shared", "shared", &group("shared", "llama"), 1)
        .replace("estimator = \"drmas\"", "estimator = \"faulty\"")
        .replace(
            "[rollout]",
            "[algorithm.params]\nfault = \"nan\"\n\n[rollout]",
        );
    let error = format!(
        "{:#}",
        trainer(&dir, &text)
            .expect("the checks pass")
            .train()
            .expect_err("a NaN advantage")
    );
    assert!(
        error.contains("estimator `faulty` of plugin `fixture`")
            && error.contains("returned the advantage NaN for sample 15")
            && error.contains("advantages must be finite numbers"),
        "{error}"
    );

    let typo = text.replace("fault = \"nan\"", "falt = \"nan\"");
    let error = format!("{:#}", trainer(&dir, &typo).err().expect("a params typo"));
    let line = typo
        .lines()
        .position(|l| l.starts_with("estimator = "))
        .expect("an estimator line")
        + 1;
    assert!(error.contains(&format!("run.toml:{line}:13: ")), "{error}");
    assert!(
        error.contains("cannot build estimator `faulty` of plugin `fixture`")
            && error.contains("unknown field `falt`"),
        "{error}"
    );
}

/// `group(name, "llama")` training per-agent (or shared) LoRA adapters, dropout on.
fn lora_group(name: &str, per_agent: bool) -> String {
    format!(
        "{}\n[worker_groups.{name}.lora]\nrank = 4\nalpha = 8\ndropout = 0.1\nper_agent = {per_agent}\n",
        group(name, "llama")
    )
}

fn adapter(checkpoint: &Path, name: &str) -> Vec<(String, tch::Tensor)> {
    let file = checkpoint
        .join("shared/adapters")
        .join(name)
        .join("adapter_model.safetensors");
    tch::Tensor::read_safetensors(&file).expect("adapter weights")
}

/// Whether two adapters' tensors are the same, name by name, to the bit.
fn same_adapter(a: &[(String, tch::Tensor)], b: &[(String, tch::Tensor)]) -> bool {
    a.len() == b.len()
        && a.iter().all(|(name, x)| {
            b.iter()
                .find(|(other, _)| other == name)
                .is_some_and(|(_, y)| x.equal(y))
        })
}

/// `[lora] init_from`: a LoRA group starts from a checkpoint's adapters, to the bit; an agent
/// frozen on it keeps the loaded adapter while the other trains on from its own; a folder
/// lacking an adapter, or of other LoRA settings, is refused naming the field.
#[test]
fn a_lora_group_starts_from_a_checkpoints_adapters() {
    let source = common::scratch(&format!("trainer-lora-source-{}", std::process::id()));
    let text = run_file("shared", "shared", &lora_group("shared", true), 1);
    let trained = train_to_the_end(&source, &text);
    let init = |text: &str, folder: &Path| {
        text.replacen(
            "per_agent = true\n",
            &format!("per_agent = true\ninit_from = \"{}\"\n", folder.display()),
            1,
        )
    };
    let adapters = trained.join("shared/adapters");

    let dir = common::scratch(&format!("trainer-lora-init-{}", std::process::id()));
    let started = trainer(&dir, &init(&text, &adapters))
        .expect("trainer")
        .save()
        .expect("a checkpoint before any iteration");
    for role in ["first", "second"] {
        assert!(
            same_adapter(&adapter(&started, role), &adapter(&trained, role)),
            "`{role}` did not start from the checkpoint's adapter"
        );
    }

    let dir = common::scratch(&format!("trainer-lora-init-frozen-{}", std::process::id()));
    let end = train_to_the_end(&dir, &init(&freeze_second(&text), &adapters));
    assert!(same_adapter(
        &adapter(&end, "second"),
        &adapter(&trained, "second")
    ));
    assert!(!same_adapter(
        &adapter(&end, "first"),
        &adapter(&trained, "first")
    ));

    let dir = common::scratch(&format!("trainer-lora-init-bad-{}", std::process::id()));
    std::fs::remove_dir_all(adapters.join("second")).expect("an adapter removed");
    let error = format!(
        "{:#}",
        trainer(&dir, &init(&text, &adapters))
            .err()
            .expect("missing")
    );
    assert!(
        error.contains("init_from") && error.contains("has no folder `second`"),
        "{error}"
    );
    // The group's folder instead of its adapters/ folder.
    let group_folder = init(&text, &adapters.join(".."));
    let error = format!(
        "{:#}",
        trainer(&dir, &group_folder).err().expect("no adapters")
    );
    assert!(error.contains("has no folder `first`"), "{error}");
    let ranked = init(&text, &trained.join("shared/adapters")).replace("rank = 4", "rank = 8");
    let error = format!("{:#}", trainer(&dir, &ranked).err().expect("mismatch"));
    assert!(
        error.contains("r = 4") && error.contains("do not match"),
        "{error}"
    );
}

/// `drmas-host eval --checkpoint`: a checkpoint's weights (a full group's and a LoRA group's),
/// evaluated at its iteration's eval seed, score exactly what the run's own evaluation after
/// that iteration scored.
#[test]
fn evaluating_a_checkpoint_reproduces_the_runs_own_evaluation() {
    // The iteration of each whose evaluation differs from the one before training.
    for (label, groups, iteration) in [
        ("full", group("shared", "llama"), 2),
        ("lora", lora_group("shared", true), 1),
    ] {
        let text = run_file("shared", "shared", &groups, 2)
            .replace("save_every = 1", "save_every = 1\neval_every = 1");
        let dir = common::scratch(&format!("trainer-eval-{label}-{}", std::process::id()));
        train_to_the_end(&dir, &text);
        let read = |iteration: u32| -> drmas_host::trainer::EvalReport {
            let path = dir.join(format!("run/eval/iteration_{iteration:05}.json"));
            serde_json::from_slice(&std::fs::read(path).expect("the run's eval")).expect("a report")
        };
        assert_ne!(
            read(iteration),
            read(0),
            "{label}: training changed the scores"
        );
        let mut evaluator = trainer(&dir, &text).expect("trainer");
        let checkpoint = dir.join(format!("run/checkpoints/iteration_{iteration:05}"));
        let checkpoint = Checkpoint::open(&checkpoint).expect("a checkpoint");
        assert_eq!(checkpoint.iteration(), iteration);
        evaluator
            .load_checkpoint_weights(&checkpoint)
            .expect("loads");
        let report = evaluator.evaluate_standalone().expect("eval");
        assert_eq!(report, read(iteration), "{label}");
        let written = std::fs::read_dir(dir.join("run/eval"))
            .expect("eval folder")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&format!("standalone_iteration_{iteration:05}_")))
            .count();
        assert_eq!(
            written, 1,
            "{label}: the checkpoint's evaluation is named after it"
        );
        // Naming the run folder instead: the message lists its checkpoints.
        let error = format!(
            "{:#}",
            Checkpoint::open(&dir.join("run")).expect_err("a run")
        );
        assert!(
            error.contains("is not a checkpoint") && error.contains("iteration_00002"),
            "{error}"
        );
    }
}

#[test]
fn lora_agents_train_their_own_adapters_and_resume_exactly() {
    // KL against the base model (the adapters off) is on for the first agent.
    let text = |iterations| {
        run_file("shared", "shared", &lora_group("shared", true), iterations).replacen(
            "max_new_tokens = 6",
            "max_new_tokens = 6\nkl_coef = 0.05",
            1,
        )
    };
    let straight = common::scratch(&format!("trainer-lora-straight-{}", std::process::id()));
    let end = train_to_the_end(&straight, &text(2));
    assert!(
        !end.join("shared/model.safetensors").exists(),
        "the frozen base is not saved again"
    );
    let (first, second) = (adapter(&end, "first"), adapter(&end, "second"));
    assert_eq!(
        first.len(),
        2 * 7 * 2,
        "A and B of 7 projections in 2 layers"
    );
    for (name, b) in first.iter().filter(|(n, _)| n.contains("lora_B")) {
        let moved = b.abs().max().double_value(&[]);
        assert!(moved > 0.0, "{name} of `first` is still zero");
    }
    let differ = first
        .iter()
        .zip(&second)
        .any(|((_, a), (_, b))| !a.equal(b));
    assert!(differ, "the two agents' adapters are the same");
    let line = &metrics(&straight)[2];
    assert!(
        line["loss/kl/shared"].as_f64().is_some_and(|kl| kl != 0.0),
        "{line}"
    );

    let resumed = common::scratch(&format!("trainer-lora-resumed-{}", std::process::id()));
    trainer(&resumed, &text(1))
        .expect("trainer")
        .train()
        .expect("first iteration");
    let mut second_half = trainer(&resumed, &text(2)).expect("trainer");
    assert_eq!(second_half.resume().expect("resume"), Some(1));
    let resumed_end = second_half
        .train()
        .expect("second iteration")
        .checkpoint
        .expect("checkpoint");
    for role in ["first", "second"] {
        let file = |c: &Path| {
            std::fs::read(
                c.join("shared/adapters")
                    .join(role)
                    .join("adapter_model.safetensors"),
            )
            .expect("adapter file")
        };
        assert!(
            file(&end) == file(&resumed_end),
            "`{role}` differs after resume"
        );
    }
    let optimizer = |c: &Path| std::fs::read(c.join("shared/optimizer.safetensors")).expect("opt");
    assert!(
        optimizer(&end) == optimizer(&resumed_end),
        "optimizer state differs"
    );
}

#[test]
fn a_shared_lora_adapter_trains_on_every_agents_calls() {
    let dir = common::scratch(&format!("trainer-lora-shared-{}", std::process::id()));
    let text = run_file("shared", "shared", &lora_group("shared", false), 1);
    let end = train_to_the_end(&dir, &text);
    let shared = adapter(&end, "shared");
    assert!(shared
        .iter()
        .any(|(n, b)| n.contains("lora_B") && b.abs().max().double_value(&[]) > 0.0));
    assert!(!end.join("shared/adapters/first").exists());
    let line = &metrics(&dir)[1];
    for key in ["grad_norm/agent/first", "grad_norm/agent/second"] {
        assert!(line[key].as_f64().is_some_and(|n| n > 0.0), "{key}: {line}");
    }
}

#[test]
fn bad_lora_sections_fail_naming_the_field() {
    let dir = common::scratch(&format!("trainer-lora-bad-{}", std::process::id()));
    let zero = run_file("shared", "shared", &lora_group("shared", true), 1)
        .replace("rank = 4", "rank = 0");
    let error = format!("{:#}", trainer(&dir, &zero).err().expect("rank 0"));
    assert!(
        error.contains("[worker_groups.shared.lora] rank = 0 must be an integer from 1 to"),
        "{error}"
    );

    let target = run_file("shared", "shared", &lora_group("shared", true), 1).replace(
        "per_agent = true",
        "per_agent = true\ntarget_modules = [\"qproj\"]",
    );
    let error = format!("{:#}", trainer(&dir, &target).err().expect("bad target"));
    assert!(error.contains("`qproj` is not a projection"), "{error}");

    let reference = run_file("shared", "shared", &lora_group("shared", true), 1).replace(
        "micro_batch_size = 3\n",
        &format!(
            "micro_batch_size = 3\nreference_model = \"{}\"\n",
            tiny_model("llama")
        ),
    );
    let error = format!("{:#}", trainer(&dir, &reference).err().expect("reference"));
    assert!(error.contains("remove reference_model"), "{error}");
    let unknown = run_file("shared", "shared", &lora_group("shared", true), 1)
        .replace("dropout = 0.1", "dropout = 0.1\nranks = 3");
    let error = format!("{:#}", trainer(&dir, &unknown).err().expect("unknown key"));
    assert!(error.contains("ranks"), "{error}");
    assert!(!dir.join("run").exists(), "nothing was written");
}

#[test]
fn per_agent_adapters_take_their_own_learning_rates() {
    let dir = common::scratch(&format!("trainer-lora-rates-{}", std::process::id()));
    let text = run_file("shared", "shared", &lora_group("shared", true), 1)
        .replacen(
            "max_new_tokens = 6",
            "max_new_tokens = 6\nlearning_rate = 1e-3",
            1,
        )
        .replacen(
            "max_new_tokens = 5",
            "max_new_tokens = 5\nlearning_rate = 1e-9",
            1,
        );
    let end = trainer(&dir, &text)
        .expect("agents owning adapters may differ in learning_rate")
        .train()
        .expect("one iteration")
        .checkpoint
        .expect("checkpoint");
    let largest_b = |role: &str| {
        adapter(&end, role)
            .iter()
            .filter(|(n, _)| n.contains("lora_B"))
            .map(|(_, b)| b.abs().max().double_value(&[]))
            .fold(0.0, f64::max)
    };
    // AdamW's first step moves each entry by about the learning rate.
    let (first, second) = (largest_b("first"), largest_b("second"));
    assert!(first > 1e-4 && first < 1e-2, "first moved {first}");
    assert!(second > 0.0 && second < 1e-7, "second moved {second}");
    let line = &metrics(&dir)[1];
    assert_eq!(line["lr/agent/first"], 1e-3, "{line}");
    assert_eq!(line["lr/agent/second"], 1e-9, "{line}");
}

/// The one-iteration run of `run_file` on `words` (all in one batch) of the `parity` environment
/// with `params`, without evaluation, and `rollout` lines added to `[rollout]`.
fn parity_run_file(words: &[&str], params: &str, rollout: &str) -> String {
    run_file("shared", "shared", &group("shared", "llama"), 1)
        .replace(
            "name = \"parity\"",
            &format!("name = \"parity\"\nparams = {{ {params} }}"),
        )
        .replace(
            "\"alpha, beta, gamma, delta, epsilon\"",
            &format!("\"{}\"", words.join(", ")),
        )
        .replace("eval_data = { path = \"alpha, beta\" }\n", "")
        .replace(
            "prompts_per_batch = 2",
            &format!("prompts_per_batch = {}\n{rollout}", words.len()),
        )
}

/// Trains `text` in the scratch folder `name`; returns the folder, the summary and iteration
/// 1's metrics.
fn train_one(name: &str, text: &str) -> (std::path::PathBuf, TrainSummary, Value) {
    let dir = common::scratch(&format!("{name}-{}", std::process::id()));
    let summary = trainer(&dir, text)
        .expect("the checks pass")
        .train()
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let iteration = metrics(&dir)
        .into_iter()
        .find(|line| line["iteration"] == 1)
        .expect("iteration 1's metrics");
    (dir, summary, iteration)
}

#[test]
fn a_failed_group_is_dropped_and_the_update_equals_a_run_on_the_surviving_tasks() {
    // `gamma`'s 4 episodes fail in `reset`, before any generation, so under `rounds` the others
    // draw exactly the samples a run without `gamma` draws, provided it takes the same tasks in
    // the same order: its 3 words are laid out so that its shuffle yields the failing run's order.
    let words = ["alpha", "beta", "gamma", "delta"];
    let surviving: Vec<&str> = TaskOrder::new(4, 5)
        .next_batch(4)
        .into_iter()
        .map(|i| words[i])
        .filter(|&word| word != "gamma")
        .collect();
    let mut reference_words = [""; 3];
    for (&word, slot) in surviving.iter().zip(TaskOrder::new(3, 5).next_batch(3)) {
        reference_words[slot] = word;
    }
    let (failing_dir, summary, failing) = train_one(
        "trainer-failed-group",
        &parity_run_file(
            &words,
            "fail_words = [\"gamma\"]",
            "max_episode_failure_rate = 0.5",
        ),
    );
    let (reference_dir, _, reference) = train_one(
        "trainer-failed-group-reference",
        &parity_run_file(&reference_words, "", ""),
    );

    assert_eq!(failing["episodes/failed"], 4.0, "gamma's group: {failing}");
    assert_eq!(failing["groups/dropped_failed"], 1.0, "{failing}");
    assert_eq!(reference["episodes/failed"], 0.0, "{reference}");
    assert_eq!(
        summary.failed,
        FailedCount {
            episodes: 4,
            groups: 1
        }
    );
    assert!(
        summary
            .render()
            .contains("failed episodes         4 (1 prompt groups dropped)"),
        "{}",
        summary.render()
    );
    // 3 groups × 4 episodes × 2 calls trained, as in the reference.
    assert_eq!(failing["advantage/calls"], 24.0, "{failing}");
    for key in [
        "advantage/calls",
        "advantage/mean/first",
        "advantage/mean/second",
        "advantage/std/first",
        "advantage/std/second",
        "reward/mean",
        "grad_norm/group/shared",
    ] {
        assert_eq!(failing[key], reference[key], "{key}");
    }
    let checkpoint = |dir: &Path| dir.join("run/checkpoints/iteration_00001");
    assert!(
        weights(&checkpoint(&failing_dir), "shared")
            == weights(&checkpoint(&reference_dir), "shared"),
        "the update differs from the reference run's"
    );
}

#[test]
fn episodes_that_panic_or_time_out_are_dropped_under_each_schedule_and_scored_0_in_eval() {
    for (schedule, fault, timeout) in [("rounds", "panic", ""), ("async", "hang", "1")] {
        let mut rollout = format!("schedule = \"{schedule}\"\nmax_episode_failure_rate = 0.5");
        if !timeout.is_empty() {
            rollout.push_str(&format!("\nplugin_call_timeout_s = {timeout}"));
        }
        // `gamma` fails in its step, after its calls were generated.
        let text = parity_run_file(
            &["alpha", "beta", "gamma", "delta"],
            &format!("fail_words = [\"gamma\"], fail_in = \"step\", fault = \"{fault}\""),
            &rollout,
        )
        .replace(
            "train_data =",
            "eval_data = { path = \"alpha, gamma\" }\ntrain_data =",
        );
        let (dir, summary, line) = train_one(&format!("trainer-{fault}-episodes"), &text);
        assert_eq!(line["episodes/failed"], 4.0, "{fault}: {line}");
        assert_eq!(line["groups/dropped_failed"], 1.0, "{fault}: {line}");
        assert_eq!(line["advantage/calls"], 24.0, "{fault}: {line}");
        assert_eq!(summary.failed.episodes, 4, "{fault}");
        // samples.jsonl marks each call's episode; a failed one has no reward.
        let samples = std::fs::read_to_string(dir.join("run/samples.jsonl")).expect("samples");
        for sample in samples.lines() {
            let sample: Value = serde_json::from_str(sample).expect("a JSON line");
            match sample["failed"].as_bool() {
                Some(true) => assert_eq!(sample["reward"], 0.0, "{fault}: {sample}"),
                Some(false) => {}
                None => panic!("{fault}: no `failed` in {sample}"),
            }
        }
        // Evaluation: k = 2 samples of `gamma` fail, scored 0, before and after training.
        let evals: Vec<Value> = metrics(&dir)
            .into_iter()
            .filter(|l| l["eval/failed_episodes"].is_number())
            .collect();
        assert_eq!(evals.len(), 2, "{fault}: {evals:?}");
        for eval in &evals {
            assert_eq!(eval["eval/failed_episodes"], 2.0, "{fault}: {eval}");
            assert!(
                eval["eval/pass@2"].as_f64().is_some_and(|p| p <= 0.5),
                "{fault}: gamma never passes: {eval}"
            );
        }
    }
}

#[test]
fn failures_past_the_bound_stop_the_run_naming_counts_bound_and_first_failure() {
    let words = ["alpha", "beta", "gamma", "delta"];
    let run = |params: &str, rollout: &str| {
        let dir = common::scratch(&format!("trainer-failure-bound-{}", std::process::id()));
        let error = trainer(&dir, &parity_run_file(&words, params, rollout))
            .expect("the checks pass")
            .train()
            .expect_err("too many failures");
        let metrics_file = dir.join("run/metrics.jsonl");
        let lines = std::fs::read_to_string(&metrics_file).unwrap_or_default();
        assert!(lines.is_empty(), "iteration 1 is dropped: {lines}");
        format!("{error:#}")
    };
    // The default: the first failure stops the run, as before, now naming the option.
    let error = run("fail_words = [\"gamma\"]", "");
    assert!(
        error.starts_with(
            "an episode failed, and [rollout] max_episode_failure_rate = 0 stops the run at the \
             first failure"
        ) && error.contains("episode of task `2`: resetting the environment on task `2`: ")
            && error.contains("environment `parity` of plugin `fixture` (")
            && error.ends_with("reset on `gamma`: asked to fail"),
        "{error}"
    );
    // 2 groups of 4 failing: 8 of 16 fit 0.5; the 5th failure is over 0.25.
    let error = run(
        "fail_words = [\"gamma\", \"beta\"]",
        "max_episode_failure_rate = 0.25",
    );
    assert!(
        error.starts_with(
            "5 of the rollout's 16 episodes failed, more than [rollout] \
             max_episode_failure_rate = 0.25 allows; the first failure: episode of task `"
        ) && error.contains("asked to fail"),
        "{error}"
    );
    // One failed episode in every group (4 of 16, within 0.5) leaves nothing to train on.
    let error = run(
        "fail_words = [\"alpha\", \"beta\", \"gamma\", \"delta\"], fail_once = true",
        "max_episode_failure_rate = 0.5",
    );
    assert!(
        error.starts_with(
            "every prompt group of iteration 1 has a failed episode (4 of 16 episodes failed), \
             so none is left to train on; the first failure: episode of task `"
        ),
        "{error}"
    );
}

#[test]
fn under_dynamic_sampling_a_failed_group_is_replaced_like_one_without_spread() {
    let dir = common::scratch(&format!("trainer-dynamic-failed-{}", std::process::id()));
    // 2 of the 5 words per rollout; `gamma`'s episodes fail in `reset` (4 of a rollout's 8).
    let text = run_file("shared", "shared", &group("shared", "llama"), 3)
        .replace(
            "name = \"parity\"",
            "name = \"parity\"\nparams = { fail_words = [\"gamma\"] }",
        )
        .replace("eval_data = { path = \"alpha, beta\" }\n", "")
        .replace(
            "[rollout]\n",
            "[algorithm.dynamic_sampling]\nenabled = true\nmax_rollout_batches = 3\n\n\
             [rollout]\nmax_episode_failure_rate = 0.5\n",
        );
    trainer(&dir, &text)
        .expect("trainer")
        .train()
        .expect("three iterations");
    let lines = metrics(&dir);
    assert_eq!(lines.len(), 3);
    let mut dropped_in_all = 0.0;
    for line in &lines {
        let number = |key: &str| {
            line[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {line}"))
        };
        let (generated, kept, dropped) = (
            number("dynamic_sampling/generated_groups"),
            number("dynamic_sampling/kept_groups"),
            number("groups/dropped_failed"),
        );
        assert_eq!(number("episodes/failed"), dropped * 4.0, "{line}");
        assert!(kept <= 2.0 && kept + dropped <= generated, "{line}");
        // A dropped group is replaced by a further rollout, within the cap of 3.
        if dropped > 0.0 {
            assert!(generated >= 4.0, "{line}");
        }
        if kept < 2.0 {
            assert_eq!(generated, 6.0, "a short batch only at the cap: {line}");
        }
        // Failed episodes made no calls; only the kept groups' calls are trained on.
        assert_eq!(number("calls/first"), (generated - dropped) * 4.0, "{line}");
        assert_eq!(number("advantage/calls"), kept * 4.0 * 2.0, "{line}");
        dropped_in_all += dropped;
    }
    // 6 or more of the 5 words drawn: `gamma` among them.
    assert!(dropped_in_all >= 1.0, "{lines:?}");
}
