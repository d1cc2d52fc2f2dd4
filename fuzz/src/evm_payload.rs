//! EVM payment payloads as the facilitator reads them (`chains::evm::decode`): EIP-3009
//! authorizations (`exact`), Permit2 witness transfers (`exact` with Permit2, `upto`) with their
//! EIP-2612 and ERC-20 approval extensions, and `exact-native` transfers and receipts.

use alloy::primitives::{U256, keccak256};
use serde_json::Value;
use tollgate_protocol::Network;
use tollgate_protocol::x402::schemes::{ExactEvmPayload, ExactNativePayload, Permit2Payload};
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO};

use crate::text_at;

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "EVM payloads through the facilitator's decode: a proof is claimed under the payer, token \
                         and nonce its bytes name, in one canonical spelling; an unreadable one under none";

/// The token the terms name (the identity's token is the terms', never the payload's).
pub const TOKEN: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// A JSON payment payload (either version), or a v2 envelope around a JSON `payload` value.
/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    let payload = match serde_json::from_value::<PaymentPayload>(value.clone()) {
        Ok(payload) => payload,
        Err(_) => return,
    };
    let asset = Asset::Token(TOKEN.parse().expect("the token is an address"));
    let proof = tollgate_facilitator::chains::evm::decode(&payload, &asset);
    let again = tollgate_facilitator::chains::evm::decode(&payload, &asset);
    assert_eq!(proof.id(), again.id(), "one payload, two identities");
    assert_eq!(proof.id().map(str::to_owned), expected_id(&payload), "the identity is not the payload's");
}

/// The identity a payload must be claimed under, read here from its JSON.
fn expected_id(payload: &PaymentPayload) -> Option<String> {
    let network = payload.network();
    let body = payload.payload();
    match payload.scheme() {
        SCHEME_EXACT if Permit2Payload::is_permit2(body) => permit2_id(network, payload),
        SCHEME_UPTO => permit2_id(network, payload),
        SCHEME_EXACT => {
            ExactEvmPayload::from_value(body).ok()?;
            let from = text_at(body, &["authorization", "from"])?.to_ascii_lowercase();
            let nonce = text_at(body, &["authorization", "nonce"])?.to_ascii_lowercase();
            Some(format!("{network}:{}:{from}:{nonce}", TOKEN.to_ascii_lowercase()))
        }
        SCHEME_EXACT_NATIVE => native_id(network, body),
        _ => None,
    }
}

fn permit2_id(network: &Network, payload: &PaymentPayload) -> Option<String> {
    let body = payload.payload();
    let p = Permit2Payload::from_value(body).ok()?;
    let upto = payload.scheme() == SCHEME_UPTO;
    // `upto` names the facilitator that settles; `exact` names none.
    if upto != p.permit2_authorization.witness.facilitator.is_some() {
        return None;
    }
    // An extension offered but malformed refuses the whole payload.
    if let PaymentPayload::V2(v2) = payload {
        use tollgate_protocol::x402::schemes::{Eip2612Sponsoring, Erc20ApprovalSponsoring};
        let permit = Eip2612Sponsoring::from_extensions(&v2.extensions).ok()?;
        if permit.is_none() {
            let approval = Erc20ApprovalSponsoring::from_extensions(&v2.extensions).ok()?;
            if let Some(approval) = approval {
                let raw = decode_hex(&approval.signed_transaction)?;
                let (envelope, _) = tollgate_facilitator::chains::evm::verify::decode_bytes(&raw).ok()?;
                tollgate_facilitator::chains::evm::verify::sender_and_nonce(&envelope)?;
            }
        }
    }
    let from = text_at(body, &["permit2Authorization", "from"])?.to_ascii_lowercase();
    let nonce_text = text_at(body, &["permit2Authorization", "nonce"])?;
    let nonce = match nonce_text.strip_prefix("0x") {
        Some(hex) => U256::from_str_radix(hex, 16).ok()?,
        None => U256::from_str_radix(nonce_text, 10).ok()?,
    };
    Some(format!("{network}:permit2:{from}:{nonce:#x}"))
}

fn native_id(network: &Network, body: &Value) -> Option<String> {
    match ExactNativePayload::from_value(body).ok()? {
        ExactNativePayload::Transaction(hex) => {
            let raw = decode_hex(hex.trim())?;
            tollgate_facilitator::chains::evm::verify::decode_bytes(&raw).ok()?;
            // A transaction's id is the hash of its bytes.
            Some(format!("{network}:{:#x}", keccak256(&raw)))
        }
        ExactNativePayload::Receipt(r) => {
            let hex = r.transaction.strip_prefix("0x")?;
            (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| format!("{network}:0x{}", hex.to_ascii_lowercase()))
        }
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    alloy::primitives::hex::decode(text.strip_prefix("0x")?).ok()
}
