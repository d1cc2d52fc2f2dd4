//! What the layer can refuse without asking the facilitator: a proof whose payload does not fit
//! its scheme, an EIP-3009 authorization or a Permit2 permit to someone else, of another token,
//! for another amount, expired or not yet valid, a receipt made for another resource. Every such proof would be refused by the
//! facilitator too; refusing it here means a stranger's junk costs the seller no facilitator
//! call (and nothing against its API key's rate limit).
//!
//! Signatures and balances are the facilitator's to check: they need the chain, or keys and
//! curves this crate does not carry.

use tollgate_protocol::ChainFamily;
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, ExactSolanaPayload, Permit2Payload};
use tollgate_protocol::x402::{
    Asset, PaymentPayload, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO,
};

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
        (SCHEME_EXACT | SCHEME_UPTO, ChainFamily::Evm) if Permit2Payload::is_permit2(inner) => {
            permit2_refusal(inner, requirement, now_secs)
        }
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

/// Why a Permit2 payload (`exact` through Permit2, `upto`) cannot pay `requirement` at
/// `now_secs`: its shape, recipient, token, amount (for `upto`, the most the layer verifies),
/// or window.
fn permit2_refusal(inner: &serde_json::Value, requirement: &PaymentRequirements, now_secs: u64) -> Option<String> {
    let p = match Permit2Payload::from_value(inner) {
        Ok(p) => p,
        Err(e) => return Some(format!("invalid_payload: {e}")),
    };
    let a = &p.permit2_authorization;
    if a.witness.to != requirement.pay_to {
        return Some(format!(
            "invalid_permit2_recipient_mismatch: the permit pays {}, not {}",
            a.witness.to, requirement.pay_to
        ));
    }
    if Asset::Token(a.permitted.token) != requirement.asset {
        return Some(format!("permit2_token_mismatch: the permit moves {}", a.permitted.token));
    }
    if a.permitted.amount != requirement.amount {
        return Some(format!(
            "permit2_amount_mismatch: the permit is for {}, the price is {}",
            a.permitted.amount, requirement.amount
        ));
    }
    if a.deadline.get() <= u128::from(now_secs + EXPIRY_MARGIN_SECS) {
        return Some("permit2_deadline_expired: the permit has expired".into());
    }
    if a.witness.valid_after.get() > u128::from(now_secs) {
        return Some("permit2_not_yet_valid: the permit is not valid yet".into());
    }
    // `upto`: the account the seller's facilitator settles from is the one the permit allows.
    let settler = requirement.extra.as_ref().and_then(|e| e.get("facilitatorAddress")).and_then(|f| f.as_str());
    if requirement.scheme == SCHEME_UPTO
        && let Some(settler) = settler
        && a.witness.facilitator.as_ref().is_none_or(|f| !f.to_string().eq_ignore_ascii_case(settler))
    {
        return Some(format!("upto_facilitator_mismatch: the permit lets another account than {settler} settle"));
    }
    None
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

    fn permit(scheme: &str, (to, token, amount): (&str, &str, &str), (after, deadline): (u64, u64)) -> PaymentPayload {
        serde_json::from_value(json!({
            "x402Version": 1, "scheme": scheme, "network": "eip155:31337",
            "payload": {"signature": format!("0x{}", "11".repeat(65)), "permit2Authorization": {
                "from": "0x3333333333333333333333333333333333333333",
                "permitted": {"token": token, "amount": amount},
                "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001", "nonce": "7",
                "deadline": deadline.to_string(), "witness": {"to": to, "validAfter": after.to_string()}}}
        }))
        .unwrap()
    }

    #[test]
    fn permit2_permits_are_checked_against_the_offer_and_the_clock() {
        let (r, now) = (requirement(), 1_000_000);
        let token = "0x2222222222222222222222222222222222222222";
        let other = "0x4444444444444444444444444444444444444444";
        for scheme in ["exact", "upto"] {
            assert_eq!(refusal(&permit(scheme, (PAY_TO, token, "1000"), (0, now + 60)), &r, "", now), None);
            for (payload, why) in [
                (permit(scheme, (other, token, "1000"), (0, now + 60)), "invalid_permit2_recipient_mismatch"),
                (permit(scheme, (PAY_TO, other, "1000"), (0, now + 60)), "permit2_token_mismatch"),
                (permit(scheme, (PAY_TO, token, "999"), (0, now + 60)), "permit2_amount_mismatch"),
                (permit(scheme, (PAY_TO, token, "1000"), (0, now + 2)), "permit2_deadline_expired"),
                (permit(scheme, (PAY_TO, token, "1000"), (now + 30, now + 60)), "permit2_not_yet_valid"),
            ] {
                let refused = refusal(&payload, &r, "", now).unwrap_or_default();
                assert!(refused.starts_with(why), "{scheme} {why}: {refused}");
            }
        }
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
