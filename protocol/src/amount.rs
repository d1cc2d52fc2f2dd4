//! Exact money.
//!
//! Two representations exist on the wire and both are exact:
//!
//! * [`AtomicAmount`]: an integer count of the smallest unit (lamports, wei, token base units),
//!   written as a decimal string (`"10000000"`), as x402 does.
//! * [`DecimalAmount`]: a JSON *number* in whole units (`0.01` SOL), as the gateway API does. It is
//!   read from the JSON text itself (never through floating point) and converted to atomic units for a
//!   given number of decimals with [`DecimalAmount::to_atomic`].
//!
//! Nothing in this module uses floating point.

use std::fmt;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// Decimals of native SOL (1 SOL = 10^9 lamports).
pub const SOL_DECIMALS: u8 = 9;
/// Decimals of native ETH (1 ETH = 10^18 wei).
pub const ETH_DECIMALS: u8 = 18;

/// Largest number of decimals an amount may be converted for (u128 holds 10^38).
pub const MAX_DECIMALS: u8 = 30;

/// Why a text is not an acceptable amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// The text is not a number at all (or not a JSON number: `NaN`, `.5`, `1.`, `+1`, `0x10` ...).
    #[error("not a number: {0:?}")]
    NotANumber(String),
    /// A minus sign.
    #[error("amount must not be negative")]
    Negative,
    /// More fractional digits than the asset has.
    #[error("too many decimal places: at most {max} allowed")]
    TooManyDecimals {
        /// Decimals of the asset.
        max: u8,
    },
    /// Does not fit the 128-bit atomic representation.
    #[error("amount is too large")]
    TooLarge,
    /// An unsupported number of decimals was asked for.
    #[error("unsupported number of decimals: {0}")]
    UnsupportedDecimals(u8),
}

/// An amount in atomic units (lamports, wei, token base units).
///
/// Serialized as a decimal string, as x402 does, because JSON numbers above 2^53 are not safe in
/// most JSON implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AtomicAmount(pub u128);

impl AtomicAmount {
    /// Zero.
    pub const ZERO: Self = Self(0);

    /// The integer value.
    #[must_use]
    pub const fn get(self) -> u128 {
        self.0
    }

    /// `self + other`, or `None` on overflow.
    #[must_use]
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }

    /// Formats as whole units with the given decimals, without trailing zeros (`10000000`, 9 → `"0.01"`).
    #[must_use]
    pub fn to_decimal_string(self, decimals: u8) -> String {
        format_atomic(self.0, decimals)
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for AtomicAmount {
    type Err = AmountError;

    /// Parses a non-negative integer in decimal, digits only (the x402 `amount` form).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with('-') {
            return Err(AmountError::Negative);
        }
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::NotANumber(truncate_for_error(s)));
        }
        s.parse::<u128>().map(Self).map_err(|_| AmountError::TooLarge)
    }
}

impl From<u64> for AtomicAmount {
    fn from(v: u64) -> Self {
        Self(u128::from(v))
    }
}

impl Serialize for AtomicAmount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AtomicAmount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(D::Error::custom)
    }
}

/// A non-negative decimal number kept exactly as written (`0.01`, `1e-3`, `100`).
///
/// Deserializes only from a JSON number and reads its digits from the JSON text, so `0.1` is
/// exactly one tenth. Serializes back as a JSON number in plain (non-exponent) notation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DecimalAmount {
    /// Significant digits, without leading zeros (empty for zero).
    digits: Vec<u8>,
    /// The value is `digits * 10^-scale`.
    scale: u32,
}

/// Exponents beyond this are refused outright (they cannot describe a payable amount).
const MAX_EXPONENT: i64 = 1_000;

impl DecimalAmount {
    /// Parses the text of a JSON number (RFC 8259 grammar: `0`, `12`, `0.5`, `1e-3`, `2.5E+2`).
    ///
    /// # Errors
    /// [`AmountError::Negative`] for a leading minus, [`AmountError::NotANumber`] for anything
    /// outside the JSON number grammar (including `NaN`, `Infinity`, `.5`, `1.`, `+1`, spaces).
    pub fn parse(text: &str) -> Result<Self, AmountError> {
        let bad = || AmountError::NotANumber(truncate_for_error(text));
        if let Some(rest) = text.strip_prefix('-') {
            // Only report "negative" for something that is otherwise a number.
            return match Self::parse(rest) {
                Ok(_) => Err(AmountError::Negative),
                Err(_) => Err(bad()),
            };
        }
        let bytes = text.as_bytes();
        let mut i = digits_end(bytes, 0);
        let int_part = &text[..i];
        if int_part.is_empty() || (int_part.len() > 1 && int_part.starts_with('0')) {
            return Err(bad());
        }
        let mut frac_part = "";
        if bytes.get(i) == Some(&b'.') {
            let end = digits_end(bytes, i + 1);
            frac_part = &text[i + 1..end];
            if frac_part.is_empty() {
                return Err(bad());
            }
            i = end;
        }
        let (exponent, end) = exponent(text, i).ok_or_else(bad)?;
        if end != bytes.len() {
            return Err(bad());
        }
        Self::from_digits(int_part, frac_part, exponent)
    }

    /// The value of `int_part.frac_part` × 10^`exponent`, normalised: no leading zeros, no
    /// trailing zeros in the fraction.
    fn from_digits(int_part: &str, frac_part: &str, exponent: i64) -> Result<Self, AmountError> {
        let mut digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0').collect();
        let mut scale = frac_part.len() as i64 - exponent;
        // Normalise: drop leading zeros, then trailing zeros of the fraction.
        let leading = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading);
        if digits.is_empty() {
            return Ok(Self { digits, scale: 0 });
        }
        while scale > 0 && digits.last() == Some(&0) {
            digits.pop();
            scale -= 1;
        }
        if !(-MAX_EXPONENT..=MAX_EXPONENT).contains(&scale) {
            return Err(if scale < 0 {
                AmountError::TooLarge
            } else {
                AmountError::TooManyDecimals { max: MAX_DECIMALS }
            });
        }
        // A negative scale means trailing zeros to append.
        if scale < 0 {
            digits.extend(std::iter::repeat_n(0, (-scale) as usize));
            scale = 0;
        }
        Ok(Self { digits, scale: scale as u32 })
    }

    /// Converts to atomic units for an asset with `decimals` decimals.
    ///
    /// # Errors
    /// [`AmountError::TooManyDecimals`] when the value has more fractional digits than the
    /// asset, [`AmountError::TooLarge`] when it does not fit in 128 bits.
    pub fn to_atomic(&self, decimals: u8) -> Result<AtomicAmount, AmountError> {
        if decimals > MAX_DECIMALS {
            return Err(AmountError::UnsupportedDecimals(decimals));
        }
        if self.scale > u32::from(decimals) {
            return Err(AmountError::TooManyDecimals { max: decimals });
        }
        let shift = u32::from(decimals) - self.scale;
        let mut value: u128 = 0;
        for &d in &self.digits {
            value = value.checked_mul(10).and_then(|v| v.checked_add(u128::from(d))).ok_or(AmountError::TooLarge)?;
        }
        value
            .checked_mul(10u128.checked_pow(shift).ok_or(AmountError::TooLarge)?)
            .map(AtomicAmount)
            .ok_or(AmountError::TooLarge)
    }

    /// The decimal form of an atomic amount (`10000000`, 9 decimals → `0.01`).
    #[must_use]
    pub fn from_atomic(amount: AtomicAmount, decimals: u8) -> Self {
        // `format_atomic` always yields valid grammar; parse cannot fail on it.
        Self::parse(&format_atomic(amount.0, decimals)).unwrap_or(Self { digits: Vec::new(), scale: 0 })
    }

    /// True for zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }
}

impl fmt::Display for DecimalAmount {
    /// Plain notation without exponent or trailing zeros (`0.01`, `100`, `0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let text: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let scale = self.scale as usize;
        if scale == 0 {
            f.write_str(&text)
        } else if text.len() > scale {
            let (int, frac) = text.split_at(text.len() - scale);
            write!(f, "{int}.{frac}")
        } else {
            write!(f, "0.{}{text}", "0".repeat(scale - text.len()))
        }
    }
}

impl FromStr for DecimalAmount {
    type Err = AmountError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for DecimalAmount {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Emit the exact digits as a JSON number (not a string, not a float).
        let raw = RawValue::from_string(self.to_string()).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for DecimalAmount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&RawValue>::deserialize(d)?;
        let text = raw.get();
        if text.starts_with('"') {
            return Err(D::Error::custom("expected a JSON number, found a string"));
        }
        Self::parse(text).map_err(D::Error::custom)
    }
}

/// `value` in whole units with `decimals` decimals, trailing zeros trimmed.
fn format_atomic(value: u128, decimals: u8) -> String {
    let text = value.to_string();
    let decimals = usize::from(decimals);
    if decimals == 0 {
        return text;
    }
    let padded = if text.len() <= decimals { format!("{}{text}", "0".repeat(decimals + 1 - text.len())) } else { text };
    let (int, frac) = padded.split_at(padded.len() - decimals);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() { int.to_owned() } else { format!("{int}.{frac}") }
}

fn truncate_for_error(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Where the ASCII digits of `bytes` starting at `from` end.
fn digits_end(bytes: &[u8], from: usize) -> usize {
    from + bytes[from..].iter().take_while(|b| b.is_ascii_digit()).count()
}

/// The exponent written at `at` (`e` or `E`, an optional sign, digits) and where it ends;
/// `(0, at)` when none is written, `None` for an `e` without digits. Absurd exponents saturate
/// (and are refused by the scale check) instead of overflowing.
fn exponent(text: &str, at: usize) -> Option<(i64, usize)> {
    let bytes = text.as_bytes();
    if !matches!(bytes.get(at), Some(b'e' | b'E')) {
        return Some((0, at));
    }
    let mut i = at + 1;
    let negative = match bytes.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let end = digits_end(bytes, i);
    let digits = text[i..end].trim_start_matches('0');
    if i == end {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(if digits.is_empty() { 0 } else { i64::MAX / 2 });
    Some((if negative { -magnitude } else { magnitude }, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn atomic(text: &str, decimals: u8) -> Result<u128, AmountError> {
        DecimalAmount::parse(text)?.to_atomic(decimals).map(AtomicAmount::get)
    }

    #[test]
    fn parses_exactly() {
        assert_eq!(atomic("0.01", 9), Ok(10_000_000));
        assert_eq!(atomic("0.1", 18), Ok(100_000_000_000_000_000));
        assert_eq!(atomic("100", 9), Ok(100_000_000_000));
        assert_eq!(atomic("1e-3", 9), Ok(1_000_000));
        assert_eq!(atomic("2.5E+2", 0), Ok(250));
        assert_eq!(atomic("0.000000001", 9), Ok(1));
        assert_eq!(atomic("1.500000000000", 9), Ok(1_500_000_000));
        assert_eq!(atomic("0", 9), Ok(0));
        assert_eq!(atomic("0.0e5", 9), Ok(0));
    }

    #[test]
    fn refuses_what_is_not_exact_or_not_a_number() {
        assert_eq!(atomic("0.0000000001", 9), Err(AmountError::TooManyDecimals { max: 9 }));
        assert_eq!(atomic("-0.01", 9), Err(AmountError::Negative));
        for bad in [
            "NaN",
            "Infinity",
            "-Infinity",
            "",
            ".5",
            "1.",
            "+1",
            "01",
            "0x10",
            "1 ",
            " 1",
            "1e",
            "1e+",
            "1..2",
            "--1",
            "1,5",
        ] {
            assert!(matches!(atomic(bad, 9), Err(AmountError::NotANumber(_))), "{bad:?} accepted");
        }
        assert_eq!(atomic("1e40", 9), Err(AmountError::TooLarge));
        assert_eq!(atomic("1e99999999999999999999", 9), Err(AmountError::TooLarge));
        assert!(atomic("1e-99999999999999999999", 9).is_err());
    }

    #[test]
    fn json_numbers_are_read_from_their_text() {
        let v: DecimalAmount = serde_json::from_str("0.1").unwrap();
        assert_eq!(v.to_atomic(18).unwrap().get(), 100_000_000_000_000_000);
        // 0.30000000000000004 as a binary float, but exactly 0.3 here.
        let v: DecimalAmount = serde_json::from_str("0.3").unwrap();
        assert_eq!(v.to_string(), "0.3");
        assert!(serde_json::from_str::<DecimalAmount>("\"0.1\"").is_err());
        assert!(serde_json::from_str::<DecimalAmount>("-1").is_err());
        assert_eq!(serde_json::to_string(&DecimalAmount::parse("1e-2").unwrap()).unwrap(), "0.01");
    }

    #[test]
    fn formats_atomic_back() {
        assert_eq!(AtomicAmount(10_000_000).to_decimal_string(9), "0.01");
        assert_eq!(AtomicAmount(1).to_decimal_string(18), "0.000000000000000001");
        assert_eq!(AtomicAmount(5_000_000_000).to_decimal_string(9), "5");
        assert_eq!(AtomicAmount(0).to_decimal_string(9), "0");
        assert_eq!(serde_json::to_string(&AtomicAmount(u128::MAX)).unwrap(), format!("\"{}\"", u128::MAX));
        assert!("12a".parse::<AtomicAmount>().is_err());
        assert_eq!("-5".parse::<AtomicAmount>(), Err(AmountError::Negative));
        assert_eq!("340282366920938463463374607431768211456".parse::<AtomicAmount>(), Err(AmountError::TooLarge));
    }

    proptest! {
        #[test]
        fn atomic_round_trips_through_decimal(value in any::<u128>(), decimals in 0u8..=MAX_DECIMALS) {
            let amount = AtomicAmount(value);
            let decimal = DecimalAmount::from_atomic(amount, decimals);
            prop_assert_eq!(decimal.to_atomic(decimals), Ok(amount));
            let json = serde_json::to_string(&decimal).unwrap();
            let back: DecimalAmount = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back.to_atomic(decimals), Ok(amount));
        }

        #[test]
        fn equal_values_in_other_notations_agree(int in 0u64..1_000_000, frac in 0u32..1_000_000_000, exp in 0u32..6) {
            let plain = format!("{int}.{frac:09}");
            let scaled = format!("{int}{frac:09}e-{}", 9);
            let a = atomic(&plain, 9 + exp as u8).unwrap();
            let b = atomic(&scaled, 9 + exp as u8).unwrap();
            prop_assert_eq!(a, b);
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,40}") {
            let _ = DecimalAmount::parse(&text).and_then(|d| d.to_atomic(18));
        }
    }
}
