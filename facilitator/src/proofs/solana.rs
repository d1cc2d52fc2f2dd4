//! Solana proofs, checked against [`Terms`] and the chain, then settled.
//!
//! | scheme | payload | checked by | settled by |
//! |---|---|---|---|
//! | `exact-native` | signed System transfer | [`verify::check_signed_transfer`], blockhash, balance | broadcasting it |
//! | `exact-native` | receipt | the sender's signature, the confirmed transaction | recording it |
//! | `exact` | SPL `TransferChecked`, fee payer = sponsor | [`spl::check_sponsored_transfer`], accounts, simulation | the sponsor signing and broadcasting it |
//!
//! The sponsor of an `exact` transaction is the facilitator's fee payer in hosted mode and x402,
//! and the seller's wallet in local mode (`/transaction/receive`), where the seller signs later.

use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::VersionedTransaction;
use tollgate_protocol::x402::schemes::{ExactNativePayload, ExactSolanaPayload, NativeReceipt, receipt_message};
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT, SCHEME_EXACT_NATIVE};
use tollgate_protocol::{Address, ChainFamily, Network};

use super::{Checked, Settle, Terms};
use crate::chains::SolanaBackend;
use crate::chains::solana::build::pubkey;
use crate::chains::solana::rpc::SolanaRpc;
use crate::chains::solana::spl::{self, SponsorPolicy};
use crate::chains::solana::verify;
use crate::refusal::{ProofError, Reason, Refusal};

/// Who pays the fee of an `exact` (sponsored) transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeePayer {
    /// The facilitator's fee payer: it signs and broadcasts.
    Facilitator,
    /// The seller's wallet: the transaction goes back to the seller to sign (local mode).
    Seller(Pubkey),
}

fn refuse(reason: Reason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(reason, message))
}

/// Proof identity of a Solana payment: network and the payer's signature.
fn proof_id(network: &Network, signature: &str) -> String {
    format!("{network}:{signature}")
}

async fn fee_of(rpc: &SolanaRpc, message: &VersionedMessage) -> Result<u64, ProofError> {
    match message {
        VersionedMessage::Legacy(m) => Ok(rpc.fee_for(m).await?),
        VersionedMessage::V0(m) => Ok(rpc.fee_for(m).await?),
        _ => Err(refuse(Reason::SvmTransaction, "only legacy and v0 transactions are accepted")),
    }
}

/// Checks `payload` against `terms` on `backend`'s network.
///
/// # Errors
/// [`ProofError::Refused`] for a proof that does not pay as asked; [`ProofError::Chain`] when
/// the chain cannot be read.
pub async fn check(
    backend: &SolanaBackend,
    payload: &PaymentPayload,
    terms: &Terms,
    fee_payer: FeePayer,
) -> Result<Checked, ProofError> {
    let network = backend.rpc.network();
    if payload.network() != network {
        return Err(refuse(Reason::InvalidNetwork, format!("the proof pays on {}, not {network}", payload.network())));
    }
    let pay_to = pubkey(&terms.pay_to)
        .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "payTo must be a Solana address"))?;
    terms.check_accepted(payload)?;
    let checked = check_scheme(backend, payload, terms, &pay_to, fee_payer).await?;
    super::check_accepted_asset(payload, &checked)?;
    Ok(checked)
}

async fn check_scheme(
    backend: &SolanaBackend,
    payload: &PaymentPayload,
    terms: &Terms,
    pay_to: &Pubkey,
    fee_payer: FeePayer,
) -> Result<Checked, ProofError> {
    let network = backend.rpc.network();
    let invalid_payload =
        |e: tollgate_protocol::x402::schemes::PayloadError| refuse(Reason::InvalidPayload, e.to_string());
    match payload.scheme() {
        SCHEME_EXACT_NATIVE => {
            if terms.asset.is_some_and(|a| a != Asset::Native) {
                return Err(refuse(Reason::InvalidPaymentRequirements, "exact-native pays SOL, but a token is asked"));
            }
            match ExactNativePayload::from_value(payload.payload()).map_err(invalid_payload)? {
                ExactNativePayload::Transaction(tx) => signed_transfer(&backend.rpc, &tx, pay_to, terms).await,
                ExactNativePayload::Receipt(_) if matches!(fee_payer, FeePayer::Seller(_)) => Err(refuse(
                    Reason::InvalidPayload,
                    "a receipt is for a transfer already on chain: present it to /payment/receive",
                )),
                ExactNativePayload::Receipt(r) => receipt(&backend.rpc, &r, pay_to, terms).await,
            }
        }
        SCHEME_EXACT => {
            let (sponsor, policy) = match fee_payer {
                FeePayer::Facilitator => {
                    let s = backend.sponsor.as_ref().ok_or_else(|| {
                        refuse(
                            Reason::UnsupportedScheme,
                            format!("this facilitator has no fee payer for x402 exact on {network}"),
                        )
                    })?;
                    (s.keypair.pubkey(), s.policy)
                }
                FeePayer::Seller(key) => {
                    (key, backend.sponsor.as_ref().map_or_else(SponsorPolicy::default, |s| s.policy))
                }
            };
            let p = ExactSolanaPayload::from_value(payload.payload()).map_err(invalid_payload)?;
            let sponsoring = Sponsoring { backend, sponsor, policy, fee_payer };
            sponsoring.check(&p.transaction, pay_to, terms).await
        }
        other => Err(refuse(Reason::UnsupportedScheme, format!("unsupported scheme {other}"))),
    }
}

/// An `exact-native` signed transfer, checked without the chain, then against it.
async fn signed_transfer(
    rpc: &SolanaRpc,
    encoded: &str,
    pay_to: &Pubkey,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let tx = verify::decode(encoded)?;
    let checked = verify::check_signed_transfer(&tx, pay_to, 0)?;
    let decimals = ChainFamily::Solana.native_decimals();
    terms.price.check(u128::from(checked.transfer.lamports), decimals, Reason::SvmAmountMismatch)?;
    if !rpc.blockhash_valid(&checked.blockhash).await? {
        return Err(refuse(Reason::PaymentExpired, "the transaction's blockhash has expired; sign a fresh one"));
    }
    let fee = fee_of(rpc, &tx.message).await?;
    let source = checked.transfer.from;
    let needed = checked.transfer.lamports.saturating_add(if checked.fee_payer == source { fee } else { 0 });
    let balance = rpc.balance(&source).await?;
    if balance < needed {
        return Err(refuse(
            Reason::InsufficientFunds,
            format!("the payer holds {balance} lamports; the transaction needs {needed}"),
        ));
    }
    // The transaction's blockhash is valid now, so it cannot land after the horizon of the
    // newest blockhash: past that height, a transaction the chain never saw has expired.
    let (_, horizon) = rpc.latest_blockhash().await?;
    let signature = tx.signatures[0].to_string();
    Ok(Checked {
        settle: Settle::Transaction {
            bytes: encode(&tx)?,
            tx_id: signature.clone(),
            complete: true,
            horizon: Some(horizon),
        },
        proof_id: proof_id(rpc.network(), &signature),
        payer: Address::Solana(source.to_bytes()),
        asset: Asset::Native,
        amount: u128::from(checked.transfer.lamports),
        decimals,
        fee: Some(u128::from(fee)),
    })
}

/// An `exact-native` receipt: the sender's signature over the payment's terms, and the transfer
/// on chain, sent by that sender.
async fn receipt(
    rpc: &SolanaRpc,
    receipt: &NativeReceipt,
    pay_to: &Pubkey,
    terms: &Terms,
) -> Result<Checked, ProofError> {
    let bad = |message: &str| refuse(Reason::NativeReceipt, message);
    let from = pubkey(&receipt.from).ok_or_else(|| bad("receipt.from must be a Solana address"))?;
    if let Some(wanted) = &terms.resource
        && receipt.resource.as_deref() != Some(wanted)
    {
        return Err(bad("the receipt was made for another resource"));
    }
    let network = rpc.network();
    let message = receipt_message(network, &receipt.transaction, &terms.pay_to, receipt.resource.as_deref());
    let signed = receipt.signature.parse::<Signature>().is_ok_and(|s| s.verify(from.as_ref(), message.as_bytes()));
    if !signed {
        return Err(bad("the receipt's signature does not verify for its sender, recipient, network and resource"));
    }
    let tx_signature: Signature =
        receipt.transaction.parse().map_err(|_| bad("receipt.transaction is not a Solana signature"))?;
    let confirmed = rpc
        .confirmed_transaction(&tx_signature)
        .await?
        .ok_or_else(|| bad("the receipt's transaction is not confirmed on chain"))?;
    if let Some(error) = confirmed.error {
        return Err(refuse(Reason::NativeReceipt, format!("the receipt's transaction failed on chain: {error}")));
    }
    let keys = confirmed.transaction.message.static_account_keys();
    let signer = keys.iter().position(|k| *k == from).is_some_and(|i| confirmed.transaction.message.is_signer(i));
    if !signer {
        return Err(bad("the receipt's sender did not sign that transaction"));
    }
    let paid = verify::transferred(&confirmed.transaction, &from, pay_to);
    let decimals = ChainFamily::Solana.native_decimals();
    terms.price.check(u128::from(paid), decimals, Reason::SvmAmountMismatch)?;
    Ok(Checked {
        settle: Settle::Confirmed { tx_id: receipt.transaction.clone() },
        proof_id: proof_id(network, &receipt.transaction),
        payer: Address::Solana(from.to_bytes()),
        asset: Asset::Native,
        amount: u128::from(paid),
        decimals,
        fee: confirmed.fee.map(u128::from),
    })
}

/// An x402 `exact` transaction and who sponsors it.
struct Sponsoring<'a> {
    backend: &'a SolanaBackend,
    sponsor: Pubkey,
    policy: SponsorPolicy,
    fee_payer: FeePayer,
}

impl Sponsoring<'_> {
    async fn check(&self, encoded: &str, pay_to: &Pubkey, terms: &Terms) -> Result<Checked, ProofError> {
        let rpc = &self.backend.rpc;
        let mut tx = verify::decode(encoded)?;
        let s = spl::check_sponsored_transfer(&tx, &self.sponsor, &self.policy)?;
        let t = &s.transfer;
        match terms.asset {
            Some(Asset::Native) => {
                return Err(refuse(Reason::InvalidPaymentRequirements, "x402 exact on Solana pays a token, not SOL"));
            }
            Some(Asset::Token(mint)) if pubkey(&mint) != Some(t.mint) => {
                return Err(refuse(Reason::SvmInstructions, format!("the transfer moves mint {}, not {mint}", t.mint)));
            }
            _ => {}
        }
        let token = spl::check_token_accounts(rpc, t, pay_to, &self.sponsor).await?;
        terms.price.check(u128::from(t.amount), token.decimals, Reason::SvmAmountMismatch)?;
        if !rpc.blockhash_valid(&s.blockhash).await? {
            return Err(refuse(Reason::PaymentExpired, "the transaction's blockhash has expired; sign a fresh one"));
        }
        let complete = match (self.fee_payer, &self.backend.sponsor) {
            (FeePayer::Facilitator, Some(sponsor)) => {
                tx.signatures[0] = sponsor.keypair.sign_message(&tx.message.serialize());
                true
            }
            _ => false,
        };
        if let Some(error) = rpc.simulate(&tx, complete).await? {
            return Err(refuse(Reason::SvmSimulationFailed, format!("the transaction would fail: {error}")));
        }
        let fee = fee_of(rpc, &tx.message).await?;
        let (_, horizon) = rpc.latest_blockhash().await?;
        Ok(Checked {
            settle: Settle::Transaction {
                bytes: encode(&tx)?,
                tx_id: tx.signatures[0].to_string(),
                complete,
                horizon: Some(horizon),
            },
            proof_id: proof_id(rpc.network(), &s.payer_signature.to_string()),
            payer: Address::Solana(t.authority.to_bytes()),
            asset: Asset::Token(Address::Solana(t.mint.to_bytes())),
            amount: u128::from(t.amount),
            decimals: token.decimals,
            fee: Some(u128::from(fee)),
        })
    }
}

/// The identity a proof will be claimed under, read without the chain (`None` when the payload
/// is malformed; the full check then says why).
#[must_use]
pub fn proof_identity(payload: &PaymentPayload) -> Option<String> {
    let network = payload.network();
    match payload.scheme() {
        SCHEME_EXACT_NATIVE => match ExactNativePayload::from_value(payload.payload()).ok()? {
            ExactNativePayload::Transaction(encoded) => {
                let tx = verify::decode(&encoded).ok()?;
                Some(proof_id(network, &tx.signatures.first()?.to_string()))
            }
            ExactNativePayload::Receipt(r) => Some(proof_id(network, &r.transaction)),
        },
        SCHEME_EXACT => {
            let p = ExactSolanaPayload::from_value(payload.payload()).ok()?;
            let tx = verify::decode(&p.transaction).ok()?;
            Some(proof_id(network, &tx.signatures.get(1)?.to_string()))
        }
        _ => None,
    }
}

/// The bytes a Solana transaction is broadcast as.
fn encode(tx: &VersionedTransaction) -> Result<Vec<u8>, ProofError> {
    bincode::serialize(tx).map_err(|e| refuse(Reason::SvmTransaction, format!("cannot encode the transaction: {e}")))
}
