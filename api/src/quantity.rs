//! Resource quantities as numbers: `100m` CPU as 100 millicores, `128Mi` as bytes.
//!
//! Kubernetes' grammar: a signed decimal number then a suffix that is binary (`Ki`..`Ei`),
//! decimal SI (`n`, `u`, `m`, ``, `k`, `M`..`E`) or a decimal exponent (`e3`, `E-2`).
//! Values are kept exact as a fraction of 128-bit integers and rounded up when an integer is
//! asked for, as Kubernetes' `Value()`/`MilliValue()` do.

use std::cmp::Ordering;

use crate::meta::Quantity;

#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum QuantityError {
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}")]
    Syntax(String),
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
}

/// An exact value `num / den`, `den > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fraction {
    num: i128,
    den: i128,
}

fn pow(base: i128, exp: u32, src: &str) -> Result<i128, QuantityError> {
    base.checked_pow(exp)
        .ok_or_else(|| QuantityError::OutOfRange(src.into()))
}

fn parse(s: &str) -> Result<Fraction, QuantityError> {
    let syntax = || QuantityError::Syntax(s.into());
    let range = || QuantityError::OutOfRange(s.into());
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(syntax());
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return Err(range());
    }
    let mut mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| syntax())?
    };
    if negative {
        mantissa = -mantissa;
    }
    let frac_len = u32::try_from(frac_part.len()).map_err(|_| range())?;
    let mut den = pow(10, frac_len, s)?;
    let mut mult: i128 = 1;
    match suffix {
        "" => {}
        "Ki" => mult = 1 << 10,
        "Mi" => mult = 1 << 20,
        "Gi" => mult = 1 << 30,
        "Ti" => mult = 1 << 40,
        "Pi" => mult = 1 << 50,
        "Ei" => mult = 1 << 60,
        "n" => den = den.checked_mul(1_000_000_000).ok_or_else(range)?,
        "u" => den = den.checked_mul(1_000_000).ok_or_else(range)?,
        "m" => den = den.checked_mul(1_000).ok_or_else(range)?,
        "k" => mult = 1_000,
        "M" => mult = 1_000_000,
        "G" => mult = 1_000_000_000,
        "T" => mult = 1_000_000_000_000,
        "P" => mult = 1_000_000_000_000_000,
        "E" => mult = 1_000_000_000_000_000_000,
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(syntax)?;
            let exp_digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if exp_digits.is_empty() || !exp_digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            let e: i32 = exp.parse().map_err(|_| range())?;
            if e.unsigned_abs() > 36 {
                return Err(range());
            }
            if e >= 0 {
                mult = pow(10, e.unsigned_abs(), s)?;
            } else {
                den = den
                    .checked_mul(pow(10, e.unsigned_abs(), s)?)
                    .ok_or_else(range)?;
            }
        }
    }
    let num = mantissa.checked_mul(mult).ok_or_else(range)?;
    Ok(Fraction { num, den })
}

/// `num * scale / den`, rounded away from zero, as an i64.
fn scaled(f: Fraction, scale: i128, src: &str) -> Result<i64, QuantityError> {
    let range = || QuantityError::OutOfRange(src.into());
    let n = f.num.checked_mul(scale).ok_or_else(range)?;
    let q = n / f.den;
    let q = if n % f.den != 0 { q + n.signum() } else { q };
    i64::try_from(q).map_err(|_| range())
}

/// The value in thousandths, rounded up: `100m` -> 100, `1` -> 1000, `0.5` -> 500.
pub fn parse_quantity_milli(s: &str) -> Result<i64, QuantityError> {
    scaled(parse(s)?, 1000, s)
}

/// The value as an integer, rounded up: `128Mi` -> 134217728, `1k` -> 1000, `100m` -> 1.
pub fn parse_quantity_value(s: &str) -> Result<i64, QuantityError> {
    scaled(parse(s)?, 1, s)
}

/// A byte count (memory, storage): the same as [`parse_quantity_value`].
pub fn parse_quantity_bytes(s: &str) -> Result<i64, QuantityError> {
    parse_quantity_value(s)
}

/// The exact value as `(numerator, denominator)`, the denominator positive: `1.5Ki` is
/// `(15360, 10)` (for arithmetic on quantities, as CEL's quantity library does).
pub fn parse_quantity_exact(s: &str) -> Result<(i128, i128), QuantityError> {
    parse(s).map(|f| (f.num, f.den))
}

/// Compares two quantities exactly (`1Gi` > `1G`, `1000m` == `1`).
pub fn compare_quantities(a: &str, b: &str) -> Result<Ordering, QuantityError> {
    let fa = parse(a)?;
    let fb = parse(b)?;
    match (fa.num.checked_mul(fb.den), fb.num.checked_mul(fa.den)) {
        (Some(x), Some(y)) => Ok(x.cmp(&y)),
        _ => {
            let x = fa.num as f64 / fa.den as f64;
            let y = fb.num as f64 / fb.den as f64;
            Ok(x.partial_cmp(&y).unwrap_or(Ordering::Equal))
        }
    }
}

impl Quantity {
    /// See [`parse_quantity_milli`].
    pub fn milli_value(&self) -> Result<i64, QuantityError> {
        parse_quantity_milli(&self.0)
    }

    /// See [`parse_quantity_value`].
    pub fn value(&self) -> Result<i64, QuantityError> {
        parse_quantity_value(&self.0)
    }

    /// Whether the text is a valid quantity.
    pub fn validate(&self) -> Result<(), QuantityError> {
        parse(&self.0).map(|_| ())
    }

    /// A CPU-style quantity from thousandths: 1500 -> `1500m`, 2000 -> `2`.
    pub fn from_milli(milli: i64) -> Quantity {
        if milli % 1000 == 0 {
            Quantity((milli / 1000).to_string())
        } else {
            Quantity(format!("{milli}m"))
        }
    }

    /// A quantity from thousandths in Kubernetes' canonical decimal form
    /// (`resource.NewMilliQuantity(m, DecimalSI)`): the largest SI suffix that keeps the
    /// number whole. 1500 -> `1500m`, 15000 -> `15`, 2000000 -> `2k`, 1200000 -> `1200`.
    pub fn decimal_milli(milli: i64) -> Quantity {
        if milli == 0 {
            return Quantity("0".into());
        }
        const SUFFIXES: [&str; 8] = ["m", "", "k", "M", "G", "T", "P", "E"];
        let (mut m, mut i) = (milli, 0);
        while m % 1000 == 0 && i + 1 < SUFFIXES.len() {
            m /= 1000;
            i += 1;
        }
        Quantity(format!("{m}{}", SUFFIXES[i]))
    }

    /// A memory-style quantity from bytes, in the largest binary unit that divides it.
    pub fn from_bytes(bytes: i64) -> Quantity {
        const UNITS: [(&str, i64); 6] = [
            ("Ei", 1 << 60),
            ("Pi", 1 << 50),
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ];
        for (suffix, size) in UNITS {
            if bytes != 0 && bytes % size == 0 {
                return Quantity(format!("{}{suffix}", bytes / size));
            }
        }
        Quantity(bytes.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_milli_is_canonical() {
        for (m, text) in [
            (0, "0"),
            (1500, "1500m"),
            (15000, "15"),
            (2_000_000, "2k"),
            (1_200_000, "1200"),
            (-3000, "-3"),
            (7, "7m"),
        ] {
            assert_eq!(Quantity::decimal_milli(m).0, text);
            assert_eq!(Quantity::decimal_milli(m).milli_value().unwrap(), m);
        }
    }

    #[test]
    fn milli_values() {
        let cases = [
            ("100m", 100),
            ("1", 1000),
            ("0.5", 500),
            (".5", 500),
            ("2.", 2000),
            ("1k", 1_000_000),
            ("250u", 1),
            ("1n", 1),
            ("0", 0),
            ("+3", 3000),
            ("-1", -1000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("1.5e1", 15_000),
            ("0.1m", 1),
        ];
        for (s, want) in cases {
            assert_eq!(parse_quantity_milli(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn byte_values() {
        let cases = [
            ("128Mi", 128 << 20),
            ("1Gi", 1 << 30),
            ("1G", 1_000_000_000),
            ("64Ki", 65536),
            ("1.5Gi", 3 << 29),
            ("129M", 129_000_000),
            ("123", 123),
            ("100m", 1),
            ("1Ei", 1 << 60),
            ("2e2", 200),
        ];
        for (s, want) in cases {
            assert_eq!(parse_quantity_bytes(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "", "m", "1x", "1mm", "1.2.3", "Mi", "1 Mi", "1e", "1e+", "--1", "1Ki2", "abc",
        ] {
            assert!(
                matches!(parse_quantity_milli(s), Err(QuantityError::Syntax(_))),
                "{s:?} parsed"
            );
        }
    }

    #[test]
    fn out_of_range() {
        assert!(matches!(
            parse_quantity_milli("16Ei"),
            Err(QuantityError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_quantity_value("1e40"),
            Err(QuantityError::OutOfRange(_))
        ));
        // Large but exact values still compare.
        assert_eq!(compare_quantities("16Ei", "17Ei"), Ok(Ordering::Less));
    }

    #[test]
    fn compares_exactly() {
        assert_eq!(compare_quantities("1Gi", "1G"), Ok(Ordering::Greater));
        assert_eq!(compare_quantities("1000m", "1"), Ok(Ordering::Equal));
        assert_eq!(compare_quantities("500m", "0.5"), Ok(Ordering::Equal));
        assert_eq!(compare_quantities("250m", "1"), Ok(Ordering::Less));
        assert!(compare_quantities("x", "1").is_err());
    }

    #[test]
    fn quantity_methods() {
        assert_eq!(Quantity("250m".into()).milli_value(), Ok(250));
        assert_eq!(Quantity("1Mi".into()).value(), Ok(1 << 20));
        assert!(Quantity("1q".into()).validate().is_err());
        assert_eq!(Quantity::from_milli(1500), Quantity("1500m".into()));
        assert_eq!(Quantity::from_milli(2000), Quantity("2".into()));
        assert_eq!(Quantity::from_bytes(128 << 20), Quantity("128Mi".into()));
        assert_eq!(Quantity::from_bytes(1000), Quantity("1000".into()));
        assert_eq!(Quantity::from_bytes(0), Quantity("0".into()));
    }
}
