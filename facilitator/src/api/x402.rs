//! The x402 facilitator API: `POST /verify`, `POST /settle`, `GET /supported` (v1 and v2 bodies).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use tollgate_protocol::Network;
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::{
    FacilitatorRequest, PaymentPayload, SCHEME_EXACT, SettleResponse, Supported, VerifyResponse,
};

use crate::AppState;
use crate::auth::Caller;
use crate::chains::{Backend, Target};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::proofs::{self, Price, Terms, solana::FeePayer};
use crate::refusal::{ProofError, Reason, Refusal};
use crate::settlement::engine::SettleError;

/// A request checked far enough to settle, or the x402 reason it fails.
struct Prepared {
    backend: Backend,
    terms: Terms,
    checked: proofs::Checked,
    wait: Duration,
}

/// The network as the request's version writes it.
fn network_name(req: &FacilitatorRequest, network: &Network) -> String {
    match req {
        FacilitatorRequest::V1(_) => network.v1_name_or_caip2(),
        FacilitatorRequest::V2(_) => network.to_string(),
    }
}

/// Checks the payload against the requirements and the chain.
///
/// # Errors
/// `Ok(Err(refusal))` for a payment that does not pass; `Err` when the chain cannot be read.
async fn prepare(state: &AppState, req: &FacilitatorRequest) -> Result<Result<Prepared, Refusal>, ApiError> {
    let (payload, requirements, resource) = req.parts();
    let refuse = |reason: Reason, message: String| Ok(Err(Refusal::new(reason, message)));
    if payload.scheme() != requirements.scheme {
        return refuse(
            Reason::InvalidScheme,
            format!("the payload's scheme {} differs from the requirement's {}", payload.scheme(), requirements.scheme),
        );
    }
    if payload.network() != &requirements.network {
        return refuse(
            Reason::InvalidNetwork,
            format!("the payload pays on {}, the requirement asks {}", payload.network(), requirements.network),
        );
    }
    if let PaymentPayload::V2(p) = &payload
        && (p.accepted.scheme != requirements.scheme
            || p.accepted.amount != requirements.amount
            || p.accepted.asset != requirements.asset
            || p.accepted.pay_to != requirements.pay_to)
    {
        return refuse(
            Reason::InvalidPaymentRequirements,
            "the payload's accepted requirement is not the one given".into(),
        );
    }
    let target = Target::Network(requirements.network.clone());
    let Ok(backend) = state.chains.backend(&target) else {
        return refuse(Reason::InvalidNetwork, format!("this facilitator does not settle on {}", requirements.network));
    };
    let offered_fee_payer = requirements.extra.as_ref().and_then(|e| e.get("feePayer")).and_then(|v| v.as_str());
    if let (Backend::Solana(solana), Some(offered)) = (&backend, offered_fee_payer)
        && requirements.scheme == SCHEME_EXACT
        && solana.fee_payer().map(|k| k.to_string()).as_deref() != Some(offered)
    {
        return refuse(
            Reason::InvalidPaymentRequirements,
            format!("extra.feePayer {offered} is not this facilitator's fee payer"),
        );
    }
    let price = Price::of_requirement(&requirements.scheme, requirements.amount);
    let terms = Terms {
        pay_to: requirements.pay_to,
        asset: Some(requirements.asset),
        price,
        resource: resource.map(|r| r.url).filter(|u| !u.is_empty()),
        extra: requirements.extra.clone(),
    };
    if let Some(payment_id) =
        proofs::claimed_by(state, &payload, Some(requirements.asset)).await.map_err(ApiError::internal)?
    {
        return refuse(Reason::AlreadyUsed, format!("proof already used (payment {payment_id})"));
    }
    let checked = match &backend {
        Backend::Solana(b) => proofs::solana::check(b, &payload, &terms, FeePayer::Facilitator).await,
        Backend::Evm(b) => proofs::evm::check(b, &payload, &terms, state.clock.now().timestamp()).await,
    };
    let checked = match checked {
        Ok(c) => c,
        Err(ProofError::Refused(r)) => {
            // A twin request may have settled this proof while it was being checked.
            if let Some(payment_id) =
                proofs::claimed_by(state, &payload, Some(requirements.asset)).await.map_err(ApiError::internal)?
            {
                return refuse(Reason::AlreadyUsed, format!("proof already used (payment {payment_id})"));
            }
            return Ok(Err(r));
        }
        Err(ProofError::Chain(e)) => return Err(e.into()),
    };
    let wait = Duration::from_secs(requirements.max_timeout_seconds.clamp(1, MAX_SETTLE_WAIT_SECS));
    Ok(Ok(Prepared { backend, terms, checked, wait }))
}

/// Longest a `/settle` waits for confirmation before answering that it timed out.
const MAX_SETTLE_WAIT_SECS: u64 = 60;

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
    Ok(Json(match prepare(&state, &req).await? {
        Ok(p) => VerifyResponse { is_valid: true, invalid_reason: None, payer: Some(p.checked.payer.to_string()) },
        Err(r) => {
            tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 verify refused");
            VerifyResponse { is_valid: false, invalid_reason: Some(r.reason.as_str().to_owned()), payer: None }
        }
    }))
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
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<FacilitatorRequest>,
) -> Result<Json<SettleResponse>, ApiError> {
    let (_, requirements, _) = req.parts();
    let network = network_name(&req, &requirements.network);
    let failure = |reason: Reason, transaction: String, payer: Option<String>| SettleResponse {
        success: false,
        error_reason: Some(reason.as_str().to_owned()),
        payer,
        transaction,
        network: network.clone(),
    };
    // A proof used before: name its transaction to the account that settled it, so a retry after
    // a timeout can follow that transaction instead of paying again.
    let (payload, _, _) = req.parts();
    if let Some(payment_id) =
        proofs::claimed_by(&state, &payload, Some(requirements.asset)).await.map_err(ApiError::internal)?
    {
        let holder = state.store.get_payment(&payment_id).await.map_err(ApiError::internal)?;
        let holder = holder.filter(|h| h.visible_to(&caller.account_id));
        let (tx, payer) =
            holder.map_or((String::new(), None), |h| (h.payment.transaction.unwrap_or_default(), Some(h.payment.from)));
        return Ok(Json(failure(Reason::AlreadyUsed, tx, payer)));
    }
    let p = match prepare(&state, &req).await? {
        Ok(p) => p,
        Err(r) => {
            tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 settle refused");
            return Ok(Json(failure(r.reason, String::new(), None)));
        }
    };
    let payer = Some(p.checked.payer.to_string());
    let settled = proofs::settle(&state, &caller.account_id, &p.backend, p.checked, &p.terms, p.wait).await;
    let stored = match settled {
        Ok(s) => s,
        Err(SettleError::AlreadyClaimed { payment_id }) => {
            // A concurrent settle of the same proof won the claim.
            let holder = state.store.get_payment(&payment_id).await.map_err(ApiError::internal)?;
            let tx = holder.filter(|h| h.visible_to(&caller.account_id)).and_then(|h| h.payment.transaction);
            return Ok(Json(failure(Reason::AlreadyUsed, tx.unwrap_or_default(), payer)));
        }
        Err(e) => return Err(e.into()),
    };
    let transaction = stored.payment.transaction.clone().unwrap_or_default();
    Ok(Json(match stored.payment.status {
        PaymentStatus::Confirmed => {
            SettleResponse { success: true, error_reason: None, payer, transaction, network: network.clone() }
        }
        PaymentStatus::Failed | PaymentStatus::Expired => failure(Reason::FailedOnChain, transaction, payer),
        // Broadcast, no verdict yet: not a failure. The payment id and transaction let the
        // caller follow it (`GET /payment/status/{id}`).
        _ => SettleResponse {
            success: false,
            error_reason: Some(timed_out(&requirements.network).to_owned()),
            payer,
            transaction,
            network: network.clone(),
        },
    }))
}

/// The reason for a settlement broadcast but not confirmed within the wait (x402's on Solana,
/// named alike on EVM).
fn timed_out(network: &Network) -> &'static str {
    match network.family() {
        tollgate_protocol::ChainFamily::Solana => "settle_exact_svm_transaction_confirmation_timed_out",
        tollgate_protocol::ChainFamily::Evm => "settle_exact_evm_transaction_confirmation_timed_out",
    }
}

/// The (version, scheme, network) kinds this facilitator settles.
#[utoipa::path(get, path = "/supported", tag = "x402",
    responses((status = 200, description = "x402 Supported (`kinds`, `extensions`, `signers`)", body = serde_json::Value)),
    security(("bearer" = [])))]
pub async fn supported(State(state): State<AppState>) -> Json<Supported> {
    Json(state.chains.supported())
}
