//! Feeds arbitrary bytes to every decoder of untrusted payment input: the header codec, the
//! version dispatch, each scheme's payload reader, and the decimal amount parser.
//!
//! Run with `cargo +nightly fuzz run payment_header` from this folder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, ExactSolanaPayload};
use tollgate_protocol::x402::{FacilitatorRequest, PaymentPayload, header};
use tollgate_protocol::{Address, DecimalAmount};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(payload) = PaymentPayload::from_header(text) {
        let _ = ExactEvmPayload::from_value(payload.payload());
        let _ = ExactSolanaPayload::from_value(payload.payload());
        let _ = ExactNativePayload::from_value(payload.payload());
        let _ = payload.to_header();
    }
    let _ = header::decode::<FacilitatorRequest>(text);
    let _ = serde_json::from_str::<FacilitatorRequest>(text);
    let _ = DecimalAmount::parse(text).map(|d| d.to_atomic(18));
    let _ = text.parse::<Address>();
});
