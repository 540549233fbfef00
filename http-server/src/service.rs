//! [`Service`]: what a server answers, given each request with its body read whole.

use hyper::Method;

use crate::Reply;

/// One request, its body read whole within the server's limit.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: Method,
    /// The path, without the query string.
    pub path: String,
    /// The body (empty when there is none).
    pub body: Vec<u8>,
}

/// A server's answers.
pub trait Service: Send + Sync + 'static {
    /// Answers `request`. Runs on a thread of its own, so it may block for as long as its work
    /// takes (a generation, a search).
    fn answer(&self, request: Request) -> Reply;

    /// The answer to a request the server refused before the service saw it: `status` 400 (an
    /// unreadable body), 408 (a body that stalled), 413 (a body over the limit) or 500 (the
    /// service panicked), with `message` saying what is wrong and what to do. Each server words
    /// its errors in its protocol's shape.
    fn refusal(&self, status: u16, message: String) -> Reply;
}
