//! What the layer asks of a facilitator ([`Facilitator`]), and its two implementations:
//! [`FacilitatorClient`] over HTTP — Tollgate's gateway (`POST /payment/receive`, one call that
//! verifies and settles) or any x402 facilitator (`POST /verify` + `POST /settle`) — and, in
//! `tollgate-facilitator`, the facilitator core in process.
//!
//! Every answer is a [`Verdict`]. Only [`Verdict::Paid`] serves the handler; a payment the
//! chain has not confirmed yet is [`Verdict::Pending`] (never a refusal: the buyer has paid); a
//! facilitator that cannot be reached is [`Verdict::Unavailable`] (502/504, nothing served).

mod client;

use async_trait::async_trait;
use tollgate_protocol::gateway::PassHolder;
use tollgate_protocol::ticket::{Answered, Ticket};
use tollgate_protocol::x402::{Asset, PaymentPayload, PaymentRequirements, ResourceInfo, Supported};
use tollgate_protocol::{Address, AtomicAmount, Network};

pub use self::client::{DEFAULT_TIMEOUT, FacilitatorClient, SETTLE_MARGIN};

/// A settled payment, as handlers see it in request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Payment {
    /// Who paid, when the facilitator says.
    pub payer: Option<String>,
    /// Atomic units paid.
    pub amount: AtomicAmount,
    /// What with.
    pub asset: Asset,
    /// Where.
    pub network: Network,
    /// To whom.
    pub pay_to: Address,
    /// The settling transaction.
    pub transaction: Option<String>,
    /// The gateway's payment id (x402 facilitators have none).
    pub payment_id: Option<String>,
    /// For a metered price (`upto`): the most the buyer authorized. `amount` is then that most
    /// while the handler runs, and what was charged once settled.
    pub maximum: Option<AtomicAmount>,
    /// The answers the payment has served, this one included, when the facilitator counts them
    /// (Tollgate's does, in its database): the layer then asks it for every repeat, and gives
    /// back with [`Facilitator::release`] an answer that reached no buyer. `None`: the
    /// facilitator does not count (any other x402 facilitator), and the layer counts alone.
    pub answers: Option<Answered>,
    /// A request served to a pass's holder who signed in (`sign-in-with-x`): until when its
    /// pass runs (Unix seconds). The payment is the one that bought the pass.
    pub pass_until: Option<i64>,
}

impl Payment {
    /// A payment of `amount` base units of `asset` on `network` to `pay_to`, as a
    /// [`Facilitator`] reports it (with [`Self::with_payer`], [`Self::with_transaction`],
    /// [`Self::with_payment_id`] when it knows them).
    #[must_use]
    pub const fn new(network: Network, asset: Asset, amount: AtomicAmount, pay_to: Address) -> Self {
        Self {
            payer: None,
            amount,
            asset,
            network,
            pay_to,
            transaction: None,
            payment_id: None,
            maximum: None,
            answers: None,
            pass_until: None,
        }
    }

    /// The same payment, paid by `payer`.
    #[must_use]
    pub fn with_payer(mut self, payer: impl Into<String>) -> Self {
        self.payer = Some(payer.into());
        self
    }

    /// The same payment, settled by `transaction`.
    #[must_use]
    pub fn with_transaction(mut self, transaction: impl Into<String>) -> Self {
        self.transaction = Some(transaction.into());
        self
    }

    /// The same payment, under the facilitator's id `id`.
    #[must_use]
    pub fn with_payment_id(mut self, id: impl Into<String>) -> Self {
        self.payment_id = Some(id.into());
        self
    }

    /// The same payment, having served `answers` (counted by the facilitator).
    #[must_use]
    pub const fn with_answers(mut self, answers: Answered) -> Self {
        self.answers = Some(answers);
        self
    }

    /// The same payment of a metered price, authorized up to `maximum`.
    #[must_use]
    pub const fn with_maximum(mut self, maximum: AtomicAmount) -> Self {
        self.maximum = Some(maximum);
        self
    }

    /// Whether it pays `requirement`'s price: its asset, on its network, to its recipient, at
    /// least its amount (for a metered price, an authorization of at least its maximum). A
    /// payment made for one request of a route may be presented for a dearer one.
    #[must_use]
    pub fn covers(&self, requirement: &PaymentRequirements) -> bool {
        self.asset == requirement.asset
            && self.network == requirement.network
            && self.pay_to == requirement.pay_to
            && self.maximum.unwrap_or(self.amount).get() >= requirement.amount.get()
    }
}

/// What the facilitator said about a proof.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Settled: serve.
    Paid(Payment),
    /// Broadcast, not yet confirmed: ask the buyer to retry with the same proof.
    Pending {
        /// The gateway's payment id, to follow it.
        payment_id: Option<String>,
        /// The transaction, when known.
        transaction: Option<String>,
    },
    /// The proof does not pay as required (or was used).
    Refused {
        /// Why.
        reason: String,
    },
    /// The facilitator could not be asked.
    Unavailable {
        /// It did not answer in time (504) rather than failing (502).
        timed_out: bool,
        /// Why, for the log.
        reason: String,
    },
}

/// A proof presented for a request, as the layer hands it to a facilitator: the buyer's header
/// and its decoded payload, the offer it pays, and what the seller binds the payment to.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The payment header as the buyer sent it (`X-PAYMENT` or `PAYMENT-SIGNATURE`).
    pub header: &'a str,
    /// Its payload, decoded.
    pub payload: &'a PaymentPayload,
    /// The seller's requirement it pays.
    pub requirement: &'a PaymentRequirements,
    /// Decimals of the requirement's asset.
    pub decimals: u8,
    /// The resource paid for, named by the seller (never the buyer's copy of it), with the
    /// request's method: what the payment is bound to.
    pub resource: &'a ResourceInfo,
    /// What the payment buys: the layer's ticket terms, with this request's digest. A
    /// facilitator that counts answers claims one for every verdict that pays.
    pub ticket: &'a Ticket,
    /// The seller's `bazaar` declaration of the route (x402 discovery), sent to the facilitator
    /// in place of whatever the buyer's payload echoes: a catalog holds what the seller
    /// declared, never what a buyer wrote. `None`: the route declares nothing.
    pub discovery: Option<&'a serde_json::Value>,
}

impl<'a> Claim<'a> {
    /// The request's method, as bound (`GET` when the layer named none).
    #[must_use]
    pub fn method(&self) -> &'a str {
        self.resource.method.as_deref().unwrap_or("GET")
    }
}

/// A pass's holder signing in, as the layer hands it to a facilitator.
#[derive(Debug, Clone, Copy)]
pub struct SignInClaim<'a> {
    /// The buyer's `SIGN-IN-WITH-X` header, as sent.
    pub header: &'a str,
    /// The seller's public origin, as the seller configured it.
    pub origin: &'a str,
    /// What the pass must open, as the seller names it.
    pub scope: &'a str,
}

/// A facilitator as the layer uses it: it says what it settles, and verifies, settles or
/// follows a claim, always answering a [`Verdict`] (it never fails otherwise).
#[async_trait]
pub trait Facilitator: Send + Sync + std::fmt::Debug {
    /// What it settles (schemes, networks, and their `extra`, such as a Solana fee payer).
    ///
    /// # Errors
    /// [`Verdict::Unavailable`] when it cannot be asked.
    async fn supported(&self) -> Result<Supported, Verdict>;
    /// Verifies and settles a claim before the handler runs.
    async fn settle_before(&self, claim: Claim<'_>) -> Verdict;
    /// Whether the claim would settle ([`Verdict::Paid`] without a transaction). A proof this
    /// seller settled already for the same terms (its first answer was lost) is answered with
    /// that settlement, so the buyer is never refused after paying.
    async fn verify(&self, claim: Claim<'_>) -> Verdict;
    /// Settles a verified claim (after the handler succeeded).
    async fn settle(&self, claim: Claim<'_>) -> Verdict;
    /// Follows a settlement seen pending, or claims a repeat of a settled proof (by the payment
    /// id, when the facilitator gave one): paid when it is confirmed and its ticket has an answer
    /// left for this request.
    async fn follow(&self, payment_id: Option<&str>, claim: Claim<'_>) -> Verdict;
    /// Gives back one answer of `payment` (a verdict of this facilitator's that counted it:
    /// [`Payment::answers`]) which reached no buyer: the handler failed, or the buyer hung up
    /// before the first byte. A failure is logged; the answer then stays counted.
    async fn release(&self, payment: &Payment);
    /// A pass's holder signing in (x402 `sign-in-with-x`): the message checked for the seller's
    /// origin, its nonce used once, and the signer's pass for the scope.
    ///
    /// # Errors
    /// [`Verdict::Refused`] (why), or [`Verdict::Unavailable`]; by default a facilitator checks
    /// no sign-in.
    async fn sign_in(&self, sign_in: SignInClaim<'_>) -> Result<PassHolder, Verdict> {
        let _ = sign_in;
        Err(Verdict::Unavailable { timed_out: false, reason: "this facilitator checks no sign-in-with-x".into() })
    }
    /// An x402 `batch-settlement` call (`/verify` or `/settle`), answered whole: the channel
    /// state it reports in `extra` is what the layer keeps.
    ///
    /// # Errors
    /// [`Verdict::Unavailable`] when it cannot be asked (or, by default, settles no batch
    /// payments); a settlement that may have happened but is not known yet is
    /// [`Verdict::Pending`].
    async fn batch(&self, call: BatchCall<'_>) -> Result<BatchAnswer, Verdict> {
        let _ = call;
        Err(Verdict::Unavailable { timed_out: false, reason: "this facilitator settles no batch-settlement".into() })
    }
}

/// One x402 `batch-settlement` call to a facilitator.
#[derive(Debug, Clone, Copy)]
pub struct BatchCall<'a> {
    /// `/settle` (else `/verify`).
    pub settle: bool,
    /// The payload (the buyer's, or the seller's own claim, sweep or completed refund).
    pub payload: &'a tollgate_protocol::x402::PaymentPayloadV2,
    /// The seller's requirement.
    pub requirement: &'a PaymentRequirements,
}

/// A facilitator's answer to a [`BatchCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchAnswer {
    /// Valid (verify) or settled (settle).
    pub ok: bool,
    /// Why not: the x402 reason code, and a message.
    pub reason: Option<String>,
    /// The payer it names.
    pub payer: Option<String>,
    /// The transaction a settlement sent.
    pub transaction: Option<String>,
    /// The channel state(s) it reports.
    pub extra: Option<serde_json::Value>,
}

impl BatchAnswer {
    /// A facilitator's `/settle` answer to a [`BatchCall`]: settled, or why not; a settlement
    /// sent and not known yet (pending, not mined within the facilitator's wait) is
    /// [`Verdict::Pending`], to be asked again.
    ///
    /// # Errors
    /// [`Verdict::Pending`].
    #[allow(clippy::result_large_err, reason = "the shape of Facilitator::batch, whose answer it makes")]
    pub fn of_settle(s: tollgate_protocol::x402::SettleResponse) -> Result<Self, Verdict> {
        let pending = s.error_reason.as_deref().is_some_and(|r| {
            client::is_pending_reason(r) || r == tollgate_protocol::x402::batch::reason::WAIT_FOR_RECEIPT
        });
        if !s.success && pending {
            return Err(Verdict::Pending {
                payment_id: None,
                transaction: Some(s.transaction).filter(|t| !t.is_empty()),
            });
        }
        Ok(Self {
            ok: s.success,
            reason: (!s.success).then(|| client::x402_reason(s.error_reason, s.error_message, "refused")),
            payer: s.payer,
            transaction: Some(s.transaction).filter(|t| !t.is_empty()),
            extra: s.extra,
        })
    }

    /// A facilitator's `/verify` answer to a [`BatchCall`].
    #[must_use]
    pub fn of_verify(v: tollgate_protocol::x402::VerifyResponse) -> Self {
        Self {
            ok: v.is_valid,
            reason: (!v.is_valid).then(|| client::x402_reason(v.invalid_reason, v.invalid_message, "refused")),
            payer: v.payer,
            transaction: None,
            extra: v.extra,
        }
    }
}

/// A shared facilitator (one core or client behind several layers, or kept by the caller).
#[async_trait]
impl<F: Facilitator + ?Sized> Facilitator for std::sync::Arc<F> {
    async fn supported(&self) -> Result<Supported, Verdict> {
        (**self).supported().await
    }
    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        (**self).settle_before(claim).await
    }
    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        (**self).verify(claim).await
    }
    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        (**self).settle(claim).await
    }
    async fn follow(&self, payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        (**self).follow(payment_id, claim).await
    }
    async fn release(&self, payment: &Payment) {
        (**self).release(payment).await;
    }
    async fn sign_in(&self, sign_in: SignInClaim<'_>) -> Result<PassHolder, Verdict> {
        (**self).sign_in(sign_in).await
    }
    async fn batch(&self, call: BatchCall<'_>) -> Result<BatchAnswer, Verdict> {
        (**self).batch(call).await
    }
}
