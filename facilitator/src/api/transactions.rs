//! `/transaction/*`: local mode (unsigned transactions the caller signs).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tollgate_protocol::gateway::{
    ConfirmTransactionRequest, LocalReceiveRequest, PaymentRecord, SendPaymentRequest, UnsignedTransaction,
};
use tollgate_protocol::{AtomicAmount, DecimalAmount};

use super::payments::{ReceiveFields, receive_of, send_order};
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::app::AppState;
use crate::auth::Caller;

/// Longest transaction id accepted (a Solana signature is 88 base58 characters, an EVM hash 66).
const MAX_TX_ID_LEN: usize = 128;

/// Build an unsigned transaction paying `recipientAddress` from `walletAddress`.
#[utoipa::path(post, path = "/transaction/send", tag = "transactions", request_body = SendPaymentRequest,
    responses(
        (status = 200, body = UnsignedTransaction),
        (status = 400, description = "INVALID_PARAMETERS / INVALID_RECIPIENT", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INSUFFICIENT_BALANCE: the wallet cannot pay the amount plus the network fee", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn send(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<SendPaymentRequest>,
) -> Result<Json<UnsignedTransaction>, ApiError> {
    // The source contract bounds amounts of /payment/send only; a local build needs them positive.
    let order = send_order(&state, &caller, &req, None, Duration::ZERO)?;
    let built = state.payments().build(order).await?;
    let p = &built.payment.payment;
    let native = p.network.family().native_decimals();
    Ok(Json(UnsignedTransaction {
        payment_id: p.id.clone(),
        transaction: STANDARD.encode(&built.unsigned.transaction),
        encoding: "base64".into(),
        network: p.network.clone(),
        last_valid_block_height: built.unsigned.horizon,
        expires_at: p.expires_at.map_or(0, |t| t.timestamp()),
        estimated_fee: DecimalAmount::from_atomic(built.unsigned.fee, native),
        payer: None,
        amount: None,
    }))
}

/// Verify a buyer's proof and return the transaction the seller signs (as fee payer of an x402
/// `exact` transfer, or as sender of an EIP-3009 settlement) or just broadcasts (an
/// `exact-native` signed transfer) to settle it; then report it with `/transaction/confirm`.
/// `priorityFee` caps the priority fee the seller pays.
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
    let receive = receive_of(&state, &caller, &ReceiveFields::of_local(&req), Duration::ZERO)?;
    let handed = state.payments().hand_over(receive).await?;
    let p = &handed.payment.payment;
    let native = p.network.family().native_decimals();
    Ok(Json(UnsignedTransaction {
        payment_id: p.id.clone(),
        transaction: STANDARD.encode(&handed.transaction),
        encoding: "base64".into(),
        network: p.network.clone(),
        last_valid_block_height: handed.horizon,
        expires_at: handed.expires_at.timestamp(),
        estimated_fee: DecimalAmount::from_atomic(AtomicAmount(handed.fee), native),
        payer: Some(p.from.clone()),
        amount: Some(DecimalAmount::from_atomic(p.amount_atomic, p.decimals)),
    }))
}

/// Report the signed transaction of a local-mode payment; answers after an on-chain check.
#[utoipa::path(post, path = "/transaction/confirm", tag = "transactions", request_body = ConfirmTransactionRequest,
    responses(
        (status = 200, body = PaymentRecord),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INVALID_PAYMENT_PROOF: the transaction cannot be this payment's (another family's, paying otherwise, another payment's, not a hosted payment's own)", body = tollgate_protocol::ErrorEnvelope),
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
    let stored = state.payments().confirm(&caller.account_id, &req.payment_id, &req.transaction).await?;
    Ok(Json(stored.to_record()))
}
