//! [`HttpServer`]: the accept loop, one task per connection, and each request's way from its
//! head to the [`Service`] and back.

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_io_timeout::TimeoutStream;

use crate::body::{self, BodyLimits, ChunkWriter, OutgoingBody};
use crate::open_files;
use crate::reply::ReplyBody;
use crate::{Reply, Request, Service};

/// Chunks of a streamed answer buffered between its writer and the connection.
const STREAM_CHUNKS_IN_FLIGHT: usize = 4;
/// How long the accept loop waits after a failed accept (out of file descriptors, say) before
/// trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What one client may cost the server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// What a client whose body is over the limit should do (the 413 answer's advice), e.g.
    /// "send fewer prompts a request, or raise the server's --max-body-bytes".
    pub body_advice: String,
    /// The longest a request head or body may pause, a kept-alive connection may stay idle
    /// between requests, and a client may leave an answer unread, before the server ends the
    /// connection.
    pub idle_timeout: Duration,
    /// Requests answered at once (each on a thread of its own); later ones wait their turn.
    pub max_requests: usize,
}

/// A bound listening socket; [`HttpServer::serve`] serves a [`Service`] on it.
#[derive(Debug)]
pub struct HttpServer {
    listener: TcpListener,
    addr: SocketAddr,
    stop: Arc<Notify>,
}

/// Stops an [`HttpServer`] from another thread.
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<Notify>);

impl StopHandle {
    /// Makes [`HttpServer::serve`] stop accepting and return once the requests in progress
    /// are answered and their answers sent (also when called before it starts).
    pub fn stop(&self) {
        self.0.notify_one();
    }
}

impl HttpServer {
    /// Binds `addr` (`host:port`; port 0 picks a free port).
    pub fn bind(addr: &str) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Self {
            listener,
            addr,
            stop: Arc::new(Notify::new()),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that stops [`HttpServer::serve`].
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.stop))
    }

    /// Serves `service` within `limits` until stopped: connections on a runtime of two threads,
    /// each answer on a thread of its own (at most [`Limits::max_requests`] at once).
    ///
    /// Once stopped, it accepts no more connections and closes the idle ones; each other
    /// connection finishes the request it is on, its answer sent, and is closed (one that
    /// stalls is ended by the idle timeout, as ever), and `serve` returns when all of them are.
    ///
    /// It first raises the process's soft limit on open files to the hard limit: each
    /// connection holds a file.
    pub fn serve(self, service: Arc<dyn Service>, limits: Limits) -> io::Result<()> {
        match open_files::raise_to_hard_limit() {
            Ok((before, after)) if before < after => {
                tracing::debug!("raised the limit on open files from {before} to {after}");
            }
            Ok(_) => {}
            Err(error) => tracing::warn!("cannot raise the limit on open files: {error}"),
        }
        let max_requests = limits.max_requests.max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(max_requests * 2)
            .thread_name("drmas-http")
            .enable_all()
            .build()?;
        let shared = Arc::new(Shared {
            service,
            limits,
            requests: Arc::new(Semaphore::new(max_requests)),
        });
        let connections = GracefulShutdown::new();
        let result = runtime.block_on(accept_loop(
            self.listener,
            self.stop,
            &connections,
            Arc::clone(&shared),
        ));
        runtime.block_on(async {
            connections.shutdown().await;
            // An answer whose client left still runs, holding its permit: all of them back
            // means all answered.
            let permits = u32::try_from(max_requests).unwrap_or(u32::MAX);
            let _all = shared.requests.acquire_many(permits).await;
        });
        runtime.shutdown_background();
        result
    }
}

/// What every connection's task shares.
struct Shared {
    service: Arc<dyn Service>,
    limits: Limits,
    requests: Arc<Semaphore>,
}

/// Accepts connections until `stop`, each served on a task of its own that `connections`
/// watches.
async fn accept_loop(
    listener: TcpListener,
    stop: Arc<Notify>,
    connections: &GracefulShutdown,
    shared: Arc<Shared>,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        tokio::select! {
            () = stop.notified() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Answers leave in one write with their head; no waiting on delayed ACKs.
                    let _ = stream.set_nodelay(true);
                    let watcher = connections.watcher();
                    tokio::spawn(connection(stream, watcher, Arc::clone(&shared)));
                }
                Err(error) => {
                    tracing::warn!("cannot accept a connection: {error}; retrying");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
}

/// Serves the requests of one connection until the client closes it, a timeout ends it, or
/// the server stops (`watcher`: the request in progress is answered first).
async fn connection(stream: tokio::net::TcpStream, watcher: Watcher, shared: Arc<Shared>) {
    let idle = shared.limits.idle_timeout;
    // Writes only: hyper reads the connection while an answer is worked on (to see the client
    // leave), which a read timeout would end; heads and bodies have timeouts of their own.
    let mut stream = TimeoutStream::new(stream);
    stream.set_write_timeout(Some(idle));
    let io = TokioIo::new(Box::pin(stream));
    let service = service_fn(move |request| respond(request, Arc::clone(&shared)));
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(idle)
        // A client that closes its sending side after its request still gets the answer.
        .half_close(true)
        .serve_connection(io, service);
    let served = watcher.watch(connection).await;
    if let Err(error) = served {
        tracing::debug!("connection ended: {error}");
    }
}

/// One request: its body read within the limits, the service's answer, the response.
async fn respond(
    request: hyper::Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<OutgoingBody>, Infallible> {
    let (head, body) = request.into_parts();
    let limits = BodyLimits {
        max_bytes: shared.limits.max_body_bytes,
        idle: shared.limits.idle_timeout,
        advice: &shared.limits.body_advice,
    };
    // A body over the limit is refused unread; a body is read before the request waits for
    // its turn, so a client that stalls holds no turn.
    let body = match body::read(body, limits).await {
        Ok(body) => body,
        Err(refusal) => {
            return Ok(response(
                shared.service.refusal(refusal.status, refusal.message),
                None,
            ))
        }
    };
    let Ok(permit) = Arc::clone(&shared.requests).acquire_owned().await else {
        unreachable!("the semaphore is never closed")
    };
    let request = Request {
        method: head.method,
        path: head.uri.path().to_owned(),
        body,
    };
    // The permit goes with the answer: if the client leaves, the answer still holds its turn
    // until it is done.
    let service = Arc::clone(&shared.service);
    let answered = tokio::task::spawn_blocking(move || (service.answer(request), permit)).await;
    let (reply, permit) = match answered {
        Ok(answered) => answered,
        Err(_) => {
            let message = "the server failed while answering this request; its log says why";
            return Ok(response(
                shared.service.refusal(500, message.to_owned()),
                None,
            ));
        }
    };
    Ok(response(reply, Some(permit)))
}

/// The HTTP response of `reply`; a streamed body is written on a thread of its own, which
/// keeps `permit` until it is done.
fn response(reply: Reply, permit: Option<OwnedSemaphorePermit>) -> Response<OutgoingBody> {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = HeaderValue::from_static(reply.content_type);
    let body = match reply.body {
        ReplyBody::Bytes(bytes) => OutgoingBody::Whole(Some(bytes.into())),
        ReplyBody::Streamed { length, write } => {
            let (sender, chunks) = mpsc::channel(STREAM_CHUNKS_IN_FLIGHT);
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                // A failed write means the client left; its connection ends with it.
                let _ = write(&mut ChunkWriter::new(sender));
            });
            OutgoingBody::Streamed {
                chunks,
                remaining: length,
            }
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}
