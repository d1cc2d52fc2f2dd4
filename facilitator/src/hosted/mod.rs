//! Hosted mode: the facilitator signs and settles for the caller with a custodial wallet.
//!
//! Handlers validate the request shape; this module does the payment: ownership of the wallet,
//! balance, building, signing, settlement, and the receipt the buyer hands to the seller.

pub mod evm;
pub mod solana;

use std::time::Duration;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use tollgate_protocol::ErrorCode;
use tollgate_protocol::gateway::{PaymentRecord, PaymentStatus, ReceivePaymentRequest};

use crate::AppState;
use crate::auth::Caller;
use crate::chains::{Backend, Target};
use crate::error::ApiError;
use crate::proofs::solana::FeePayer;
use crate::proofs::{self, Price, Terms};
use crate::refusal::ProofError;
use crate::settlement::engine::SettleError;
use crate::store::StoredPayment;
use crate::validate;

/// The result of a hosted send or receive.
#[derive(Debug)]
pub enum SendOutcome {
    /// Confirmed: the record with its `paymentProof`.
    Confirmed(PaymentRecord),
    /// Broadcast, no verdict within the wait budget.
    Pending(PaymentRecord),
}

impl IntoResponse for SendOutcome {
    /// 200 with the confirmed record, 202 with the pending one.
    fn into_response(self) -> Response {
        match self {
            Self::Confirmed(record) => (StatusCode::OK, Json(record)).into_response(),
            Self::Pending(record) => (StatusCode::ACCEPTED, Json(record)).into_response(),
        }
    }
}

/// The answer to a hosted send: 200 with the confirmed record and its `paymentProof` (made by
/// `proof`), 202 while pending, 502 when the transaction failed on chain.
///
/// # Errors
/// 502 `PAYMENT_VERIFICATION_FAILED` for a failed transaction; whatever `proof` returns.
pub(crate) fn send_outcome(
    stored: &StoredPayment,
    proof: impl FnOnce() -> Result<String, ApiError>,
) -> Result<SendOutcome, ApiError> {
    let mut record = stored.to_record();
    match record.status {
        PaymentStatus::Confirmed => {
            record.payment_proof = Some(proof()?);
            Ok(SendOutcome::Confirmed(record))
        }
        PaymentStatus::Failed => Err(ApiError::verification_failed(format!(
            "the transaction failed on chain: {} (payment {})",
            record.error.as_deref().unwrap_or("unknown reason"),
            record.payment_id
        ))),
        _ => Ok(SendOutcome::Pending(record)),
    }
}

/// A native payment (SOL, ETH) by the caller as hosted mode records it (`verified`); local mode
/// overrides status, mode and expiry.
pub(crate) fn native_payment(
    caller: &Caller,
    network: &tollgate_protocol::Network,
    (from, to): (&tollgate_protocol::Address, &tollgate_protocol::Address),
    amount: tollgate_protocol::AtomicAmount,
    fee: tollgate_protocol::AtomicAmount,
    req: &tollgate_protocol::gateway::SendPaymentRequest,
    now: chrono::DateTime<chrono::Utc>,
) -> crate::store::NewPayment {
    crate::store::NewPayment {
        fee_atomic: Some(fee),
        resource: req.resource.clone(),
        metadata: req.metadata.clone(),
        ..crate::store::NewPayment::native(
            format!("pay_{}", ulid::Ulid::new()),
            caller.account_id.clone(),
            network.clone(),
            (from.to_string(), to.to_string()),
            amount,
            now,
        )
    }
}

/// The secret key of one of the caller's custodial wallets of `family`, unsealed.
///
/// # Errors
/// 403 `FORBIDDEN` when the address is not such a wallet of the caller's account; 502 when
/// custodial wallets are disabled (no master key).
pub async fn custodial_secret(
    state: &AppState,
    caller: &Caller,
    address: &tollgate_protocol::Address,
    family: tollgate_protocol::ChainFamily,
) -> Result<Vec<u8>, ApiError> {
    let wallet = state.store.get_wallet(&address.to_string()).await.map_err(ApiError::internal)?;
    let wallet = wallet.filter(|w| w.account_id == caller.account_id && w.family == family).ok_or_else(|| {
        ApiError::forbidden("walletAddress is not a custodial wallet of this account")
            .with_remedy("Create one with `tollgate-facilitator wallets create`")
    })?;
    let master = state
        .master_key
        .as_ref()
        .ok_or_else(|| ApiError::verification_failed("custodial wallets are disabled: no master key is configured"))?;
    master.open(&wallet.address, &wallet.sealed_secret).map_err(ApiError::internal)
}

/// Verifies and settles an incoming payment to `walletAddress`: an `exact-native` signed transfer
/// (checked, then broadcast once) or receipt (checked against the chain), or an x402 `exact`
/// payment (Solana: an SPL transfer the facilitator's fee payer sponsors).
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` for a proof that does not pay as required or was used before;
/// 502 when the chain cannot be asked.
pub async fn receive(
    state: &AppState,
    caller: &Caller,
    req: &ReceivePaymentRequest,
    target: &Target,
) -> Result<SendOutcome, ApiError> {
    let backend = state.chains.backend(target)?;
    let terms = Terms {
        pay_to: validate::address("walletAddress", &req.wallet_address)?,
        asset: None,
        price: Price::AtLeast(req.expected_amount.clone()),
        resource: req.resource.clone(),
        extra: None,
    };
    let payload = validate::payment_proof(&req.payment_proof)?;
    if let Some(payment_id) = proofs::claimed_by(state, &payload, None).await.map_err(ApiError::internal)? {
        return receive_outcome(state, caller, Err(SettleError::AlreadyClaimed { payment_id })).await;
    }
    let checked = match &backend {
        Backend::Solana(b) => proofs::solana::check(b, &payload, &terms, FeePayer::Facilitator).await,
        Backend::Evm(b) => proofs::evm::check(b, &payload, &terms, state.clock.now().timestamp()).await,
    };
    let checked = match checked {
        Ok(c) => c,
        // A twin of this request may have settled the proof while it was being checked (its
        // nonce is then used, its transaction no longer simulates): answer as for a used proof.
        Err(ProofError::Refused(refusal)) => {
            return match proofs::claimed_by(state, &payload, None).await.map_err(ApiError::internal)? {
                Some(payment_id) => {
                    receive_outcome(state, caller, Err(SettleError::AlreadyClaimed { payment_id })).await
                }
                None => Err(refusal.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let wait = Duration::from_secs(req.timeout.unwrap_or(validate::DEFAULT_TIMEOUT_SECS));
    let settled = proofs::settle(state, &caller.account_id, &backend, checked, &terms, wait).await;
    receive_outcome(state, caller, settled).await
}

/// The answer to a receive: the record (200 confirmed, 202 pending), or why the proof is refused.
/// A proof claimed before answers with its payment while that payment is still settling and
/// belongs to the caller (the stored outcome), and is refused as used otherwise.
///
/// # Errors
/// 402 `INVALID_PAYMENT_PROOF` for a used proof or a transaction that failed on chain.
pub async fn receive_outcome(
    state: &AppState,
    caller: &Caller,
    settled: Result<StoredPayment, SettleError>,
) -> Result<SendOutcome, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidPaymentProof, message);
    let stored = match settled {
        Ok(s) => s,
        Err(SettleError::AlreadyClaimed { payment_id }) => {
            let holder = state.store.get_payment(&payment_id).await.map_err(ApiError::internal)?;
            match holder {
                Some(p) if p.visible_to(&caller.account_id) && !p.payment.status.is_final() => p,
                _ => return Err(invalid(format!("proof already used (payment {payment_id})"))),
            }
        }
        Err(e) => return Err(e.into()),
    };
    let mut record = stored.to_record();
    record.payer = Some(record.from.clone());
    match record.status {
        PaymentStatus::Confirmed => Ok(SendOutcome::Confirmed(record)),
        PaymentStatus::Failed => Err(invalid(format!(
            "the transaction failed on chain: {} (payment {})",
            record.error.as_deref().unwrap_or("unknown reason"),
            record.payment_id
        ))),
        _ => Ok(SendOutcome::Pending(record)),
    }
}
