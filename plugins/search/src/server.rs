//! An HTTP server exposing a [`Retriever`] over Search-R1's retrieval API (see
//! [`crate::retriever::api`]): `POST /retrieve`, plus `GET /health`.
//!
//! Every bad request gets a JSON `{"error": "..."}` answer naming the limit it broke and the flag
//! that raises it (400 malformed body, `topk` over the limit or a query over the retriever's
//! limits; 404 unknown path; 405 wrong method; 413 body too large, more passages or more query
//! terms than a request may have; 500 retrieval failure); nothing a client sends stops the server.
//!
//! What one request may cost is bounded: its body by [`ServerConfig::max_body_bytes`], its search
//! work by the retriever's [`QueryLimits`](crate::retriever::query::QueryLimits) (terms a query,
//! terms a request), its passages, hence memory and response size, by
//! [`ServerConfig::max_passages`]. The response is streamed, not built in memory. How long a
//! client may stall, and how many requests are answered at once, is [`drmas_http_server`]'s to
//! bound ([`ServerConfig::idle_timeout`], [`ServerConfig::workers`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use drmas_http_server::{HttpServer, Limits, Method, Reply, Request, Service, StopHandle};
use serde::{Serialize, Serializer};

use crate::retriever::api::{
    ErrorBody, RetrieveRequest, RetrieveResponse, WireItem, RETRIEVE_PATH,
};
use crate::retriever::query::QueryTooLarge;
use crate::retriever::{Hit, Retriever, RetrieverError};

/// How the server answers.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Passages per query when a request gives no `topk` (Search-R1 serves 3).
    pub default_top_k: usize,
    /// The largest `topk` accepted.
    pub max_top_k: usize,
    /// The most passages one request may ask for: its queries times its `topk`.
    pub max_passages: usize,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Requests answered at once, each on a thread of its own; later ones wait their turn.
    pub workers: usize,
    /// How long a client may pause mid-request or mid-answer, or leave a kept-alive connection
    /// idle, before the server closes its connection.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            default_top_k: 3,
            max_top_k: 1000,
            max_passages: 32_768,
            max_body_bytes: 16 << 20,
            workers: 4,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// A server that could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address could not be bound.
    #[error(
        "cannot listen on {addr}: {reason}; pick another --host/--port (port 0 picks a free one)"
    )]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why it failed.
        reason: String,
    },
    /// Serving stopped on an error of the machine's (no threads, no event loop).
    #[error("the retrieval server stopped: {0}")]
    Serve(#[from] std::io::Error),
}

/// A bound retrieval server; [`RetrievalServer::run`] serves until [`ServerHandle::stop`].
pub struct RetrievalServer {
    http: HttpServer,
    retrieval: Arc<Retrieval>,
}

/// The answers: the retriever and the limits it serves within.
struct Retrieval {
    retriever: Arc<dyn Retriever>,
    config: ServerConfig,
}

/// Stops a running [`RetrievalServer`] from another thread.
#[derive(Debug, Clone)]
pub struct ServerHandle(StopHandle);

impl ServerHandle {
    /// Makes [`RetrievalServer::run`] return once the requests in progress are answered and
    /// their answers sent.
    pub fn stop(&self) {
        self.0.stop();
    }
}

impl RetrievalServer {
    /// Binds `addr` (`host:port`; port 0 picks a free port) to serve `retriever`.
    pub fn bind(
        addr: &str,
        retriever: Arc<dyn Retriever>,
        config: ServerConfig,
    ) -> Result<RetrievalServer, ServerError> {
        let http = HttpServer::bind(addr).map_err(|error| ServerError::Bind {
            addr: addr.to_owned(),
            reason: error.to_string(),
        })?;
        Ok(RetrievalServer {
            http,
            retrieval: Arc::new(Retrieval { retriever, config }),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// The base URL of the server (`http://host:port`).
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr())
    }

    /// A handle to stop the server.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle(self.http.stop_handle())
    }

    /// Serves requests, [`ServerConfig::workers`] at once, until stopped.
    pub fn run(self) -> Result<(), ServerError> {
        let config = &self.retrieval.config;
        let limits = Limits {
            max_body_bytes: config.max_body_bytes,
            body_advice: "send fewer queries a request, or raise the server's --max-body-bytes"
                .to_owned(),
            idle_timeout: config.idle_timeout,
            max_requests: config.workers.max(1),
        };
        self.http.serve(self.retrieval, limits)?;
        Ok(())
    }
}

impl Service for Retrieval {
    fn answer(&self, request: Request) -> Reply {
        match self.respond(&request) {
            Answer::Hits(hits) => Reply::json_streamed(200, hits),
            Answer::Health => Reply::json(200, &serde_json::json!({"status": "ok"})),
            Answer::Error { status, message } => self.refusal(status, message),
        }
    }

    fn refusal(&self, status: u16, message: String) -> Reply {
        Reply::json(status, &ErrorBody { error: message })
    }
}

impl Retrieval {
    /// What to answer to a request.
    fn respond(&self, request: &Request) -> Answer {
        match (request.path.as_str(), &request.method) {
            (RETRIEVE_PATH, &Method::POST) => self
                .retrieve(&request.body)
                .unwrap_or_else(|(status, message)| Answer::Error { status, message }),
            ("/health", &Method::GET) => Answer::Health,
            (RETRIEVE_PATH, other) => Answer::Error {
                status: 405,
                message: format!("{other} {RETRIEVE_PATH} is not allowed; use POST"),
            },
            (other, _) => Answer::Error {
                status: 404,
                message: format!("no endpoint {other}; use POST {RETRIEVE_PATH} or GET /health"),
            },
        }
    }

    /// Handles `POST /retrieve`: the hits, or an error status and message.
    fn retrieve(&self, body: &[u8]) -> Result<Answer, (u16, String)> {
        let parsed: RetrieveRequest = serde_json::from_slice(body).map_err(|error| {
            (
                400,
                format!(
                    "malformed request ({error}); expected {{\"queries\": [string], \
                     \"topk\": integer, \"return_scores\": bool}}"
                ),
            )
        })?;
        let top_k = match parsed.topk {
            None | Some(0) => self.config.default_top_k,
            Some(k) => k,
        };
        if top_k > self.config.max_top_k {
            return Err((
                400,
                format!(
                    "topk {top_k} is over the limit {}; ask for fewer passages, or raise the \
                     server's --max-topk",
                    self.config.max_top_k
                ),
            ));
        }
        let passages = parsed.queries.len().saturating_mul(top_k);
        if passages > self.config.max_passages {
            return Err((
                413,
                format!(
                    "the request asks for {passages} passages ({} queries × topk {top_k}), over \
                     the limit of {} a request; send fewer queries a request or a smaller topk, \
                     or raise the server's --max-passages",
                    parsed.queries.len(),
                    self.config.max_passages
                ),
            ));
        }
        let hits = self
            .retriever
            .search(&parsed.queries, top_k)
            .map_err(|error| match &error {
                RetrieverError::QueryTooLarge { reason, .. } => {
                    let flag = match reason {
                        QueryTooLarge::Bytes { .. } => "--max-query-bytes",
                        QueryTooLarge::Terms { .. } => "--max-query-terms",
                    };
                    (400, format!("{error}, or raise the server's {flag}"))
                }
                RetrieverError::BatchTooLarge { .. } => (
                    413,
                    format!("{error}, or raise the server's --max-batch-terms"),
                ),
                _ => (500, format!("retrieval failed: {error}")),
            })?;
        Ok(Answer::Hits(HitLists {
            hits,
            with_scores: parsed.return_scores,
        }))
    }
}

/// What the server answers.
enum Answer {
    /// `200`, the result lists of a retrieval.
    Hits(HitLists),
    /// `200`, `{"status": "ok"}`.
    Health,
    /// An error status, `{"error": message}`.
    Error {
        /// The HTTP status.
        status: u16,
        /// What went wrong and what to do.
        message: String,
    },
}

/// A retrieval's result lists, serialised as a [`RetrieveResponse`].
struct HitLists {
    /// One list per query.
    hits: Vec<Vec<Hit>>,
    /// Whether each document comes with its score.
    with_scores: bool,
}

impl Serialize for HitLists {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let result = self
            .hits
            .iter()
            .map(|list| {
                list.iter()
                    .map(|hit| WireItem::from_hit(hit, self.with_scores))
                    .collect()
            })
            .collect();
        RetrieveResponse { result }.serialize(serializer)
    }
}
