//! [`PaymentService`]: what the layer does to one request.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt as _;
use tollgate_protocol::x402::header::{PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE};
use tollgate_protocol::x402::{PaymentPayload, PaymentRequirements, ResourceInfo, SCHEME_EXACT};
use tollgate_protocol::{ChainFamily, Network};
use tower::Service;

use crate::body::{BoxError, PaymentBody};
use crate::cache::{Flight, Known, ProofCache, Ticket};
use crate::challenge::{self, Buffered};
use crate::facilitator::{Payment, Verdict, Wanted};
use crate::future::ResponseFuture;
use crate::layer::{Config, ResourceUrl, SettlementOrder};
use crate::price::{Price, Quote};

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
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PaymentService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
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

/// A requirement offered for this request, with the decimals of its asset.
pub(crate) type Offer = (PaymentRequirements, u8);

/// A payment header decoded and matched: its cache key, the offer it pays, the payload.
#[derive(Debug)]
pub(crate) struct Decoded {
    key: String,
    offer: usize,
    payload: PaymentPayload,
}

/// The challenge's message when no payment header came.
const NO_PAYMENT: &str = "payment required: send an X-PAYMENT or PAYMENT-SIGNATURE header";

/// The whole flow for one request.
async fn handle<S, ReqBody, ResBody>(
    config: Arc<Config>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<PaymentBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (parts, body) = request.into_parts();
    let (offers, named) = match &config.static_offers {
        Some(offers) => (offers.clone(), None),
        None => {
            let quote = match &config.pricing {
                Some(pricing) => pricing(&parts).await,
                None => Some(Quote::new(config.prices.clone())),
            };
            let Some(quote) = quote.filter(|q| !q.prices.is_empty()) else {
                // Free for this request.
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(PaymentBody::stream));
            };
            match offers(&config, &quote.prices).await {
                Ok(o) => (Arc::new(o), quote.resource),
                Err(buffered) => return Ok(buffered.into_response()),
            }
        }
    };
    let resource = resource_info(&config, &parts, named);
    let challenge = |error: &str| {
        challenge::payment_required(error, &resource, &offers, &config.extensions, &parts.headers).into_response()
    };

    // Which header, in which version.
    let (header, v1) = match (parts.headers.get(PAYMENT_SIGNATURE), parts.headers.get(X_PAYMENT)) {
        (Some(v), _) => (v, false),
        (None, Some(v)) => (v, true),
        (None, None) if config.static_offers.is_some() => {
            // The same challenge for every request to this resource: built once.
            let html = challenge::wants_html(&parts.headers);
            let cached = config.challenges.get_with((resource.url.clone(), html), || {
                Arc::new(challenge::payment_required(
                    NO_PAYMENT,
                    &resource,
                    &offers,
                    &config.extensions,
                    &parts.headers,
                ))
            });
            return Ok((*cached).clone().into_response());
        }
        (None, None) => return Ok(challenge(NO_PAYMENT)),
    };
    // A cheap (reference-counted) copy, so the request can move on while the text is used.
    let header_value = header.clone();
    let Ok(header) = header_value.to_str() else {
        return Ok(challenge::bad_request("the payment header is not ASCII").into_response());
    };
    // A header seen before (with the same offers) is not decoded again.
    let known_header = config.static_offers.as_ref().and_then(|_| config.decoded.get(header));
    let decoded = match known_header {
        Some(d) => d,
        None => {
            let payload = match PaymentPayload::from_header(header) {
                Ok(p) => p,
                Err(e) => {
                    return Ok(challenge::bad_request(&format!("malformed payment header: {e}")).into_response());
                }
            };
            let Some(offer) = matching(&offers, &payload) else {
                return Ok(challenge("the payment does not match any accepted way to pay this resource"));
            };
            let decoded = Arc::new(Decoded { key: ProofCache::key(&payload), offer, payload });
            if config.static_offers.is_some() {
                config.decoded.insert(header.to_owned(), decoded.clone());
            }
            decoded
        }
    };
    let (key, payload) = (&decoded.key, &decoded.payload);
    let (requirement, decimals) = &offers[decoded.offer];
    let ticket = Ticket { resource: resource.url.clone(), method: parts.method.clone() };
    // What the facilitator binds the payment to: the resource and the request's method.
    let bound = ResourceInfo { method: Some(ticket.method.as_str().to_owned()), ..resource.clone() };
    let paid = Paid {
        config: &config,
        requirement,
        decimals: *decimals,
        header,
        payload,
        resource: &resource,
        bound: &bound,
        ticket: &ticket,
        v1,
    };
    // Requests for other tickets settle apart: the facilitator decides which one the proof pays.
    let flight = format!("{key} {} {}", ticket.method, ticket.resource);

    loop {
        // Known already? A proof serves only the resource and method it paid for, and only a
        // price it covers: one route can price each request differently (a query, a body).
        let known = config.cache.get(key).await;
        let other_ticket = match known.as_deref() {
            Some(Known::Accepted { ticket: t, .. } | Known::Pending { ticket: t, .. }) => t.refuses(&ticket),
            _ => None,
        };
        if let Some(why) = other_ticket {
            return Ok(challenge(&why));
        }
        match known.as_deref() {
            Some(Known::Accepted { payment, .. }) if !payment.covers(requirement) => {
                return Ok(challenge("this payment was made for a cheaper request"));
            }
            Some(Known::Accepted { payment, headers, .. }) => {
                let header = if v1 { headers.0.clone() } else { headers.1.clone() };
                let payment = payment.clone();
                return serve(&config, inner, Request::from_parts(parts, body), payment, (v1, header)).await;
            }
            Some(Known::Refused { ticket: t, reason }) if *t == ticket => {
                return Ok(paid.refused(reason, &offers, &parts.headers).into_response());
            }
            Some(Known::Refused { .. } | Known::Pending { .. }) | None => {}
        }
        match config.cache.fly(&flight) {
            Flight::Follower(mut receiver) => {
                // Another request is settling this proof: share its outcome.
                if receiver.changed().await.is_ok() {
                    let shared = receiver.borrow().clone();
                    return Ok(match shared {
                        Some(buffered) => (*buffered).clone().into_response(),
                        None => challenge::unavailable(false).into_response(),
                    });
                }
                // Its request went away before finishing: start over.
            }
            Flight::Leader(leader) => {
                let request = Request::from_parts(parts, body);
                let headers = request.headers().clone();
                let pending = match known.as_deref() {
                    Some(Known::Pending { payment_id, .. }) => Some(payment_id.clone()),
                    _ => None,
                };
                let outcome = if let Some(reason) = pending.is_none().then(|| paid.offline()).flatten() {
                    // Refused without asking the facilitator.
                    paid.not_paid(key, Verdict::Refused { reason }, &offers, &headers).await
                } else if pending.is_some() || config.order == SettlementOrder::SettleBefore {
                    // Settle (or follow the settlement seen pending), then serve.
                    let verdict = match &pending {
                        Some(payment_id) => paid.follow(payment_id.as_deref()).await,
                        None => paid.settle_before().await,
                    };
                    match verdict {
                        Verdict::Paid(payment) => {
                            serve_settled((&config, key, &ticket), inner, request, &payment, v1).await?
                        }
                        other => paid.not_paid(key, other, &offers, &headers).await,
                    }
                } else {
                    // Verify, serve, and settle only a success.
                    match paid.verify().await {
                        // Settled already for this seller (its first answer was lost): paid.
                        Verdict::Paid(payment) if payment.transaction.is_some() => {
                            serve_settled((&config, key, &ticket), inner, request, &payment, v1).await?
                        }
                        Verdict::Paid(verified) => match run_buffered(&config, inner, request, verified).await? {
                            // The handler failed: nothing is settled, the buyer keeps the money.
                            Some(buffered) if buffered.status.as_u16() >= 400 => buffered,
                            Some(mut buffered) => match paid.settle().await {
                                Verdict::Paid(payment) => {
                                    config.cache.put(key, Known::accepted(&ticket, &payment)).await;
                                    add_settlement_header(&mut buffered, &payment, v1);
                                    buffered
                                }
                                other => paid.not_paid(key, other, &offers, &headers).await,
                            },
                            None => challenge::unavailable(false),
                        },
                        other => paid.not_paid(key, other, &offers, &headers).await,
                    }
                };
                leader.finish(Some(Arc::new(outcome.clone())));
                return Ok(outcome.into_response());
            }
        }
    }
}

/// A settled proof: remembered as accepted for its resource, then the handler's answer with the
/// settlement header.
async fn serve_settled<S, ReqBody, ResBody>(
    (config, key, ticket): (&Config, &str, &Ticket),
    inner: S,
    request: Request<ReqBody>,
    payment: &Payment,
    v1: bool,
) -> Result<Buffered, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    config.cache.put(key, Known::accepted(ticket, payment)).await;
    Ok(match run_buffered(config, inner, request, payment.clone()).await? {
        Some(mut buffered) => {
            add_settlement_header(&mut buffered, payment, v1);
            buffered
        }
        None => challenge::unavailable(false),
    })
}

/// Runs the handler with `payment` in the request's extensions and holds its answer in memory
/// (so requests waiting on the same proof can share it); `None` when the body fails or is over
/// the configured size.
async fn run_buffered<S, ReqBody, ResBody>(
    config: &Config,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
) -> Result<Option<Buffered>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send,
    S::Future: Send,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    request.extensions_mut().insert(payment);
    let (head, body) = inner.call(request).await?.into_parts();
    match http_body_util::Limited::new(body, config.max_buffered_body).collect().await {
        Ok(collected) => Ok(Some(Buffered { status: head.status, headers: head.headers, body: collected.to_bytes() })),
        Err(e) => {
            tracing::warn!(error = %e, "the paid response could not be read");
            Ok(None)
        }
    }
}

/// Adds `X-PAYMENT-RESPONSE` (v1) or `PAYMENT-RESPONSE` (v2).
fn add_settlement_header(buffered: &mut Buffered, payment: &Payment, v1: bool) {
    if let Some(value) = challenge::settlement_header(payment, v1) {
        buffered.headers.insert(if v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE }, value);
    }
}

/// What to settle, and how.
struct Paid<'a> {
    config: &'a Config,
    requirement: &'a PaymentRequirements,
    decimals: u8,
    header: &'a str,
    payload: &'a PaymentPayload,
    resource: &'a ResourceInfo,
    /// The resource with the request's method, as the facilitator is told.
    bound: &'a ResourceInfo,
    ticket: &'a Ticket,
    v1: bool,
}

impl Paid<'_> {
    /// Why the proof cannot pay, when the layer can tell alone.
    fn offline(&self) -> Option<String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        crate::offline::refusal(self.payload, self.requirement, &self.resource.url, now)
    }

    /// Settle-before order: the gateway's one call, or x402 verify then settle.
    async fn settle_before(&self) -> Verdict {
        let facilitator = &self.config.facilitator;
        if facilitator.is_gateway() {
            let wanted = Wanted {
                resource: &self.resource.url,
                method: self.ticket.method.as_str(),
                lifetime: self.config.ticket_lifetime,
            };
            return facilitator.receive(self.requirement, self.decimals, self.header, wanted).await;
        }
        match self.verify().await {
            Verdict::Paid(_) => self.settle().await,
            other => other,
        }
    }

    /// Follows a settlement seen pending (or whose answer was lost).
    async fn follow(&self, payment_id: Option<&str>) -> Verdict {
        let paid = (self.payload, self.header);
        let wanted = (self.bound, self.config.ticket_lifetime);
        self.config.facilitator.follow(payment_id, paid, self.requirement, self.decimals, wanted).await
    }

    /// x402 `/verify`. A proof settled already is settled again: Tollgate's facilitator answers
    /// the seller's own settlement for the same terms (the first answer was lost: the buyer hung
    /// up), and any other settlement is refused, so the buyer is never refused after paying.
    async fn verify(&self) -> Verdict {
        match self.config.facilitator.verify(self.payload, self.requirement, self.bound).await {
            Verdict::Refused { reason } if reason.starts_with("duplicate_settlement") => self.settle().await,
            other => other,
        }
    }

    /// x402 `/settle`.
    async fn settle(&self) -> Verdict {
        self.config.facilitator.settle(self.payload, self.requirement, self.bound).await
    }

    /// A new challenge for a refused proof, with the failed settlement header.
    fn refused(&self, reason: &str, offers: &[Offer], headers: &http::HeaderMap) -> Buffered {
        let mut out = challenge::payment_required(reason, self.resource, offers, &self.config.extensions, headers);
        if let Some(value) = challenge::failure_header(reason, &self.requirement.network, self.v1) {
            out.headers.insert(if self.v1 { X_PAYMENT_RESPONSE } else { PAYMENT_RESPONSE }, value);
        }
        out
    }

    /// The answer, and what is remembered, for anything but a definite success.
    async fn not_paid(&self, key: &str, verdict: Verdict, offers: &[Offer], headers: &http::HeaderMap) -> Buffered {
        match verdict {
            Verdict::Paid(_) => challenge::unavailable(false), // not reached: callers handle success
            Verdict::Pending { payment_id, transaction } => {
                let known = Known::Pending { ticket: self.ticket.clone(), payment_id: payment_id.clone() };
                self.config.cache.put(key, known).await;
                challenge::pending(payment_id.as_deref(), transaction.as_deref(), self.config.retry_after_secs)
            }
            Verdict::Refused { reason } => {
                let answer = self.refused(&reason, offers, headers);
                self.config.cache.put(key, Known::Refused { ticket: self.ticket.clone(), reason }).await;
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
/// its answer.
async fn serve<S, ReqBody, ResBody>(
    config: &Config,
    mut inner: S,
    mut request: Request<ReqBody>,
    payment: Payment,
    (v1, header): (bool, Option<http::HeaderValue>),
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
    let limit = config.max_buffered_body;
    Ok(response.map(|b| PaymentBody::stream(http_body_util::Limited::new(b, limit))))
}

/// The resource of this request: the configured URL, the one the pricing function named, or
/// the request's own (scheme and host from the configured base, `Forwarded`,
/// `X-Forwarded-Proto` / `X-Forwarded-Host` or `Host`; then path and query).
fn resource_info(config: &Config, parts: &http::request::Parts, named: Option<String>) -> ResourceInfo {
    let url = match (&config.resource, named) {
        (_, Some(url)) => url,
        (ResourceUrl::Fixed(url), None) => url.clone(),
        (ResourceUrl::FromRequest { base }, None) => {
            let base = base.clone().unwrap_or_else(|| request_base(&parts.headers, &parts.uri));
            let path = parts.uri.path_and_query().map_or("/", http::uri::PathAndQuery::as_str);
            format!("{base}{path}")
        }
    };
    ResourceInfo { url, description: config.description.clone(), mime_type: config.mime_type.clone(), method: None }
}

/// `scheme://host` as the request, or the proxy in front of it, names them.
fn request_base(headers: &http::HeaderMap, uri: &http::Uri) -> String {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // RFC 7239: the first element is the one the client's first proxy wrote.
    let forwarded = text("forwarded").and_then(|f| f.split(',').next()).map(|first| {
        let pair = |key: &str| {
            first.split(';').find_map(|p| {
                let (k, v) = p.trim().split_once('=')?;
                k.eq_ignore_ascii_case(key).then(|| v.trim_matches('"').to_owned())
            })
        };
        (pair("proto"), pair("host"))
    });
    let (proto, host) = forwarded.unwrap_or_default();
    let first = |name: &str| text(name).and_then(|v| v.split(',').next()).map(|v| v.trim().to_owned());
    let proto = proto.or_else(|| first("x-forwarded-proto")).or_else(|| uri.scheme_str().map(str::to_owned));
    let host = host
        .or_else(|| first("x-forwarded-host"))
        .or_else(|| text("host").map(str::to_owned))
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()));
    let proto = match proto.as_deref() {
        Some(p) if p.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    // A host with anything but host characters is not used to make a URL.
    let host = host.filter(|h| {
        !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'))
    });
    format!("{proto}://{}", host.as_deref().unwrap_or("localhost"))
}

/// The requirements for `prices`: each price's network (or the facilitator's for its chain),
/// and for Solana `exact` the facilitator's fee payer.
async fn offers(config: &Config, prices: &[Price]) -> Result<Vec<Offer>, Buffered> {
    let needs_supported =
        prices.iter().any(|p| p.network.is_none() || (p.scheme == SCHEME_EXACT && p.family == ChainFamily::Solana));
    let supported = if needs_supported {
        match config.facilitator.supported().await {
            Ok(s) => Some(s),
            Err(Verdict::Unavailable { timed_out, reason }) => {
                tracing::warn!(%reason, "payment facilitator unavailable");
                return Err(challenge::unavailable(timed_out));
            }
            Err(_) => return Err(challenge::unavailable(false)),
        }
    } else {
        None
    };
    let kinds = supported.as_ref().map(|s| s.kinds.as_slice()).unwrap_or_default();
    let mut out = Vec::with_capacity(prices.len());
    for price in prices {
        let network = price.network.clone().or_else(|| {
            kinds
                .iter()
                .filter(|k| k.x402_version == 2 && k.scheme == price.scheme)
                .filter_map(|k| k.network.parse::<Network>().ok())
                .find(|n| n.family() == price.family)
        });
        let Some(network) = network else {
            tracing::warn!(scheme = price.scheme, family = %price.family, "the facilitator settles no such payment; price left out");
            continue;
        };
        let mut extra = price.extra.clone();
        if price.scheme == SCHEME_EXACT && price.family == ChainFamily::Solana {
            let fee_payer = kinds
                .iter()
                .find(|k| k.x402_version == 2 && k.scheme == SCHEME_EXACT && k.network == network.to_string())
                .and_then(|k| k.extra.as_ref())
                .and_then(|e| e.get("feePayer"))
                .cloned();
            let Some(fee_payer) = fee_payer else {
                tracing::warn!(%network, "the facilitator has no Solana fee payer; exact price left out");
                continue;
            };
            let mut map = extra.and_then(|e| e.as_object().cloned()).unwrap_or_default();
            map.insert("feePayer".into(), fee_payer);
            extra = Some(serde_json::Value::Object(map));
        }
        if let Some(offer) = offer(price, network, extra, config.max_timeout_seconds) {
            out.push(offer);
        }
    }
    if out.is_empty() {
        return Err(challenge::unavailable(false));
    }
    Ok(out)
}

/// The requirement of one price on `network`.
pub(crate) fn offer(
    price: &Price,
    network: Network,
    extra: Option<serde_json::Value>,
    max_timeout_seconds: u64,
) -> Option<Offer> {
    Some((
        PaymentRequirements {
            scheme: price.scheme.to_owned(),
            network,
            amount: price.amount,
            asset: price.asset,
            pay_to: price.pay_to?,
            max_timeout_seconds,
            extra,
        },
        price.decimals,
    ))
}

/// The offered requirement a payload pays: v2 must have accepted one whole (scheme, network,
/// amount, asset, recipient, timeout and `extra`); v1 names scheme and network, and the
/// facilitator checks the rest against the requirement.
fn matching(offers: &[Offer], payload: &PaymentPayload) -> Option<usize> {
    offers.iter().position(|(r, _)| match payload {
        PaymentPayload::V2(p) => p.accepted == *r,
        PaymentPayload::V1(p) => p.scheme == r.scheme && p.network == r.network,
    })
}
