//! The HTTP layer, and the only one: routes (one module per resource), the router that guards
//! them, request extraction and validation, the `Idempotency-Key` layer, and [`error`], where
//! domain errors become HTTP statuses and error bodies.
//!
//! Every authenticated route carries its [`Endpoint`] so the guard can check the plan; every POST
//! route also goes through the `Idempotency-Key` layer. Anything the router does not know, and any
//! failure anywhere, answers in the error envelope.

pub mod dashboard;
pub mod dev;
pub mod discovery;
pub mod error;
pub mod events;
pub mod extract;
pub mod guard;
pub mod idempotency;
pub mod openapi;
pub mod passes;
pub mod payments;
pub mod reference;
pub mod system;
pub mod tokens;
pub mod transactions;
pub mod validate;
pub mod webhooks;
pub mod x402;

use std::any::Any;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use http::header::AUTHORIZATION;
use http::{HeaderValue, Method, StatusCode, Uri};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use self::error::ApiError;
use self::guard::require_key;
use self::idempotency::idempotent;
use crate::app::AppState;
use crate::plans::Endpoint;

/// The whole HTTP surface of the daemon.
pub fn router(state: AppState) -> Router {
    let guard = |endpoint: Endpoint, route: MethodRouter<AppState>| {
        route.layer(from_fn_with_state((state.clone(), endpoint), require_key))
    };
    let guard_post = |endpoint: Endpoint, route: MethodRouter<AppState>| {
        guard(endpoint, route.layer(from_fn_with_state(state.clone(), idempotent)))
    };

    let supported = get(x402::supported);
    let supported = if state.config.public_supported { supported } else { guard(Endpoint::Supported, supported) };
    let (list, search) = (get(discovery::list), get(discovery::search));
    let (list, search) = if state.config.discovery.public {
        (list, search)
    } else {
        (guard(Endpoint::Discovery, list), guard(Endpoint::Discovery, search))
    };

    let mut app = Router::new();
    if state.chains.embedded_solana().is_some() {
        app = app.route("/dev/airdrop", guard_post(Endpoint::DevAirdrop, post(dev::airdrop)));
    }
    app.route("/payment/send", guard_post(Endpoint::PaymentSend, post(payments::send)))
        .route("/payment/receive", guard_post(Endpoint::PaymentReceive, post(payments::receive)))
        .route("/payment/answer/release", guard_post(Endpoint::PaymentAnswerRelease, post(payments::release_answer)))
        .route("/passes/sign-in", guard_post(Endpoint::PassSignIn, post(passes::sign_in)))
        .route("/payment/status/{payment_id}", guard(Endpoint::PaymentStatus, get(payments::status)))
        .route("/payment/history/{wallet_address}", guard(Endpoint::PaymentHistory, get(payments::history)))
        .route("/transaction/send", guard_post(Endpoint::TransactionSend, post(transactions::send)))
        .route("/transaction/receive", guard_post(Endpoint::TransactionReceive, post(transactions::receive)))
        .route("/transaction/confirm", guard_post(Endpoint::TransactionConfirm, post(transactions::confirm)))
        .route("/token/info/{mint_address}", guard(Endpoint::TokenInfo, get(tokens::info)))
        .route("/verify", guard_post(Endpoint::Verify, post(x402::verify)))
        .route("/settle", guard_post(Endpoint::Settle, post(x402::settle)))
        .route("/supported", supported)
        .route("/discovery/resources", list)
        .route("/discovery/search", search)
        .route("/discovery/own", guard(Endpoint::DiscoveryOwn, get(discovery::own)))
        .route(
            "/discovery/own/{id}",
            guard(Endpoint::DiscoveryOwn, axum::routing::patch(discovery::change).delete(discovery::delete)),
        )
        .route("/ws", guard(Endpoint::Ws, get(events::ws)))
        // Not under the Idempotency-Key layer: a replayed answer would have to keep the secret.
        .route("/webhooks", guard(Endpoint::Webhooks, post(webhooks::create).get(webhooks::list)))
        .route("/webhooks/{id}", guard(Endpoint::Webhooks, delete(webhooks::delete)))
        .route("/webhooks/{id}/deliveries", guard(Endpoint::Webhooks, get(webhooks::deliveries)))
        .route("/dashboard", get(dashboard::show))
        .route("/dashboard/login", post(dashboard::login))
        .route("/dashboard/logout", post(dashboard::logout))
        .route("/dashboard/keys", post(dashboard::generate))
        .route("/dashboard/keys/{id}/delete", post(dashboard::delete))
        .route("/dashboard/webhooks", post(dashboard::add_endpoint))
        .route("/dashboard/webhooks/{id}/delete", post(dashboard::delete_endpoint))
        .route("/healthz", get(system::healthz))
        .route("/readyz", get(system::readyz))
        .route("/openapi.json", get(openapi::openapi))
        .route("/docs", get(openapi::docs))
        .route("/metrics", get(system::metrics))
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(count_request))
        .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(
            TraceLayer::new_for_http()
                // Path only: query strings may carry `api-key`.
                .make_span_with(request_span)
                .on_response(|res: &Response, latency: Duration, _span: &tracing::Span| {
                    log_response(res.status(), latency);
                    #[cfg(feature = "otel")]
                    crate::otel::record_status(_span, res.status());
                }),
        )
        .layer(SetSensitiveRequestHeadersLayer::new([AUTHORIZATION]))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(RequestIds))
        .with_state(state)
}

/// The span of one request (path only: query strings may carry `api-key`).
fn request_span(req: &Request) -> tracing::Span {
    let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
    #[cfg(feature = "otel")]
    {
        let route = req.extensions().get::<axum::extract::MatchedPath>().map(axum::extract::MatchedPath::as_str);
        crate::otel::request_span(req.method(), req.uri().path(), route, id, req.headers())
    }
    #[cfg(not(feature = "otel"))]
    tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
}

/// One line per answer that went wrong: server errors always (ERROR), refusals of the caller's
/// request (4xx) at INFO. Successes only at DEBUG: a line per request would cost the busiest
/// path a formatted line each time, and `/metrics` counts them anyway.
fn log_response(status: StatusCode, latency: Duration) {
    let (status, latency_us) = (status.as_u16(), latency.as_micros());
    if status >= 500 {
        tracing::error!(status, latency_us, "request failed");
    } else if status >= 400 {
        tracing::info!(status, latency_us, "request refused");
    } else {
        tracing::debug!(status, latency_us, "request answered");
    }
}

/// Counts every answer by route (the pattern, never the path: ids stay out of labels) and
/// standard method.
async fn count_request(req: Request, next: axum::middleware::Next) -> Response {
    let route = req.extensions().get::<axum::extract::MatchedPath>().map_or("unmatched", |m| m.as_str()).to_owned();
    // The method is the client's own text: only the standard ones become label values.
    let method = match *req.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    crate::telemetry::http_request(route, method, response.status().as_u16(), started.elapsed());
    response
}

/// A known route asked with a method it does not have: 405, with the `Allow` header axum sets.
async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(tollgate_protocol::ErrorCode::MethodNotAllowed, format!("{method} is not a method of {}", uri.path()))
}

async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
        .with_remedy("See GET /openapi.json for the routes of this API")
}

fn panic_response(_panic: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::internal("handler panicked").into_response()
}

/// `req_<ulid>` request ids (a caller's own `X-Request-Id` is kept).
#[derive(Debug, Clone, Copy)]
struct RequestIds;

impl MakeRequestId for RequestIds {
    fn make_request_id<B>(&mut self, _request: &http::Request<B>) -> Option<RequestId> {
        HeaderValue::from_str(&format!("req_{}", ulid::Ulid::new())).ok().map(RequestId::new)
    }
}

/// How long the server waits for in-flight requests at shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
