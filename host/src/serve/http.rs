//! Reading a bounded request body and answering JSON over tiny_http.

use std::io::Read;

use serde::Serialize;
use tiny_http::{Header, Request, Response};

use crate::engine::remote::wire::ErrorAnswer;

/// A refused request: the HTTP status and what to tell the client.
#[derive(Debug)]
pub struct Refusal {
    /// 400, 404, 405, 413, 503, …
    pub status: u16,
    /// What is wrong and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal with `status` saying `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// The request's body, refused with 413 past `limit` bytes (`flag` is the server option that
/// raises the limit).
pub fn read_body(request: &mut Request, limit: usize, flag: &str) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    request
        .as_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| Refusal::new(400, format!("cannot read the request body: {e}")))?;
    if body.len() > limit {
        return Err(Refusal::new(
            413,
            format!("request body over {limit} bytes; send fewer prompts a request, or raise the server's {flag}"),
        ));
    }
    Ok(body)
}

/// Answers `request` with `status` and `body` as JSON; a client that went away is ignored.
pub fn answer<T: Serialize>(request: Request, status: u16, body: &T) {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|e| {
        format!("{{\"error\":{{\"message\":\"cannot serialise the answer: {e}\"}}}}").into_bytes()
    });
    let mut response = Response::from_data(bytes).with_status_code(status);
    if let Ok(header) = Header::from_bytes("Content-Type", "application/json") {
        response.add_header(header);
    }
    let _ = request.respond(response);
}

/// Answers a [`Refusal`] as SGLang does: `{"error": {"message": ...}}`.
pub fn refuse(request: Request, refusal: Refusal) {
    answer(request, refusal.status, &ErrorAnswer::new(refusal.message));
}
