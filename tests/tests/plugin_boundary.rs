//! The plugin boundary through real libraries: loading, listing, calling, and every error a user
//! can meet (bad config, unknown names, duplicates, panics, a plugin built against another SDK,
//! an estimator's wrong answers).

mod common;

use drmas_host::advantage::Sample;
use drmas_host::plugins::{BuildProfile, ExternalLinks, Registry};
use drmas_sdk::{AgentContext, AgentOutput, DatasetSpec, Next};

#[test]
fn a_loaded_plugin_lists_its_components_and_they_work() {
    let registry = common::fixture_registry();
    let listing = drmas_host::list_components(&registry);
    assert!(
        listing.contains(&format!(
            "plugin fixture 0.3.1 (drmas-sdk {})",
            drmas_sdk::SDK_VERSION
        )),
        "{listing}"
    );
    assert!(listing.contains("Shout Agent"), "{listing}");
    assert!(listing.contains("relay"), "{listing}");
    assert!(listing.contains("words"), "{listing}");
    // Plugin estimators next to the built-in ones, each saying where it comes from.
    let row = |kind: &str, name: &str, source: &str| {
        listing
            .lines()
            .any(|line| line.split_whitespace().take(3).eq([kind, name, source]))
    };
    assert!(row("estimator", "sign", "fixture"), "{listing}");
    assert!(row("estimator", "faulty", "fixture"), "{listing}");
    for builtin in drmas_host::advantage::names() {
        assert!(
            row("estimator", builtin, "built-in"),
            "{builtin}: {listing}"
        );
    }

    let agent = registry
        .agent("Shout Agent", "prefix = \"Hey:\"")
        .expect("agent");
    let context = AgentContext {
        observation: "cat".into(),
        ..AgentContext::default()
    };
    let messages = agent.messages(&context).expect("messages");
    assert_eq!(messages[1].content, "Hey: cat");
    assert_eq!(messages[0].role, "system");
    let parsed = agent.parse("cat").expect("parse");
    assert_eq!((parsed.action.as_str(), parsed.valid), ("CAT", false));

    // A whole episode through the three foreign components.
    let environment = registry.environment("words", "").expect("environment");
    let orchestra = registry.orchestra("relay", "").expect("orchestra");
    assert_eq!(
        orchestra.roles().expect("roles"),
        [drmas_sdk::Role::text("speaker")]
    );
    let spec = DatasetSpec {
        path: "dog, owl".into(),
        ..DatasetSpec::default()
    };
    let tasks = environment.load_tasks(&spec).expect("tasks");
    assert_eq!(tasks.len(), 2);
    let mut reset = environment.reset(&tasks[1]).expect("reset");
    let mut routing = orchestra.start(&tasks[1]).expect("start");
    routing
        .on_observation(&reset.observation)
        .expect("observation");
    let Next::Act { role, context } = routing.next().expect("next") else {
        panic!("expected a call")
    };
    assert_eq!(
        (role.as_str(), context.observation.as_str()),
        ("speaker", "owl")
    );
    let parsed = agent.parse(&context.observation).expect("parse");
    let output = AgentOutput {
        raw: context.observation.clone(),
        action: parsed.action,
        valid: parsed.valid,
    };
    routing.observe(&role, &output).expect("observe");
    let Next::Submit { action } = routing.next().expect("next") else {
        panic!("expected a submit")
    };
    let step = reset.episode.step(&action).expect("step");
    assert_eq!((step.reward, step.done), (1.0, true));
    assert_eq!(step.metrics[0].name, "length");
}

#[test]
fn a_panicking_plugin_call_becomes_an_error_and_the_host_goes_on() {
    let registry = common::fixture_registry();
    let agent = registry.agent("Shout Agent", "").expect("agent");
    let error = agent.parse("panic").expect_err("must fail").to_string();
    assert!(
        error.contains("agent `Shout Agent` of plugin `fixture`"),
        "{error}"
    );
    assert!(
        error.contains("panicked in parse: asked to panic (at tests/fixture-plugin/src/lib.rs:"),
        "the panic's location comes with it: {error}"
    );
    // Still usable afterwards.
    assert_eq!(agent.parse("ok").expect("parse").action, "OK");

    let error = agent.parse("error").expect_err("must fail").to_string();
    assert!(error.ends_with("parse: asked to fail"), "{error}");
}

#[test]
fn component_config_errors_name_the_component_and_the_key() {
    let registry = common::fixture_registry();
    let error = registry
        .agent("Shout Agent", "prefx = \"x\"")
        .expect_err("must fail")
        .to_string();
    assert!(
        error.contains("cannot build agent `Shout Agent` of plugin `fixture`"),
        "{error}"
    );
    assert!(error.contains("unknown field `prefx`"), "{error}");
    assert!(error.contains("line 1, column 1"), "{error}");

    let error = registry
        .environment("words", "fail = true")
        .expect_err("must fail")
        .to_string();
    assert!(error.contains("environment `words`"), "{error}");
    assert!(error.contains("configured to fail"), "{error}");
}

#[test]
fn an_unknown_component_suggests_close_names() {
    let registry = common::fixture_registry();
    let error = registry
        .agent("Shout", "")
        .expect_err("must fail")
        .to_string();
    assert!(
        error.contains("no plugin offers the agent `Shout`, did you mean `Shout Agent`?"),
        "{error}"
    );
    let error = registry
        .orchestra("zzz", "")
        .expect_err("must fail")
        .to_string();
    assert!(error.contains("(available: `pair`, `relay`)"), "{error}");
}

#[test]
fn two_plugins_offering_one_name_are_both_named() {
    let folder = common::scratch("duplicates");
    let first = folder.join("liba.so");
    let second = folder.join("libb.so");
    std::fs::copy(common::fixture_library(), &first).expect("copy");
    std::fs::copy(common::fixture_library(), &second).expect("copy");
    let error = Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Refuse)
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        error.contains("two plugins offer the agent `Shout Agent`"),
        "{error}"
    );
    assert!(
        error.contains("liba.so") && error.contains("libb.so"),
        "{error}"
    );
}

#[test]
fn a_library_that_is_not_a_plugin_is_refused_clearly() {
    let folder = common::scratch("not-a-plugin");
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("a libm on this machine");
    std::fs::copy(libm, folder.join("libm.so")).expect("copy");
    std::fs::write(folder.join("notes.so"), "not a library").expect("write");

    let mut registry = Registry::default();
    let error = registry
        .load_file(&folder.join("libm.so"))
        .expect_err("must fail")
        .to_string();
    assert!(error.contains("libm.so is not a drmas plugin"), "{error}");
    let error = registry
        .load_file(&folder.join("notes.so"))
        .expect_err("must fail")
        .to_string();
    assert!(
        error.contains("notes.so is not a shared library this machine can load: it is a text file"),
        "{error}"
    );
}

#[test]
fn a_missing_plugins_folder_says_so() {
    let error = Registry::load_folder(
        std::path::Path::new("/nonexistent/plugins"),
        BuildProfile::Dev,
        ExternalLinks::Refuse,
    )
    .err()
    .expect("must fail")
    .to_string();
    assert!(
        error.contains("cannot read plugins folder /nonexistent/plugins"),
        "{error}"
    );
}

#[test]
fn a_plugin_crate_given_as_the_plugins_folder_is_built_and_loaded_alone() {
    let crate_dir = common::repo().join("tests/fixture-plugin");
    let libraries =
        drmas_host::plugins::discover(&crate_dir, BuildProfile::Dev, ExternalLinks::Refuse)
            .expect("builds");
    assert_eq!(libraries, [common::fixture_library().clone()]);
    let registry =
        Registry::load_folder(&crate_dir, BuildProfile::Dev, ExternalLinks::Refuse).expect("loads");
    assert_eq!(registry.plugins().len(), 1);
    assert!(registry.agent("Shout Agent", "").is_ok());
}

/// A sample of prompt group `uid`, episode `trajectory`, agent `agent`.
fn sample(uid: u32, trajectory: u32, agent: u16) -> Sample {
    Sample {
        uid,
        trajectory,
        agent,
        valid: true,
        ..Sample::default()
    }
}

fn params(text: &str) -> toml::Table {
    toml::from_str(text).expect("params")
}

#[test]
fn a_plugin_estimator_is_served_like_a_built_in_one() {
    let registry = common::fixture_registry();
    // Two prompt groups; group 0's mean is 0.5, group 1's is 2; a padding sample in group 0.
    let mut padding = sample(0, 0, 0);
    padding.padding = true;
    let samples = [
        sample(0, 0, 0),
        sample(0, 0, 1),
        sample(0, 1, 0),
        sample(1, 2, 0),
        sample(1, 3, 0),
        sample(1, 3, 1),
        padding,
    ];
    let rewards = [1.0, 0.5, 0.0, 2.0, 1.0, 3.0, 9.0];

    let sign = registry.estimator("sign", &params("")).expect("sign");
    assert_eq!(sign.name(), "sign");
    let origin = sign
        .origin()
        .expect("a plugin's estimator says where it comes from");
    assert!(
        origin.starts_with("estimator `sign` of plugin `fixture` ("),
        "{origin}"
    );
    assert_eq!(
        sign.advantages(&samples, &rewards).expect("advantages"),
        [1.0, 0.0, -1.0, 0.0, -1.0, 1.0, 0.0]
    );
    // Its params arrive as the TOML text of [algorithm.params].
    let wide = registry
        .estimator("sign", &params("margin = 0.75"))
        .expect("sign with a margin");
    assert_eq!(
        wide.advantages(&samples, &rewards).expect("advantages"),
        [0.0, 0.0, 0.0, 0.0, -1.0, 1.0, 0.0]
    );

    // Built-ins come first and keep their own names.
    let grpo = registry.estimator("grpo", &params("")).expect("grpo");
    assert_eq!((grpo.name(), grpo.origin()), ("grpo", None));
}

#[test]
fn plugin_estimator_names_and_params_errors_say_what_to_do() {
    let registry = common::fixture_registry();
    let error = registry
        .estimator("sing", &params(""))
        .expect_err("unknown")
        .to_string();
    assert!(error.contains("did you mean `sign`?"), "{error}");
    assert!(error.contains("built-in: grpo, "), "{error}");
    assert!(error.ends_with("from plugins: faulty, sign"), "{error}");

    let error = registry
        .estimator("sign", &params("margn = 1.0"))
        .expect_err("typo")
        .to_string();
    assert!(
        error.contains("cannot build estimator `sign` of plugin `fixture`"),
        "{error}"
    );
    assert!(error.contains("unknown field `margn`"), "{error}");
    let error = registry
        .estimator("sign", &params("margin = -1.0"))
        .expect_err("negative")
        .to_string();
    assert!(
        error.contains("margin must be a finite number ≥ 0, got -1"),
        "{error}"
    );
}

#[test]
fn a_plugin_estimators_wrong_answers_are_errors_naming_it() {
    let registry = common::fixture_registry();
    let mut padding = sample(0, 1, 0);
    padding.padding = true;
    let samples = [sample(0, 0, 0), sample(0, 0, 1), padding];
    let rewards = [1.0, 0.0, 0.0];
    let answer = |fault: &str| {
        registry
            .estimator("faulty", &params(&format!("fault = \"{fault}\"")))
            .expect("faulty builds")
            .advantages(&samples, &rewards)
            .expect_err("a wrong answer")
            .to_string()
    };
    let origin = "estimator `faulty` of plugin `fixture`";
    for (fault, needle) in [
        (
            "short",
            "returned 2 advantages for 3 samples; an estimator must return one advantage per sample",
        ),
        (
            "nan",
            "returned the advantage NaN for sample 2 (prompt group 0, trajectory 1, agent 0, \
             reward 0); advantages must be finite numbers",
        ),
        (
            "padding",
            "gave padding sample 2 the advantage 1; padding samples only fill the batch and must \
             get 0",
        ),
        ("error", "advantages: asked to fail"),
        ("panic", "panicked in advantages: asked to panic"),
    ] {
        let error = answer(fault);
        assert!(error.starts_with(origin), "{fault}: {error}");
        assert!(error.contains(needle), "{fault}: {error}");
    }
}

#[test]
fn a_plugin_file_or_folder_others_can_write_is_refused_with_the_chmod_fix() {
    use std::os::unix::fs::PermissionsExt;
    let chmod = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let folder = common::scratch("writable-plugin");
    let library = folder.join("libfixture.so");
    std::fs::copy(common::fixture_library(), &library).expect("copy");
    let load = || Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Refuse);

    chmod(&library, 0o646);
    let error = load().err().expect("a world-writable library").to_string();
    assert!(
        error.contains(&format!(
            "{} is writable by all users (mode 646)",
            library.display()
        )) && error.contains(&format!("run `chmod go-w {}`", library.display())),
        "{error}"
    );
    chmod(&library, 0o755);
    chmod(&folder, 0o775);
    let error = load().err().expect("a group-writable folder").to_string();
    assert!(
        error.contains(&format!("{} is writable by its group", folder.display())),
        "{error}"
    );
    chmod(&folder, 0o755);
    assert_eq!(load().expect("the fixed folder loads").plugins().len(), 1);
}

#[test]
fn a_file_that_is_not_a_library_for_this_machine_is_refused_before_it_is_opened() {
    let folder = common::scratch("not-a-library");
    let text = folder.join("libnotes.so");
    std::fs::write(&text, "these are notes, not a library\n").expect("write");
    let error = Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Refuse)
        .err()
        .expect("a text file named .so")
        .to_string();
    assert!(
        error.starts_with(&format!(
            "{} is not a shared library this machine can load: it is a text file",
            text.display()
        )),
        "{error}"
    );
    std::fs::remove_file(&text).expect("remove");

    let mut truncated = std::fs::read(common::fixture_library()).expect("read the fixture");
    truncated.truncate(8192);
    let half = folder.join("libhalf.so");
    std::fs::write(&half, truncated).expect("write");
    let error = Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Refuse)
        .err()
        .expect("a truncated library")
        .to_string();
    assert!(
        error.starts_with(&format!("{} is not a shared library", half.display()))
            && error.contains("truncated"),
        "{error}"
    );
}

#[test]
fn a_link_out_of_the_plugins_folder_is_refused_unless_followed() {
    let folder = common::scratch("linked-plugin");
    let link = folder.join("libfixture.so");
    std::os::unix::fs::symlink(common::fixture_library(), &link).expect("symlink");
    let error = Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Refuse)
        .err()
        .expect("a link out of the folder")
        .to_string();
    assert!(
        error.contains(&format!("{} is a symbolic link to", link.display()))
            && error.contains("outside the plugins folder")
            && error.contains("--follow-plugin-links"),
        "{error}"
    );
    let followed = Registry::load_folder(&folder, BuildProfile::Dev, ExternalLinks::Follow)
        .expect("followed when asked");
    assert_eq!(followed.plugins().len(), 1);

    // A link to a library inside the folder is fine.
    let inside = common::scratch("linked-inside");
    std::fs::create_dir(inside.join("real")).expect("mkdir");
    std::fs::copy(common::fixture_library(), inside.join("real/libfixture.so")).expect("copy");
    std::os::unix::fs::symlink(
        inside.join("real/libfixture.so"),
        inside.join("libfixture.so"),
    )
    .expect("symlink");
    let registry = Registry::load_folder(&inside, BuildProfile::Dev, ExternalLinks::Refuse)
        .expect("a link inside the folder loads");
    assert_eq!(registry.plugins().len(), 1);
}
