//! Every example of docs/math.md's table, so the page stays true: (candidate, ground truth,
//! equal?) as the table writes them.

use drmas_math::answer::{is_equivalent, score};

const TABLE: &[(&str, &str, bool)] = &[
    ("\\dfrac{1}{2}", "\\frac12", true),
    ("0.5", "\\frac{1}{2}", true),
    ("1,000", "1000", true),
    ("1{,}000", "1000", true),
    ("10,\\!080", "10080", true),
    ("8, 221", "8221", false),
    ("8,221", "8221", true),
    ("4.5e33", "4.5\\times10^{33}", true),
    ("1E-5", "10^{-5}", true),
    ("2^{10}", "1024", true),
    ("2^{100}+1", "2^{100}", false),
    ("1.3333333", "\\frac43", true),
    ("1.33", "\\frac43", false),
    ("\\sqrt{2}/2", "\\frac{1}{\\sqrt2}", true),
    ("2(x+1)", "2x+2", true),
    ("2^{N}", "2^{k}", false),
    ("N", "n", false),
    ("(2, 3)", "(2,3)", true),
    ("(3,2)", "(2,3)", false),
    ("(1,2]", "[1,2)", false),
    ("\\{2,1\\}", "\\{1,2\\}", true),
    ("-2, 1", "1, -2", true),
    ("b=3, a=2", "a=2, b=3", true),
    ("2, 3", "a=2, b=3", true),
    ("3, 2", "a=2, b=3", false),
    ("25\\%", "25", true),
    ("50\\%", "0.5", false),
    ("18 dollars", "18", true),
    ("12 m", "12", true),
    ("\\frac{37}{4}m", "\\frac{37}{4} m", true),
    ("\\frac{37}{4}", "\\frac{37}{4} m", false),
    ("18", "18 (apples)", true),
];

#[test]
fn the_documented_examples_hold() {
    let wrong: Vec<String> = TABLE
        .iter()
        .filter(|(candidate, truth, equal)| is_equivalent(candidate, truth) != *equal)
        .map(|(candidate, truth, equal)| format!("{candidate} vs {truth}: expected {equal}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/math.md says otherwise:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_documented_extraction_order_holds() {
    assert_eq!(score("first \\boxed{3}, finally \\boxed{4}", "4"), 1.0);
    assert_eq!(score("so\n#### 42", "42"), 1.0);
    assert_eq!(score("The answer is 42.", "42"), 1.0);
    assert_eq!(score(&"\\boxed{".repeat(100_000), "4"), 0.0);
}
