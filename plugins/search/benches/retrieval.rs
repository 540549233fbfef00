//! Retrieval speed on the NQ data (3600 passages, 2655 questions as queries), printed:
//! index build and reopen time, BM25 queries per second one query at a time and in batches, and
//! the same through the HTTP server on loopback.
//!
//! `cargo bench -p drmas-search --bench retrieval`

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use drmas_search::dataset::{load_qa_jsonl, LoadOptions};
use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};
use drmas_search::retriever::http::{HttpRetriever, HttpRetrieverConfig};
use drmas_search::retriever::Retriever;
use drmas_search::server::{RetrievalServer, ServerConfig};

/// Passages per query, Search-R1's default.
const TOP_K: usize = 3;
/// Queries per request in the batched runs.
const BATCH: usize = 256;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("retrieval bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Queries per second of `retriever` over `queries`, in requests of `batch` queries.
fn queries_per_second(
    retriever: &dyn Retriever,
    queries: &[String],
    batch: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    for chunk in queries.chunks(batch) {
        retriever.search(chunk, TOP_K)?;
    }
    Ok(queries.len() as f64 / started.elapsed().as_secs_f64())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nq");
    let corpus = data.join("corpus.jsonl");
    let queries: Vec<String> =
        load_qa_jsonl(&data.join("questions.jsonl"), &LoadOptions::default())?
            .tasks
            .into_iter()
            .map(|task| task.question)
            .collect();
    let scratch = std::env::temp_dir().join(format!("drmas-search-bench-{}", std::process::id()));
    let index_dir: PathBuf = scratch.join("index");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "NQ: {} queries, corpus {}, top-k {TOP_K}, {cores} cores",
        queries.len(),
        corpus.display()
    );

    let started = Instant::now();
    let options = Bm25Options::default();
    Bm25Retriever::build(&corpus, &index_dir, &options, &|_| {})?;
    println!(
        "index build ({} threads): {:.3} s",
        options.threads,
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let bm25 = Bm25Retriever::open_or_build(&corpus, &index_dir, &options, &|_| {})?;
    println!(
        "index reopen (fingerprint check): {:.3} s",
        started.elapsed().as_secs_f64()
    );

    let single = queries_per_second(&bm25, &queries, 1)?;
    let serial = Bm25Retriever::open_or_build(&corpus, &index_dir, &options, &|_| {})?
        .with_search_threads(1);
    let batched_serial = queries_per_second(&serial, &queries, BATCH)?;
    let batched = queries_per_second(&bm25, &queries, BATCH)?;
    println!("BM25 in process: {single:.0} q/s one at a time, {batched_serial:.0} q/s in batches of {BATCH} on 1 thread, {batched:.0} q/s in batches of {BATCH} on {cores} threads");

    let server = RetrievalServer::bind("127.0.0.1:0", Arc::new(bm25), ServerConfig::default())?;
    let client = HttpRetriever::new(HttpRetrieverConfig::new(server.url()));
    let handle = server.handle();
    let (http_single, http_batched) = std::thread::scope(|scope| {
        let served = scope.spawn(move || server.run());
        let measured = queries_per_second(&client, &queries, 1)
            .and_then(|single| Ok((single, queries_per_second(&client, &queries, BATCH)?)));
        handle.stop();
        served.join().map_err(|_| "the server thread panicked")??;
        measured
    })?;
    println!("BM25 over HTTP (loopback): {http_single:.0} q/s one per request, {http_batched:.0} q/s in requests of {BATCH}");
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
