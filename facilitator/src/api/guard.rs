//! The per-route guard: authenticate, rate-limit, check the plan, then call the handler.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::header::AUTHORIZATION;

use super::error::{ApiError, ProofRefused};
use crate::app::AppState;
use crate::auth::rate_limit::RateDecision;
use crate::plans::Endpoint;

/// Header names of the rate-limit answer.
pub const X_RATELIMIT_LIMIT: &str = "x-ratelimit-limit";
/// Requests left in the window.
pub const X_RATELIMIT_REMAINING: &str = "x-ratelimit-remaining";
/// Unix seconds at which the window resets.
pub const X_RATELIMIT_RESET: &str = "x-ratelimit-reset";

/// Guards one endpoint. Puts the [`crate::auth::Caller`] in request extensions.
pub async fn require_key(
    State((state, endpoint)): State<(AppState, Endpoint)>,
    mut req: Request,
    next: Next,
) -> Response {
    let authorization = req.headers().get(AUTHORIZATION).cloned();
    let text = authorization.as_ref().map(|v| v.to_str().map_err(|_| ()));
    let authenticated = match (text, endpoint) {
        // Browsers cannot set headers on a WebSocket upgrade, so /ws also takes ?api-key=.
        (None, Endpoint::Ws) => match query_api_key(req.uri().query()) {
            Some(key) => state.auth.authenticate_key(&key).await,
            None => state.auth.authenticate(None).await,
        },
        (text, _) => state.auth.authenticate(text).await,
    };
    let caller = match authenticated {
        Ok(c) => c,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let decision = match state.auth.admit(&caller, endpoint).await {
        Ok(d) => d,
        Err((e, decision)) => {
            let mut response = ApiError::from(e).into_response();
            set_rate_headers(&mut response, &decision);
            return response;
        }
    };
    req.extensions_mut().insert(caller.clone());
    let mut response = next.run(req).await;
    if response.extensions().get::<ProofRefused>().is_some() {
        state.auth.forgive_refusal(&caller, &decision).await;
    }
    set_rate_headers(&mut response, &decision);
    response
}

fn query_api_key(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "api-key" || k == "api_key").then(|| v.to_owned())
    })
}

fn set_rate_headers(response: &mut Response, d: &RateDecision) {
    let headers = response.headers_mut();
    for (name, value) in [
        (X_RATELIMIT_LIMIT, d.limit.to_string()),
        (X_RATELIMIT_REMAINING, d.remaining.to_string()),
        (X_RATELIMIT_RESET, d.reset_epoch_secs().to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_from_query() {
        assert_eq!(query_api_key(Some("a=1&api-key=tg_test_x")), Some("tg_test_x".into()));
        assert_eq!(query_api_key(Some("a=1")), None);
        assert_eq!(query_api_key(None), None);
    }
}
