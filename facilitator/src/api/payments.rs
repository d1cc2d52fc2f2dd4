//! `/payment/*`: hosted send and receive, status and history.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use tollgate_protocol::gateway::LocalReceiveRequest;
use tollgate_protocol::gateway::{
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, HistoryQuery, HistoryResponse, PaymentRecord, ReceivePaymentRequest,
    SendPaymentRequest,
};
use tollgate_protocol::{ChainFamily, DecimalAmount, ErrorCode, Network};

use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::hosted::{self, SendOutcome};
use crate::validate::{self, PRIORITY_FEE_MAX, PRIORITY_FEE_MIN, SEND_MAX_AMOUNT, SEND_MIN_AMOUNT, TIMEOUT_RANGE_SECS};

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
) -> Result<SendOutcome, ApiError> {
    let target = checked_send(&state, &req, Some((SEND_MIN_AMOUNT, SEND_MAX_AMOUNT)))?;
    match &target {
        Target::Network(n) if n.family() == ChainFamily::Solana => {
            hosted::solana::send(&state, &caller, &req, &target).await
        }
        Target::Network(_) => hosted::evm::send(&state, &caller, &req, &target).await,
        Target::Family(_) => Err(state.chains.unavailable(&target)),
    }
}

/// Checks a send request (hosted or local) and names its chain. `amount_bounds` are whole units.
pub(crate) fn checked_send(
    state: &AppState,
    req: &SendPaymentRequest,
    amount_bounds: Option<(&str, &str)>,
) -> Result<Target, ApiError> {
    let payer = validate::address("walletAddress", &req.wallet_address)?;
    validate::recipient(&req.recipient_address, &payer)?;
    let family = payer.family();
    validate::native_amount("amount", &req.amount, family, amount_bounds)?;
    if let Some(fee) = &req.priority_fee {
        validate::native_amount("priorityFee", fee, family, Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX)))?;
    }
    validate::resource(req.resource.as_deref())?;
    validate::metadata(req.metadata.as_ref())?;
    state.chains.target(family, req.network.as_ref())
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
) -> Result<SendOutcome, ApiError> {
    if let Some(t) = req.timeout
        && !TIMEOUT_RANGE_SECS.contains(&t)
    {
        return Err(ApiError::invalid_params(format!(
            "timeout must be between {} and {} seconds",
            TIMEOUT_RANGE_SECS.start(),
            TIMEOUT_RANGE_SECS.end()
        )));
    }
    let target = checked_receive(&state, &ReceiveFields::of_hosted(&req))?;
    hosted::receive(&state, &caller, &req, &target).await
}

/// The fields hosted and local receive requests share.
pub(crate) struct ReceiveFields<'a> {
    wallet: &'a str,
    proof: &'a str,
    expected: &'a DecimalAmount,
    resource: Option<&'a str>,
    facilitator_url: Option<&'a str>,
    network: Option<&'a Network>,
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
        }
    }
}

/// Checks a receive request (hosted or local) and names the chain its proof pays on: the proof's
/// network, which must match the wallet's family and an explicit `network`.
pub(crate) fn checked_receive(state: &AppState, r: &ReceiveFields<'_>) -> Result<Target, ApiError> {
    let wallet = validate::address("walletAddress", r.wallet)?;
    validate::native_amount("expectedAmount", r.expected, wallet.family(), None)?;
    validate::resource(r.resource)?;
    validate::facilitator_url(r.facilitator_url, &state.config.facilitator_allow_list)?;
    let payload = validate::payment_proof(r.proof)?;
    let proof_network = payload.network();
    if proof_network.family() != wallet.family() {
        return Err(ApiError::new(
            ErrorCode::InvalidPaymentProof,
            format!("the proof pays on {proof_network}, but walletAddress is a {} address", wallet.family()),
        ));
    }
    if let Some(n) = r.network
        && n != proof_network
    {
        return Err(ApiError::new(
            ErrorCode::InvalidPaymentProof,
            format!("the proof pays on {proof_network}, not on {n}"),
        ));
    }
    state.chains.target(wallet.family(), Some(proof_network))
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
    let stored = state.store.get_payment(&id).await.map_err(ApiError::internal)?;
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
