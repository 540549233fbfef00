//! Bodies both ways: reading a request's within the limits, and the answer's, whole or fed by
//! a writer on another thread as the client reads it.

use std::convert::Infallible;
use std::future::poll_fn;
use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use tokio::sync::mpsc;

/// The most a body's buffer takes before its bytes arrive.
const FIRST_ALLOCATION_BYTES: usize = 1 << 20;

/// Why a request's body was not read whole: its HTTP status and what to tell the client.
#[derive(Debug)]
pub(crate) struct BodyRefusal {
    pub status: u16,
    pub message: String,
}

/// What a body may be: at most `max_bytes`, no pause between its parts longer than `idle`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits<'a> {
    pub max_bytes: usize,
    pub idle: Duration,
    /// What a client over `max_bytes` should do.
    pub advice: &'a str,
}

impl BodyLimits<'_> {
    fn too_large(&self) -> BodyRefusal {
        BodyRefusal {
            status: 413,
            message: format!(
                "request body over {} bytes; {}",
                self.max_bytes, self.advice
            ),
        }
    }
}

/// Refuses a body whose announced length (`Content-Length`) is over the limit, unread.
fn check_announced(body: &Incoming, limits: BodyLimits<'_>) -> Result<(), BodyRefusal> {
    if body.size_hint().lower() > limits.max_bytes as u64 {
        return Err(limits.too_large());
    }
    Ok(())
}

/// Reads `body` whole within `limits`.
pub(crate) async fn read(
    mut body: Incoming,
    limits: BodyLimits<'_>,
) -> Result<Vec<u8>, BodyRefusal> {
    check_announced(&body, limits)?;
    // Memory for what arrives, not for what is announced.
    let announced = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    let mut bytes = Vec::with_capacity(announced.min(FIRST_ALLOCATION_BYTES));
    loop {
        let next = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout(limits.idle, next).await {
            Err(_) => {
                return Err(BodyRefusal {
                    status: 408,
                    message: format!(
                        "the request body stalled for over {} s; send the body whole with its \
                         request",
                        limits.idle.as_secs_f64()
                    ),
                })
            }
            Ok(None) => return Ok(bytes),
            Ok(Some(Err(error))) => {
                return Err(BodyRefusal {
                    status: 400,
                    message: format!("cannot read the request body: {error}"),
                })
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limits.max_bytes {
                return Err(limits.too_large());
            }
            bytes.extend_from_slice(&data);
        }
    }
}

/// An answer's body: whole, or the chunks a writer on another thread sends as they are read.
pub(crate) enum OutgoingBody {
    Whole(Option<Bytes>),
    Streamed {
        chunks: mpsc::Receiver<Bytes>,
        remaining: u64,
    },
}

impl Body for OutgoingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Self::Streamed { chunks, remaining } => chunks.poll_recv(cx).map(|chunk| {
                chunk.map(|chunk| {
                    *remaining = remaining.saturating_sub(chunk.len() as u64);
                    Ok(Frame::data(chunk))
                })
            }),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Whole(bytes) => bytes.is_none(),
            Self::Streamed { remaining, .. } => *remaining == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Self::Streamed { remaining, .. } => SizeHint::with_exact(*remaining),
        }
    }
}

/// The size of the chunks a streamed answer is sent in.
pub(crate) const CHUNK_BYTES: usize = 64 << 10;

/// A [`Write`] (for a blocking thread) that sends what it is given to an [`OutgoingBody`] in
/// chunks of [`CHUNK_BYTES`]; once the connection is gone, writes fail with `BrokenPipe`.
pub(crate) struct ChunkWriter {
    buffer: Vec<u8>,
    chunks: mpsc::Sender<Bytes>,
}

impl ChunkWriter {
    pub fn new(chunks: mpsc::Sender<Bytes>) -> Self {
        Self {
            buffer: Vec::with_capacity(CHUNK_BYTES),
            chunks,
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.chunks.blocking_send(chunk).map_err(|_| {
            io::Error::new(io::ErrorKind::BrokenPipe, "the client's connection closed")
        })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = CHUNK_BYTES - self.buffer.len();
        let taken = bytes.len().min(room);
        self.buffer.extend_from_slice(&bytes[..taken]);
        if self.buffer.len() == CHUNK_BYTES {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
