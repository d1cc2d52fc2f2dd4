//! Incoming payments: a buyer's proof checked against the seller's terms, then settled by the
//! facilitator ([`Payments::receive`], the gateway's hosted receive and x402 `/settle`), handed to
//! the seller to settle ([`Payments::hand_over`], local mode), or only checked
//! ([`Payments::verify`], x402 `/verify`).

use chrono::{DateTime, Utc};
use tollgate_protocol::Address;
use tollgate_protocol::gateway::{PaymentMode, PaymentStatus};

use super::pipeline::Source;
use super::{PaymentError, Payments, Receive, Repeat, covers, detached};
use crate::chains::{Chain, Checked, Intent, ProofError, Settle, Settler};
use crate::plans::Sponsorship;
use crate::store::{AnswerClaim, NewPayment, StoredPayment};
use tollgate_protocol::ticket::{Answered, Ticket};

/// How long a local-mode transaction is offered for (Solana's own limit, ~150 blocks, is about
/// as long).
pub const VALIDITY: chrono::Duration = chrono::Duration::seconds(60);

/// A checked proof handed to the seller to settle (local mode), recorded as a `built` payment.
#[derive(Debug, Clone)]
pub struct Handed {
    /// The payment (its proof claimed).
    pub payment: StoredPayment,
    /// What the seller signs (as fee payer / sender) or just broadcasts, in the chain's bytes.
    pub transaction: Vec<u8>,
    /// Fee the seller pays, native base units.
    pub fee: u128,
    /// Last block at which it can land.
    pub horizon: u64,
    /// When the offer ends.
    pub expires_at: DateTime<Utc>,
}

/// What an x402 settlement did.
#[derive(Debug)]
pub enum Settlement {
    /// A payment was claimed and settled (or is settling: see its status).
    Settled(Box<StoredPayment>),
    /// An `upto` charge of nothing: the authorization holds, nothing moved or was recorded.
    NothingCharged {
        /// Who authorized it.
        payer: Address,
    },
}

impl Payments {
    /// Checks a proof against `r.terms` and settles it to `r.account`: broadcast once, or
    /// recorded when it is a receipt of a confirmed transfer; waits `r.wait` for the verdict.
    /// A proof the caller settled before with the same terms is answered with that payment
    /// (resumed if it was left unfinished).
    ///
    /// # Errors
    /// [`PaymentError::Refused`], [`PaymentError::ProofUsed`], [`PaymentError::Unserved`],
    /// [`PaymentError::Unavailable`], [`PaymentError::Internal`].
    pub async fn receive(&self, r: Receive) -> Result<StoredPayment, PaymentError> {
        let this = self.clone();
        detached(async move { this.receive_now(r).await }).await
    }

    async fn receive_now(&self, r: Receive) -> Result<StoredPayment, PaymentError> {
        let chain = self.chain(&r.terms.network)?;
        let (checked, proof_id) = match self.checked(&*chain, &r, (Settler::Facilitator, Intent::Settle)).await? {
            Ok(checked) => checked,
            Err(holder) => return self.answer_claimed(&*chain, holder, &r).await,
        };
        let sponsored = self.sponsor(&r, &checked).await?;
        let payment = self.received(&r.account, &r.terms, &checked, (proof_id, &r.payload, &r.repeat)).await?;
        let ticket = payment.ticket.clone();
        let settled = match checked.settle {
            Settle::Recorded { tx_id } => self.record_confirmed(&*chain, payment, tx_id).await,
            Settle::Broadcast(outgoing) => self.settle_new(&*chain, payment, Source::Ready(outgoing), r.wait).await,
            Settle::Sign(signer) => self.settle_new(&*chain, payment, Source::Sign(signer), r.wait).await,
            Settle::Handover { .. } | Settle::Nothing => {
                Err(PaymentError::Internal("a hosted receive was not prepared to settle by the facilitator".into()))
            }
        };
        match settled {
            // Recorded with its first answer, and not confirmed within this job's wait: that
            // answer is not this request's to serve. The one that finds it confirmed claims it.
            Ok(stored) if ticket.is_some() && stored.payment.status != PaymentStatus::Confirmed => {
                self.store().release_answer(&stored.payment.id).await?;
                Ok(stored)
            }
            Ok(stored) => Ok(Self::with_answers(stored, ticket.as_ref())),
            // A twin request claimed it between our look and our insert: this one sent nothing,
            // and gives back what it reserved of the account's budget.
            Err(PaymentError::ProofUsed { payment_id, .. }) => {
                if let Some((family, day, fee)) = sponsored {
                    self.store().release_sponsorship(&r.account, family, day, fee).await?;
                }
                match self.store().get_payment(&payment_id).await? {
                    Some(holder) => self.answer_claimed(&*chain, holder, &r).await,
                    None => Err(PaymentError::ProofUsed { payment_id, holder: None }),
                }
            }
            other => other,
        }
    }

    /// A claimed proof presented again. Only the request that claimed it is ever answered with
    /// its verdict (a seller serves once per proof): a twin of the caller's with the same terms
    /// pushes an unfinished payment on (so a retry after a failure between two steps completes
    /// it) and is answered with it while it is still unfinished, and with a verdict that moved
    /// nothing (failed, expired); once it is confirmed, and for anyone else, the proof is used.
    async fn answer_claimed(
        &self,
        chain: &dyn Chain,
        mut holder: StoredPayment,
        r: &Receive,
    ) -> Result<StoredPayment, PaymentError> {
        let p = &holder.payment;
        // Made with this very proof: not another payload claiming its identity (a payer and
        // nonce are public on chain once settled, a signature is anyone's to forge).
        let same_proof = super::same_proof(p, &r.payload);
        let own = p.owner_account == r.account && p.mode == PaymentMode::Hosted && covers(p, &r.terms) && same_proof;
        if own && !p.status.is_final() {
            holder = self.resume(chain, holder, r.wait).await?;
            if !holder.payment.status.is_final() {
                return Ok(holder);
            }
        }
        let confirmed = holder.payment.status == PaymentStatus::Confirmed;
        // A verdict that moved nothing (failed, or expired: its transaction can no longer land)
        // is its claimer's to hear again: nothing was paid, so nothing is served twice.
        if own && holder.payment.status.is_final() && !confirmed {
            return Ok(holder);
        }
        if let (true, true, Repeat::Counted(ticket)) = (own, confirmed, &r.repeat) {
            return self.answer_again(holder, ticket).await;
        }
        let recent = holder.confirmed_at.is_some_and(|at| self.now() - at <= super::REPEAT_WINDOW);
        if own && r.repeat == Repeat::Confirmed && confirmed && recent {
            return Ok(holder);
        }
        let p = &holder.payment;
        // Named only to its owner, presenting that very proof (a seller's layer follows the
        // payment it names).
        let visible = holder.visible_to(&r.account) && same_proof;
        Err(PaymentError::ProofUsed { payment_id: p.id.clone(), holder: visible.then(|| Box::new(holder)) })
    }

    /// Gives back one answer of `account`'s received payment `payment_id`: its seller's layer
    /// served nothing of it (its handler failed, or the buyer hung up before the first byte).
    /// What its ticket still counts.
    ///
    /// # Errors
    /// [`PaymentError::NotFound`] for a payment that is not `account`'s received one, or that
    /// bought no counted answers.
    pub async fn release_answer(&self, account: &str, payment_id: &str) -> Result<Answered, PaymentError> {
        let not_found = || PaymentError::NotFound(format!("no received payment {payment_id} with a ticket"));
        let stored = self.store().get_payment(payment_id).await?.ok_or_else(not_found)?;
        let p = &stored.payment;
        if p.owner_account != account || p.owner_side != tollgate_protocol::gateway::Direction::Received {
            return Err(not_found());
        }
        self.store().release_answer(payment_id).await?.ok_or_else(not_found)
    }

    /// A payment recorded with its first answer (`ticket`), as the answer that claimed it says.
    fn with_answers(stored: StoredPayment, ticket: Option<&Ticket>) -> StoredPayment {
        let answers = ticket.map(|t| Answered { served: 1, uses: t.uses });
        StoredPayment { answers, ..stored }
    }

    /// A confirmed payment of the caller's, presented again with its proof: one more answer
    /// claimed in the database, or why the payment buys no more.
    async fn answer_again(&self, holder: StoredPayment, ticket: &Ticket) -> Result<StoredPayment, PaymentError> {
        let payment_id = holder.payment.id.clone();
        let used = |message: String| PaymentError::AnswersUsed { payment_id: payment_id.clone(), message };
        match self.store().claim_answer(&payment_id, ticket, self.now()).await? {
            AnswerClaim::Claimed(answered) => Ok(StoredPayment { answers: Some(answered), ..holder }),
            AnswerClaim::UsedUp(answered) => Err(used(format!(
                "this payment has served the {} answer{} it buys: pay again",
                answered.uses,
                if answered.uses == 1 { "" } else { "s" }
            ))),
            AnswerClaim::Expired { seconds } => Err(used(format!(
                "this payment serves its request again for {seconds} s after its first answer, and that has passed: \
                 pay again"
            ))),
            AnswerClaim::OtherRequest => Err(used(
                "this payment was made for another request (a repeat is served only for the same request: method, \
                 resource and body): pay for this one"
                    .to_owned(),
            )),
        }
    }

    /// Steps 1 to 3: the payload admitted, no claim on it, checked on chain, what it pays
    /// admitted; with the identity it was looked up under, which its payment claims.
    /// `Ok(Err(holder))` when a payment holds it already.
    async fn checked(
        &self,
        chain: &dyn Chain,
        r: &Receive,
        (settler, intent): (Settler, Intent),
    ) -> Result<Result<(Checked, String), StoredPayment>, PaymentError> {
        r.terms.admit_payload(&r.payload)?;
        let proof = chain.decode(&r.payload, &r.terms.asset);
        // Asked before the chain is: a used proof may no longer simulate, and must still be "used".
        if let Some(holder) = self.holder(proof.id()).await? {
            return Ok(Err(holder));
        }
        let checked = match chain.check(&proof, &r.terms, settler, intent, self.now().timestamp()).await {
            Ok(c) => c,
            Err(ProofError::Refused(refusal)) => {
                // A twin request may have settled it while it was being checked.
                return match self.holder(proof.id()).await? {
                    Some(holder) => Ok(Err(holder)),
                    None => Err(refusal.into()),
                };
            }
            Err(e) => return Err(e.into()),
        };
        r.terms.admit(&r.payload, &checked)?;
        // What was looked up is what is claimed: a proof the chain passed has its identity.
        let proof_id = proof.id().ok_or_else(|| {
            PaymentError::Internal(format!("a proof that passed its check on {} has no identity", r.terms.network))
        })?;
        Ok(Ok((checked, proof_id.to_owned())))
    }

    /// The payment holding a proof.
    async fn holder(&self, proof_id: Option<&str>) -> Result<Option<StoredPayment>, PaymentError> {
        match proof_id {
            Some(id) => Ok(self.store().payment_by_proof(id).await?),
            None => Ok(None),
        }
    }

    /// Counts the fees of a settlement the facilitator signs (and pays for: x402 `exact`) against
    /// the account's daily budget ([`Self::reserve_fees`]). `None` when the facilitator signs
    /// nothing.
    async fn sponsor(
        &self,
        r: &Receive,
        checked: &Checked,
    ) -> Result<Option<(tollgate_protocol::ChainFamily, i64, u64)>, PaymentError> {
        if !matches!(checked.settle, Settle::Sign(_)) {
            return Ok(None);
        }
        self.reserve_fees(&r.account, r.sponsorship, r.terms.network.family(), checked.fee).await.map(Some)
    }

    /// Counts `fee` (native base units: the most a transaction the facilitator signs and pays
    /// for can cost) against `account`'s daily sponsorship budget, atomically in storage, before
    /// anything is claimed or sent. What was counted (chain family, day, amount), to give back if
    /// nothing is sent.
    ///
    /// # Errors
    /// [`PaymentError::SponsorshipSpent`] when it would pass the budget (nothing counted).
    pub async fn reserve_fees(
        &self,
        account: &str,
        sponsorship: Sponsorship,
        family: tollgate_protocol::ChainFamily,
        fee: Option<u128>,
    ) -> Result<(tollgate_protocol::ChainFamily, i64, u64), PaymentError> {
        let fee = u64::try_from(fee.unwrap_or(0)).unwrap_or(u64::MAX);
        let budget = sponsorship.per_day(family);
        let (day, renews_in_secs) = self.sponsorship_day();
        match self.store().reserve_sponsorship(account, family, day, fee, budget).await? {
            Some(_) => Ok((family, day, fee)),
            None => Err(PaymentError::SponsorshipSpent {
                message: format!(
                    "the network fees this facilitator pays for your account today would pass the plan's budget of \
                     {budget} {family} base units (this transaction may cost {fee}); it renews at 00:00 UTC"
                ),
                renews_in_secs,
            }),
        }
    }

    /// Today (days since the Unix epoch, UTC) and the seconds until tomorrow.
    fn sponsorship_day(&self) -> (i64, u64) {
        let now = self.now().timestamp();
        (now.div_euclid(86_400), u64::try_from(86_400 - now.rem_euclid(86_400)).unwrap_or(86_400))
    }

    /// An x402 settlement: [`Self::receive`], except that an `upto` charge of nothing moves
    /// nothing — the authorization is verified for the most it allows, no payment is recorded
    /// and the proof is not claimed (the buyer may present it again: each charge of it is the
    /// seller's to make, and at most one moves money, as Permit2 spends its nonce once).
    ///
    /// # Errors
    /// As [`Self::receive`] and [`Self::verify`].
    pub async fn settle_x402(&self, r: Receive) -> Result<Settlement, PaymentError> {
        if !r.terms.charges_nothing() {
            return self.receive(r).await.map(|p| Settlement::Settled(Box::new(p)));
        }
        let tollgate_protocol::x402::PaymentPayload::V2(v2) = &r.payload else {
            return Err(PaymentError::Invalid("upto is an x402 v2 scheme".into()));
        };
        let most = crate::chains::Price::Exactly(v2.accepted.amount.get());
        let r = Receive { terms: crate::chains::Terms { price: most, ..r.terms.clone() }, ..r };
        Ok(Settlement::NothingCharged { payer: self.verify(r).await? })
    }

    /// Would this proof settle these terms? The payer when it would. A proof the facilitator
    /// would pay the fees of (x402 `exact`) is refused once the account's daily budget would not
    /// cover another settlement like the dearest counted today, so a seller that settles after
    /// serving does not serve what cannot be settled.
    ///
    /// # Errors
    /// As [`Self::receive`] (a claimed proof is always [`PaymentError::ProofUsed`]).
    pub async fn verify(&self, r: Receive) -> Result<Address, PaymentError> {
        let chain = self.chain(&r.terms.network)?;
        // The schemes whose settlement the facilitator pays for.
        if [tollgate_protocol::x402::SCHEME_EXACT, tollgate_protocol::x402::SCHEME_UPTO].contains(&r.payload.scheme()) {
            let family = r.terms.network.family();
            let (day, renews_in_secs) = self.sponsorship_day();
            let budget = r.sponsorship.per_day(family);
            let (spent, largest) = self.store().sponsorship_spent(&r.account, family, day).await?;
            if spent > 0 && spent.saturating_add(largest) > budget {
                return Err(PaymentError::SponsorshipSpent {
                    message: format!(
                        "the plan's budget of {budget} {family} base units of network fees this facilitator pays \
                         for your account today is spent ({spent}; another settlement may cost {largest}); it \
                         renews at 00:00 UTC"
                    ),
                    renews_in_secs,
                });
            }
        }
        match self.checked(&*chain, &r, (Settler::Facilitator, Intent::Verify)).await? {
            Ok((checked, _)) => Ok(checked.payer),
            Err(holder) => {
                let visible = holder.visible_to(&r.account);
                Err(PaymentError::ProofUsed {
                    payment_id: holder.payment.id.clone(),
                    holder: visible.then(|| Box::new(holder)),
                })
            }
        }
    }

    /// Local mode: checks a proof for `r.terms.pay_to`'s wallet and returns what settles it —
    /// the seller signs (as fee payer or sender) and broadcasts it —, recorded as a `built`
    /// payment with the proof claimed.
    ///
    /// # Errors
    /// As [`Self::receive`].
    pub async fn hand_over(&self, r: Receive) -> Result<Handed, PaymentError> {
        let this = self.clone();
        detached(async move { this.hand_over_now(r).await }).await
    }

    async fn hand_over_now(&self, r: Receive) -> Result<Handed, PaymentError> {
        let chain = self.chain(&r.terms.network)?;
        let seller = Settler::Seller(r.terms.pay_to);
        let (checked, proof_id) = match self.checked(&*chain, &r, (seller, Intent::Settle)).await? {
            Ok(checked) => checked,
            Err(holder) => return Err(PaymentError::ProofUsed { payment_id: holder.payment.id, holder: None }),
        };
        let Settle::Handover { transaction, fee, horizon } = &checked.settle else {
            return Err(PaymentError::Invalid(
                "a receipt is for a transfer already on chain: present it to /payment/receive".into(),
            ));
        };
        let (transaction, fee, horizon) = (transaction.clone(), *fee, *horizon);
        let expires_at = self.now() + VALIDITY;
        let payment = NewPayment {
            status: PaymentStatus::Built,
            mode: PaymentMode::Local,
            expires_at: Some(expires_at),
            last_valid_block_height: Some(horizon),
            tx_raw: Some(transaction.clone()),
            ..self.received(&r.account, &r.terms, &checked, (proof_id, &r.payload, &r.repeat)).await?
        };
        let payment = self.store().insert_payment(&payment).await?;
        Ok(Handed { payment, transaction, fee, horizon, expires_at })
    }
}
