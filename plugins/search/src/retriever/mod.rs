//! Passage retrieval: the [`Retriever`] trait and its backends, a local BM25 index ([`bm25`]) and
//! a client of a Search-R1 compatible retrieval server ([`http`]).

pub mod api;
pub mod bm25;
pub mod error;
pub mod fingerprint;
pub mod http;
mod index_folder;
pub mod query;

pub use error::RetrieverError;

use serde::{Deserialize, Serialize};

use crate::corpus::{split_contents, title_of, Passage};

/// One retrieved passage and its score (higher is better; the scale depends on the backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The passage id.
    pub id: String,
    /// The passage's `contents`, byte for byte as the corpus holds it.
    pub contents: String,
    /// The retrieval score.
    pub score: f32,
}

impl Hit {
    /// A hit for `passage` with `score`.
    pub fn new(passage: Passage, score: f32) -> Hit {
        Hit {
            id: passage.id,
            contents: passage.contents,
            score,
        }
    }

    /// The passage title: see [`title_of`].
    pub fn title(&self) -> &str {
        title_of(&self.contents)
    }

    /// The passage text: what follows the first line of `contents`.
    pub fn text(&self) -> &str {
        split_contents(&self.contents).1
    }
}

/// Something that finds the passages most relevant to queries.
pub trait Retriever: Send + Sync {
    /// The `top_k` best passages for each query, best first; one list per query, in order.
    ///
    /// A list is shorter than `top_k` when fewer passages match the query.
    fn search(&self, queries: &[String], top_k: usize) -> Result<Vec<Vec<Hit>>, RetrieverError>;
}
