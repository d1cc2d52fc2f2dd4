//! What the layer can refuse without asking the facilitator: a proof whose payload does not fit
//! its scheme, an EIP-3009 authorization to someone else, for another amount, expired or not yet
//! valid, a receipt made for another resource. Every such proof would be refused by the
//! facilitator too; refusing it here means a stranger's junk costs the seller no facilitator
//! call (and nothing against its API key's rate limit).
//!
//! Signatures and balances are the facilitator's to check: they need the chain, or keys and
//! curves this crate does not carry.

use tollgate_protocol::ChainFamily;
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, ExactSolanaPayload};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE};

/// Authorizations that expire sooner than this are refused: settling takes a few seconds.
const EXPIRY_MARGIN_SECS: u64 = 6;

/// Why `payload` cannot pay `requirement` for `resource` at `now_secs` (Unix seconds), or `None`
/// when only the facilitator can tell.
pub(crate) fn refusal(
    payload: &PaymentPayload,
    requirement: &PaymentRequirements,
    resource: &str,
    now_secs: u64,
) -> Option<String> {
    let inner = payload.payload();
    match (payload.scheme(), requirement.network.family()) {
        (SCHEME_EXACT, ChainFamily::Evm) => {
            let p = match ExactEvmPayload::from_value(inner) {
                Ok(p) => p,
                Err(e) => return Some(format!("invalid_payload: {e}")),
            };
            let a = &p.authorization;
            if a.to != requirement.pay_to {
                return Some(format!(
                    "invalid_exact_evm_payload_recipient_mismatch: the authorization pays {}, not {}",
                    a.to, requirement.pay_to
                ));
            }
            if a.value != requirement.amount {
                return Some(format!(
                    "invalid_exact_evm_payload_authorization_value: the authorization is for {}, the price is {}",
                    a.value, requirement.amount
                ));
            }
            if a.valid_before.get() <= u128::from(now_secs + EXPIRY_MARGIN_SECS) {
                return Some(
                    "invalid_exact_evm_payload_authorization_valid_before: the authorization has expired".into(),
                );
            }
            if a.valid_after.get() > u128::from(now_secs) {
                return Some(
                    "invalid_exact_evm_payload_authorization_valid_after: the authorization is not valid yet".into(),
                );
            }
            None
        }
        (SCHEME_EXACT, ChainFamily::Solana) => {
            ExactSolanaPayload::from_value(inner).err().map(|e| format!("invalid_payload: {e}"))
        }
        (SCHEME_EXACT_NATIVE, _) => match ExactNativePayload::from_value(inner) {
            Err(e) => Some(format!("invalid_payload: {e}")),
            Ok(ExactNativePayload::Receipt(r)) if r.resource.as_deref().is_some_and(|r| r != resource) => {
                Some("invalid_exact_native_payload_receipt: the receipt was made for another resource".into())
            }
            Ok(_) => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_protocol::x402::PaymentPayload;

    use super::*;

    const PAY_TO: &str = "0x1111111111111111111111111111111111111111";

    fn requirement() -> PaymentRequirements {
        serde_json::from_value(json!({
            "scheme": "exact", "network": "eip155:31337", "amount": "1000",
            "asset": "0x2222222222222222222222222222222222222222", "payTo": PAY_TO, "maxTimeoutSeconds": 60
        }))
        .unwrap()
    }

    fn authorization(to: &str, value: &str, after: u64, before: u64) -> PaymentPayload {
        serde_json::from_value(json!({
            "x402Version": 1, "scheme": "exact", "network": "eip155:31337",
            "payload": {"signature": format!("0x{}", "11".repeat(65)), "authorization": {
                "from": "0x3333333333333333333333333333333333333333", "to": to, "value": value,
                "validAfter": after.to_string(), "validBefore": before.to_string(),
                "nonce": format!("0x{}", "00".repeat(32))}}
        }))
        .unwrap()
    }

    #[test]
    fn evm_authorizations_are_checked_against_the_offer_and_the_clock() {
        let r = requirement();
        let now = 1_000_000;
        assert_eq!(refusal(&authorization(PAY_TO, "1000", 0, now + 60), &r, "", now), None);
        let cases = [
            (authorization("0x4444444444444444444444444444444444444444", "1000", 0, now + 60), "recipient_mismatch"),
            (authorization(PAY_TO, "999", 0, now + 60), "authorization_value"),
            (authorization(PAY_TO, "1001", 0, now + 60), "authorization_value"),
            (authorization(PAY_TO, "1000", 0, now + 2), "valid_before"),
            (authorization(PAY_TO, "1000", now + 30, now + 60), "valid_after"),
        ];
        for (payload, why) in cases {
            let refused = refusal(&payload, &r, "", now).unwrap_or_default();
            assert!(refused.contains(why), "{why}: {refused}");
        }
        let junk: PaymentPayload = serde_json::from_value(
            json!({"x402Version": 1, "scheme": "exact", "network": "eip155:31337", "payload": {"junk": 1}}),
        )
        .unwrap();
        assert!(refusal(&junk, &r, "", now).unwrap().starts_with("invalid_payload"));
    }

    #[test]
    fn a_receipt_for_another_resource_is_refused() {
        let mut r = requirement();
        r.scheme = SCHEME_EXACT_NATIVE.into();
        let receipt = |resource: &str| -> PaymentPayload {
            serde_json::from_value(json!({
                "x402Version": 1, "scheme": "exact-native", "network": "eip155:31337",
                "payload": {"receipt": {"transaction": "0xab", "from": PAY_TO, "signature": "0xcd", "resource": resource}}
            }))
            .unwrap()
        };
        assert_eq!(refusal(&receipt("https://shop/a?x=1"), &r, "https://shop/a?x=1", 0), None);
        assert!(refusal(&receipt("https://shop/a?x=1"), &r, "https://shop/a?x=9", 0).is_some());
    }
}
