//! Units trailing a numeric answer, which carry no value: `5 \text{ cm}^2`, `18 dollars`,
//! `18 (apples)`.
//!
//! A one-letter unit word (`m`) is also a variable name, so the caller says which of them to keep:
//! [`one_letter_units`] lists the candidates, and [`strip_unit_words`] leaves those it is given.

use super::latex::matching_open;

/// Unit words that may trail a numeric answer ("18 dollars", "5 cm") and carry no value.
const UNIT_WORDS: &[&str] = &[
    "cm",
    "mm",
    "km",
    "m",
    "meter",
    "meters",
    "metre",
    "metres",
    "centimeters",
    "kilometers",
    "inch",
    "inches",
    "foot",
    "feet",
    "ft",
    "yard",
    "yards",
    "mile",
    "miles",
    "mph",
    "unit",
    "units",
    "square",
    "sq",
    "cubic",
    "degree",
    "degrees",
    "dollar",
    "dollars",
    "cent",
    "cents",
    "second",
    "seconds",
    "minute",
    "minutes",
    "hour",
    "hours",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "gram",
    "grams",
    "kg",
    "pound",
    "pounds",
    "lb",
    "lbs",
    "ounce",
    "ounces",
    "liter",
    "liters",
    "litre",
    "litres",
    "gallon",
    "gallons",
    "percent",
];

/// Text commands: their braced argument is plain text, and at the end of an answer a unit
/// (`\text{ cm}`).
pub const TEXT_COMMANDS: &[&str] = &[
    "\\text",
    "\\textbf",
    "\\textit",
    "\\textnormal",
    "\\mathrm",
    "\\mathbf",
    "\\mbox",
];

/// The unit words that are single letters, and so may be a variable instead (`\frac{37}{4} m`).
pub fn one_letter_units() -> impl Iterator<Item = &'static str> {
    UNIT_WORDS.iter().copied().filter(|w| w.len() == 1)
}

/// Removes trailing `\text{ cm}` / `\mbox{ inches}^2` units after a non-empty answer.
///
/// Each group is found by scanning back from its closing brace and is then dropped, so the work is
/// linear in the length of the answer however many groups trail it.
pub fn strip_text_units(s: &str) -> &str {
    let mut s = s.trim();
    loop {
        let (body, _) = strip_power(s);
        let Some(open) = body
            .strip_suffix('}')
            .and_then(|_| matching_open(body, body.len() - 1))
        else {
            return s;
        };
        let Some(cmd) = TEXT_COMMANDS
            .iter()
            .find(|cmd| body[..open].ends_with(*cmd))
        else {
            return s;
        };
        let prefix = body[..open - cmd.len()].trim_end();
        if prefix.is_empty() {
            return s;
        }
        s = prefix;
    }
}

/// `s` without a trailing square or cube (`^2`, `^{3}`), and whether it had one.
fn strip_power(s: &str) -> (&str, bool) {
    ["^2", "^3", "^{2}", "^{3}"]
        .iter()
        .find_map(|p| s.strip_suffix(p))
        .map_or((s, false), |body| (body.trim_end(), true))
}

/// Removes a unit in parentheses after a number: `18 (apples)`, `3.5 (square feet)`.
///
/// GSM8K-style datasets write such golds; a space before the parenthesis and words of three or
/// more letters inside it (or a unit word) tell a unit from a product such as `2(x)` or a choice
/// such as `(C)`.
pub fn strip_unit_annotation(s: &str) -> &str {
    let s = s.trim();
    let Some(inner_and_open) = s.strip_suffix(')') else {
        return s;
    };
    let Some(open) = inner_and_open.rfind('(') else {
        return s;
    };
    let (prefix, inner) = (&s[..open], &inner_and_open[open + 1..]);
    let is_words = !inner.trim().is_empty()
        && inner.chars().all(|c| c.is_ascii_alphabetic() || c == ' ')
        && inner
            .split(' ')
            .any(|w| w.len() >= 3 || (w.len() > 1 && is_unit_word(w)));
    let after_number = prefix.ends_with(' ') && prefix.chars().any(|c| c.is_ascii_digit());
    if is_words && after_number {
        prefix.trim_end()
    } else {
        s
    }
}

/// Removes unit words trailing a number ("18 dollars", "3 square feet"), except those in `keep`.
///
/// Words are peeled off the end one by one as slices, and the digit test is answered once, so a
/// long run of unit words costs time linear in its length.
pub fn strip_unit_words<'a>(s: &'a str, keep: &[&str]) -> &'a str {
    let mut s = s.trim();
    let Some(first_digit) = s.find(|c: char| c.is_ascii_digit()) else {
        return s;
    };
    while let Some((prefix, word)) = s.rsplit_once(' ') {
        let unit = is_unit_word(word) && !keep.contains(&word);
        if !unit || prefix.len() <= first_digit {
            break;
        }
        s = prefix.trim_end();
    }
    s
}

fn is_unit_word(word: &str) -> bool {
    UNIT_WORDS.iter().any(|u| u.eq_ignore_ascii_case(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_units_are_stripped_after_an_answer() {
        assert_eq!(strip_text_units("15\\mbox{ cm}^2"), "15");
        assert_eq!(strip_text_units("5 \\text{ m}\\text{ s}"), "5");
        assert_eq!(strip_text_units("\\text{Evelyn}"), "\\text{Evelyn}");
        assert_eq!(
            strip_text_units("5\\frac{1}{\\text{cm}}"),
            "5\\frac{1}{\\text{cm}}"
        );
        assert_eq!(strip_text_units("5 \\text{cm"), "5 \\text{cm");
    }

    #[test]
    fn unit_annotations_are_words_in_parentheses_after_a_number() {
        assert_eq!(strip_unit_annotation("18 (apples)"), "18");
        assert_eq!(strip_unit_annotation("3.5 (square feet)"), "3.5");
        assert_eq!(strip_unit_annotation("4 (cm)"), "4");
        assert_eq!(strip_unit_annotation("2(apples)"), "2(apples)");
        assert_eq!(strip_unit_annotation("2 (x)"), "2 (x)");
        assert_eq!(strip_unit_annotation("(C)"), "(C)");
        assert_eq!(strip_unit_annotation("x (apples)"), "x (apples)");
        assert_eq!(strip_unit_annotation("2 (x+1)"), "2 (x+1)");
    }

    #[test]
    fn unit_words_are_stripped_unless_kept() {
        assert_eq!(strip_unit_words("3 square feet", &[]), "3");
        assert_eq!(strip_unit_words("18 Dollars", &[]), "18");
        assert_eq!(strip_unit_words("\\frac{37}{4} m", &[]), "\\frac{37}{4}");
        assert_eq!(
            strip_unit_words("\\frac{37}{4} m", &["m"]),
            "\\frac{37}{4} m"
        );
        assert_eq!(strip_unit_words("feet", &[]), "feet");
        assert_eq!(strip_unit_words("5 apples", &[]), "5 apples");
    }
}
