//! The facilitator core in process, for a seller's layer: [`InProcess`] implements the
//! `tollgate` layer's [`Facilitator`], so a seller that runs the payment core itself (one
//! process: its routes, the layer, the core and the chains) settles without an HTTP hop or an
//! API key — with the verdicts the x402 API would give (`POST /verify`, `POST /settle`), from the
//! same jobs ([`Payments::verify`], [`Payments::receive`]).
//!
//! A proof is bound to the resource and method the layer names, is settled once, and a repeat
//! of it by the same seller for the same request is answered with that settlement for the
//! layer's ticket lifetime, as over HTTP.

use async_trait::async_trait;
use tollgate::facilitator::{Claim, Facilitator, Payment, Verdict};
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::Supported;

use crate::app::AppState;
use crate::chains::{Chains, Unserved};
use crate::payment::{PaymentError, Payments, Receive, Repeat};
use crate::plans::{Plan, Sponsorship};
use crate::store::StoredPayment;

/// The facilitator core as a seller's [`Facilitator`], settling to one account.
#[derive(Clone)]
pub struct InProcess {
    payments: Payments,
    chains: std::sync::Arc<Chains>,
    account: String,
    sponsorship: Sponsorship,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").field("account", &self.account).finish_non_exhaustive()
    }
}

impl InProcess {
    /// The core of `state`, recording payments to `account` under `plan`'s fee sponsorship.
    #[must_use]
    pub fn new(state: &AppState, account: impl Into<String>, plan: Plan) -> Self {
        Self {
            payments: state.payments(),
            chains: state.chains.clone(),
            account: account.into(),
            sponsorship: state.config.plans.get(plan).sponsorship,
        }
    }

    /// The core's job for a claim: its requirement as the terms, bound to the layer's resource
    /// and method.
    fn job(&self, claim: Claim<'_>, repeat: Repeat) -> Receive {
        let bound = (Some(claim.resource.url.clone()), claim.resource.method.clone());
        let (payload, requirement) = (claim.payload.clone(), claim.requirement.clone());
        Receive::x402(self.account.clone(), payload, requirement, bound, repeat, self.sponsorship)
    }
}

#[async_trait]
impl Facilitator for InProcess {
    async fn supported(&self) -> Result<Supported, Verdict> {
        Ok(self.chains.supported())
    }

    /// One job: checked, claimed and settled.
    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        self.settle(claim).await
    }

    /// Would it settle? A proof this seller settled already is answered with that settlement
    /// (for the same request: else it is used).
    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        match self.payments.verify(self.job(claim, Repeat::Used)).await {
            Ok(payer) => {
                let r = claim.requirement;
                Verdict::Paid(
                    Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to).with_payer(payer.to_string()),
                )
            }
            Err(PaymentError::ProofUsed { .. }) => self.settle(claim).await,
            Err(e) => refusal(e),
        }
    }

    /// Settles, or answers the settlement made before for the same request (x402 `/settle` is
    /// idempotent for one seller).
    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        match self.payments.receive(self.job(claim, Repeat::Confirmed)).await {
            Ok(stored) => verdict(stored, claim),
            Err(e) => refusal(e),
        }
    }

    /// Settling again follows the payment: an unfinished one is pushed on and answered.
    async fn follow(&self, _payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        self.settle(claim).await
    }
}

/// A settlement as the layer's verdict: paid only when confirmed within the ticket's lifetime
/// and paying the claim's requirement.
fn verdict(stored: StoredPayment, claim: Claim<'_>) -> Verdict {
    let p = &stored.payment;
    match p.status {
        PaymentStatus::Confirmed => {
            let lifetime = chrono::Duration::from_std(claim.lifetime).unwrap_or(chrono::Duration::MAX);
            if stored.confirmed_at.is_none_or(|at| chrono::Utc::now() - at > lifetime) {
                return Verdict::Refused {
                    reason: "this payment was confirmed longer ago than a paid request is served again".into(),
                };
            }
            let paid = match (p.asset.parse(), p.to.parse()) {
                (Ok(asset), Ok(pay_to)) => Payment::new(p.network.clone(), asset, p.amount_atomic, pay_to)
                    .with_payer(p.from.clone())
                    .with_payment_id(p.id.clone()),
                _ => return Verdict::Unavailable { timed_out: false, reason: "a stored payment is unreadable".into() },
            };
            let paid = match &p.transaction {
                Some(tx) => paid.with_transaction(tx.clone()),
                None => paid,
            };
            if paid.covers(claim.requirement) {
                Verdict::Paid(paid)
            } else {
                Verdict::Refused { reason: "this payment does not pay this request".into() }
            }
        }
        PaymentStatus::Failed | PaymentStatus::Expired => Verdict::Refused {
            reason: format!("failed_on_chain: {}", stored.error.as_deref().unwrap_or(p.status.as_str())),
        },
        // Broadcast, no verdict yet: the buyer has paid; a retry follows it.
        _ => Verdict::Pending { payment_id: Some(p.id.clone()), transaction: p.transaction.clone() },
    }
}

/// A job that made no settlement, as the layer's verdict: a refusal in x402's words
/// (`reason: message`), or unavailable when the core could not decide.
fn refusal(e: PaymentError) -> Verdict {
    let refused = |reason: String| Verdict::Refused { reason };
    match e {
        PaymentError::Refused(r) => refused(format!("{}: {}", r.reason.as_str(), r.message)),
        PaymentError::ProofUsed { payment_id, .. } => {
            refused(format!("duplicate_settlement: proof already used (payment {payment_id})"))
        }
        PaymentError::Unserved(u @ Unserved::Unavailable(_)) => {
            refused(format!("invalid_network: this facilitator does not settle: {u}"))
        }
        PaymentError::Invalid(m)
        | PaymentError::InvalidRecipient(m)
        | PaymentError::InsufficientBalance(m)
        | PaymentError::Forbidden(m)
        | PaymentError::NotFound(m) => refused(m),
        PaymentError::Unserved(u) => refused(u.to_string()),
        PaymentError::Unavailable(m) | PaymentError::SponsorshipSpent { message: m, .. } => {
            Verdict::Unavailable { timed_out: false, reason: m }
        }
        PaymentError::Internal(m) => Verdict::Unavailable { timed_out: false, reason: format!("internal: {m}") },
    }
}
