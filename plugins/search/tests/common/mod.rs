//! Helpers shared by the integration tests.

// Every test binary compiles this module and uses a part of it.
#![allow(dead_code)]

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

/// A search environment for tests that only load tasks (loading never searches): BM25 over a
/// one-passage corpus, indexed once per test process in a temp folder.
pub fn tasks_only_environment() -> drmas_search::SearchEnvironment {
    use drmas_sdk::Component;
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("drmas-tasks-only-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp folder");
        std::fs::write(
            dir.join("corpus.jsonl"),
            "{\"id\": \"0\", \"contents\": \"\\\"Paris\\\"\\nThe capital of France.\"}\n",
        )
        .expect("corpus");
        dir
    });
    let config = format!(
        "[retriever]\nkind = \"bm25\"\ncorpus = \"{}\"\nindex_dir = \"{}\"\n",
        dir.join("corpus.jsonl").display(),
        dir.join("index").display()
    );
    drmas_search::SearchEnvironment::from_config(&config.as_str().into())
        .expect("environment config")
}
