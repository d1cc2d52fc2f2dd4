//! `exact-native` on EVM chains: ETH paid by a signed EIP-1559 transfer (checked, then
//! broadcast), or by a receipt of a mined one (the sender's EIP-191 signature over the payment's
//! terms, and the transfer on chain, sent by that sender, buried deep enough).

use alloy::consensus::TxEnvelope;
use alloy::primitives::{Address, B256, Signature};
use tollgate_protocol::x402::schemes::{ExactNativePayload, NativeReceipt, receipt_message};
use tollgate_protocol::x402::{Asset, PaymentPayload};
use tollgate_protocol::{ChainFamily, Network};

use super::{EvmBackend, address, protocol_address, refuse, verify};
use crate::chains::{Checked, Outgoing, ProofError, Reason, Refusal, Settle, Settler, Terms};

/// Proof identity of an EVM payment: network and transaction hash (lowercase hex).
fn proof_id(network: &Network, hash: &B256) -> String {
    format!("{network}:{hash:#x}")
}

/// An `exact-native` payload, read.
pub(super) enum Native {
    /// A signed transfer, decoded, with its bytes.
    Transfer(Box<TxEnvelope>, Vec<u8>),
    /// A receipt of a mined transfer.
    Receipt(NativeReceipt),
}

impl Native {
    /// The identity it is claimed under on `network`: the transfer's hash, or the one the
    /// receipt names (`None` when that is no hash).
    pub(super) fn identity(&self, network: &Network) -> Option<String> {
        let hash = match self {
            Self::Transfer(envelope, _) => *envelope.tx_hash(),
            Self::Receipt(r) => r.transaction.parse().ok()?,
        };
        Some(proof_id(network, &hash))
    }
}

/// Reads an `exact-native` payload (the one decode of its transaction).
pub(super) fn read(payload: &PaymentPayload) -> Result<Native, Refusal> {
    let native = ExactNativePayload::from_value(payload.payload())
        .map_err(|e| Refusal::new(Reason::InvalidPayload, e.to_string()))?;
    Ok(match native {
        ExactNativePayload::Transaction(hex) => {
            let (envelope, raw) = verify::decode(&hex)?;
            Native::Transfer(Box::new(envelope), raw)
        }
        ExactNativePayload::Receipt(r) => Native::Receipt(r),
    })
}

/// Checks an `exact-native` payload paying `pay_to`.
pub(super) async fn check(
    backend: &EvmBackend,
    native: &Result<Native, Refusal>,
    terms: &Terms,
    pay_to: &Address,
    settler: Settler,
) -> Result<Checked, ProofError> {
    if terms.asset != Asset::Native {
        return Err(refuse(Reason::InvalidPaymentRequirements, "exact-native pays ETH, but a token is asked"));
    }
    match native.as_ref().map_err(|r| ProofError::Refused(r.clone()))? {
        Native::Transfer(envelope, raw) => signed_transfer(backend, (envelope, raw), pay_to, terms, settler).await,
        Native::Receipt(_) if matches!(settler, Settler::Seller(_)) => Err(refuse(
            Reason::InvalidPayload,
            "a receipt is for a transfer already on chain: present it to /payment/receive",
        )),
        Native::Receipt(r) => receipt(backend, r, pay_to, terms).await,
    }
}

/// A signed transfer: checked without the chain, then its nonce and the sender's balance.
async fn signed_transfer(
    backend: &EvmBackend,
    (envelope, raw): (&TxEnvelope, &[u8]),
    pay_to: &Address,
    terms: &Terms,
    settler: Settler,
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let t = verify::check_signed_transfer(envelope, raw.to_vec(), pay_to, rpc.chain_id(), backend.max_gas)?;
    let decimals = ChainFamily::Evm.native_decimals();
    terms.price.check(u128::try_from(t.value).unwrap_or(u128::MAX), decimals, Reason::EvmValue)?;
    // Three independent reads, asked at once.
    let (mined_nonce, next_nonce, balance) =
        tokio::try_join!(rpc.mined_nonce(t.from), rpc.pending_nonce(t.from), rpc.balance(t.from))?;
    if t.nonce < mined_nonce {
        return Err(refuse(
            Reason::PaymentExpired,
            format!("nonce {} of {} is used already (next is {mined_nonce}); sign a fresh transfer", t.nonce, t.from),
        ));
    }
    // A nonce above the sender's next one would wait in the node's queue until the gap is
    // filled — perhaps forever — with the proof claimed meanwhile.
    if t.nonce > next_nonce {
        return Err(refuse(
            Reason::EvmTransaction,
            format!("nonce {} of {} is ahead of its next nonce {next_nonce}; sign with the next one", t.nonce, t.from),
        ));
    }
    if balance < t.max_cost {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!("the sender holds {balance} wei; the transaction may cost {}", t.max_cost),
        ));
    }
    let tx_id = format!("{:#x}", t.hash);
    let settle = match settler {
        Settler::Facilitator => Settle::Broadcast(Outgoing::ready(tx_id, t.raw, None)),
        Settler::Seller(_) => {
            let horizon = rpc.block_number().await?.saturating_add(super::send::HORIZON_BLOCKS);
            Settle::Handover { transaction: t.raw, fee: 0, horizon }
        }
    };
    Ok(Checked {
        settle,
        payer: protocol_address(t.from),
        pay_to: protocol_address(*pay_to),
        asset: Asset::Native,
        amount: u128::try_from(t.value).unwrap_or(u128::MAX),
        decimals,
        fee: None,
    })
}

/// A receipt: the sender's EIP-191 signature over the payment's terms, and the mined transfer,
/// sent by that sender, with enough confirmations.
async fn receipt(
    backend: &EvmBackend,
    receipt: &NativeReceipt,
    pay_to: &Address,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let bad = |message: &str| refuse(Reason::NativeReceipt, message);
    let from = address(&receipt.from).ok_or_else(|| bad("receipt.from must be an EVM address"))?;
    if let Some(wanted) = &terms.resource
        && receipt.resource.as_deref() != Some(wanted)
    {
        return Err(bad("the receipt was made for another resource"));
    }
    let hash: B256 = receipt.transaction.parse().map_err(|_| bad("receipt.transaction is not a transaction hash"))?;
    let signature = receipt
        .signature
        .strip_prefix("0x")
        .and_then(|h| alloy::primitives::hex::decode(h).ok())
        .and_then(|b| Signature::try_from(b.as_slice()).ok())
        .ok_or_else(|| bad("receipt.signature is not a 65-byte 0x-hex signature"))?;
    let message = receipt_message(rpc.network(), &receipt.transaction, &terms.pay_to, receipt.resource.as_deref());
    if signature.recover_address_from_msg(message.as_bytes()).ok() != Some(from) {
        return Err(bad("the receipt's signature does not verify for its sender, recipient, network and resource"));
    }
    let mined = rpc.mined(hash, None).await?.ok_or_else(|| bad("the receipt's transaction is not mined"))?;
    let head = rpc.block_number().await?;
    let confirmations = head.saturating_sub(mined.block) + 1;
    if confirmations < backend.confirmations {
        return Err(refuse(
            Reason::NativeReceipt,
            format!(
                "the receipt's transaction has {confirmations} of the {} confirmations required",
                backend.confirmations
            ),
        ));
    }
    if !mined.success {
        return Err(bad("the receipt's transaction reverted"));
    }
    if mined.from != from {
        return Err(bad("the receipt's sender did not send that transaction"));
    }
    if mined.chain_id.is_some_and(|c| c != rpc.chain_id()) {
        return Err(refuse(Reason::InvalidNetwork, "the receipt's transaction is for another chain"));
    }
    if mined.to != Some(*pay_to) || !mined.input.is_empty() {
        return Err(refuse(
            Reason::NativeRecipientMismatch,
            "that transaction is not a plain transfer to walletAddress",
        ));
    }
    let paid = u128::try_from(mined.value).unwrap_or(u128::MAX);
    let decimals = ChainFamily::Evm.native_decimals();
    terms.price.check(paid, decimals, Reason::EvmValue)?;
    Ok(Checked {
        settle: Settle::Recorded { tx_id: format!("{hash:#x}") },
        payer: protocol_address(from),
        pay_to: protocol_address(*pay_to),
        asset: Asset::Native,
        amount: paid,
        decimals,
        fee: Some(mined.fee),
    })
}
