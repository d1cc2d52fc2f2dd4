//! A request dropped at each await point of a payment (the client hangs up, a timeout layer gives
//! up): the payment still ends `confirmed` (or `pending`), its transaction is broadcast once, and
//! the request's `Idempotency-Key` replays the outcome — never a 409 once the work has ended.
//!
//! The chain is a fake that stops at a chosen step until the test has dropped the request, so
//! each await point is hit for sure; storage, the API and the payment core are the real ones.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use common::fake::{FakeChain, Gate, network};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::Chains;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::{PaymentStore as _, SqlStore};
use tollgate_facilitator::wallets::MasterKey;
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::{Address, ChainFamily};
use tower::ServiceExt as _;

struct App {
    app: Router,
    store: Arc<SqlStore>,
    gate: Arc<Gate>,
    broadcasts: Arc<Mutex<Vec<String>>>,
    key: String,
    wallet: String,
    _dir: tempfile::TempDir,
}

async fn start() -> App {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("t.db").to_str().unwrap()).unwrap(),
        ..Config::default()
    };
    let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let chain = FakeChain::default();
    let (gate, broadcasts) = (chain.gate.clone(), chain.broadcasts.clone());
    let state = AppState::new(config, store.clone(), Arc::new(SystemClock))
        .with_chains(Chains::none().with(Arc::new(chain)))
        .with_master_key(MasterKey::generate().unwrap());
    let new = NewKey { plan: Plan::Premium, rpm: None, label: None, account: None, env: KeyEnv::Test };
    let created = admin::create_key(&*store, new, chrono::Utc::now()).await.unwrap();
    let master = state.master_key.as_ref().unwrap();
    let wallet = admin::create_wallet(&*store, master, &created.record.id, ChainFamily::Solana, chrono::Utc::now())
        .await
        .unwrap();
    App { app: router(state), store, gate, broadcasts, key: created.secret.expose().to_owned(), wallet, _dir: dir }
}

fn post(app: &App, path: &str, idempotency_key: &str, body: &Value) -> Request<Body> {
    Request::post(path)
        .header("authorization", format!("Bearer {}", app.key))
        .header("content-type", "application/json")
        .header("idempotency-key", idempotency_key)
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn answer(app: &App, req: Request<Body>) -> (StatusCode, Value) {
    let response = app.app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Sends `req`, drops it once the chain reached `step`, and lets the chain go on.
async fn drop_at(app: &App, step: &'static str, req: Request<Body>) {
    *app.gate.stop_at.lock().unwrap() = Some(step);
    let request = tokio::spawn({
        let router = app.app.clone();
        async move { router.oneshot(req).await }
    });
    tokio::time::timeout(Duration::from_secs(10), app.gate.entered.notified())
        .await
        .expect("the chain reaches the step");
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled(), "{step}: the client went away before the answer");
    app.gate.release.notify_one();
}

/// Sends the request, drops it once the chain reached `step`, lets the chain go on, and returns
/// what the same `Idempotency-Key` answers once the work has ended.
async fn hang_up_at(app: &App, step: &'static str, path: &str, key: &str, body: &Value) -> (StatusCode, Value) {
    drop_at(app, step, post(app, path, key, body)).await;
    // The work ends on its own task; until then the key is in progress (409).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = answer(app, post(app, path, key, body)).await;
        if status != StatusCode::CONFLICT {
            return (status, body);
        }
        assert!(tokio::time::Instant::now() < deadline, "{step}: the key still answers 409: {body}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_dropped_at_each_step_settles_once_and_its_key_replays() {
    let app = start().await;
    for (n, step) in ["check", "broadcast", "outcome"].into_iter().enumerate() {
        let payload = json!({"x402Version": 1, "scheme": "exact-native", "network": network().to_string(),
                             "payload": {"transaction": format!("buyer-transfer-{n}")}});
        let proof = tollgate_protocol::x402::header::encode(&payload).unwrap();
        let body = json!({"walletAddress": app.wallet, "paymentProof": proof, "expectedAmount": 0.01});
        let (status, replayed) = hang_up_at(&app, step, "/payment/receive", &format!("receive-{step}"), &body).await;
        assert_eq!((status, replayed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{step}: {replayed}");
        let id = replayed["paymentId"].as_str().unwrap();
        let stored = app.store.get_payment(id).await.unwrap().unwrap();
        assert_eq!(stored.payment.status.as_str(), "confirmed", "{step}");
        let tx = stored.payment.transaction.unwrap();
        let sent = app.broadcasts.lock().unwrap().iter().filter(|b| **b == tx).count();
        assert_eq!(sent, 1, "{step}: broadcast once");
        // The proof is spent: presented again without the key, it is refused as used.
        let (s, e) = common::call(&app.app, "POST", "/payment/receive", &app.key, Some(body)).await;
        assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{step}: {e}");
    }
    assert_eq!(app.store.recent_payments(100).await.unwrap().len(), 3, "one payment per proof");
}

/// Without an `Idempotency-Key`, nothing but the payment core keeps the work going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_without_a_key_still_ends_its_payment() {
    let app = start().await;
    let steps = ["check", "broadcast", "outcome"];
    for (n, step) in steps.into_iter().enumerate() {
        let payload = json!({"x402Version": 1, "scheme": "exact-native", "network": network().to_string(),
                             "payload": {"transaction": format!("unkeyed-{n}")}});
        let proof = tollgate_protocol::x402::header::encode(&payload).unwrap();
        let body = json!({"walletAddress": app.wallet, "paymentProof": proof, "expectedAmount": 0.01});
        let req = Request::post("/payment/receive")
            .header("authorization", format!("Bearer {}", app.key))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        drop_at(&app, step, req).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let payments = app.store.recent_payments(100).await.unwrap();
            if payments.len() == n + 1 && payments[0].payment.status.is_final() {
                assert_eq!(payments[0].payment.status.as_str(), "confirmed", "{step}");
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{step}: the payment did not end: {payments:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(app.broadcasts.lock().unwrap().len(), steps.len(), "one transfer per payment");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_dropped_at_each_step_pays_once_and_its_key_replays() {
    let app = start().await;
    let steps = ["plan", "sign", "broadcast", "outcome"];
    for step in steps {
        let body = json!({"walletAddress": app.wallet, "recipientAddress": Address::Solana([3; 32]).to_string(),
                          "amount": 0.001});
        let (status, replayed) = hang_up_at(&app, step, "/payment/send", &format!("send-{step}"), &body).await;
        assert_eq!((status, replayed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{step}: {replayed}");
        let stored = app.store.get_payment(replayed["paymentId"].as_str().unwrap()).await.unwrap().unwrap();
        let tx = stored.payment.transaction.unwrap();
        assert_eq!(app.broadcasts.lock().unwrap().iter().filter(|b| **b == tx).count(), 1, "{step}: broadcast once");
    }
    let payments = app.store.recent_payments(100).await.unwrap();
    assert_eq!(payments.len(), steps.len(), "one payment per request, none for a replay");
    assert_eq!(app.broadcasts.lock().unwrap().len(), steps.len(), "one transfer per payment");
}
