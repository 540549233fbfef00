//! The cargo-generate template, expanded with the real `cargo generate`, built, tested, and loaded
//! by the host; and the same plugin built against a modified SDK, refused with a short message.

mod common;

use std::path::{Path, PathBuf};

use drmas_host::plugins::Registry;
use drmas_sdk::AgentContext;

/// Builds of generated plugins share one target dir, so reruns are incremental.
fn plugin_target() -> PathBuf {
    common::repo().join("target").join("e2e-plugins")
}

/// Expands the template into `parent/name` with the SDK at `sdk`, builds it, returns the library.
fn generate_and_build(parent: &Path, name: &str, sdk: &Path, run_its_tests: bool) -> PathBuf {
    let generate_works = common::cargo()
        .args(["generate", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(generate_works, "cargo-generate is missing: scripts/test.sh installs it (cargo install cargo-generate@0.23.14 --locked)");
    common::run(
        common::cargo()
            .args(["generate", "--path"])
            // cargo-generate refuses to expand anything when it cannot name an author (no $USER,
            // as in containers and CI images); the template has no author field, so any name do.
            .env("CARGO_NAME", "drmas template test")
            .arg(common::repo().join("templates/agent"))
            .args(["--name", name, "--silent", "--vcs", "none", "--destination"])
            .arg(parent)
            .args(["--define", "agent_name=Template Agent", "--define"])
            .arg(format!("sdk_path={}", sdk.display())),
    );
    let crate_dir = parent.join(name);
    let manifest = crate_dir.join("Cargo.toml");
    let mut build = common::cargo();
    build
        .args(["build", "--lib", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", plugin_target());
    common::run(&mut build);
    if run_its_tests {
        let mut test = common::cargo();
        test.args(["test", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", plugin_target());
        common::run(&mut test);
    }
    plugin_target()
        .join("debug")
        .join(format!("lib{}.so", name.replace('-', "_")))
}

#[test]
fn a_generated_agent_plugin_builds_passes_its_tests_and_loads() {
    let parent = common::scratch("template");
    let library = generate_and_build(&parent, "tpl-agent", &common::repo().join("sdk"), true);

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
}

#[test]
fn a_plugin_built_against_another_sdk_version_is_refused_with_a_short_message() {
    let parent = common::scratch("old-sdk");
    // A copy of the SDK whose version (the ABI version) was bumped, as a future release would be.
    let sdk = parent.join("sdk");
    std::fs::create_dir_all(sdk.join("src/ffi")).expect("mkdir");
    copy_tree(&common::repo().join("sdk"), &sdk);
    let manifest = sdk.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("read sdk manifest");
    let text = text
        .replace("version = \"0.1.0\"", "version = \"0.2.0\"")
        .replace("[lints]\nworkspace = true\n", "");
    std::fs::write(&manifest, text).expect("write sdk manifest");

    let library = generate_and_build(&parent, "other-sdk-agent", &sdk, false);
    let error = Registry::default()
        .load_file(&library)
        .expect_err("must be refused")
        .to_string();
    assert!(
        error.contains("was built against drmas-sdk 0.2.0, but this host needs drmas-sdk 0.1.0"),
        "{error}"
    );
    assert!(
        error.contains("rebuild the plugin against drmas-sdk 0.1.0"),
        "{error}"
    );
    assert!(
        error.lines().count() <= 2,
        "short, not abi_stable's layout dump: {error}"
    );
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
