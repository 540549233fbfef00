//! The BM25 index on a small corpus: ranking, reuse, rebuild on corpus change, folder safety.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use drmas_search::retriever::bm25::{Bm25Options, Bm25Retriever};
use drmas_search::retriever::query::{QueryLimits, QueryTooLarge};
use drmas_search::retriever::{Retriever, RetrieverError};

fn write_corpus(dir: &Path, lines: &[(&str, &str, &str)]) -> PathBuf {
    let path = dir.join("corpus.jsonl");
    let text: String = lines
        .iter()
        .map(|(id, title, text)| {
            let contents = format!("\"{title}\"\n{text}");
            format!("{}\n", serde_json::json!({"id": id, "contents": contents}))
        })
        .collect();
    std::fs::write(&path, text).expect("write the corpus");
    path
}

/// Sets the modification time of `path` `seconds` into the future, whatever the clock resolution.
fn set_modified_later(path: &Path, seconds: u64) {
    let when = SystemTime::now() + Duration::from_secs(seconds);
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    file.set_modified(when).expect("set mtime");
}

const PASSAGES: [(&str, &str, &str); 4] = [
    (
        "p1",
        "Eiffel Tower",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
    ),
    (
        "p2",
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespeare.",
    ),
    (
        "p3",
        "Paris",
        "Paris is the capital and most populous city of France.",
    ),
    (
        "p4",
        "Röntgen",
        "Wilhelm Röntgen discovered X-rays and won the first Nobel Prize in Physics.",
    ),
];

/// Opens the index, returning it and the progress messages.
fn open(corpus: &Path, index: &Path) -> (Bm25Retriever, Vec<String>) {
    let messages = RefCell::new(Vec::new());
    let options = Bm25Options {
        progress_every: 2,
        threads: 1,
        ..Bm25Options::default()
    };
    let retriever = Bm25Retriever::open_or_build(corpus, index, &options, &|m: &str| {
        messages.borrow_mut().push(m.to_owned())
    })
    .expect("open or build");
    (retriever, messages.into_inner())
}

#[test]
fn ranks_by_bm25_over_title_and_text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = write_corpus(dir.path(), &PASSAGES);
    let (bm25, _) = open(&corpus, &dir.path().join("index"));
    assert_eq!(bm25.num_docs(), 4);
    let queries = vec![
        "who wrote hamlet?".to_owned(),
        "first nobel prize in physics (rontgen)".to_owned(),
        "capital of France".to_owned(),
        "the of and".to_owned(),
    ];
    let results = bm25.search(&queries, 2).expect("search");
    assert_eq!(results.len(), 4);
    assert_eq!(results[0][0].id, "p2");
    assert_eq!(results[0][0].title(), "Hamlet");
    assert_eq!(results[0][0].text(), PASSAGES[1].2);
    assert_eq!(results[1][0].id, "p4", "ASCII folding matches röntgen");
    assert_eq!(results[2][0].id, "p3");
    assert!(results[2].len() <= 2);
    assert!(results[2].windows(2).all(|w| w[0].score >= w[1].score));
    assert!(
        results[3].is_empty(),
        "a query of stop words matches nothing"
    );
    assert!(matches!(
        bm25.search(&queries, 0),
        Err(RetrieverError::ZeroTopK)
    ));
    // Any top_k finds at most the index's passages, without sizing a buffer by it.
    let everything = bm25
        .search_one("hamlet france paris nobel", usize::MAX)
        .expect("search");
    assert_eq!(everything.len(), 4);
}

#[test]
fn reuses_the_index_until_the_corpus_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = write_corpus(dir.path(), &PASSAGES);
    let index = dir.path().join("index");
    let (_, built) = open(&corpus, &index);
    assert!(built[0].starts_with("building BM25 index"), "{built:?}");
    assert!(
        built.contains(&"indexed 2 passages".to_owned()),
        "{built:?}"
    );
    assert!(
        built.contains(&"indexed 4 passages".to_owned()),
        "{built:?}"
    );

    let (_, reused) = open(&corpus, &index);
    assert_eq!(reused.len(), 1, "{reused:?}");
    assert!(reused[0].starts_with("reusing BM25 index"), "{reused:?}");

    // Same bytes, new modification time: checked by hash, reused.
    let bytes = std::fs::read(&corpus).expect("read");
    std::fs::write(&corpus, &bytes).expect("rewrite");
    set_modified_later(&corpus, 10);
    let (_, touched) = open(&corpus, &index);
    assert!(
        touched.iter().any(|m| m.contains("was touched")),
        "{touched:?}"
    );
    assert!(
        touched.last().is_some_and(|m| m.starts_with("reusing")),
        "{touched:?}"
    );

    // Same size, different content: rebuilt.
    let mut changed = PASSAGES;
    changed[1] = (
        "p2",
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespearf.",
    );
    write_corpus(dir.path(), &changed);
    set_modified_later(&corpus, 20);
    assert_eq!(
        std::fs::metadata(&corpus).expect("stat").len(),
        bytes.len() as u64
    );
    let (bm25, rebuilt) = open(&corpus, &index);
    assert!(
        rebuilt.iter().any(|m| m.starts_with("building")),
        "{rebuilt:?}"
    );
    let hits = bm25.search_one("shakespearf", 1).expect("search");
    assert_eq!(hits[0].id, "p2");

    // Fewer passages: rebuilt with the new count.
    write_corpus(dir.path(), &PASSAGES[..3]);
    let (bm25, _) = open(&corpus, &index);
    assert_eq!(bm25.num_docs(), 3);
}

#[test]
fn builders_pointed_at_one_folder_at_once_build_it_once_and_all_open_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Enough passages that a build takes a while, so the others arrive during it.
    let ids: Vec<String> = (0..3000).map(|i| format!("p{i}")).collect();
    let lines: Vec<(&str, &str, &str)> = ids
        .iter()
        .map(|id| {
            (
                id.as_str(),
                "Filler",
                "Some words about nothing in particular, again.",
            )
        })
        .collect();
    let corpus = write_corpus(dir.path(), &lines);
    let index = dir.path().join("index");
    let opened: Vec<(u64, Vec<String>)> = std::thread::scope(|scope| {
        let builders: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    let (bm25, messages) = open(&corpus, &index);
                    (bm25.num_docs(), messages)
                })
            })
            .collect();
        builders
            .into_iter()
            .map(|builder| builder.join().expect("a builder"))
            .collect()
    });
    let builds = opened
        .iter()
        .filter(|(_, messages)| messages.iter().any(|m| m.starts_with("building")))
        .count();
    assert_eq!(builds, 1, "{opened:?}");
    assert!(opened.iter().all(|(docs, _)| *docs == 3000), "{opened:?}");
}

#[test]
fn refuses_to_overwrite_a_foreign_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = write_corpus(dir.path(), &PASSAGES);
    let foreign = dir.path().join("photos");
    std::fs::create_dir(&foreign).expect("mkdir");
    std::fs::write(foreign.join("cat.jpg"), b"meow").expect("write");
    let error = Bm25Retriever::open_or_build(&corpus, &foreign, &Bm25Options::default(), &|_| {})
        .err()
        .expect("a foreign folder is refused");
    assert!(matches!(error, RetrieverError::Index { .. }), "{error:?}");
    assert!(
        error.to_string().contains("refusing to overwrite"),
        "{error}"
    );
    let left: Vec<_> = std::fs::read_dir(&foreign)
        .expect("the folder")
        .map(|entry| entry.expect("an entry").file_name())
        .collect();
    assert_eq!(left, ["cat.jpg"], "the foreign folder is left as it was");
}

#[test]
fn a_missing_corpus_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.jsonl");
    let error = Bm25Retriever::open_or_build(
        &missing,
        &dir.path().join("i"),
        &Bm25Options::default(),
        &|_| {},
    )
    .err()
    .expect("missing corpus");
    assert!(error.to_string().contains("nope.jsonl"), "{error}");
    assert!(error.to_string().contains("cannot read corpus"), "{error}");
}

#[test]
fn equal_scores_rank_in_corpus_order_whatever_the_build() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Twin passages score alike on every query; distractors keep the statistics realistic.
    let twins: Vec<String> = (0..40).map(|i| format!("twin-{i:02}")).collect();
    let mut lines: Vec<(&str, &str, &str)> = vec![
        ("d1", "Lion", "Lions hunt on the savanna at night."),
        ("d2", "Grass", "Savanna grass grows back after the rains."),
    ];
    for id in &twins {
        lines.push((id, "Zebra", "Zebra stripes stand out on the savanna grass."));
    }
    lines.push(("d3", "Horse", "A horse is not a zebra, stripes or not."));
    let corpus = write_corpus(dir.path(), &lines);
    let queries = vec![
        "zebra".to_owned(),
        "zebra stripes savanna grass".to_owned(),
        "savanna".to_owned(),
    ];
    // Two indexing threads share the passages between them, in an order that varies by run.
    let options = Bm25Options {
        threads: 2,
        ..Bm25Options::default()
    };
    let build = |name: &str| {
        Bm25Retriever::build(&corpus, &dir.path().join(name), &options, &|_| {})
            .expect("build")
            .search(&queries, 10)
            .expect("search")
    };
    let first = build("first");
    let second = build("second");
    assert_eq!(first, second, "two builds of one corpus rank alike");

    let ids = |hits: &[drmas_search::retriever::Hit]| -> Vec<String> {
        hits.iter().map(|hit| hit.id.clone()).collect()
    };
    // All twins tie: the first ten in corpus order.
    assert_eq!(ids(&first[1]), twins[..10]);
    let zebra = ids(&first[0]);
    let twins_found: Vec<&String> = zebra.iter().filter(|id| id.starts_with("twin")).collect();
    assert_eq!(
        twins_found,
        twins.iter().take(twins_found.len()).collect::<Vec<_>>()
    );
}

#[test]
fn queries_over_the_limits_are_refused_before_any_search() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = write_corpus(dir.path(), &PASSAGES);
    let limits = QueryLimits {
        max_bytes: 200,
        max_terms: 3,
        max_batch_terms: 5,
    };
    let (bm25, _) = open(&corpus, &dir.path().join("index"));
    let bm25 = bm25.with_query_limits(limits);

    // Terms are counted after analysis and de-duplication: repeats, case, stems and stop words
    // do not count.
    let three = "Paris PARIS paris tower towers the of Hamlet hamlet";
    assert!(bm25.search_one(three, 2).is_ok());
    let error = bm25
        .search_one("paris tower hamlet france", 2)
        .expect_err("four distinct terms");
    assert!(
        matches!(
            error,
            RetrieverError::QueryTooLarge {
                position: 0,
                reason: QueryTooLarge::Terms { limit: 3 }
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "query 0 of the batch is refused: it has more than 3 distinct terms; search with a \
         shorter query"
    );
    let long = "paris ".repeat(40);
    let error = bm25
        .search(&["hamlet".to_owned(), long], 2)
        .expect_err("240 bytes");
    assert!(
        matches!(
            error,
            RetrieverError::QueryTooLarge {
                position: 1,
                reason: QueryTooLarge::Bytes {
                    bytes: 240,
                    limit: 200
                }
            }
        ),
        "{error:?}"
    );

    // Five terms a batch: two queries of two and three pass, one more term does not.
    let two = "paris tower".to_owned();
    let three = "hamlet france nobel".to_owned();
    assert!(bm25.search(&[two.clone(), three.clone()], 1).is_ok());
    let error = bm25
        .search(&[two, three, "physics".to_owned()], 1)
        .expect_err("six terms");
    assert!(
        matches!(error, RetrieverError::BatchTooLarge { limit: 5 }),
        "{error:?}"
    );
}

#[test]
fn a_repeated_query_word_weighs_as_often_as_it_occurs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = write_corpus(dir.path(), &PASSAGES);
    let (bm25, _) = open(&corpus, &dir.path().join("index"));
    let once = bm25.search_one("hamlet", 1).expect("search");
    let twice = bm25.search_one("hamlet Hamlet", 1).expect("search");
    assert_eq!(once[0].id, twice[0].id);
    assert_eq!(twice[0].score, 2.0 * once[0].score);
}
