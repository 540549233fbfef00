//! Deciding whether two final answers are mathematically the same.
//!
//! Both sides are normalised, then compared in this order: an integer ground truth demands a
//! candidate worth exactly that integer; equal strings match; structured answers (unions,
//! equations, matrices, tuples, intervals, sets, lists) match part by part; anything else is
//! parsed as LaTeX arithmetic and compared by value with a small relative tolerance, evaluating
//! at several points when the answers have variables.

use super::expr::{self, Expr};
use super::latex::{enclosed, split_top_level};
use super::normalize::normalize;

/// The longest answer (candidate or ground truth), in bytes, that is read at all; a longer one is
/// judged wrong. No final answer in the data comes near it, and it bounds the work of a comparison.
pub const MAX_ANSWER_LEN: usize = 1_000;

/// Relative tolerance for comparing non-integer values (`0.5` against `\frac{1}{2}`).
const REL_TOL: f64 = 1e-6;

/// Relative tolerance for an integer ground truth: only floating-point rounding is forgiven.
const INT_TOL: f64 = 1e-12;

/// How deeply structured answers (tuples of tuples, …) are compared before giving up.
const MAX_DEPTH: usize = 16;

/// Points at which answers with variables are evaluated; irrational-looking to avoid coincidences.
const SAMPLE_POINTS: [f64; 3] = [1.373_205, 1.658_153, 2.577_215];

/// Whether a candidate answer is equivalent to the ground truth.
pub fn is_equivalent(candidate: &str, ground_truth: &str) -> bool {
    if candidate.len() > MAX_ANSWER_LEN || ground_truth.len() > MAX_ANSWER_LEN {
        return false;
    }
    equivalent(&normalize(candidate), &normalize(ground_truth), 0)
}

fn equivalent(c: &str, g: &str, depth: usize) -> bool {
    if depth > MAX_DEPTH || c.is_empty() || g.is_empty() {
        return false;
    }
    if let Some(n) = integer_literal(g) {
        return integer_match(c, g, n);
    }
    if c == g {
        return true;
    }
    if let Some(same) = structured(c, g, depth) {
        return same;
    }
    expressions_equal(c, g)
}

/// The value of a plain integer literal such as `-12`, if `s` is one.
fn integer_literal(s: &str) -> Option<f64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<f64>().ok()
}

/// An integer ground truth is matched by a candidate that evaluates to exactly that integer.
fn integer_match(c: &str, g: &str, n: f64) -> bool {
    if c == g {
        return true;
    }
    // Beyond 2^53 floats cannot tell neighbouring integers apart: demand the same digits.
    if n.abs() >= 9.0e15 {
        return false;
    }
    expr::evaluate(c).is_some_and(|v| (v - n).abs() <= INT_TOL * n.abs().max(1.0))
}

/// Compares answers with structure; `None` when neither has any, so they are compared as values.
fn structured(c: &str, g: &str, depth: usize) -> Option<bool> {
    let d = depth + 1;
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
    if vars.is_empty() {
        return close(&ce, &ge, &|_| f64::NAN);
    }
    SAMPLE_POINTS.iter().enumerate().all(|(k, base)| {
        let at = |v: char| base + (u32::from(v) % 29) as f64 * 0.137 + k as f64 * 0.291;
        close(&ce, &ge, &at)
    })
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
