//! Incoming payment proofs, checked against what the seller asks for.
//!
//! One path serves the gateway (`/payment/receive`, `/transaction/receive`) and the x402 API
//! (`/verify`, `/settle`): the caller states its [`Terms`], a chain module ([`solana`], [`evm`])
//! checks the proof against them and the chain into a chain-neutral [`Checked`], and [`settle`]
//! hands that to the settlement engine.

pub mod evm;
pub mod solana;

use std::time::Duration;

use tollgate_protocol::gateway::{PaymentMode, PaymentStatus};
use tollgate_protocol::x402::{Asset, PaymentPayload, SCHEME_EXACT};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, DecimalAmount, Network};

use crate::AppState;
use crate::chains::Backend;
use crate::refusal::{Reason, Refusal};
use crate::settlement::engine::{SettleError, Settlement, record_confirmed, settle as settle_tx};
use crate::store::{NewPayment, StoredPayment};

/// How much must be paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Price {
    /// At least this amount in the asset's whole units (the gateway's `expectedAmount`); read in
    /// the asset's decimals once the asset is known.
    AtLeast(DecimalAmount),
    /// At least these base units (`exact-native` requirements).
    AtLeastAtomic(u128),
    /// Exactly these base units (x402 `exact`).
    Exactly(u128),
}

impl Price {
    /// Checks `paid` base units of an asset with `decimals` against the price; `mismatch` is the
    /// chain's reason for a wrong amount.
    ///
    /// # Errors
    /// `mismatch` when it pays less (or, for `exact`, anything else).
    pub fn check(&self, paid: u128, decimals: u8, mismatch: Reason) -> Result<(), Refusal> {
        let (wanted, exact) = match self {
            Self::AtLeast(amount) => {
                let atomic = amount.to_atomic(decimals).map_err(|_| {
                    Refusal::new(
                        Reason::InvalidPaymentRequirements,
                        format!("the expected amount {amount} has more than the asset's {decimals} decimals"),
                    )
                })?;
                (atomic.get(), false)
            }
            Self::AtLeastAtomic(n) => (*n, false),
            Self::Exactly(n) => (*n, true),
        };
        if paid < wanted || (exact && paid != wanted) {
            let relation = if exact { "not exactly" } else { "less than" };
            return Err(Refusal::new(
                mismatch,
                format!("the proof pays {paid} base units, {relation} the {wanted} expected"),
            ));
        }
        Ok(())
    }

    /// The price of an x402 requirement: exactly its amount for `exact`, at least it for
    /// `exact-native`.
    #[must_use]
    pub fn of_requirement(scheme: &str, amount: AtomicAmount) -> Self {
        if scheme == SCHEME_EXACT { Self::Exactly(amount.get()) } else { Self::AtLeastAtomic(amount.get()) }
    }
}

/// What the seller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// Who must be paid.
    pub pay_to: Address,
    /// What with; `None` lets the proof name it (the gateway's receive has no asset field).
    pub asset: Option<Asset>,
    /// How much.
    pub price: Price,
    /// The resource paid for; a receipt must be bound to it.
    pub resource: Option<String>,
    /// The requirement's scheme details (EVM `exact`: the token's EIP-712 `name` and `version`).
    pub extra: Option<serde_json::Value>,
}

impl Terms {
    /// Checks that a v2 payload's `accepted` requirement is for these terms (v1 payloads carry
    /// none).
    ///
    /// # Errors
    /// [`Reason::InvalidPaymentRequirements`] when it names another recipient or asset.
    pub fn check_accepted(&self, payload: &PaymentPayload) -> Result<(), Refusal> {
        let PaymentPayload::V2(p) = payload else { return Ok(()) };
        let asset_differs = self.asset.is_some_and(|a| a != p.accepted.asset);
        if p.accepted.pay_to != self.pay_to || asset_differs {
            return Err(Refusal::new(
                Reason::InvalidPaymentRequirements,
                "the proof was made for another recipient or asset",
            ));
        }
        Ok(())
    }
}

/// How a checked proof settles.
#[derive(Debug, Clone)]
pub enum Settle {
    /// Broadcast a transaction, in the chain's wire format; it cannot land past block `horizon`
    /// (Solana's last valid block height), when the chain has one.
    Transaction {
        /// The signed transaction.
        bytes: Vec<u8>,
        /// Its id (Solana: first signature; EVM: hash).
        tx_id: String,
        /// Whether every signature is present (a local-mode seller may still have to sign).
        complete: bool,
        /// Last block at which it can land.
        horizon: Option<u64>,
    },
    /// The transfer is already confirmed: record it.
    Confirmed {
        /// Its id.
        tx_id: String,
    },
    /// A contract call the facilitator signs and sends from its own account (EIP-3009
    /// `transferWithAuthorization`), with at most `gas_limit` gas.
    Call {
        /// The contract.
        to: Address,
        /// Call data.
        data: Vec<u8>,
        /// Gas limit (the estimate, with margin).
        gas_limit: u64,
    },
}

/// A proof that passed every check of its chain.
#[derive(Debug, Clone)]
pub struct Checked {
    /// How it settles.
    pub settle: Settle,
    /// Its identity, claimed once (`<network>:<payer's signature or tx hash>`).
    pub proof_id: String,
    /// Who paid.
    pub payer: Address,
    /// What with.
    pub asset: Asset,
    /// Base units paid.
    pub amount: u128,
    /// The asset's decimals.
    pub decimals: u8,
    /// Network fee in native base units, when known.
    pub fee: Option<u128>,
}

/// A v2 payload names the asset it pays with: it must be the one the proof moves.
///
/// # Errors
/// [`Reason::InvalidPaymentRequirements`] when they differ.
pub fn check_accepted_asset(payload: &PaymentPayload, checked: &Checked) -> Result<(), Refusal> {
    if let PaymentPayload::V2(p) = payload
        && p.accepted.asset != checked.asset
    {
        return Err(Refusal::new(
            Reason::InvalidPaymentRequirements,
            "the proof pays another asset than its requirement",
        ));
    }
    Ok(())
}

/// The payment record of a checked proof, received by `owner_account`'s `terms.pay_to`.
async fn payment(
    state: &AppState,
    owner_account: &str,
    network: &Network,
    checked: &Checked,
    terms: &Terms,
) -> Result<NewPayment, SettleError> {
    let payer_account = state.store.get_wallet(&checked.payer.to_string()).await?.map(|w| w.account_id);
    let horizon = match &checked.settle {
        Settle::Transaction { horizon, .. } => *horizon,
        Settle::Confirmed { .. } | Settle::Call { .. } => None,
    };
    Ok(NewPayment {
        id: format!("pay_{}", ulid::Ulid::new()),
        owner_account: owner_account.to_owned(),
        counterparty_account: payer_account,
        status: PaymentStatus::Verified,
        mode: PaymentMode::Hosted,
        network: network.clone(),
        from: checked.payer.to_string(),
        to: terms.pay_to.to_string(),
        amount_atomic: AtomicAmount(checked.amount),
        asset: match checked.asset {
            Asset::Native => "native".to_owned(),
            Asset::Token(token) => token.to_string(),
        },
        decimals: checked.decimals,
        fee_atomic: checked.fee.map(AtomicAmount),
        transaction: None,
        resource: terms.resource.clone(),
        metadata: None,
        proof_id: Some(checked.proof_id.clone()),
        expires_at: None,
        last_valid_block_height: horizon,
        created_at: state.clock.now(),
    })
}

/// Settles a checked proof for `owner_account` on `backend`: broadcasts its transaction once
/// (waiting at most `wait` for a verdict), records its confirmed transfer, or sends its contract
/// call from the facilitator's account.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; storage failures; chain failures
/// before anything was broadcast.
pub async fn settle(
    state: &AppState,
    owner_account: &str,
    backend: &Backend,
    checked: Checked,
    terms: &Terms,
    wait: Duration,
) -> Result<StoredPayment, SettleError> {
    let ledger = backend.ledger();
    let payment = payment(state, owner_account, ledger.network(), &checked, terms).await?;
    match checked.settle {
        Settle::Transaction { bytes, tx_id, complete, .. } => {
            debug_assert!(complete, "only complete transactions are broadcast");
            settle_tx(&*state.store, &*state.clock, ledger, Settlement { payment, tx_id, tx_bytes: bytes, wait }).await
        }
        Settle::Confirmed { tx_id } => {
            let fee = checked.fee.map(AtomicAmount);
            record_confirmed(&*state.store, &*state.clock, payment, &tx_id, fee).await
        }
        Settle::Call { to, data, gas_limit } => match backend {
            Backend::Evm(evm) => evm::send_call(state, evm, payment, (to, data, gas_limit), wait).await,
            Backend::Solana(_) => Err(SettleError::Chain("a contract call cannot settle on Solana".into())),
        },
    }
}

/// Records a checked proof as a local-mode payment (`built`) whose transaction the seller
/// signs and broadcasts, claiming the proof so it is used once; `expires_at` bounds the offer.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; storage failures.
pub async fn record_for_seller(
    state: &AppState,
    owner_account: &str,
    network: &Network,
    checked: &Checked,
    terms: &Terms,
    expires_at: chrono::DateTime<chrono::Utc>,
) -> Result<NewPayment, SettleError> {
    let payment = NewPayment {
        status: PaymentStatus::Built,
        mode: PaymentMode::Local,
        expires_at: Some(expires_at),
        ..payment(state, owner_account, network, checked, terms).await?
    };
    if !state.store.claim_proof(&checked.proof_id, &payment.id, state.clock.now()).await? {
        let payment_id = state.store.proof_claim(&checked.proof_id).await?.unwrap_or_default();
        return Err(SettleError::AlreadyClaimed { payment_id });
    }
    state.store.insert_payment(&payment).await?;
    Ok(payment)
}

/// The payment that claimed this proof already, if any (`asset`: the requirement's, which an
/// EVM `exact` payload does not carry). Asked before the chain is: a used proof's transaction
/// may no longer simulate, and the answer must still be "used".
///
/// # Errors
/// Storage failures.
pub async fn claimed_by(
    state: &AppState,
    payload: &PaymentPayload,
    asset: Option<Asset>,
) -> Result<Option<String>, SettleError> {
    let identity = match payload.network().family() {
        ChainFamily::Solana => solana::proof_identity(payload),
        ChainFamily::Evm => evm::proof_identity(payload, asset),
    };
    match identity {
        Some(id) => Ok(state.store.proof_claim(&id).await?),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices() {
        let at_least = Price::AtLeast(DecimalAmount::parse("0.5").unwrap());
        let m = Reason::SvmAmountMismatch;
        assert!(at_least.check(500_000, 6, m).is_ok());
        assert!(at_least.check(600_000, 6, m).is_ok());
        assert_eq!(at_least.check(499_999, 6, m).unwrap_err().reason, m);
        let too_fine = Price::AtLeast(DecimalAmount::parse("0.0000001").unwrap());
        assert_eq!(too_fine.check(1, 6, m).unwrap_err().reason, Reason::InvalidPaymentRequirements);
        assert!(Price::Exactly(10).check(10, 0, m).is_ok());
        assert!(Price::Exactly(10).check(11, 0, m).unwrap_err().message.contains("not exactly"));
        assert!(Price::AtLeastAtomic(10).check(11, 0, m).is_ok());
        assert_eq!(Price::of_requirement("exact", AtomicAmount(5)), Price::Exactly(5));
        assert_eq!(Price::of_requirement("exact-native", AtomicAmount(5)), Price::AtLeastAtomic(5));
    }
}
