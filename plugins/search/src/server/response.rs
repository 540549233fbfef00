//! Writing a JSON response without holding its body in memory.
//!
//! The body is serialised twice: once into a byte counter for `Content-Length`, once through a
//! buffer onto the connection. A large response thus costs the server a buffer, not a copy of
//! the response; the hits it is made of are bounded by the request limits.

use std::io::{self, BufWriter, Write};

use serde::Serialize;
use tiny_http::StatusCode;

/// The largest buffer between the serialiser and the connection.
///
/// A response smaller than this leaves in one write with its head: tiny_http wrote head and body
/// separately, and Nagle's algorithm then held the body until the client's delayed ACK (~40 ms a
/// request).
const MAX_BUFFER_BYTES: usize = 1 << 20;
/// Room for the response head in the buffer.
const HEAD_BYTES: usize = 128;

/// Writes an HTTP/1.1 response with `status` and `body` serialised as JSON to `connection`.
pub fn write_json<T: Serialize>(
    connection: &mut dyn Write,
    status: u16,
    body: &T,
) -> io::Result<()> {
    let mut length = ByteCount(0);
    serde_json::to_writer(&mut length, body)?;
    let capacity = (length.0 + HEAD_BYTES).min(MAX_BUFFER_BYTES);
    let mut out = BufWriter::with_capacity(capacity, connection);
    write!(
        out,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        StatusCode(status).default_reason_phrase(),
        length.0
    )?;
    serde_json::to_writer(&mut out, body)?;
    out.flush()
}

/// A writer that only counts the bytes written to it.
struct ByteCount(usize);

impl Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
