//! x402 `exact` on Solana: an SPL `TransferChecked` the buyer signed with someone else as fee
//! payer (the "sponsor"): the facilitator in hosted mode and x402, the seller in local mode.
//!
//! The rules a sponsored transaction must follow without the chain are in [`super::spl`]; here
//! the mint is compared with the asset asked for, the accounts and balance are read, the
//! transaction is simulated, and the facilitator's signature is added only when it settles
//! ([`CoSign`]), after the payment core has admitted what the check found.

use std::sync::Arc;

use async_trait::async_trait;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::VersionedTransaction;
use tollgate_protocol::Address;
use tollgate_protocol::x402::schemes::ExactSolanaPayload;
use tollgate_protocol::x402::{Asset, PaymentPayload};

use super::build::pubkey;
use super::exact_native::fee_of;
use super::spl::{self, SponsorPolicy};
use super::{SolanaBackend, encode, refuse, verify};
use crate::chains::{
    ChainError, Checked, Intent, Outgoing, ProofError, Reason, Refusal, Settle, Settler, Signable, Terms,
};

/// Fee per signature on every Solana cluster, lamports.
const LAMPORTS_PER_SIGNATURE: u64 = 5_000;

/// Reads an `exact` payload (the one decode of its transaction).
pub(super) fn read(payload: &PaymentPayload) -> Result<VersionedTransaction, Refusal> {
    let p = ExactSolanaPayload::from_value(payload.payload())
        .map_err(|e| Refusal::new(Reason::InvalidPayload, e.to_string()))?;
    verify::decode(&p.transaction)
}

/// The payer's signature (the second; the sponsor's is first) a transaction is claimed under.
pub(super) fn identity(tx: &VersionedTransaction) -> Option<String> {
    tx.signatures.get(1).map(ToString::to_string)
}

/// Checks an `exact` payload paying `pay_to` the token `terms.asset`.
///
/// What needs the chain is asked at once: the accounts (the mint only the first time), whether
/// the blockhash is still valid, and a simulation. A settlement by the facilitator right after
/// a verify of the same transaction takes that verify's answers instead; only a settlement
/// reads its fee and horizon.
pub(super) async fn check(
    backend: &SolanaBackend,
    tx: &Result<VersionedTransaction, Refusal>,
    terms: &Terms,
    pay_to: &Pubkey,
    (settler, intent): (Settler, Intent),
) -> Result<Checked, ProofError> {
    let rpc = &backend.rpc;
    let asked = mint_asked(terms)?;
    let (sponsor, policy) = sponsor_of(backend, settler, terms)?;
    let tx = tx.as_ref().map_err(|r| ProofError::Refused(r.clone()))?;
    let memo = terms.extra.as_ref().and_then(|e| e.get("memo")).and_then(|m| m.as_str());
    let s = spl::check_sponsored_transfer(tx, &sponsor, &policy, memo)?;
    let t = &s.transfer;
    if t.mint != asked {
        return Err(refuse(Reason::SvmInstructions, format!("the transfer moves mint {}, not {asked}", t.mint)));
    }
    // Everything the skipped checks read: the transaction, who sponsors it and who must be paid
    // (its destination is checked against `pay_to`'s account only on chain).
    let message = tx.message.serialize();
    let network = rpc.network().to_string();
    let key = crate::chains::memo::digest(&[network.as_bytes(), sponsor.as_ref(), pay_to.as_ref(), &message]);
    let known = backend.mints.get(&t.mint).filter(|(program, _)| *program == t.program);
    let decimals = match known {
        Some((_, decimals)) if intent == Intent::Settle && backend.passed.take(&key) => {
            terms.price.check(u128::from(t.amount), decimals, Reason::SvmAmountMismatch)?;
            decimals
        }
        _ => on_chain(backend, tx, (&s, terms), (pay_to, &sponsor)).await?,
    };
    let checked = |settle, fee: Option<u64>| Checked {
        settle,
        payer: Address::Solana(t.authority.to_bytes()),
        // The destination is the associated token account of `pay_to` (checked above).
        pay_to: Address::Solana(pay_to.to_bytes()),
        asset: Asset::Token(Address::Solana(t.mint.to_bytes())),
        amount: u128::from(t.amount),
        decimals,
        fee: fee.map(u128::from),
    };
    if intent == Intent::Verify {
        backend.passed.remember(key);
        return Ok(checked(Settle::Nothing, None));
    }
    let (settle, fee) = settlement(backend, tx, terms, settler).await?;
    Ok(checked(settle, Some(fee)))
}

/// The mint the terms ask for.
fn mint_asked(terms: &Terms) -> Result<Pubkey, ProofError> {
    let Asset::Token(asked) = terms.asset else {
        return Err(refuse(
            Reason::InvalidPaymentRequirements,
            "x402 exact on Solana pays a token: name it (asset), SOL is paid with exact-native",
        ));
    };
    pubkey(&asked).ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "the asset must be a Solana mint"))
}

/// Who pays the fees, and how much it will: the facilitator's fee payer (the one the buyer was
/// offered, if the terms name it), or the seller's wallet in local mode.
fn sponsor_of(backend: &SolanaBackend, settler: Settler, terms: &Terms) -> Result<(Pubkey, SponsorPolicy), ProofError> {
    match settler {
        Settler::Facilitator => {
            let s = backend.sponsor.as_ref().ok_or_else(|| {
                refuse(
                    Reason::UnsupportedScheme,
                    format!("this facilitator has no fee payer for x402 exact on {}", backend.rpc.network()),
                )
            })?;
            let offered = terms.extra.as_ref().and_then(|e| e.get("feePayer")).and_then(|v| v.as_str());
            if offered.is_some_and(|o| o != s.keypair.pubkey().to_string()) {
                return Err(refuse(
                    Reason::InvalidPaymentRequirements,
                    format!("extra.feePayer {} is not this facilitator's fee payer", offered.unwrap_or_default()),
                ));
            }
            Ok((s.keypair.pubkey(), s.policy))
        }
        Settler::Seller(seller) => Ok((
            pubkey(&seller)
                .ok_or_else(|| refuse(Reason::InvalidPaymentRequirements, "the seller is not a Solana wallet"))?,
            backend.sponsor.as_ref().map_or_else(SponsorPolicy::default, |s| s.policy),
        )),
    }
}

/// What the chain says, asked at once: the token accounts (the mint only the first time), the
/// blockhash still valid, and a simulation (without signature checks: the sponsor has not
/// signed yet). The mint's decimals.
async fn on_chain(
    backend: &SolanaBackend,
    tx: &VersionedTransaction,
    (s, terms): (&spl::SponsoredTransfer, &Terms),
    (pay_to, sponsor): (&Pubkey, &Pubkey),
) -> Result<u8, ProofError> {
    let rpc = &backend.rpc;
    let t = &s.transfer;
    let (token, valid, simulated) = tokio::join!(
        spl::check_token_accounts(rpc, t, (pay_to, sponsor), &backend.mints),
        rpc.blockhash_valid(&s.blockhash),
        rpc.simulate(tx, false),
    );
    let token = token?;
    terms.price.check(u128::from(t.amount), token.decimals, Reason::SvmAmountMismatch)?;
    if !valid? {
        return Err(refuse(Reason::PaymentExpired, "the transaction's blockhash has expired; sign a fresh one"));
    }
    if let Some(error) = simulated? {
        return Err(refuse(Reason::SvmSimulationFailed, format!("the transaction would fail: {error}")));
    }
    Ok(token.decimals)
}

/// How it settles, and its fee: its horizon and fee read; the seller's priority-fee cap
/// checked (local mode); co-signed by the facilitator's fee payer when it sends, else handed over.
async fn settlement(
    backend: &SolanaBackend,
    tx: &VersionedTransaction,
    terms: &Terms,
    settler: Settler,
) -> Result<(Settle, u64), ProofError> {
    let rpc = &backend.rpc;
    let (fee, latest) = tokio::join!(fee_of(backend, &tx.message), rpc.latest_blockhash());
    let (fee, (_, horizon)) = (fee?, latest?);
    if let (Settler::Seller(_), Some(cap)) = (settler, terms.fee_cap) {
        let signatures = u64::from(tx.message.header().num_required_signatures);
        let priority = verify::FeeParts::of(&tx.message)
            .map_or_else(|| fee.saturating_sub(signatures.saturating_mul(LAMPORTS_PER_SIGNATURE)), |p| p.priority);
        if u128::from(priority) > cap.get() {
            return Err(refuse(
                Reason::SvmComputePriceTooHigh,
                format!("the transaction's priority fee is {priority} lamports, above the priorityFee of {cap}"),
            ));
        }
    }
    let settle = match (settler, &backend.sponsor) {
        (Settler::Facilitator, Some(sponsor)) => {
            Settle::Sign(Box::new(CoSign { tx: tx.clone(), sponsor: sponsor.keypair.clone(), horizon }))
        }
        _ => Settle::Handover { transaction: encode(tx)?, fee: u128::from(fee), horizon },
    };
    Ok((settle, fee))
}

/// The facilitator's fee-payer signature, added when the payment settles.
struct CoSign {
    tx: VersionedTransaction,
    sponsor: Arc<Keypair>,
    horizon: u64,
}

#[async_trait]
impl Signable for CoSign {
    async fn sign(&self) -> Result<Outgoing, ChainError> {
        let mut tx = self.tx.clone();
        tx.signatures[0] = self.sponsor.sign_message(&tx.message.serialize());
        let tx_id = tx.signatures[0].to_string();
        Ok(Outgoing::ready(tx_id, encode(&tx)?, Some(self.horizon)))
    }
}
