//! Prices as sellers and buyers write them: JSON numbers (`DecimalAmount`) and atomic integers.

use tollgate_protocol::{AtomicAmount, DecimalAmount};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "decimal and atomic amounts: a parsed price converts to the atomic units its digits say \
                         (computed here digit by digit), prints back to itself, and a refused text stays refused";

/// Decimals the conversions are checked at: none, USDC's, SOL's, ETH's, the most allowed.
const DECIMALS: [u8; 5] = [0, 6, 9, 18, 30];

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(atomic) = text.parse::<AtomicAmount>() {
        assert_eq!(Some(atomic.get()), crate::digits_value(text), "an atomic amount is not its digits");
    } else {
        assert!(crate::digits_value(text).is_none(), "digits refused as an atomic amount: {text:?}");
    }
    let Ok(amount) = DecimalAmount::parse(text) else {
        return;
    };
    // The text printed reads back to the same amount.
    let printed = amount.to_string();
    assert_eq!(DecimalAmount::parse(&printed).as_ref(), Ok(&amount), "{text:?} printed as {printed:?}");
    for decimals in DECIMALS {
        let expected = reference_atomic(text, decimals);
        let atomic = amount.to_atomic(decimals).ok().map(AtomicAmount::get);
        assert_eq!(atomic, expected, "{text:?} at {decimals} decimals");
        if let Some(value) = atomic {
            assert_eq!(DecimalAmount::from_atomic(AtomicAmount(value), decimals), amount);
        }
    }
}

/// The atomic value of a JSON number's text at `decimals`, from its grammar alone: `None` when
/// it is no whole number of atomic units or does not fit 128 bits.
fn reference_atomic(text: &str, decimals: u8) -> Option<u128> {
    let (mantissa, exponent) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    // Zero is zero at any exponent, even one past 64 bits (as `0e-4444…` or `0E1144…`, which
    // the first runs found the reference refusing while the parser rightly read 0).
    if mantissa.bytes().all(|b| matches!(b, b'0' | b'.')) {
        return Some(0);
    }
    let exponent = exponent.parse::<i64>().ok()?;
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    // value = digits × 10^(exponent − frac_len + decimals)
    let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0').collect();
    let mut shift = exponent.checked_sub(i64::try_from(frac_part.len()).ok()?)?.checked_add(i64::from(decimals))?;
    let mut digits = &digits[..];
    // Trailing zeros cancel a negative shift.
    while shift < 0 {
        match digits.split_last() {
            Some((0, rest)) => {
                digits = rest;
                shift += 1;
            }
            _ if digits.iter().all(|d| *d == 0) => return Some(0),
            _ => return None,
        }
    }
    let mut value = digits.iter().try_fold(0u128, |v, d| v.checked_mul(10)?.checked_add(u128::from(*d)))?;
    if value == 0 {
        return Some(0);
    }
    for _ in 0..shift {
        value = value.checked_mul(10)?;
    }
    Some(value)
}
