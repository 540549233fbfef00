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
//! [`ServerConfig::max_passages`]. The response is streamed, not built in memory.

mod response;

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tiny_http::{Method, Request, Server};

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
    /// Threads answering requests.
    pub workers: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            default_top_k: 3,
            max_top_k: 1000,
            max_passages: 32_768,
            max_body_bytes: 16 << 20,
            workers: 4,
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
}

/// A bound retrieval server; [`RetrievalServer::run`] serves until [`ServerHandle::stop`].
pub struct RetrievalServer {
    http: Arc<Server>,
    addr: SocketAddr,
    retriever: Arc<dyn Retriever>,
    config: ServerConfig,
    stopping: Arc<AtomicBool>,
}

/// Stops a running [`RetrievalServer`] from another thread.
#[derive(Clone)]
pub struct ServerHandle {
    http: Arc<Server>,
    workers: usize,
    stopping: Arc<AtomicBool>,
}

impl ServerHandle {
    /// Makes [`RetrievalServer::run`] return once the requests in progress are answered.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for _ in 0..self.workers {
            self.http.unblock();
        }
    }
}

impl RetrievalServer {
    /// Binds `addr` (`host:port`; port 0 picks a free port) to serve `retriever`.
    pub fn bind(
        addr: &str,
        retriever: Arc<dyn Retriever>,
        config: ServerConfig,
    ) -> Result<RetrievalServer, ServerError> {
        let bind_error = |reason: String| ServerError::Bind {
            addr: addr.to_owned(),
            reason,
        };
        let http = Server::http(addr).map_err(|error| bind_error(error.to_string()))?;
        let bound = http
            .server_addr()
            .to_ip()
            .ok_or_else(|| bind_error("not an IP address".to_owned()))?;
        Ok(RetrievalServer {
            http: Arc::new(http),
            addr: bound,
            retriever,
            config,
            stopping: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of the server (`http://host:port`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A handle to stop the server.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            http: Arc::clone(&self.http),
            workers: self.config.workers.max(1),
            stopping: Arc::clone(&self.stopping),
        }
    }

    /// Serves requests on [`ServerConfig::workers`] threads until stopped.
    pub fn run(&self) {
        std::thread::scope(|scope| {
            for _ in 0..self.config.workers.max(1) {
                scope.spawn(|| self.work());
            }
        });
    }

    /// One worker's loop.
    fn work(&self) {
        loop {
            match self.http.recv() {
                Ok(request) => self.answer(request),
                Err(_) if self.stopping.load(Ordering::SeqCst) => return,
                // An accept error concerns one client only; keep serving the others.
                Err(_) => continue,
            }
        }
    }

    /// Answers one request; a client that went away is not the server's problem.
    fn answer(&self, mut request: Request) {
        let reply = self.respond(&mut request);
        let mut connection = request.into_writer();
        // The only error is a write to a closed connection.
        let _ = match reply {
            Reply::Hits { hits, with_scores } => {
                let result = hits
                    .iter()
                    .map(|list| {
                        list.iter()
                            .map(|hit| WireItem::from_hit(hit, with_scores))
                            .collect()
                    })
                    .collect();
                response::write_json(&mut *connection, 200, &RetrieveResponse { result })
            }
            Reply::Health => {
                response::write_json(&mut *connection, 200, &serde_json::json!({"status": "ok"}))
            }
            Reply::Error { status, message } => {
                response::write_json(&mut *connection, status, &ErrorBody { error: message })
            }
        };
    }

    /// What to answer to a request.
    fn respond(&self, request: &mut Request) -> Reply {
        let path = request
            .url()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_owned();
        let method = request.method().clone();
        match (path.as_str(), method) {
            (RETRIEVE_PATH, Method::Post) => self
                .retrieve(request)
                .unwrap_or_else(|(status, message)| Reply::Error { status, message }),
            ("/health", Method::Get) => Reply::Health,
            (RETRIEVE_PATH, other) => Reply::Error {
                status: 405,
                message: format!("{other} {RETRIEVE_PATH} is not allowed; use POST"),
            },
            (other, _) => Reply::Error {
                status: 404,
                message: format!("no endpoint {other}; use POST {RETRIEVE_PATH} or GET /health"),
            },
        }
    }

    /// Handles `POST /retrieve`: the hits, or an error status and message.
    fn retrieve(&self, request: &mut Request) -> Result<Reply, (u16, String)> {
        let limit = self.config.max_body_bytes;
        let mut body = Vec::new();
        request
            .as_reader()
            .take(limit as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|error| (400, format!("cannot read the request body: {error}")))?;
        if body.len() > limit {
            return Err((
                413,
                format!(
                    "request body over {limit} bytes; send fewer queries a request, or raise the \
                     server's --max-body-bytes"
                ),
            ));
        }
        let parsed: RetrieveRequest = serde_json::from_slice(&body).map_err(|error| {
            (
                400,
                format!(
                    "malformed request ({error}); expected {{\"queries\": [string], \
                     \"topk\": integer, \"return_scores\": bool}}"
                ),
            )
        })?;
        drop(body);
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
        Ok(Reply::Hits {
            hits,
            with_scores: parsed.return_scores,
        })
    }
}

/// What the server answers.
enum Reply {
    /// `200`, the result lists of a retrieval.
    Hits {
        /// One list per query.
        hits: Vec<Vec<Hit>>,
        /// Whether each document comes with its score.
        with_scores: bool,
    },
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
