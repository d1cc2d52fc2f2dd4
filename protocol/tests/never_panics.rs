//! "Never panics" suite over every decoder of untrusted payment input, run in CI (the AFL++
//! targets in `fuzz/` explore the same decoders more deeply, coverage-guided: `scripts/fuzz`).
//!
//! Random text alone rarely gets past base64, so the strategies also build well-formed base64
//! around JSON that is almost, but not quite, a payment payload.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use serde_json::{Value, json};
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, ExactSolanaPayload};
use tollgate_protocol::x402::{FacilitatorRequest, PaymentPayload, header};

fn exercise(text: &str) {
    if let Ok(payload) = PaymentPayload::from_header(text) {
        let _ = ExactEvmPayload::from_value(payload.payload());
        let _ = ExactSolanaPayload::from_value(payload.payload());
        let _ = ExactNativePayload::from_value(payload.payload());
    }
    let _ = header::decode::<FacilitatorRequest>(text);
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[0-9]{0,50}".prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::from),
        Just(json!("solana-devnet")),
        Just(json!("eip155:8453")),
        Just(json!("exact-native")),
        Just(json!("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed")),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("x402Version".to_owned()),
                    Just("scheme".to_owned()),
                    Just("network".to_owned()),
                    Just("payload".to_owned()),
                    Just("accepted".to_owned()),
                    Just("transaction".to_owned()),
                    Just("receipt".to_owned()),
                    Just("authorization".to_owned()),
                    "[a-zA-Z]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_text(text in "\\PC{0,300}") {
        exercise(&text);
    }

    #[test]
    fn base64_of_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        exercise(&STANDARD.encode(bytes));
    }

    #[test]
    fn base64_of_near_payloads(mut value in json_value(), version in 0u64..4) {
        if let Value::Object(map) = &mut value {
            map.insert("x402Version".into(), json!(version));
        }
        exercise(&STANDARD.encode(serde_json::to_vec(&value).unwrap()));
    }
}
