//! Helpers the chain tests share: an HTTP call, and a facilitator on each chain.
#![allow(dead_code, unreachable_pub)] // each test binary uses a part

pub mod evm;
pub mod fake;
pub mod rpc_proxy;
pub mod solana;

use axum::Router;
use axum::body::{Body, to_bytes};
use http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt as _;

/// Calls `app` as a client with API key `key` would; the answer's status and JSON (null when
/// the body is not JSON).
pub async fn call(app: &Router, method: &str, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json");
    let req = req.body(body.map_or_else(Body::empty, |b| Body::from(b.to_string()))).unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
