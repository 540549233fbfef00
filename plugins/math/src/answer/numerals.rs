//! How numbers are written: thousands separators, scientific e-notation and zero decimals.
//!
//! A comma inside a number and a comma between list items look alike; the writer's spacing tells
//! them apart. `1,000`, `1{,}000` and `10,\!080` are one number; `8, 221` (a space after the
//! comma) is the two-item list 8 and 221, while `8,221` is 8221.

/// Removes `{,}` between a digit and a group of exactly three digits (`1{,}000`) anywhere: LaTeX
/// writes a comma inside a number that way, so it never separates list items.
pub fn join_braced_separators(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut from = 0;
    for (i, _) in s.match_indices("{,}") {
        let after = &bytes[i + 3..];
        let digit_before = i > 0 && bytes[i - 1].is_ascii_digit();
        let group_after = after.len() >= 3
            && after[..3].iter().all(u8::is_ascii_digit)
            && !after.get(3).is_some_and(u8::is_ascii_digit);
        if digit_before && group_after {
            out.push_str(&s[from..i]);
            from = i + 3;
        }
    }
    out.push_str(&s[from..]);
    out
}

/// `1,000,000` → `1000000`, only when the whole answer is one number with proper digit groups.
///
/// It runs before whitespace is removed, so a space after a comma (`8, 221`) keeps a list a list.
pub fn remove_thousands_separators(s: &str) -> String {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int_part, frac_part) = body.split_once('.').unwrap_or((body, ""));
    let mut groups = int_part.split(',');
    let first = groups.next().unwrap_or("");
    let is_digits = |g: &str| g.bytes().all(|b| b.is_ascii_digit());
    let mut rest = groups.peekable();
    let grouped = rest.peek().is_some()
        && (1..=3).contains(&first.len())
        && is_digits(first)
        && rest.all(|g| g.len() == 3 && is_digits(g))
        && is_digits(frac_part);
    if grouped {
        s.replace(',', "")
    } else {
        s.to_string()
    }
}

/// `4.5e33` → `4.5\times10^{33}`, `1E-5` → `1\times10^{-5}`: a decimal, `e` or `E`, an optionally
/// signed integer, written without spaces and standing alone (not part of a word such as `2e5x`).
///
/// It runs before whitespace is removed, so `2e - 1` (spaced) stays the expression 2e − 1.
pub fn expand_scientific(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let starts_number = (bytes[i].is_ascii_digit() || bytes[i] == b'.')
            && (i == 0 || !is_word_byte(bytes[i - 1]));
        if !starts_number {
            i += 1;
            continue;
        }
        let mantissa_end = i + decimal_len(&bytes[i..]);
        match exponent(&bytes[mantissa_end..]) {
            Some((sign, digits, len))
                if mantissa_end > i
                    && !bytes
                        .get(mantissa_end + len)
                        .is_some_and(|&b| is_word_byte(b)) =>
            {
                out.push_str(&s[copied..mantissa_end]);
                out.push_str("\\times10^{");
                out.push_str(sign);
                out.push_str(digits);
                out.push('}');
                i = mantissa_end + len;
                copied = i;
            }
            _ => i = mantissa_end.max(i + 1),
        }
    }
    out.push_str(&s[copied..]);
    out
}

/// Letters, digits and the decimal point: what a number in e-notation may not touch.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.'
}

/// The length of the decimal (`12`, `4.5`, `.5`) at the start of `bytes`, 0 when there is none.
fn decimal_len(bytes: &[u8]) -> usize {
    let int = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if bytes.get(int) != Some(&b'.') {
        return int;
    }
    let frac = bytes[int + 1..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if int + frac == 0 {
        0
    } else {
        int + 1 + frac
    }
}

/// An exponent `e5`, `E+5` or `e-5` at the start of `bytes`: its sign (`-` or empty), its digits
/// and the bytes it spans.
fn exponent(bytes: &[u8]) -> Option<(&'static str, &str, usize)> {
    let (&e, rest) = bytes.split_first()?;
    if e != b'e' && e != b'E' {
        return None;
    }
    let (sign, signed_len, rest) = match rest.first() {
        Some(b'-') => ("-", 1, &rest[1..]),
        Some(b'+') => ("", 1, &rest[1..]),
        _ => ("", 0, rest),
    };
    let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let digits = std::str::from_utf8(&rest[..n]).ok()?;
    (n > 0).then_some((sign, digits, 1 + signed_len + n))
}

/// `3.0` → `3`, `-12.00` → `-12`: a decimal whose fraction is all zeros is an integer.
pub fn strip_zero_decimals(s: &str) -> String {
    if let Some((int_part, frac)) = s.split_once('.') {
        let digits = int_part.strip_prefix('-').unwrap_or(int_part);
        let is_number = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit());
        if is_number && !frac.is_empty() && frac.chars().all(|c| c == '0') {
            return int_part.to_string();
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braced_separators_join_digit_groups_only() {
        assert_eq!(join_braced_separators("1{,}000{,}000"), "1000000");
        assert_eq!(join_braced_separators("(1{,}000, 2)"), "(1000, 2)");
        assert_eq!(join_braced_separators("3{,}14"), "3{,}14");
        assert_eq!(join_braced_separators("1{,}0000"), "1{,}0000");
        assert_eq!(join_braced_separators("a{,}000"), "a{,}000");
    }

    #[test]
    fn thousands_separators_need_tight_groups() {
        assert_eq!(remove_thousands_separators("1,000"), "1000");
        assert_eq!(remove_thousands_separators("-12,345.5"), "-12345.5");
        assert_eq!(remove_thousands_separators("8,221"), "8221");
        assert_eq!(remove_thousands_separators("8, 221"), "8, 221");
        assert_eq!(remove_thousands_separators("1,-2"), "1,-2");
        assert_eq!(remove_thousands_separators("1,3535"), "1,3535");
        assert_eq!(remove_thousands_separators("1000"), "1000");
    }

    #[test]
    fn e_notation_becomes_a_power_of_ten() {
        assert_eq!(expand_scientific("4.5e33"), "4.5\\times10^{33}");
        assert_eq!(expand_scientific("-1E-5"), "-1\\times10^{-5}");
        assert_eq!(expand_scientific("6.02e+23"), "6.02\\times10^{23}");
        assert_eq!(
            expand_scientific("(1e3, .5e1)"),
            "(1\\times10^{3}, .5\\times10^{1})"
        );
        for unchanged in [
            "2e - 1", "2e", "e^2", "x2e5", "2e5x", "2.e", "3e2.5", "1.2.3e4",
        ] {
            assert_eq!(expand_scientific(unchanged), unchanged, "{unchanged}");
        }
    }

    #[test]
    fn zero_decimals_are_integers() {
        assert_eq!(strip_zero_decimals("3.00"), "3");
        assert_eq!(strip_zero_decimals("-12.0"), "-12");
        assert_eq!(strip_zero_decimals("3.01"), "3.01");
        assert_eq!(strip_zero_decimals("x.0"), "x.0");
    }
}
