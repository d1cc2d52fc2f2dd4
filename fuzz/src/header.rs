//! `X-PAYMENT` / `PAYMENT-SIGNATURE` values and `/verify`–`/settle` bodies.

use serde_json::Value;
use tollgate_protocol::x402::batch::BatchPayload;
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, ExactSolanaPayload, Permit2Payload};
use tollgate_protocol::x402::{FacilitatorRequest, PaymentPayload, header};

use crate::{digits_value, text_at};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "payment headers (v1, v2) and facilitator bodies: a decoded payload encodes back to itself; \
                         each scheme's reading round-trips and keeps the amounts and addresses written";

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(payload) = PaymentPayload::from_header(text) {
        let encoded = payload.to_header().expect("a decoded payload encodes");
        let decoded = PaymentPayload::from_header(&encoded).expect("an encoded payload decodes");
        assert_eq!(decoded, payload, "a header's payload changed through encode and decode");
        assert_eq!(decoded.to_header().expect("it encodes"), encoded, "encoding is not stable");
        schemes(payload.payload());
    }
    // The same bytes as a facilitator request, in a header and as a body.
    if let Ok(request) = header::decode::<FacilitatorRequest>(text) {
        round_trip(&request);
    }
    if let Ok(request) = serde_json::from_slice::<FacilitatorRequest>(data) {
        round_trip(&request);
        let payload = match &request {
            FacilitatorRequest::V1(r) => &r.payment_payload.payload,
            FacilitatorRequest::V2(r) => &r.payment_payload.payload,
        };
        schemes(payload);
    }
}

fn round_trip(request: &FacilitatorRequest) {
    let json = serde_json::to_vec(request).expect("a request serializes");
    let back: FacilitatorRequest = serde_json::from_slice(&json).expect("a serialized request reads back");
    assert_eq!(&back, request, "a facilitator request changed through serialize and read");
}

/// Every scheme reader on the same payload: what one accepts serializes back to a value it
/// accepts again, equal, and carries the payload's own amounts and addresses.
pub fn schemes(payload: &Value) {
    if let Ok(p) = ExactEvmPayload::from_value(payload) {
        let a = &p.authorization;
        assert_eq!(ExactEvmPayload::from_value(&serde_json::to_value(&p).unwrap()).as_ref(), Ok(&p));
        assert_eq!(Some(a.value.get()), text_at(payload, &["authorization", "value"]).and_then(digits_value));
        assert_same_address(&a.to.to_string(), text_at(payload, &["authorization", "to"]));
        assert_same_address(&a.from.to_string(), text_at(payload, &["authorization", "from"]));
    }
    if let Ok(p) = Permit2Payload::from_value(payload) {
        let a = &p.permit2_authorization;
        assert_eq!(Permit2Payload::from_value(&serde_json::to_value(&p).unwrap()).as_ref(), Ok(&p));
        let written = text_at(payload, &["permit2Authorization", "permitted", "amount"]).and_then(digits_value);
        assert_eq!(Some(a.permitted.amount.get()), written);
        assert_same_address(&a.witness.to.to_string(), text_at(payload, &["permit2Authorization", "witness", "to"]));
    }
    if let Ok(p) = ExactSolanaPayload::from_value(payload) {
        assert_eq!(ExactSolanaPayload::from_value(&serde_json::to_value(&p).unwrap()).as_ref(), Ok(&p));
    }
    if let Ok(p) = ExactNativePayload::from_value(payload) {
        assert_eq!(ExactNativePayload::from_value(&p.to_value()).as_ref(), Ok(&p));
    }
    if let Ok(p) = BatchPayload::from_value(payload) {
        crate::batch::holds(payload, &p);
    }
}

/// An address read from `written` is the same account (EVM hex may differ in case only).
fn assert_same_address(read: &str, written: Option<&str>) {
    let written = written.expect("an accepted address was written as text");
    let same = if read.starts_with("0x") { read.eq_ignore_ascii_case(written) } else { read == written };
    assert!(same, "read {read}, written {written}");
}
