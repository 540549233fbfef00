//! The search plugin's agents and environment, with the real BM25 retriever over the NQ corpus.

use drmas_sdk::{Agent, Component, DatasetSpec, Environment};
use drmas_search::{AnswerAgent, SearchAgent, SearchEnvironment, SearchVerifierAgent};

fn data(path: &str) -> String {
    format!("{}/../../data/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn agents_check_their_own_formats() {
    let search = SearchAgent::from_config(&"".into()).expect("config");
    let parsed = search
        .parse("<think>need the author</think><search> hamlet author </search>")
        .expect("parse");
    assert_eq!(
        (parsed.action.as_str(), parsed.valid),
        ("hamlet author", true)
    );
    assert!(
        !search
            .parse("<search>no think</search>")
            .expect("parse")
            .valid
    );
    assert!(!search.parse("hamlet author").expect("parse").valid);

    let answer = AnswerAgent::from_config(&"".into()).expect("config");
    let parsed = answer
        .parse("<think>known</think><answer>William Shakespeare</answer>")
        .expect("parse");
    assert_eq!(
        (parsed.action.as_str(), parsed.valid),
        ("William Shakespeare", true)
    );
    assert!(!answer.parse("Shakespeare").expect("parse").valid);

    let verifier = SearchVerifierAgent::from_config(&"".into()).expect("config");
    assert_eq!(
        verifier.parse("<verify>NO</verify>").expect("parse").action,
        "no"
    );
    let unsure = verifier.parse("maybe").expect("parse");
    assert_eq!((unsure.action.as_str(), unsure.valid), ("yes", false));
    let strict = SearchVerifierAgent::from_config(&"unparseable = \"no\"".into()).expect("config");
    assert_eq!(strict.parse("maybe").expect("parse").action, "no");
    assert!(SearchVerifierAgent::from_config(&"unparseable = \"perhaps\"".into()).is_err());
}

/// The search environment over the bundled NQ corpus, its BM25 index in a fresh temp folder
/// named after `test` (returned, for cleaning up); `params` go before the retriever table.
fn nq_environment(test: &str, params: &str) -> (SearchEnvironment, std::path::PathBuf) {
    let index = std::env::temp_dir().join(format!("drmas-search-{test}-{}", std::process::id()));
    let config = format!(
        "{params}[retriever]\nkind = \"bm25\"\ncorpus = \"{}\"\nindex_dir = \"{}\"\n",
        data("nq/corpus.jsonl"),
        index.display()
    );
    let env = SearchEnvironment::from_config(&config.as_str().into()).expect("config");
    (env, index)
}

#[test]
fn an_episode_searches_the_real_corpus_and_scores_the_answer() {
    let (env, index) = nq_environment("env", "max_turns = 3\n");
    let spec = DatasetSpec {
        path: data("nq/questions.jsonl"),
        limit: Some(4),
        ..Default::default()
    };
    let tasks = env.load_tasks(&spec).expect("tasks");
    assert_eq!(tasks.len(), 4);

    let task = &tasks[0];
    let golden: serde_json::Value = serde_json::from_str(&task.payload).expect("payload");
    let answer = golden["golden_answers"][0]
        .as_str()
        .expect("an answer")
        .to_owned();

    let mut reset = env.reset(task).expect("reset");
    assert_eq!(reset.observation, task.prompt);
    let step = reset
        .episode
        .step(&format!("<search>{}</search>", task.prompt))
        .expect("search");
    assert!(!step.done);
    assert!(
        step.observation.starts_with("<information>Doc 1(Title: "),
        "{}",
        step.observation
    );
    assert_eq!(
        step.observation.matches("Doc ").count(),
        3,
        "top-3 passages"
    );

    let step = reset
        .episode
        .step(&format!("<answer>The {answer}!</answer>"))
        .expect("answer");
    assert_eq!((step.reward, step.done), (1.0, true));
    let f1 = step
        .metrics
        .iter()
        .find(|m| m.name == "f1")
        .expect("f1")
        .value;
    assert!((f1 - 1.0).abs() < 1e-12);

    let mut reset = env.reset(task).expect("reset");
    let step = reset.episode.step("I do not know").expect("invalid");
    assert!(step.observation.contains("My previous action is invalid"));
    let _ = reset
        .episode
        .step("<search>x</search>")
        .expect("second turn");
    let step = reset
        .episode
        .step("<search>y</search>")
        .expect("third turn");
    assert!(step.done, "max_turns ends the episode");
    assert!(reset.episode.step("<answer>x</answer>").is_err());
    let _ = std::fs::remove_dir_all(index);
}

#[test]
fn an_oversized_query_is_refused_to_the_model_without_ending_the_rollout() {
    let (env, index) = nq_environment("oversized", "max_turns = 3\n");
    let task = drmas_sdk::Task {
        id: "1".into(),
        prompt: "q".into(),
        payload: "{\"golden_answers\":[\"a\"]}".into(),
        ..Default::default()
    };
    let mut reset = env.reset(&task).expect("reset");
    // Thousands of distinct words, as a runaway generation might write.
    let words: String = (0..3000).map(|i| format!("w{i} ")).collect();
    let started = std::time::Instant::now();
    let step = reset
        .episode
        .step(&format!("<search>{words}</search>"))
        .expect("refused, not failed");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(!step.done);
    assert!(
        step.observation
            .starts_with("My search query is refused: it is ")
            && step.observation.contains("over the limit of 4096 bytes"),
        "{}",
        step.observation
    );
    let many_terms: String = (0..300).map(|i| format!("w{i} ")).collect();
    let step = reset
        .episode
        .step(&format!("<search>{many_terms}</search>"))
        .expect("refused, not failed");
    assert!(
        step.observation
            .contains("it has more than 256 distinct terms"),
        "{}",
        step.observation
    );
    let step = reset
        .episode
        .step("<search>who wrote hamlet</search>")
        .expect("search");
    assert!(step.observation.starts_with("<information>Doc 1"));
    let _ = std::fs::remove_dir_all(index);
}

#[test]
fn max_record_bytes_bounds_a_question_line_and_is_checked() {
    let config = "max_record_bytes = 2000000000\n[retriever]\nkind = \"http\"\nurl = \"http://127.0.0.1:9\"\n";
    let error = SearchEnvironment::from_config(&config.into())
        .err()
        .expect("over a GiB")
        .to_string();
    assert!(
        error.contains(
            "[environment.params] max_record_bytes = 2000000000 must be a number of bytes"
        ),
        "{error}"
    );
    let (env, index) = nq_environment("record-bytes", "max_record_bytes = 20\n");
    let spec = DatasetSpec {
        path: data("nq/questions.jsonl"),
        limit: Some(1),
        ..Default::default()
    };
    let error = env.load_tasks(&spec).expect_err("longer than 20 bytes");
    assert!(
        error
            .message()
            .contains("questions.jsonl:1: the line is longer than 20 bytes (max_record_bytes)"),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(index);
}

#[test]
fn top_k_is_from_one_to_a_thousand_passages() {
    for top_k in [0, 1001, i64::MAX] {
        let config = format!(
            "top_k = {top_k}\n[retriever]\nkind = \"http\"\nurl = \"http://127.0.0.1:9\"\n"
        );
        let error = SearchEnvironment::from_config(&config.as_str().into())
            .err()
            .expect("out of range")
            .to_string();
        assert!(
            error.contains(&format!(
                "[environment.params] top_k = {top_k} must be from 1 to 1000"
            )),
            "{error}"
        );
    }
}

#[test]
fn an_unreachable_http_retriever_is_found_when_the_environment_is_built() {
    // Built by `check` as by `train`: a URL nobody answers at fails there, naming it.
    let config = "[retriever]\nkind = \"http\"\nurl = \"http://127.0.0.1:9\"\ntimeout_secs = 1\n";
    let error = SearchEnvironment::from_config(&config.into())
        .err()
        .expect("unreachable")
        .to_string();
    assert!(
        error.contains(
            "[environment.params.retriever] cannot reach retriever at http://127.0.0.1:9/retrieve"
        ) && error.contains("drmas-retriever serve"),
        "{error}"
    );
    for (field, value) in [("retry_for_secs", "-1.0"), ("timeout_secs", "nan")] {
        let config = format!(
            "[retriever]\nkind = \"http\"\nurl = \"http://127.0.0.1:9\"\n{field} = {value}\n"
        );
        let error = SearchEnvironment::from_config(&config.as_str().into())
            .err()
            .expect("out of range")
            .to_string();
        assert!(
            error.contains(&format!("[environment.params.retriever] {field} = "))
                && error.contains("must be a number of seconds"),
            "{error}"
        );
    }
}

#[test]
fn train_and_test_splits_of_the_nq_file_are_disjoint_and_limited_after_splitting() {
    let (env, index) = nq_environment("split", "");
    let load = |split: &str, limit: Option<u64>| {
        env.load_tasks(&DatasetSpec {
            path: data("nq/questions.jsonl"),
            split: split.into(),
            limit,
            ..Default::default()
        })
    };
    let all = load("", None).expect("all");
    let train = load("train", None).expect("train");
    let test = load("test", Some(64)).expect("test");
    assert_eq!(test.len(), 64, "the limit counts test tasks");
    let test_all = load("test", None).expect("test");
    assert_eq!(train.len() + test_all.len(), all.len());
    assert!(test
        .iter()
        .all(|t| train.iter().all(|u| u.id != t.id && u.prompt != t.prompt)));
    let error = load("dev", None).expect_err("unknown split").to_string();
    assert!(error.contains("\"dev\""), "{error}");
    let _ = std::fs::remove_dir_all(index);
}

#[test]
fn a_response_prefix_ends_each_agents_messages() {
    let context = drmas_sdk::AgentContext {
        question: "who wrote hamlet".into(),
        ..Default::default()
    };
    for (agent, prefix) in [
        (
            Box::new(
                SearchVerifierAgent::from_config(&"response_prefix = \"<verify>\"".into())
                    .expect("v"),
            ) as Box<dyn Agent>,
            "<verify>",
        ),
        (
            Box::new(SearchAgent::from_config(&"response_prefix = \"<think>\"".into()).expect("s")),
            "<think>",
        ),
        (
            Box::new(AnswerAgent::from_config(&"response_prefix = \"<think>\"".into()).expect("a")),
            "<think>",
        ),
    ] {
        let messages = agent.messages(&context).expect("messages");
        let last = messages.last().expect("a message");
        assert_eq!(
            (last.role.as_str(), last.content.as_str()),
            ("assistant", prefix)
        );
        assert!(messages[messages.len() - 2]
            .content
            .contains("who wrote hamlet"));
    }
    let plain = AnswerAgent::from_config(&"".into()).expect("a");
    let messages = plain.messages(&context).expect("messages");
    assert_eq!(messages.last().expect("a message").role, "user");
}
