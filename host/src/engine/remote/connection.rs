//! [`Connection`]: JSON over HTTP to one server, with every failure sorted into worth another
//! try (the server is down, slow or busy) or final (the request itself is wrong).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The longest answer read, in bytes.
const MAX_ANSWER_BYTES: u64 = 256 << 20;
/// How much of an error answer an error message keeps.
const MAX_ERROR_CHARS: usize = 500;

/// Why one attempt failed.
#[derive(Debug)]
pub enum Failure {
    /// Connection refused or reset, timeout, a 5xx answer (503: busy), an unreadable answer:
    /// another try, here or on another server, may succeed.
    Transient(String),
    /// A 4xx answer or an answer that does not fit the protocol: the same request would fail
    /// again.
    Fatal(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient(reason) | Failure::Fatal(reason) => f.write_str(reason),
        }
    }
}

/// One server: its base URL and an HTTP agent with the run's timeouts.
pub struct Connection {
    url: String,
    agent: ureq::Agent,
}

impl Connection {
    /// A client of the server at `url` (`http://host:port`); a request may take `timeout`
    /// in all, its connection `connect_timeout`.
    pub fn new(url: &str, timeout: Duration, connect_timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(connect_timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            url: url.trim_end_matches('/').to_owned(),
            agent,
        }
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `POST path` with `body` as JSON; the answer parsed as `T`.
    pub fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Failure> {
        let answer = self
            .agent
            .post(format!("{}{path}", self.url))
            .send_json(body);
        self.read(path, answer)
    }

    /// `POST path` with `body` as JSON; the answer's text, whatever it is (vLLM's LoRA routes
    /// answer success in plain text).
    pub fn post_for_text<B: Serialize>(&self, path: &str, body: &B) -> Result<String, Failure> {
        let answer = self
            .agent
            .post(format!("{}{path}", self.url))
            .send_json(body);
        self.body(path, answer)
    }

    /// `GET path`; the answer parsed as `T`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        let answer = self.agent.get(format!("{}{path}", self.url)).call();
        self.read(path, answer)
    }

    /// `GET path` answered with a success status, whatever the body (SGLang's `/health` is
    /// empty, sglang-router's says `OK`).
    pub fn get_ok(&self, path: &str) -> Result<(), Failure> {
        let answer = self.agent.get(format!("{}{path}", self.url)).call();
        self.body(path, answer).map(drop)
    }

    fn read<T: DeserializeOwned>(
        &self,
        path: &str,
        answer: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, Failure> {
        let body = self.body(path, answer)?;
        serde_json::from_str(&body).map_err(|e| {
            Failure::Fatal(format!(
                "the answer to {path} is not the JSON the protocol answers: {e}"
            ))
        })
    }

    /// The body of a successful answer; a failure otherwise.
    fn body(
        &self,
        path: &str,
        answer: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<String, Failure> {
        let mut answer = match answer {
            Ok(answer) => answer,
            Err(error @ (ureq::Error::BadUri(_) | ureq::Error::TlsRequired)) => {
                return Err(Failure::Fatal(format!("{error} (use an http:// URL)")))
            }
            Err(error) => return Err(Failure::Transient(error.to_string())),
        };
        let status = answer.status().as_u16();
        let body = answer
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| Failure::Transient(format!("reading the answer to {path}: {e}")))?;
        if !(200..300).contains(&status) {
            let said: String = body.chars().take(MAX_ERROR_CHARS).collect();
            let reason = format!("{path} answered {status}: {said}");
            return Err(if status >= 500 {
                Failure::Transient(reason)
            } else {
                Failure::Fatal(reason)
            });
        }
        Ok(body)
    }
}
