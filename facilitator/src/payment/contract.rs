//! A payment made by a contract call the facilitator sends and pays the gas of (counted against
//! the seller's sponsorship budget): an x402 `batch-settlement` deposit (the payer's signed
//! authorization, into the channel's escrow, the settlement contract) or sweep (what a receiver
//! claimed, from the escrow to it). It goes through the same steps as every payment: a claim on
//! its identity in the payment's own row, write-ahead, broadcast, and the chain's verdict read
//! from what landed (for a deposit the contract's `Deposited` event for this payer, for a sweep
//! the token's transfer to the receiver), so it moves money at most once, whoever asks how often.

use std::time::Duration;

use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::{AtomicAmount, Network};

use super::pipeline::Source;
use super::{PROOF_DIGEST, PaymentError, Payments, detached, new_id, proof_digest, same_proof};
use crate::chains::Signable;
use crate::plans::Sponsorship;
use crate::store::{NewPayment, StoredPayment};

/// A contract payment to settle (its call, signed by the facilitator's account on each attempt,
/// comes beside it).
pub struct ContractPayment {
    /// The seller's account (whose sponsorship budget pays the fees).
    pub account: String,
    /// Its plan's budget.
    pub sponsorship: Sponsorship,
    /// The chain.
    pub network: Network,
    /// Whose money moves (canonical address).
    pub from: String,
    /// Where it goes (canonical address).
    pub to: String,
    /// The token (canonical address) and its decimals.
    pub token: (String, u8),
    /// Base units moved.
    pub amount: u128,
    /// Its identity (a deposit's authorization, a sweep's claimed total): the one claim on it.
    pub proof_id: String,
    /// The payload asking for it.
    pub payload: PaymentPayload,
    /// The most its gas can cost, native base units.
    pub fee: Option<u128>,
    /// The resource the seller sells.
    pub resource: Option<String>,
    /// How long to wait for the chain's verdict.
    pub wait: Duration,
}

/// What checking a contract payment against the chain made of it: the call to send, and what
/// only the chain tells.
pub struct Prepared {
    /// The call, signed by the facilitator's account on each attempt.
    pub call: Box<dyn Signable>,
    /// The token's decimals.
    pub decimals: u8,
    /// Base units it moves.
    pub amount: u128,
    /// The most its gas can cost, native base units.
    pub fee: Option<u128>,
}

impl Payments {
    /// Settles a contract payment once, checking it first: answered with its payment when one
    /// holds its identity already, else `prepare`d (checked against the chain, simulated,
    /// priced) and settled: claimed, written ahead, broadcast, its verdict read from what landed.
    ///
    /// A refusal from `prepare` is looked up again before it is the answer: a twin request, or
    /// the settlement a hung-up request left running, may have claimed and sent this very
    /// payment while this one was checking, and the chain then refuses what is done already
    /// (an authorization used, a refund nonce taken); that payment is the answer.
    ///
    /// # Errors
    /// `prepare`'s, when no payment holds the identity; [`PaymentError::ProofUsed`] when another
    /// payload or seller holds it; [`PaymentError::SponsorshipSpent`]; as [`Self::receive`].
    pub async fn contract_payment_checked(
        &self,
        d: ContractPayment,
        prepare: impl Future<Output = Result<Prepared, PaymentError>>,
    ) -> Result<StoredPayment, PaymentError> {
        if let Some(holder) = self.contract_payment_claimed(&d).await? {
            return Ok(holder);
        }
        match prepare.await {
            Ok(Prepared { call, decimals, amount, fee }) => {
                self.contract_payment(ContractPayment { token: (d.token.0, decimals), amount, fee, ..d }, call).await
            }
            Err(refused @ PaymentError::Refused(_)) => self.contract_payment_claimed(&d).await?.ok_or(refused),
            Err(e) => Err(e),
        }
    }

    /// Settles a contract payment once. The same payload presented again by the same seller is answered
    /// with its payment (resumed when it was left unfinished); another payload claiming the
    /// same identity, or another seller, is refused as used.
    ///
    /// # Errors
    /// [`PaymentError::ProofUsed`], [`PaymentError::SponsorshipSpent`], and as
    /// [`Self::receive`].
    async fn contract_payment(
        &self,
        d: ContractPayment,
        call: Box<dyn Signable>,
    ) -> Result<StoredPayment, PaymentError> {
        let this = self.clone();
        detached(async move { this.contract_payment_now(d, call).await }).await
    }

    /// A contract payment whose identity is claimed already: answered as [`Self::contract_payment`] answers
    /// it (`None` when it is not claimed). Asked before the chain is: a used authorization no
    /// longer simulates, and must still be answered as used, or with its own payment.
    ///
    /// # Errors
    /// As [`Self::contract_payment`].
    async fn contract_payment_claimed(&self, d: &ContractPayment) -> Result<Option<StoredPayment>, PaymentError> {
        let chain = self.chain(&d.network)?;
        match self.store().payment_by_proof(&d.proof_id).await? {
            Some(holder) => self.answer_contract_payment(&*chain, holder, d).await.map(Some),
            None => Ok(None),
        }
    }

    async fn contract_payment_now(
        &self,
        d: ContractPayment,
        call: Box<dyn Signable>,
    ) -> Result<StoredPayment, PaymentError> {
        let chain = self.chain(&d.network)?;
        if let Some(holder) = self.store().payment_by_proof(&d.proof_id).await? {
            return self.answer_contract_payment(&*chain, holder, &d).await;
        }
        let (family, day, fee) = self.reserve_fees(&d.account, d.sponsorship, d.network.family(), d.fee).await?;
        let mut metadata = serde_json::Map::new();
        metadata.insert("scheme".to_owned(), tollgate_protocol::x402::batch::SCHEME.into());
        metadata.insert(PROOF_DIGEST.to_owned(), proof_digest(&d.payload).into());
        let payment = NewPayment {
            id: new_id(),
            owner_account: d.account.clone(),
            owner_side: Direction::Received,
            counterparty_account: self.account_of(&d.from).await?,
            status: PaymentStatus::Verified,
            mode: PaymentMode::Hosted,
            network: d.network.clone(),
            from: d.from.clone(),
            to: d.to.clone(),
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
                    Some(holder) => self.answer_contract_payment(&*chain, holder, &d).await,
                    None => Err(PaymentError::ProofUsed { payment_id, holder: None }),
                }
            }
            other => other,
        }
    }

    /// A claimed authorization presented again: its own seller with the very payload is
    /// answered with the payment (pushed on while unfinished); anyone else is refused.
    async fn answer_contract_payment(
        &self,
        chain: &dyn crate::chains::Chain,
        holder: StoredPayment,
        d: &ContractPayment,
    ) -> Result<StoredPayment, PaymentError> {
        let p = &holder.payment;
        // The very payload (its digest), from the same account, to the same party: what it moves
        // is the payload's and the chain's, read when it was recorded.
        let own = p.owner_account == d.account && p.to == d.to && same_proof(p, &d.payload);
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
