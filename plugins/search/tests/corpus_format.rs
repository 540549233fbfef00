//! Corpus parsing and Search-R1's passage formatting.

use std::path::Path;

use drmas_search::corpus::{read_corpus, CorpusError, Passage};
use drmas_search::format::{format_information, format_passages};
use drmas_search::retriever::Hit;

#[test]
fn a_passage_keeps_its_contents_and_reads_title_and_text_from_it() {
    let passage = Passage::new("7", "\"Eiffel Tower\"\nA tower.\nIn Paris.");
    assert_eq!(passage.title(), "Eiffel Tower");
    assert_eq!(passage.text(), "A tower.\nIn Paris.");
    assert_eq!(passage.contents, "\"Eiffel Tower\"\nA tower.\nIn Paris.");
    let untitled = Passage::new("8", "just text");
    assert_eq!((untitled.title(), untitled.text()), ("just text", ""));
    let unquoted = Passage::new("9", "Bare title\nbody");
    assert_eq!((unquoted.title(), unquoted.text()), ("Bare title", "body"));
    assert_eq!(unquoted.contents, "Bare title\nbody", "no quotes are added");
}

#[test]
fn reads_the_real_corpus() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/nq/corpus.jsonl");
    let passages = read_corpus(&path).expect("read the NQ corpus");
    assert_eq!(passages.len(), 3600);
    assert_eq!(passages[0].id, "nqo-0");
    assert_eq!(passages[0].title(), "List of Nobel laureates in Physics");
    assert!(passages[0]
        .text()
        .starts_with("The first Nobel Prize in Physics was awarded in 1901"));
    assert!(passages.iter().any(|p| p.id.starts_with("wiki18-")));
}

#[test]
fn a_malformed_corpus_line_names_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("corpus.jsonl");
    std::fs::write(
        &path,
        "{\"id\": \"1\", \"contents\": \"\\\"T\\\"\\nx\"}\n\n{\"id\": \"2\"}\n",
    )
    .expect("write");
    let error = read_corpus(&path).expect_err("line 3 has no contents");
    assert!(
        matches!(error, CorpusError::Malformed { line: 3, .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}:3: ", path.display())),
        "{error}"
    );
}

#[test]
fn passages_are_formatted_like_search_r1() {
    let hits = [
        Hit {
            id: "a".into(),
            contents: "\"Paris\"\nCapital of France.".into(),
            score: 3.0,
        },
        Hit {
            id: "b".into(),
            contents: "\"Lyon\"\nA city.\nOn the Rhône.".into(),
            score: 1.0,
        },
    ];
    assert_eq!(
        format_passages(&hits),
        "Doc 1(Title: \"Paris\") Capital of France.\nDoc 2(Title: \"Lyon\") A city.\nOn the Rhône.\n"
    );
    assert_eq!(
        format_information(&hits),
        "<information>Doc 1(Title: \"Paris\") Capital of France.\nDoc 2(Title: \"Lyon\") A city.\n\
         On the Rhône.</information>"
    );
    // As Search-R1, the title is the first line as written: no quotes are added.
    let unquoted = [Hit {
        id: "c".into(),
        contents: "Bare title\nbody".into(),
        score: 1.0,
    }];
    assert_eq!(
        format_passages(&unquoted),
        "Doc 1(Title: Bare title) body\n"
    );
    assert_eq!(format_information(&[]), "<information></information>");
}
