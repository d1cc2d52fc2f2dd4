//! `/transaction/*`: local mode (unsigned transactions the caller signs).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use tollgate_protocol::ChainFamily;
use tollgate_protocol::gateway::{
    ConfirmTransactionRequest, LocalReceiveRequest, PaymentMode, PaymentRecord, SendPaymentRequest, UnsignedTransaction,
};

use super::payments::{ReceiveFields, checked_receive, checked_send};
use crate::AppState;
use crate::auth::Caller;
use crate::chains::Target;
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::local;
use crate::validate::{self, PRIORITY_FEE_MAX, PRIORITY_FEE_MIN};

/// Longest transaction id accepted (a Solana signature is 88 base58 characters, an EVM hash 66).
const MAX_TX_ID_LEN: usize = 128;

/// Build an unsigned transaction paying `recipientAddress` from `walletAddress`.
#[utoipa::path(post, path = "/transaction/send", tag = "transactions", request_body = SendPaymentRequest,
    responses(
        (status = 200, body = UnsignedTransaction),
        (status = 400, description = "INVALID_PARAMETERS / INVALID_RECIPIENT", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn send(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<SendPaymentRequest>,
) -> Result<Json<UnsignedTransaction>, ApiError> {
    // The source contract bounds amounts of /payment/send only; a local build needs them positive.
    let target = checked_send(&state, &req, None)?;
    match &target {
        Target::Network(n) if n.family() == ChainFamily::Solana => {
            Ok(Json(local::solana::build(&state, &caller, &req, &target).await?))
        }
        Target::Network(_) => Ok(Json(local::evm::build(&state, &caller, &req, &target).await?)),
        Target::Family(_) => Err(state.chains.unavailable(&target)),
    }
}

/// Verify a buyer's proof and return the transaction the seller signs (as fee payer of an x402
/// `exact` transfer) or just broadcasts (an `exact-native` signed transfer) to settle it; then
/// report it with `/transaction/confirm`. `priorityFee` caps the priority fee the seller pays.
#[utoipa::path(post, path = "/transaction/receive", tag = "transactions", request_body = LocalReceiveRequest,
    responses(
        (status = 200, body = UnsignedTransaction),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INVALID_PAYMENT_PROOF", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn receive(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<LocalReceiveRequest>,
) -> Result<Json<UnsignedTransaction>, ApiError> {
    let target = checked_receive(&state, &ReceiveFields::of_local(&req))?;
    if let Some(fee) = &req.priority_fee {
        let family = validate::address("walletAddress", &req.wallet_address)?.family();
        validate::native_amount("priorityFee", fee, family, Some((PRIORITY_FEE_MIN, PRIORITY_FEE_MAX)))?;
    }
    match &target {
        Target::Network(n) if n.family() == ChainFamily::Solana => {
            Ok(Json(local::solana::receive(&state, &caller, &req, &target).await?))
        }
        Target::Network(_) => Ok(Json(local::evm::receive(&state, &caller, &req, &target).await?)),
        Target::Family(_) => Err(state.chains.unavailable(&target)),
    }
}

/// Report the signed transaction of a local-mode payment; answers after an on-chain check.
#[utoipa::path(post, path = "/transaction/confirm", tag = "transactions", request_body = ConfirmTransactionRequest,
    responses(
        (status = 200, body = PaymentRecord),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 404, description = "NOT_FOUND", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn confirm(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<ConfirmTransactionRequest>,
) -> Result<Json<PaymentRecord>, ApiError> {
    if req.transaction.is_empty()
        || req.transaction.len() > MAX_TX_ID_LEN
        || !req.transaction.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(ApiError::invalid_params("transaction must be the transaction's signature (Solana) or hash (EVM)"));
    }
    let payment = state.store.get_payment(&req.payment_id).await.map_err(ApiError::internal)?;
    let payment = payment.filter(|p| p.visible_to(&caller.account_id)).ok_or_else(|| {
        ApiError::not_found(format!("no payment {}", req.payment_id.chars().take(64).collect::<String>()))
    })?;
    if payment.payment.mode != PaymentMode::Local {
        return Err(ApiError::invalid_params(
            "only local-mode payments (from /transaction/send or /transaction/receive) are confirmed here",
        ));
    }
    Ok(Json(local::confirm(&state, payment, &req.transaction).await?.to_record()))
}
