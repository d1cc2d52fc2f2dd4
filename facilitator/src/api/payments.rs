//! `/payment/*`: hosted send and receive, status and history.
//!
//! Handlers read and validate the request, name the chain and the terms, call the payment core
//! ([`crate::payment::Payments`]) and render its answer; they hold no payment logic.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use http::StatusCode;
use tollgate_protocol::gateway::{
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, HistoryQuery, HistoryResponse, LocalReceiveRequest, PaymentRecord,
    PaymentStatus, ReceivePaymentRequest, ReleaseAnswerRequest, ReleasedAnswer, SendPaymentRequest,
};
use tollgate_protocol::ticket::Ticket;
use tollgate_protocol::x402::Asset;
use tollgate_protocol::{AtomicAmount, DecimalAmount, ErrorCode, Network};

use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::validate::{
    self, PRIORITY_FEE_MAX, PRIORITY_FEE_MIN, SEND_MAX_AMOUNT, SEND_MIN_AMOUNT, TIMEOUT_RANGE_SECS,
};
use crate::app::AppState;
use crate::auth::Caller;
use crate::chains::{Order, Price, Terms};
use crate::payment::{Receive, Repeat, SendOrder};
use crate::store::StoredPayment;

/// A hosted payment's answer: 200 with the confirmed record, 202 with the pending one.
#[derive(Debug)]
pub enum Answer {
    /// Confirmed.
    Confirmed(PaymentRecord),
    /// Broadcast, no verdict within the wait budget.
    Pending(PaymentRecord),
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Self::Confirmed(record) => (StatusCode::OK, Json(record)).into_response(),
            Self::Pending(record) => (StatusCode::ACCEPTED, Json(record)).into_response(),
        }
    }
}

/// A record that failed on chain, as the error `code` says it.
fn failed(record: &PaymentRecord, code: ErrorCode) -> ApiError {
    ApiError::new(
        code,
        format!(
            "the transaction failed on chain: {} (payment {})",
            record.error.as_deref().unwrap_or("unknown reason"),
            record.payment_id
        ),
    )
}

/// Execute a payment from one of the caller's custodial wallets.
#[utoipa::path(post, path = "/payment/send", tag = "payments", request_body = SendPaymentRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Replays the stored answer for a repeated request")),
    responses(
        (status = 200, description = "Confirmed; with `paymentProof`", body = PaymentRecord),
        (status = 202, description = "Broadcast, not yet confirmed (`pending`)", body = PaymentRecord),
        (status = 400, description = "INVALID_PARAMETERS / INVALID_RECIPIENT", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INSUFFICIENT_BALANCE", body = tollgate_protocol::ErrorEnvelope),
        (status = 403, description = "FORBIDDEN (plan, or not the caller's wallet)", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn send(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<SendPaymentRequest>,
) -> Result<Answer, ApiError> {
    let wait = Duration::from_secs(state.config.limits.send_wait_secs);
    let order = send_order(&state, &caller, &req, Some((SEND_MIN_AMOUNT, SEND_MAX_AMOUNT)), wait)?;
    let sent = state.payments().send(order).await?;
    let mut record = sent.payment.to_record();
    match record.status {
        PaymentStatus::Confirmed => {
            record.payment_proof = sent.proof;
            Ok(Answer::Confirmed(record))
        }
        PaymentStatus::Failed => Err(failed(&record, ErrorCode::PaymentVerificationFailed)),
        _ => Ok(Answer::Pending(record)),
    }
}

/// Checks a send request (hosted or local) into an order on its chain. `amount_bounds` are whole
/// units.
pub(crate) fn send_order(
    state: &AppState,
    caller: &Caller,
    req: &SendPaymentRequest,
    amount_bounds: Option<(&str, &str)>,
    wait: Duration,
) -> Result<SendOrder, ApiError> {
    let from = validate::address("walletAddress", &req.wallet_address)?;
    let to = validate::recipient(&req.recipient_address, &from)?;
    let family = from.family();
    let amount = validate::native_amount("amount", &req.amount, family, amount_bounds)?;
    let priority_fee = req
        .priority_fee
        .as_ref()
        .map(|fee| validate::native_amount("priorityFee", fee, family, Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX))))
        .transpose()?;
    validate::resource(req.resource.as_deref())?;
    validate::metadata(req.metadata.as_ref())?;
    Ok(SendOrder {
        account: caller.account_id.clone(),
        network: state.chains.network_for(family, req.network.as_ref())?,
        order: Order { from, to, amount, priority_fee },
        resource: req.resource.clone(),
        metadata: req.metadata.clone(),
        wait,
    })
}

/// Verify an incoming payment proof and settle it to `walletAddress`.
#[utoipa::path(post, path = "/payment/receive", tag = "payments", request_body = ReceivePaymentRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Replays the stored answer for a repeated request")),
    responses(
        (status = 200, description = "Confirmed; with `payer`", body = PaymentRecord),
        (status = 202, description = "Broadcast, not yet confirmed (`pending`)", body = PaymentRecord),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INVALID_PAYMENT_PROOF", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn receive(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<ReceivePaymentRequest>,
) -> Result<Answer, ApiError> {
    let timeout = req.timeout.unwrap_or(validate::DEFAULT_TIMEOUT_SECS);
    if !TIMEOUT_RANGE_SECS.contains(&timeout) {
        return Err(ApiError::invalid_params(format!(
            "timeout must be between {} and {} seconds",
            TIMEOUT_RANGE_SECS.start(),
            TIMEOUT_RANGE_SECS.end()
        )));
    }
    let wait = Duration::from_secs(timeout);
    let receive = receive_of(&state, &caller, &ReceiveFields::of_hosted(&req), wait)?;
    let stored = state.payments().receive(receive).await?;
    if let Some(discovery) = &req.discovery {
        catalog(&state, &caller, &stored, &req.payment_proof, discovery);
    }
    received(&stored)
}

/// Catalogs a confirmed receive's route as its seller declared it, when the offer declared is
/// the payment's own: the one the buyer's x402 v2 payload accepted, to the last field, and the
/// payment's network, asset, amount, recipient and resource (like an x402 `/settle`). A v1 proof
/// names no whole offer: nothing is cataloged.
fn catalog(
    state: &AppState,
    caller: &Caller,
    stored: &StoredPayment,
    proof: &str,
    discovery: &tollgate_protocol::gateway::ReceiveDiscovery,
) {
    let (p, accepted) = (&stored.payment, &discovery.accepted);
    let accepted_by_buyer = matches!(
        tollgate_protocol::x402::PaymentPayload::from_header(proof),
        Ok(tollgate_protocol::x402::PaymentPayload::V2(payload)) if payload.accepted == *accepted
    );
    let own_terms = accepted_by_buyer
        && p.network == accepted.network
        && p.to == accepted.pay_to.to_string()
        && p.asset == accepted.asset.to_string()
        && p.amount_atomic == accepted.amount
        && p.resource.as_deref() == Some(discovery.resource.url.as_str());
    if !state.config.discovery.catalog || p.status != PaymentStatus::Confirmed || !own_terms {
        return;
    }
    let mut extensions = serde_json::Map::new();
    extensions.insert(tollgate_protocol::x402::bazaar::EXTENSION.to_owned(), discovery.declaration.clone());
    // The gateway's answer is a payment record: what became of the declaration is not said.
    let _ = state.catalog.settled(&caller.account_id, 2, &discovery.resource, accepted, &extensions, state.clock.now());
}

/// The answer to a receive: 200 confirmed, 202 pending, 402 when the transaction failed.
fn received(stored: &StoredPayment) -> Result<Answer, ApiError> {
    let mut record = stored.to_record();
    record.payer = Some(record.from.clone());
    match record.status {
        PaymentStatus::Confirmed => Ok(Answer::Confirmed(record)),
        PaymentStatus::Failed | PaymentStatus::Expired => Err(failed(&record, ErrorCode::InvalidPaymentProof)),
        _ => Ok(Answer::Pending(record)),
    }
}

/// The fields hosted and local receive requests share.
pub(crate) struct ReceiveFields<'a> {
    wallet: &'a str,
    proof: &'a str,
    expected: &'a DecimalAmount,
    resource: Option<&'a str>,
    facilitator_url: Option<&'a str>,
    network: Option<&'a Network>,
    asset: Option<Asset>,
    priority_fee: Option<&'a DecimalAmount>,
    method: Option<&'a str>,
    ticket: Option<&'a Ticket>,
}

impl<'a> ReceiveFields<'a> {
    fn of_hosted(r: &'a ReceivePaymentRequest) -> Self {
        Self {
            wallet: &r.wallet_address,
            proof: &r.payment_proof,
            expected: &r.expected_amount,
            resource: r.resource.as_deref(),
            facilitator_url: r.facilitator_url.as_deref(),
            network: r.network.as_ref(),
            asset: r.asset,
            priority_fee: None,
            method: r.method.as_deref(),
            ticket: r.ticket.as_ref(),
        }
    }

    pub(crate) fn of_local(r: &'a LocalReceiveRequest) -> Self {
        Self {
            wallet: &r.wallet_address,
            proof: &r.payment_proof,
            expected: &r.expected_amount,
            resource: r.resource.as_deref(),
            facilitator_url: r.facilitator_url.as_deref(),
            network: r.network.as_ref(),
            asset: r.asset,
            priority_fee: r.priority_fee.as_ref(),
            method: None,
            ticket: None,
        }
    }
}

/// Checks a receive request (hosted or local) into the proof and the terms it must meet: paid
/// to `walletAddress`, on `network` (default: the wallet family's), in `asset` (default: the
/// native currency), at least `expectedAmount` of it.
pub(crate) fn receive_of(
    state: &AppState,
    caller: &Caller,
    r: &ReceiveFields<'_>,
    wait: Duration,
) -> Result<Receive, ApiError> {
    let wallet = validate::address("walletAddress", r.wallet)?;
    let family = wallet.family();
    let asset = r.asset.unwrap_or(Asset::Native);
    match asset {
        Asset::Native => {
            validate::native_amount("expectedAmount", r.expected, family, None)?;
        }
        Asset::Token(token) if token.family() != family => {
            return Err(ApiError::invalid_params(format!("asset is not a {family} token, but walletAddress is")));
        }
        Asset::Token(_) if r.expected.is_zero() => {
            return Err(ApiError::invalid_params("expectedAmount must be greater than 0"));
        }
        Asset::Token(_) => {}
    }
    validate::resource(r.resource)?;
    validate::facilitator_url(r.facilitator_url, &state.config.facilitator_allow_list)?;
    let fee_cap: Option<AtomicAmount> = r
        .priority_fee
        .map(|fee| validate::native_amount("priorityFee", fee, family, Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX))))
        .transpose()?;
    let payload = validate::payment_proof(r.proof)?;
    if payload.network().family() != family {
        return Err(ApiError::new(
            ErrorCode::InvalidPaymentProof,
            format!("the proof pays on {}, but walletAddress is a {family} address", payload.network()),
        ));
    }
    let terms = Terms {
        network: state.chains.network_for(family, r.network)?,
        pay_to: wallet,
        asset,
        price: Price::AtLeast(r.expected.clone()),
        resource: r.resource.map(str::to_owned),
        method: validate::method(r.method)?,
        extra: None,
        requirement: None,
        fee_cap,
    };
    let repeat = match r.ticket {
        Some(ticket) => {
            ticket.check().map_err(ApiError::invalid_params)?;
            Repeat::Counted(ticket.clone())
        }
        None => Repeat::Used,
    };
    let sponsorship = state.config.plans.get(caller.plan).sponsorship;
    Ok(Receive { account: caller.account_id.clone(), payload, terms, wait, repeat, sponsorship })
}

/// Give back one answer of a payment received with a `ticket`: the seller's layer served
/// nothing of it (its handler failed, or the buyer hung up before the first byte), so the
/// buyer's retry with the same proof is served.
#[utoipa::path(post, path = "/payment/answer/release", tag = "payments", request_body = ReleaseAnswerRequest,
    responses(
        (status = 200, description = "The answers still counted", body = ReleasedAnswer),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 404, description = "NOT_FOUND (unknown, not the caller's received payment, or bought no answers)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn release_answer(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<ReleaseAnswerRequest>,
) -> Result<Json<ReleasedAnswer>, ApiError> {
    if !validate::is_identifier(&req.payment_id) {
        return Err(ApiError::invalid_params("paymentId is not a payment id"));
    }
    let answered = state.payments().release_answer(&caller.account_id, &req.payment_id).await?;
    Ok(Json(ReleasedAnswer { payment_id: req.payment_id, served: answered.served, uses: answered.uses }))
}

/// The status and details of a payment of the caller's account.
#[utoipa::path(get, path = "/payment/status/{paymentId}", tag = "payments",
    params(("paymentId" = String, Path, description = "The payment's id (`pay_…`)")),
    responses(
        (status = 200, body = PaymentRecord),
        (status = 404, description = "NOT_FOUND (unknown, or not the caller's)", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<PaymentRecord>, ApiError> {
    let stored = if validate::is_identifier(&id) {
        state.store.get_payment(&id).await.map_err(ApiError::internal)?
    } else {
        None
    };
    match stored {
        Some(p) if p.visible_to(&caller.account_id) => Ok(Json(p.to_record())),
        _ => Err(ApiError::not_found(format!("no payment {}", id.chars().take(64).collect::<String>()))),
    }
}

/// A wallet's payments seen by the caller's account, newest first.
#[utoipa::path(get, path = "/payment/history/{walletAddress}", tag = "payments",
    params(("walletAddress" = String, Path, description = "EVM or Solana address"), HistoryQuery),
    responses(
        (status = 200, body = HistoryResponse),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn history(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiPath(wallet): ApiPath<String>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let address = validate::address("walletAddress", &wallet)?;
    let limit = query.limit.unwrap_or(HISTORY_DEFAULT_LIMIT);
    if !(1..=HISTORY_MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_params(format!("limit must be between 1 and {HISTORY_MAX_LIMIT} (got {limit})")));
    }
    let offset = query.offset.unwrap_or(0);
    if i64::try_from(offset).is_err() {
        return Err(ApiError::invalid_params("offset is too large"));
    }
    let canonical = address.to_string();
    let page = state
        .store
        .history(&caller.account_id, &canonical, query.kind.direction(), limit, offset)
        .await
        .map_err(ApiError::internal)?;
    let payments = page
        .entries
        .into_iter()
        .map(|(p, direction)| PaymentRecord { direction: Some(direction), ..p.to_record() })
        .collect();
    Ok(Json(HistoryResponse {
        wallet_address: canonical,
        kind: query.kind,
        limit,
        offset,
        total: page.total,
        payments,
    }))
}
