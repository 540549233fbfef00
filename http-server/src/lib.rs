//! Bounded JSON-over-HTTP/1.1 serving for drmas's servers (`drmas-host serve`, the search
//! plugin's retrieval server).
//!
//! A [`Service`] answers [`Request`]s whose bodies were read whole; [`HttpServer`] does the
//! rest within [`Limits`], so that what a client sends, or fails to send, costs the server a
//! bounded amount:
//!
//! - a body over the limit is refused with 413 from its `Content-Length` alone, unread (or as
//!   soon as a body without one passes the limit);
//! - a request head, a body or an answer's reader that stalls past the idle timeout ends its
//!   connection, as does a kept-alive connection left idle that long;
//! - each connection is a task, not a thread, and a body is read before its request waits for
//!   a turn, so stalled clients hold neither a thread nor a turn; at most
//!   [`Limits::max_requests`] requests are answered at once, the others wait their turn;
//! - a service that panics answers 500, and the server goes on;
//! - the process's soft limit on open files is raised to its hard limit, so that these bounds,
//!   not a default of 1024 files, decide how many connections it holds.

mod body;
mod open_files;
mod reply;
mod server;
mod service;

pub use self::reply::Reply;
pub use self::server::{HttpServer, Limits, StopHandle};
pub use self::service::{Request, Service};
pub use hyper::Method;
