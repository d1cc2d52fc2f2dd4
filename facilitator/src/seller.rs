//! The facilitator core in process, for a seller's layer: [`InProcess`] implements the
//! `tollgate` layer's [`Facilitator`], so a seller that runs the payment core itself (one
//! process: its routes, the layer, the core and the chains) settles without an HTTP hop or an
//! API key — with the verdicts the x402 API would give (`POST /verify`, `POST /settle`), from the
//! same jobs ([`Payments::verify`], [`Payments::receive`]).
//!
//! x402 `batch-settlement` calls (deposits, claims, sweeps, refunds) are answered by the same
//! channel service as the API's (`Channels::verify_x402`, `Channels::settle_x402`).
//!
//! A proof is bound to the resource and method the layer names, is settled once, and a repeat
//! of it by the same seller for the same request claims one more answer of its ticket in the
//! database (as over HTTP), so several seller processes on one database share one count.

use async_trait::async_trait;
use tollgate::facilitator::{BatchAnswer, BatchCall, Claim, Facilitator, Payment, Verdict};
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::Supported;

use crate::api::validate;
use crate::app::AppState;
use crate::chains::Chains;
use crate::payment::{PaymentError, Payments, Receive, Repeat, Settlement};
use crate::plans::{Plan, Sponsorship};
use crate::store::StoredPayment;

/// The facilitator core as a seller's [`Facilitator`], settling to one account.
#[derive(Clone)]
pub struct InProcess {
    payments: Payments,
    chains: std::sync::Arc<Chains>,
    channels: std::sync::Arc<crate::channels::Channels>,
    account: String,
    sponsorship: Sponsorship,
    /// Where a confirmed settlement's route declaration is cataloged; `None` when the catalog is
    /// off.
    catalog: Option<(std::sync::Arc<crate::discovery::Catalog>, crate::clock::SharedClock)>,
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
            channels: std::sync::Arc::new(state.channels()),
            account: account.into(),
            sponsorship: state.config.plans.get(plan).sponsorship,
            catalog: state.config.discovery.catalog.then(|| (state.catalog.clone(), state.clock.clone())),
        }
    }

    /// Catalogs what the layer declares of the route a confirmed settlement paid for (the
    /// layer's declaration: a buyer's echo never reaches the core).
    fn catalog(&self, claim: Claim<'_>) {
        let (Some((catalog, clock)), Some(declared)) = (&self.catalog, claim.discovery) else { return };
        let mut extensions = serde_json::Map::new();
        extensions.insert(tollgate_protocol::x402::bazaar::EXTENSION.to_owned(), declared.clone());
        let version = match claim.payload {
            tollgate_protocol::x402::PaymentPayload::V1(_) => 1,
            tollgate_protocol::x402::PaymentPayload::V2(_) => 2,
        };
        let _ = catalog.settled(&self.account, version, claim.resource, claim.requirement, &extensions, clock.now());
    }

    /// The core's job for a claim: its requirement as the terms, bound to the layer's resource
    /// and method — which must pass what the HTTP API asks of them (a resource URL of at most
    /// 2,048 characters without control characters, a method in capitals); `None` when they do
    /// not ([`unbound`]).
    fn job(&self, claim: Claim<'_>) -> Option<Receive> {
        let url = claim.resource.url.as_str();
        validate::x402_resource(Some(url)).ok()?;
        let method = validate::method(claim.resource.method.as_deref()).ok()?;
        claim.ticket.check().ok()?;
        let repeat = Repeat::Counted(claim.ticket.clone());
        let (payload, requirement) = (claim.payload.clone(), claim.requirement.clone());
        let bound = (Some(url.to_owned()), method);
        Some(Receive::x402(self.account.clone(), payload, requirement, bound, repeat, self.sponsorship))
    }
}

/// A request whose resource, method or ticket cannot be bound to a payment: nothing settles,
/// and the layer answers as it does when the HTTP API refuses the request (unavailable).
fn unbound() -> Verdict {
    Verdict::Unavailable {
        timed_out: false,
        reason: "the request's resource URL (at most 2,048 characters, no control characters), method (in \
                 capitals) or ticket terms cannot be bound to a payment"
            .into(),
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
        let Some(job) = self.job(claim) else { return unbound() };
        match self.payments.verify(job).await {
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

    /// Settles, or answers the settlement made before for the same request with one more answer
    /// claimed (or refuses it once its ticket is used up).
    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        let Some(job) = self.job(claim) else { return unbound() };
        match self.payments.settle_x402(job).await {
            Ok(Settlement::Settled(stored)) => {
                if stored.payment.status == tollgate_protocol::gateway::PaymentStatus::Confirmed {
                    self.catalog(claim);
                }
                verdict(*stored, claim)
            }
            Ok(Settlement::NothingCharged { payer }) => {
                let r = claim.requirement;
                let nothing = Payment::new(r.network.clone(), r.asset, AtomicAmount(0), r.pay_to);
                Verdict::Paid(nothing.with_payer(payer.to_string()))
            }
            Err(e) => refusal(e),
        }
    }

    /// Settling again follows the payment: an unfinished one is pushed on and answered, a
    /// confirmed one claims one more answer.
    async fn follow(&self, _payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        self.settle(claim).await
    }

    /// A pass's holder signing in, checked by the core.
    async fn sign_in(
        &self,
        sign_in: tollgate::SignInClaim<'_>,
    ) -> Result<tollgate_protocol::gateway::PassHolder, Verdict> {
        let origin = tollgate_protocol::siwx::Origin::parse(sign_in.origin)
            .map_err(|reason| Verdict::Unavailable { timed_out: false, reason })?;
        let request = crate::payment::SignInRequest {
            account: self.account.clone(),
            header: sign_in.header.to_owned(),
            origin,
            scope: sign_in.scope.to_owned(),
        };
        match self.payments.sign_in(request).await {
            Ok(signed) => Ok(tollgate_protocol::gateway::PassHolder {
                payer: signed.payer.to_string(),
                network: signed.pass.network,
                payment_id: signed.pass.payment_id,
                valid_until: signed.pass.valid_until,
            }),
            Err(e) => Err(refusal(e)),
        }
    }

    /// An x402 `batch-settlement` call answered by the core as the HTTP API answers it (the
    /// same [`crate::channels::Channels::verify_x402`] and `settle_x402`), for this seller's
    /// account: its deposits, claims, sweeps and refunds.
    async fn batch(&self, call: BatchCall<'_>) -> Result<BatchAnswer, Verdict> {
        let resource = call.payload.resource.as_ref().map(|r| r.url.clone());
        if validate::x402_resource(resource.as_deref()).is_err() {
            return Err(unbound());
        }
        let payload = tollgate_protocol::x402::PaymentPayload::V2(Box::new(call.payload.clone()));
        let unavailable = |e: PaymentError| Verdict::Unavailable { timed_out: false, reason: e.to_string() };
        if call.settle {
            let seller = crate::channels::Seller { account: self.account.clone(), sponsorship: self.sponsorship };
            let answer = self.channels.settle_x402(&seller, &payload, call.requirement, resource).await;
            BatchAnswer::of_settle(answer.map_err(unavailable)?)
        } else {
            let answer = self.channels.verify_x402(&payload, call.requirement).await;
            Ok(BatchAnswer::of_verify(answer.map_err(unavailable)?))
        }
    }

    /// One answer of the payment given back in the database.
    async fn release(&self, payment: &Payment) {
        let Some(id) = &payment.payment_id else { return };
        if let Err(e) = self.payments.release_answer(&self.account, id).await {
            tracing::warn!(payment_id = %id, error = %e, "an answer could not be given back");
        }
    }
}

/// A settlement as the layer's verdict: paid only when it pays the claim's requirement, with
/// the answers it has served (the core claimed this one).
fn verdict(stored: StoredPayment, claim: Claim<'_>) -> Verdict {
    let p = &stored.payment;
    match p.status {
        PaymentStatus::Confirmed => {
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
            let paid = match stored.answers {
                Some(answers) => paid.with_answers(answers),
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

/// A job that made no settlement, as the layer's verdict — as the HTTP API and
/// [`tollgate::FacilitatorClient`] together would give it: a refusal of the proof in x402's
/// words (`reason: message`, which the layer remembers for the request), else unavailable (the
/// API's other errors: nothing remembered, the buyer may retry).
fn refusal(e: PaymentError) -> Verdict {
    match e.into_x402_refusal() {
        Ok((r, _)) => Verdict::Refused { reason: format!("{}: {}", r.reason.as_str(), r.message) },
        Err(PaymentError::Internal(m)) => {
            tracing::error!(error = %m, "an in-process settlement failed");
            Verdict::Unavailable { timed_out: false, reason: "the facilitator failed (see its log)".into() }
        }
        Err(other) => Verdict::Unavailable { timed_out: false, reason: other.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use tollgate_protocol::gateway::Direction;
    use tollgate_protocol::x402::{Asset, PaymentRequirements, ResourceInfo};
    use tollgate_protocol::{Address, AtomicAmount, ChainFamily, Network};

    use super::*;
    use crate::chains::{Reason, Refusal, Unserved};
    use crate::store::NewPayment;

    fn requirement() -> PaymentRequirements {
        PaymentRequirements {
            scheme: "exact-native".into(),
            network: Network::solana_devnet(),
            amount: AtomicAmount(1_000),
            asset: Asset::Native,
            pay_to: Address::Solana([7; 32]),
            max_timeout_seconds: 60,
            extra: None,
        }
    }

    fn confirmed(ago: chrono::Duration) -> StoredPayment {
        let at = chrono::Utc::now() - ago;
        let r = requirement();
        let parties = (Address::Solana([9; 32]).to_string(), r.pay_to.to_string());
        StoredPayment {
            payment: NewPayment {
                owner_side: Direction::Received,
                status: PaymentStatus::Confirmed,
                transaction: Some("5sig".into()),
                resource: Some("https://shop.test/report".into()),
                ..NewPayment::native("pay_1", "acct", r.network, parties, AtomicAmount(1_000), at)
            },
            seq: 1,
            updated_at: at,
            confirmed_at: Some(at),
            error: None,
            checks: 0,
            answers: None,
        }
    }

    #[test]
    fn a_settlement_pays_the_requirement_with_the_answers_counted() {
        let payload = tollgate_protocol::x402::PaymentPayload::exact_native_v1(
            &Network::solana_devnet(),
            &tollgate_protocol::x402::schemes::ExactNativePayload::Transaction("AQID".into()),
        );
        let resource = ResourceInfo {
            url: "https://shop.test/report".into(),
            description: String::new(),
            mime_type: String::new(),
            method: Some("GET".into()),
            service: tollgate_protocol::x402::bazaar::ServiceMetadata::default(),
        };
        let requirement = requirement();
        let ticket = tollgate_protocol::ticket::Ticket { uses: 2, seconds: 60, request: None, pass: None };
        let claim = Claim {
            header: "",
            payload: &payload,
            requirement: &requirement,
            decimals: ChainFamily::Solana.native_decimals(),
            resource: &resource,
            ticket: &ticket,
            discovery: None,
        };
        let answered = tollgate_protocol::ticket::Answered { served: 2, uses: 2 };
        let counted = StoredPayment { answers: Some(answered), ..confirmed(chrono::Duration::seconds(1)) };
        let Verdict::Paid(paid) = verdict(counted, claim) else { panic!("paid") };
        assert_eq!((paid.answers, paid.payment_id.as_deref()), (Some(answered), Some("pay_1")));
        let mut cheaper = confirmed(chrono::Duration::seconds(1));
        cheaper.payment.amount_atomic = AtomicAmount(999);
        assert!(!matches!(verdict(cheaper, claim), Verdict::Paid(_)), "a payment of less than the requirement");
    }

    #[test]
    fn only_verdicts_on_the_proof_are_refusals_the_layer_remembers() {
        let refused = |e| matches!(refusal(e), Verdict::Refused { .. });
        assert!(refused(PaymentError::Refused(Refusal::new(Reason::InvalidPayload, "bad"))));
        assert!(refused(PaymentError::ProofUsed { payment_id: "pay_1".into(), holder: None }));
        assert!(refused(PaymentError::Unserved(Unserved::Unavailable("solana:x".into()))));
        let wrong_family = Unserved::WrongFamily { network: Network::solana_devnet(), family: ChainFamily::Evm };
        assert!(!refused(PaymentError::Unserved(wrong_family)));
        assert!(!refused(PaymentError::Invalid("x".into())));
        assert!(!refused(PaymentError::Internal("disk".into())));
        assert!(!refused(PaymentError::SponsorshipSpent { message: "spent".into(), renews_in_secs: 1 }));
    }
}
