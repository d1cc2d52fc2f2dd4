//! The x402 facilitator API: `POST /verify`, `POST /settle`, `GET /supported` (v1 and v2 bodies).

use axum::Json;
use axum::extract::State;
use tollgate_protocol::x402::{FacilitatorRequest, SettleResponse, Supported, VerifyResponse};

use crate::AppState;
use crate::chains::Target;
use crate::error::ApiError;
use crate::extract::ApiJson;

/// Checks that the payload and the requirements talk about the same payment kind.
fn target_of(req: &FacilitatorRequest) -> Result<Target, ApiError> {
    let (payload, requirements, _) = req.parts();
    if payload.scheme() != requirements.scheme {
        return Err(ApiError::invalid_params(format!(
            "paymentPayload scheme {} differs from paymentRequirements scheme {}",
            payload.scheme(),
            requirements.scheme
        )));
    }
    if payload.network() != &requirements.network {
        return Err(ApiError::invalid_params(format!(
            "paymentPayload network {} differs from paymentRequirements network {}",
            payload.network(),
            requirements.network
        )));
    }
    Ok(Target::Network(requirements.network))
}

/// Would this payload settle these requirements?
#[utoipa::path(post, path = "/verify", tag = "x402", request_body(content = serde_json::Value, description = "x402 v1 or v2 verify request"),
    responses(
        (status = 200, description = "x402 VerifyResponse (`isValid`, `invalidReason`, `payer`)", body = serde_json::Value),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn verify(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<FacilitatorRequest>,
) -> Result<Json<VerifyResponse>, ApiError> {
    let target = target_of(&req)?;
    Err(state.chains.unavailable(&target))
}

/// Settle this payload on chain.
#[utoipa::path(post, path = "/settle", tag = "x402", request_body(content = serde_json::Value, description = "x402 v1 or v2 settle request"),
    responses(
        (status = 200, description = "x402 SettleResponse (`success`, `transaction`, `network`, `payer`)", body = serde_json::Value),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn settle(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<FacilitatorRequest>,
) -> Result<Json<SettleResponse>, ApiError> {
    let target = target_of(&req)?;
    Err(state.chains.unavailable(&target))
}

/// The (version, scheme, network) kinds this facilitator settles.
#[utoipa::path(get, path = "/supported", tag = "x402",
    responses((status = 200, description = "x402 Supported (`kinds`, `extensions`, `signers`)", body = serde_json::Value)),
    security(("bearer" = [])))]
pub async fn supported(State(state): State<AppState>) -> Json<Supported> {
    Json(Supported { kinds: state.chains.supported_kinds(), ..Supported::default() })
}
