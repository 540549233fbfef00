//! Environment `search`: multi-turn QA with a retriever. Actions are `<search>query</search>`
//! (answered with the top-k passages as Search-R1's `<information>` block) or
//! `<answer>…</answer>` (ends the episode; reward = exact match after Search-R1's normalisation).
//! The episode also ends after `max_turns` steps. A query over the retriever's
//! [`QueryLimits`](crate::retriever::query::QueryLimits) is answered with a message saying so,
//! like an invalid action, so that a runaway generation costs neither time nor the rollout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use drmas_sdk::{
    Component, DatasetSpec, Environment, Episode, Error, Metric, Params, Reset, Result, Step, Task,
};
use serde::{Deserialize, Serialize};

use crate::dataset::{
    check_max_record_bytes, load_qa, LoadOptions, Split, DEFAULT_MAX_RECORD_BYTES,
};
use crate::format::format_information;
use crate::metrics::{exact_match, f1_score, sub_exact_match};
use crate::retriever::bm25::{Bm25Options, Bm25Retriever};
use crate::retriever::http::{HttpRetriever, HttpRetrieverConfig};
use crate::retriever::{Retriever, RetrieverError};
use crate::tags::{extract_answer, extract_search};

/// Multi-turn search QA.
pub struct SearchEnvironment {
    retriever: Arc<dyn Retriever>,
    top_k: usize,
    max_turns: u32,
    skip_malformed: bool,
    max_record_bytes: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    retriever: RetrieverConfig,
    #[serde(default = "default_top_k")]
    top_k: usize,
    #[serde(default = "default_turns")]
    max_turns: u32,
    #[serde(default)]
    skip_malformed: bool,
    /// The longest JSONL line or parquet value read (bytes): longer ones are malformed.
    #[serde(default = "default_max_record_bytes")]
    max_record_bytes: u64,
}

fn default_max_record_bytes() -> u64 {
    DEFAULT_MAX_RECORD_BYTES as u64
}

/// The most passages one search of the environment returns (what `drmas-retriever` serves by
/// default at most): each is text in the agent's next prompt.
const MAX_TOP_K: usize = 1000;

fn default_top_k() -> usize {
    3
}

fn default_turns() -> u32 {
    4
}

/// Which retriever backend serves the searches.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum RetrieverConfig {
    /// A BM25 index over a corpus JSONL, built into `index_dir` on first use.
    Bm25 { corpus: PathBuf, index_dir: PathBuf },
    /// A Search-R1 retrieval server.
    Http {
        url: String,
        #[serde(default = "default_timeout")]
        timeout_secs: f64,
        /// 0: as many tries as `retry_for_secs` allows.
        #[serde(default)]
        max_tries: u32,
        #[serde(default = "default_retry_for")]
        retry_for_secs: f64,
    },
}

fn default_timeout() -> f64 {
    30.0
}

fn default_retry_for() -> f64 {
    300.0
}

/// The longest `timeout_secs` or `retry_for_secs` accepted: a day.
const MAX_RETRIEVER_SECONDS: f64 = 86_400.0;

/// `[environment.params.retriever] field = value` as a duration, when it is a finite number of
/// seconds in (0, a day] (or [0, a day] when `zero` is allowed).
fn seconds(field: &str, value: f64, zero: bool) -> Result<Duration> {
    let low_ok = if zero { value >= 0.0 } else { value > 0.0 };
    if value.is_finite() && low_ok && value <= MAX_RETRIEVER_SECONDS {
        return Ok(Duration::from_secs_f64(value));
    }
    let low = if zero { "≥ 0" } else { "> 0" };
    Err(Error::new(format!(
        "[environment.params.retriever] {field} = {value} must be a number of seconds {low} and \
         at most {MAX_RETRIEVER_SECONDS}"
    )))
}

impl Component for SearchEnvironment {
    const NAME: &'static str = "search";
    const DESCRIPTION: &'static str =
        "multi-turn QA over a retriever (BM25 or HTTP), reward = exact match";

    fn from_config(params: &Params) -> Result<Self> {
        let config: Config = params.parse()?;
        let max_record_bytes = check_max_record_bytes(config.max_record_bytes)
            .map_err(|reason| Error::new(format!("[environment.params] {reason}")))?;
        if !(1..=MAX_TOP_K).contains(&config.top_k) {
            return Err(Error::new(format!(
                "[environment.params] top_k = {} must be from 1 to {MAX_TOP_K} passages a search",
                config.top_k
            )));
        }
        let retriever: Arc<dyn Retriever> = match config.retriever {
            RetrieverConfig::Bm25 { corpus, index_dir } => {
                let progress = |message: &str| drmas_sdk::log::info!("{message}");
                // Relative paths resolve against the run file's folder, like the run file's own.
                Arc::new(Bm25Retriever::open_or_build(
                    &params.resolve(&corpus),
                    &params.resolve(&index_dir),
                    &Bm25Options::default(),
                    &progress,
                )?)
            }
            RetrieverConfig::Http {
                url,
                timeout_secs,
                max_tries,
                retry_for_secs,
            } => {
                let mut http = HttpRetrieverConfig::new(url);
                http.timeout = seconds("timeout_secs", timeout_secs, false)?;
                http.retry_for = seconds("retry_for_secs", retry_for_secs, true)?;
                http.max_tries = max_tries;
                let retriever = HttpRetriever::new(http);
                // `check` builds the environment too: a wrong URL fails there, in seconds.
                retriever.probe().map_err(|error| {
                    Error::new(format!("[environment.params.retriever] {error}"))
                })?;
                Arc::new(retriever)
            }
        };
        Ok(Self {
            retriever,
            top_k: config.top_k,
            max_turns: config.max_turns,
            skip_malformed: config.skip_malformed,
            max_record_bytes,
        })
    }
}

/// What a task's payload carries: the accepted answers.
#[derive(Serialize, Deserialize)]
struct Payload {
    golden_answers: Vec<String>,
}

impl Environment for SearchEnvironment {
    fn load_tasks(&self, spec: &DatasetSpec) -> Result<Vec<Task>> {
        let split = Split::from_name(&spec.split).map_err(Error::new)?;
        // The limit counts tasks of the split, so with a split the whole file is read first.
        let options = LoadOptions {
            limit: spec
                .limit
                .filter(|_| split == Split::All)
                .map(|l| l as usize),
            skip_malformed: self.skip_malformed,
            max_record_bytes: self.max_record_bytes,
        };
        let path = spec.resolved_path();
        let mut dataset = load_qa(&path, &options)?;
        if split != Split::All {
            let read = dataset.tasks.len();
            dataset.tasks.retain(|task| split.contains(task));
            if dataset.tasks.is_empty() && read > 0 {
                return Err(Error::new(format!(
                    "{}: none of its {read} tasks falls in split `{}` (one task in ten, by the \
                     hash of its id, is `test`); use a larger file or leave `split` out",
                    path.display(),
                    spec.split
                )));
            }
            if let Some(limit) = spec.limit {
                dataset.tasks.truncate(limit as usize);
            }
        }
        if dataset.skipped > 0 {
            drmas_sdk::log::warn!(
                "{}: skipped {} malformed records",
                path.display(),
                dataset.skipped
            );
        }
        dataset
            .tasks
            .into_iter()
            .map(|t| {
                let payload = serde_json::to_string(&Payload {
                    golden_answers: t.golden_answers,
                })?;
                Ok(Task {
                    id: t.id,
                    prompt: t.question,
                    data_source: t.data_source.unwrap_or_else(|| "qa".into()),
                    payload,
                })
            })
            .collect()
    }

    fn reset(&self, task: &Task) -> Result<Reset> {
        let payload: Payload = serde_json::from_str(&task.payload)
            .map_err(|e| Error::new(format!("task {} has no golden answers: {e}", task.id)))?;
        Ok(Reset {
            episode: Box::new(SearchEpisode {
                retriever: self.retriever.clone(),
                top_k: self.top_k,
                max_turns: self.max_turns,
                turns: 0,
                golden: payload.golden_answers,
            }),
            observation: task.prompt.clone(),
            state_key: None,
        })
    }
}

struct SearchEpisode {
    retriever: Arc<dyn Retriever>,
    top_k: usize,
    max_turns: u32,
    turns: u32,
    golden: Vec<String>,
}

impl Episode for SearchEpisode {
    fn step(&mut self, action: &str) -> Result<Step> {
        if self.turns >= self.max_turns {
            return Err(Error::new("the search episode has already ended"));
        }
        self.turns += 1;
        let out_of_turns = self.turns >= self.max_turns;
        if let Some(answer) = extract_answer(action) {
            let em = f64::from(u8::from(exact_match(&answer, &self.golden)));
            self.turns = self.max_turns;
            return Ok(Step {
                observation: String::new(),
                reward: em,
                done: true,
                metrics: vec![
                    metric("exact_match", em),
                    metric(
                        "sub_exact_match",
                        f64::from(u8::from(sub_exact_match(&answer, &self.golden))),
                    ),
                    metric("f1", f1_score(&answer, &self.golden)),
                    metric("turns", f64::from(self.turns)),
                ],
                state_key: None,
            });
        }
        let observation = match extract_search(action) {
            Some(query) => match self.retriever.search(&[query], self.top_k) {
                Ok(hits) => format_information(hits.first().map_or(&[][..], Vec::as_slice)),
                Err(RetrieverError::QueryTooLarge { reason, .. }) => format!(
                    "My search query is refused: {reason}. If I want to search, I should use a \
                     shorter query."
                ),
                Err(error) => return Err(error.into()),
            },
            None => "My previous action is invalid. If I want to search, I should put the query between \
                     <search> and </search>. If I want to give the final answer, I should put the answer \
                     between <answer> and </answer>."
                .to_owned(),
        };
        Ok(Step {
            observation,
            reward: 0.0,
            done: out_of_turns,
            metrics: vec![metric("turns", f64::from(self.turns))],
            state_key: None,
        })
    }
}

fn metric(name: &str, value: f64) -> Metric {
    Metric {
        name: name.into(),
        value,
    }
}
