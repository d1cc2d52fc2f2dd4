//! Native ETH transfers: the EIP-1559 transaction, signing, and the receipt that proves who paid.

use alloy::consensus::{SignableTransaction as _, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Encodable2718 as _;
use alloy::network::TxSignerSync as _;
use alloy::primitives::{Address, B256, Bytes, TxKind, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use tollgate_protocol::Network;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};

/// Gas of a plain transfer to an account without code.
pub const TRANSFER_GAS: u64 = 21_000;

/// A native transfer to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Chain id.
    pub chain_id: u64,
    /// Sender's nonce.
    pub nonce: u64,
    /// Recipient.
    pub to: Address,
    /// Wei moved.
    pub value: U256,
    /// Gas limit.
    pub gas_limit: u64,
    /// Max fee per gas, wei.
    pub max_fee_per_gas: u128,
    /// Max priority fee (tip) per gas, wei.
    pub max_priority_fee_per_gas: u128,
}

impl Transfer {
    /// The unsigned EIP-1559 transaction.
    #[must_use]
    pub fn tx(&self) -> TxEip1559 {
        TxEip1559 {
            chain_id: self.chain_id,
            nonce: self.nonce,
            gas_limit: self.gas_limit,
            max_fee_per_gas: self.max_fee_per_gas,
            max_priority_fee_per_gas: self.max_priority_fee_per_gas,
            to: TxKind::Call(self.to),
            value: self.value,
            access_list: Default::default(),
            input: Bytes::new(),
        }
    }

    /// Most wei the sender can spend: value plus gas at the max fee.
    #[must_use]
    pub fn max_cost(&self) -> U256 {
        self.value.saturating_add(U256::from(self.gas_limit).saturating_mul(U256::from(self.max_fee_per_gas)))
    }
}

/// The unsigned transaction as local mode hands it out: its signing payload
/// (`0x02 || rlp([...])`), which is what a wallet signs.
#[must_use]
pub fn unsigned_bytes(tx: &TxEip1559) -> Vec<u8> {
    tx.encoded_for_signing()
}

/// What the sender of a transaction in the chain's bytes signs (its signing hash) and its nonce,
/// for an unsigned EIP-1559 signing payload (what local mode hands out, `0x02 || rlp([...])`) or
/// a signed EIP-2718 envelope (what a local receive hands over).
fn signing_hash_and_nonce(raw: &[u8]) -> Option<(B256, u64)> {
    use alloy::consensus::Transaction as _;
    use alloy::eips::eip2718::Decodable2718 as _;
    if let Ok(envelope) = TxEnvelope::decode_2718_exact(raw) {
        return Some((envelope.signature_hash(), envelope.nonce()));
    }
    let (&kind, mut fields) = raw.split_first()?;
    if kind != 0x02 {
        return None;
    }
    let tx = <TxEip1559 as alloy::rlp::Decodable>::decode(&mut fields).ok().filter(|_| fields.is_empty())?;
    Some((tx.signature_hash(), tx.nonce))
}

/// The signing hash of a transaction in the chain's bytes (see [`signing_hash_and_nonce`]), hex.
#[must_use]
pub fn signed_identity(raw: &[u8]) -> Option<String> {
    signing_hash_and_nonce(raw).map(|(hash, _)| format!("{hash:#x}"))
}

/// The nonce of a transaction in the chain's bytes.
#[must_use]
pub fn nonce(raw: &[u8]) -> Option<u64> {
    signing_hash_and_nonce(raw).map(|(_, nonce)| nonce)
}

/// Signs `tx`, returning the broadcastable EIP-2718 bytes and the transaction hash.
///
/// # Errors
/// When the signer fails (it does not for a local key).
pub fn sign(tx: TxEip1559, signer: &PrivateKeySigner) -> Result<(Vec<u8>, B256), alloy::signers::Error> {
    let mut tx = tx;
    let signature = signer.sign_transaction_sync(&mut tx)?;
    let envelope = TxEnvelope::from(tx.into_signed(signature));
    Ok((envelope.encoded_2718(), *envelope.tx_hash()))
}

/// An `exact-native` receipt for a confirmed transfer, signed (EIP-191) by the key that sent it,
/// as the base64 `X-PAYMENT` value a seller accepts.
///
/// # Errors
/// When signing or JSON serialization fails.
pub fn signed_receipt(
    signer: &PrivateKeySigner,
    network: &Network,
    tx_hash: &str,
    pay_to: &tollgate_protocol::Address,
    resource: Option<&str>,
) -> anyhow::Result<String> {
    let message = receipt_message(network, tx_hash, pay_to, resource);
    let signature = signer.sign_message_sync(message.as_bytes())?;
    let receipt = NativeReceipt {
        transaction: tx_hash.to_owned(),
        from: super::protocol_address(signer.address()),
        signature: format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        resource: resource.map(str::to_owned),
    };
    Ok(PaymentPayload::exact_native_v1(network, &ExactNativePayload::Receipt(receipt)).to_header()?)
}
