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
    /// The error's type in the answer (vLLM's names), if it has one.
    kind: Option<&'static str>,
}

impl Refusal {
    /// A refusal with `status` saying `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind: None,
        }
    }

    /// A refusal whose answer also names its type `kind` (`NotFoundError`), as vLLM's LoRA
    /// routes answer.
    pub fn typed(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind: Some(kind),
            ..Self::new(status, message)
        }
    }

    /// The answer, as SGLang gives it: `{"error": {"message": ...}}` (and `"type"`).
    pub fn reply(self) -> Reply {
        let mut answer = ErrorAnswer::new(self.message);
        answer.error.kind = self.kind.map(str::to_owned);
        Reply::json(self.status, &answer)
    }
}
