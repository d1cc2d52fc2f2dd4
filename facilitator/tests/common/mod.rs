//! Helpers the chain tests share: an HTTP call, and a facilitator on each chain.
#![allow(dead_code, unreachable_pub)] // each test binary uses a part

pub mod batch;
pub mod evm;
pub mod fake;
pub mod permit2;
pub mod process;
pub mod rpc_proxy;
pub mod solana;
pub mod ws;

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

/// The same call `n` times at once; the answers in the order the calls were made.
pub async fn call_concurrently(
    app: &Router,
    path: &str,
    key: &str,
    body: &Value,
    n: usize,
) -> Vec<(StatusCode, Value)> {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let (app, key, body) = (app.clone(), key.to_owned(), body.clone());
            let path = path.to_owned();
            tokio::spawn(async move { call(&app, "POST", &path, &key, Some(body)).await })
        })
        .collect();
    let mut answers = Vec::with_capacity(n);
    for c in calls {
        answers.push(c.await.unwrap());
    }
    answers
}

/// The writes of a payment a storage fault is injected at (as SQLite trigger conditions): the
/// claim and its insert, the transaction id, the verdict.
pub const FAULT_STEPS: [(&str, &str); 3] = [
    ("claim and insert", "BEFORE INSERT ON payments"),
    ("transaction id", "BEFORE UPDATE OF status ON payments WHEN NEW.status = 'submitted'"),
    ("verdict", "BEFORE UPDATE OF status ON payments WHEN NEW.status IN ('confirmed', 'failed', 'pending')"),
];

/// Runs `sql` on the store's SQLite file from a connection of its own (a fault injected from
/// outside, as a failing disk or a bad migration would).
pub async fn sqlite(path: &std::path::Path, sql: &str) {
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}", path.display());
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::query(sql).execute(&pool).await.unwrap();
    pool.close().await;
}

/// One reconciler pass as if run `later` from now, when what was left unfinished is due.
pub async fn reconcile_in(
    store: &dyn tollgate_facilitator::store::Store,
    chains: &tollgate_facilitator::chains::Chains,
    later: chrono::Duration,
) -> tollgate_facilitator::settlement::reconcile::Reconciled {
    let clock = tollgate_facilitator::clock::ManualClock::new(chrono::Utc::now() + later);
    tollgate_facilitator::settlement::reconcile::reconcile_once(store, &clock, chains).await.unwrap()
}
