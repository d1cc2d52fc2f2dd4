//! Base64-JSON HTTP headers (`X-PAYMENT`, `PAYMENT-SIGNATURE`, `PAYMENT-REQUIRED`, ...).
//!
//! Header values come from strangers, so decoding is bounded: anything longer than
//! [`MAX_HEADER_BYTES`] is refused before it is decoded, and every failure is a
//! [`HeaderError`] that says what was wrong, never a panic.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// x402 v1 request header carrying the payment payload.
pub const X_PAYMENT: &str = "X-PAYMENT";
/// x402 v1 response header carrying the settlement response.
pub const X_PAYMENT_RESPONSE: &str = "X-PAYMENT-RESPONSE";
/// x402 v2 response header carrying the payment requirements (402 answers).
pub const PAYMENT_REQUIRED: &str = "PAYMENT-REQUIRED";
/// x402 v2 request header carrying the payment payload.
pub const PAYMENT_SIGNATURE: &str = "PAYMENT-SIGNATURE";
/// x402 v2 response header carrying the settlement response.
pub const PAYMENT_RESPONSE: &str = "PAYMENT-RESPONSE";

/// Largest header value accepted, in bytes of base64 text (16 KiB).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Why a header value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Empty value.
    #[error("payment header is empty")]
    Empty,
    /// Over [`MAX_HEADER_BYTES`].
    #[error("payment header is {len} bytes, more than the {max} allowed")]
    TooLarge {
        /// Length received.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not base64.
    #[error("payment header is not valid base64")]
    Base64,
    /// Base64 of something that is not the expected JSON.
    #[error("payment header is not valid JSON for this message: {0}")]
    Json(String),
}

/// Encodes a message as base64 (standard alphabet, padded) of its JSON.
///
/// # Errors
/// Only if the value cannot be serialized to JSON (a map with non-string keys, say).
pub fn encode<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    serde_json::to_vec(value).map(|json| STANDARD.encode(json))
}

/// Decodes a base64 JSON header value into `T`.
///
/// Surrounding whitespace is ignored; the standard and URL-safe alphabets are both accepted,
/// padded or not.
///
/// # Errors
/// [`HeaderError`] for an empty, oversized, non-base64 or non-matching value.
pub fn decode<T: DeserializeOwned>(value: &str) -> Result<T, HeaderError> {
    let bytes = decode_bytes(value)?;
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    deserialize_whole(de)
}

/// Decodes the base64 layer only (bounded), returning the JSON bytes.
///
/// # Errors
/// [`HeaderError::Empty`], [`HeaderError::TooLarge`] or [`HeaderError::Base64`].
pub fn decode_bytes(value: &str) -> Result<Vec<u8>, HeaderError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(HeaderError::Empty);
    }
    if value.len() > MAX_HEADER_BYTES {
        return Err(HeaderError::TooLarge { len: value.len(), max: MAX_HEADER_BYTES });
    }
    let unpadded = value.trim_end_matches('=');
    let engine_input = if unpadded.contains(['-', '_']) { (URL_SAFE, unpadded) } else { (STANDARD, unpadded) };
    let (engine, text) = engine_input;
    // Re-pad so both padded and unpadded input decode with the padded engines.
    let mut padded = text.to_owned();
    while padded.len() % 4 != 0 {
        padded.push('=');
    }
    engine.decode(padded.as_bytes()).map_err(|_| HeaderError::Base64)
}

fn deserialize_whole<T: DeserializeOwned>(
    de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>,
) -> Result<T, HeaderError> {
    let value = T::deserialize(&mut *de).map_err(|e| HeaderError::Json(e.to_string()))?;
    de.end().map_err(|e| HeaderError::Json(e.to_string()))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    #[test]
    fn round_trip_and_limits() {
        let v = serde_json::json!({"x402Version": 1, "scheme": "exact"});
        let h = encode(&v).unwrap();
        assert_eq!(decode::<Value>(&h).unwrap(), v);
        assert_eq!(decode::<Value>(&format!("  {h}\n")).unwrap(), v);
        assert_eq!(decode::<Value>(h.trim_end_matches('=')).unwrap(), v);
        assert_eq!(decode::<Value>(""), Err(HeaderError::Empty));
        assert_eq!(decode::<Value>("***"), Err(HeaderError::Base64));
        assert!(matches!(decode::<Value>(&STANDARD.encode("not json")), Err(HeaderError::Json(_))));
        let huge = "A".repeat(MAX_HEADER_BYTES + 1);
        assert_eq!(
            decode::<Value>(&huge),
            Err(HeaderError::TooLarge { len: MAX_HEADER_BYTES + 1, max: MAX_HEADER_BYTES })
        );
        // Exactly at the limit is decoded (and fails only for being garbage JSON).
        let at_limit = "A".repeat(MAX_HEADER_BYTES);
        assert!(matches!(decode::<Value>(&at_limit), Err(HeaderError::Json(_))));
    }

    #[test]
    fn url_safe_alphabet_is_accepted() {
        let v = serde_json::json!({"k": "\u{fffe}\u{fbff}?>"});
        let json = serde_json::to_vec(&v).unwrap();
        let h = URL_SAFE.encode(json);
        assert_eq!(decode::<Value>(&h).unwrap(), v);
    }

    proptest! {
        #[test]
        fn decode_never_panics(text in "\\PC{0,200}") {
            let _ = decode::<Value>(&text);
        }
    }
}
