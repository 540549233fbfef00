//! Finding the final answer in a model's response.
//!
//! The order follows what reasoning models write: the text after the last `</think>` (the thought
//! itself is not the answer), then the last well-formed `\boxed{…}` / `\fbox{…}` / `\boxed 5`,
//! then GSM8K's `#### n`, then "the (final) answer is …".
//!
//! Every step reads the response a bounded number of times, so extraction takes time linear in
//! its length whatever a model emits.

use super::latex::Groups;

/// Extracts the final answer from a response, or `None` when it states none.
pub fn extract_answer(text: &str) -> Option<String> {
    let text = match text.rfind("</think>") {
        Some(pos) => &text[pos + "</think>".len()..],
        None => text,
    };
    last_boxed(text)
        .or_else(|| after_marker(text))
        .or_else(|| answer_is(text))
        .filter(|a| !a.trim().is_empty())
}

/// The content of the last well-formed `\boxed{…}`, `\fbox{…}` or `\boxed x`.
fn last_boxed(text: &str) -> Option<String> {
    let mut starts: Vec<(usize, usize)> = ["\\boxed", "\\fbox"]
        .iter()
        .flat_map(|cmd| text.match_indices(cmd).map(|(i, m)| (i, i + m.len())))
        .collect();
    starts.sort_unstable();
    let groups = Groups::new(text);
    starts
        .into_iter()
        .rev()
        .find_map(|(_, after)| boxed_argument(text, after, &groups))
}

/// The argument of a `\boxed` command ending at byte `after`: a balanced group, or a bare token
/// (`\boxed 5`).
fn boxed_argument(text: &str, after: usize, groups: &Groups) -> Option<String> {
    let rest = &text[after..];
    if rest.starts_with('{') {
        let close = groups.close(after)?;
        return Some(text[after + 1..close].trim().to_string());
    }
    // `\boxed 5$` — a space, then everything up to the end of the math or line.
    let bare = rest.strip_prefix(' ')?.trim_start();
    let end = bare.find(['$', '\n']).unwrap_or(bare.len());
    let arg = bare[..end].trim();
    (!arg.is_empty()).then(|| arg.to_string())
}

/// The rest of the line after the last GSM8K-style `####`.
fn after_marker(text: &str) -> Option<String> {
    let pos = text.rfind("####")?;
    let line = text[pos + 4..].trim_start().lines().next().unwrap_or("");
    Some(line.trim().to_string())
}

/// The rest of the sentence after the last "the answer is" / "the final answer is".
fn answer_is(text: &str) -> Option<String> {
    // ASCII lowercasing keeps byte offsets, so positions found in it index `text` too.
    let lower = text.to_ascii_lowercase();
    let pos = lower.rfind("answer is")?;
    let rest = text[pos + "answer is".len()..]
        .trim_start()
        .trim_start_matches(':');
    let line = rest.lines().next().unwrap_or("").trim();
    // A sentence period ends the answer; a decimal point (followed by a digit) does not.
    let bytes = line.as_bytes();
    let end = (0..bytes.len())
        .find(|&i| bytes[i] == b'.' && !bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        .unwrap_or(line.len());
    Some(line[..end].trim().trim_matches('$').trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::extract_answer;

    #[test]
    fn extracts_in_priority_order() {
        let cases = [
            ("So we get $\\boxed{\\frac{1}{2}}$.", Some("\\frac{1}{2}")),
            (
                "\\boxed{1} then \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
                Some("\\left( 3, \\frac{\\pi}{2} \\right)"),
            ),
            (
                "<think>maybe \\boxed{4}</think> The answer is \\boxed{5}",
                Some("5"),
            ),
            ("<think>\\boxed{4}</think> so the answer is 6.", Some("6")),
            ("the result is $\\boxed 7$", Some("7")),
            ("\\fbox{8}", Some("8")),
            ("\\boxed{9} and an unclosed \\boxed{1", Some("9")),
            ("She pays 5 + 13 = 18.\n#### 18", Some("18")),
            (
                "The final answer is: 3.5 dollars. Done",
                Some("3.5 dollars"),
            ),
            ("The answer is $-\\frac{3}{8}$.", Some("-\\frac{3}{8}")),
            ("I think it is 42", None),
            ("", None),
            ("\\boxed{}", None),
            ("é\\boxed", None),
        ];
        for (text, want) in cases {
            assert_eq!(extract_answer(text).as_deref(), want, "{text}");
        }
    }
}
