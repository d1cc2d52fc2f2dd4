//! Settling after the handler, in a task of its own ([`Settlement`]), and the body of a metered
//! answer whose charge is known only at its end ([`MeteredStream`], for a
//! [`DeferredCharge`]): streamed to the buyer, then settled for what its body reported.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::x402::header::{PAYMENT_RESPONSE, X_PAYMENT_RESPONSE};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequirements, ResourceInfo};

use crate::answer::{Counted, LocalCount};
use crate::body::BoxError;
use crate::cache::{Known, Ticket};
use crate::challenge;
use crate::charge::DeferredCharge;
use crate::config::Config;
use crate::facilitator::{Claim, Payment, Verdict};

/// What the facilitator is asked about a claim ([`Settlement::ask`]).
pub(crate) enum Ask {
    /// Settle before the handler runs.
    SettleBefore,
    /// Whether it would settle; a proof this seller settled before is answered with that
    /// settlement, one more answer claimed.
    Verify,
    /// Settle this charge, once the handler served.
    Settle(AtomicAmount),
    /// Follow a settlement seen pending (for a metered price, of this charge).
    Pending { payment_id: Option<String>, charged: Option<AtomicAmount> },
    /// Claim one more answer of a payment settled for this ticket (for a metered price, for the
    /// charge settled).
    Repeat { payment_id: Option<String>, charged: Option<AtomicAmount> },
}

/// A claim owned whole: what the facilitator is asked about it runs on a task of its own.
pub(crate) struct Settlement {
    pub config: Arc<Config>,
    /// The proof's cache key.
    pub key: String,
    pub ticket: Ticket,
    pub header: String,
    pub payload: PaymentPayload,
    /// The requirement as offered (for a metered price, its amount is the most).
    pub requirement: PaymentRequirements,
    pub resource: ResourceInfo,
    pub decimals: u8,
    /// What the payment buys, with the request's digest.
    pub terms: tollgate_protocol::ticket::Ticket,
    /// Whether the price is metered (`upto`).
    pub metered: bool,
}

impl Settlement {
    /// Asks the facilitator `ask`; remembers for the proof what it settled (its first answer,
    /// counted here when the facilitator does not count: a retry claims the next) or left
    /// pending after the handler (a retry follows it; for a metered price, for this charge); and
    /// the count of the answer it claimed, given back if dropped before it is delivered.
    pub(crate) async fn ask(&self, ask: Ask) -> (Verdict, Option<Counted>) {
        let charged = match &ask {
            Ask::Settle(charged) => Some(*charged),
            Ask::Pending { charged, .. } | Ask::Repeat { charged, .. } => *charged,
            Ask::SettleBefore | Ask::Verify => None,
        };
        let requirement =
            PaymentRequirements { amount: charged.unwrap_or(self.requirement.amount), ..self.requirement.clone() };
        let claim = Claim {
            header: &self.header,
            payload: &self.payload,
            requirement: &requirement,
            decimals: self.decimals,
            resource: &self.resource,
            ticket: &self.terms,
            discovery: self.config.declaration_for_catalogs(false),
        };
        let facilitator = &self.config.facilitator;
        let verdict = match &ask {
            Ask::SettleBefore => facilitator.settle_before(claim).await,
            Ask::Verify => facilitator.verify(claim).await,
            Ask::Settle(_) => facilitator.settle(claim).await,
            Ask::Pending { payment_id, .. } | Ask::Repeat { payment_id, .. } => {
                facilitator.follow(payment_id.as_deref(), claim).await
            }
        };
        // A metered payment keeps the most authorized beside what was charged.
        let most = self.metered.then_some(self.requirement.amount);
        let verdict = match (verdict, most) {
            (Verdict::Paid(payment), Some(most)) => Verdict::Paid(payment.with_maximum(most)),
            (verdict, _) => verdict,
        };
        let tasks = &self.config.tasks;
        let counted = match (&verdict, &ask) {
            (Verdict::Paid(payment), Ask::Repeat { .. }) => Counted::new(facilitator, payment, None, tasks),
            // Verified only: nothing settled, nothing counted.
            (Verdict::Paid(payment), Ask::Verify) if payment.transaction.is_none() => None,
            (Verdict::Paid(payment), _) => {
                // Its first answer: counted by the facilitator, or here when it does not count.
                let local = payment.answers.is_none().then(|| LocalCount::first(self.terms.request.clone()));
                let counted = Counted::new(facilitator, payment, local.as_ref(), tasks);
                self.config.cache.put(&self.key, Known::accepted(&self.ticket, payment, local)).await;
                counted
            }
            (Verdict::Pending { payment_id, .. }, Ask::Settle(charged)) => {
                let known = Known::Pending {
                    ticket: self.ticket.clone(),
                    payment_id: payment_id.clone(),
                    charged: most.map(|_| *charged),
                };
                self.config.cache.put(&self.key, known).await;
                None
            }
            _ => None,
        };
        (verdict, counted)
    }

    /// Nothing used: nothing is settled, the authorization is not spent (the buyer may present
    /// it again: each run is charged what it uses), and nothing is remembered.
    pub(crate) fn nothing(verified: Payment) -> Payment {
        Payment { amount: AtomicAmount(0), ..verified }
    }

    /// Settles what `deferred` reported (capped at the most), in a task of its own; nothing
    /// when it reported zero, failed or said nothing (logged).
    fn spawn(self, deferred: &DeferredCharge, verified: Payment) -> tokio::task::JoinHandle<Option<Verdict>> {
        let most = self.requirement.amount;
        let reported = deferred.reported();
        let tasks = self.config.tasks.clone();
        tasks.spawn(async move {
            match reported {
                Some(Ok(charge)) if charge.capped(most).get() > 0 => {
                    let (verdict, counted) = self.ask(Ask::Settle(charge.capped(most))).await;
                    // Settled at the end of an answer its buyer received.
                    if let Some(counted) = counted {
                        counted.delivered();
                    }
                    Some(verdict)
                }
                Some(Ok(_)) => Some(Verdict::Paid(Self::nothing(verified))),
                Some(Err(why)) => {
                    tracing::error!(%why, resource = %self.ticket.resource, "a streamed answer reported no usable charge; nothing is settled");
                    None
                }
                None => {
                    tracing::error!(resource = %self.ticket.resource, "a streamed answer ended without reporting its charge; nothing is settled");
                    None
                }
            }
        })
    }
}

/// Where a metered stream is.
#[allow(clippy::large_enum_variant, reason = "one per streamed answer, replaced in place, never moved around")]
enum State {
    /// Passing the handler's body on; settled when it ends.
    Streaming {
        settlement: Box<Settlement>,
        verified: Payment,
    },
    /// Ended; settling, then the settlement goes out as a trailer (with the body's own).
    Settling(tokio::task::JoinHandle<Option<Verdict>>),
    Done,
}

/// The body of a metered answer whose charge the body itself reports ([`DeferredCharge`]).
pub(crate) struct MeteredStream {
    inner: UnsyncBoxBody<Bytes, BoxError>,
    deferred: DeferredCharge,
    state: State,
    trailers: Option<HeaderMap>,
    v1: bool,
    /// Dropped when the settlement is over: requests waiting on the same proof go on then.
    settled: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MeteredStream {
    pub(crate) fn new<B>(
        inner: B,
        deferred: DeferredCharge,
        settlement: Settlement,
        verified: Payment,
        (v1, settled): (bool, tokio::sync::oneshot::Sender<()>),
    ) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let inner = inner.map_err(Into::into).boxed_unsync();
        Self {
            inner,
            deferred,
            state: State::Streaming { settlement: Box::new(settlement), verified },
            trailers: None,
            v1,
            settled: Some(settled),
        }
    }

    /// The settlement header for `verdict`.
    fn header(&self, verdict: &Verdict, network: &tollgate_protocol::Network) -> Option<http::HeaderValue> {
        match verdict {
            Verdict::Paid(payment) => challenge::settlement_header(payment, self.v1),
            Verdict::Refused { reason } => challenge::failure_header(reason, network, self.v1),
            Verdict::Pending { .. } | Verdict::Unavailable { .. } => None,
        }
    }
}

impl Body for MeteredStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            match &mut self.state {
                State::Done => return Poll::Ready(None),
                State::Settling(task) => {
                    let outcome = ready!(Pin::new(task).poll(cx)).ok().flatten();
                    let network = match &outcome {
                        Some(Verdict::Paid(p)) => Some(p.network.clone()),
                        _ => None,
                    };
                    let mut trailers = self.trailers.take().unwrap_or_default();
                    if let Some(verdict) = &outcome {
                        log_unsettled(verdict);
                        if let Some(value) = network.as_ref().and_then(|n| self.header(verdict, n)) {
                            trailers.insert(if self.v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE }, value);
                        }
                    }
                    self.state = State::Done;
                    self.settled = None;
                    return Poll::Ready((!trailers.is_empty()).then(|| Ok(Frame::trailers(trailers))));
                }
                State::Streaming { .. } => match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => match frame.into_trailers() {
                        Ok(trailers) => self.trailers = Some(trailers),
                        Err(data) => return Poll::Ready(Some(Ok(data))),
                    },
                    Some(Err(e)) => {
                        // The handler's body failed: its answer is broken, and not charged.
                        tracing::warn!(error = %e, "a streamed metered answer failed; nothing is settled");
                        self.state = State::Done;
                        self.settled = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                    None => {
                        let State::Streaming { settlement, verified } = std::mem::replace(&mut self.state, State::Done)
                        else {
                            unreachable!("matched above")
                        };
                        self.state = State::Settling(settlement.spawn(&self.deferred, verified));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A settlement after a streamed answer that did not succeed is the seller's loss: logged.
fn log_unsettled(verdict: &Verdict) {
    match verdict {
        Verdict::Paid(_) => {}
        Verdict::Pending { payment_id, .. } => {
            tracing::info!(?payment_id, "a streamed metered answer's settlement is pending; a retry follows it");
        }
        Verdict::Refused { reason } => tracing::warn!(%reason, "a streamed metered answer's settlement was refused"),
        Verdict::Unavailable { reason, .. } => {
            tracing::warn!(%reason, "a streamed metered answer's settlement could not reach the facilitator");
        }
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        // The buyer hung up before the end: read the rest for its report, then settle it.
        let State::Streaming { settlement, verified } = std::mem::replace(&mut self.state, State::Done) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("a metered stream was dropped outside a runtime; its charge is not settled");
            return;
        };
        let mut inner =
            std::mem::replace(&mut self.inner, http_body_util::Empty::new().map_err(|n| match n {}).boxed_unsync());
        let (deferred, settled) = (self.deferred.clone(), self.settled.take());
        let tasks = settlement.config.tasks.clone();
        tasks.spawn_on(
            async move {
                let _settled = settled;
                let drained = tokio::time::timeout(DeferredCharge::DRAIN, async {
                    while let Some(frame) = inner.frame().await {
                        if frame.is_err() {
                            return false;
                        }
                    }
                    true
                })
                .await;
                if drained != Ok(true) {
                    tracing::warn!(
                        "the rest of a metered stream whose buyer hung up could not be read; nothing is settled"
                    );
                    return;
                }
                if let Ok(Some(verdict)) = settlement.spawn(&deferred, verified).await {
                    log_unsettled(&verdict);
                }
            },
            &runtime,
        );
    }
}
