//! The payment a paid MCP tool call carries in `_meta["x402/payment"]`, as the paid server hands
//! it to the layer (`tollgate_mcp::seller::payment_header`).

use serde_json::Value;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::header::{HeaderError, MAX_HEADER_BYTES};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "MCP _meta payments: the header made of one is a valid HTTP header value, carries the same \
                         payload (in the header of its version), and what is no payload stays refused";

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(payment) = serde_json::from_slice::<Value>(data) else { return };
    let (name, value) = tollgate_mcp::seller::payment_header(&payment);
    assert!(http::HeaderValue::from_str(&value).is_ok(), "{name}: {value:?} is no header value");
    match serde_json::from_value::<PaymentPayload>(payment.clone()) {
        Ok(payload) => {
            let expected = if payload.version() == 1 { "X-PAYMENT" } else { "PAYMENT-SIGNATURE" };
            assert!(name.eq_ignore_ascii_case(expected), "a v{} payload in {name}", payload.version());
            if value.len() > MAX_HEADER_BYTES {
                // Too long for a header: the layer refuses it as it refuses such a header from HTTP.
                let read = PaymentPayload::from_header(&value);
                assert!(
                    matches!(read, Err(HeaderError::TooLarge { .. })),
                    "a header over the limit was read: {read:?}"
                );
                return;
            }
            assert_eq!(
                PaymentPayload::from_header(&value).as_ref(),
                Ok(&payload),
                "the header carries another payload"
            );
        }
        Err(_) => {
            assert!(PaymentPayload::from_header(&value).is_err(), "a payment refused as JSON was read from its header");
        }
    }
}
