//! Units trailing a numeric answer, which carry no value: `5 \text{ cm}^2`, `18 dollars`.

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

/// Removes unit words trailing a number ("18 dollars", "3 square feet").
///
/// Words are peeled off the end one by one as slices, and the digit test is answered once, so a
/// long run of unit words costs time linear in its length.
pub fn strip_unit_words(s: &str) -> &str {
    let mut s = s.trim();
    let Some(first_digit) = s.find(|c: char| c.is_ascii_digit()) else {
        return s;
    };
    while let Some((prefix, word)) = s.rsplit_once(' ') {
        if !is_unit_word(word) || prefix.len() <= first_digit {
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
    fn unit_words_are_stripped_after_a_number() {
        assert_eq!(strip_unit_words("3 square feet"), "3");
        assert_eq!(strip_unit_words("18 Dollars"), "18");
        assert_eq!(strip_unit_words("feet"), "feet");
        assert_eq!(strip_unit_words("5 apples"), "5 apples");
    }
}
