//! An x402 `batch-settlement` deposit as a payment: the payer's signed authorization, sent by
//! the facilitator's account (its fees counted against the seller's sponsorship budget) into the
//! channel's escrow, the settlement contract. It goes through the same steps as every payment:
//! a claim on the authorization's identity in the payment's own row, write-ahead, broadcast,
//! and the chain's verdict read from what landed (the contract's `Deposited` event for this
//! payer), so an authorization moves money at most once, whoever asks how often.

use std::time::Duration;

use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::{AtomicAmount, Network};

use super::pipeline::Source;
use super::{PROOF_DIGEST, PaymentError, Payments, detached, new_id, proof_digest, same_proof};
use crate::chains::Signable;
use crate::plans::Sponsorship;
use crate::store::{NewPayment, StoredPayment};

/// A deposit to settle (its `deposit` call, signed by the facilitator's account on each
/// attempt, comes beside it).
pub struct Deposit {
    /// The seller's account (whose sponsorship budget pays the fees).
    pub account: String,
    /// Its plan's budget.
    pub sponsorship: Sponsorship,
    /// The chain.
    pub network: Network,
    /// The payer (canonical address).
    pub payer: String,
    /// Where the money goes: the settlement contract (canonical address).
    pub escrow: String,
    /// The token (canonical address) and its decimals.
    pub token: (String, u8),
    /// Base units deposited.
    pub amount: u128,
    /// The authorization's identity: the one claim on it.
    pub proof_id: String,
    /// The buyer's payload.
    pub payload: PaymentPayload,
    /// The most its gas can cost, native base units.
    pub fee: Option<u128>,
    /// The resource the seller sells.
    pub resource: Option<String>,
    /// How long to wait for the chain's verdict.
    pub wait: Duration,
}

impl Payments {
    /// Settles a deposit once. The same payload presented again by the same seller is answered
    /// with its payment (resumed when it was left unfinished); another payload claiming the
    /// same authorization, or another seller, is refused as used.
    ///
    /// # Errors
    /// [`PaymentError::ProofUsed`], [`PaymentError::SponsorshipSpent`], and as
    /// [`Self::receive`].
    pub async fn deposit(&self, d: Deposit, call: Box<dyn Signable>) -> Result<StoredPayment, PaymentError> {
        let this = self.clone();
        detached(async move { this.deposit_now(d, call).await }).await
    }

    /// A deposit whose authorization is claimed already: answered as [`Self::deposit`] answers
    /// it (`None` when it is not claimed). Asked before the chain is: a used authorization no
    /// longer simulates, and must still be answered as used, or with its own payment.
    ///
    /// # Errors
    /// As [`Self::deposit`].
    pub async fn deposit_claimed(&self, d: &Deposit) -> Result<Option<StoredPayment>, PaymentError> {
        let chain = self.chain(&d.network)?;
        match self.store().payment_by_proof(&d.proof_id).await? {
            Some(holder) => self.answer_deposit(&*chain, holder, d).await.map(Some),
            None => Ok(None),
        }
    }

    async fn deposit_now(&self, d: Deposit, call: Box<dyn Signable>) -> Result<StoredPayment, PaymentError> {
        let chain = self.chain(&d.network)?;
        if let Some(holder) = self.store().payment_by_proof(&d.proof_id).await? {
            return self.answer_deposit(&*chain, holder, &d).await;
        }
        let family = d.network.family();
        let fee = u64::try_from(d.fee.unwrap_or(0)).unwrap_or(u64::MAX);
        let (day, renews_in_secs) = self.sponsorship_day();
        let budget = d.sponsorship.per_day(family);
        if self.store().reserve_sponsorship(&d.account, family, day, fee, budget).await?.is_none() {
            return Err(PaymentError::SponsorshipSpent {
                message: format!(
                    "the network fees this facilitator pays for your account today would pass the plan's budget of \
                     {budget} {family} base units (this deposit may cost {fee}); it renews at 00:00 UTC"
                ),
                renews_in_secs,
            });
        }
        let mut metadata = serde_json::Map::new();
        metadata.insert("scheme".to_owned(), tollgate_protocol::x402::batch::SCHEME.into());
        metadata.insert(PROOF_DIGEST.to_owned(), proof_digest(&d.payload).into());
        let payment = NewPayment {
            id: new_id(),
            owner_account: d.account.clone(),
            owner_side: Direction::Received,
            counterparty_account: self.account_of(&d.payer).await?,
            status: PaymentStatus::Verified,
            mode: PaymentMode::Hosted,
            network: d.network.clone(),
            from: d.payer.clone(),
            to: d.escrow.clone(),
            amount_atomic: AtomicAmount(d.amount),
            asset: d.token.0.clone(),
            decimals: d.token.1,
            fee_atomic: d.fee.map(AtomicAmount),
            transaction: None,
            tx_raw: None,
            resource: d.resource.clone(),
            metadata: Some(metadata),
            proof_id: Some(d.proof_id.clone()),
            expires_at: None,
            last_valid_block_height: None,
            next_check_at: None,
            created_at: self.now(),
            ticket: None,
        };
        match self.settle_new(&*chain, payment, Source::Sign(call), d.wait).await {
            // A twin request claimed it between our look and our insert: nothing was sent.
            Err(PaymentError::ProofUsed { payment_id, .. }) => {
                self.store().release_sponsorship(&d.account, family, day, fee).await?;
                match self.store().get_payment(&payment_id).await? {
                    Some(holder) => self.answer_deposit(&*chain, holder, &d).await,
                    None => Err(PaymentError::ProofUsed { payment_id, holder: None }),
                }
            }
            other => other,
        }
    }

    /// A claimed authorization presented again: its own seller with the very payload is
    /// answered with the payment (pushed on while unfinished); anyone else is refused.
    async fn answer_deposit(
        &self,
        chain: &dyn crate::chains::Chain,
        holder: StoredPayment,
        d: &Deposit,
    ) -> Result<StoredPayment, PaymentError> {
        let p = &holder.payment;
        let own = p.owner_account == d.account
            && p.to == d.escrow
            && p.amount_atomic.get() == d.amount
            && same_proof(p, &d.payload);
        if !own {
            let visible = holder.visible_to(&d.account) && same_proof(p, &d.payload);
            return Err(PaymentError::ProofUsed {
                payment_id: p.id.clone(),
                holder: visible.then(|| Box::new(holder.clone())),
            });
        }
        if p.status.is_final() {
            return Ok(holder);
        }
        self.resume(chain, holder, d.wait).await
    }
}
