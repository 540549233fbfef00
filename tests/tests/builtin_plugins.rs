//! The built-in plugins as users load them: `--plugins ./plugins` from the repository, through
//! the real cdylib path.

mod common;

use drmas_host::plugins::{BuildProfile, Registry};
use drmas_sdk::{AgentContext, DatasetSpec, Role};

#[test]
fn the_plugins_folder_offers_the_math_and_search_components() {
    let registry = Registry::load_folder(
        &common::repo().join("plugins"),
        BuildProfile::Dev,
        drmas_host::plugins::ExternalLinks::Refuse,
    )
    .expect("load ./plugins");
    let listing = drmas_host::list_components(&registry);
    for name in [
        "Solver Agent",
        "Verifier Agent",
        "Search Verifier Agent",
        "Search Agent",
        "Answer Agent",
        "solver-only",
    ] {
        assert!(listing.contains(name), "{name} missing from:\n{listing}");
    }
    // Each orchestra's roles with their contracts.
    for contract in [
        "role verifier: approve | reject",
        "role solver: text",
        "role verifier: yes | no",
        "role search: text",
    ] {
        assert!(
            listing.contains(contract),
            "{contract} missing from:\n{listing}"
        );
    }

    // A math episode through the loaded library.
    let env = registry
        .environment("math", "level = 1")
        .expect("math environment");
    let spec = DatasetSpec {
        path: "builtin:generated".into(),
        split: "test".into(),
        limit: Some(2),
        ..Default::default()
    };
    let tasks = env.load_tasks(&spec).expect("tasks");
    let orchestra = registry
        .orchestra("math", "max_loops = 2")
        .expect("math orchestra");
    assert_eq!(
        orchestra.roles().expect("roles"),
        [
            Role::text("solver"),
            Role::one_of("verifier", ["approve", "reject"])
        ]
    );
    let solver = registry.agent("Solver Agent", "").expect("solver");
    let messages = solver
        .messages(&AgentContext {
            question: tasks[0].prompt.clone(),
            ..AgentContext::default()
        })
        .expect("messages");
    assert!(messages[0].content.contains(&tasks[0].prompt));
    assert!(messages[0].content.contains("\\boxed{}"));

    let mut reset = env.reset(&tasks[0]).expect("reset");
    let step = reset
        .episode
        .step(&format!("\\boxed{{{}}}", tasks[0].payload))
        .expect("step");
    assert_eq!(step.reward, 1.0);

    // A bad component config is reported with the component's name.
    let error = registry
        .orchestra("math", "max_loop = 2")
        .expect_err("typo")
        .to_string();
    assert!(
        error.contains("orchestra `math` of plugin `math`") && error.contains("max_loop"),
        "{error}"
    );
}
