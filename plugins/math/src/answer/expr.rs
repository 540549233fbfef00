//! A small recursive-descent parser and evaluator for LaTeX arithmetic.
//!
//! Answers such as `\frac{3\sqrt{3}}{4}`, `2k+2` or `(a+5)(b+2)` are equal to their rewritten forms
//! only as values, not as strings. This module parses the LaTeX subset that final answers use
//! (`+ - * / ^`, `\cdot`, `\times`, `\div`, `\frac`, `\sqrt`, `\sqrt[n]`, `\pi`, a few functions,
//! parentheses and braces, implicit multiplication, single-letter variables) into a tree that can
//! be evaluated at any assignment of the variables. Parsing is bounded in depth, so hostile input
//! yields `None` instead of a stack overflow.
//!
//! An expression has two values: a float one ([`Expr::eval`]) for everything, and an exact
//! rational one ([`Expr::exact`]) where it is rational arithmetic, which tells `2^{100}+1` from
//! `2^{100}`.

use std::collections::BTreeSet;

use super::rational::Rational;

/// How deep parentheses, fractions and exponents may nest before parsing gives up.
const MAX_DEPTH: usize = 64;

/// How many tokens an expression may have: long flat sums would otherwise build trees whose
/// evaluation and drop recurse once per term.
const MAX_TOKENS: usize = 512;

/// A parsed arithmetic expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A numeric literal: its nearest float, and its exact value unless it is too long to keep.
    Num {
        /// The nearest float.
        value: f64,
        /// The exact value.
        exact: Option<Rational>,
    },
    /// A single-letter variable.
    Var(char),
    /// The constant π.
    Pi,
    /// The negation of an expression.
    Neg(Box<Expr>),
    /// A sum.
    Add(Box<Expr>, Box<Expr>),
    /// A difference.
    Sub(Box<Expr>, Box<Expr>),
    /// A product (explicit or implicit).
    Mul(Box<Expr>, Box<Expr>),
    /// A quotient.
    Div(Box<Expr>, Box<Expr>),
    /// A power.
    Pow(Box<Expr>, Box<Expr>),
    /// The `n`-th root of an expression (`\sqrt` is `n = 2`).
    Root(Box<Expr>, Box<Expr>),
    /// A named function applied to an argument.
    Func(Func, Box<Expr>),
}

/// The elementary functions the parser knows by their LaTeX command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `\sin`
    Sin,
    /// `\cos`
    Cos,
    /// `\tan`
    Tan,
    /// `\cot`
    Cot,
    /// `\sec`
    Sec,
    /// `\csc`
    Csc,
    /// `\ln` and `\log` (natural logarithm; only used for comparing equal forms).
    Ln,
    /// `\exp`
    Exp,
}

impl Func {
    fn from_command(name: &str) -> Option<Self> {
        Some(match name {
            "sin" => Func::Sin,
            "cos" => Func::Cos,
            "tan" => Func::Tan,
            "cot" => Func::Cot,
            "sec" => Func::Sec,
            "csc" => Func::Csc,
            "ln" | "log" => Func::Ln,
            "exp" => Func::Exp,
            _ => return None,
        })
    }

    fn apply(self, x: f64) -> f64 {
        match self {
            Func::Sin => x.sin(),
            Func::Cos => x.cos(),
            Func::Tan => x.tan(),
            Func::Cot => 1.0 / x.tan(),
            Func::Sec => 1.0 / x.cos(),
            Func::Csc => 1.0 / x.sin(),
            Func::Ln => x.ln(),
            Func::Exp => x.exp(),
        }
    }
}

impl Expr {
    /// Evaluates the expression, looking variables up with `var`.
    pub fn eval(&self, var: &dyn Fn(char) -> f64) -> f64 {
        match self {
            Expr::Num { value, .. } => *value,
            Expr::Var(c) => var(*c),
            Expr::Pi => std::f64::consts::PI,
            Expr::Neg(a) => -a.eval(var),
            Expr::Add(a, b) => a.eval(var) + b.eval(var),
            Expr::Sub(a, b) => a.eval(var) - b.eval(var),
            Expr::Mul(a, b) => a.eval(var) * b.eval(var),
            Expr::Div(a, b) => a.eval(var) / b.eval(var),
            Expr::Pow(a, b) => power(a.eval(var), b.eval(var)),
            Expr::Root(n, a) => root(a.eval(var), n.eval(var)),
            Expr::Func(f, a) => f.apply(a.eval(var)),
        }
    }

    /// Evaluates the expression exactly, looking variables up with `var`; `None` where it is not
    /// rational arithmetic (π, roots, functions, fractional powers), divides by zero, or grows
    /// beyond what [`Rational`] keeps.
    pub fn exact(&self, var: &dyn Fn(char) -> Option<Rational>) -> Option<Rational> {
        match self {
            Expr::Num { exact, .. } => exact.clone(),
            Expr::Var(c) => var(*c),
            Expr::Pi | Expr::Root(..) | Expr::Func(..) => None,
            Expr::Neg(a) => Some(a.exact(var)?.neg()),
            Expr::Add(a, b) => a.exact(var)?.add(&b.exact(var)?),
            Expr::Sub(a, b) => a.exact(var)?.sub(&b.exact(var)?),
            Expr::Mul(a, b) => a.exact(var)?.mul(&b.exact(var)?),
            Expr::Div(a, b) => a.exact(var)?.div(&b.exact(var)?),
            Expr::Pow(a, b) => a.exact(var)?.pow(&b.exact(var)?),
        }
    }

    /// The variables the expression mentions, in order.
    pub fn variables(&self) -> BTreeSet<char> {
        let mut out = BTreeSet::new();
        self.collect_variables(&mut out);
        out
    }

    fn collect_variables(&self, out: &mut BTreeSet<char>) {
        match self {
            Expr::Var(c) => {
                out.insert(*c);
            }
            Expr::Num { .. } | Expr::Pi => {}
            Expr::Neg(a) | Expr::Func(_, a) => a.collect_variables(out),
            Expr::Add(a, b)
            | Expr::Sub(a, b)
            | Expr::Mul(a, b)
            | Expr::Div(a, b)
            | Expr::Pow(a, b)
            | Expr::Root(a, b) => {
                a.collect_variables(out);
                b.collect_variables(out);
            }
        }
    }
}

/// `base^exp`, with odd integer roots of negative numbers kept real (`(-8)^(1/3) = -2`).
fn power(base: f64, exp: f64) -> f64 {
    if exp.fract() == 0.0 && exp.abs() <= i32::MAX as f64 {
        // Exact for small integer exponents, which `powf` may round differently.
        base.powi(exp as i32)
    } else {
        base.powf(exp)
    }
}

/// The real `n`-th root of `x`: negative radicands are allowed for odd integer `n`.
fn root(x: f64, n: f64) -> f64 {
    if n == 2.0 {
        x.sqrt()
    } else if x < 0.0 && n.fract() == 0.0 && (n as i64) % 2 != 0 {
        -(-x).powf(1.0 / n)
    } else {
        x.powf(1.0 / n)
    }
}

/// One lexical unit of the LaTeX subset.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num {
        value: f64,
        exact: Option<Rational>,
        integer: bool,
    },
    Letter(char),
    Command(String),
    Plus,
    Minus,
    Star,
    Slash,
    Caret,
    Open(char),
    Close(char),
}

fn tokenize(s: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '0'..='9' | '.' => {
                let start = i;
                let mut dot = false;
                while i < chars.len() && (chars[i].is_ascii_digit() || (chars[i] == '.' && !dot)) {
                    dot |= chars[i] == '.';
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                if text == "." {
                    return None;
                }
                let value = text.parse::<f64>().ok()?;
                out.push(Token::Num {
                    value,
                    exact: Rational::from_decimal(&text),
                    integer: !dot,
                });
            }
            '\\' => {
                let start = i + 1;
                i += 1;
                while i < chars.len() && chars[i].is_ascii_alphabetic() {
                    i += 1;
                }
                if i == start {
                    return None;
                }
                out.push(Token::Command(chars[start..i].iter().collect()));
            }
            'a'..='z' | 'A'..='Z' => {
                out.push(Token::Letter(c));
                i += 1;
            }
            '+' => {
                out.push(Token::Plus);
                i += 1;
            }
            '-' | '−' => {
                out.push(Token::Minus);
                i += 1;
            }
            '*' | '×' | '·' => {
                out.push(Token::Star);
                i += 1;
            }
            '/' | '÷' => {
                out.push(Token::Slash);
                i += 1;
            }
            '^' => {
                out.push(Token::Caret);
                i += 1;
            }
            '(' | '[' | '{' => {
                out.push(Token::Open(c));
                i += 1;
            }
            ')' | ']' | '}' => {
                out.push(Token::Close(c));
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Parses a LaTeX arithmetic expression; `None` when it is not one (text, sets, equations, …).
pub fn parse(s: &str) -> Option<Expr> {
    let tokens = tokenize(s)?;
    if tokens.is_empty() || tokens.len() > MAX_TOKENS {
        return None;
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let expr = parser.expr()?;
    (parser.pos == parser.tokens.len()).then_some(expr)
}

/// Evaluates a variable-free LaTeX arithmetic expression exactly, when it is rational arithmetic.
pub fn evaluate_exact(s: &str) -> Option<Rational> {
    parse(s)?.exact(&|_| None)
}

/// Evaluates a variable-free LaTeX arithmetic expression to a finite number.
pub fn evaluate(s: &str) -> Option<f64> {
    let expr = parse(s)?;
    if !expr.variables().is_empty() {
        return None;
    }
    let v = expr.eval(&|_| f64::NAN);
    v.is_finite().then_some(v)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn eat(&mut self, t: &Token) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn expr(&mut self) -> Option<Expr> {
        self.enter()?;
        let mut lhs = self.term()?;
        loop {
            if self.eat(&Token::Plus) {
                lhs = Expr::Add(Box::new(lhs), Box::new(self.term()?));
            } else if self.eat(&Token::Minus) {
                lhs = Expr::Sub(Box::new(lhs), Box::new(self.term()?));
            } else {
                break;
            }
        }
        self.leave();
        Some(lhs)
    }

    fn term(&mut self) -> Option<Expr> {
        let mut lhs = self.unary()?;
        loop {
            match self.peek() {
                Some(Token::Star) => {
                    self.pos += 1;
                    lhs = Expr::Mul(Box::new(lhs), Box::new(self.unary()?));
                }
                Some(Token::Command(c)) if c == "cdot" || c == "times" => {
                    self.pos += 1;
                    lhs = Expr::Mul(Box::new(lhs), Box::new(self.unary()?));
                }
                Some(Token::Slash) => {
                    self.pos += 1;
                    lhs = Expr::Div(Box::new(lhs), Box::new(self.unary()?));
                }
                Some(Token::Command(c)) if c == "div" => {
                    self.pos += 1;
                    lhs = Expr::Div(Box::new(lhs), Box::new(self.unary()?));
                }
                Some(t) if starts_primary(t) => {
                    lhs = Expr::Mul(Box::new(lhs), Box::new(self.power()?));
                }
                _ => break,
            }
        }
        Some(lhs)
    }

    fn unary(&mut self) -> Option<Expr> {
        self.enter()?;
        let out = if self.eat(&Token::Minus) {
            Expr::Neg(Box::new(self.unary()?))
        } else if self.eat(&Token::Plus) {
            self.unary()?
        } else {
            self.power()?
        };
        self.leave();
        Some(out)
    }

    fn power(&mut self) -> Option<Expr> {
        let base = self.primary()?;
        if self.eat(&Token::Caret) {
            self.enter()?;
            // The exponent is one atom (`2^3`, `2^{n+1}`) or a signed atom (`2^-1`), right-associative.
            let exp = if self.eat(&Token::Minus) {
                Expr::Neg(Box::new(self.power()?))
            } else {
                self.power()?
            };
            self.leave();
            return Some(Expr::Pow(Box::new(base), Box::new(exp)));
        }
        Some(base)
    }

    /// A braced group `{…}` or, LaTeX-style, a single token (`\sqrt2`). Digit runs are one token
    /// here, so `\frac12` must be braced by the normaliser first.
    fn argument(&mut self) -> Option<Expr> {
        if self.peek() == Some(&Token::Open('{')) {
            self.primary()
        } else {
            self.enter()?;
            let out = match self.next()? {
                Token::Num { value, exact, .. } => Expr::Num { value, exact },
                Token::Letter(c) => Expr::Var(c),
                Token::Command(c) if c == "pi" => Expr::Pi,
                _ => return None,
            };
            self.leave();
            Some(out)
        }
    }

    fn primary(&mut self) -> Option<Expr> {
        self.enter()?;
        let out = match self.next()? {
            Token::Num {
                value,
                exact,
                integer,
            } => {
                let whole = Expr::Num { value, exact };
                // A mixed number: `1\frac{4}{5}` is 1 + 4/5, as in MATH answers.
                if integer {
                    if let Some(frac) = self.mixed_fraction() {
                        return self.finish(Expr::Add(Box::new(whole), Box::new(frac)));
                    }
                }
                whole
            }
            Token::Letter(c) => Expr::Var(c),
            Token::Open(open) => {
                let inner = self.expr()?;
                match (open, self.next()?) {
                    ('(', Token::Close(')'))
                    | ('{', Token::Close('}'))
                    | ('[', Token::Close(']')) => inner,
                    _ => return None,
                }
            }
            Token::Command(c) => match c.as_str() {
                "pi" => Expr::Pi,
                "frac" => {
                    let num = self.argument()?;
                    let den = self.argument()?;
                    Expr::Div(Box::new(num), Box::new(den))
                }
                "sqrt" => {
                    let index = if self.eat(&Token::Open('[')) {
                        let n = self.expr()?;
                        if !self.eat(&Token::Close(']')) {
                            return None;
                        }
                        n
                    } else {
                        Expr::Num {
                            value: 2.0,
                            exact: Some(Rational::integer(2)),
                        }
                    };
                    Expr::Root(Box::new(index), Box::new(self.argument()?))
                }
                name => {
                    let f = Func::from_command(name)?;
                    // `\sin x`, `\sin(x)`, `\sin{x}`; powers bind to the argument (`\sin x^2`).
                    Expr::Func(f, Box::new(self.power()?))
                }
            },
            _ => return None,
        };
        self.finish(out)
    }

    fn finish(&mut self, e: Expr) -> Option<Expr> {
        self.leave();
        Some(e)
    }

    /// After an integer, `\frac{a}{b}` with integer `a`, `b` is the fractional part of a mixed number.
    fn mixed_fraction(&mut self) -> Option<Expr> {
        let start = self.pos;
        let is_int = |t: Option<&Token>| matches!(t, Some(Token::Num { integer: true, .. }));
        let toks = &self.tokens;
        let shape = matches!(toks.get(start), Some(Token::Command(c)) if c == "frac")
            && toks.get(start + 1) == Some(&Token::Open('{'))
            && is_int(toks.get(start + 2))
            && toks.get(start + 3) == Some(&Token::Close('}'))
            && toks.get(start + 4) == Some(&Token::Open('{'))
            && is_int(toks.get(start + 5))
            && toks.get(start + 6) == Some(&Token::Close('}'));
        if !shape {
            return None;
        }
        let literal = |t: Option<&Token>| match t {
            Some(Token::Num { value, exact, .. }) => Some(Expr::Num {
                value: *value,
                exact: exact.clone(),
            }),
            _ => None,
        };
        let (num, den) = (literal(toks.get(start + 2))?, literal(toks.get(start + 5))?);
        self.pos = start + 7;
        Some(Expr::Div(Box::new(num), Box::new(den)))
    }
}

/// Whether a token can begin a factor of an implicit product (`2\sqrt{3}`, `3\pi`, `(a+1)(b+2)`).
fn starts_primary(t: &Token) -> bool {
    match t {
        Token::Num { .. } | Token::Letter(_) | Token::Open('(') | Token::Open('{') => true,
        Token::Command(c) => {
            c == "pi" || c == "frac" || c == "sqrt" || Func::from_command(c).is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str) -> f64 {
        evaluate(s).unwrap_or(f64::NAN)
    }

    #[test]
    fn evaluates_latex_arithmetic() {
        assert_eq!(ev("1+2*3"), 7.0);
        assert_eq!(ev("\\frac{1}{2}"), 0.5);
        assert_eq!(ev("\\frac1{2}"), 0.5);
        assert_eq!(ev("2^{10}"), 1024.0);
        assert_eq!(ev("2^3^2"), 512.0);
        assert_eq!(ev("-2^2"), -4.0);
        assert_eq!(ev("2^-1"), 0.5);
        assert_eq!(ev("\\sqrt[3]{-8}"), -2.0);
        assert_eq!(ev("1\\frac{4}{5}"), 1.8);
        assert_eq!(ev("3 \\times (4 + 5)"), 27.0);
        assert_eq!(ev("12 \\div 4"), 3.0);
        assert!((ev("2\\sqrt{3}") - 2.0 * 3f64.sqrt()).abs() < 1e-12);
        assert!((ev("3\\pi") - 3.0 * std::f64::consts::PI).abs() < 1e-12);
        assert!((ev("\\frac{3\\sqrt{3}}{4}") - 3.0 * 3f64.sqrt() / 4.0).abs() < 1e-12);
        assert!((ev("\\sin\\frac{\\pi}{6}") - 0.5).abs() < 1e-12);
    }

    #[test]
    fn rejects_non_arithmetic() {
        for s in [
            "",
            "(1,2)",
            "x=5",
            "52_8",
            "\\text{east}",
            "1+",
            "(2",
            "\\frac{1}",
            "\\foo",
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
        assert_eq!(evaluate("x+1"), None);
        assert_eq!(evaluate("1/0"), None);
        assert_eq!(evaluate_exact("1/0"), None);
        assert_eq!(evaluate_exact("\\sqrt{4}"), None);
        assert_eq!(evaluate_exact("2\\pi"), None);
    }

    #[test]
    fn exact_values_beyond_float_precision() {
        let exact = |s: &str| evaluate_exact(s).unwrap_or_else(|| Rational::integer(-1));
        assert_ne!(exact("2^{100}+1"), exact("2^{100}"));
        assert_eq!(ev("2^{100}+1"), ev("2^{100}"));
        assert_eq!(exact("0.1+0.2"), exact("\\frac{3}{10}"));
        assert_eq!(exact("1\\frac{4}{5}"), exact("1.8"));
        assert_eq!(exact("2^{-2}"), exact("0.25"));
        assert_eq!(exact("4.5\\times10^{33}"), exact("45\\times10^{32}"));
        assert_eq!(evaluate_exact("9^{9^{9}}"), None);
        let e = parse("x^2-1").expect("parses");
        let at = |_| Rational::from_decimal("1.5");
        assert_eq!(e.exact(&at), Rational::from_decimal("1.25"));
    }

    #[test]
    fn variables_and_implicit_products() {
        let e = parse("(a+5)(b+2)").expect("parses");
        assert_eq!(e.variables().into_iter().collect::<String>(), "ab");
        let v = e.eval(&|c| if c == 'a' { 1.0 } else { 2.0 });
        assert_eq!(v, 24.0);
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "(".repeat(100_000) + "1" + &")".repeat(100_000);
        assert_eq!(parse(&deep), None);
        let pow = "2^".repeat(100_000) + "2";
        assert_eq!(parse(&pow), None);
        let minus = "-".repeat(100_000) + "2";
        assert_eq!(parse(&minus), None);
        let flat = "1+".repeat(100_000) + "1";
        assert_eq!(parse(&flat), None);
    }
}
