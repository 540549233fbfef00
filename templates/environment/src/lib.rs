//! {{project-name}}: a drmas plugin with one environment, `{{environment_name}}`.
//!
//! Tasks are questions with one answer, read from a JSONL file (`{"id": "1", "question": "…",
//! "answer": "…"}` per line). The team has up to `max_tries` attempts: a correct answer earns
//! reward 1 and ends the episode; a wrong one is answered with a hint and another try. Build it
//! with `cargo build --release`, put this folder (or the built library from `target/release/`)
//! in the plugins folder, and name it in a run file:
//!
//! ```toml
//! [environment]
//! name = "{{environment_name}}"
//! train_data = { path = "data/train.jsonl" }   # relative to the run file
//! params = { max_tries = 2 }
//! ```

#![forbid(unsafe_code)]

use drmas_sdk::{
    Component, DatasetSpec, Environment, Episode, Error, Metric, Params, Reset, Result, Step, Task,
};
use serde::Deserialize;

/// Questions with one answer, several tries each.
pub struct Quiz {
    max_tries: u32,
}

/// The environment's parameters, from `[environment] params` in the run file. Strict, so typos
/// are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Attempts per episode (at least 1).
    #[serde(default = "default_tries")]
    max_tries: u32,
}

fn default_tries() -> u32 {
    2
}

/// One line of a task file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: String,
    question: String,
    answer: String,
}

impl Component for Quiz {
    const NAME: &'static str = "{{environment_name}}";
    const DESCRIPTION: &'static str = "questions from a JSONL file, reward 1 for the answer";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        if config.max_tries == 0 {
            return Err(Error::new("max_tries must be at least 1"));
        }
        Ok(Self {
            max_tries: config.max_tries,
        })
    }
}

impl Environment for Quiz {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        let path = spec.resolved_path();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        let limit = spec.limit.map_or(usize::MAX, |l| l as usize);
        let mut tasks = Vec::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            if tasks.len() == limit {
                break;
            }
            let line: Line = serde_json::from_str(line)
                .map_err(|e| Error::new(format!("{}:{}: {e}", path.display(), number + 1)))?;
            tasks.push(Task {
                id: line.id,
                prompt: line.question,
                data_source: "{{environment_name}}".into(),
                // Opaque to the host: handed back to `reset`.
                payload: line.answer,
            });
        }
        Ok(tasks)
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        Ok(Reset {
            episode: Box::new(Attempts {
                task: task.id.clone(),
                answer: task.payload.clone(),
                tries: 0,
                max_tries: self.max_tries,
            }),
            observation: task.prompt.clone(),
            // The state is (task, try); the host would otherwise key it by the observation text.
            state_key: Some(format!("{}#0", task.id)),
        })
    }
}

/// One episode: the answer and the tries so far.
struct Attempts {
    task: String,
    answer: String,
    tries: u32,
    max_tries: u32,
}

fn same_answer(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

impl Episode for Attempts {
    fn step(&mut self, action: &str) -> Result<Step> {
        self.tries += 1;
        let correct = same_answer(action, &self.answer);
        let done = correct || self.tries >= self.max_tries;
        Ok(Step {
            observation: if done {
                String::new()
            } else {
                format!(
                    "`{}` is not the answer; {} tries left.",
                    action.trim(),
                    self.max_tries - self.tries
                )
            },
            reward: if correct { 1.0 } else { 0.0 },
            done,
            // Logged as `env/correct` and `env/tries` (the batch mean).
            metrics: vec![
                Metric {
                    name: "correct".into(),
                    value: f64::from(u8::from(correct)),
                },
                Metric {
                    name: "tries".into(),
                    value: f64::from(self.tries),
                },
            ],
            state_key: Some(format!("{}#{}", self.task, self.tries)),
        })
    }
}

drmas_sdk::export_plugin! {
    name: "{{project-name}}",
    environments: [Quiz],
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tasks of `text` as a `tasks.jsonl`, in a folder of its own (tests run in parallel).
    fn tasks(text: &str) -> Result<Vec<Task>> {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("quiz-template-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("tasks.jsonl"), text).expect("write");
        let quiz = Quiz::from_config(&"".into()).expect("config");
        quiz.load_tasks(&DatasetSpec {
            path: "tasks.jsonl".into(),
            base_dir: dir.display().to_string(),
            ..DatasetSpec::default()
        })
    }

    #[test]
    fn a_wrong_answer_gets_another_try_and_a_right_one_the_reward() {
        let tasks =
            tasks("{\"id\": \"1\", \"question\": \"2 + 2?\", \"answer\": \"4\"}\n").expect("tasks");
        let quiz = Quiz::from_config(&"max_tries = 2".into()).expect("config");
        let mut reset = quiz.reset(&tasks[0]).expect("reset");
        assert_eq!(reset.observation, "2 + 2?");
        let wrong = reset.episode.step("5").expect("step");
        assert_eq!((wrong.reward, wrong.done), (0.0, false));
        assert_eq!(wrong.state_key.as_deref(), Some("1#1"));
        let right = reset.episode.step(" 4 ").expect("step");
        assert_eq!((right.reward, right.done), (1.0, true));
    }

    #[test]
    fn a_malformed_line_is_named_with_its_file_and_line() {
        let error = tasks("{\"id\": \"1\", \"question\": \"q\", \"answer\": \"a\"}\n{\"id\": 2}\n")
            .err()
            .expect("refused");
        assert!(error.message().contains("tasks.jsonl:2:"), "{error}");
    }
}
