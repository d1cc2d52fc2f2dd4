//! Whole numbers of seconds as JSON writes them.
//!
//! JSON has one number type: `60` and `60.0` are the same integer to JSON Schema, and clients
//! (JavaScript's, among others) may write either. Counts of seconds accept both, and refuse a
//! fraction, a negative or a value above 2^53, the largest every JSON reader holds exactly
//! (whichever way it is written, so that the documents can give one `maximum`).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The largest integer a JSON number read as `f64` holds exactly (2^53).
pub const MAX: u64 = 9_007_199_254_740_992;
#[allow(clippy::cast_precision_loss)] // 2^53 is exact in an f64.
const EXACT_LIMIT: f64 = MAX as f64;

fn whole(number: &serde_json::Number) -> Option<u64> {
    if let Some(n) = number.as_u64() {
        return (n <= MAX).then_some(n);
    }
    let f = number.as_f64()?;
    // The check above the cast makes it exact: integral, non-negative, at most 2^53.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    ((0.0..=EXACT_LIMIT).contains(&f) && f.fract() == 0.0).then_some(f as u64)
}

/// A whole, non-negative number (`60` or `60.0`).
///
/// # Errors
/// For anything else.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    whole(&number).ok_or_else(|| D::Error::custom(format!("expected a whole number of seconds, got {number}")))
}

/// A whole count that fits 32 bits (`3` or `3.0`), read as [`deserialize`] reads seconds.
///
/// # Errors
/// For anything else.
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    whole(&number)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| D::Error::custom(format!("expected a whole number below 2^32, got {number}")))
}

/// As [`deserialize`], for an optional field (`null` or absent is `None`).
pub mod option {
    use super::{Deserialize, Deserializer, whole};
    use serde::de::Error as _;

    /// `null` or a whole, non-negative number.
    ///
    /// # Errors
    /// For anything else.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<serde_json::Number>::deserialize(d)? {
            None => Ok(None),
            Some(number) => whole(&number)
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("expected a whole number of seconds, got {number}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct T {
        #[serde(with = "super")]
        s: u64,
        #[serde(default, with = "super::option")]
        o: Option<u64>,
    }

    fn read(json: &str) -> Result<(u64, Option<u64>), String> {
        serde_json::from_str::<T>(json).map(|t| (t.s, t.o)).map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_in_either_notation() {
        assert_eq!(read(r#"{"s": 60}"#), Ok((60, None)));
        assert_eq!(read(r#"{"s": 60.0, "o": 424.0}"#), Ok((60, Some(424))));
        assert_eq!(read(r#"{"s": 6e1, "o": null}"#), Ok((60, None)));
        assert_eq!(read(r#"{"s": 9007199254740992}"#), Ok((super::MAX, None)));
        assert_eq!(read(r#"{"s": 9007199254740992.0}"#), Ok((super::MAX, None)));
        assert_eq!(read(r#"{"s": -0.0}"#), Ok((0, None)), "negative zero is zero");
        for bad in [
            r#"{"s": 60.5}"#,
            r#"{"s": -1}"#,
            r#"{"s": 1e300}"#,
            r#"{"s": "60"}"#,
            r#"{"s": 60, "o": 1.5}"#,
            r#"{"s": 9007199254740993}"#,
            r#"{"s": 18446744073709551615}"#,
            r#"{"s": 9007199254740994.0}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
