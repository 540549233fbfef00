//! [`Reply`]: a status and a body (JSON, or text of a given type), held whole or written out as
//! the client reads it.

use std::io::{self, Write};

use serde::Serialize;

/// What a [`Service`](crate::Service) answers: a status and a body.
pub struct Reply {
    pub(crate) status: u16,
    pub(crate) body: ReplyBody,
    /// The body's `Content-Type`.
    pub(crate) content_type: &'static str,
}

/// JSON's `Content-Type`.
const JSON: &str = "application/json";

/// Writes a streamed body onto the connection (from a thread of its own).
pub(crate) type BodyWriter = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send>;

/// A reply's body.
pub(crate) enum ReplyBody {
    /// Serialised already.
    Bytes(Vec<u8>),
    /// `length` bytes that `write` produces while the client reads them.
    Streamed { length: u64, write: BodyWriter },
}

impl Reply {
    /// Its HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// `status` with `body` as it is, sent as `content_type` (e.g. Prometheus's
    /// `text/plain; version=0.0.4`).
    pub fn text(status: u16, content_type: &'static str, body: String) -> Self {
        Self {
            status,
            body: ReplyBody::Bytes(body.into_bytes()),
            content_type,
        }
    }

    /// `status` with `body` serialised as JSON (500 with the reason when it cannot be).
    pub fn json<T: Serialize + ?Sized>(status: u16, body: &T) -> Self {
        match serde_json::to_vec(body) {
            Ok(bytes) => Self {
                status,
                body: ReplyBody::Bytes(bytes),
                content_type: JSON,
            },
            Err(error) => Self::serialisation_failed(&error),
        }
    }

    /// `status` with `body` serialised as JSON while it is sent, so a large answer costs the
    /// server a buffer rather than a copy of the answer. `body` is serialised twice: once to
    /// count its bytes for `Content-Length`, once onto the connection.
    pub fn json_streamed<T: Serialize + Send + 'static>(status: u16, body: T) -> Self {
        let mut count = ByteCount(0);
        if let Err(error) = serde_json::to_writer(&mut count, &body) {
            return Self::serialisation_failed(&error);
        }
        Self {
            status,
            body: ReplyBody::Streamed {
                length: count.0,
                write: Box::new(move |out: &mut dyn Write| {
                    serde_json::to_writer(&mut *out, &body)?;
                    out.flush()
                }),
            },
            content_type: JSON,
        }
    }

    fn serialisation_failed(error: &serde_json::Error) -> Self {
        let message = serde_json::json!({
            "error": { "message": format!("cannot serialise the answer: {error}") }
        });
        Self {
            status: 500,
            body: ReplyBody::Bytes(message.to_string().into_bytes()),
            content_type: JSON,
        }
    }
}

/// A writer that only counts the bytes written to it.
struct ByteCount(u64);

impl Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
