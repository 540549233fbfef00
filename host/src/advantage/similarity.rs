//! How alike two texts are, as Python's `difflib.SequenceMatcher(None, a, b).ratio()` measures
//! it (the Dr. MAS code's `are_similar`, which GiGPO's similarity-based anchor states use):
//! 2·M / (|a| + |b|), M the characters of the matching blocks found by repeatedly taking the
//! longest common block and recursing on both sides of it, with difflib's "autojunk" rule
//! (in a `b` of 200 characters or more, a character occurring more than 1 % of the time + 1
//! never starts a match, though a match may extend over it).

use std::collections::HashMap;

/// The longest text compared character by character: the matching blocks cost up to
/// |a|·|b| steps, so longer texts are alike only when equal.
pub const MAX_COMPARED_CHARS: usize = 16_384;

/// difflib's ratio of `a` and `b` over Unicode scalar values (Python's characters); 1 for two
/// empty texts. Texts longer than [`MAX_COMPARED_CHARS`] give 1 when equal, else 0.
pub fn similarity_ratio(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let total = a.len() + b.len();
    if total == 0 {
        return 1.0;
    }
    if a.len() > MAX_COMPARED_CHARS || b.len() > MAX_COMPARED_CHARS {
        return if a == b { 1.0 } else { 0.0 };
    }
    let matcher = Matcher::new(&a, &b);
    2.0 * matcher.matching_characters() as f64 / total as f64
}

/// Whether [`similarity_ratio`] of `a` and `b` is at least `thresh`, trying difflib's cheap
/// upper bounds of the ratio first (`real_quick_ratio`: the shorter length; `quick_ratio`: the
/// characters the two have in common, counted with multiplicity), so texts too unlike to pass
/// skip the matching blocks.
pub fn alike(a: &str, b: &str, thresh: f64) -> bool {
    let (a_chars, b_chars) = (a.chars().count(), b.chars().count());
    let total = (a_chars + b_chars) as f64;
    if total > 0.0 && 2.0 * a_chars.min(b_chars) as f64 / total < thresh {
        return false;
    }
    let mut left: HashMap<char, usize> = HashMap::new();
    for c in b.chars() {
        *left.entry(c).or_default() += 1;
    }
    let mut common = 0usize;
    for c in a.chars() {
        if let Some(n) = left.get_mut(&c).filter(|n| **n > 0) {
            *n -= 1;
            common += 1;
        }
    }
    if total > 0.0 && 2.0 * common as f64 / total < thresh {
        return false;
    }
    similarity_ratio(a, b) >= thresh
}

/// `a`, `b` and where each usable character of `b` occurs (difflib's `b2j`, popular characters
/// removed).
struct Matcher<'t> {
    a: &'t [char],
    b: &'t [char],
    b2j: HashMap<char, Vec<usize>>,
}

impl<'t> Matcher<'t> {
    fn new(a: &'t [char], b: &'t [char]) -> Self {
        let mut b2j: HashMap<char, Vec<usize>> = HashMap::new();
        for (j, &c) in b.iter().enumerate() {
            b2j.entry(c).or_default().push(j);
        }
        if b.len() >= 200 {
            let most = b.len() / 100 + 1;
            b2j.retain(|_, places| places.len() <= most);
        }
        Self { a, b, b2j }
    }

    /// The sum of the matching blocks' sizes (difflib's `get_matching_blocks`).
    fn matching_characters(&self) -> usize {
        let mut total = 0;
        let mut pending = vec![(0, self.a.len(), 0, self.b.len())];
        while let Some((alo, ahi, blo, bhi)) = pending.pop() {
            let (i, j, k) = self.longest_match(alo, ahi, blo, bhi);
            if k == 0 {
                continue;
            }
            total += k;
            if alo < i && blo < j {
                pending.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                pending.push((i + k, ahi, j + k, bhi));
            }
        }
        total
    }

    /// The longest block `a[i..i+k] == b[j..j+k]` within `a[alo..ahi]`, `b[blo..bhi]`, the
    /// earliest in `a` then in `b` among equals, extended over popular characters (difflib's
    /// `find_longest_match` without a junk function).
    fn longest_match(
        &self,
        alo: usize,
        ahi: usize,
        blo: usize,
        bhi: usize,
    ) -> (usize, usize, usize) {
        let (a, b) = (self.a, self.b);
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0);
        // The length of the match ending at a[i - 1], b[j], by j.
        let mut lengths: HashMap<usize, usize> = HashMap::new();
        for (i, c) in a.iter().enumerate().take(ahi).skip(alo) {
            let mut next: HashMap<usize, usize> = HashMap::new();
            for &j in self.b2j.get(c).map_or(&[][..], Vec::as_slice) {
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                let k = j
                    .checked_sub(1)
                    .and_then(|before| lengths.get(&before))
                    .copied()
                    .unwrap_or(0)
                    + 1;
                next.insert(j, k);
                if k > bestsize {
                    (besti, bestj, bestsize) = (i + 1 - k, j + 1 - k, k);
                }
            }
            lengths = next;
        }
        while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
            (besti, bestj, bestsize) = (besti - 1, bestj - 1, bestsize + 1);
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && a[besti + bestsize] == b[bestj + bestsize]
        {
            bestsize += 1;
        }
        (besti, bestj, bestsize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts made by a formula Python can make too.
    fn formula(alphabet: &str, len: usize, index: impl Fn(usize) -> usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..len).map(|i| chars[index(i) % chars.len()]).collect()
    }

    #[test]
    fn ratios_equal_pythons_difflib() {
        // Each expected value is Python 3.11's difflib.SequenceMatcher(None, a, b).ratio().
        let long = formula("abcdefghij ", 500, |i| i * i + 3 * i);
        let chars: Vec<char> = long.chars().collect();
        let edited: String = chars[..200]
            .iter()
            .chain(&['X', 'Y', 'Z'])
            .chain(&chars[250..])
            .collect();
        let junk_a = formula("ab c", 300, |i| i * i);
        let junk_b = formula("ab cd", 320, |i| i * 3 + i / 7);
        let popular_a = format!("xxxxx{}", "hello world ".repeat(20));
        let popular_b = format!("xxxxx{}", "hello there ".repeat(20));
        let cases: [(&str, &str, f64); 11] = [
            ("", "", 1.0),
            ("abc", "", 0.0),
            ("abcd", "bcde", 0.75),
            (
                "the cat sat on the mat",
                "the cat sat on a hat",
                0.8571428571428571,
            ),
            ("kitten", "sitting", 0.6153846153846154),
            (
                "Search results: Paris is the capital of France.",
                "Search results: Berlin is the capital of Germany.",
                0.8541666666666666,
            ),
            ("héllo wörld ✓", "hello world ✓", 0.8461538461538461),
            (&long, &edited, 0.4197271773347324),
            (&junk_a, &junk_b, 0.0032258064516129032),
            (&popular_a, &popular_b, 0.044897959183673466),
            (&long, &long, 1.0),
        ];
        for (a, b, expected) in cases {
            let ratio = similarity_ratio(a, b);
            assert!(
                (ratio - expected).abs() < 1e-15,
                "{a:?} ~ {b:?}: {ratio}, Python {expected}"
            );
        }
    }

    #[test]
    fn the_quick_bounds_never_change_the_answer() {
        let texts = [
            "",
            "abcd",
            "bcde",
            "the cat sat on the mat",
            "the cat sat on a hat",
            "kitten",
            "sitting",
            "Search results: Paris is the capital of France.",
            "Search results: Berlin is the capital of Germany.",
        ];
        for a in texts {
            for b in texts {
                for thresh in [0.1, 0.5, 0.75, 0.85, 0.9, 0.99] {
                    assert_eq!(
                        alike(a, b, thresh),
                        similarity_ratio(a, b) >= thresh,
                        "{a:?} ~ {b:?} at {thresh}"
                    );
                }
            }
        }
    }

    #[test]
    fn texts_past_the_limit_are_alike_only_when_equal() {
        let long = "a".repeat(MAX_COMPARED_CHARS + 1);
        let other = format!("{}b", &long[1..]);
        assert_eq!(similarity_ratio(&long, &long), 1.0);
        assert_eq!(similarity_ratio(&long, &other), 0.0);
    }
}
