//! Liveness, readiness and the OpenAPI document (no authentication).

use std::sync::LazyLock;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};
use utoipa::OpenApi as _;

use crate::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "`{\"status\": \"ok\"}`")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process can serve: storage answers. `rateLimits` says where requests are counted:
/// `in-process`, `shared` (Redis), or `degraded` (Redis configured but failing: counted in this
/// process, which is still ready — rate limits fail open to per-instance limits).
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses((status = 200, description = "`{\"status\": \"ready\", \"rateLimits\": \"in-process\" | \"shared\" | \"degraded\"}`"), (status = 503, description = "storage unreachable")))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    use crate::auth::rate_limit::Counting;
    match state.store.ping().await {
        Ok(()) => {
            let counting = state.auth.rate_limit_counting();
            let rate_limits = match counting {
                Counting::InProcess => "in-process",
                Counting::Shared => "shared",
                Counting::Degraded { .. } => "degraded",
            };
            let mut ready = json!({"status": "ready", "rateLimits": rate_limits});
            if let Counting::Degraded { fallbacks } = counting {
                ready["rateLimitFallbacks"] = fallbacks.into();
            }
            Json(ready).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "reason": "storage"})))
                .into_response()
        }
    }
}

static OPENAPI: LazyLock<Value> =
    LazyLock::new(|| serde_json::to_value(super::ApiDoc::openapi()).unwrap_or(Value::Null));

/// This API as OpenAPI 3.1.
#[utoipa::path(get, path = "/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi() -> Json<Value> {
    Json(OPENAPI.clone())
}
