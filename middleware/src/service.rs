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
use crate::cache::{Flight, Known, ProofCache};
use crate::challenge::{self, Buffered};
use crate::facilitator::{Payment, Verdict};
use crate::future::ResponseFuture;
use crate::layer::{Config, ResourceUrl, SettlementOrder};
use crate::price::Price;

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
    let offers = match &config.static_offers {
        Some(offers) => offers.clone(),
        None => {
            let prices = match &config.pricing {
                Some(pricing) => pricing(&parts).await,
                None => Some(config.prices.clone()),
            };
            let Some(prices) = prices.filter(|p| !p.is_empty()) else {
                // Free for this request.
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(PaymentBody::stream));
            };
            match offers(&config, &prices).await {
                Ok(o) => Arc::new(o),
                Err(buffered) => return Ok(buffered.into_response()),
            }
        }
    };
    let resource = resource_info(&config, &parts);
    let challenge =
        |error: &str| challenge::payment_required(error, &resource, &offers, &parts.headers).into_response();

    // Which header, in which version.
    let (header, v1) = match (parts.headers.get(PAYMENT_SIGNATURE), parts.headers.get(X_PAYMENT)) {
        (Some(v), _) => (v, false),
        (None, Some(v)) => (v, true),
        (None, None) if config.static_offers.is_some() => {
            // The same challenge for every request to this resource: built once.
            let html = challenge::wants_html(&parts.headers);
            let cached = config.challenges.get_with((resource.url.clone(), html), || {
                Arc::new(challenge::payment_required(NO_PAYMENT, &resource, &offers, &parts.headers))
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
    let paid = Paid { config: &config, requirement, decimals: *decimals, header, payload, resource: &resource };

    loop {
        // Known already?
        match config.cache.get(key).await.as_deref() {
            // A proof remembered for this resource serves again only if it pays this request's
            // price: one route can price each request differently (a query, a body).
            Some(Known::Accepted { payment, .. }) if !payment.covers(requirement) => {
                return Ok(challenge("this payment was made for a cheaper request"));
            }
            Some(Known::Accepted { resource: r, payment, headers }) if *r == resource.url => {
                let header = if v1 { headers.0.clone() } else { headers.1.clone() };
                let payment = payment.clone();
                return serve(&config, inner, Request::from_parts(parts, body), payment, (v1, header)).await;
            }
            Some(Known::Accepted { .. }) => return Ok(challenge("this payment was made for another resource")),
            Some(Known::Pending { resource: r, .. }) if *r != resource.url => {
                return Ok(challenge("this payment was made for another resource"));
            }
            Some(Known::Refused { reason }) => return Ok(challenge(reason)),
            Some(Known::Pending { .. }) | None => {}
        }
        match config.cache.fly(key) {
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
                let outcome = match config.order {
                    SettlementOrder::SettleBefore => match paid.settle_before(key).await {
                        Verdict::Paid(payment) => {
                            config.cache.put(key, Known::accepted(&resource.url, &payment)).await;
                            match run_buffered(&config, inner, request, payment.clone()).await? {
                                Some(mut buffered) => {
                                    add_settlement_header(&mut buffered, &payment, v1);
                                    buffered
                                }
                                None => challenge::unavailable(false),
                            }
                        }
                        other => paid.not_paid(key, other, &offers, request.headers()).await,
                    },
                    SettlementOrder::VerifyThenSettle => {
                        let headers = request.headers().clone();
                        match paid.verify().await {
                            Verdict::Paid(verified) => match run_buffered(&config, inner, request, verified).await? {
                                // The handler failed: nothing is settled, the buyer keeps the money.
                                Some(buffered) if buffered.status.as_u16() >= 400 => buffered,
                                Some(mut buffered) => match paid.settle().await {
                                    Verdict::Paid(payment) => {
                                        config.cache.put(key, Known::accepted(&resource.url, &payment)).await;
                                        add_settlement_header(&mut buffered, &payment, v1);
                                        buffered
                                    }
                                    other => paid.not_paid(key, other, &offers, &headers).await,
                                },
                                None => challenge::unavailable(false),
                            },
                            other => paid.not_paid(key, other, &offers, &headers).await,
                        }
                    }
                };
                leader.finish(Some(Arc::new(outcome.clone())));
                return Ok(outcome.into_response());
            }
        }
    }
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
}

impl Paid<'_> {
    /// Settle-before order: the gateway's one call, or x402 verify then settle; a pending
    /// payment remembered for this proof is followed instead.
    async fn settle_before(&self, key: &str) -> Verdict {
        let facilitator = &self.config.facilitator;
        if let Some(known) = self.config.cache.get(key).await
            && let Known::Pending { payment_id: Some(id), .. } = &*known
            && facilitator.is_gateway()
        {
            return facilitator.status(id, self.requirement).await;
        }
        if facilitator.is_gateway() {
            return facilitator.receive(self.requirement, self.decimals, self.header, &self.resource.url).await;
        }
        match self.verify().await {
            Verdict::Paid(_) => self.settle().await,
            other => other,
        }
    }

    /// x402 `/verify`.
    async fn verify(&self) -> Verdict {
        self.config.facilitator.verify(self.payload, self.requirement, self.resource).await
    }

    /// x402 `/settle`.
    async fn settle(&self) -> Verdict {
        self.config.facilitator.settle(self.payload, self.requirement, self.resource).await
    }

    /// The answer, and what is remembered, for anything but a definite success.
    async fn not_paid(&self, key: &str, verdict: Verdict, offers: &[Offer], headers: &http::HeaderMap) -> Buffered {
        match verdict {
            Verdict::Paid(_) => challenge::unavailable(false), // not reached: callers handle success
            Verdict::Pending { payment_id, transaction } => {
                let known = Known::Pending { resource: self.resource.url.clone(), payment_id: payment_id.clone() };
                self.config.cache.put(key, known).await;
                challenge::pending(payment_id.as_deref(), transaction.as_deref(), self.config.retry_after_secs)
            }
            Verdict::Refused { reason } => {
                self.config.cache.put(key, Known::Refused { reason: reason.clone() }).await;
                challenge::payment_required(&reason, self.resource, offers, headers)
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

/// The resource of this request.
fn resource_info(config: &Config, parts: &http::request::Parts) -> ResourceInfo {
    let url = match &config.resource {
        ResourceUrl::Fixed(url) => url.clone(),
        ResourceUrl::FromRequest { base } => {
            let base = base.clone().unwrap_or_else(|| {
                let host = parts.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
                format!("http://{host}")
            });
            format!("{base}{}", parts.uri.path())
        }
    };
    ResourceInfo { url, description: config.description.clone(), mime_type: config.mime_type.clone() }
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

/// The offered requirement a payload pays: v2 must name one exactly (its `accepted`); v1 names
/// scheme and network.
fn matching(offers: &[Offer], payload: &PaymentPayload) -> Option<usize> {
    offers.iter().position(|(r, _)| match payload {
        PaymentPayload::V2(p) => {
            let a = &p.accepted;
            a.scheme == r.scheme
                && a.network == r.network
                && a.amount == r.amount
                && a.asset == r.asset
                && a.pay_to == r.pay_to
        }
        PaymentPayload::V1(p) => p.scheme == r.scheme && p.network == r.network,
    })
}
