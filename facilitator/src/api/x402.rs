//! The x402 facilitator API: `POST /verify`, `POST /settle`, `GET /supported` (v1 and v2 bodies).
//!
//! A request's requirement becomes the payment core's terms whole: a v2 payload must have
//! accepted exactly it, and the proof must pay its network, recipient, asset and amount. Refusals
//! are answered in x402's shape (`isValid: false` / `success: false` with the reason string), not
//! as HTTP errors.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue};
use axum::response::AppendHeaders;
use axum::{Extension, Json};
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::x402::{
    FacilitatorRequest, PaymentRequirements, ResourceInfo, SettleResponse, Supported, VerifyResponse,
};
use tollgate_protocol::{AtomicAmount, ChainFamily, Network};

use crate::api::error::ApiError;
use crate::api::error::ProofRefused;
use crate::api::extract::ApiJson;
use crate::app::AppState;
use crate::auth::Caller;
use crate::chains::{Reason, Refusal};
use crate::channels::{Channels, Seller};
use crate::payment::{PaymentError, Receive, Repeat, Settlement};

/// The network as the request's version writes it.
fn network_name(v1: bool, network: &Network) -> String {
    if v1 { network.v1_name_or_caip2() } else { network.to_string() }
}

/// The request as the payment core's job: its requirement as the terms, the resource the
/// seller's request names (a seller's layer writes its own into the payload).
/// A request with the seller's ticket counts what the payment buys (`Repeat::Counted`), whatever
/// `repeat` says.
fn receive_of(state: &AppState, caller: &Caller, req: FacilitatorRequest, repeat: Repeat) -> Result<Receive, ApiError> {
    let repeat = match req.ticket() {
        Some(ticket) => {
            ticket.check().map_err(ApiError::invalid_params)?;
            Repeat::Counted(ticket.clone())
        }
        None => repeat,
    };
    let (payload, requirement, resource) = req.into_parts();
    crate::api::validate::x402_resource(resource.as_ref().map(|r| r.url.as_str()))?;
    let method = crate::api::validate::method(resource.as_ref().and_then(|r| r.method.as_deref()))?;
    let sponsorship = state.config.plans.get(caller.plan).sponsorship;
    let bound = (resource.map(|r| r.url), method);
    Ok(Receive::x402(caller.account_id.clone(), payload, requirement, bound, repeat, sponsorship))
}

/// A refusal in x402's words, or the error the API answers.
enum Refused {
    /// The payment does not pass: answer its reason, naming the holder's transaction and payer
    /// when the proof was settled already for the caller.
    Reason(Refusal, Option<(String, String)>),
    /// Not a verdict on the payment (the chain could not be asked, storage failed).
    Error(ApiError),
}

fn refused(e: PaymentError) -> Refused {
    match e.into_x402_refusal() {
        Ok((refusal, holder)) => {
            let settled = holder.map(|h| (h.payment.transaction.unwrap_or_default(), h.payment.from));
            Refused::Reason(refusal, settled)
        }
        Err(other) => Refused::Error(other.into()),
    }
}

/// Would this payload settle these requirements?
#[utoipa::path(post, path = "/verify", tag = "x402", request_body(content = FacilitatorRequest, description = "x402 v1 or v2 verify request"),
    responses(
        (status = 200, description = "The verdict: `isValid`, else `invalidReason` and `invalidMessage`", body = VerifyResponse),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn verify(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<FacilitatorRequest>,
) -> Result<(Option<Extension<ProofRefused>>, Json<VerifyResponse>), ApiError> {
    if let FacilitatorRequest::V2(r) = &req
        && Channels::handles(&r.payment_requirements)
    {
        return verify_batch(&state, req).await;
    }
    let answer = match state.payments().verify(receive_of(&state, &caller, req, Repeat::Used)?).await {
        Ok(payer) => VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: Some(payer.to_string()),
            extra: None,
        },
        Err(e) => match refused(e) {
            Refused::Reason(r, _) => {
                tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 verify refused");
                VerifyResponse {
                    is_valid: false,
                    invalid_reason: Some(r.reason.as_str().to_owned()),
                    invalid_message: Some(r.message),
                    payer: None,
                    extra: None,
                }
            }
            Refused::Error(e) => return Err(e),
        },
    };
    Ok(((!answer.is_valid).then_some(Extension(ProofRefused)), Json(answer)))
}

/// `/verify` of x402 `batch-settlement` (v2 only, as the scheme is): the verdict, with the
/// channel as the chain holds it in `extra` ([`crate::channels::Channels::verify_x402`]).
async fn verify_batch(
    state: &AppState,
    req: FacilitatorRequest,
) -> Result<(Option<Extension<ProofRefused>>, Json<VerifyResponse>), ApiError> {
    let (payload, requirement, _) = req.into_parts();
    let answer = state.channels().verify_x402(&payload, &requirement).await?;
    Ok(((!answer.is_valid).then_some(Extension(ProofRefused)), Json(answer)))
}

/// Settle this payload on chain.
#[utoipa::path(post, path = "/settle", tag = "x402", request_body(content = FacilitatorRequest, description = "x402 v1 or v2 settle request"),
    responses(
        (status = 200, description = "The settlement: `success` and `transaction`, else `errorReason` and `errorMessage`", body = SettleResponse,
            headers(("EXTENSION-RESPONSES" = String, description = "x402's sidechannel to the seller: base64 JSON `{\"bazaar\": {\"status\": \"processing\" | \"success\" | \"rejected\", \"rejectedReason\"?}}`, when the payload declared its route"))),
        (status = 400, description = "INVALID_PARAMETERS", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn settle(
    State(state): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    ApiJson(req): ApiJson<FacilitatorRequest>,
) -> Result<
    (Option<Extension<ProofRefused>>, AppendHeaders<Option<(HeaderName, HeaderValue)>>, Json<SettleResponse>),
    ApiError,
> {
    let mut cataloged = None;
    let (refused, answer) = settle_request(&state, &caller, req, &mut cataloged).await?;
    Ok((refused, AppendHeaders(cataloged.as_ref().and_then(extension_responses)), answer))
}

/// x402's `EXTENSION-RESPONSES` sidechannel (to the seller, never forwarded to the buyer): what
/// became of the settlement's `bazaar` declaration, as base64 JSON `{"bazaar": {"status", …}}`.
fn extension_responses(outcome: &crate::discovery::Outcome) -> Option<(HeaderName, HeaderValue)> {
    use base64::Engine as _;
    let said = match outcome {
        crate::discovery::Outcome::Cataloged => serde_json::json!({"status": "success"}),
        crate::discovery::Outcome::Processing => serde_json::json!({"status": "processing"}),
        crate::discovery::Outcome::Rejected(why) => serde_json::json!({"status": "rejected", "rejectedReason": why}),
    };
    let text = base64::engine::general_purpose::STANDARD.encode(serde_json::json!({"bazaar": said}).to_string());
    Some((HeaderName::from_static("extension-responses"), HeaderValue::from_str(&text).ok()?))
}

/// `/settle`'s work; `cataloged` says what became of a confirmed settlement's declaration.
async fn settle_request(
    state: &AppState,
    caller: &Caller,
    req: FacilitatorRequest,
    cataloged: &mut Option<crate::discovery::Outcome>,
) -> Result<(Option<Extension<ProofRefused>>, Json<SettleResponse>), ApiError> {
    if let FacilitatorRequest::V2(r) = &req
        && Channels::handles(&r.payment_requirements)
    {
        return settle_batch(state, caller, req).await;
    }
    // Settling a proof settled before for the caller, with the same terms, answers that
    // settlement again (a seller following a settlement it saw pending).
    let v1 = matches!(req, FacilitatorRequest::V1(_));
    let declared = declared(state, &req);
    let receive = receive_of(state, caller, req, Repeat::Confirmed)?;
    let family = receive.terms.network.family();
    let network = network_name(v1, &receive.terms.network);
    let answer =
        |success: bool, reason: Option<(&str, String)>, transaction: String, payer: Option<String>| SettleResponse {
            success,
            error_reason: reason.as_ref().map(|(r, _)| (*r).to_owned()),
            error_message: reason.map(|(_, m)| m),
            payer,
            transaction,
            network: network.clone(),
            amount: None,
            payment_id: None,
            answers: None,
            extra: None,
        };
    let stored = match state.payments().settle_x402(receive).await {
        Ok(Settlement::Settled(stored)) => *stored,
        Ok(Settlement::NothingCharged { payer }) => {
            let nothing = SettleResponse {
                amount: Some(AtomicAmount(0)),
                ..answer(true, None, String::new(), Some(payer.to_string()))
            };
            return Ok((None, Json(nothing)));
        }
        Err(e) => {
            return match refused(e) {
                Refused::Reason(r, settled) => {
                    tracing::info!(reason = r.reason.as_str(), detail = %r.message, "x402 settle refused");
                    let (transaction, payer) = settled.map_or((String::new(), None), |(tx, payer)| (tx, Some(payer)));
                    let answer = answer(false, Some((r.reason.as_str(), r.message)), transaction, payer);
                    Ok((Some(Extension(ProofRefused)), Json(answer)))
                }
                Refused::Error(e) => Err(e),
            };
        }
    };
    let (error, answers) = (stored.error, stored.answers);
    let p = stored.payment;
    let payment_id = Some(p.id.clone());
    let transaction = p.transaction.unwrap_or_default();
    let payer = Some(p.from);
    if p.status == PaymentStatus::Confirmed
        && let Some((resource, requirement, extensions)) = declared
    {
        *cataloged =
            state.catalog.settled(&caller.account_id, 2, &resource, &requirement, &extensions, state.clock.now());
    }
    Ok((
        None,
        Json(match p.status {
            PaymentStatus::Confirmed => SettleResponse {
                amount: Some(p.amount_atomic),
                payment_id,
                answers,
                ..answer(true, None, transaction, payer)
            },
            PaymentStatus::Failed | PaymentStatus::Expired => {
                let message = error.unwrap_or_else(|| format!("the payment {}", p.status.as_str()));
                answer(false, Some((Reason::FailedOnChain.as_str(), message)), transaction, payer)
            }
            // Broadcast, no verdict yet: not a failure. The transaction lets the caller follow it.
            _ => {
                let message = "broadcast; not confirmed within the wait: settle again to follow it".to_owned();
                answer(false, Some((timed_out(family), message)), transaction, payer)
            }
        }),
    ))
}

/// What a v2 settle request declares for the discovery catalog, as the seller sent it: the
/// resource it names, the requirement and the payload's extensions (Tollgate's layer puts its
/// own `bazaar` declaration there in place of the buyer's echo). `None` when the catalog is off
/// or nothing is declared.
fn declared(
    state: &AppState,
    req: &FacilitatorRequest,
) -> Option<(ResourceInfo, PaymentRequirements, serde_json::Map<String, serde_json::Value>)> {
    let FacilitatorRequest::V2(r) = req else { return None };
    if !state.config.discovery.catalog
        || !r.payment_payload.extensions.contains_key(tollgate_protocol::x402::bazaar::EXTENSION)
    {
        return None;
    }
    let resource = r.payment_payload.resource.clone()?;
    Some((resource, r.payment_requirements.clone(), r.payment_payload.extensions.clone()))
}

/// `/settle` of x402 `batch-settlement` ([`crate::channels::Channels::settle_x402`]): a
/// refusal or a failure on chain is remembered as a refused proof; a transaction not yet mined
/// is not.
async fn settle_batch(
    state: &AppState,
    caller: &Caller,
    req: FacilitatorRequest,
) -> Result<(Option<Extension<ProofRefused>>, Json<SettleResponse>), ApiError> {
    let (payload, requirement, resource) = req.into_parts();
    crate::api::validate::x402_resource(resource.as_ref().map(|r| r.url.as_str()))?;
    let seller =
        Seller { account: caller.account_id.clone(), sponsorship: state.config.plans.get(caller.plan).sponsorship };
    let answer = state.channels().settle_x402(&seller, &payload, &requirement, resource.map(|r| r.url)).await?;
    let pending = answer.error_reason.as_deref() == Some(tollgate_protocol::x402::batch::reason::WAIT_FOR_RECEIPT);
    Ok(((!answer.success && !pending).then_some(Extension(ProofRefused)), Json(answer)))
}

/// The reason for a settlement broadcast but not confirmed within the wait (x402's on Solana,
/// named alike on EVM).
const fn timed_out(family: ChainFamily) -> &'static str {
    match family {
        ChainFamily::Solana => "settle_exact_svm_transaction_confirmation_timed_out",
        ChainFamily::Evm => "settle_exact_evm_transaction_confirmation_timed_out",
    }
}

/// The (version, scheme, network) kinds this facilitator settles.
#[utoipa::path(get, path = "/supported", tag = "x402",
    responses((status = 200, description = "x402 Supported (`kinds`, `extensions`, `signers`)", body = serde_json::Value)),
    security(("bearer" = [])))]
pub async fn supported(State(state): State<AppState>) -> Json<Supported> {
    Json(state.chains.supported())
}
