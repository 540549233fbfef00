//! The cargo-generate templates (agent and estimator, orchestra, environment), expanded with the
//! real `cargo generate`, built, tested, loaded by the host and trained together for an
//! iteration; the agent plugin built against another SDK version, refused with a short message;
//! its estimator under a built-in's name, refused naming both; and the estimator example of
//! docs/plugins.md, built and loaded as it is written there.

mod common;

use std::path::{Path, PathBuf};

use drmas_host::advantage::Sample;
use drmas_host::config::RunConfig;
use drmas_host::plugins::Registry;
use drmas_host::trainer::Trainer;
use drmas_sdk::AgentContext;

/// Builds of generated plugins share one target dir, so reruns are incremental.
fn plugin_target() -> PathBuf {
    common::repo().join("target").join("e2e-plugins")
}

/// Expands `templates/TEMPLATE` into `parent/name` with the SDK at `sdk` and the placeholder
/// values `defines`, builds it (and runs its tests when `run_its_tests`), returns the library.
fn generate_and_build(
    template: &str,
    parent: &Path,
    name: &str,
    sdk: &Path,
    defines: &[(&str, &str)],
    run_its_tests: bool,
) -> PathBuf {
    let generate_works = common::cargo()
        .args(["generate", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(generate_works, "cargo-generate is missing: scripts/test.sh installs it (cargo install cargo-generate@0.23.14 --locked)");
    let mut generate = common::cargo();
    generate
        .args(["generate", "--path"])
        // cargo-generate refuses to expand anything when it cannot name an author (no $USER,
        // as in containers and CI images); the templates have no author field, so any name do.
        .env("CARGO_NAME", "drmas template test")
        .arg(common::repo().join("templates").join(template))
        .args(["--name", name, "--silent", "--vcs", "none", "--destination"])
        .arg(parent)
        .arg("--define")
        .arg(format!("sdk_path={}", sdk.display()));
    for (key, value) in defines {
        generate.arg("--define").arg(format!("{key}={value}"));
    }
    common::run(&mut generate);
    let crate_dir = parent.join(name);
    assert!(
        crate_dir.join(".gitignore").is_file(),
        "the {template} template ships a .gitignore"
    );
    let manifest = crate_dir.join("Cargo.toml");
    let library = build(&manifest, name);
    if run_its_tests {
        let mut test = common::cargo();
        test.args(["test", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", plugin_target());
        common::run(&mut test);
    }
    library
}

/// The agent template (an agent and an estimator named `estimator`), expanded and built.
fn generate_agent_plugin(
    parent: &Path,
    name: &str,
    sdk: &Path,
    estimator: &str,
    run_its_tests: bool,
) -> PathBuf {
    generate_and_build(
        "agent",
        parent,
        name,
        sdk,
        &[
            ("agent_name", "Template Agent"),
            ("estimator_name", estimator),
        ],
        run_its_tests,
    )
}

/// Builds the plugin crate of `manifest`, named `name`; returns its library.
fn build(manifest: &Path, name: &str) -> PathBuf {
    let mut build = common::cargo();
    build
        .args(["build", "--lib", "--manifest-path"])
        .arg(manifest)
        .env("CARGO_TARGET_DIR", plugin_target());
    common::run(&mut build);
    plugin_target()
        .join("debug")
        .join(format!("lib{}.so", name.replace('-', "_")))
}

#[test]
fn a_generated_agent_plugin_builds_passes_its_tests_and_loads() {
    let parent = common::scratch("template");
    let library = generate_agent_plugin(
        &parent,
        "tpl-agent",
        &common::repo().join("sdk"),
        "template_estimator",
        true,
    );

    let mut registry = Registry::default();
    registry
        .load_file(&library)
        .expect("the generated plugin loads");
    let agent = registry
        .agent("Template Agent", "")
        .expect("its agent builds");
    let context = AgentContext {
        question: "What is 2 + 2?".into(),
        ..AgentContext::default()
    };
    assert!(agent.messages(&context).expect("messages")[1]
        .content
        .contains("What is 2 + 2?"));
    let parsed = agent.parse("<answer>4</answer>").expect("parse");
    assert_eq!((parsed.action.as_str(), parsed.valid), ("4", true));

    // Its estimator: scale × (reward − the prompt group's mean), through the host.
    let params: toml::Table = toml::from_str("scale = 0.5").expect("params");
    let estimator = registry
        .estimator("template_estimator", &params)
        .expect("its estimator builds");
    let call = |uid, trajectory| Sample {
        uid,
        trajectory,
        ..Sample::default()
    };
    let samples = [call(0, 0), call(0, 1), call(0, 2), call(1, 3)];
    assert_eq!(
        estimator
            .advantages(&samples, &[3.0, 0.0, 0.0, 4.0])
            .expect("advantages"),
        [1.0, -0.5, -0.5, 0.0]
    );
}

#[test]
fn generated_orchestra_and_environment_plugins_train_an_iteration_with_the_agent() {
    let parent = common::scratch("template-team");
    let sdk = common::repo().join("sdk");
    let libraries = [
        generate_agent_plugin(&parent, "tpl-team-agent", &sdk, "team_estimator", false),
        generate_and_build(
            "orchestra",
            &parent,
            "tpl-orchestra",
            &sdk,
            &[("orchestra_name", "tpl-review")],
            true,
        ),
        generate_and_build(
            "environment",
            &parent,
            "tpl-environment",
            &sdk,
            &[("environment_name", "tpl-quiz")],
            true,
        ),
    ];
    let mut registry = Registry::default();
    for library in &libraries {
        registry
            .load_file(library)
            .expect("a generated plugin loads");
    }

    let run = parent.join("run");
    std::fs::create_dir_all(&run).expect("mkdir");
    let tasks: String = (1..=4)
        .map(|n| {
            format!(
                "{{\"id\": \"{n}\", \"question\": \"{n} + {n}?\", \"answer\": \"{}\"}}\n",
                2 * n
            )
        })
        .collect();
    std::fs::write(run.join("quiz.jsonl"), tasks).expect("write tasks");
    let text = format!(
        r#"
[run]
output_dir = "out"
seed = 2
iterations = 1
save_every = 0

[environment]
name = "tpl-quiz"
train_data = {{ path = "quiz.jsonl" }}
params = {{ max_tries = 2 }}

[orchestra]
name = "tpl-review"
params = {{ pay_reviewer = true }}

[[agents]]
role = "proposer"
agent = "Template Agent"
worker_group = "shared"
max_new_tokens = 4

[[agents]]
role = "reviewer"
agent = "Template Agent"
worker_group = "shared"
max_new_tokens = 4

[worker_groups.shared]
model = "{}"
learning_rate = 1e-3

[algorithm]
estimator = "team_estimator"

[rollout]
prompts_per_batch = 2
group_size = 2
max_response_tokens = 8
"#,
        common::repo()
            .join("host/tests/fixtures/hf/llama")
            .display()
    );
    let path = run.join("run.toml");
    std::fs::write(&path, text).expect("write run.toml");
    let (config, file) = RunConfig::load(&path).expect("run file");
    let plan = drmas_host::preflight::prepare(&config, &file, &registry)
        .expect("the generated components pass the checks");
    Trainer::new(config, &file, plan)
        .expect("trainer")
        .train()
        .expect("one iteration");
    let metrics = std::fs::read_to_string(run.join("out/metrics.jsonl")).expect("metrics");
    for key in [
        "\"env/correct\"",
        "\"env/tries\"",
        "\"calls/proposer\"",
        "\"contract_break_rate/reviewer\"",
    ] {
        assert!(metrics.contains(key), "{key} in {metrics}");
    }
}

#[test]
fn an_estimator_named_like_a_built_in_is_refused_naming_both() {
    let parent = common::scratch("template-builtin-name");
    let library = generate_agent_plugin(
        &parent,
        "grpo-clash",
        &common::repo().join("sdk"),
        "grpo",
        false,
    );
    let error = Registry::default()
        .load_file(&library)
        .expect_err("must be refused")
        .to_string();
    assert!(
        error.contains("plugin `grpo-clash`")
            && error.contains("libgrpo_clash.so")
            && error
                .contains("offers an estimator named `grpo`, but `grpo` is a built-in estimator")
            && error.contains("rename the plugin's estimator"),
        "{error}"
    );
}

#[test]
fn a_plugin_built_against_another_sdk_version_is_refused_with_a_short_message() {
    let host = drmas_sdk::SDK_VERSION;
    let (major, rest) = host.split_once('.').expect("major.minor.patch");
    let minor: u32 = rest
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .expect("a numeric minor version");
    // An older release (what a plugin built before the last ABI change has) and a newer one.
    let others = [minor.checked_sub(1), Some(minor + 1)];
    for other in others.into_iter().flatten() {
        let other = format!("{major}.{other}.0");
        let parent = common::scratch(&format!("sdk-{other}"));
        // A copy of the SDK whose version (the ABI version) is `other`.
        let sdk = parent.join("sdk");
        std::fs::create_dir_all(sdk.join("src/ffi")).expect("mkdir");
        copy_tree(&common::repo().join("sdk"), &sdk);
        let manifest = sdk.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).expect("read sdk manifest");
        let text = text.replace(
            &format!("version = \"{host}\""),
            &format!("version = \"{other}\""),
        );
        std::fs::write(&manifest, text).expect("write sdk manifest");

        // A crate name per version: a library path the process opened once is never reopened.
        let name = format!("sdk-{}-agent", other.replace('.', "-"));
        let library = generate_agent_plugin(&parent, &name, &sdk, "my_estimator", false);
        let error = Registry::default()
            .load_file(&library)
            .expect_err("must be refused")
            .to_string();
        assert!(
            error.contains(&format!(
                "was built against drmas-sdk {other}, but this host needs drmas-sdk {host}"
            )),
            "{error}"
        );
        assert!(
            error.contains(&format!("rebuild the plugin against drmas-sdk {host}")),
            "{error}"
        );
        assert!(
            error.lines().count() <= 2,
            "short, not abi_stable's layout dump: {error}"
        );
    }
}

/// Each ` ```rust ` block of docs/plugins.md as a whole plugin crate, built as written; returns
/// each plugin's name (from its `export_plugin!`) and library.
fn build_the_guides_examples() -> Vec<(String, PathBuf)> {
    let guide =
        std::fs::read_to_string(common::repo().join("docs/plugins.md")).expect("docs/plugins.md");
    let blocks: Vec<&str> = guide
        .split("```rust\n")
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("a block's end")])
        .collect();
    assert!(
        blocks.len() >= 4,
        "an agent, an orchestra, an environment, an estimator"
    );
    blocks
        .into_iter()
        .map(|code| {
            let name_at = code
                .find("export_plugin! { name: \"")
                .expect("an export_plugin!")
                + "export_plugin! { name: \"".len();
            let name = &code[name_at..name_at + code[name_at..].find('"').expect("name's end")];
            let crate_dir = common::scratch(&format!("guide-{name}"));
            std::fs::create_dir_all(crate_dir.join("src")).expect("mkdir");
            std::fs::write(crate_dir.join("src/lib.rs"), code).expect("write lib.rs");
            let manifest = crate_dir.join("Cargo.toml");
            std::fs::write(
                &manifest,
                format!(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                     [lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\n\
                     drmas-sdk = {{ path = \"{}\" }}\n\
                     serde = {{ version = \"1\", features = [\"derive\"] }}\n\n[workspace]\n",
                    common::repo().join("sdk").display()
                ),
            )
            .expect("write Cargo.toml");
            (name.to_owned(), build(&manifest, name))
        })
        .collect()
}

#[test]
fn the_guides_examples_build_and_load_as_written() {
    let mut registry = Registry::default();
    for (name, library) in build_the_guides_examples() {
        registry
            .load_file(&library)
            .unwrap_or_else(|e| panic!("the guide's `{name}` loads: {e}"));
    }
    let judge = registry
        .agent("Guide Judge", "prefix = true")
        .expect("the agent");
    assert_eq!(
        judge.parse("<verdict> Yes</verdict>").expect("parse"),
        drmas_sdk::Parsed {
            action: "yes".into(),
            valid: true
        }
    );
    let roles = registry
        .orchestra("guide-drafts", "")
        .expect("the orchestra")
        .roles()
        .expect("roles");
    assert_eq!(roles[1], drmas_sdk::Role::one_of("judge", ["yes", "no"]));
    let environment = registry
        .environment("guide-backwards", "")
        .expect("the environment");
    let tasks = environment
        .load_tasks(&drmas_sdk::DatasetSpec {
            path: "builtin:animals".into(),
            ..Default::default()
        })
        .expect("tasks");
    let mut reset = environment.reset(&tasks[0]).expect("reset");
    assert_eq!(reset.episode.step("retto").expect("step").reward, 1.0);
    let estimator = registry
        .estimator("loo_baseline", &toml::Table::new())
        .expect("its estimator builds");
    let call = |uid, padding| Sample {
        uid,
        padding,
        ..Sample::default()
    };
    let samples = [
        call(0, false),
        call(0, false),
        call(0, false),
        call(1, false),
        call(0, true),
    ];
    // Group 0: 1 − (0 + 0.5)/2, 0 − (1 + 0.5)/2, 0.5 − (1 + 0)/2; group 1 is too small.
    assert_eq!(
        estimator
            .advantages(&samples, &[1.0, 0.0, 0.5, 2.0, 9.0])
            .expect("advantages"),
        [0.75, -0.75, 0.0, 0.0, 0.0]
    );
    let error = registry
        .estimator(
            "loo_baseline",
            &toml::from_str("min_group = 1").expect("toml"),
        )
        .expect_err("refused")
        .to_string();
    assert!(error.contains("min_group must be at least 2"), "{error}");
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
