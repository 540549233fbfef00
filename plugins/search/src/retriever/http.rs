//! A blocking client of a Search-R1 compatible retrieval server (see [`super::api`] for the wire
//! format), with timeouts and retries with exponential backoff.
//!
//! Connection failures, timeouts and 5xx answers are retried, with a doubling wait, for as long
//! as the configuration allows (a number of tries, a total time), so a restarted server costs a
//! pause, not the run; other 4xx answers and malformed responses fail at once. Only plain
//! `http://` URLs are supported.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::api::{RetrieveRequest, RETRIEVE_PATH};
use super::{Hit, Retriever, RetrieverError};
use crate::corpus::Passage;

/// The longest response body read, in bytes.
const MAX_RESPONSE_BYTES: u64 = 1 << 30;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// The limit on the reachability probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of an error body is kept in [`RetrieverError::Status`].
const MAX_ERROR_BODY_CHARS: usize = 500;

/// Where the server is and how patiently to talk to it.
#[derive(Debug, Clone)]
pub struct HttpRetrieverConfig {
    /// The server URL: its base (`http://127.0.0.1:8000`) or the endpoint itself
    /// (`http://127.0.0.1:8000/retrieve`, as Search-R1's configs write it).
    pub url: String,
    /// The limit on one whole request (connect, send, receive).
    pub timeout: Duration,
    /// Attempts before giving up; 0: as many as `retry_for` allows.
    pub max_tries: u32,
    /// How long after the first attempt of a request failed ones are still retried.
    pub retry_for: Duration,
    /// The wait after the first failed attempt; it doubles after each further one (up to 8 s).
    pub initial_backoff: Duration,
}

impl HttpRetrieverConfig {
    /// A configuration for `url` with a 30 s timeout, retries for 5 minutes (any number of
    /// tries) and a 250 ms first backoff.
    pub fn new(url: impl Into<String>) -> HttpRetrieverConfig {
        HttpRetrieverConfig {
            url: url.into(),
            timeout: Duration::from_secs(30),
            max_tries: 0,
            retry_for: Duration::from_secs(300),
            initial_backoff: Duration::from_millis(250),
        }
    }
}

/// A [`Retriever`] that asks a retrieval server.
pub struct HttpRetriever {
    endpoint: String,
    agent: ureq::Agent,
    config: HttpRetrieverConfig,
}

/// The outcome of one failed attempt.
enum Failure {
    /// Worth another try (connection failure, timeout, 5xx).
    Transient(RetrieverError),
    /// Final.
    Fatal(RetrieverError),
}

impl HttpRetriever {
    /// A client for the server in `config`; nothing is sent until the first search.
    pub fn new(config: HttpRetrieverConfig) -> HttpRetriever {
        let base = config.url.trim_end_matches('/');
        let endpoint = if base.ends_with(RETRIEVE_PATH) {
            base.to_owned()
        } else {
            format!("{base}{RETRIEVE_PATH}")
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        HttpRetriever {
            endpoint,
            agent,
            config,
        }
    }

    /// The endpoint URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether a server answers at the URL's host and port at all (any HTTP status will do:
    /// Search-R1's own server has no `/health`); one attempt, at most 5 s.
    pub fn probe(&self) -> Result<(), RetrieverError> {
        let health = format!("{}/health", self.endpoint.trim_end_matches(RETRIEVE_PATH));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(PROBE_TIMEOUT.min(self.config.timeout)))
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .get(&health)
            .call()
            .map(drop)
            .map_err(|error| RetrieverError::Unreachable {
                url: self.endpoint.clone(),
                tries: 1,
                reason: error.to_string(),
            })
    }

    /// One attempt.
    fn attempt(&self, request: &RetrieveRequest) -> Result<Vec<Vec<Hit>>, Failure> {
        let unreachable = |reason: String| {
            Failure::Transient(RetrieverError::Unreachable {
                url: self.endpoint.clone(),
                tries: 1,
                reason,
            })
        };
        let mut response = match self.agent.post(&self.endpoint).send_json(request) {
            Ok(response) => response,
            Err(error @ (ureq::Error::BadUri(_) | ureq::Error::TlsRequired)) => {
                return Err(Failure::Fatal(RetrieverError::Unreachable {
                    url: self.endpoint.clone(),
                    tries: 1,
                    reason: format!("{error} (use an http:// URL)"),
                }))
            }
            Err(error) => return Err(unreachable(error.to_string())),
        };
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_string()
            .map_err(|error| unreachable(format!("reading the response: {error}")))?;
        if status != 200 {
            let error = RetrieverError::Status {
                url: self.endpoint.clone(),
                status,
                body: body.chars().take(MAX_ERROR_BODY_CHARS).collect(),
            };
            return Err(if status >= 500 {
                Failure::Transient(error)
            } else {
                Failure::Fatal(error)
            });
        }
        parse_response(&body, request.queries.len()).map_err(|reason| {
            Failure::Fatal(RetrieverError::MalformedResponse {
                url: self.endpoint.clone(),
                reason,
            })
        })
    }
}

impl Retriever for HttpRetriever {
    fn search(&self, queries: &[String], top_k: usize) -> Result<Vec<Vec<Hit>>, RetrieverError> {
        if top_k == 0 {
            return Err(RetrieverError::ZeroTopK);
        }
        let request = RetrieveRequest {
            queries: queries.to_vec(),
            topk: Some(top_k),
            return_scores: true,
        };
        let started = Instant::now();
        let mut backoff = self.config.initial_backoff;
        let mut attempt = 1;
        loop {
            match self.attempt(&request) {
                Ok(hits) => return Ok(hits),
                Err(Failure::Fatal(error)) => return Err(error),
                Err(Failure::Transient(error)) => {
                    let out_of_tries =
                        self.config.max_tries > 0 && attempt >= self.config.max_tries;
                    let out_of_time = started.elapsed() + backoff > self.config.retry_for;
                    if out_of_tries || out_of_time {
                        return Err(match error {
                            RetrieverError::Unreachable { url, reason, .. } => {
                                RetrieverError::Unreachable {
                                    url,
                                    tries: attempt,
                                    reason,
                                }
                            }
                            other => other,
                        });
                    }
                    drmas_sdk::log::warn!(
                        "retriever attempt {attempt} failed ({error}); trying again in {:.1} s",
                        backoff.as_secs_f64()
                    );
                    std::thread::sleep(backoff);
                    backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
                    attempt += 1;
                }
            }
        }
    }
}

/// Parses a response body into one hit list per query; the error says which element is wrong.
pub fn parse_response(body: &str, expected_lists: usize) -> Result<Vec<Vec<Hit>>, String> {
    let value: Value = serde_json::from_str(body).map_err(|error| format!("not JSON ({error})"))?;
    let lists = value
        .get("result")
        .ok_or("no \"result\" field")?
        .as_array()
        .ok_or("\"result\" is not a list")?;
    if lists.len() != expected_lists {
        return Err(format!(
            "{} result lists for {expected_lists} queries",
            lists.len()
        ));
    }
    lists
        .iter()
        .enumerate()
        .map(|(q, list)| {
            let items = list
                .as_array()
                .ok_or(format!("result[{q}] is not a list"))?;
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    parse_item(item).map_err(|reason| format!("result[{q}][{i}]{reason}"))
                })
                .collect()
        })
        .collect()
}

/// Parses one `{"document": {...}, "score": x}` item; the error starts with the faulty path.
fn parse_item(item: &Value) -> Result<Hit, String> {
    let document = item.get("document").ok_or(" has no \"document\"")?;
    let score = item
        .get("score")
        .and_then(Value::as_f64)
        .ok_or(" has no numeric \"score\"")?;
    let contents = document
        .get("contents")
        .and_then(Value::as_str)
        .ok_or(".document has no string \"contents\"")?;
    let id = match document.get("id") {
        Some(Value::String(id)) => id.clone(),
        Some(Value::Number(id)) => id.to_string(),
        _ => return Err(".document has no string or integer \"id\"".to_owned()),
    };
    Ok(Hit::new(Passage::new(id, contents), score as f32))
}
