//! Liveness, readiness and the OpenAPI document (no authentication).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

use super::error::ApiError;
use crate::app::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "`{\"status\": \"ok\"}`")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process can serve: storage answers, and so does each chain's RPC. `rateLimits` says where
/// requests are counted: `in-process`, `shared` (Redis), or `degraded` (Redis configured but
/// failing: counted in this process, which is still ready — rate limits fail open to
/// per-instance limits). `chains` gives each network's RPC: its height, or why it did not answer.
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, description = "`{\"status\": \"ready\", \"rateLimits\": \"in-process\" | \"shared\" | \"degraded\", \"chains\": {network: {\"ok\": true, \"height\": n}}}`"), (status = 503, description = "storage or a chain RPC unreachable (`reason`: `storage` or `chain`)")))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    use crate::auth::rate_limit::Counting;
    if let Err(e) = state.store.ping().await {
        tracing::warn!(error = %e, "readiness check failed: storage");
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "reason": "storage"})))
            .into_response();
    }
    let counting = state.auth.rate_limit_counting();
    let rate_limits = match counting {
        Counting::InProcess => "in-process",
        Counting::Shared => "shared",
        Counting::Degraded { .. } => "degraded",
    };
    let (chains, all_answer) = chain_readiness(&state).await;
    let mut body = json!({"status": "ready", "rateLimits": rate_limits, "chains": chains});
    if let Counting::Degraded { fallbacks } = counting {
        body["rateLimitFallbacks"] = fallbacks.into();
    }
    if all_answer {
        Json(body).into_response()
    } else {
        body["status"] = "unavailable".into();
        body["reason"] = "chain".into();
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

/// Each chain's RPC asked at most once per [`READY_PROBE_EVERY`] however often `/readyz` is
/// called (it is public: it must not spend the provider's quota), concurrent callers sharing
/// one probe. The answer says whether each answered, never what it said: RPC error bodies can
/// quote the URL, its key and credentials. The error itself is logged, redacted and cut short.
async fn chain_readiness(state: &AppState) -> (serde_json::Map<String, Value>, bool) {
    let mut cached = state.readiness.lock().await;
    if let Some((at, chains, ok)) = &*cached
        && at.elapsed() < READY_PROBE_EVERY
    {
        return (chains.clone(), *ok);
    }
    let mut chains = serde_json::Map::new();
    let mut all_answer = true;
    match tokio::time::timeout(READY_PROBE_TIMEOUT, state.chains.probe_rpcs()).await {
        Ok(probes) => {
            for (network, answer) in probes {
                let entry = match answer {
                    Ok(height) => json!({"ok": true, "height": height}),
                    Err(e) => {
                        all_answer = false;
                        let reason: String = e.to_string().chars().take(200).collect();
                        tracing::warn!(%network, error = %reason, "readiness check failed: chain RPC");
                        json!({"ok": false, "error": "the RPC did not answer as expected"})
                    }
                };
                chains.insert(network.to_string(), entry);
            }
        }
        Err(_) => {
            all_answer = false;
            tracing::warn!("readiness check failed: the chain RPCs did not answer in time");
            for network in state.chains.served() {
                chains.insert(network.to_string(), json!({"ok": false, "error": "no answer in time"}));
            }
        }
    }
    *cached = Some((std::time::Instant::now(), chains.clone(), all_answer));
    (chains, all_answer)
}

/// How long a readiness probe of the chains is reused.
const READY_PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// How long readiness waits for the chains' RPCs.
const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Prometheus metrics (text format), for the bearer of `TOLLGATE_ADMIN_TOKEN`; see
/// [`crate::telemetry`] for what is counted.
pub async fn metrics(State(state): State<AppState>, headers: http::HeaderMap) -> Response {
    use subtle::ConstantTimeEq as _;
    let Some(token) = state.config.admin_token.as_ref().map(|t| t.expose()).filter(|t| !t.is_empty()) else {
        return ApiError::not_found("metrics are off: this facilitator has no TOLLGATE_ADMIN_TOKEN")
            .with_remedy("Set TOLLGATE_ADMIN_TOKEN and scrape with it as a bearer token")
            .into_response();
    };
    let given =
        headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if !given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(token.as_bytes()))) {
        return ApiError::unauthorized("metrics need the admin token as a bearer token").into_response();
    }
    let Some(handle) = crate::telemetry::install() else {
        return ApiError::internal("another metrics recorder is installed in this process").into_response();
    };
    // Gauges read now: backlogs and balances, each bounded so a slow chain cannot stall a scrape.
    let backlogs = async {
        let reconciler = state.store.unfinished_payments().await.ok();
        let webhooks = state.store.webhook_backlog().await.ok();
        crate::telemetry::set_backlogs(reconciler, webhooks);
    };
    let balances = async {
        if let Ok(balances) = tokio::time::timeout(READY_PROBE_TIMEOUT, state.chains.signer_balances()).await {
            for (network, role, address, balance) in balances {
                if let Ok(atomic) = balance {
                    crate::telemetry::signer_balance(&network.to_string(), role, &address, atomic);
                }
            }
        }
    };
    futures_util::future::join(backlogs, balances).await;
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
}
