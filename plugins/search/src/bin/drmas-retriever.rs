//! `drmas-retriever`: serves a BM25 index of a corpus over Search-R1's retrieval API.
//!
//! ```text
//! drmas-retriever serve --corpus corpus.jsonl --index-dir bm25-index --port 8000
//! curl -s localhost:8000/retrieve -d '{"queries": ["who wrote hamlet"], "topk": 3, "return_scores": true}'
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};
use drmas_search::retriever::query::QueryLimits;
use drmas_search::server::{RetrievalServer, ServerConfig};

/// Serve a BM25 index of a passage corpus over Search-R1's retrieval HTTP API.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build (on first use, or when the corpus changed) and serve the index.
    Serve {
        /// The corpus: JSONL, one {"id", "contents": "\"Title\"\ntext"} a line.
        #[arg(long)]
        corpus: PathBuf,
        /// The index folder (created; reused while the corpus is unchanged).
        #[arg(long)]
        index_dir: PathBuf,
        /// The address to listen on; 127.0.0.1 keeps the server private to this machine.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// The port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 8000)]
        port: u16,
        /// Passages per query when a request has no topk.
        #[arg(long, default_value_t = 3)]
        topk: usize,
        /// Requests answered at once; later ones wait their turn.
        #[arg(long, default_value_t = ServerConfig::default().workers)]
        workers: usize,
        /// How long a client may pause mid-request or mid-answer, or leave a kept-alive
        /// connection idle, before the server closes its connection, in seconds.
        #[arg(long, default_value_t = ServerConfig::default().idle_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
        idle_timeout_secs: u64,
        /// The largest topk a request may ask for.
        #[arg(long, default_value_t = ServerConfig::default().max_top_k)]
        max_topk: usize,
        /// The most passages a request may ask for (queries × topk); more is refused with 413.
        #[arg(long, default_value_t = ServerConfig::default().max_passages)]
        max_passages: usize,
        /// The largest request body, in bytes; more is refused with 413.
        #[arg(long, default_value_t = ServerConfig::default().max_body_bytes)]
        max_body_bytes: usize,
        /// The longest query, in bytes; a request with a longer one is refused with 400.
        #[arg(long, default_value_t = QueryLimits::default().max_bytes)]
        max_query_bytes: usize,
        /// The most distinct terms a query may have after analysis (repeats and stop words not
        /// counted); a request with a query of more is refused with 400.
        #[arg(long, default_value_t = QueryLimits::default().max_terms)]
        max_query_terms: usize,
        /// The most terms a request's queries may have together (each query's distinct terms,
        /// summed); more is refused with 413.
        #[arg(long, default_value_t = QueryLimits::default().max_batch_terms)]
        max_batch_terms: usize,
    },
}

fn main() -> ExitCode {
    let Command::Serve {
        corpus,
        index_dir,
        host,
        port,
        topk,
        workers,
        idle_timeout_secs,
        max_topk,
        max_passages,
        max_body_bytes,
        max_query_bytes,
        max_query_terms,
        max_batch_terms,
    } = Cli::parse().command;
    let progress = |message: &str| eprintln!("drmas-retriever: {message}");
    let retriever =
        match Bm25Retriever::open_or_build(&corpus, &index_dir, &Bm25Options::default(), &progress)
        {
            Ok(retriever) => retriever.with_query_limits(QueryLimits {
                max_bytes: max_query_bytes,
                max_terms: max_query_terms,
                max_batch_terms,
            }),
            Err(error) => {
                eprintln!("drmas-retriever: {error}");
                return ExitCode::FAILURE;
            }
        };
    let config = ServerConfig {
        default_top_k: topk,
        max_top_k: max_topk,
        max_passages,
        max_body_bytes,
        workers,
        idle_timeout: Duration::from_secs(idle_timeout_secs),
    };
    let server = match RetrievalServer::bind(&format!("{host}:{port}"), Arc::new(retriever), config)
    {
        Ok(server) => server,
        Err(error) => {
            eprintln!("drmas-retriever: {error}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("drmas-retriever: serving POST {}/retrieve", server.url());
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("drmas-retriever: {error}");
            ExitCode::FAILURE
        }
    }
}
