//! `/payment/*`: hosted send and receive, status and history.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use tollgate_protocol::ErrorCode;
use tollgate_protocol::gateway::{
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, HistoryQuery, HistoryResponse, PaymentRecord,
    ReceivePaymentRequest, SendPaymentRequest,
};

use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::validate::{
    self, PRIORITY_FEE_MAX, PRIORITY_FEE_MIN, SEND_MAX_AMOUNT, SEND_MIN_AMOUNT, TIMEOUT_RANGE_SECS,
};

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
    ApiJson(req): ApiJson<SendPaymentRequest>,
) -> Result<Json<PaymentRecord>, ApiError> {
    let payer = validate::address("walletAddress", &req.wallet_address)?;
    validate::recipient(&req.recipient_address, &payer)?;
    let family = payer.family();
    validate::native_amount(
        "amount",
        &req.amount,
        family,
        Some((SEND_MIN_AMOUNT, SEND_MAX_AMOUNT)),
    )?;
    if let Some(fee) = &req.priority_fee {
        validate::native_amount(
            "priorityFee",
            fee,
            family,
            Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX)),
        )?;
    }
    validate::resource(req.resource.as_deref())?;
    validate::metadata(req.metadata.as_ref())?;
    let target = state.chains.target(family, req.network.as_ref())?;
    Err(state.chains.unavailable(&target))
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
    ApiJson(req): ApiJson<ReceivePaymentRequest>,
) -> Result<Json<PaymentRecord>, ApiError> {
    let wallet = validate::address("walletAddress", &req.wallet_address)?;
    validate::native_amount(
        "expectedAmount",
        &req.expected_amount,
        wallet.family(),
        None,
    )?;
    validate::resource(req.resource.as_deref())?;
    validate::facilitator_url(
        req.facilitator_url.as_deref(),
        &state.config.facilitator_allow_list,
    )?;
    if let Some(t) = req.timeout
        && !TIMEOUT_RANGE_SECS.contains(&t)
    {
        return Err(ApiError::invalid_params(format!(
            "timeout must be between {} and {} seconds",
            TIMEOUT_RANGE_SECS.start(),
            TIMEOUT_RANGE_SECS.end()
        )));
    }
    let target = proof_target(&state, &wallet, req.network.as_ref(), &req.payment_proof)?;
    Err(state.chains.unavailable(&target))
}

/// The chain a proof is for, checked against the receiving wallet and an explicit `network`.
pub(crate) fn proof_target(
    state: &AppState,
    wallet: &tollgate_protocol::Address,
    network: Option<&tollgate_protocol::Network>,
    proof: &str,
) -> Result<Target, ApiError> {
    let payload = validate::payment_proof(proof)?;
    let proof_network = payload.network();
    if proof_network.family() != wallet.family() {
        return Err(ApiError::new(
            ErrorCode::InvalidPaymentProof,
            format!(
                "the proof pays on {proof_network}, but walletAddress is a {} address",
                wallet.family()
            ),
        ));
    }
    if let Some(n) = network
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
    let stored = state
        .store
        .get_payment(&id)
        .await
        .map_err(ApiError::internal)?;
    match stored {
        Some(p) if p.visible_to(&caller.account_id) => Ok(Json(p.to_record())),
        _ => Err(ApiError::not_found(format!(
            "no payment {}",
            id.chars().take(64).collect::<String>()
        ))),
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
        return Err(ApiError::invalid_params(format!(
            "limit must be between 1 and {HISTORY_MAX_LIMIT} (got {limit})"
        )));
    }
    let offset = query.offset.unwrap_or(0);
    if i64::try_from(offset).is_err() {
        return Err(ApiError::invalid_params("offset is too large"));
    }
    let canonical = address.to_string();
    let page = state
        .store
        .history(
            &caller.account_id,
            &canonical,
            query.kind.direction(),
            limit,
            offset,
        )
        .await
        .map_err(ApiError::internal)?;
    let payments = page
        .entries
        .into_iter()
        .map(|(p, direction)| PaymentRecord {
            direction: Some(direction),
            ..p.to_record()
        })
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
