//! `POST /dev/airdrop`: fund a wallet on the embedded development ledger (only there).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use tollgate_protocol::{AtomicAmount, ChainFamily, DecimalAmount};

use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::validate;
use crate::app::AppState;
use crate::chains::TxOutcome;
use crate::chains::solana::build::pubkey;

/// Largest airdrop, SOL.
const MAX_AIRDROP_SOL: &str = "1000";
/// Least airdrop, SOL: above the rent-exempt minimum of a plain account (0.00089088 SOL), which
/// the ledger refuses to go below for a new account.
const MIN_AIRDROP_SOL: &str = "0.001";

/// Body of `POST /dev/airdrop`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AirdropRequest {
    /// Solana address to fund.
    pub address: String,
    /// Whole SOL, 0.001 to 1000.
    pub amount: DecimalAmount,
}

/// Answer of `POST /dev/airdrop`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AirdropResponse {
    /// Funded address.
    pub address: String,
    /// SOL added.
    pub amount: DecimalAmount,
    /// Lamports added.
    pub amount_atomic: AtomicAmount,
    /// The airdrop transaction's signature.
    pub transaction: String,
}

/// Fund a wallet on the embedded development ledger.
#[utoipa::path(post, path = "/dev/airdrop", tag = "development", request_body = AirdropRequest,
    responses(
        (status = 200, body = AirdropResponse),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn airdrop(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<AirdropRequest>,
) -> Result<Json<AirdropResponse>, ApiError> {
    let address = validate::address("address", &req.address)?;
    let key = pubkey(&address).ok_or_else(|| ApiError::invalid_params("address must be a Solana address"))?;
    if key == solana_sdk::pubkey::Pubkey::default() {
        return Err(ApiError::invalid_recipient(
            "the system program (11111111111111111111111111111111) cannot be funded",
        ));
    }
    let lamports =
        validate::native_amount("amount", &req.amount, ChainFamily::Solana, Some((MIN_AIRDROP_SOL, MAX_AIRDROP_SOL)))?;
    let lamports_u64 = u64::try_from(lamports.get()).map_err(|_| ApiError::invalid_params("amount is too large"))?;
    let backend = state.chains.embedded_solana().ok_or_else(|| ApiError::not_found("no embedded ledger"))?;
    let chain_error = |e: crate::chains::ChainError| ApiError::verification_failed(e.to_string());
    let signature = backend.rpc.request_airdrop(&key, lamports_u64).await.map_err(chain_error)?;
    // Answer once the funds are usable.
    match backend.rpc.wait_for_outcome(&signature, Duration::from_secs(30)).await.map_err(chain_error)? {
        Some(TxOutcome::Confirmed { .. }) => {}
        Some(TxOutcome::Failed { reason }) => {
            return Err(ApiError::verification_failed(format!("airdrop failed: {reason}")));
        }
        None => return Err(ApiError::verification_failed("airdrop not confirmed within 30 s")),
    }
    Ok(Json(AirdropResponse {
        address: address.to_string(),
        amount: req.amount,
        amount_atomic: lamports,
        transaction: signature.to_string(),
    }))
}
