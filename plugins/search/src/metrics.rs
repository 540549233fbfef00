//! Answer scoring as in Search-R1 (`verl/utils/reward_score/qa_em.py`) and SQuAD/FlashRAG:
//! normalisation, exact match, sub-exact match and token F1 against a list of golden answers.
//!
//! Normalisation follows the Python reference step for step: lowercase, drop ASCII punctuation
//! (Python's `string.punctuation`), replace the whole words `a`, `an`, `the` by a space, then
//! collapse whitespace. "Whole word" uses Unicode word characters (letters, digits, `_`), as
//! Python's `\b` does on `str`.

use std::collections::HashMap;

/// The articles removed by [`normalize_answer`].
const ARTICLES: [&str; 3] = ["a", "an", "the"];

/// Normalises an answer the way Search-R1's `normalize_answer` does.
///
/// ```
/// use drmas_search::metrics::normalize_answer;
/// assert_eq!(normalize_answer("  The Eiffel-Tower!  "), "eiffeltower");
/// assert_eq!(normalize_answer("A cat, an owl and THE dog."), "cat owl and dog");
/// ```
pub fn normalize_answer(text: &str) -> String {
    let lowered = text.to_lowercase();
    let without_punctuation: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    let without_articles = remove_articles(&without_punctuation);
    without_articles
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `c` is a word character for Python's `\b` on `str` patterns.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Replaces each maximal run of word characters that is an article by a single space.
fn remove_articles(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if ARTICLES.contains(&word.as_str()) {
            out.push(' ');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if is_word_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Exact match: the normalised prediction equals one of the normalised golden answers.
pub fn exact_match<S: AsRef<str>>(prediction: &str, golden_answers: &[S]) -> bool {
    let prediction = normalize_answer(prediction);
    golden_answers
        .iter()
        .any(|gold| normalize_answer(gold.as_ref()) == prediction)
}

/// Sub-exact match: one normalised golden answer is a substring of the normalised prediction.
///
/// Unlike the Python reference, a golden answer that normalises to the empty string (e.g. `"the"`)
/// only matches an empty prediction instead of matching every prediction.
pub fn sub_exact_match<S: AsRef<str>>(prediction: &str, golden_answers: &[S]) -> bool {
    let prediction = normalize_answer(prediction);
    golden_answers.iter().any(|gold| {
        let gold = normalize_answer(gold.as_ref());
        if gold.is_empty() {
            prediction.is_empty()
        } else {
            prediction.contains(&gold)
        }
    })
}

/// Token-level F1 on normalised whitespace tokens, the best over golden answers.
///
/// As SQuAD v1.1's `evaluate-v1.1.py`, the score is 0 whenever the two answers share no token,
/// so two answers that both normalise to nothing score 0 (SQuAD v2.0 would give 1); an empty
/// `golden_answers` list scores 0.
pub fn f1_score<S: AsRef<str>>(prediction: &str, golden_answers: &[S]) -> f64 {
    let prediction = normalize_answer(prediction);
    golden_answers
        .iter()
        .map(|gold| token_f1(&prediction, &normalize_answer(gold.as_ref())))
        .fold(0.0, f64::max)
}

/// F1 between two already normalised answers.
fn token_f1(prediction: &str, gold: &str) -> f64 {
    let predicted: Vec<&str> = prediction.split_whitespace().collect();
    let golden: Vec<&str> = gold.split_whitespace().collect();
    let mut gold_counts: HashMap<&str, usize> = HashMap::new();
    for token in &golden {
        *gold_counts.entry(token).or_default() += 1;
    }
    let mut common = 0usize;
    for token in &predicted {
        if let Some(count) = gold_counts.get_mut(token) {
            if *count > 0 {
                *count -= 1;
                common += 1;
            }
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / predicted.len() as f64;
    let recall = common as f64 / golden.len() as f64;
    2.0 * precision * recall / (precision + recall)
}
