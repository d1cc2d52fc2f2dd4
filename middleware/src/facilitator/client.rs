//! [`FacilitatorClient`]: a facilitator over HTTP — Tollgate's gateway (`POST /payment/receive`,
//! one call that verifies and settles) or any x402 facilitator (`POST /verify` + `POST /settle`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::StatusCode;
use tollgate_protocol::gateway::{PassHolder, PaymentRecord, PaymentStatus, ReceivePaymentRequest};
use tollgate_protocol::redact::{redact_url, redact_urls};
use tollgate_protocol::x402::{
    FacilitatorRequest, FacilitatorRequestV1, FacilitatorRequestV2, PaymentPayload, PaymentPayloadV2,
    PaymentRequirements, PaymentRequirementsV1, ResourceInfo, SettleResponse, Supported, V1, V2, VerifyResponse,
};
use tollgate_protocol::{ErrorEnvelope, Network};

use super::{BatchAnswer, BatchCall, Claim, Facilitator, Payment, SignInClaim, Verdict};

/// What a payment must have been made for to serve this request: the resource the seller names
/// (never the buyer's copy of it), and its method.
#[derive(Debug, Clone, Copy)]
struct Wanted<'a> {
    /// The resource URL of this request, as the layer makes it.
    pub resource: &'a str,
    /// This request's method.
    pub method: &'a str,
}

/// A confirmed gateway payment as what it paid: the gateway binds a payment to the resource,
/// method and price it was made for, and this checks its answer says so (a cheaper request's
/// price, someone else's wallet or another resource is not this request's payment). How many
/// answers it serves is the gateway's to count.
fn paid_for(record: PaymentRecord, requirement: &PaymentRequirements, wanted: Wanted<'_>) -> Verdict {
    // A payment made for another resource (followed by its id) pays that one, not this.
    if record.resource.as_deref() != Some(wanted.resource) {
        return Verdict::Refused { reason: "this payment was made for another resource".into() };
    }
    let method = record.metadata.as_ref().and_then(|m| m.get("method")).and_then(serde_json::Value::as_str);
    if method != Some(wanted.method) {
        let made_for = method.map_or_else(|| "a request of no named method".to_owned(), |m| format!("a {m} request"));
        return Verdict::Refused { reason: format!("this payment was made for {made_for}") };
    }
    let payment = match (record.asset.parse(), record.to.parse()) {
        (Ok(asset), Ok(pay_to)) => Some(Payment {
            payer: record.payer.or(Some(record.from)),
            amount: record.amount_atomic,
            asset,
            network: record.network,
            pay_to,
            transaction: record.transaction,
            payment_id: Some(record.payment_id),
            maximum: None,
            answers: record.answers,
            pass_until: None,
        }),
        _ => None,
    };
    match payment {
        Some(payment) if payment.covers(requirement) => Verdict::Paid(payment),
        _ => Verdict::Refused {
            reason: "this payment does not pay this request (amount, asset, network or recipient differ)".into(),
        },
    }
}

/// Which API the facilitator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// Tollgate's gateway.
    Gateway,
    /// Any x402 facilitator.
    X402,
}

/// A facilitator's address, credentials and timeouts. Cheap to clone. Its `Debug` shows the
/// URL's scheme, host and port, and never the API key.
#[derive(Clone)]
pub struct FacilitatorClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FacilitatorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FacilitatorClient")
            .field("url", &redact_url(&self.inner.base))
            .field("api", &self.inner.api)
            .field("api_key", &self.inner.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("timeout", &self.inner.timeout)
            .field("settle_margin", &self.inner.settle_margin)
            .finish_non_exhaustive()
    }
}

struct Inner {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
    api: Api,
    timeout: Duration,
    settle_margin: Duration,
    supported: tokio::sync::RwLock<Option<(Instant, Supported)>>,
}

/// How long `/supported` is trusted.
const SUPPORTED_TTL: Duration = Duration::from_secs(300);
/// Default deadline of a facilitator call that does not settle.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(40);
/// How much longer than the wait it asks for the layer waits for a settling call's answer.
pub const SETTLE_MARGIN: Duration = Duration::from_secs(10);
/// The longest settlement wait asked of a facilitator.
const MAX_WAIT_SECS: u64 = 300;

/// How long the facilitator is asked to wait for the chain when settling `requirement`.
fn settle_wait(requirement: &PaymentRequirements) -> u64 {
    requirement.max_timeout_seconds.clamp(1, MAX_WAIT_SECS)
}

impl FacilitatorClient {
    /// Tollgate's gateway at `url`, with an API key.
    #[must_use]
    pub fn new(url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self::build(url.into(), Some(api_key.into()), Api::Gateway, (DEFAULT_TIMEOUT, SETTLE_MARGIN))
    }

    /// Any x402 facilitator at `url` (`/verify`, `/settle`, `/supported`), without a key.
    #[must_use]
    pub fn x402(url: impl Into<String>) -> Self {
        Self::build(url.into(), None, Api::X402, (DEFAULT_TIMEOUT, SETTLE_MARGIN))
    }

    /// The same facilitator, sending `Authorization: Bearer <key>`.
    #[must_use]
    pub fn with_api_key(self, key: impl Into<String>) -> Self {
        let i = &self.inner;
        Self::build(i.base.clone(), Some(key.into()), i.api, (i.timeout, i.settle_margin))
    }

    /// The same facilitator with another deadline per call (default [`DEFAULT_TIMEOUT`]). A
    /// call that settles always waits at least the settlement wait it asks for (the
    /// requirement's `maxTimeoutSeconds`) plus [`SETTLE_MARGIN`].
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        let i = &self.inner;
        Self::build(i.base.clone(), i.api_key.clone(), i.api, (timeout, i.settle_margin))
    }

    /// The same facilitator, waiting `margin` (default [`SETTLE_MARGIN`]) beyond the settlement
    /// wait it asks for before it gives up on a settling call (more behind slow proxies).
    #[must_use]
    pub fn with_settle_margin(self, margin: Duration) -> Self {
        let i = &self.inner;
        Self::build(i.base.clone(), i.api_key.clone(), i.api, (i.timeout, margin))
    }

    fn build(base: String, api_key: Option<String>, api: Api, (timeout, settle_margin): (Duration, Duration)) -> Self {
        let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
        let base = base.trim_end_matches('/').to_owned();
        let supported = tokio::sync::RwLock::new(None);
        Self { inner: Arc::new(Inner { base, api_key, http, api, timeout, settle_margin, supported }) }
    }

    /// Whether this is Tollgate's gateway (one `/payment/receive` call settles).
    #[must_use]
    pub fn is_gateway(&self) -> bool {
        self.inner.api == Api::Gateway
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.inner.http.request(method, format!("{}{path}", self.inner.base));
        match &self.inner.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// The deadline of a call that settles `requirement`.
    fn settle_deadline(&self, requirement: &PaymentRequirements) -> Duration {
        self.inner.timeout.max(Duration::from_secs(settle_wait(requirement)) + self.inner.settle_margin)
    }

    /// Verifies and settles through the gateway's `POST /payment/receive`, for the asset the
    /// requirement names, with the layer's ticket: the gateway claims the payment's first answer
    /// with it. A call that times out may have settled: it is [`Verdict::Pending`], followed by
    /// sending the same proof again ([`Self::follow`]). The same proof sent again (a pending
    /// payment followed, a buyer's retry, another instance) is answered with the caller's
    /// payment holding it and one more answer claimed, or refused once its ticket is used up.
    async fn receive(&self, claim: Claim<'_>) -> Verdict {
        let requirement = claim.requirement;
        let wanted = wanted(&claim);
        let body = ReceivePaymentRequest {
            wallet_address: requirement.pay_to.to_string(),
            payment_proof: claim.header.to_owned(),
            expected_amount: tollgate_protocol::DecimalAmount::from_atomic(requirement.amount, claim.decimals),
            resource: Some(wanted.resource.to_owned()),
            method: Some(wanted.method.to_owned()),
            facilitator_url: None,
            timeout: Some(settle_wait(requirement)),
            network: Some(requirement.network.clone()),
            asset: Some(requirement.asset),
            ticket: Some(claim.ticket.clone()),
            // The seller's declaration (never the buyer's echo), for the facilitator's catalog.
            discovery: claim.discovery.map(|declaration| tollgate_protocol::gateway::ReceiveDiscovery {
                resource: claim.resource.clone(),
                accepted: requirement.clone(),
                declaration: declaration.clone(),
            }),
        };
        let sent = self
            .request(reqwest::Method::POST, "/payment/receive")
            .timeout(self.settle_deadline(requirement))
            .json(&body)
            .send()
            .await;
        match sent {
            Err(e) if e.is_timeout() => Verdict::Pending { payment_id: None, transaction: None },
            sent => self.gateway_verdict(sent, requirement, wanted).await,
        }
    }

    async fn gateway_verdict(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
        requirement: &PaymentRequirements,
        wanted: Wanted<'_>,
    ) -> Verdict {
        let answer = match sent {
            Ok(a) => a,
            Err(e) => return unavailable(e),
        };
        let status = answer.status();
        if status.is_success() {
            let record: PaymentRecord = match answer.json().await {
                Ok(r) => r,
                Err(e) => return unavailable(e),
            };
            let verdict = match record.status {
                PaymentStatus::Confirmed => paid_for(record, requirement, wanted),
                PaymentStatus::Failed | PaymentStatus::Expired => Verdict::Refused {
                    reason: format!("the payment {}: {}", record.status.as_str(), record.error.unwrap_or_default()),
                },
                // Another request's payment, still under way: not this request's to wait for.
                _ if record.resource.as_deref() != Some(wanted.resource) => {
                    Verdict::Refused { reason: "this payment was made for another resource".into() }
                }
                _ => Verdict::Pending { payment_id: Some(record.payment_id), transaction: record.transaction },
            };
            return verdict;
        }
        let message = answer.json::<ErrorEnvelope>().await.map(|e| e.error.message).unwrap_or_default();
        match status {
            StatusCode::PAYMENT_REQUIRED | StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND => {
                Verdict::Refused { reason: message }
            }
            _ => Verdict::Unavailable {
                timed_out: false,
                reason: format!("the facilitator answered {status}: {message}"),
            },
        }
    }

    /// `POST /payment/answer/release`: one answer of a counted payment given back.
    async fn release_answer(&self, payment_id: &str) {
        let body = tollgate_protocol::gateway::ReleaseAnswerRequest { payment_id: payment_id.to_owned() };
        match self.request(reqwest::Method::POST, "/payment/answer/release").json(&body).send().await {
            Ok(answer) if answer.status().is_success() => {}
            Ok(answer) => tracing::warn!(%payment_id, status = %answer.status(), "an answer could not be given back"),
            Err(e) => {
                tracing::warn!(%payment_id, error = %redact_urls(&e.to_string()), "an answer could not be given back")
            }
        }
    }

    /// x402 `POST /verify`: [`Verdict::Paid`] (without a transaction) when the payload would settle.
    async fn x402_verify(&self, claim: Claim<'_>) -> Verdict {
        let requirement = claim.requirement;
        match self.post_x402::<VerifyResponse>("/verify", claim, None).await {
            Ok(v) if v.is_valid => Verdict::Paid(paid(requirement, v.payer, None)),
            Ok(v) => Verdict::Refused { reason: x402_reason(v.invalid_reason, v.invalid_message, "invalid payment") },
            Err(unavailable) => unavailable,
        }
    }

    /// x402 `POST /settle`. A settlement the facilitator reports pending, and a call that
    /// times out (it may have settled), are [`Verdict::Pending`]: settling the same payload again
    /// follows it. A success on another network than required is not a payment of it.
    async fn x402_settle(&self, claim: Claim<'_>) -> Verdict {
        let requirement = claim.requirement;
        let deadline = Some(self.settle_deadline(requirement));
        match self.post_x402::<SettleResponse>("/settle", claim, deadline).await {
            Ok(s) if s.success && !names_network(&s.network, &requirement.network) => Verdict::Unavailable {
                timed_out: false,
                reason: format!("the facilitator settled on {}, not {}", s.network, requirement.network),
            },
            Ok(s) if s.success => {
                let mut payment = paid(requirement, s.payer, Some(s.transaction));
                // Tollgate's facilitator names its payment and counts its answers.
                payment.payment_id = s.payment_id;
                payment.answers = s.answers;
                Verdict::Paid(payment)
            }
            // Broadcast without a verdict yet: not a refusal.
            Ok(s) if s.error_reason.as_deref().is_some_and(is_pending_reason) => {
                Verdict::Pending { payment_id: None, transaction: Some(s.transaction).filter(|t| !t.is_empty()) }
            }
            Ok(s) => Verdict::Refused { reason: x402_reason(s.error_reason, s.error_message, "settlement failed") },
            Err(Verdict::Unavailable { timed_out: true, .. }) => {
                Verdict::Pending { payment_id: None, transaction: None }
            }
            Err(unavailable) => unavailable,
        }
    }

    /// Posts an x402 request body (in the payload's version, with the layer's ticket) and reads
    /// the answer.
    async fn post_x402<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        claim: Claim<'_>,
        deadline: Option<Duration>,
    ) -> Result<T, Verdict> {
        let mut body = facilitator_request(claim.payload, claim.requirement, claim.resource, claim.discovery);
        // Facilitators other than Tollgate's ignore what they do not know.
        match &mut body {
            FacilitatorRequest::V1(r) => r.ticket = Some(claim.ticket.clone()),
            FacilitatorRequest::V2(r) => r.ticket = Some(claim.ticket.clone()),
        }
        let mut request = self.request(reqwest::Method::POST, path).json(&body);
        if let Some(deadline) = deadline {
            request = request.timeout(deadline);
        }
        let answer = request.send().await.map_err(unavailable)?;
        if !answer.status().is_success() {
            return Err(Verdict::Unavailable {
                timed_out: false,
                reason: format!("POST {path} answered {}", answer.status()),
            });
        }
        answer.json::<T>().await.map_err(unavailable)
    }
}

/// What the layer binds a gateway payment to, from a claim.
fn wanted<'a>(claim: &Claim<'a>) -> Wanted<'a> {
    Wanted { resource: &claim.resource.url, method: claim.method() }
}

#[async_trait]
impl Facilitator for FacilitatorClient {
    /// What the facilitator settles (cached for five minutes).
    ///
    /// # Errors
    /// [`Verdict::Unavailable`] when it cannot be asked.
    async fn supported(&self) -> Result<Supported, Verdict> {
        if let Some((at, s)) = &*self.inner.supported.read().await
            && at.elapsed() < SUPPORTED_TTL
        {
            return Ok(s.clone());
        }
        let answer = self.request(reqwest::Method::GET, "/supported").send().await.map_err(unavailable)?;
        if !answer.status().is_success() {
            return Err(Verdict::Unavailable {
                timed_out: false,
                reason: format!("GET /supported answered {}", answer.status()),
            });
        }
        let supported: Supported = answer.json().await.map_err(unavailable)?;
        *self.inner.supported.write().await = Some((Instant::now(), supported.clone()));
        Ok(supported)
    }

    /// The gateway's one call, or x402 verify then settle.
    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        if self.is_gateway() {
            return self.receive(claim).await;
        }
        match self.verify(claim).await {
            // Settled before for this seller: that settlement, its repeat claimed already.
            Verdict::Paid(payment) if payment.transaction.is_some() => Verdict::Paid(payment),
            Verdict::Paid(_) => self.settle(claim).await,
            other => other,
        }
    }

    /// x402 `/verify`. A proof settled already is settled again: Tollgate's facilitator answers
    /// the seller's own settlement for the same terms (the first answer was lost: the buyer hung
    /// up), and any other settlement is refused, so the buyer is never refused after paying.
    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        match self.x402_verify(claim).await {
            Verdict::Refused { reason } if reason.starts_with("duplicate_settlement") => self.x402_settle(claim).await,
            other => other,
        }
    }

    /// x402 `/settle`.
    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        self.x402_settle(claim).await
    }

    /// x402 `/verify` or `/settle` of a batch-settlement payload, with the key (Tollgate's
    /// facilitator signs claims and refunds for the account's own receiving wallets). A settling
    /// call that times out may have settled: [`Verdict::Pending`].
    async fn batch(&self, call: BatchCall<'_>) -> Result<BatchAnswer, Verdict> {
        let body = FacilitatorRequestV2 {
            x402_version: V2,
            payment_payload: call.payload.clone(),
            payment_requirements: call.requirement.clone(),
            ticket: None,
        };
        let path = if call.settle { "/settle" } else { "/verify" };
        let mut request = self.request(reqwest::Method::POST, path).json(&body);
        if call.settle {
            request = request.timeout(self.settle_deadline(call.requirement));
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) if call.settle && e.is_timeout() => {
                return Err(Verdict::Pending { payment_id: None, transaction: None });
            }
            Err(e) => return Err(unavailable(e)),
        };
        if !answer.status().is_success() {
            return Err(Verdict::Unavailable {
                timed_out: false,
                reason: format!("POST {path} answered {}", answer.status()),
            });
        }
        if call.settle {
            BatchAnswer::of_settle(answer.json().await.map_err(unavailable)?)
        } else {
            Ok(BatchAnswer::of_verify(answer.json().await.map_err(unavailable)?))
        }
    }

    /// Follows a payment this layer saw pending, or claims a repeat of one it settled: the
    /// proof sent again — to the gateway's receive, or x402's `/settle` — which Tollgate's
    /// facilitator answers with the caller's payment holding it and one more answer counted
    /// (or refuses, once its ticket is used up). Any other x402 facilitator refuses a settled
    /// proof.
    async fn follow(&self, _payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        if self.is_gateway() { self.receive(claim).await } else { self.x402_settle(claim).await }
    }

    /// `POST /passes/sign-in` (Tollgate's facilitator).
    async fn sign_in(&self, sign_in: SignInClaim<'_>) -> Result<PassHolder, Verdict> {
        let body = tollgate_protocol::gateway::PassSignIn {
            sign_in: sign_in.header.to_owned(),
            origin: sign_in.origin.to_owned(),
            scope: sign_in.scope.to_owned(),
        };
        let answer =
            self.request(reqwest::Method::POST, "/passes/sign-in").json(&body).send().await.map_err(unavailable)?;
        let status = answer.status();
        if status.is_success() {
            return answer.json::<PassHolder>().await.map_err(unavailable);
        }
        let message = answer.json::<ErrorEnvelope>().await.map(|e| e.error.message).unwrap_or_default();
        Err(match status {
            StatusCode::PAYMENT_REQUIRED | StatusCode::BAD_REQUEST => Verdict::Refused { reason: message },
            _ => Verdict::Unavailable {
                timed_out: false,
                reason: format!("POST /passes/sign-in answered {status}: {message}"),
            },
        })
    }

    /// `POST /payment/answer/release` (Tollgate's facilitator), for a payment it counted.
    async fn release(&self, payment: &Payment) {
        if let (Some(id), Some(_)) = (&payment.payment_id, payment.answers) {
            self.release_answer(id).await;
        }
    }
}

/// x402 reasons of a settlement broadcast but not yet confirmed: x402 v2's
/// `settlement_pending`, and the `*_confirmation_timed_out` of the exact schemes.
pub(super) fn is_pending_reason(reason: &str) -> bool {
    reason == "settlement_pending" || reason.ends_with("confirmation_timed_out")
}

/// Whether an x402 answer's network (CAIP-2, a v1 name, or left out) is `network`.
fn names_network(answered: &str, network: &Network) -> bool {
    answered.is_empty() || answered.parse::<Network>().is_ok_and(|n| n == *network)
}

/// `reason: message` of an x402 refusal (the reason code first, as the layer reports it).
pub(super) fn x402_reason(reason: Option<String>, message: Option<String>, default: &str) -> String {
    match (reason, message) {
        (Some(r), Some(m)) if !m.is_empty() => format!("{r}: {m}"),
        (Some(r), _) => r,
        (None, Some(m)) => m,
        (None, None) => default.to_owned(),
    }
}

/// A payment of what `requirement` asks, as an x402 facilitator reports it: x402 answers name
/// the payer, the transaction and the network (checked), and a success means the facilitator
/// settled exactly the requirement it was sent.
fn paid(requirement: &PaymentRequirements, payer: Option<String>, transaction: Option<String>) -> Payment {
    Payment {
        payer,
        amount: requirement.amount,
        asset: requirement.asset,
        network: requirement.network.clone(),
        pay_to: requirement.pay_to,
        transaction: transaction.filter(|t| !t.is_empty()),
        payment_id: None,
        maximum: None,
        answers: None,
        pass_until: None,
    }
}

fn unavailable(e: reqwest::Error) -> Verdict {
    Verdict::Unavailable { timed_out: e.is_timeout(), reason: redact_urls(&e.to_string()) }
}

/// The `/verify` / `/settle` body in the payload's version.
fn facilitator_request(
    payload: &PaymentPayload,
    requirement: &PaymentRequirements,
    resource: &ResourceInfo,
    discovery: Option<&serde_json::Value>,
) -> FacilitatorRequest {
    match payload {
        PaymentPayload::V1(p) => FacilitatorRequest::V1(FacilitatorRequestV1 {
            x402_version: V1,
            payment_payload: p.clone(),
            payment_requirements: PaymentRequirementsV1::from_v2(requirement, resource),
            ticket: None,
        }),
        // The buyer's copy of the resource is a claim: the seller names what is paid for, and
        // the facilitator binds (and answers a repeat for) the resource it is sent. So with the
        // route's discovery declaration: the seller's, or none, whatever the buyer echoed.
        PaymentPayload::V2(p) => {
            let mut extensions = p.extensions.clone();
            match discovery {
                Some(declared) => {
                    extensions.insert(tollgate_protocol::x402::bazaar::EXTENSION.to_owned(), declared.clone())
                }
                None => extensions.remove(tollgate_protocol::x402::bazaar::EXTENSION),
            };
            FacilitatorRequest::V2(FacilitatorRequestV2 {
                x402_version: V2,
                payment_payload: PaymentPayloadV2 { resource: Some(resource.clone()), extensions, ..(**p).clone() },
                payment_requirements: requirement.clone(),
                ticket: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PAY_TO: &str = "0x1111111111111111111111111111111111111111";

    fn requirement() -> PaymentRequirements {
        serde_json::from_value(json!({"scheme": "exact-native", "network": "eip155:8453", "amount": "100",
            "asset": "native", "payTo": PAY_TO, "maxTimeoutSeconds": 60}))
        .unwrap()
    }

    /// A confirmed gateway record for `resource` and a GET, confirmed `ago` seconds ago.
    fn record(resource: Option<&str>, ago: i64) -> PaymentRecord {
        let at = (chrono::Utc::now() - chrono::Duration::seconds(ago)).to_rfc3339();
        let record = json!({"paymentId": "pay_1", "status": "confirmed", "mode": "hosted",
            "network": "eip155:8453", "from": PAY_TO, "to": PAY_TO, "amount": 1,
            "amountAtomic": "1000000000000000000", "asset": "native", "fee": null, "transaction": "0xab",
            "resource": resource, "metadata": {"method": "GET"}, "createdAt": at, "updatedAt": at,
            "confirmedAt": at, "error": null});
        // Amounts are read from the JSON text.
        serde_json::from_str(&record.to_string()).unwrap()
    }

    #[test]
    fn a_gateway_payment_serves_only_its_resource_and_method() {
        let wanted = Wanted { resource: "https://shop.example/a", method: "GET" };
        let paid = |r: PaymentRecord| matches!(paid_for(r, &requirement(), wanted), Verdict::Paid(_));
        assert!(paid(record(Some("https://shop.example/a"), 60)));
        let delete = Wanted { method: "DELETE", ..wanted };
        assert!(!matches!(
            paid_for(record(Some("https://shop.example/a"), 60), &requirement(), delete),
            Verdict::Paid(_)
        ));
        let mut unnamed = record(Some("https://shop.example/a"), 60);
        unnamed.metadata = None;
        assert!(!paid(unnamed), "a payment of no named method");
        assert!(!paid(record(Some("https://shop.example/b"), 60)), "another resource");
        assert!(!paid(record(None, 60)), "no resource is not this one");
        let mut answered = record(Some("https://shop.example/a"), 60);
        answered.answers = Some(tollgate_protocol::ticket::Answered { served: 2, uses: 2 });
        let Verdict::Paid(payment) = paid_for(answered, &requirement(), wanted) else { panic!("paid") };
        assert_eq!(payment.answers, Some(tollgate_protocol::ticket::Answered { served: 2, uses: 2 }));
    }

    #[test]
    fn the_seller_names_the_resource_of_a_v2_request() {
        let accepted = requirement();
        let payload: PaymentPayload = serde_json::from_value(json!({"x402Version": 2, "accepted": accepted,
            "payload": {"transaction": "0x00"}, "resource": {"url": "https://shop.example/cheap"}}))
        .unwrap();
        let seller = ResourceInfo {
            url: "https://shop.example/dear".into(),
            description: String::new(),
            mime_type: String::new(),
            method: Some("GET".into()),
            service: tollgate_protocol::x402::bazaar::ServiceMetadata::default(),
        };
        let FacilitatorRequest::V2(sent) = facilitator_request(&payload, &accepted, &seller, None) else {
            panic!("v2")
        };
        assert_eq!(sent.payment_payload.resource, Some(seller));
    }

    #[test]
    fn the_facilitator_is_sent_the_sellers_discovery_declaration_never_the_buyers() {
        let accepted = requirement();
        let buyers = json!({"info": {"input": {"type": "http", "method": "GET"}}, "schema": {}, "note": "buy me"});
        let payload: PaymentPayload = serde_json::from_value(json!({"x402Version": 2, "accepted": accepted,
            "payload": {"transaction": "0x00"}, "extensions": {"bazaar": buyers, "payment-identifier": {"info": {"id": "abc"}}}}))
        .unwrap();
        let seller = ResourceInfo {
            url: "https://shop.example/weather".into(),
            description: String::new(),
            mime_type: String::new(),
            method: Some("GET".into()),
            service: tollgate_protocol::x402::bazaar::ServiceMetadata::default(),
        };
        let declared = json!({"info": {"input": {"type": "http", "method": "GET", "queryParams": {"city": "Lisbon"}}}, "schema": {}});
        let FacilitatorRequest::V2(sent) = facilitator_request(&payload, &accepted, &seller, Some(&declared)) else {
            panic!("v2")
        };
        assert_eq!(sent.payment_payload.extensions["bazaar"], declared);
        assert_eq!(sent.payment_payload.extensions["payment-identifier"], json!({"info": {"id": "abc"}}));
        let FacilitatorRequest::V2(sent) = facilitator_request(&payload, &accepted, &seller, None) else {
            panic!("v2")
        };
        assert!(
            !sent.payment_payload.extensions.contains_key("bazaar"),
            "a buyer's declaration reached the facilitator"
        );
    }
}
