//! Answer metrics against values computed with Search-R1's Python reference (`qa_em.py`) and the
//! SQuAD token F1.

use drmas_search::metrics::{exact_match, f1_score, normalize_answer, sub_exact_match};

#[test]
fn normalisation_matches_the_python_reference() {
    let table = [
        ("The Cat!", "cat"),
        ("  The Eiffel-Tower!  ", "eiffeltower"),
        ("A cat, an owl and THE dog.", "cat owl and dog"),
        ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),
        ("theater", "theater"),
        ("Anne's 'a' apple", "annes apple"),
        ("U.S.A.", "usa"),
        ("l'été à Paris", "lété à paris"),
        ("the_a the-a", "thea thea"),
        ("ÀN APPLE", "àn apple"),
        ("rock\u{a0}and\troll\n", "rock and roll"),
        ("\u{201c}the\u{201d} end", "\u{201c} \u{201d} end"),
        ("Thé a", "thé"),
        ("", ""),
        ("the", ""),
    ];
    for (input, expected) in table {
        assert_eq!(
            normalize_answer(input),
            expected,
            "normalize_answer({input:?})"
        );
    }
}

#[test]
fn exact_match_compares_normalised_answers() {
    let golds = ["Wilhelm Conrad Röntgen", "Röntgen"];
    let table = [
        ("Wilhelm Conrad Röntgen", true),
        ("wilhelm conrad röntgen.", true),
        ("The Röntgen", true),
        ("Röntgen, Wilhelm Conrad", false),
        ("Wilhelm Röntgen", false),
        ("", false),
    ];
    for (prediction, expected) in table {
        assert_eq!(
            exact_match(prediction, &golds),
            expected,
            "exact_match({prediction:?})"
        );
    }
    assert!(!exact_match("anything", &[] as &[&str]));
}

#[test]
fn sub_exact_match_finds_a_golden_answer_inside_the_prediction() {
    let golds = ["May 18, 2018"];
    let table = [
        ("It was released on May 18, 2018.", true),
        ("may 18 2018", true),
        ("May 2018", false),
        ("", false),
    ];
    for (prediction, expected) in table {
        assert_eq!(
            sub_exact_match(prediction, &golds),
            expected,
            "sub_em({prediction:?})"
        );
    }
    // A golden answer that normalises to nothing does not match every prediction.
    assert!(!sub_exact_match("Paris", &["The"]));
    assert!(sub_exact_match("a", &["The"]));
}

#[test]
fn f1_matches_the_squad_reference() {
    let table: [(&str, &[&str], f64); 7] = [
        ("the cat sat", &["cat sat on mat"], 2.0 / 3.0),
        ("Barack Obama", &["President Barack Obama"], 0.8),
        ("a b c", &["x y"], 0.0),
        ("May 18, 2018", &["May 18 2018"], 1.0),
        ("the the cat", &["cat cat"], 2.0 / 3.0),
        (
            "Barack Obama",
            &["Michelle Obama", "Barack Hussein Obama"],
            0.8,
        ),
        ("", &["Obama"], 0.0),
    ];
    for (prediction, golds, expected) in table {
        let f1 = f1_score(prediction, golds);
        assert!(
            (f1 - expected).abs() < 1e-12,
            "f1({prediction:?}, {golds:?}) = {f1}, want {expected}"
        );
    }
    // SQuAD v1.1 scores 0 without a common token, even when both sides normalise to nothing.
    assert_eq!(f1_score("", &["the"]), 0.0);
    assert_eq!(f1_score("a", &[""]), 0.0);
    assert_eq!(f1_score("", &["", "Obama"]), 0.0);
    // Exact match still counts two empty answers as equal.
    assert!(exact_match("", &["the"]));
    assert_eq!(f1_score("x", &[] as &[&str]), 0.0);
}
