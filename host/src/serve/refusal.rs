//! [`Refusal`]: a request the server will not answer, and its answer in SGLang's error shape.

use drmas_http_server::Reply;

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

    /// The answer, as SGLang gives it: `{"error": {"message": ...}}`.
    pub fn reply(self) -> Reply {
        Reply::json(self.status, &ErrorAnswer::new(self.message))
    }
}
