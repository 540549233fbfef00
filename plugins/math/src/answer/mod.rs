//! The answer checker: extraction, normalisation and equivalence of final answers.
//!
//! This is the reward of the math task: a response scores 1 when the answer it states is
//! mathematically the ground truth, however it is written, and 0 otherwise. No input panics, and
//! none takes more than time linear in its length.

mod compare;
pub mod expr;
mod extract;
mod latex;
mod normalize;
mod numerals;
mod rational;
mod units;

pub use compare::{is_equivalent, MAX_ANSWER_LEN};
pub use extract::extract_answer;
pub use normalize::normalize;
pub(crate) use numerals::remove_thousands_separators;
pub use rational::Rational;
pub(crate) use units::strip_unit_annotation;

/// The reward for a response: 1.0 when its extracted final answer is equivalent to the ground
/// truth, 0.0 when it is not, states no answer, or states one longer than [`MAX_ANSWER_LEN`].
///
/// Its time is linear in the length of the response, whatever the response holds.
pub fn score(response: &str, ground_truth: &str) -> f64 {
    match extract_answer(response) {
        Some(answer) if is_equivalent(&answer, ground_truth) => 1.0,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_responses() {
        assert_eq!(score("so \\boxed{\\dfrac{1}{2}}", "0.5"), 1.0);
        assert_eq!(score("so \\boxed{3.0001}", "3"), 0.0);
        assert_eq!(score("no answer here", "3"), 0.0);
        assert_eq!(score("#### 1,000", "1000"), 1.0);
    }

    #[test]
    fn equivalences() {
        let same = [
            ("\\frac{1}{2}", "0.5"),
            ("1/2", "\\frac12"),
            ("3.0", "3"),
            ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
            ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
            ("2(k+1)", "2k+2"),
            ("ab+2a+5b+10", "(a+5)(b+2)"),
            ("-2,1", "1,-2"),
            ("\\{-2, 1\\pm\\sqrt{5}\\}", "\\{1\\pm\\sqrt{5},-2\\}"),
            ("(-\\infty,0]", "(-\\infty, 0]"),
            (
                "\\begin{pmatrix}-\\frac13\\\\\\frac23\\\\\\frac53\\end{pmatrix}",
                "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
            ),
            ("\\frac{9}{5}", "1\\frac{4}{5}"),
            ("Evelyn", "\\text{Evelyn}"),
        ];
        for (c, g) in same {
            assert!(is_equivalent(c, g), "{c} vs {g}");
        }
        let different = [
            ("3.0001", "3"),
            ("28800.01", "28800"),
            ("4", "3"),
            ("-3", "3"),
            ("(1,2)", "(1,2]"),
            ("(3)", "(3,4)"),
            ("\\frac{1}{3}", "0.333"),
            ("east", "\\text{west}"),
            ("eats", "\\text{east}"),
            ("2k+1", "2k+2"),
            ("", "3"),
            ("3", ""),
            ("52_8", "52_9"),
        ];
        for (c, g) in different {
            assert!(!is_equivalent(c, g), "{c} vs {g}");
        }
    }
}
