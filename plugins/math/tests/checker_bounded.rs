//! The checker answers in bounded time: hostile responses of a megabyte are read in time linear in
//! their length, and random long inputs stay within a time budget per byte.
//!
//! The budgets are generous (a loaded two-core machine passes them with room to spare); the
//! quadratic algorithms they guard against took seconds to minutes on these sizes.

use std::time::{Duration, Instant};

use drmas_math::answer::{extract_answer, is_equivalent, normalize, score};
use proptest::prelude::*;
use proptest::sample::select;

const MEGABYTE: usize = 1 << 20;

/// The time allowed for reading `len` bytes once with every entry point.
fn budget(len: usize) -> Duration {
    let per_byte = Duration::from_nanos(4_000);
    Duration::from_secs(1).max(per_byte * u32::try_from(len).unwrap_or(u32::MAX))
}

/// Runs every entry point of the checker on `response` and returns how long they took together.
fn read_everything(response: &str) -> Duration {
    let start = Instant::now();
    let answer = extract_answer(response);
    let _ = normalize(response);
    let _ = answer.as_deref().map(normalize);
    let _ = score(response, "5");
    let _ = is_equivalent(response, response);
    let _ = is_equivalent(response, "5");
    start.elapsed()
}

/// `unit` repeated to about a megabyte, inside `wrap` (`{}` marks where).
fn megabyte_of(unit: &str, wrap: &str) -> String {
    wrap.replace("{}", &unit.repeat(MEGABYTE / unit.len()))
}

fn assert_linear(response: &str) {
    let took = read_everything(response);
    assert!(
        took <= budget(response.len()),
        "{} bytes starting {:?} took {took:?}",
        response.len(),
        &response[..40]
    );
}

#[test]
fn a_megabyte_of_unclosed_boxes() {
    assert_linear(&megabyte_of("\\boxed{", "{}"));
    assert_linear(&megabyte_of("\\boxed{1} \\boxed{", "{}"));
}

#[test]
fn a_megabyte_of_text_groups_in_one_box() {
    assert_linear(&megabyte_of("\\text{a}", "\\boxed{5{}}"));
    assert_linear(&megabyte_of("\\text{", "\\boxed{5 {}}"));
    assert_linear(&megabyte_of("\\text{\\mbox{", "\\boxed{5 {}}"));
}

#[test]
fn a_megabyte_of_trailing_unit_words() {
    assert_linear(&megabyte_of(" cm", "\\boxed{5{}}"));
    assert_linear(&megabyte_of(" dollars", "The answer is 5{}."));
    assert_linear(&megabyte_of(" m", "#### 5{}"));
}

#[test]
fn a_megabyte_of_other_unclosed_or_repeated_shapes() {
    for (unit, wrap) in [
        ("\\frac{", "\\boxed{{}}"),
        ("\\sqrt[", "\\boxed{{}}"),
        ("{,}000", "\\boxed{1{}}"),
        (",\\! ", "\\boxed{1{}}"),
        ("1e5 ", "\\boxed{{}}"),
        ("(apples) ", "\\boxed{5 {}}"),
        ("a=1,", "\\boxed{{}}"),
        ("\\boxed ", "{}"),
        ("</think>", "{}"),
    ] {
        assert_linear(&megabyte_of(unit, wrap));
    }
}

/// Pieces of LaTeX and prose that the checker's steps look for.
const FRAGMENTS: &[&str] = &[
    "\\boxed{",
    "\\boxed ",
    "\\fbox{",
    "{",
    "}",
    "\\text{",
    "\\mbox{",
    " cm",
    " dollars",
    " m",
    "\\frac",
    "\\sqrt[",
    "]",
    "12",
    "3",
    ",",
    "{,}",
    ",\\! ",
    "4.5e3",
    "(",
    ")",
    " (apples)",
    "\\left(",
    "=",
    "$",
    "\n",
    "</think>",
    "####",
    "The answer is ",
    "\\%",
    "x",
    "^{",
    " ",
    "é",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_long_inputs_take_linear_time(
        pieces in prop::collection::vec(select(FRAGMENTS), 1..30_000),
        truth in select(&["5", "\\frac{1}{2}", "(1,2)", "a=2, b=3", "x+1"][..]),
    ) {
        let response: String = pieces.concat();
        let start = Instant::now();
        let _ = read_everything(&response);
        let _ = score(&response, truth);
        let took = start.elapsed();
        prop_assert!(took <= budget(response.len()), "{} bytes took {:?}", response.len(), took);
    }
}
