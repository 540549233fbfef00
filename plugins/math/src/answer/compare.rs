//! Deciding whether two final answers are mathematically the same.
//!
//! Both sides are normalised, then compared in this order: an integer ground truth demands a
//! candidate worth exactly that integer; equal strings match; structured answers (unions,
//! equations, matrices, tuples, intervals, sets, lists) match part by part; anything else is
//! parsed as LaTeX arithmetic and compared by value, at several points when it has variables.
//!
//! The rules beyond presentation:
//!
//! - **Length.** An answer longer than [`MAX_ANSWER_LEN`] bytes is judged wrong without being
//!   read. No final answer in the data comes near it, and it bounds the work of a comparison.
//! - **Exactness.** Values are compared as exact rationals wherever the expression is rational
//!   arithmetic (integers, decimals, `+ - × ÷`, `\frac`, whole powers). An integer ground truth
//!   demands exactly that integer, and answers written without a decimal point must be exactly
//!   equal: `2^{100}+1` is not `2^{100}`. A decimal point marks a rounded answer, which may differ
//!   by a relative 10⁻⁶ (`1.3333333333` is `\frac43`). Roots, π and functions are compared as
//!   floats with the same tolerance.
//! - **Variables.** Every distinct symbol gets its own value at each sample point, and case
//!   matters: `2^{N}` is not `2^{k}`, nor `N` `n`.
//! - **Order.** Tuples, intervals and vectors in brackets are ordered: `(2,3)` is not `(3,2)`.
//!   Sets in `\{…\}` and bare lists of values (`1, -2`, how MATH asks for "all solutions,
//!   separated by commas") are not. A list of assignments (`a=2, b=3`) is matched name by name,
//!   and a list of values given for it must follow its order.
//! - **Percent.** A candidate with a percent sign (`50\%`, `50 percent`) matches only a ground
//!   truth that is a percentage: one written with a percent sign, or a whole number (GSM8K writes
//!   "25%" as `#### 25`). Against anything else (`0.5`, a probability) it is wrong.
//! - **Units and variables.** Unit words trailing a number are dropped (`18 dollars`), except a
//!   one-letter unit word that the ground truth uses as a variable: with the ground truth
//!   `\frac{37}{4} m` or `3m+2`, `m` is kept on both sides and compared as a variable.

use super::expr::{self, Expr};
use super::latex::{enclosed, split_top_level};
use super::normalize::{is_single_name, normalize_keeping};
use super::rational::Rational;
use super::units::one_letter_units;

/// The longest answer (candidate or ground truth), in bytes, that is read at all; a longer one is
/// judged wrong.
pub const MAX_ANSWER_LEN: usize = 1_000;

/// Relative tolerance for rounded and irrational values, as its inverse: 10⁻⁶.
const REL_TOL_INV: u32 = 1_000_000;

/// [`REL_TOL_INV`] as a float tolerance.
const REL_TOL: f64 = 1.0 / REL_TOL_INV as f64;

/// Relative tolerance for an integer ground truth met by an irrational-looking candidate
/// (`\sqrt{9}`): only floating-point rounding is forgiven.
const INT_TOL: f64 = 1e-12;

/// How deeply structured answers (tuples of tuples, …) are compared before giving up.
const MAX_DEPTH: usize = 16;

/// How many points answers with variables are evaluated at.
const SAMPLES: usize = 3;

/// Whether a candidate answer is equivalent to the ground truth.
pub fn is_equivalent(candidate: &str, ground_truth: &str) -> bool {
    if candidate.len() > MAX_ANSWER_LEN || ground_truth.len() > MAX_ANSWER_LEN {
        return false;
    }
    let variables = unit_letters_used_as_variables(ground_truth);
    let g = normalize_keeping(ground_truth, &variables);
    let c = normalize_keeping(candidate, &variables);
    if is_percentage(candidate) && !is_percentage(ground_truth) && !is_integer_literal(&g) {
        return false;
    }
    equivalent(&c, &g, 0)
}

/// The one-letter unit words (`m`) that the ground truth uses as variables: those standing alone
/// in it once it is normalised with them kept.
fn unit_letters_used_as_variables(ground_truth: &str) -> Vec<&'static str> {
    let letters: Vec<&str> = one_letter_units().collect();
    let probe = normalize_keeping(ground_truth, &letters);
    letters
        .into_iter()
        .filter(|letter| stands_alone(&probe, letter))
        .collect()
}

/// Whether the one-letter `letter` occurs in `s` outside a word and a `\command`.
fn stands_alone(s: &str, letter: &str) -> bool {
    let bytes = s.as_bytes();
    s.match_indices(letter).any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + letter.len());
        !before.is_some_and(|b| b.is_ascii_alphabetic() || b == b'\\')
            && !after.is_some_and(u8::is_ascii_alphabetic)
    })
}

/// Whether a raw answer is written as a percentage.
fn is_percentage(answer: &str) -> bool {
    answer.contains('%') || answer.to_ascii_lowercase().contains("percent")
}

fn equivalent(c: &str, g: &str, depth: usize) -> bool {
    if depth > MAX_DEPTH || c.is_empty() || g.is_empty() {
        return false;
    }
    if is_integer_literal(g) {
        return integer_match(c, g);
    }
    if c == g {
        return true;
    }
    if let Some(same) = structured(c, g, depth) {
        return same;
    }
    expressions_equal(c, g)
}

/// Whether `s` is a plain integer literal such as `-12`.
fn is_integer_literal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// An integer ground truth is matched by a candidate worth exactly that integer.
fn integer_match(c: &str, g: &str) -> bool {
    if c == g {
        return true;
    }
    if let (Some(cv), Some(gv)) = (expr::evaluate_exact(c), expr::evaluate_exact(g)) {
        return cv == gv;
    }
    // Not rational arithmetic (`\sqrt{9}`): compare floats, which beyond 2^53 cannot tell
    // neighbouring integers apart.
    let Ok(n) = g.parse::<f64>() else {
        return false;
    };
    n.abs() < 9.0e15
        && expr::evaluate(c).is_some_and(|v| (v - n).abs() <= INT_TOL * n.abs().max(1.0))
}

/// Compares answers with structure; `None` when neither has any, so they are compared as values.
fn structured(c: &str, g: &str, depth: usize) -> Option<bool> {
    let d = depth + 1;
    if let Some(named) = assignments(g) {
        return Some(match assignments(c) {
            Some(given) => same_assignments(&given, &named, d),
            None => {
                let values: Vec<&str> = named.iter().map(|(_, v)| *v).collect();
                pairwise(&list_items(c), &values, d)
            }
        });
    }
    for sep in ["\\cup", "="] {
        let (cs, gs) = (split_top_level(c, sep), split_top_level(g, sep));
        if cs.len() > 1 || gs.len() > 1 {
            return Some(pairwise(&cs, &gs, d));
        }
    }
    if let (Some(cm), Some(gm)) = (matrix(c), matrix(g)) {
        return Some(
            cm.len() == gm.len() && cm.iter().zip(&gm).all(|(cr, gr)| pairwise(cr, gr, d)),
        );
    }
    let (ce, ge) = (enclosed_list(c), enclosed_list(g));
    if ce.is_some() || ge.is_some() {
        let ((co, citems, cc), (go, gitems, gc)) = (ce?, ge?);
        // Interval and tuple brackets must agree: `(1,2]` is not `(1,2)`.
        if co != go || cc != gc {
            return Some(false);
        }
        return Some(if go == "\\{" {
            unordered(&citems, &gitems, d)
        } else {
            pairwise(&citems, &gitems, d)
        });
    }
    let (cs, gs) = (split_top_level(c, ","), split_top_level(g, ","));
    if cs.len() > 1 || gs.len() > 1 {
        // A bare list of solutions ("1,-2") is a set: any order.
        return Some(unordered(&cs, &gs, d));
    }
    None
}

/// A bare list of at least two assignments to distinct names (`a=2,b=3`), as (name, value) pairs.
fn assignments(s: &str) -> Option<Vec<(&str, &str)>> {
    let items = split_top_level(s, ",");
    if items.len() < 2 {
        return None;
    }
    let pairs = items
        .into_iter()
        .map(|item| {
            let (name, value) = item.split_once('=')?;
            (is_single_name(name) && !value.is_empty() && !value.contains('='))
                .then_some((name, value))
        })
        .collect::<Option<Vec<_>>>()?;
    let distinct = pairs
        .iter()
        .enumerate()
        .all(|(i, (name, _))| pairs[..i].iter().all(|(other, _)| other != name));
    distinct.then_some(pairs)
}

/// Whether two assignment lists give every name equivalent values, in whatever order.
fn same_assignments(given: &[(&str, &str)], named: &[(&str, &str)], depth: usize) -> bool {
    given.len() == named.len()
        && named.iter().all(|(name, value)| {
            given
                .iter()
                .find(|(other, _)| other == name)
                .is_some_and(|(_, v)| equivalent(v, value, depth))
        })
}

/// The items of a tuple `(…)` or a bare list.
fn list_items(s: &str) -> Vec<&str> {
    match enclosed(s) {
        Some(("(", inner, ")")) => split_top_level(inner, ","),
        _ => split_top_level(s, ","),
    }
}

/// A bracketed answer with at least two comma-separated items, or a set in `\{…\}`.
fn enclosed_list(s: &str) -> Option<(&str, Vec<&str>, &str)> {
    let (open, inner, close) = enclosed(s)?;
    let items = split_top_level(inner, ",");
    (items.len() > 1 || open == "\\{").then_some((open, items, close))
}

/// The cells of a `pmatrix`/`bmatrix`, row by row.
fn matrix(s: &str) -> Option<Vec<Vec<&str>>> {
    let kinds = ["pmatrix", "bmatrix"];
    let inner = kinds.iter().find_map(|k| {
        s.strip_prefix(&format!("\\begin{{{k}}}"))?
            .strip_suffix(&format!("\\end{{{k}}}"))
    })?;
    Some(
        split_top_level(inner, "\\\\")
            .into_iter()
            .filter(|row| !row.is_empty())
            .map(|row| split_top_level(row, "&"))
            .collect(),
    )
}

fn pairwise(cs: &[&str], gs: &[&str], depth: usize) -> bool {
    cs.len() == gs.len() && cs.iter().zip(gs).all(|(c, g)| equivalent(c, g, depth))
}

/// Matches every candidate item to a distinct ground-truth item, in any order.
fn unordered(cs: &[&str], gs: &[&str], depth: usize) -> bool {
    if cs.len() != gs.len() {
        return false;
    }
    let mut used = vec![false; gs.len()];
    cs.iter().all(|c| {
        let found = (0..gs.len()).find(|&j| !used[j] && equivalent(c, gs[j], depth));
        if let Some(j) = found {
            used[j] = true;
        }
        found.is_some()
    })
}

/// Whether both answers are arithmetic expressions with the same value (at every sample point).
fn expressions_equal(c: &str, g: &str) -> bool {
    if has_word(c) || has_word(g) {
        return false;
    }
    let (Some(ce), Some(ge)) = (expr::parse(c), expr::parse(g)) else {
        return false;
    };
    let mut vars = ce.variables();
    vars.extend(ge.variables());
    let vars: Vec<char> = vars.into_iter().collect();
    let rounded = c.contains('.') || g.contains('.');
    let samples = if vars.is_empty() { 1 } else { SAMPLES };
    (0..samples).all(|k| {
        let index = |v: char| vars.iter().position(|&x| x == v);
        let exact_at = |v: char| Rational::ratio(sample(index(v)?, k), SAMPLE_DEN);
        let float_at =
            |v: char| index(v).map_or(f64::NAN, |i| sample(i, k) as f64 / SAMPLE_DEN as f64);
        match (ce.exact(&exact_at), ge.exact(&exact_at)) {
            (Some(x), Some(y)) if rounded => x.close_to(&y, REL_TOL_INV),
            (Some(x), Some(y)) => x == y,
            _ => close(&ce, &ge, &float_at),
        }
    })
}

/// The denominator of every sample value.
const SAMPLE_DEN: i64 = 1000;

/// The numerator of the value of the `i`-th distinct variable at sample point `k`: different for
/// every variable, and irrational-looking enough (1.51, 1.647, …) to avoid coincidences.
fn sample(i: usize, k: usize) -> i64 {
    (1373 + 291 * k + 137 * (i + 1)) as i64
}

fn close(a: &Expr, b: &Expr, at: &dyn Fn(char) -> f64) -> bool {
    let (x, y) = (a.eval(at), b.eval(at));
    x.is_finite() && y.is_finite() && (x == y || (x - y).abs() <= REL_TOL * x.abs().max(y.abs()))
}

/// Whether `s` has a run of three letters outside a `\command` — text, not a product of variables.
fn has_word(s: &str) -> bool {
    let mut run = 0;
    let mut in_command = false;
    for c in s.chars() {
        if c == '\\' {
            in_command = true;
            run = 0;
        } else if c.is_alphabetic() {
            if !in_command {
                run += 1;
                if run >= 3 {
                    return true;
                }
            }
        } else {
            in_command = false;
            run = 0;
        }
    }
    false
}
