//! A signed EIP-2718 transaction offered as an `exact-native` payment on an EVM chain, through
//! the facilitator's checks that need no chain (`verify::check_signed_transfer`).

use alloy::consensus::TxEnvelope;
use alloy::eips::eip2718::Encodable2718 as _;
use alloy::primitives::{Address, U256, keccak256};
use tollgate_facilitator::chains::evm::verify;

/// What this target feeds and what it asserts.
pub const ABOUT: &str = "signed EVM transactions as exact-native payments: what passes pays the seller on its chain \
                         exactly the value its bytes say, from the key that signed, with no call data; its \
                         hash is its bytes'";

/// The seller.
pub const PAY_TO: Address = Address::repeat_byte(0x5e);
/// The chain paid on (Base Sepolia).
pub const CHAIN_ID: u64 = 84_532;
/// The most gas a payment may ask for.
pub const MAX_GAS: u64 = 100_000;

/// Runs one input; panics when a property breaks.
pub fn check(data: &[u8]) {
    let Ok((envelope, raw)) = verify::decode_bytes(data) else { return };
    // What decodes is exactly those bytes: encoding it again gives them back.
    assert_eq!(envelope.encoded_2718(), data, "a decoded transaction encodes to other bytes");
    let Ok(checked) = verify::check_signed_transfer(&envelope, raw, &PAY_TO, CHAIN_ID, MAX_GAS) else { return };
    let TxEnvelope::Eip1559(signed) = &envelope else { panic!("a transaction other than EIP-1559 passed") };
    let tx = signed.tx();
    assert_eq!(tx.to.to(), Some(&PAY_TO), "a payment to someone else passed");
    assert_eq!(tx.chain_id, CHAIN_ID, "a payment on another chain passed");
    assert!(tx.input.is_empty() && tx.access_list.is_empty(), "a payment with call data passed");
    assert!(tx.gas_limit <= MAX_GAS);
    assert_eq!(checked.value, tx.value, "the value checked is not the transaction's");
    assert_eq!(checked.hash, keccak256(data), "the hash is not the bytes'");
    assert_eq!(checked.raw, data, "the bytes to broadcast are not the ones offered");
    let signer = signed.signature().recover_address_from_prehash(&signed.signature_hash()).expect("it has a signer");
    assert_eq!(checked.from, signer, "the payer is not the signer");
    let most = tx.value.saturating_add(U256::from(tx.gas_limit).saturating_mul(U256::from(tx.max_fee_per_gas)));
    assert_eq!(checked.max_cost, most);
    assert!(checked.max_cost >= checked.value);
}
