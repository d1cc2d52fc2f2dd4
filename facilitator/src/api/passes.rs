//! `POST /passes/sign-in`: a pass's holder signing in instead of paying again (the x402
//! `sign-in-with-x` extension), for a seller's layer. The handler reads the request and renders
//! the payment core's answer ([`crate::payment::Payments::sign_in`]).

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use tollgate_protocol::gateway::{PassHolder, PassSignIn};
use tollgate_protocol::siwx::Origin;

use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::app::AppState;
use crate::auth::Caller;
use crate::payment::SignInRequest;

/// Check a buyer's `sign-in-with-x` message for the seller's origin, and find the signer's pass
/// for the seller's scope.
#[utoipa::path(post, path = "/passes/sign-in", tag = "payments", request_body = PassSignIn,
    responses(
        (status = 200, description = "Signed in: the wallet and its pass", body = PassHolder),
        (status = 400, description = "INVALID_PARAMETERS (the origin or scope)", body = tollgate_protocol::ErrorEnvelope),
        (status = 402, description = "INVALID_PAYMENT_PROOF: the message is not bound to the origin, too old, used before, not the wallet's, or the wallet holds no pass", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED: the chain that must check a wallet contract cannot be asked", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn sign_in(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<PassSignIn>,
) -> Result<Json<PassHolder>, ApiError> {
    let origin = Origin::parse(&req.origin).map_err(ApiError::invalid_params)?;
    if req.scope.is_empty() || req.scope.chars().count() > 2048 || req.scope.chars().any(char::is_control) {
        return Err(ApiError::invalid_params("scope must be 1 to 2,048 characters, without control characters"));
    }
    if req.sign_in.chars().count() > 8192 {
        return Err(ApiError::invalid_params("signIn must be at most 8,192 characters"));
    }
    let request = SignInRequest { account: caller.account_id.clone(), header: req.sign_in, origin, scope: req.scope };
    let signed = state.payments().sign_in(request).await?;
    Ok(Json(PassHolder {
        payer: signed.payer.to_string(),
        network: signed.pass.network,
        payment_id: signed.pass.payment_id,
        valid_until: signed.pass.valid_until,
    }))
}
