//! Checking `exact-native` EVM proofs without the chain: a signed EIP-1559 transfer must be a
//! plain ETH payment to the seller on this chain, signed by its sender.

use alloy::consensus::{Transaction as _, TxEnvelope};
use alloy::eips::eip2718::Decodable2718 as _;
use alloy::primitives::{Address, B256, TxKind, U256};

use crate::chains::{Reason, Refusal};

/// The account whose key made a 65-byte signature over a digest (see the encoding crate).
pub use tollgate_encoding::evm::recover_signer;

/// Longest raw transaction accepted, bytes (a plain transfer is about 110).
pub const MAX_RAW_TX: usize = 4096;

fn refuse(reason: Reason, message: impl Into<String>) -> Refusal {
    Refusal::new(reason, message)
}

/// A signed transfer that passed the checks that need no chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedTransfer {
    /// The signer.
    pub from: Address,
    /// Wei paid.
    pub value: U256,
    /// The sender's nonce it uses.
    pub nonce: u64,
    /// Most wei it can cost its sender (value + gas limit × max fee).
    pub max_cost: U256,
    /// Its hash (the transaction id).
    pub hash: B256,
    /// The broadcastable bytes.
    pub raw: Vec<u8>,
}

/// Decodes a `0x`-hex signed transaction.
///
/// # Errors
/// [`Refusal`] for bad hex, oversize input or bytes that are not one EIP-2718 transaction.
pub fn decode(hex_tx: &str) -> Result<(TxEnvelope, Vec<u8>), Refusal> {
    let bad = |m: &str| refuse(Reason::EvmTransaction, m);
    let text = hex_tx.trim();
    let digits = text.strip_prefix("0x").ok_or_else(|| bad("the transaction must be 0x-hex"))?;
    if digits.len() > 2 * MAX_RAW_TX {
        return Err(bad("the transaction is too large"));
    }
    let raw = alloy::primitives::hex::decode(digits).map_err(|_| bad("the transaction is not hex"))?;
    decode_bytes(&raw)
}

/// Decodes a signed transaction's EIP-2718 bytes.
///
/// # Errors
/// [`Refusal`] for oversize input or bytes that are not one EIP-2718 transaction.
pub fn decode_bytes(raw: &[u8]) -> Result<(TxEnvelope, Vec<u8>), Refusal> {
    if raw.len() > MAX_RAW_TX {
        return Err(refuse(Reason::EvmTransaction, "the transaction is too large"));
    }
    #[cfg(test)]
    crate::chains::decodes::count();
    let envelope = TxEnvelope::decode_2718_exact(raw)
        .map_err(|_| refuse(Reason::EvmTransaction, "not a signed EVM transaction"))?;
    Ok((envelope, raw.to_vec()))
}

/// The sender and nonce of a signed EIP-1559 transaction (`None` for other kinds, or a signature
/// that recovers no sender).
#[must_use]
pub fn sender_and_nonce(envelope: &TxEnvelope) -> Option<(Address, u64)> {
    let TxEnvelope::Eip1559(signed) = envelope else { return None };
    let sender = signed.signature().recover_address_from_prehash(&signed.signature_hash()).ok()?;
    Some((sender, signed.tx().nonce))
}

/// Checks a signed transaction offered as an `exact-native` payment to `pay_to` on `chain_id`;
/// the amount is checked by the caller.
///
/// # Errors
/// [`Refusal`] naming the first rule broken.
pub fn check_signed_transfer(
    envelope: &TxEnvelope,
    raw: Vec<u8>,
    pay_to: &Address,
    chain_id: u64,
    max_gas: u64,
) -> Result<CheckedTransfer, Refusal> {
    let TxEnvelope::Eip1559(signed) = envelope else {
        return Err(refuse(Reason::EvmTransaction, "only EIP-1559 transactions are accepted"));
    };
    let tx = signed.tx();
    let signature = signed.signature();
    // A high-s signature is malleable (EIP-2); the network refuses it, and so do we.
    if signature.normalize_s().is_some() {
        return Err(refuse(Reason::EvmSignature, "the transaction's signature is not in canonical (low-s) form"));
    }
    let from = signature
        .recover_address_from_prehash(&signed.signature_hash())
        .map_err(|_| refuse(Reason::EvmSignature, "the transaction's signature does not recover a sender"))?;
    if tx.chain_id != chain_id {
        return Err(refuse(
            Reason::InvalidNetwork,
            format!("the transaction is signed for chain {}, not {chain_id}", tx.chain_id),
        ));
    }
    match tx.to {
        TxKind::Call(to) if to == *pay_to => {}
        TxKind::Call(to) => {
            return Err(refuse(Reason::NativeRecipientMismatch, format!("the transaction pays {to}, not {pay_to}")));
        }
        TxKind::Create => return Err(refuse(Reason::EvmTransaction, "the transaction creates a contract")),
    }
    if !tx.input.is_empty() || !tx.access_list.is_empty() {
        return Err(refuse(Reason::EvmTransaction, "a payment transaction carries no call data or access list"));
    }
    if tx.gas_limit > max_gas {
        return Err(refuse(
            Reason::EvmTransaction,
            format!("gas limit {} is above the {max_gas} accepted", tx.gas_limit),
        ));
    }
    if tx.max_priority_fee_per_gas > tx.max_fee_per_gas {
        return Err(refuse(Reason::EvmTransaction, "the priority fee is above the max fee"));
    }
    let max_cost = tx.value.saturating_add(U256::from(tx.gas_limit).saturating_mul(U256::from(tx.max_fee_per_gas)));
    Ok(CheckedTransfer { from, value: tx.value(), nonce: tx.nonce, max_cost, hash: *signed.hash(), raw })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chains::evm::build::{Transfer, sign};
    use alloy::signers::local::PrivateKeySigner;

    fn transfer(to: Address) -> Transfer {
        Transfer {
            chain_id: 31337,
            nonce: 0,
            to,
            value: U256::from(10u64.pow(16)),
            gas_limit: 21_000,
            max_fee_per_gas: 2_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
        }
    }

    fn hex(bytes: &[u8]) -> String {
        format!("0x{}", alloy::primitives::hex::encode(bytes))
    }

    #[test]
    fn a_plain_transfer_passes_and_tampering_is_caught() {
        let signer = PrivateKeySigner::random();
        let seller = Address::repeat_byte(7);
        let (raw, hash) = sign(transfer(seller).tx(), &signer).unwrap();
        let (envelope, raw) = decode(&hex(&raw)).unwrap();
        let ok = check_signed_transfer(&envelope, raw.clone(), &seller, 31337, 100_000).unwrap();
        assert_eq!((ok.from, ok.hash, ok.nonce), (signer.address(), hash, 0));
        assert_eq!(ok.max_cost, U256::from(10u64.pow(16) + 21_000 * 2_000_000_000));

        let refused = |to: &Address, chain: u64, gas: u64| {
            check_signed_transfer(&envelope, raw.clone(), to, chain, gas).unwrap_err().reason
        };
        assert_eq!(refused(&Address::repeat_byte(8), 31337, 100_000), Reason::NativeRecipientMismatch);
        assert_eq!(refused(&seller, 1, 100_000), Reason::InvalidNetwork);
        assert_eq!(refused(&seller, 31337, 20_000), Reason::EvmTransaction);

        let mut with_data = transfer(seller).tx();
        with_data.input = vec![1, 2, 3].into();
        let (raw, _) = sign(with_data, &signer).unwrap();
        let (envelope, raw) = decode(&hex(&raw)).unwrap();
        assert_eq!(
            check_signed_transfer(&envelope, raw, &seller, 31337, 100_000).unwrap_err().reason,
            Reason::EvmTransaction
        );

        // A changed byte either breaks decoding or recovers another sender.
        let (mut raw, _) = sign(transfer(seller).tx(), &signer).unwrap();
        let last = raw.len() - 40;
        raw[last] ^= 1;
        if let Ok((envelope, raw)) = decode(&hex(&raw)) {
            let from = check_signed_transfer(&envelope, raw, &seller, 31337, 100_000).map(|c| c.from);
            assert_ne!(from.ok(), Some(signer.address()));
        }
    }

    #[test]
    fn signer_recovery_agrees_with_alloy_and_refuses_malleable_signatures() {
        use alloy::signers::SignerSync as _;
        for i in 0u8..20 {
            let signer = PrivateKeySigner::random();
            let digest = alloy::primitives::keccak256([i]);
            let signature = signer.sign_hash_sync(&digest).unwrap();
            let bytes = signature.as_bytes();
            assert_eq!(recover_signer(&digest, &bytes), Some(signer.address()));
            assert_eq!(signature.recover_address_from_prehash(&digest).ok(), Some(signer.address()));
            // Another digest recovers someone else (or nobody).
            let other = alloy::primitives::keccak256([i, 1]);
            assert_ne!(recover_signer(&other, &bytes), Some(signer.address()));
            // The same signature with s' = n - s and v flipped recovers the same key: refused.
            let n =
                U256::from_str_radix("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141", 16).unwrap();
            let high = alloy::primitives::Signature::new(signature.r(), n - signature.s(), !signature.v());
            assert_eq!(high.recover_address_from_prehash(&digest).ok(), Some(signer.address()));
            assert_eq!(recover_signer(&digest, &high.as_bytes()), None);
            // The same signature with v as 0 or 1 (or in 64 bytes): recoverable off chain, but
            // ecrecover and the contracts refuse it, so it is refused here too.
            let mut raw = bytes.to_vec();
            raw[64] -= 27;
            assert_eq!(signature.recover_address_from_prehash(&digest).ok(), Some(signer.address()));
            assert_eq!(recover_signer(&digest, &raw), None);
            assert_eq!(recover_signer(&digest, &bytes[..64]), None);
        }
        assert_eq!(recover_signer(&B256::ZERO, &[0u8; 65]), None);
        assert_eq!(recover_signer(&B256::ZERO, &[1u8; 10]), None);
    }

    #[test]
    fn decoding_is_strict() {
        assert!(decode("abcd").is_err(), "no 0x");
        assert!(decode("0xzz").is_err());
        assert!(decode("0x02").is_err());
        let too_large = |text: &str| decode(text).unwrap_err().message.contains("too large");
        assert!(too_large(&format!("0x{}", "00".repeat(MAX_RAW_TX + 1))));
        // The longest accepted is read (and refused for what it is, not for its size).
        assert!(!too_large(&format!("0x{}", "00".repeat(MAX_RAW_TX))));
        assert!(!decode_bytes(&[0; MAX_RAW_TX]).unwrap_err().message.contains("too large"));
        assert!(decode_bytes(&[0; MAX_RAW_TX + 1]).unwrap_err().message.contains("too large"));
    }

    #[test]
    fn a_transfers_sender_and_nonce_are_its_signers() {
        let signer = PrivateKeySigner::random();
        let (raw, _) = sign(Transfer { nonce: 41, ..transfer(Address::repeat_byte(7)) }.tx(), &signer).unwrap();
        let (envelope, _) = decode_bytes(&raw).unwrap();
        assert_eq!(sender_and_nonce(&envelope), Some((signer.address(), 41)));
    }

    /// What a plain payment does not carry, and the limits it keeps to (each at its edge).
    #[test]
    fn a_payment_carries_nothing_but_value_within_its_limits() {
        let signer = PrivateKeySigner::random();
        let seller = Address::repeat_byte(7);
        let check = |tx: alloy::consensus::TxEip1559, max_gas: u64| {
            let (raw, _) = sign(tx, &signer).unwrap();
            let (envelope, raw) = decode_bytes(&raw).unwrap();
            check_signed_transfer(&envelope, raw, &seller, 31337, max_gas)
        };
        assert!(check(transfer(seller).tx(), 21_000).is_ok(), "a gas limit at the most accepted");
        assert_eq!(check(transfer(seller).tx(), 20_999).unwrap_err().reason, Reason::EvmTransaction);
        let mut listed = transfer(seller).tx();
        listed.access_list = alloy::eips::eip2930::AccessList(vec![alloy::eips::eip2930::AccessListItem {
            address: seller,
            storage_keys: vec![B256::ZERO],
        }]);
        assert!(check(listed, 100_000).unwrap_err().message.contains("access list"));
        let even = Transfer { max_priority_fee_per_gas: 2_000_000_000, ..transfer(seller) };
        assert!(check(even.tx(), 100_000).is_ok(), "a tip equal to the max fee");
        let over = Transfer { max_priority_fee_per_gas: 2_000_000_001, ..transfer(seller) };
        assert!(check(over.tx(), 100_000).unwrap_err().message.contains("priority fee"));
        let mut create = transfer(seller).tx();
        create.to = TxKind::Create;
        assert!(check(create, 100_000).unwrap_err().message.contains("creates a contract"));
    }
}
