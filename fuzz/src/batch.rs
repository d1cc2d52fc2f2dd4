//! `batch-settlement` payloads (deposits, vouchers, refunds, claims, sweeps) and the binding of
//! a buyer's channel to a seller's terms (`encoding::batch::Terms::bind`).

use alloy::primitives::{Address, B256};
use serde_json::Value;
use tollgate_encoding::batch::{Terms, Unbound};
use tollgate_protocol::x402::batch::BatchPayload;

use crate::{digits_value, text_at};

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "batch-settlement payloads: a read payload serializes back to itself; a voucher binds only \
                         to the channel whose configuration hashes to its id, with the seller's token, receiver, \
                         authorizer and delay, and claims the amount its bytes say";

/// The seller's terms vouchers are checked against.
#[must_use]
pub fn terms() -> Terms {
    Terms {
        chain_id: 84_532,
        token: Address::repeat_byte(0x0c),
        receiver: Address::repeat_byte(0x5e),
        receiver_authorizer: Address::repeat_byte(0xa0),
        withdraw_delay: 86_400,
    }
}

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
    if let Ok(payload) = BatchPayload::from_value(&value) {
        holds(&value, &payload);
    }
}

/// What a payload read from `value` must be.
pub fn holds(value: &Value, payload: &BatchPayload) {
    assert_eq!(value.get("type").and_then(Value::as_str), Some(payload.kind()));
    let json = match payload {
        BatchPayload::Deposit(p) => serde_json::to_value(p),
        BatchPayload::Voucher(p) => serde_json::to_value(p),
        BatchPayload::Refund(p) => serde_json::to_value(p),
        BatchPayload::Claim(p) => serde_json::to_value(p),
        BatchPayload::Settle(p) => serde_json::to_value(p),
    }
    .expect("a payload serializes");
    assert_eq!(BatchPayload::from_value(&json).as_ref(), Ok(payload), "a payload changed through serialize and read");
    let Some((config, voucher)) = payload.channel() else { return };
    let written = text_at(value, &["voucher", "maxClaimableAmount"]).and_then(digits_value);
    assert_eq!(Some(voucher.max_claimable_amount.get()), written, "the voucher's amount is not its bytes'");
    let terms = terms();
    match terms.bind(config, &voucher.channel_id) {
        Ok((wire, id)) => {
            let named: B256 = voucher.channel_id.parse().expect("a bound channel id reads");
            assert_eq!(id, named, "bound to a channel other than the one the voucher names");
            assert_eq!(wire.id(terms.chain_id), id, "the channel id is not its configuration's hash");
            assert_eq!(
                (wire.token, wire.receiver, wire.receiverAuthorizer, config.withdraw_delay),
                (terms.token, terms.receiver, terms.receiver_authorizer, terms.withdraw_delay),
                "a channel of other terms was bound"
            );
            assert_ne!(wire.payer, Address::ZERO);
        }
        Err(Unbound::ChannelId) => {
            let wire = tollgate_encoding::batch::wire_config(config).expect("the id was compared, so it read");
            let named: B256 = voucher.channel_id.parse().expect("the id was compared, so it read");
            assert_ne!(wire.id(terms.chain_id), named, "a matching channel id was refused");
        }
        Err(_) => {}
    }
}
