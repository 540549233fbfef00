//! Bounds on the work queries may cause a retriever, and the reduction of a query to the distinct
//! terms it is searched with.
//!
//! A query costs about one posting-list scorer per distinct term, so an unbounded one (a runaway
//! generation, a hostile client) can hold a worker for minutes and gigabytes, and a batch of
//! many long queries for tens of seconds; queries over these bounds are refused before any
//! search.

use std::collections::BTreeMap;

use tantivy::tokenizer::TextAnalyzer;

/// The largest queries a retriever searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// The longest query, in bytes.
    pub max_bytes: usize,
    /// The most distinct terms of one query after analysis (a repeated word counts once, a stop
    /// word not at all).
    pub max_terms: usize,
    /// The most terms of a batch of queries searched together: the sum of their distinct terms.
    pub max_batch_terms: usize,
}

impl Default for QueryLimits {
    /// 4096 bytes and 256 distinct terms a query, many times a question's; 65 536 terms a batch,
    /// 25 a query for the 2560 queries of a Search-R1 training step (512 prompts × 5 rollouts).
    fn default() -> QueryLimits {
        QueryLimits {
            max_bytes: 4096,
            max_terms: 256,
            max_batch_terms: 65_536,
        }
    }
}

/// A query over one of the [`QueryLimits`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryTooLarge {
    /// Longer than [`QueryLimits::max_bytes`].
    #[error("it is {bytes} bytes long, over the limit of {limit} bytes")]
    Bytes {
        /// The query's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// More distinct terms than [`QueryLimits::max_terms`] (counting stops at the first one over).
    #[error("it has more than {limit} distinct terms")]
    Terms {
        /// The limit.
        limit: usize,
    },
}

/// The distinct terms `analyzer` makes of `query`, each with how often it occurs, or why the query
/// is over `limits`; analysis stops at the first term over the limit.
pub(crate) fn counted_terms(
    analyzer: &mut TextAnalyzer,
    query: &str,
    limits: QueryLimits,
) -> Result<BTreeMap<String, u32>, QueryTooLarge> {
    if query.len() > limits.max_bytes {
        return Err(QueryTooLarge::Bytes {
            bytes: query.len(),
            limit: limits.max_bytes,
        });
    }
    let mut terms = BTreeMap::new();
    let mut tokens = analyzer.token_stream(query);
    while tokens.advance() {
        let text = &tokens.token().text;
        if let Some(count) = terms.get_mut(text) {
            *count += 1;
        } else if terms.len() == limits.max_terms {
            return Err(QueryTooLarge::Terms {
                limit: limits.max_terms,
            });
        } else {
            terms.insert(text.clone(), 1);
        }
    }
    Ok(terms)
}
