//! `Idempotency-Key` for POST requests.
//!
//! The first request with a key runs and its answer is stored, 5xx included: a send that failed
//! after its broadcast (a storage fault, a transaction that failed on chain) is not sent again by
//! a retry. Only an answer given before anything was claimed, recorded or sent ([`NothingDone`]:
//! the chain unreachable while checking, a plan's limit, a refusal of the request) and a 429
//! release the key, so the caller can retry. A repeat with the same body gets the stored answer
//! with `Idempotent-Replayed: true`; the same key with another body, or while the first is still
//! running, is `409 IDEMPOTENCY_CONFLICT`. Keys are scoped to the API key and kept at least
//! `limits.idempotency_ttl_secs` (24 h by default).
//!
//! The first request runs on a task of its own, and its key is completed or released there: a
//! client that hangs up does not leave its key "in progress", and its retry gets the answer. A
//! task that ends without an answer (a panic) leaves its key in progress: after [`STALE_AFTER`]
//! the retry is told to look for the payment before paying again.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Duration;
use http::{HeaderValue, StatusCode};
use sha2::{Digest, Sha256};

use crate::api::error::{ApiError, NothingDone};
use crate::app::AppState;
use crate::auth::Caller;
use crate::store::{IdempotencyBegin, StoredResponse};

/// The request header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Marks a replayed answer.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// Largest response body remembered (bigger answers are returned but not stored).
const MAX_STORED_RESPONSE: usize = 1024 * 1024;

/// A request still "in progress" after this long stopped without an answer (no request lasts it:
/// the longest wait is 300 s): the facilitator stopped while it ran.
const STALE_AFTER: Duration = Duration::minutes(10);

/// The middleware (placed inside authentication: it needs the [`Caller`]).
pub async fn idempotent(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match run(&state, req, next).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(state: &AppState, req: Request, next: Next) -> Result<Response, ApiError> {
    let Some(raw_key) = req.headers().get(IDEMPOTENCY_KEY) else {
        return Ok(next.run(req).await);
    };
    let idem_key = raw_key
        .to_str()
        .ok()
        .filter(|k| (1..=255).contains(&k.len()))
        .ok_or_else(|| ApiError::invalid_params("Idempotency-Key must be 1 to 255 visible ASCII characters"))?
        .to_owned();
    let caller = req
        .extensions()
        .get::<std::sync::Arc<Caller>>()
        .cloned()
        .ok_or_else(|| ApiError::internal("idempotency layer without a caller"))?;

    let (parts, body) = req.into_parts();
    let limit = state.config.limits.max_body_bytes;
    let bytes = to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::invalid_params(format!("request body is larger than {limit} bytes")))?;
    let mut hasher = Sha256::new();
    hasher.update(parts.method.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(parts.uri.path().as_bytes());
    hasher.update([0]);
    hasher.update(&bytes);
    let request_hash = format!("{:x}", hasher.finalize());

    let now = state.clock.now();
    let ttl = Duration::seconds(i64::try_from(state.config.limits.idempotency_ttl_secs).unwrap_or(i64::MAX / 1000));
    let begun = state
        .store
        .idempotency_begin(&caller.key_id, &idem_key, &request_hash, now, now - ttl)
        .await
        .map_err(ApiError::internal)?;
    match begun {
        IdempotencyBegin::Mismatch => {
            Err(ApiError::idempotency_conflict("this Idempotency-Key was already used with a different request"))
        }
        IdempotencyBegin::InProgress { started } if now - started > STALE_AFTER => Err(ApiError::idempotency_conflict(
            "the first request with this Idempotency-Key stopped without an answer (the facilitator restarted)",
        )
        .with_remedy("Look for its payment in GET /payment/history before paying again with a new key")),
        IdempotencyBegin::InProgress { .. } => {
            Err(ApiError::idempotency_conflict("a request with this Idempotency-Key is still in progress")
                .with_remedy("Retry after the first request has finished"))
        }
        IdempotencyBegin::Replay(stored) => Ok(replay(stored)),
        IdempotencyBegin::Started => {
            // Detached, so that the key is completed or released even if the caller goes away.
            let request = Request::from_parts(parts, Body::from(bytes));
            let (task_state, key_id, task_key) = (state.clone(), caller.key_id.clone(), idem_key.clone());
            let first = tokio::spawn(async move {
                let response = next.run(request).await;
                remember(&task_state, &key_id, &task_key, response).await
            });
            match first.await {
                Ok(answer) => answer,
                // It may have sent something: the key stays in progress, not free to pay again.
                Err(e) => Err(ApiError::internal(format!("idempotent request task ended: {e}"))),
            }
        }
    }
}

/// Stores the first request's answer under its key (one given before anything was done, and a
/// 429, release it instead, so the caller can retry), and returns it.
async fn remember(state: &AppState, key_id: &str, idem_key: &str, response: Response) -> Result<Response, ApiError> {
    let (resp_parts, resp_body) = response.into_parts();
    let body = match to_bytes(resp_body, MAX_STORED_RESPONSE).await {
        Ok(b) => b,
        Err(e) => {
            abandon(state, key_id, idem_key).await;
            return Err(ApiError::internal(format!("response too large to remember: {e}")));
        }
    };
    let storable =
        resp_parts.extensions.get::<NothingDone>().is_none() && resp_parts.status != StatusCode::TOO_MANY_REQUESTS;
    match std::str::from_utf8(&body) {
        Ok(text) if storable => {
            let stored = StoredResponse { status: resp_parts.status.as_u16(), body: text.to_owned() };
            if let Err(e) = state.store.idempotency_complete(key_id, idem_key, &stored).await {
                tracing::error!(error = %e, "could not store idempotent response");
                abandon(state, key_id, idem_key).await;
            }
        }
        _ => abandon(state, key_id, idem_key).await,
    }
    Ok(Response::from_parts(resp_parts, Body::from(body)))
}

async fn abandon(state: &AppState, key_id: &str, idem_key: &str) {
    if let Err(e) = state.store.idempotency_abandon(key_id, idem_key).await {
        tracing::error!(error = %e, "could not release an idempotency key");
    }
}

fn replay(stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response = (status, stored.body).into_response();
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}
