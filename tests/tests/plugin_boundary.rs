//! The plugin boundary through real libraries: loading, listing, calling, and every error a user
//! can meet (bad config, unknown names, duplicates, panics, a plugin built against another SDK).

mod common;

use drmas_host::plugins::{BuildProfile, Registry};
use drmas_sdk::{AgentContext, AgentOutput, DatasetSpec, Next};

#[test]
fn a_loaded_plugin_lists_its_components_and_they_work() {
    let registry = common::fixture_registry();
    let listing = drmas_host::list_components(&registry);
    assert!(
        listing.contains("plugin fixture 0.3.1 (drmas-sdk 0.1.0)"),
        "{listing}"
    );
    assert!(listing.contains("Shout Agent"), "{listing}");
    assert!(listing.contains("relay"), "{listing}");
    assert!(listing.contains("words"), "{listing}");

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
        vec!["speaker".to_owned()]
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
        error.contains("panicked in parse: asked to panic"),
        "{error}"
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
    let error = Registry::load_folder(&folder, BuildProfile::Dev)
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
        error.contains("cannot open plugin") && error.contains("notes.so"),
        "{error}"
    );
}

#[test]
fn a_missing_plugins_folder_says_so() {
    let error = Registry::load_folder(
        std::path::Path::new("/nonexistent/plugins"),
        BuildProfile::Dev,
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
    let libraries = drmas_host::plugins::discover(&crate_dir, BuildProfile::Dev).expect("builds");
    assert_eq!(libraries, [common::fixture_library().clone()]);
    let registry = Registry::load_folder(&crate_dir, BuildProfile::Dev).expect("loads");
    assert_eq!(registry.plugins().len(), 1);
    assert!(registry.agent("Shout Agent", "").is_ok());
}
