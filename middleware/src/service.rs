//! [`PaymentService`]: what the layer does to one request.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt as _;
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::siwx;
use tollgate_protocol::ticket::request_digest;
use tollgate_protocol::x402::header::{PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE};
use tollgate_protocol::x402::{PaymentFlow, PaymentPayload, ResourceInfo, SCHEME_UPTO, payment_identifier};
use tower::Service;

use crate::answer::{Counted, LocalCount};
use crate::body::{BoxError, PaymentBody};
use crate::cache::{Decoded, Flight, Known, ProofCache, Ticket};
use crate::challenge::{self, Buffered};
use crate::charge::DeferredCharge;
use crate::config::Config;
use crate::facilitator::{Claim, Payment, Verdict};
use crate::future::ResponseFuture;
use crate::handler::{hold, run_buffered, run_handler};
use crate::identifiers::Claimed;
use crate::metered::{Ask, MeteredStream, Settlement};
use crate::offers::{matching, offers, resource_info};
use crate::price::{Offer, Quote};

/// The service [`crate::PaymentLayer`] wraps around a route.
#[derive(Debug)]
pub struct PaymentService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: Clone> Clone for PaymentService<S> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), config: self.config.clone() }
    }
}

impl<S> PaymentService<S> {
    pub(crate) const fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The wrapped service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub const fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The layer this service was made by (sharing its settings and memory of proofs), e.g. to
    /// [`crate::discovery::Storefront::list`] it.
    #[must_use]
    pub fn layer(&self) -> crate::PaymentLayer {
        crate::PaymentLayer { config: self.config.clone() }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PaymentService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<PaymentBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service polled ready is the one that must be called: keep it, leave a clone.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(Box::pin(handle(self.config.clone(), inner, request)))
    }
}

/// The challenge's message when no payment header came.
const NO_PAYMENT: &str = "payment required: send an X-PAYMENT or PAYMENT-SIGNATURE header";

/// The whole flow for one request: offers → resource → the payment read → the request told
/// apart → known or in flight → settled in the layer's order, or a repeat claimed.
async fn handle<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<PaymentBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ReqBody: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let (offers, named) = match priced(&config, &parts).await {
        Priced::Offers(offers, named) => (offers, named),
        Priced::Free => {
            let response = inner.call(Request::from_parts(parts, body)).await?;
            return Ok(response.map(PaymentBody::stream));
        }
        Priced::Answer(buffered) => return Ok(buffered.into_response()),
    };
    let named_by_seller = named.is_some();
    let resource = resource_info(&config, &parts, named);
    // A pass's holder signing in instead of paying (on a route that sells passes; elsewhere the
    // header means nothing, and the request is answered as one without payment).
    let paying = parts.headers.contains_key(PAYMENT_SIGNATURE) || parts.headers.contains_key(X_PAYMENT);
    let signing_in = !paying && config.sign_in_origin.is_some() && crate::pass::sold(&offers);
    if signing_in && let Some(header) = parts.headers.get(siwx::HEADER).and_then(|h| h.to_str().ok()) {
        let payment = match crate::pass::signed_in(&config, &parts, header, &offers, &resource).await {
            Ok(payment) => payment,
            Err(answer) => return Ok(answer),
        };
        return serve(&config, inner, Request::from_parts(parts, body), payment, (false, None), None).await;
    }
    let presented = match read_payment(&config, &parts, &offers, &resource) {
        Ok(presented) => presented,
        Err(answer) => return Ok(answer),
    };
    let (requirement, decimals) = &offers[presented.decoded.offer];
    // A channel's voucher is its own count of what was served: no ticket, no proof cache.
    if crate::batch::is_batch(&requirement.scheme) {
        let request = Request::from_parts(parts, body);
        let offer = presented.decoded.offer;
        return crate::paid_channel::handle(
            &config,
            inner,
            request,
            &presented.decoded.payload,
            (&offers, offer),
            &resource,
        )
        .await;
    }
    let ticket = Ticket { resource: resource.url.clone(), method: parts.method.clone() };
    // What the facilitator binds the payment to: the resource and the request's method.
    let bound = ResourceInfo { method: Some(ticket.method.as_str().to_owned()), ..resource.clone() };
    // The request as a repeat of it must be: its body read (when small) for its digest.
    let (digest, body) = match digested(&config, &parts, &ticket, body).await {
        Ok(digested) => digested,
        Err(answer) => return Ok(answer.into_response()),
    };
    let mut terms = config.answers.ticket(digest);
    terms.pass = crate::pass::terms(&config, requirement, &resource.url);
    if terms.pass.is_some() {
        // A pass's payment serves its own request once: the pass's requests are its payer's
        // sign-ins, never a copy of its header.
        terms.uses = 1;
    }
    let claim = Claim {
        header: presented.text(),
        payload: &presented.decoded.payload,
        requirement,
        decimals: *decimals,
        resource: &bound,
        ticket: &terms,
        discovery: config.declaration_for_catalogs(named_by_seller),
    };
    let paid = Paid { config: &config, claim, resource: &resource, ticket: &ticket, v1: presented.v1 };
    let key = &presented.decoded.key;
    let identified = match identifier(&config, &presented.decoded.payload) {
        Ok(id) => id,
        Err(answer) => return Ok(answer.into_response()),
    };
    if let Some(id) = identified {
        match config.identifiers.claim(id, key, &ticket).await {
            Claimed::Answered(answer) => return Ok(paid.answer_again(key, answer, &offers, &parts.headers).await),
            Claimed::Conflict => return Ok(challenge::conflict(id).into_response()),
            Claimed::Ours => {}
        }
    }
    // Requests for other tickets settle apart: the facilitator decides which one the proof pays.
    let flight = format!("{key} {} {}", ticket.method, ticket.resource);
    loop {
        let prior = match paid.remembered(key, &offers, &parts.headers).await {
            Remembered::Answer(answer) => return Ok(answer),
            Remembered::Settle(prior) => prior,
        };
        match config.cache.fly(&flight) {
            Flight::Follower(mut receiver) => {
                // Another request is settling this proof: share its outcome when it paid nothing;
                // once it paid, start over (this request claims an answer of its own).
                if receiver.changed().await.is_ok()
                    && let Some(buffered) = receiver.borrow().clone()
                {
                    return Ok((*buffered).clone().into_response());
                }
            }
            Flight::Leader(leader) => {
                let request = Request::from_parts(parts, body);
                let outcome = paid.settle_in_order(key, inner, request, prior, &offers).await?;
                let answer = match outcome.answer {
                    Answer::Held(answer) => answer,
                    // Streaming: the followers start over once it is settled (before it, with
                    // `stream_upfront`; at its end, for a charge its body reports) and find the
                    // proof remembered. Its id, if any, keeps no answer.
                    Answer::Streamed(response, settled) => {
                        if let Some(id) = identified {
                            config.identifiers.release(id, key).await;
                        }
                        match settled {
                            Some(settled) => drop(config.tasks.spawn(async move {
                                let _ = settled.await;
                                drop(leader);
                            })),
                            None => drop(leader),
                        }
                        // A streamed answer's count travels in its body already (`serve`).
                        return Ok(response);
                    }
                };
                if let Some(id) = identified {
                    if outcome.paid {
                        config.identifiers.answered(id, key, &answer).await;
                    } else {
                        config.identifiers.release(id, key).await;
                    }
                }
                leader.finish((!outcome.paid).then(|| Arc::new(answer.clone())));
                return Ok(answer.into_counted_response(outcome.counted));
            }
        }
    }
}

/// Step 3½: the digest that tells this request again ([`tollgate_protocol::ticket::request_digest`]:
/// its method, resource and body) and the body to hand on. A body is read when its size is
/// known and at most the layer's limit; a larger or unsized one is passed on unread, and the
/// request has no digest (its payment serves it once). A body that cannot be read is a 400.
#[allow(clippy::result_large_err, reason = "the answer is returned at once, never carried")]
async fn digested<B>(
    config: &Config,
    parts: &http::request::Parts,
    ticket: &Ticket,
    body: B,
) -> Result<(Option<String>, B), Buffered>
where
    B: Body<Data = Bytes> + From<Bytes>,
    B::Error: Into<BoxError>,
{
    let digest = |bytes: &[u8]| request_digest(ticket.method.as_str(), &ticket.resource, bytes);
    if body.is_end_stream() {
        return Ok((Some(digest(&[])), body));
    }
    let limit = config.request_digest_limit;
    if body.size_hint().upper().is_none_or(|most| most > limit as u64) {
        return Ok((None, body));
    }
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => {
            let bytes = collected.to_bytes();
            Ok((Some(digest(&bytes)), B::from(bytes)))
        }
        Err(e) => {
            tracing::debug!(error = %e, method = %parts.method, "a paid request's body could not be read");
            Err(challenge::bad_request("the request body could not be read"))
        }
    }
}

/// What a request is offered.
pub(crate) enum Priced {
    /// The requirements, and the resource the pricing function named.
    Offers(Arc<Vec<Offer>>, Option<String>),
    /// Free for this request: straight to the handler.
    Free,
    /// No offer can be made (the facilitator could not be asked): this answer.
    Answer(Buffered),
}

/// Step 1: the offers, made once for fixed prices, else from this request's quote.
pub(crate) async fn priced(config: &Config, parts: &http::request::Parts) -> Priced {
    if let Some(offers) = &config.static_offers {
        return Priced::Offers(offers.clone(), None);
    }
    let quote = match &config.pricing {
        Some(pricing) => pricing(parts).await,
        None => Some(Quote::new(config.prices.clone())),
    };
    let Some(quote) = quote.filter(|q| !q.prices.is_empty()) else { return Priced::Free };
    match offers(config, &quote.prices).await {
        Ok(o) => Priced::Offers(Arc::new(o), quote.resource),
        Err(buffered) => Priced::Answer(buffered),
    }
}

/// The payment's `payment-identifier` id, when the layer declared the extension; else the
/// answer: 400 for a malformed id, or for none where one is required.
#[allow(clippy::result_large_err, reason = "the answer is returned at once, never carried")]
fn identifier<'p>(config: &Config, payload: &'p PaymentPayload) -> Result<Option<&'p str>, Buffered> {
    let Some(required) = config.payment_identifier else { return Ok(None) };
    let id = match payload {
        PaymentPayload::V2(p) => payment_identifier::id_of(&p.extensions)
            .map_err(|why| challenge::bad_request(&format!("invalid payment identifier: {why}")))?,
        PaymentPayload::V1(_) => None,
    };
    if id.is_none() && required {
        return Err(challenge::bad_request(
            "this resource requires a payment identifier (the x402 v2 payment-identifier extension)",
        ));
    }
    Ok(id)
}

/// A payment header as presented: decoded and matched to an offer, in its protocol version.
struct Presented {
    decoded: Arc<Decoded>,
    header: http::HeaderValue,
    v1: bool,
}

impl Presented {
    /// The header's text (checked to be ASCII when read).
    fn text(&self) -> &str {
        self.header.to_str().unwrap_or_default()
    }
}

/// A 402 challenge for this request, saying `error`.
fn challenge_for(
    config: &Config,
    resource: &ResourceInfo,
    offers: &[Offer],
    headers: &http::HeaderMap,
    error: &str,
) -> Response<PaymentBody> {
    let extensions = crate::pass::extensions(config, &resource.url, offers);
    challenge::payment_required(error, resource, offers, &extensions, headers).into_response()
}

/// Step 3: the payment header read — `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1) — decoded
/// (once per header while offers are fixed) and matched to an offer; else the answer: a 402
/// challenge, or 400 for a header that cannot be read.
#[allow(clippy::result_large_err, reason = "the answer is returned at once, never carried")]
fn read_payment(
    config: &Config,
    parts: &http::request::Parts,
    offers: &[Offer],
    resource: &ResourceInfo,
) -> Result<Presented, Response<PaymentBody>> {
    let (header, v1) = match (parts.headers.get(PAYMENT_SIGNATURE), parts.headers.get(X_PAYMENT)) {
        (Some(v), _) => (v.clone(), false),
        (None, Some(v)) => (v.clone(), true),
        // The same challenge for every request to this resource: built once (a route selling a
        // pass declares a fresh sign-in each time).
        (None, None) if config.static_offers.is_some() && !crate::pass::sold(offers) => {
            let html = challenge::wants_html(&parts.headers);
            let cached = config.challenges.get_with((resource.url.clone(), html), || {
                Arc::new(challenge::payment_required(NO_PAYMENT, resource, offers, &config.extensions, &parts.headers))
            });
            return Err((*cached).clone().into_response());
        }
        (None, None) => return Err(challenge_for(config, resource, offers, &parts.headers, NO_PAYMENT)),
    };
    let Ok(text) = header.to_str() else {
        return Err(challenge::bad_request("the payment header is not ASCII").into_response());
    };
    // A header seen before (with the same offers) is not decoded again.
    if let Some(decoded) = config.static_offers.as_ref().and_then(|_| config.decoded.get(text)) {
        return Ok(Presented { decoded, header, v1 });
    }
    let payload = PaymentPayload::from_header(text)
        .map_err(|e| challenge::bad_request(&format!("malformed payment header: {e}")).into_response())?;
    let Some(offer) = matching(offers, &payload) else {
        let why = "the payment does not match any accepted way to pay this resource";
        return Err(challenge_for(config, resource, offers, &parts.headers, why));
    };
    // A channel's voucher is new with every request and never remembered by proof: no key, and
    // nothing kept of its header.
    if crate::batch::is_batch(&offers[offer].0.scheme) {
        let decoded = Arc::new(Decoded { key: String::new(), offer, payload });
        return Ok(Presented { decoded, header, v1 });
    }
    let decoded = Arc::new(Decoded { key: ProofCache::key(&payload), offer, payload });
    if config.static_offers.is_some() {
        config.decoded.insert(text.to_owned(), decoded.clone());
    }
    Ok(Presented { decoded, header, v1 })
}

/// What the layer remembers of a proof, for this request.
enum Remembered {
    /// Answered from memory: another ticket's proof, a cheaper request's, or a refusal.
    Answer(Response<PaymentBody>),
    /// To settle, follow, or claim a repeat of.
    Settle(Prior),
}

/// What the facilitator is asked about a proof.
enum Prior {
    /// Nothing known: settle it (or find it settled for this seller before).
    New,
    /// Seen pending: follow it (its payment id, and for a metered price the charge it settles).
    Pending { payment_id: Option<String>, charged: Option<AtomicAmount> },
    /// Settled for this ticket: claim one more answer — from the facilitator, or from the count
    /// kept here when it does not count.
    Repeat(Payment, Option<Arc<LocalCount>>),
}

/// The answer to a paid request, whether it was paid (its `payment-identifier` id, if any,
/// keeps a paid answer; requests waiting on the same proof share an answer that was not paid),
/// and the answer's count (given back if it reaches no buyer).
struct Outcome {
    answer: Answer,
    paid: bool,
    counted: Option<Counted>,
}

impl Outcome {
    const fn not_paid(answer: Buffered) -> Self {
        Self { answer: Answer::Held(answer), paid: false, counted: None }
    }

    /// A paid answer held in memory, counted.
    const fn paid(answer: Buffered, counted: Option<Counted>) -> Self {
        Self { answer: Answer::Held(answer), paid: true, counted }
    }
}

/// A paid request's answer: held in memory (shared with the requests waiting on its proof), or
/// streamed as the handler writes it — settled before it (`stream_upfront`), or at its end (a
/// [`crate::DeferredCharge`]: the receiver says when that settlement is over).
enum Answer {
    Held(Buffered),
    Streamed(Response<PaymentBody>, Option<tokio::sync::oneshot::Receiver<()>>),
}

/// Adds `X-PAYMENT-RESPONSE` (v1) or `PAYMENT-RESPONSE` (v2), and keeps the paid answer out of
/// shared caches.
fn add_settlement_header(buffered: &mut Buffered, payment: &Payment, v1: bool) {
    if let Some(value) = challenge::settlement_header(payment, v1) {
        buffered.headers.insert(if v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE }, value);
    }
    challenge::make_private(&mut buffered.headers);
}

/// A claim, and where its answer goes.
struct Paid<'a> {
    config: &'a Arc<Config>,
    claim: Claim<'a>,
    /// The resource as offered (without the method).
    resource: &'a ResourceInfo,
    ticket: &'a Ticket,
    v1: bool,
}

impl Paid<'_> {
    /// Step 4: a proof known already serves only the resource and method it paid for, and only
    /// a price it covers (one route can price each request differently: a query, a body); a
    /// repeat of it is counted by the facilitator (or here, when it does not count).
    async fn remembered(&self, key: &str, offers: &[Offer], headers: &http::HeaderMap) -> Remembered {
        let known = self.config.cache.get(key).await;
        let challenge = |why: &str| Remembered::Answer(challenge_for(self.config, self.resource, offers, headers, why));
        let other_ticket = match known.as_deref() {
            Some(Known::Accepted { ticket, .. } | Known::Pending { ticket, .. }) => ticket.refuses(self.ticket),
            _ => None,
        };
        if let Some(why) = other_ticket {
            return challenge(&why);
        }
        match known.as_deref() {
            Some(Known::Accepted { payment, .. }) if !payment.covers(self.claim.requirement) => {
                challenge("this payment was made for a cheaper request")
            }
            Some(Known::Accepted { payment, local, .. }) => {
                Remembered::Settle(Prior::Repeat(payment.clone(), local.clone()))
            }
            Some(Known::Refused { ticket, request, reason })
                if ticket == self.ticket && *request == self.claim.ticket.request =>
            {
                Remembered::Answer(self.refused(reason, offers, headers).into_response())
            }
            Some(Known::Pending { payment_id, charged, .. }) => {
                Remembered::Settle(Prior::Pending { payment_id: payment_id.clone(), charged: *charged })
            }
            Some(Known::Refused { .. }) | None => Remembered::Settle(Prior::New),
        }
    }

    /// Step 5: settled in the requirement's flow — `upfront`: settle then serve (or follow the
    /// settlement seen pending); `authorization`: verify, serve, and settle only a success, for
    /// what a metered request used — or a repeat of a settled proof claimed; and the answer.
    async fn settle_in_order<S, ReqBody, ResBody>(
        &self,
        key: &str,
        inner: S,
        request: Request<ReqBody>,
        prior: Prior,
        offers: &[Offer],
    ) -> Result<Outcome, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
        S::Future: Send,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let requirement = self.claim.requirement;
        let headers = request.headers().clone();
        if let Some(reason) = matches!(prior, Prior::New).then(|| self.offline()).flatten() {
            // Refused without asking the facilitator.
            let refused = Verdict::Refused { reason };
            return Ok(Outcome::not_paid(self.not_paid(key, (refused, None), offers, &headers).await));
        }
        let flow = PaymentFlow::of(requirement.extra.as_ref()).unwrap_or(PaymentFlow::Authorization);
        let metered = requirement.scheme == SCHEME_UPTO;
        let pending = match prior {
            Prior::Repeat(payment, local) => return self.repeat(key, inner, request, (payment, local), offers).await,
            Prior::Pending { payment_id, charged } => Some((payment_id, charged)),
            Prior::New => None,
        };
        if pending.is_some() || flow == PaymentFlow::Upfront {
            let ask = match &pending {
                // A metered settlement is followed for the charge it settles.
                Some((payment_id, charged)) => Ask::Pending { payment_id: payment_id.clone(), charged: *charged },
                None => Ask::SettleBefore,
            };
            return Ok(match self.ask(key, ask).await {
                (Verdict::Paid(payment), counted) => self.serve_settled(inner, request, &payment, counted).await?,
                (other, _) => {
                    let charged = pending.and_then(|(_, charged)| charged);
                    Outcome::not_paid(self.not_paid(key, (other, charged), offers, &headers).await)
                }
            });
        }
        let verified = match self.ask(key, Ask::Verify).await {
            // Settled already for this seller (its first answer was lost): paid, one more answer.
            (Verdict::Paid(payment), counted) if payment.transaction.is_some() => {
                return self.serve_settled(inner, request, &payment, counted).await;
            }
            (Verdict::Paid(verified), _) => verified,
            (other, _) => return Ok(Outcome::not_paid(self.not_paid(key, (other, None), offers, &headers).await)),
        };
        let (head, body) = run_handler(inner, request, verified.clone()).await?;
        let deferred = head.extensions.get::<DeferredCharge>().cloned();
        if let Some(deferred) = deferred.filter(|_| metered && head.status.as_u16() < 400) {
            return Ok(self.metered_stream(key, (head, body), deferred, verified));
        }
        let (mut buffered, charge) = match hold(self.config, head, body).await {
            // The handler failed: nothing is settled, the buyer keeps the money.
            Some((buffered, _)) if buffered.status.as_u16() >= 400 => return Ok(Outcome::not_paid(buffered)),
            Some(answer) => answer,
            None => return Ok(Outcome::not_paid(challenge::unread(false))),
        };
        // A metered request is charged what its handler reported (the most without a report).
        let charged = if metered {
            charge.map_or(requirement.amount, |c| c.capped(requirement.amount))
        } else {
            requirement.amount
        };
        let (payment, counted) = if charged.get() == 0 {
            // Nothing used: nothing is settled, and the authorization is not spent (the buyer may
            // present it again: each run is charged what it uses). Nothing is remembered.
            (Payment { amount: charged, ..verified }, None)
        } else {
            // Settled in a task of its own: a buyer who hangs up now stops neither the seller
            // being paid for what it served nor the payment being remembered for the proof (a
            // retry of it follows it when pending — for a metered price, for this charge).
            match self.ask(key, Ask::Settle(charged)).await {
                (Verdict::Paid(payment), counted) => (payment, counted),
                (other, _) => {
                    let charged = metered.then_some(charged);
                    return Ok(Outcome::not_paid(self.not_paid(key, (other, charged), offers, &headers).await));
                }
            }
        };
        add_settlement_header(&mut buffered, &payment, self.v1);
        Ok(Outcome::paid(buffered, counted))
    }

    /// Asks the facilitator `ask` on a task of its own ([`Settlement::ask`]), so that a buyer
    /// who hangs up cannot cut a claim in two: what it settles is remembered for the proof, and
    /// an answer it claimed for a request no longer there to take it is given back.
    async fn ask(&self, key: &str, ask: Ask) -> (Verdict, Option<Counted>) {
        let settlement = self.settlement(key);
        let (answer, asked) = tokio::sync::oneshot::channel();
        // A send that fails drops what it carried: the answer's count is given back.
        self.config.tasks.spawn(async move { drop(answer.send(settlement.ask(ask).await)) });
        asked.await.unwrap_or_else(|_| {
            let reason = "the facilitator's task ended without an answer".to_owned();
            (Verdict::Unavailable { timed_out: false, reason }, None)
        })
    }

    /// A settled proof, its answer claimed: the handler's answer with the settlement header. An
    /// answer of 400 or more gives its answer back (the buyer may retry with the same proof).
    async fn serve_settled<S, ReqBody, ResBody>(
        &self,
        inner: S,
        request: Request<ReqBody>,
        payment: &Payment,
        counted: Option<Counted>,
    ) -> Result<Outcome, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
        S::Future: Send,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let config = self.config;
        if config.stream_upfront {
            let header = challenge::settlement_header(payment, self.v1);
            let response = serve(config, inner, request, payment.clone(), (self.v1, header), counted).await?;
            return Ok(Outcome { answer: Answer::Streamed(response, None), paid: true, counted: None });
        }
        Ok(match run_buffered(config, inner, request, payment.clone()).await? {
            Some((mut buffered, _)) => {
                add_settlement_header(&mut buffered, payment, self.v1);
                if buffered.status.as_u16() >= 400 {
                    // The handler failed after the payment: its answer is given back.
                    drop(counted);
                    Outcome { answer: Answer::Held(buffered), paid: false, counted: None }
                } else {
                    Outcome::paid(buffered, counted)
                }
            }
            None => Outcome::not_paid(challenge::unread(true)),
        })
    }

    /// A repeat of a proof settled for this ticket: one more answer claimed (for the same
    /// request, while the ticket has answers left) — from the facilitator, or from `local` when
    /// it does not count — then the handler runs again. A metered price is claimed for the charge
    /// settled before, and its new run is served only if it costs no more than that (the
    /// authorization is spent: nothing more can be settled); a dearer run is withheld and its
    /// answer given back.
    async fn repeat<S, ReqBody, ResBody>(
        &self,
        key: &str,
        inner: S,
        request: Request<ReqBody>,
        (settled, local): (Payment, Option<Arc<LocalCount>>),
        offers: &[Offer],
    ) -> Result<Outcome, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
        S::Future: Send,
        ResBody: Body<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        let headers = request.headers().clone();
        let charged = settled.maximum.map(|_| settled.amount);
        let claimed = match &local {
            Some(local) => local.claim(self.claim.ticket).map_err(|reason| Verdict::Refused { reason }).map(|()| {
                let counted = Counted::new(&self.config.facilitator, &settled, Some(local), &self.config.tasks);
                (settled.clone(), counted)
            }),
            None => self.claim_repeat(key, settled.payment_id.as_deref(), charged).await,
        };
        let (payment, counted) = match claimed {
            Ok(claimed) => claimed,
            Err(verdict) => return Ok(Outcome::not_paid(self.not_paid(key, (verdict, None), offers, &headers).await)),
        };
        let Some(most) = settled.maximum else {
            return self.serve_settled(inner, request, &payment, counted).await;
        };
        let (mut buffered, charge) = match run_buffered(self.config, inner, request, payment.clone()).await? {
            Some(answer) => answer,
            None => return Ok(Outcome::not_paid(challenge::unread(true))),
        };
        let costs = charge.map_or(most, |c| c.capped(most));
        if buffered.status.as_u16() >= 400 || costs.get() > payment.amount.get() {
            drop(counted);
            if buffered.status.as_u16() >= 400 {
                return Ok(Outcome::not_paid(buffered));
            }
            let why = format!(
                "answers_used: this run costs {costs}, more than the {} this payment settled (its authorization is \
                 spent): pay again",
                payment.amount
            );
            return Ok(Outcome::not_paid(self.refused(&why, offers, &headers)));
        }
        add_settlement_header(&mut buffered, &payment, self.v1);
        Ok(Outcome::paid(buffered, counted))
    }

    /// One more answer of the payment `payment_id` claimed from the facilitator (for a metered
    /// price, for the charge settled), with its count; else the verdict.
    async fn claim_repeat(
        &self,
        key: &str,
        payment_id: Option<&str>,
        charged: Option<AtomicAmount>,
    ) -> Result<(Payment, Option<Counted>), Verdict> {
        match self.ask(key, Ask::Repeat { payment_id: payment_id.map(str::to_owned), charged }).await {
            (Verdict::Paid(payment), counted) => Ok((payment, counted)),
            (other, _) => Err(other),
        }
    }

    /// A repeat of a paid request by its `payment-identifier` id: the answer given before
    /// (the handler does not run again), once one more answer is claimed like any repeat's.
    async fn answer_again(
        &self,
        key: &str,
        answer: Buffered,
        offers: &[Offer],
        headers: &http::HeaderMap,
    ) -> Response<PaymentBody> {
        let known = self.config.cache.get(key).await;
        let (settled, local) = match known.as_deref() {
            Some(Known::Accepted { payment, local, .. }) => (Some(payment.clone()), local.clone()),
            _ => (None, None),
        };
        if let (Some(payment), Some(local)) = (&settled, &local) {
            return match local.claim(self.claim.ticket) {
                Ok(()) => {
                    let counted = Counted::new(&self.config.facilitator, payment, Some(local), &self.config.tasks);
                    answer.into_counted_response(counted)
                }
                Err(why) => self.refused(&why, offers, headers).into_response(),
            };
        }
        let charged = settled.as_ref().filter(|p| p.maximum.is_some()).map(|p| p.amount);
        let payment_id = settled.as_ref().and_then(|p| p.payment_id.as_deref());
        match self.claim_repeat(key, payment_id, charged).await {
            Ok((_, counted)) => answer.into_counted_response(counted),
            Err(verdict) => self.not_paid(key, (verdict, None), offers, headers).await.into_response(),
        }
    }

    /// The claim, owned, to settle after its handler served.
    fn settlement(&self, key: &str) -> Settlement {
        Settlement {
            config: Arc::clone(self.config),
            key: key.to_owned(),
            ticket: self.ticket.clone(),
            header: self.claim.header.to_owned(),
            payload: self.claim.payload.clone(),
            requirement: self.claim.requirement.clone(),
            resource: self.claim.resource.clone(),
            decimals: self.claim.decimals,
            terms: self.claim.ticket.clone(),
            metered: self.claim.requirement.scheme == SCHEME_UPTO,
        }
    }

    /// A metered answer whose body reports its charge ([`DeferredCharge`]): streamed, settled
    /// when it ends (also when the buyer hangs up first), its settlement sent as a trailer.
    fn metered_stream<B>(
        &self,
        key: &str,
        (mut head, body): (http::response::Parts, B),
        deferred: DeferredCharge,
        verified: Payment,
    ) -> Outcome
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (settled, over) = tokio::sync::oneshot::channel();
        let stream = MeteredStream::new(body, deferred, self.settlement(key), verified, (self.v1, settled));
        let name = if self.v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE };
        head.headers.insert(http::header::TRAILER, http::HeaderValue::from_static(name));
        head.headers.remove(http::header::CONTENT_LENGTH);
        challenge::make_private(&mut head.headers);
        let response = Response::from_parts(head, PaymentBody::stream(stream));
        Outcome { answer: Answer::Streamed(response, Some(over)), paid: true, counted: None }
    }

    /// Why the proof cannot pay, when the layer can tell alone.
    fn offline(&self) -> Option<String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        crate::offline::refusal(self.claim.payload, self.claim.requirement, &self.resource.url, now)
    }

    /// A new challenge for a refused proof, with the failed settlement header: 402, or 412 when
    /// the buyer must first let Permit2 spend its tokens (`permit2_allowance_required`, as
    /// x402's resource servers answer it).
    fn refused(&self, reason: &str, offers: &[Offer], headers: &http::HeaderMap) -> Buffered {
        let extensions = crate::pass::extensions(self.config, &self.resource.url, offers);
        let mut out = challenge::payment_required(reason, self.resource, offers, &extensions, headers);
        if reason.split(':').next() == Some("permit2_allowance_required") {
            out.status = http::StatusCode::PRECONDITION_FAILED;
        }
        if let Some(value) = challenge::failure_header(reason, &self.claim.requirement.network, self.v1) {
            out.headers.insert(if self.v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE }, value);
        }
        out
    }

    /// The answer, and what is remembered, for anything but a definite success (a metered
    /// settlement left pending: with the charge it settles, to be followed for). A refusal is
    /// remembered for this request; one of a repeat keeps the settled proof remembered.
    async fn not_paid(
        &self,
        key: &str,
        (verdict, charged): (Verdict, Option<AtomicAmount>),
        offers: &[Offer],
        headers: &http::HeaderMap,
    ) -> Buffered {
        match verdict {
            Verdict::Paid(_) => challenge::unavailable(false), // not reached: callers handle success
            Verdict::Pending { payment_id, transaction } => {
                let known = Known::Pending { ticket: self.ticket.clone(), payment_id: payment_id.clone(), charged };
                self.config.cache.put(key, known).await;
                challenge::pending(payment_id.as_deref(), transaction.as_deref(), self.config.retry_after_secs)
            }
            Verdict::Refused { reason } => {
                let answer = self.refused(&reason, offers, headers);
                let settled = matches!(self.config.cache.get(key).await.as_deref(), Some(Known::Accepted { .. }));
                if !settled {
                    let request = self.claim.ticket.request.clone();
                    let known = Known::Refused { ticket: self.ticket.clone(), request, reason };
                    self.config.cache.put(key, known).await;
                }
                answer
            }
            Verdict::Unavailable { timed_out, reason } => {
                tracing::warn!(%reason, "payment facilitator unavailable");
                challenge::unavailable(timed_out)
            }
        }
    }
}

/// Runs the handler for a paid request: `Payment` in its extensions, the settlement header on
/// its answer, streamed, its count given back if it fails or reaches no buyer.
pub(crate) async fn serve<S, ReqBody, ResBody>(
    config: &Config,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
    (v1, header): (bool, Option<http::HeaderValue>),
    counted: Option<Counted>,
) -> Result<Response<PaymentBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    request.extensions_mut().insert(payment);
    let mut response = inner.call(request).await?;
    if let Some(value) = header {
        let name = if v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE };
        response.headers_mut().insert(name, value);
    }
    challenge::make_private(response.headers_mut());
    // A failed handler's answer is given back: the buyer may retry with the same proof.
    let counted = counted.filter(|_| response.status().as_u16() < 400);
    if config.stream_upfront {
        return Ok(response.map(|b| PaymentBody::stream(b).counting(counted)));
    }
    let limit = config.max_buffered_body;
    Ok(response.map(|b| PaymentBody::stream(http_body_util::Limited::new(b, limit)).counting(counted)))
}
