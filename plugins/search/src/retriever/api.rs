//! The wire format of Search-R1's retrieval server (`search_r1/search/retrieval_server.py`),
//! shared by [`crate::server`] and the [`super::http`] client.
//!
//! Request, `POST /retrieve`:
//! `{"queries": ["..."], "topk": 3, "return_scores": true}` (`topk` optional: absent, null or 0
//! means the server's default; `return_scores` optional, default false).
//!
//! Response: one list per query, best first. With `return_scores`:
//! `{"result": [[{"document": {"id": "...", "contents": "\"Title\"\ntext"}, "score": 12.5}]]}`;
//! without: `{"result": [[{"id": "...", "contents": "..."}]]}`.

use serde::{Deserialize, Serialize};

use super::Hit;

/// The endpoint path.
pub const RETRIEVE_PATH: &str = "/retrieve";

/// A retrieval request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveRequest {
    /// The queries.
    pub queries: Vec<String>,
    /// Passages per query; `None` or 0 means the server's default.
    #[serde(default)]
    pub topk: Option<usize>,
    /// Whether to wrap each document with its score.
    #[serde(default)]
    pub return_scores: bool,
}

/// A corpus document as the server returns it, borrowed from the [`Hit`] it shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireDocument<'a> {
    /// The passage id.
    pub id: &'a str,
    /// The corpus `contents`, byte for byte (by convention `"\"Title\"\ntext"`).
    pub contents: &'a str,
}

/// One item of a result list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum WireItem<'a> {
    /// A document with its score (`return_scores: true`).
    Scored {
        /// The document.
        document: WireDocument<'a>,
        /// Its score.
        score: f32,
    },
    /// A bare document (`return_scores: false`).
    Bare(WireDocument<'a>),
}

impl WireItem<'_> {
    /// The wire item for `hit`.
    pub fn from_hit(hit: &Hit, with_score: bool) -> WireItem<'_> {
        let document = WireDocument {
            id: &hit.id,
            contents: &hit.contents,
        };
        if with_score {
            WireItem::Scored {
                document,
                score: hit.score,
            }
        } else {
            WireItem::Bare(document)
        }
    }
}

/// A retrieval response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrieveResponse<'a> {
    /// One list per query, in request order.
    pub result: Vec<Vec<WireItem<'a>>>,
}

/// The body of every error response: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
}
