//! Talking to the facilitator: Tollgate's gateway (`POST /payment/receive`, one call that
//! verifies and settles) or any x402 facilitator (`POST /verify` + `POST /settle`).
//!
//! Every answer becomes a [`Verdict`]. Only [`Verdict::Paid`] serves the handler; a payment the
//! chain has not confirmed yet is [`Verdict::Pending`] (never a refusal: the buyer has paid); a
//! facilitator that cannot be reached is [`Verdict::Unavailable`] (502/504, nothing served).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tollgate_protocol::gateway::{PaymentRecord, PaymentStatus, ReceivePaymentRequest};
use tollgate_protocol::x402::{
    Asset, FacilitatorRequest, FacilitatorRequestV1, FacilitatorRequestV2, PaymentPayload, PaymentRequirements,
    PaymentRequirementsV1, ResourceInfo, SettleResponse, Supported, V1, V2, VerifyResponse,
};
use tollgate_protocol::{AtomicAmount, ErrorEnvelope, Network};

/// A settled payment, as handlers see it in request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    /// Who paid, when the facilitator says.
    pub payer: Option<String>,
    /// Atomic units paid.
    pub amount: AtomicAmount,
    /// What with.
    pub asset: Asset,
    /// Where.
    pub network: Network,
    /// The settling transaction.
    pub transaction: Option<String>,
    /// The gateway's payment id (x402 facilitators have none).
    pub payment_id: Option<String>,
}

/// A confirmed gateway payment as what it paid — which, for a payment followed by its id, may be
/// a cheaper request's price or someone else's wallet.
fn paid_for(record: PaymentRecord, requirement: &PaymentRequirements) -> Verdict {
    let to_payee = record.to == requirement.pay_to.to_string();
    let payment = record.asset.parse().ok().map(|asset| Payment {
        payer: record.payer.or(Some(record.from)),
        amount: record.amount_atomic,
        asset,
        network: record.network,
        transaction: record.transaction,
        payment_id: Some(record.payment_id),
    });
    match payment {
        Some(payment) if to_payee && payment.covers(requirement) => Verdict::Paid(payment),
        _ => Verdict::Refused {
            reason: "this payment does not pay this request (amount, asset, network or recipient differ)".into(),
        },
    }
}

impl Payment {
    /// Whether it pays `requirement`'s price: its asset, on its network, at least its amount.
    /// A payment made for one request of a route may be presented for a dearer one.
    #[must_use]
    pub fn covers(&self, requirement: &PaymentRequirements) -> bool {
        self.asset == requirement.asset
            && self.network == requirement.network
            && self.amount.get() >= requirement.amount.get()
    }
}

/// What the facilitator said about a proof.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Which API the facilitator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// Tollgate's gateway.
    Gateway,
    /// Any x402 facilitator.
    X402,
}

/// A facilitator's address, credentials and timeouts. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FacilitatorClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
    api: Api,
    timeout: Duration,
    supported: tokio::sync::RwLock<Option<(Instant, Supported)>>,
}

/// How long `/supported` is trusted.
const SUPPORTED_TTL: Duration = Duration::from_secs(300);
/// Default deadline of a facilitator call (settlement waits for the chain).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(40);

impl FacilitatorClient {
    /// Tollgate's gateway at `url`, with an API key.
    #[must_use]
    pub fn new(url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self::build(url.into(), Some(api_key.into()), Api::Gateway, DEFAULT_TIMEOUT)
    }

    /// Any x402 facilitator at `url` (`/verify`, `/settle`, `/supported`), without a key.
    #[must_use]
    pub fn x402(url: impl Into<String>) -> Self {
        Self::build(url.into(), None, Api::X402, DEFAULT_TIMEOUT)
    }

    /// The same facilitator, sending `Authorization: Bearer <key>`.
    #[must_use]
    pub fn with_api_key(self, key: impl Into<String>) -> Self {
        Self::build(self.inner.base.clone(), Some(key.into()), self.inner.api, self.inner.timeout)
    }

    /// The same facilitator with another deadline per call (default [`DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self::build(self.inner.base.clone(), self.inner.api_key.clone(), self.inner.api, timeout)
    }

    fn build(base: String, api_key: Option<String>, api: Api, timeout: Duration) -> Self {
        let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
        let base = base.trim_end_matches('/').to_owned();
        Self { inner: Arc::new(Inner { base, api_key, http, api, timeout, supported: tokio::sync::RwLock::new(None) }) }
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

    /// What the facilitator settles (cached for five minutes).
    ///
    /// # Errors
    /// [`Verdict::Unavailable`] when it cannot be asked.
    pub async fn supported(&self) -> Result<Supported, Verdict> {
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

    /// Verifies and settles through the gateway's `POST /payment/receive`.
    pub async fn receive(
        &self,
        requirement: &PaymentRequirements,
        decimals: u8,
        proof: &str,
        resource: &str,
    ) -> Verdict {
        let body = ReceivePaymentRequest {
            wallet_address: requirement.pay_to.to_string(),
            payment_proof: proof.to_owned(),
            expected_amount: tollgate_protocol::DecimalAmount::from_atomic(requirement.amount, decimals),
            resource: Some(resource.to_owned()),
            facilitator_url: None,
            timeout: Some(requirement.max_timeout_seconds.clamp(1, 300)),
            network: Some(requirement.network.clone()),
            asset: Some(requirement.asset),
        };
        let sent = self.request(reqwest::Method::POST, "/payment/receive").json(&body).send().await;
        self.gateway_verdict(sent, requirement).await
    }

    /// Follows a pending gateway payment (`GET /payment/status/{id}`).
    pub async fn status(&self, payment_id: &str, requirement: &PaymentRequirements) -> Verdict {
        let sent = self.request(reqwest::Method::GET, &format!("/payment/status/{payment_id}")).send().await;
        self.gateway_verdict(sent, requirement).await
    }

    async fn gateway_verdict(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
        requirement: &PaymentRequirements,
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
            return match record.status {
                PaymentStatus::Confirmed => paid_for(record, requirement),
                PaymentStatus::Failed | PaymentStatus::Expired => Verdict::Refused {
                    reason: format!("the payment {}: {}", record.status.as_str(), record.error.unwrap_or_default()),
                },
                _ => Verdict::Pending { payment_id: Some(record.payment_id), transaction: record.transaction },
            };
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

    /// x402 `POST /verify`: [`Verdict::Paid`] (without a transaction) when the payload would settle.
    pub async fn verify(
        &self,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: &ResourceInfo,
    ) -> Verdict {
        match self.post_x402::<VerifyResponse>("/verify", payload, requirement, resource).await {
            Ok(v) if v.is_valid => Verdict::Paid(paid(requirement, v.payer, None)),
            Ok(v) => Verdict::Refused { reason: v.invalid_reason.unwrap_or_else(|| "invalid payment".into()) },
            Err(unavailable) => unavailable,
        }
    }

    /// x402 `POST /settle`.
    pub async fn settle(
        &self,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: &ResourceInfo,
    ) -> Verdict {
        match self.post_x402::<SettleResponse>("/settle", payload, requirement, resource).await {
            Ok(s) if s.success => Verdict::Paid(paid(requirement, s.payer, Some(s.transaction))),
            // Broadcast without a verdict yet: not a refusal.
            Ok(s) if s.error_reason.as_deref().is_some_and(|r| r.ends_with("confirmation_timed_out")) => {
                Verdict::Pending { payment_id: None, transaction: Some(s.transaction).filter(|t| !t.is_empty()) }
            }
            Ok(s) => Verdict::Refused { reason: s.error_reason.unwrap_or_else(|| "settlement failed".into()) },
            Err(unavailable) => unavailable,
        }
    }

    /// Posts an x402 request body (in the payload's version) and reads the answer.
    async fn post_x402<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        payload: &PaymentPayload,
        requirement: &PaymentRequirements,
        resource: &ResourceInfo,
    ) -> Result<T, Verdict> {
        let body = facilitator_request(payload, requirement, resource);
        let answer = self.request(reqwest::Method::POST, path).json(&body).send().await.map_err(unavailable)?;
        if !answer.status().is_success() {
            return Err(Verdict::Unavailable {
                timed_out: false,
                reason: format!("POST {path} answered {}", answer.status()),
            });
        }
        answer.json::<T>().await.map_err(unavailable)
    }
}

/// A payment of what `requirement` asks, as an x402 facilitator reports it.
fn paid(requirement: &PaymentRequirements, payer: Option<String>, transaction: Option<String>) -> Payment {
    Payment {
        payer,
        amount: requirement.amount,
        asset: requirement.asset,
        network: requirement.network.clone(),
        transaction: transaction.filter(|t| !t.is_empty()),
        payment_id: None,
    }
}

fn unavailable(e: reqwest::Error) -> Verdict {
    Verdict::Unavailable { timed_out: e.is_timeout(), reason: e.to_string() }
}

/// The `/verify` / `/settle` body in the payload's version.
fn facilitator_request(
    payload: &PaymentPayload,
    requirement: &PaymentRequirements,
    resource: &ResourceInfo,
) -> FacilitatorRequest {
    match payload {
        PaymentPayload::V1(p) => FacilitatorRequest::V1(FacilitatorRequestV1 {
            x402_version: V1,
            payment_payload: p.clone(),
            payment_requirements: PaymentRequirementsV1::from_v2(requirement, resource),
        }),
        PaymentPayload::V2(p) => FacilitatorRequest::V2(FacilitatorRequestV2 {
            x402_version: V2,
            payment_payload: (**p).clone(),
            payment_requirements: requirement.clone(),
        }),
    }
}
