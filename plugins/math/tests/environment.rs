//! The `math` environment: dataset loading through the SDK's spec, and rewards.

use drmas_math::MathEnvironment;
use drmas_sdk::{Component, DatasetSpec, Environment};

fn data(path: &str) -> String {
    format!("{}/../../data/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn generated_tasks_are_scored_by_the_checker() {
    let env = MathEnvironment::from_config(&"level = 1\nseed = 3".into()).expect("config");
    let spec = DatasetSpec {
        path: "builtin:generated".into(),
        split: "test".into(),
        limit: Some(5),
        ..Default::default()
    };
    let tasks = env.load_tasks(&spec).expect("tasks");
    assert_eq!(tasks.len(), 5);
    let task = &tasks[0];
    let mut reset = env.reset(task).expect("reset");
    assert_eq!(reset.observation, task.prompt);
    let step = reset
        .episode
        .step(&format!("So the answer is \\boxed{{{}}}.", task.payload))
        .expect("step");
    assert_eq!((step.reward, step.done), (1.0, true));

    let mut reset = env.reset(task).expect("reset");
    let step = reset.episode.step("\\boxed{-123456}").expect("step");
    assert_eq!(step.reward, 0.0);
    assert!(
        reset.episode.step("again").is_err(),
        "a one-step episode cannot step twice"
    );
}

#[test]
fn gsm8k_and_math500_are_detected_from_their_fields() {
    let env = MathEnvironment::from_config(&"".into()).expect("config");
    let gsm8k = DatasetSpec {
        path: data("gsm8k/test.jsonl"),
        limit: Some(3),
        ..Default::default()
    };
    let tasks = env.load_tasks(&gsm8k).expect("gsm8k");
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[0].data_source, "openai/gsm8k");
    assert_eq!(tasks[0].payload, "18", "Janet's ducks");

    let math = DatasetSpec {
        path: data("math500/test.jsonl"),
        limit: Some(2),
        ..Default::default()
    };
    let tasks = env.load_tasks(&math).expect("math");
    assert_eq!(tasks[0].payload, "\\left( 3, \\frac{\\pi}{2} \\right)");
}

#[test]
fn relative_paths_resolve_against_the_run_file_folder_and_missing_files_are_named() {
    let env = MathEnvironment::from_config(&"format = \"gsm8k\"".into()).expect("config");
    let spec = DatasetSpec {
        path: "gsm8k/test.jsonl".into(),
        base_dir: data(""),
        limit: Some(1),
        ..Default::default()
    };
    assert_eq!(env.load_tasks(&spec).expect("relative").len(), 1);

    let missing = DatasetSpec {
        path: "/nonexistent/data.jsonl".into(),
        ..Default::default()
    };
    let error = env.load_tasks(&missing).expect_err("must fail");
    assert!(
        error.message().contains("/nonexistent/data.jsonl"),
        "{error}"
    );
}

#[test]
fn a_bad_split_or_config_key_is_an_error() {
    let env = MathEnvironment::from_config(&"".into()).expect("config");
    let spec = DatasetSpec {
        path: "builtin:generated".into(),
        split: "dev".into(),
        ..Default::default()
    };
    assert!(env
        .load_tasks(&spec)
        .expect_err("bad split")
        .message()
        .contains("not `dev`"));
    assert!(MathEnvironment::from_config(&"levle = 2".into()).is_err());
    assert!(MathEnvironment::from_config(&"level = 4".into()).is_err());
}

#[test]
fn generated_datasets_are_bounded_by_limit_or_generated_count() {
    let too_many = drmas_math::MAX_GENERATED as u64 + 1;
    let spec = |limit| DatasetSpec {
        path: "builtin:generated".into(),
        split: "train".into(),
        limit,
        ..Default::default()
    };
    let env = MathEnvironment::from_config(&"".into()).expect("config");
    let error = env.load_tasks(&spec(Some(too_many))).expect_err("too many");
    assert!(
        error.message().contains("limit") && error.message().contains(&too_many.to_string()),
        "{}",
        error.message()
    );
    let counted = format!("generated_count = {too_many}");
    let env = MathEnvironment::from_config(&counted.as_str().into()).expect("config");
    let error = env.load_tasks(&spec(None)).expect_err("too many");
    assert!(
        error.message().contains("generated_count"),
        "{}",
        error.message()
    );
    assert_eq!(env.load_tasks(&spec(Some(3))).expect("a limit").len(), 3);
}

#[test]
fn max_record_bytes_bounds_a_line_and_is_checked() {
    let error = MathEnvironment::from_config(&"max_record_bytes = 0".into())
        .err()
        .expect("0 bytes")
        .to_string();
    assert!(
        error.contains("[environment.params] max_record_bytes = 0 must be a number of bytes"),
        "{error}"
    );
    let env = MathEnvironment::from_config(&"format = \"gsm8k\"\nmax_record_bytes = 100".into())
        .expect("config");
    let spec = DatasetSpec {
        path: data("gsm8k/test.jsonl"),
        limit: Some(1),
        ..Default::default()
    };
    let error = env.load_tasks(&spec).expect_err("the first line is longer");
    assert!(
        error
            .message()
            .contains("test.jsonl:1: the line is longer than 100 bytes (max_record_bytes)"),
        "{error}"
    );
}
