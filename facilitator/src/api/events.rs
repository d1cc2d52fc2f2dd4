//! `GET /ws`: the live event feed's entry point.
//!
//! Authentication (`Authorization: Bearer` or `?api-key=`) and the plan check happen in the
//! route guard before any upgrade. The subscription protocol and the event bus it reads from are
//! delivered with the live-events work; until then a request here is refused with an explicit
//! reason rather than upgraded into a socket that would never carry an event.

use axum::extract::Request;

use crate::error::ApiError;

/// Live payment events over WebSocket.
#[utoipa::path(get, path = "/ws", tag = "events",
    params(("api-key" = Option<String>, Query, description = "API key, for clients that cannot set headers")),
    responses(
        (status = 400, description = "INVALID_PARAMETERS: not a WebSocket upgrade", body = tollgate_protocol::ErrorEnvelope),
        (status = 403, description = "FORBIDDEN: plan without the event feed", body = tollgate_protocol::ErrorEnvelope),
        (status = 502, description = "PAYMENT_VERIFICATION_FAILED: no event source yet", body = tollgate_protocol::ErrorEnvelope),
    ), security(("bearer" = [])))]
pub async fn ws(req: Request) -> ApiError {
    let upgrade = req
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        ApiError::verification_failed(
            "no payment event source is configured: payment events are produced by chain backends",
        )
    } else {
        ApiError::invalid_params("GET /ws expects a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)")
    }
}
