//! Errors of the retrieval backends.

use std::path::PathBuf;

use super::query::QueryTooLarge;
use crate::corpus::CorpusError;

/// A retrieval that failed; each variant says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RetrieverError {
    /// The corpus could not be read.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// The index folder could not be created, read or written.
    #[error(
        "BM25 index folder {dir}: {reason}; check the folder is writable, or delete it to rebuild"
    )]
    Index {
        /// The index folder.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A query is over the retriever's [`super::query::QueryLimits`]; nothing was searched.
    #[error("query {position} of the batch is refused: {reason}; search with a shorter query")]
    QueryTooLarge {
        /// The query's position in the batch (0-based).
        position: usize,
        /// The limit it is over.
        reason: QueryTooLarge,
    },
    /// A batch of queries has more terms together than the retriever's
    /// [`super::query::QueryLimits::max_batch_terms`]; nothing was searched.
    #[error(
        "the batch's queries have more than {limit} distinct terms together (counted query by \
         query); send fewer or shorter queries at a time"
    )]
    BatchTooLarge {
        /// The limit.
        limit: usize,
    },
    /// A request asked for zero passages.
    #[error("top_k must be at least 1")]
    ZeroTopK,
    /// The retrieval server could not be reached.
    #[error(
        "cannot reach retriever at {url} after {tries} tries: {reason}; start one with \
         `drmas-retriever serve --corpus <corpus.jsonl> --index-dir <dir> --port <port>`"
    )]
    Unreachable {
        /// The endpoint URL.
        url: String,
        /// How many attempts were made.
        tries: u32,
        /// The last connection error.
        reason: String,
    },
    /// The retrieval server answered with an error status.
    #[error("retriever at {url} answered HTTP {status}: {body}")]
    Status {
        /// The endpoint URL.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The response body (truncated).
        body: String,
    },
    /// The retrieval server's answer is not in the Search-R1 response format.
    #[error(
        "malformed response from retriever at {url}: {reason}; expected \
         {{\"result\": [[{{\"document\": {{\"id\", \"contents\"}}, \"score\"}}, ...], ...]}}"
    )]
    MalformedResponse {
        /// The endpoint URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}
