//! Run files are checked end to end before any work: the demo config resolves completely, and
//! each kind of mistake fails with a message naming what is wrong.

mod common;

use std::sync::OnceLock;

use drmas_host::config::{RunConfig, RunFile};
use drmas_host::plugins::{BuildProfile, Registry};

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        Registry::load_folder(
            &common::repo().join("plugins"),
            BuildProfile::Dev,
            drmas_host::plugins::ExternalLinks::Refuse,
        )
        .expect("plugins")
    })
}

fn demo_text() -> String {
    std::fs::read_to_string(common::repo().join("configs/demo.toml")).expect("demo config")
}

fn prepare(text: &str) -> Result<String, String> {
    let file = RunFile::from_text("run.toml", text, common::repo().join("configs"));
    let config = RunConfig::parse(&file).map_err(|e| e.to_string())?;
    drmas_host::preflight::prepare(&config, &file, registry())
        .map(|plan| plan.summary(&config))
        .map_err(|e| format!("{e:#}"))
}

#[test]
fn the_demo_config_resolves_every_part() {
    let summary = prepare(&demo_text()).expect("the demo config is valid");
    assert!(
        summary.contains("(2000 train tasks, 16 eval tasks)"),
        "{summary}"
    );
    assert!(summary.contains("role solver"), "{summary}");
    assert!(
        summary.contains(
            "SmolLM2-135M-Instruct.Q4_1.gguf (Llama), 30 layers, hidden 576, vocab 49152"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("estimator    drmas (built-in)"),
        "{summary}"
    );
}

#[test]
fn a_run_that_saves_nothing_is_noted() {
    assert_noted_only_when_set(
        ("save_every = 0\n", "save_every = -1\n"),
        "note: [run] save_every = -1: the run writes no checkpoint",
        "save_every",
    );
}

#[test]
fn offload_on_a_cpu_group_is_accepted_with_a_note_that_it_changes_nothing() {
    assert_noted_only_when_set(
        (
            "[worker_groups.shared]\n",
            "[worker_groups.shared]\noffload = true\n",
        ),
        "offload = true changes nothing here: the group is on the CPU",
        "offload",
    );
}

#[test]
fn a_lora_groups_adapters_are_named_in_the_summary() {
    assert_noted_only_when_set(
        (
            "micro_batch_size = 8\n",
            "micro_batch_size = 8\n\n[worker_groups.shared.lora]\nrank = 8\n",
        ),
        "  LoRA adapters solver, verifier (rank 8, alpha 32), fresh",
        "LoRA",
    );
}

#[test]
fn a_frozen_agent_is_named_in_the_summary() {
    assert_noted_only_when_set(
        (
            "role = \"verifier\"\n",
            "role = \"verifier\"\ntrain = false\n",
        ),
        "role verifier   ",
        "(not trained: train = false)",
    );
    let summary = prepare(&demo_text().replacen(
        "role = \"verifier\"\n",
        "role = \"verifier\"\ntrain = false\n",
        1,
    ))
    .expect("valid");
    let line = summary
        .lines()
        .find(|l| l.contains("role verifier"))
        .expect("the verifier's line");
    assert!(line.ends_with("(not trained: train = false)"), "{line}");
}

/// The demo run file with its first `from` replaced by `to` is accepted and its summary holds
/// `note`; the demo's own summary never mentions `key`.
fn assert_noted_only_when_set((from, to): (&str, &str), note: &str, key: &str) {
    let text = demo_text().replacen(from, to, 1);
    assert_ne!(text, demo_text(), "the demo holds no `{from}`");
    let summary = prepare(&text).expect("the changed demo is valid");
    assert!(summary.contains(note), "{summary}");
    let plain = prepare(&demo_text()).expect("the demo config is valid");
    assert!(!plain.contains(key), "{plain}");
}

#[test]
fn every_run_file_in_configs_is_ready() {
    let dir = common::repo().join("configs");
    let mut estimators = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("configs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("run file");
        let file = RunFile::from_text(path.display().to_string(), &text, dir.clone());
        let config = RunConfig::parse(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        drmas_host::preflight::prepare(&config, &file, registry())
            .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        estimators.insert(config.algorithm.estimator.get_ref().clone());
    }
    for algorithm in ["drmas", "grpo", "dr_grpo", "gigpo", "ppo"] {
        assert!(
            estimators.contains(algorithm),
            "no run file in configs/ trains with `{algorithm}`: {estimators:?}"
        );
    }
}

#[test]
fn every_built_in_estimator_is_ready_in_the_demo_run_file() {
    for estimator in drmas_host::advantage::names() {
        let mut text = demo_text().replace(
            "estimator = \"drmas\"",
            &format!("estimator = \"{estimator}\""),
        );
        if estimator == "dr_grpo" {
            text = text.replace(
                "[algorithm.loss]\n",
                "[algorithm.loss]\naggregation = \"seq-mean-token-sum-norm\"\n",
            );
        }
        let summary = prepare(&text).unwrap_or_else(|e| panic!("{estimator}: {e}"));
        assert!(
            summary.contains(&format!("estimator    {estimator} (built-in)")),
            "{estimator}: {summary}"
        );
    }
}

#[test]
fn an_unknown_agent_is_named_with_suggestions() {
    let error = prepare(&demo_text().replace("agent = \"Solver Agent\"", "agent = \"Solver\""))
        .expect_err("bad agent");
    assert!(
        error.contains("no plugin offers the agent `Solver`, did you mean `Solver Agent`"),
        "{error}"
    );
}

#[test]
fn a_role_the_orchestra_lacks_or_leaves_unfilled_is_an_error() {
    let error = prepare(&demo_text().replace("role = \"verifier\"", "role = \"critic\""))
        .expect_err("bad role");
    assert!(
        error.contains("orchestra `math` has no role `critic`; its roles: [solver, verifier]"),
        "{error}"
    );

    let text = demo_text();
    let start = text
        .find("[[agents]]\nrole = \"verifier\"")
        .expect("verifier section");
    let end = text.find("[worker_groups.shared]").expect("groups");
    let without_verifier = format!("{}{}", &text[..start], &text[end..]);
    let error = prepare(&without_verifier).expect_err("unfilled role");
    assert!(
        error.contains("needs an agent in role `verifier`"),
        "{error}"
    );
}

#[test]
fn an_unknown_estimator_lists_the_valid_ones_with_its_location() {
    let error = prepare(&demo_text().replace("estimator = \"drmas\"", "estimator = \"dr_mas\""))
        .expect_err("bad estimator");
    let line = demo_text()
        .lines()
        .position(|l| l.starts_with("estimator = "))
        .expect("the demo names an estimator")
        + 1;
    assert!(error.starts_with(&format!("run.toml:{line}:13")), "{error}");
    assert!(
        error.contains("grpo") && error.contains("rloo") && error.contains("drmas"),
        "{error}"
    );
}

#[test]
fn dr_grpo_is_refused_without_its_loss_aggregation() {
    let text = demo_text().replace("estimator = \"drmas\"", "estimator = \"dr_grpo\"");
    let error = prepare(&text).expect_err("token-mean with dr_grpo");
    assert!(
        error.contains("set `aggregation = \"seq-mean-token-sum-norm\"`"),
        "{error}"
    );
    let text = text.replace(
        "[algorithm.loss]\n",
        "[algorithm.loss]\naggregation = \"seq-mean-token-sum-norm\"\n",
    );
    let summary = prepare(&text).expect("dr_grpo with its aggregation");
    assert!(summary.contains("estimator    dr_grpo"), "{summary}");
}

#[test]
fn a_kl_term_without_a_reference_is_refused_at_its_line() {
    let text = demo_text().replace("[algorithm.loss]\n", "[algorithm.loss]\nkl_coef = 0.05\n");
    let error = prepare(&text).expect_err("no reference for the KL term");
    let line = demo_line(&text, "kl_coef = 0.05");
    assert!(
        error.contains(&format!(
            "run.toml:{line}:11: kl_coef = 0.05 for agent `solver` needs a reference model, and \
             worker group `shared` has none"
        )),
        "{error}"
    );
    // An agent's own coefficient is named at its own line.
    let text = demo_text().replace(
        "max_new_tokens = 8\n",
        "max_new_tokens = 8\nkl_coef = 0.1\n",
    );
    let error = prepare(&text).expect_err("no reference for the verifier's KL term");
    let line = demo_line(&text, "kl_coef = 0.1");
    assert!(
        error.contains(&format!(
            "run.toml:{line}:11: kl_coef = 0.1 for agent `verifier`"
        )),
        "{error}"
    );
    // With a reference model the term is accepted; a reference model nothing reads is a
    // warning.
    let with_reference = |text: &str| {
        text.replace(
            "[worker_groups.shared]\n",
            "[worker_groups.shared]\nreference_model = \"builtin:smollm2-135m\"\n",
        )
    };
    let summary = prepare(&with_reference(&text)).expect("a KL term to the reference model");
    assert!(!summary.contains("warning"), "{summary}");
    let summary = prepare(&with_reference(&demo_text())).expect("an unread reference");
    assert!(
        summary.contains(
            "warning: run.toml: worker group `shared` loads reference_model \
             `builtin:smollm2-135m`, but no agent on it has kl_coef > 0"
        ),
        "{summary}"
    );
}

#[test]
fn the_kl_in_the_reward_without_a_reference_is_refused_at_its_line() {
    let text = format!("{}\n[algorithm.kl_in_reward]\ncoef = 0.02\n", demo_text());
    let error = prepare(&text).expect_err("no reference for the KL in the reward");
    let line = demo_line(&text, "coef = 0.02");
    assert!(
        error.contains(&format!(
            "run.toml:{line}:8: [algorithm.kl_in_reward] coef = 0.02 needs a reference model for \
             every worker group, and `shared` has none"
        )),
        "{error}"
    );
    // With a reference model it is accepted, and the reference counts as read.
    let text = text.replace(
        "[worker_groups.shared]\n",
        "[worker_groups.shared]\nreference_model = \"builtin:smollm2-135m\"\n",
    );
    let summary = prepare(&text).expect("the KL in the reward against the reference model");
    assert!(!summary.contains("warning"), "{summary}");
    assert!(
        summary.contains(
            "kl penalty   in the reward: β = 0.02 (fixed) × k1 against each worker group's \
             reference"
        ),
        "{summary}"
    );
}

#[test]
fn a_warmup_longer_than_the_run_is_a_warning() {
    let warned = |text: &str| {
        prepare(text)
            .expect("a warning, not an error")
            .contains("warmup_steps = 24 is longer than the run's")
    };
    let text = demo_text().replace("warmup_steps = 2", "warmup_steps = 24");
    assert!(warned(&text), "12 iterations of one step each");
    let text = text.replace("[algorithm.loss]\n", "[algorithm.loss]\nmini_batches = 2\n");
    assert!(!warned(&text), "24 steps: the last one at the peak");
}

#[test]
fn a_missing_model_file_is_named() {
    let error = prepare(&demo_text().replace("builtin:smollm2-135m", "models/missing.gguf"))
        .expect_err("no model");
    assert!(
        error.contains("models/missing.gguf does not exist"),
        "{error}"
    );
}

#[test]
fn a_dataset_error_names_the_run_file_and_the_section() {
    let error = prepare(&demo_text().replace("split = \"test\"", "split = \"dev\""))
        .expect_err("bad split");
    assert!(
        error.starts_with("run.toml: [environment] eval_data: ") && error.contains("`dev`"),
        "{error}"
    );
}

/// The 1-based line of the first line of the demo config that starts with `prefix`.
fn demo_line(text: &str, prefix: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with(prefix))
        .expect("the line is there")
        + 1
}

#[test]
fn sampling_settings_out_of_range_name_the_agent_and_line() {
    let text = demo_text().replace(
        "max_new_tokens = 8\n",
        "max_new_tokens = 8\ntemperature = -0.5\ntop_p = 0\n",
    );
    let error = prepare(&text).expect_err("bad sampling");
    let line = demo_line(&text, "temperature = -0.5");
    assert!(
        error.contains(&format!(
            "run.toml:{line}:15: [[agents]] role `verifier`: temperature = -0.5 must be 0 (greedy) or a finite number ≥ 1e-6"
        )),
        "{error}"
    );
    assert!(
        error.contains(&format!(
            "run.toml:{}:9: [[agents]] role `verifier`: top_p = 0 must be a number in (0, 1]",
            line + 1
        )),
        "{error}"
    );
}

#[test]
fn a_response_that_leaves_no_room_in_the_model_context_is_refused_from_the_header() {
    let text = demo_text().replace("max_new_tokens = 48", "max_new_tokens = 8192");
    let error = prepare(&text).expect_err("too long");
    let line = demo_line(&text, "max_new_tokens = 8192");
    assert!(
        error.starts_with(&format!("run.toml:{line}:18: role `solver`: ")),
        "{error}"
    );
    assert!(
        error.contains("8192 new tokens leave no room for a prompt in the 8192 positions"),
        "{error}"
    );
    let fits = demo_text().replace("max_new_tokens = 48", "max_new_tokens = 8000");
    prepare(&fits).expect("prompts of up to 192 tokens fit: a warning, not an error");
}

#[test]
fn a_cuda_device_this_build_cannot_use_is_refused() {
    let devices = if tch::Cuda::is_available() {
        tch::Cuda::device_count()
    } else {
        0
    };
    let text = demo_text().replace("device = \"cpu\"", &format!("device = \"cuda:{devices}\""));
    let error = prepare(&text).expect_err("no such device");
    let line = demo_line(&text, "device = ");
    assert!(
        error.starts_with(&format!(
            "run.toml:{line}:10: [worker_groups.shared] device = \"cuda:{devices}\": "
        )),
        "{error}"
    );
    // What to do: the CPU, the GPU build, or one of the devices there are.
    assert!(
        error.contains("set device = \"cpu\"") || error.contains("pick one of those"),
        "{error}"
    );
}

mod output_dir {
    use drmas_host::config::{RunConfig, RunFile};
    use drmas_host::preflight::{check_output_dir, Intent};

    use super::demo_text;

    /// The demo config with `output_dir`, checked for `intent` (the run file lives in `dir`).
    fn check(dir: &std::path::Path, output_dir: &str, intent: Intent) -> Result<(), String> {
        let text = demo_text().replace("\"../runs/demo\"", &format!("\"{output_dir}\""));
        let file = RunFile::from_text("run.toml", text, dir.to_owned());
        let config = RunConfig::parse(&file).map_err(|e| e.to_string())?;
        check_output_dir(&config, &file, intent)
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn a_file_or_an_unwritable_place_is_refused_with_the_line() {
        let root = crate::common::scratch("preflight-output-dir-place");
        std::fs::write(root.join("taken"), "a file").expect("writes");
        let error = check(&root, "taken/run", Intent::Train).expect_err("a file");
        assert!(error.starts_with("run.toml:6:14: output_dir "), "{error}");
        assert!(error.contains("taken is a file, not a folder"), "{error}");

        // /proc refuses new files even to root, where permission bits would not.
        let error = check(&root, "/proc/drmas-run", Intent::Eval).expect_err("read-only");
        assert!(error.contains("cannot write in /proc"), "{error}");

        check(&root, "new/run", Intent::Train).expect("a folder that can be made");
        assert!(!&root.join("new").exists(), "check creates nothing");
    }

    #[test]
    fn a_finished_run_is_refused_unless_resumed_and_an_unfinished_one_is_reused() {
        let root = crate::common::scratch("preflight-output-dir-run");
        let run = root.join("run");
        std::fs::create_dir(&run).expect("mkdir");
        std::fs::write(run.join("metrics.jsonl"), "{\"iteration\":0}\n").expect("writes");
        check(&root, "run", Intent::Train).expect("no iteration finished: not a run");

        std::fs::write(
            run.join("metrics.jsonl"),
            "{\"iteration\":0}\n{\"iteration\":1}\n",
        )
        .expect("writes");
        let error = check(&root, "run", Intent::Train).expect_err("holds a run");
        assert!(
            error.contains("already holds a run (iteration 1 finished there); pass --resume"),
            "{error}"
        );
        check(&root, "run", Intent::Resume).expect("resuming is what the run is for");
        check(&root, "run", Intent::Eval).expect("evaluating beside a run is fine");
    }
}

#[test]
fn a_typo_in_a_components_params_names_the_run_files_line() {
    let text = demo_text().replace(
        "response_prefix = \"<verify>\"",
        "respones_prefix = \"<verify>\"",
    );
    let line = 1 + text[..text.find("respones_prefix").expect("the typo")]
        .matches('\n')
        .count();
    let error = prepare(&text).expect_err("a typo in the verifier's params");
    assert!(
        error.starts_with(&format!("run.toml:{line}:")),
        "names line {line}: {error}"
    );
    assert!(
        error.contains("agent `Verifier Agent` of plugin `math`")
            && error.contains("unknown field `respones_prefix`"),
        "{error}"
    );
}

#[test]
fn an_agent_whose_actions_its_role_refuses_is_a_warning() {
    let summary = prepare(&demo_text().replace(
        "agent = \"Verifier Agent\"",
        "agent = \"Search Verifier Agent\"",
    ))
    .expect("a warning, not an error");
    assert!(
        summary.contains(
            "warning: run.toml: agent `Search Verifier Agent` in role `verifier` declares the \
             actions yes | no, but orchestra `math` accepts approve | reject there"
        ),
        "{summary}"
    );
    assert!(!prepare(&demo_text()).expect("the demo").contains("warning"));
}

/// The text of `text` with each number in turn (a run of digits with its sign, point and
/// exponent after `=`, `,` or `[`) replaced by each of `extremes`, with the number's place: its
/// line, and its section with the line up to it (the same key in two run files has the same
/// place there).
fn with_each_number_replaced<'a>(
    text: &'a str,
    extremes: &'a [&'static str],
) -> impl Iterator<Item = (usize, String, &'static str, String)> + 'a {
    let bytes = text.as_bytes();
    let in_number = |b: u8| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'_');
    let starts = (0..bytes.len()).filter(move |&at| {
        bytes[at].is_ascii_digit()
            && at > 0
            && matches!(bytes[at - 1], b' ' | b'[' | b'-')
            && text[..at]
                .trim_end_matches(['-', ' '])
                .ends_with(['=', ',', '['])
    });
    starts.flat_map(move |at| {
        let start = if bytes[at - 1] == b'-' { at - 1 } else { at };
        let end = (at..bytes.len())
            .find(|&i| !in_number(bytes[i]))
            .unwrap_or(bytes.len());
        let before = &text[..start];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let section = before
            .lines()
            .rev()
            .find(|line| line.starts_with('['))
            .unwrap_or("");
        let place = format!("{section} {}", &before[line_start..]);
        let line = before.lines().count();
        extremes.iter().map(move |extreme| {
            let changed = format!("{before}{extreme}{}", &text[end..]);
            (line, place.clone(), *extreme, changed)
        })
    })
}

#[test]
fn every_number_of_every_run_file_set_to_an_extreme_is_refused_or_taken_never_a_panic() {
    // Zero, negative, past u32 and i64, huge, subnormal and non-finite.
    let extremes = [
        "0",
        "-1",
        "4294967296",
        "9223372036854775807",
        "1e308",
        "5e-324",
        "nan",
        "-inf",
    ];
    let mut files: Vec<_> = std::fs::read_dir(common::repo().join("configs"))
        .expect("configs/ lists")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut seen = std::collections::BTreeSet::new();
    let mut panics = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("reads");
        for (line, place, extreme, changed) in with_each_number_replaced(&text, &extremes) {
            // A key already tried in an earlier run file is not tried again.
            if !seen.insert((place, extreme)) {
                continue;
            }
            if std::panic::catch_unwind(|| prepare(&changed)).is_err() {
                panics.push(format!("{}:{line}: {extreme}", path.display()));
            }
        }
    }
    assert!(seen.len() > 250, "keys × extremes tried: {}", seen.len());
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
}
