//! Exact rational numbers, so that answers are compared beyond float precision.
//!
//! `2^{100}+1` and `2^{100}` are the same `f64`; as fractions of big integers they differ. Every
//! operation refuses (`None`) a result whose numerator or denominator would exceed [`MAX_BITS`],
//! so a hostile exponent (`9^{9^{9}}`) costs nothing and the caller falls back to floats.

use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// The largest numerator or denominator kept exactly, in bits (2^4096 ≈ 10^1233).
const MAX_BITS: u64 = 4096;

/// A fraction in lowest terms with a positive denominator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rational {
    num: BigInt,
    den: BigInt,
}

impl Rational {
    /// `num / den` in lowest terms; `None` when `den` is zero or the result is too large.
    fn new(num: BigInt, den: BigInt) -> Option<Self> {
        if den.is_zero() {
            return None;
        }
        let g = num.gcd(&den);
        let (mut num, mut den) = (num / &g, den / &g);
        if den.is_negative() {
            (num, den) = (-num, -den);
        }
        (num.bits() <= MAX_BITS && den.bits() <= MAX_BITS).then_some(Rational { num, den })
    }

    /// The integer `n`.
    pub fn integer(n: i64) -> Self {
        Rational {
            num: BigInt::from(n),
            den: BigInt::one(),
        }
    }

    /// The fraction `num / den`; `None` when `den` is zero.
    pub fn ratio(num: i64, den: i64) -> Option<Self> {
        Rational::new(BigInt::from(num), BigInt::from(den))
    }

    /// The exact value of a decimal literal such as `12`, `3.25`, `.5` or `7.`.
    pub fn from_decimal(text: &str) -> Option<Self> {
        let (int_part, frac_part) = text.split_once('.').unwrap_or((text, ""));
        // Each decimal digit is about 3.32 bits: refuse long literals before parsing them.
        if (int_part.len() + frac_part.len()) as u64 * 3 > MAX_BITS {
            return None;
        }
        let digits = format!("{int_part}{frac_part}");
        let num = BigInt::parse_bytes(digits.as_bytes(), 10)?;
        let exp = u32::try_from(frac_part.len()).ok()?;
        Rational::new(num, BigInt::from(10).pow(exp))
    }

    /// Whether this is a whole number.
    pub fn is_integer(&self) -> bool {
        self.den.is_one()
    }

    /// The sum.
    pub fn add(&self, other: &Self) -> Option<Self> {
        Rational::new(
            &self.num * &other.den + &other.num * &self.den,
            &self.den * &other.den,
        )
    }

    /// The difference.
    pub fn sub(&self, other: &Self) -> Option<Self> {
        self.add(&other.neg())
    }

    /// The product.
    pub fn mul(&self, other: &Self) -> Option<Self> {
        Rational::new(&self.num * &other.num, &self.den * &other.den)
    }

    /// The quotient; `None` when dividing by zero.
    pub fn div(&self, other: &Self) -> Option<Self> {
        Rational::new(&self.num * &other.den, &self.den * &other.num)
    }

    /// The negation.
    pub fn neg(&self) -> Self {
        Rational {
            num: -&self.num,
            den: self.den.clone(),
        }
    }

    /// `self^exp` for a whole exponent; `None` for other exponents (`2^{1/2}` is not rational in
    /// general), `0^{-n}`, or a result too large to keep.
    pub fn pow(&self, exp: &Self) -> Option<Self> {
        if !exp.is_integer() {
            return None;
        }
        if self.num.abs().is_one() && self.den.is_one() {
            // ±1 to any power, however large the exponent.
            let odd = exp.num.is_odd();
            return Some(if odd {
                self.clone()
            } else {
                Rational::integer(1)
            });
        }
        if self.num.is_zero() {
            return exp
                .num
                .is_positive()
                .then(|| Rational::integer(0))
                .or_else(|| {
                    // 0^0 = 1, as everywhere in final answers; 0^{-n} is undefined.
                    exp.num.is_zero().then(|| Rational::integer(1))
                });
        }
        let e = exp.num.abs().to_u64()?;
        let bits = self.num.bits().max(self.den.bits());
        // The result needs about `bits * e` bits: refuse before computing it.
        if bits.saturating_sub(1).saturating_mul(e) > MAX_BITS {
            return None;
        }
        let e = u32::try_from(e).ok()?;
        let (num, den) = (self.num.pow(e), self.den.pow(e));
        if exp.num.is_negative() {
            Rational::new(den, num)
        } else {
            Rational::new(num, den)
        }
    }

    /// Whether `self` and `other` differ by at most `1/tol_inv` of the larger magnitude.
    pub fn close_to(&self, other: &Self, tol_inv: u32) -> bool {
        // |a/b - c/d| * tol_inv <= max(|a/b|, |c/d|), multiplied through by b*d > 0.
        let diff = (&self.num * &other.den - &other.num * &self.den).abs() * tol_inv;
        let (a, c) = (
            (&self.num * &other.den).abs(),
            (&other.num * &self.den).abs(),
        );
        diff <= a.max(c)
    }
}

#[cfg(test)]
mod tests {
    use super::Rational;

    fn r(text: &str) -> Rational {
        Rational::from_decimal(text).unwrap_or_else(|| Rational::integer(-999))
    }

    #[test]
    fn decimals_are_exact_fractions() {
        assert_eq!(Some(r("0.5")), Rational::ratio(1, 2));
        assert_eq!(r("3.250"), r("3.25"));
        assert_eq!(r(".5"), r("0.5"));
        assert_eq!(r("7."), Rational::integer(7));
        assert!(r("12").is_integer());
        assert!(!r("12.5").is_integer());
        assert_eq!(Rational::from_decimal("1.2.3"), None);
    }

    #[test]
    fn arithmetic_beyond_float_precision() {
        let two = Rational::integer(2);
        let big = two.pow(&Rational::integer(100));
        let bigger = big.as_ref().and_then(|b| b.add(&Rational::integer(1)));
        assert!(big.is_some());
        assert_ne!(big, bigger);
        let half = two.pow(&Rational::integer(-1));
        assert_eq!(half, Some(r("0.5")));
        assert_eq!(two.pow(&r("0.5")), None);
        assert_eq!(Rational::integer(0).div(&Rational::integer(0)), None);
        assert_eq!(Rational::integer(0).pow(&Rational::integer(-1)), None);
    }

    #[test]
    fn huge_results_are_refused_cheaply() {
        let nine = Rational::integer(9);
        assert_eq!(nine.pow(&Rational::integer(387_420_489)), None);
        assert_eq!(
            Rational::integer(-1).pow(&Rational::integer(1_000_000_001)),
            Some(Rational::integer(-1))
        );
        assert_eq!(Rational::from_decimal(&"9".repeat(5000)), None);
    }

    #[test]
    fn closeness_is_relative() {
        let third = Rational::ratio(1, 3).unwrap_or_else(|| r("0"));
        let four_thirds = Rational::ratio(4, 3).unwrap_or_else(|| r("0"));
        assert!(r("1.3333333333").close_to(&four_thirds, 1_000_000));
        assert!(!r("0.333").close_to(&third, 1_000_000));
        assert!(r("0").close_to(&r("0.0"), 1_000_000));
        assert!(!r("0.000001").close_to(&r("0"), 1_000_000));
    }
}
