//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};

/// The NQ data shipped in the repository (`data/nq`).
pub fn nq_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nq");
    assert!(
        dir.join("corpus.jsonl").is_file(),
        "the NQ data is missing at {}: it is part of the repository (data/nq)",
        dir.display()
    );
    dir
}

/// A BM25 index of the NQ corpus in `index_dir`.
pub fn nq_bm25(index_dir: &Path) -> Bm25Retriever {
    Bm25Retriever::open_or_build(
        &nq_dir().join("corpus.jsonl"),
        index_dir,
        &Bm25Options {
            threads: 1,
            ..Bm25Options::default()
        },
        &|_| {},
    )
    .expect("index the NQ corpus")
}
