//! Canonical string form of a final answer, in the manner of the MATH graders.
//!
//! Two answers that differ only in presentation — `\dfrac12` and `\frac{1}{2}`, `5 \text{ cm}` and
//! `5`, `10,\!080` and `10080`, `x = 3` and `3`, `90^\circ` and `90` — normalise to the same
//! string, so that exact comparison and the expression evaluator see only the mathematical content.
//!
//! Every step takes time linear in the answer's length (braces are paired once, units are peeled
//! off as slices), so no answer a model writes can stall the reward.

use super::latex::Groups;
use super::numerals::{
    expand_scientific, join_braced_separators, remove_thousands_separators, strip_zero_decimals,
};
use super::units::{strip_text_units, strip_unit_annotation, strip_unit_words, TEXT_COMMANDS};

/// Spacing and sizing commands that never change an answer's value.
const SIZING_COMMANDS: &[&str] = &[
    "\\left", "\\right", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr", "\\big", "\\Big",
];

/// Normalises a final answer to its canonical string form.
pub fn normalize(answer: &str) -> String {
    normalize_keeping(answer, &[])
}

/// [`normalize`], except that the trailing one-letter words in `variables` are kept: the caller
/// knows they are variables of the ground truth (`\frac{37}{4} m`), not units.
pub(crate) fn normalize_keeping(answer: &str, variables: &[&str]) -> String {
    let mut s = remove_spacing(&join_braced_separators(strip_math_delimiters(
        answer.trim(),
    )));
    for (from, to) in [
        ("\\quad", " "),
        ("~", " "),
        ("\\displaystyle", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\circ", ""),
        ("°", ""),
        ("\\%", ""),
        ("%", ""),
        ("\\$", ""),
        ("$", ""),
    ] {
        s = s.replace(from, to);
    }
    for cmd in SIZING_COMMANDS {
        s = remove_command(&s, cmd);
    }
    s = trim_trailing_periods(&s);
    s = unwrap_text_commands(strip_text_units(&s));
    s = strip_unit_words(strip_unit_annotation(&s), variables).to_string();
    s = strip_assignment(&s);
    s = expand_scientific(&remove_thousands_separators(&s));
    s = remove_whitespace(&s);
    s = brace_single_token_args(&s, "\\frac", 2);
    s = brace_single_token_args(&s, "\\sqrt", 1);
    s = strip_zero_decimals(&s);
    if s.starts_with('.') && s[1..].starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '0');
    }
    trim_trailing_periods(&s)
}

/// Removes the spacing commands `\!`, `\,`, `\;`, `\:` and turns `\ ` into a space, leaving the
/// row separator `\\` of matrices intact.
///
/// A negative space `\!` also swallows the spaces typed after it: MATH writes thousands as
/// `11,\! 111`, one number, whereas a plain space after a comma separates list items.
fn remove_spacing(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(if c.is_whitespace() { ' ' } else { c });
            continue;
        }
        match chars.peek() {
            Some('\\') => {
                out.push_str("\\\\");
                chars.next();
            }
            Some('!') => {
                chars.next();
                while chars.next_if(|c| c.is_whitespace()).is_some() {}
            }
            Some(',' | ';' | ':') => {
                chars.next();
            }
            Some(w) if w.is_whitespace() => {
                out.push(' ');
                chars.next();
            }
            _ => out.push('\\'),
        }
    }
    out
}

/// Drops surrounding `$…$`, `\(…\)` and `\[…\]`.
fn strip_math_delimiters(s: &str) -> &str {
    for (open, close) in [("\\(", "\\)"), ("\\[", "\\]")] {
        if let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            return inner.trim();
        }
    }
    s
}

fn trim_trailing_periods(s: &str) -> String {
    s.trim().trim_end_matches('.').trim_end().to_string()
}

/// Removes `cmd` where it is a whole command name (`\left(` but not `\leftarrow`).
fn remove_command(s: &str, cmd: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find(cmd) {
        let after = &rest[pos + cmd.len()..];
        out.push_str(&rest[..pos]);
        if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            out.push_str(cmd);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Replaces every `\text{X}` (and its kin, and `\boxed{X}`) by `X`, in one pass over `s`.
fn unwrap_text_commands(s: &str) -> String {
    let groups = Groups::new(s);
    let mut out = String::with_capacity(s.len());
    // Closing braces of the unwrapped groups still ahead; the innermost is last.
    let mut closes: Vec<usize> = Vec::new();
    let mut i = 0;
    while let Some(c) = s[i..].chars().next() {
        if closes.last() == Some(&i) {
            closes.pop();
            i += 1;
            continue;
        }
        let rest = &s[i..];
        let unwrapped = TEXT_COMMANDS
            .iter()
            .chain(&["\\boxed"])
            .find(|cmd| rest.starts_with(*cmd) && rest[cmd.len()..].starts_with('{'))
            .and_then(|cmd| Some((cmd.len(), groups.close(i + cmd.len())?)));
        if let Some((cmd_len, close)) = unwrapped {
            closes.push(close);
            i += cmd_len + 1;
        } else {
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Removes a leading `x =` or `\theta =` (a single name) and `x \in`.
fn strip_assignment(s: &str) -> String {
    let s = s.trim();
    if let Some((lhs, rhs)) = s.split_once('=') {
        if !rhs.contains('=') && is_single_name(lhs.trim()) && !rhs.trim().is_empty() {
            return rhs.trim().to_string();
        }
    }
    if let Some((lhs, rhs)) = s.split_once("\\in") {
        if rhs.starts_with(|c: char| !c.is_ascii_alphabetic()) && is_single_name(lhs.trim()) {
            return rhs.trim().to_string();
        }
    }
    s.to_string()
}

/// A variable name: one letter, optionally subscripted (`x_1`), or one Greek-letter command.
pub(crate) fn is_single_name(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => {
            let rest = chars.as_str();
            rest.is_empty()
                || rest.strip_prefix('_').is_some_and(|r| {
                    !r.is_empty()
                        && r.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "{}".contains(c))
                })
        }
        Some('\\') => {
            let name = chars.as_str();
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphabetic())
        }
        _ => false,
    }
}

/// Removes whitespace, except one space between a command and a letter (`\pi r`, `\cot x`).
fn remove_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_command = false;
    let mut pending_space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            pending_space |= in_command;
            in_command = false;
            continue;
        }
        if pending_space && c.is_ascii_alphabetic() {
            out.push(' ');
        }
        pending_space = false;
        in_command = match c {
            '\\' => true,
            c if c.is_ascii_alphabetic() => in_command,
            _ => false,
        };
        out.push(c);
    }
    out
}

/// Braces LaTeX's single-token arguments: `\frac12` → `\frac{1}{2}`, `\sqrt2` → `\sqrt{2}`.
///
/// A braced argument is copied whole, its end found through the brace pairs of `s`, so an
/// unclosed group is never rescanned.
fn brace_single_token_args(s: &str, cmd: &str, arity: usize) -> String {
    let groups = Groups::new(s);
    let last_bracket = s.rfind(']');
    let mut out = String::with_capacity(s.len() + 8);
    let mut pos = 0;
    while let Some(found) = s[pos..].find(cmd) {
        let after = pos + found + cmd.len();
        out.push_str(&s[pos..after]);
        pos = after;
        if s[pos..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue; // a longer command name such as `\sqrtsign`
        }
        let has_index = cmd == "\\sqrt" && s[pos..].starts_with('[');
        if has_index && last_bracket.is_some_and(|b| b > pos) {
            if let Some(end) = s[pos..].find(']') {
                out.push_str(&s[pos..=pos + end]);
                pos += end + 1;
            }
        }
        for _ in 0..arity {
            let rest = &s[pos..];
            if rest.starts_with('{') {
                let Some(close) = groups.close(pos) else {
                    break;
                };
                out.push_str(&s[pos..=close]);
                pos = close + 1;
            } else if let Some(token_len) = single_token_len(rest) {
                out.push('{');
                out.push_str(&rest[..token_len]);
                out.push('}');
                pos += token_len;
            } else {
                break;
            }
        }
    }
    out.push_str(&s[pos..]);
    out
}

/// The byte length of one LaTeX token at the start of `s`: a character or a `\command`.
fn single_token_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    let (_, first) = chars.next()?;
    if first == '\\' {
        let end = chars
            .find(|(_, c)| !c.is_ascii_alphabetic())
            .map_or(s.len(), |(i, _)| i);
        (end > 1).then_some(end)
    } else if first.is_alphanumeric() {
        Some(first.len_utf8())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normalises_presentation() {
        let cases = [
            ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
            ("\\dfrac{17}{50}", "\\frac{17}{50}"),
            ("\\frac 59", "\\frac{5}{9}"),
            ("\\frac9{19}", "\\frac{9}{19}"),
            ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"),
            ("11\\sqrt2", "11\\sqrt{2}"),
            ("10,\\!080", "10080"),
            ("11,\\! 111,\\! 111,\\! 100", "11111111100"),
            ("\\$32,\\!348", "32348"),
            ("90^\\circ", "90"),
            ("5.4 \\text{ cents}", "5.4"),
            ("864 \\mbox{ inches}^2", "864"),
            ("15\\mbox{ cm}^2", "15"),
            ("\\text{Evelyn}", "Evelyn"),
            ("\\text{(C)}", "(C)"),
            ("x=5", "5"),
            ("x \\in [-2,7]", "[-2,7]"),
            ("18 dollars.", "18"),
            ("3.00", "3"),
            (".35625", "0.35625"),
            ("1,-2", "1,-2"),
            ("(1,2)", "(1,2)"),
            ("$\\boxed{7}$", "7"),
            ("\\leftarrow", "\\leftarrow"),
            ("50\\%", "50"),
            ("\\pi r^2", "\\pi r^2"),
            ("\\cot  x", "\\cot x"),
            ("2 x + 1", "2x+1"),
            ("1{,}000", "1000"),
            ("8,221", "8221"),
            ("8, 221", "8,221"),
            ("10,\\! 080", "10080"),
            ("4.5e33", "4.5\\times10^{33}"),
            ("18 (apples)", "18"),
            ("\\frac{37}{4} m", "\\frac{37}{4}"),
            ("5 \\text{a}\\text{b}", "5"),
            ("\\textbf{\\text{x}} y", "xy"),
            ("\\frac{\\frac12", "\\frac{\\frac{1}{2}"),
            ("\\sqrt[3]8", "\\sqrt[3]{8}"),
        ];
        for (raw, want) in cases {
            assert_eq!(normalize(raw), want, "{raw}");
        }
    }
}
