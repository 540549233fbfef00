//! Byte-level helpers for LaTeX groups shared by extraction and normalisation.
//!
//! Every index these helpers take or return sits on an ASCII brace or bracket, so it is always a
//! char boundary: slicing with them cannot panic, whatever Unicode surrounds the braces.

/// The balanced `{…}` groups of a string, paired in one pass.
///
/// Looking a brace's partner up here costs a binary search; rescanning the text from every brace
/// instead is quadratic on a response full of unclosed groups (`\boxed{\boxed{…`).
pub struct Groups {
    /// `(open, close)` for every `{`, in order of `open`; `close` is `None` when it never closes.
    pairs: Vec<(usize, Option<usize>)>,
}

impl Groups {
    /// Pairs every `{` of `s` with the `}` that closes it.
    pub fn new(s: &str) -> Self {
        let mut pairs = Vec::new();
        let mut open = Vec::new();
        for (i, b) in s.bytes().enumerate() {
            match b {
                b'{' => {
                    open.push(pairs.len());
                    pairs.push((i, None));
                }
                b'}' => {
                    if let Some(k) = open.pop() {
                        pairs[k].1 = Some(i);
                    }
                }
                _ => {}
            }
        }
        Groups { pairs }
    }

    /// The byte index of the `}` closing the `{` at byte `open`, if the group is balanced.
    pub fn close(&self, open: usize) -> Option<usize> {
        let k = self.pairs.binary_search_by_key(&open, |&(o, _)| o).ok()?;
        self.pairs[k].1
    }
}

/// The byte index of the `{` opened by the `}` at byte `close`, scanning back only over the group.
pub fn matching_open(s: &str, close: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    if bytes.get(close) != Some(&b'}') {
        return None;
    }
    let mut depth = 0usize;
    for i in (0..=close).rev() {
        match bytes[i] {
            b'}' => depth += 1,
            b'{' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits `s` at every top-level occurrence of `sep`, ignoring separators nested in `()`, `[]` or `{}`.
///
/// Brackets are counted without regard to their kind, so the half-open interval `(1,2]` nests.
pub fn split_top_level<'a>(s: &'a str, sep: &str) -> Vec<&'a str> {
    let bytes = s.as_bytes();
    let sep_bytes = sep.as_bytes();
    let mut parts = Vec::new();
    let mut depth = 0i64;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth == 0 && !sep_bytes.is_empty() && bytes[i..].starts_with(sep_bytes) {
            // A match of a whole `&str` starts on a lead byte, so `i` is a char boundary.
            parts.push(&s[start..i]);
            i += sep_bytes.len();
            start = i;
            continue;
        }
        i += 1;
    }
    parts.push(&s[start..]);
    parts
}

/// If the whole of `s` is one bracketed group, its opening bracket, contents and closing bracket.
///
/// `\{…\}` counts as a pair of set braces. `(1,2]` is enclosed (an interval); `(a)(b)` is not.
pub fn enclosed(s: &str) -> Option<(&str, &str, &str)> {
    let (open, rest) = if let Some(r) = s.strip_prefix("\\{") {
        ("\\{", r)
    } else {
        let first = s.chars().next()?;
        if !matches!(first, '(' | '[' | '{') {
            return None;
        }
        (&s[..1], &s[1..])
    };
    let (inner, close) = if open == "\\{" {
        (rest.strip_suffix("\\}")?, "\\}")
    } else {
        let last = rest.chars().last()?;
        if !matches!(last, ')' | ']' | '}') {
            return None;
        }
        (&rest[..rest.len() - 1], &rest[rest.len() - 1..])
    };
    // The opening bracket must not close before the end.
    let mut depth = 0i64;
    for b in inner.bytes() {
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            _ => {}
        }
    }
    (depth == 0).then_some((open, inner, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_match_with_nesting_and_unicode() {
        let s = "é{a{b}c}ü";
        let open = s.find('{').unwrap_or(0);
        let groups = Groups::new(s);
        assert_eq!(groups.close(open).map(|c| &s[open..=c]), Some("{a{b}c}"));
        assert_eq!(Groups::new("{a{b}").close(0), None);
        assert_eq!(Groups::new("a").close(0), None);
        assert_eq!(Groups::new("}{a}").close(1), Some(3));
        let close = s.rfind('}').unwrap_or(0);
        assert_eq!(matching_open(s, close), Some(open));
        assert_eq!(matching_open("a{b}}", 4), None);
        assert_eq!(matching_open("a", 0), None);
    }

    #[test]
    fn splits_only_at_top_level() {
        assert_eq!(
            split_top_level("1,(2,3),\\frac{4,5}", ","),
            vec!["1", "(2,3)", "\\frac{4,5}"]
        );
        assert_eq!(
            split_top_level("(0,9)\\cup(9,36)", "\\cup"),
            vec!["(0,9)", "(9,36)"]
        );
        assert_eq!(split_top_level("", ","), vec![""]);
    }

    #[test]
    fn recognises_enclosing_brackets() {
        assert_eq!(enclosed("(1,2]"), Some(("(", "1,2", "]")));
        assert_eq!(enclosed("\\{1,2\\}"), Some(("\\{", "1,2", "\\}")));
        assert_eq!(enclosed("(a+5)(b+2)"), None);
        assert_eq!(enclosed("(é"), None);
        assert_eq!(enclosed("5"), None);
    }
}
