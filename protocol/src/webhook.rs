//! Signed webhooks: how Tollgate signs each delivery, and how a receiver checks it.
//!
//! Every delivery carries `Tollgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`, the HMAC
//! keyed with the endpoint's signing secret (`whsec_…`, shown once when the endpoint is
//! registered) over `"<t>." + body`, the body's exact bytes. While a secret is being rotated a
//! delivery carries one `v1=` per secret in force; any one matching is enough.
//!
//! A receiver checks the signature over the raw body, before parsing it, and refuses a
//! timestamp outside its tolerance (five minutes by default): a captured delivery cannot be
//! replayed later. Deliveries are at least once: deduplicate on the event's `id`.
//!
//! ```
//! use tollgate_protocol::webhook::{self, DEFAULT_TOLERANCE_SECS};
//!
//! let secret = "whsec_example";
//! let body = br#"{"id":"evt_1","type":"payment.confirmed"}"#;
//! let header = webhook::sign(secret, 1_700_000_000, body);
//! assert!(webhook::verify(secret, &header, body, 1_700_000_030, DEFAULT_TOLERANCE_SECS).is_ok());
//! assert!(webhook::verify(secret, &header, b"{}", 1_700_000_030, DEFAULT_TOLERANCE_SECS).is_err());
//! ```

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Tollgate-Signature";
/// How far a delivery's timestamp may be from the receiver's clock, by default: 5 minutes.
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;

/// Why a delivery's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The header is missing its timestamp or any `v1` signature, or is not `t=…,v1=…`.
    #[error("the Tollgate-Signature header is malformed")]
    Malformed,
    /// The timestamp is further from now than the tolerance (a replay, or a wrong clock).
    #[error("the delivery is {age_secs} s away from now, beyond the tolerance")]
    OutsideTolerance {
        /// Seconds between the delivery's timestamp and now.
        age_secs: u64,
    },
    /// No signature matches this secret and body.
    #[error("no signature matches")]
    Mismatch,
}

fn mac(secret: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable!());
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The hex HMAC-SHA256 of `"<timestamp>." + body` under `secret`.
#[must_use]
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `Tollgate-Signature` value for a delivery of `body` at `timestamp` (unix seconds).
#[must_use]
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", signature(secret, timestamp, body))
}

/// Checks a delivery: `header` is the `Tollgate-Signature` value, `body` the raw body as
/// received, `now` the receiver's clock (unix seconds).
///
/// # Errors
/// [`WebhookError`]: a malformed header, a timestamp outside `tolerance_secs`, or no `v1`
/// signature matching (compared in constant time).
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64, tolerance_secs: u64) -> Result<(), WebhookError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t.parse::<i64>().map_err(|_| WebhookError::Malformed)?),
            Some(("v1", hex)) => signatures.push(decode_hex(hex).ok_or(WebhookError::Malformed)?),
            // Other schemes (a future v2) are skipped, as receivers must.
            Some(_) => {}
            None => return Err(WebhookError::Malformed),
        }
    }
    let timestamp = timestamp.ok_or(WebhookError::Malformed)?;
    if signatures.is_empty() {
        return Err(WebhookError::Malformed);
    }
    let age_secs = now.abs_diff(timestamp);
    if age_secs > tolerance_secs {
        return Err(WebhookError::OutsideTolerance { age_secs });
    }
    let expected = mac(secret, timestamp, body);
    if signatures.iter().any(|s| expected.clone().verify_slice(s).is_ok()) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch)
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret";
    const BODY: &[u8] = br#"{"id":"evt_01","type":"payment.confirmed","data":{"amount":"1000"}}"#;
    const T: i64 = 1_790_000_000;

    #[test]
    fn a_signed_delivery_verifies_and_any_change_breaks_it() {
        let header = sign(SECRET, T, BODY);
        assert!(header.starts_with(&format!("t={T},v1=")));
        assert_eq!(verify(SECRET, &header, BODY, T + 10, DEFAULT_TOLERANCE_SECS), Ok(()));
        assert_eq!(verify(SECRET, &header, BODY, T - 10, DEFAULT_TOLERANCE_SECS), Ok(()), "clocks differ a little");
        // Another body (one byte), another secret, another timestamp with the same signature.
        let mut tampered = BODY.to_vec();
        tampered[30] ^= 1;
        assert_eq!(verify(SECRET, &header, &tampered, T, 300), Err(WebhookError::Mismatch));
        assert_eq!(verify("whsec_other", &header, BODY, T, 300), Err(WebhookError::Mismatch));
        let moved = header.replace(&format!("t={T}"), &format!("t={}", T + 1));
        assert_eq!(verify(SECRET, &moved, BODY, T, 300), Err(WebhookError::Mismatch));
    }

    #[test]
    fn old_and_future_deliveries_are_refused() {
        let header = sign(SECRET, T, BODY);
        assert_eq!(verify(SECRET, &header, BODY, T + 301, 300), Err(WebhookError::OutsideTolerance { age_secs: 301 }));
        assert_eq!(verify(SECRET, &header, BODY, T - 301, 300), Err(WebhookError::OutsideTolerance { age_secs: 301 }));
        assert_eq!(
            verify(SECRET, &header, BODY, i64::MIN, 300).unwrap_err(),
            WebhookError::OutsideTolerance { age_secs: T.abs_diff(i64::MIN) }
        );
    }

    #[test]
    fn during_rotation_either_secret_verifies() {
        let header = format!("t={T},v1={},v1={}", signature("whsec_old", T, BODY), signature("whsec_new", T, BODY));
        assert_eq!(verify("whsec_old", &header, BODY, T, 300), Ok(()));
        assert_eq!(verify("whsec_new", &header, BODY, T, 300), Ok(()));
        assert_eq!(verify("whsec_third", &header, BODY, T, 300), Err(WebhookError::Mismatch));
    }

    #[test]
    fn malformed_headers_are_refused_without_panicking() {
        let good = signature(SECRET, T, BODY);
        for header in [
            String::new(),
            "garbage".into(),
            format!("v1={good}"),
            format!("t={T}"),
            format!("t=soon,v1={good}"),
            format!("t={T},v1=zz"),
            format!("t={T},v1={}", &good[..63]),
            format!("t={T},v1={}é", &good[..62]),
        ] {
            assert_eq!(verify(SECRET, &header, BODY, T, 300), Err(WebhookError::Malformed), "{header:?}");
        }
        // Unknown schemes beside a good v1 are ignored.
        assert_eq!(verify(SECRET, &format!("t={T},v0=abc,v1={good}"), BODY, T, 300), Ok(()));
    }
}
