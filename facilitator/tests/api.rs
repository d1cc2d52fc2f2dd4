//! The HTTP contract, exercised through the real router over a real SQLite file, with the clock
//! under the test's control.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use chrono::{DateTime, Utc};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::clock::ManualClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _, SqlStore};
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::{AtomicAmount, Network};
use tower::ServiceExt as _;

use crate::common::process;

const SOL_A: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const SOL_B: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
const EVM_A: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const EVM_B: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";

struct TestApp {
    app: Router,
    state: AppState,
    store: Arc<SqlStore>,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_790_000_000, 0).unwrap()
}

impl TestApp {
    async fn new() -> Self {
        Self::with_config(Config::default()).await
    }

    /// `GET /supported` behind a key (`public_supported = false`): a cheap guarded route.
    async fn guarded_supported() -> Self {
        Self::with_config(Config { public_supported: false, ..Config::default() }).await
    }

    async fn with_config(config: Config) -> Self {
        Self::on(config, None).await
    }

    /// On the database at `url` (a SQLite file in a temporary directory when `None`).
    async fn on(mut config: Config, url: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let default = dir.path().join("api.db");
        config.database_url = DatabaseUrl::parse(url.unwrap_or(default.to_str().unwrap())).unwrap();
        let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
        let clock = ManualClock::new(start());
        let state = AppState::new(config, store.clone(), Arc::new(clock.clone()));
        Self { app: router(state.clone()), state, store, clock, _dir: dir }
    }

    /// A new key (new account unless `account` is given); returns (key, account id).
    async fn key(&self, plan: Plan, account: Option<&str>) -> (String, String) {
        let new = NewKey { plan, rpm: None, label: None, account: account.map(str::to_owned), env: KeyEnv::Test };
        let created = admin::create_key(&*self.store, new, start()).await.unwrap();
        (created.secret.expose().to_owned(), created.record.account_id)
    }

    async fn call(&self, req: Request<Body>) -> Answer {
        let response = self.app.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Answer { status, headers, body }
    }

    async fn get(&self, path: &str, key: Option<&str>) -> Answer {
        let mut b = Request::get(path);
        if let Some(k) = key {
            b = b.header("authorization", format!("Bearer {k}"));
        }
        self.call(b.body(Body::empty()).unwrap()).await
    }

    async fn post(&self, path: &str, key: &str, body: impl Into<Body>, idem: Option<&str>) -> Answer {
        let mut b = Request::post(path)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json");
        if let Some(i) = idem {
            b = b.header("idempotency-key", i);
        }
        self.call(b.body(body.into()).unwrap()).await
    }

    async fn post_json(&self, path: &str, key: &str, body: &Value) -> Answer {
        self.post(path, key, body.to_string(), None).await
    }
}

fn assert_envelope(a: &Answer, status: StatusCode, code: &str) {
    assert_eq!(a.status, status, "{:?}", a.body);
    assert_eq!(a.code(), code, "{:?}", a.body);
    assert!(a.body["error"]["message"].is_string() && a.body["error"]["remedy"].is_string(), "{:?}", a.body);
    assert!(a.headers.contains_key("x-request-id"));
}

#[tokio::test]
async fn authentication_is_required_and_checked() {
    let t = TestApp::new().await;
    assert_envelope(&t.get(&format!("/payment/history/{SOL_A}"), None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
    let (key, _) = t.key(Plan::Standard, None).await;
    // The same key with its last character changed (to one it is not: keys are random base58).
    let last = if key.ends_with('X') { 'Y' } else { 'X' };
    let wrong = format!("{}{last}", &key[..key.len() - 1]);
    for bad in [wrong.as_str(), "tg_live_short", "not-a-key", ""] {
        assert_envelope(
            &t.get(&format!("/payment/history/{SOL_A}"), Some(bad)).await,
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
        );
    }
    let basic = Request::get(format!("/payment/history/{SOL_A}"))
        .header("authorization", format!("Basic {key}"))
        .body(Body::empty())
        .unwrap();
    assert_envelope(&t.call(basic).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
    let ok = t.get(&format!("/payment/history/{SOL_A}"), Some(&key)).await;
    assert_eq!(ok.status, StatusCode::OK, "{:?}", ok.body);
    // Health, readiness and the API description need no key.
    assert_eq!(t.get("/healthz", None).await.status, StatusCode::OK);
    let ready = t.get("/readyz", None).await.body;
    assert_eq!((ready["status"].as_str(), ready["rateLimits"].as_str()), (Some("ready"), Some("in-process")));
}

/// A route asked with a method it does not have answers 405 with `Allow`; an unknown route 404;
/// both in the error envelope.
#[tokio::test]
async fn unknown_methods_and_routes_answer_in_the_envelope() {
    let t = TestApp::new().await;
    for (method, path, allow) in [
        ("DELETE", "/payment/send", "POST"),
        ("PUT", "/healthz", "GET,HEAD"),
        ("POST", "/payment/status/pay_1", "GET,HEAD"),
    ] {
        let req = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
        let answer = t.call(req).await;
        assert_envelope(&answer, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
        assert_eq!(answer.headers["allow"].to_str().unwrap().replace(' ', ""), allow, "{method} {path}");
    }
    let req = Request::builder().method("GET").uri("/no/such/route").body(Body::empty()).unwrap();
    assert_envelope(&t.call(req).await, StatusCode::NOT_FOUND, "NOT_FOUND");
}

#[tokio::test]
async fn deleted_keys_stop_working() {
    let t = TestApp::guarded_supported().await;
    let (key, _) = t.key(Plan::Standard, None).await;
    assert_eq!(t.get("/supported", Some(&key)).await.status, StatusCode::OK);
    let id = t.store.list_api_keys().await.unwrap()[0].id.clone();
    assert!(t.store.delete_api_key(&id).await.unwrap());
    // Deleted elsewhere (the CLI): trusted until the key-cache period ends (10 s by default).
    assert_eq!(t.get("/supported", Some(&key)).await.status, StatusCode::OK);
    // Deleted in this process: the cache is dropped at once.
    t.state.auth.forget_cached_keys();
    assert_envelope(&t.get("/supported", Some(&key)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
}

#[tokio::test]
async fn plans_gate_endpoints() {
    let t = TestApp::new().await;
    let (standard, _) = t.key(Plan::Standard, None).await;
    let (premium, _) = t.key(Plan::Premium, None).await;
    let path = format!("/token/info/{SOL_A}");
    let refused = t.get(&path, Some(&standard)).await;
    assert_envelope(&refused, StatusCode::FORBIDDEN, "FORBIDDEN");
    assert!(refused.message().contains("standard plan"));
    // Premium passes the plan check and reaches the (absent) chain backend.
    let allowed = t.get(&path, Some(&premium)).await;
    assert_envelope(&allowed, StatusCode::BAD_GATEWAY, "PAYMENT_VERIFICATION_FAILED");
    assert_envelope(&t.get("/ws", Some(&standard)).await, StatusCode::FORBIDDEN, "FORBIDDEN");
    assert_envelope(&t.get("/ws", Some(&premium)).await, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    // The WebSocket route also takes the key from the query, for browsers.
    assert_envelope(&t.get(&format!("/ws?api-key={standard}"), None).await, StatusCode::FORBIDDEN, "FORBIDDEN");
}

#[tokio::test]
async fn the_101st_request_in_a_minute_is_rate_limited() {
    let t = TestApp::guarded_supported().await;
    let (key, _) = t.key(Plan::Standard, None).await;
    for i in 1..=100u32 {
        let a = t.get("/supported", Some(&key)).await;
        assert_eq!(a.status, StatusCode::OK, "request {i}");
        assert_eq!(a.headers["x-ratelimit-limit"], "100");
        assert_eq!(a.headers["x-ratelimit-remaining"], (100 - i).to_string().as_str());
    }
    t.clock.advance(Duration::from_secs(59));
    let limited = t.get("/supported", Some(&key)).await;
    assert_envelope(&limited, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMIT");
    assert_eq!(limited.headers["retry-after"], "1");
    assert_eq!(limited.headers["x-ratelimit-remaining"], "0");
    assert_eq!(limited.headers["x-ratelimit-reset"], (start().timestamp() + 60).to_string().as_str());
    // Limits are per key.
    let (other, _) = t.key(Plan::Standard, None).await;
    assert_eq!(t.get("/supported", Some(&other)).await.status, StatusCode::OK);
    // A new window opens a minute after the first request.
    t.clock.advance(Duration::from_secs(1));
    assert_eq!(t.get("/supported", Some(&key)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn every_malformed_input_answers_in_the_envelope() {
    let t = TestApp::new().await;
    let (key, _) = t.key(Plan::Enterprise, None).await;
    let send = "/payment/send";
    let malformed = t.post(send, &key, "{\"walletAddress\": ", None).await;
    assert_envelope(&malformed, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    assert!(malformed.message().starts_with("malformed JSON"), "{}", malformed.message());
    let wrong_type =
        t.post_json(send, &key, &json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": "0.01"})).await;
    assert_envelope(&wrong_type, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    assert!(wrong_type.message().contains("amount"), "{}", wrong_type.message());
    let missing = t.post_json(send, &key, &json!({"walletAddress": SOL_A})).await;
    assert!(missing.message().contains("recipientAddress"), "{}", missing.message());
    let unknown = t
        .post_json(send, &key, &json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": 0.01, "amout": 1}))
        .await;
    assert_envelope(&unknown, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    assert_envelope(&t.post(send, &key, "", None).await, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    let huge = format!("{{\"walletAddress\": \"{}\"}}", "x".repeat(70 * 1024));
    assert_envelope(&t.post(send, &key, huge, None).await, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");

    let history = |q: &str| format!("/payment/history/{SOL_A}?{q}");
    for q in ["limit=501", "limit=0", "limit=-1", "limit=abc", "offset=-5", "type=outgoing", "limt=5"] {
        let a = t.get(&history(q), Some(&key)).await;
        assert_envelope(&a, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    }
    assert!(t.get(&history("limit=501"), Some(&key)).await.message().contains("between 1 and 500"));
    assert_envelope(
        &t.get("/payment/history/not-an-address", Some(&key)).await,
        StatusCode::BAD_REQUEST,
        "INVALID_PARAMETERS",
    );
    assert_envelope(
        &t.get("/payment/history/0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", Some(&key)).await,
        StatusCode::BAD_REQUEST,
        "INVALID_PARAMETERS",
    );
    assert_envelope(&t.get("/token/info/%FF%FE", Some(&key)).await, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");

    assert_envelope(
        &t.get("/payment/status/pay_01JD3Q8Z7Y6X5W4V3T2S1R0Q9P", Some(&key)).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    );
    assert_envelope(&t.get("/no/such/route", Some(&key)).await, StatusCode::NOT_FOUND, "NOT_FOUND");
    let wrong_method = t.get("/payment/send", Some(&key)).await;
    assert_envelope(&wrong_method, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED");
    let verify = t.post_json("/verify", &key, &json!({"x402Version": 7})).await;
    assert_envelope(&verify, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
}

#[tokio::test]
async fn send_enforces_the_contract_bounds_then_answers_honestly_without_a_chain() {
    let t = TestApp::new().await;
    let (key, _) = t.key(Plan::Standard, None).await;
    let send = |amount: Value, fee: Option<Value>| {
        let mut body = json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": amount});
        if let Some(f) = fee {
            body["priorityFee"] = f;
        }
        body
    };
    for amount in [json!(0.0009), json!(100.000000001), json!(0), json!(0.0000000001)] {
        let a = t.post_json("/payment/send", &key, &send(amount.clone(), None)).await;
        assert_envelope(&a, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    }
    for fee in [json!(0.000001), json!(0.02)] {
        let a = t.post_json("/payment/send", &key, &send(json!(0.01), Some(fee))).await;
        assert_envelope(&a, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
        assert!(a.message().contains("priorityFee"));
    }
    for bad_recipient in ["nope", EVM_B, SOL_A] {
        let body = json!({"walletAddress": SOL_A, "recipientAddress": bad_recipient, "amount": 0.01});
        assert_envelope(&t.post_json("/payment/send", &key, &body).await, StatusCode::BAD_REQUEST, "INVALID_RECIPIENT");
    }
    let bad_wallet = json!({"walletAddress": "0x1234", "recipientAddress": SOL_B, "amount": 0.01});
    assert_envelope(
        &t.post_json("/payment/send", &key, &bad_wallet).await,
        StatusCode::BAD_REQUEST,
        "INVALID_PARAMETERS",
    );

    // Valid input, and bounds are inclusive: the answer now comes from the (absent) chain backend.
    for amount in [json!(0.001), json!(100), json!(1e-3)] {
        let a = t.post_json("/payment/send", &key, &send(amount, Some(json!(0.01)))).await;
        assert_envelope(&a, StatusCode::BAD_GATEWAY, "PAYMENT_VERIFICATION_FAILED");
        assert!(a.message().starts_with("no chain backend configured for solana"), "{}", a.message());
    }
    let evm = json!({"walletAddress": EVM_A, "recipientAddress": EVM_B, "amount": 0.5, "network": "eip155:8453"});
    let a = t.post_json("/payment/send", &key, &evm).await;
    assert_eq!(a.message(), "no chain backend configured for eip155:8453");
    let mixed = json!({"walletAddress": EVM_A, "recipientAddress": EVM_B, "amount": 0.5, "network": "solana-devnet"});
    assert_envelope(&t.post_json("/payment/send", &key, &mixed).await, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
}

#[tokio::test]
async fn receive_checks_the_proof_before_the_chain() {
    let t = TestApp::new().await;
    let (key, _) = t.key(Plan::Standard, None).await;
    let garbage = t
        .post_json(
            "/payment/receive",
            &key,
            &json!({"walletAddress": SOL_A, "paymentProof": "%%%", "expectedAmount": 0.01}),
        )
        .await;
    assert_envelope(&garbage, StatusCode::PAYMENT_REQUIRED, "INVALID_PAYMENT_PROOF");
    let proof = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": "solana-devnet", "payload": {"transaction": "AQID"}
    }))
    .unwrap();
    let wrong_family = t
        .post_json(
            "/payment/receive",
            &key,
            &json!({"walletAddress": EVM_A, "paymentProof": proof, "expectedAmount": 0.01}),
        )
        .await;
    assert_envelope(&wrong_family, StatusCode::PAYMENT_REQUIRED, "INVALID_PAYMENT_PROOF");
    let not_allowed = t
        .post_json("/payment/receive", &key, &json!({"walletAddress": SOL_A, "paymentProof": proof, "expectedAmount": 0.01, "facilitatorUrl": "https://x402.example"}))
        .await;
    assert_envelope(&not_allowed, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    let bad_timeout = t
        .post_json(
            "/payment/receive",
            &key,
            &json!({"walletAddress": SOL_A, "paymentProof": proof, "expectedAmount": 0.01, "timeout": 0}),
        )
        .await;
    assert_envelope(&bad_timeout, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
    let ok = t
        .post_json(
            "/payment/receive",
            &key,
            &json!({"walletAddress": SOL_A, "paymentProof": proof, "expectedAmount": 0.01}),
        )
        .await;
    assert_envelope(&ok, StatusCode::BAD_GATEWAY, "PAYMENT_VERIFICATION_FAILED");
    assert_eq!(ok.message(), "no chain backend configured for solana (no network given and none configured)");
}

fn stored_payment(id: &str, owner: &str, from: &str, to: &str, seconds: i64) -> NewPayment {
    NewPayment {
        fee_atomic: Some(AtomicAmount(5_000)),
        ..NewPayment::native(
            id,
            owner,
            Network::solana_devnet(),
            (from.into(), to.into()),
            AtomicAmount(10_000_000),
            start() + chrono::Duration::seconds(seconds),
        )
    }
}

#[tokio::test]
async fn status_and_history_show_only_the_callers_payments() {
    let t = TestApp::new().await;
    let (alice, alice_account) = t.key(Plan::Standard, None).await;
    let (bob, _) = t.key(Plan::Standard, None).await;
    let (alice_rotated, _) = t.key(Plan::Standard, Some(&alice_account)).await;
    t.store.insert_payment(&stored_payment("pay_1", &alice_account, SOL_A, SOL_B, 0)).await.unwrap();
    t.store.insert_payment(&stored_payment("pay_2", &alice_account, SOL_B, SOL_A, 1)).await.unwrap();

    let mine = t.get("/payment/status/pay_1", Some(&alice)).await;
    assert_eq!(mine.status, StatusCode::OK);
    assert_eq!(mine.body["paymentId"], "pay_1");
    assert_eq!(mine.body["status"], "verified");
    assert_eq!(mine.body["amount"], json!(0.01));
    assert_eq!(mine.body["amountAtomic"], "10000000");
    assert_eq!(mine.body["fee"], json!(0.000005));
    assert_eq!(mine.body["network"], "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1");
    assert_eq!(
        t.get("/payment/status/pay_1", Some(&alice_rotated)).await.status,
        StatusCode::OK,
        "a rotated key sees its account's payments"
    );
    assert_envelope(&t.get("/payment/status/pay_1", Some(&bob)).await, StatusCode::NOT_FOUND, "NOT_FOUND");

    let page = t.get(&format!("/payment/history/{SOL_A}"), Some(&alice)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.body["total"], 2);
    assert_eq!(page.body["limit"], 50);
    assert_eq!(page.body["offset"], 0);
    assert_eq!(page.body["type"], "all");
    assert_eq!(page.body["payments"][0]["paymentId"], "pay_2");
    assert_eq!(page.body["payments"][0]["direction"], "received");
    assert_eq!(page.body["payments"][1]["direction"], "sent");
    let sent = t.get(&format!("/payment/history/{SOL_A}?type=sent&limit=1"), Some(&alice)).await;
    assert_eq!(sent.body["total"], 1);
    assert_eq!(sent.body["payments"][0]["paymentId"], "pay_1");
    let bobs_view = t.get(&format!("/payment/history/{SOL_A}"), Some(&bob)).await;
    assert_eq!(bobs_view.body["total"], 0);
    assert_eq!(bobs_view.body["payments"], json!([]));
}

#[tokio::test]
async fn idempotency_keys_replay_and_conflict() {
    let t = TestApp::new().await;
    let (key, _) = t.key(Plan::Standard, None).await;
    let body = json!({"walletAddress": SOL_A, "recipientAddress": "nope", "amount": 0.01}).to_string();
    let first = t.post("/payment/send", &key, body.clone(), Some("order-1")).await;
    assert_envelope(&first, StatusCode::BAD_REQUEST, "INVALID_RECIPIENT");
    assert!(!first.headers.contains_key("idempotent-replayed"));
    let replay = t.post("/payment/send", &key, body.clone(), Some("order-1")).await;
    assert_eq!(replay.status, first.status);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    let other_body = json!({"walletAddress": SOL_A, "recipientAddress": "nope", "amount": 0.02}).to_string();
    assert_envelope(
        &t.post("/payment/send", &key, other_body, Some("order-1")).await,
        StatusCode::CONFLICT,
        "IDEMPOTENCY_CONFLICT",
    );
    // Another API key has its own idempotency keys.
    let (other_key, _) = t.key(Plan::Standard, None).await;
    assert!(
        !t.post("/payment/send", &other_key, body, Some("order-1")).await.headers.contains_key("idempotent-replayed")
    );
    // 5xx answers are not remembered: the retry runs again.
    let valid = json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": 0.01}).to_string();
    assert_eq!(t.post("/payment/send", &key, valid.clone(), Some("order-2")).await.status, StatusCode::BAD_GATEWAY);
    let again = t.post("/payment/send", &key, valid, Some("order-2")).await;
    assert_eq!(again.status, StatusCode::BAD_GATEWAY);
    assert!(!again.headers.contains_key("idempotent-replayed"));
    let too_long = "k".repeat(256);
    assert_envelope(
        &t.post("/payment/send", &key, "{}", Some(&too_long)).await,
        StatusCode::BAD_REQUEST,
        "INVALID_PARAMETERS",
    );
}

#[tokio::test]
async fn request_ids_are_set_or_echoed() {
    let t = TestApp::new().await;
    let a = t.get("/healthz", None).await;
    assert!(a.headers["x-request-id"].to_str().unwrap().starts_with("req_"));
    let mine = t.call(Request::get("/nowhere").header("x-request-id", "trace-42").body(Body::empty()).unwrap()).await;
    assert_eq!(mine.headers["x-request-id"], "trace-42");
    assert_eq!(mine.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn supported_is_open_by_default_and_can_be_put_behind_a_key() {
    // Open, as x402 facilitators serve it: sellers' middlewares ask it before any payment.
    let t = TestApp::new().await;
    let a = t.get("/supported", None).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["kinds"], json!([]));
    // A key sent anyway is not needed, and a wrong one does not close it.
    assert_eq!(t.get("/supported", Some("tg_live_not-a-key")).await.status, StatusCode::OK);
    // ... and the contract says so.
    let contract = t.get("/openapi.json", None).await.body;
    let operation = &contract["paths"]["/supported"]["get"];
    assert_eq!(operation["security"], json!([]), "{operation}");
    assert!(operation["responses"].get("401").is_none(), "{operation}");
    // Behind a key: its plan and rate limit apply, and the contract says so.
    let t = TestApp::guarded_supported().await;
    let contract = t.get("/openapi.json", None).await.body;
    let operation = &contract["paths"]["/supported"]["get"];
    assert_eq!(operation["security"], json!([{"bearer": []}]), "{operation}");
    assert!(operation["responses"].get("401").is_some(), "{operation}");
    assert_envelope(&t.get("/supported", None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED");
    let (key, _) = t.key(Plan::Standard, None).await;
    let a = t.get("/supported", Some(&key)).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["x-ratelimit-limit"], "100");
}

#[tokio::test]
async fn openapi_describes_every_endpoint_of_the_contract() {
    let t = TestApp::new().await;
    let doc = t.get("/openapi.json", None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert!(doc.body["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc.body["openapi"]);
    let paths = doc.body["paths"].as_object().unwrap();
    for (path, method) in [
        ("/payment/send", "post"),
        ("/payment/receive", "post"),
        ("/payment/status/{paymentId}", "get"),
        ("/payment/history/{walletAddress}", "get"),
        ("/transaction/send", "post"),
        ("/transaction/receive", "post"),
        ("/transaction/confirm", "post"),
        ("/token/info/{mintAddress}", "get"),
        ("/verify", "post"),
        ("/settle", "post"),
        ("/supported", "get"),
        ("/ws", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/openapi.json", "get"),
        ("/webhooks", "post"),
        ("/webhooks", "get"),
        ("/webhooks/{id}", "delete"),
        ("/webhooks/{id}/deliveries", "get"),
    ] {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} missing");
    }
    assert!(doc.body["components"]["schemas"]["PaymentRecord"].is_object());
    assert!(doc.body["components"]["securitySchemes"]["bearer"].is_object());
    // What the guard answers is documented on every guarded operation.
    let send = &paths["/payment/send"]["post"]["responses"];
    for status in ["401", "403", "409", "429"] {
        assert!(send.get(status).is_some(), "POST /payment/send does not document {status}");
    }
    assert!(paths["/webhooks"]["post"]["responses"].get("409").is_none(), "registering is not replayed");
    // Addresses and transaction ids say what the validation checks.
    let wallet = &doc.body["components"]["schemas"]["SendPaymentRequest"]["properties"]["walletAddress"];
    assert_eq!((wallet["format"].as_str(), wallet["pattern"].is_string()), (Some("address"), true), "{wallet}");
    let parameter = &paths["/payment/history/{walletAddress}"]["get"]["parameters"][0]["schema"];
    assert_eq!(parameter["format"], "address", "{parameter}");
    let transaction = &doc.body["components"]["schemas"]["ConfirmTransactionRequest"]["properties"]["transaction"];
    assert_eq!(transaction["format"], "transaction-id", "{transaction}");
}

/// Control characters in strings that are stored (a resource, on every endpoint that takes one;
/// a key's label) are refused with 400, never stored nor answered with a 500: PostgreSQL cannot
/// hold NUL in text, and no URL has a control character. On SQLite and, when configured,
/// PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_strings_are_refused_on_every_backend() {
    let pg = process::PgSchema::create("control_characters_in_strings_are_refused_on_every_backend").await;
    for url in [None, pg.as_ref().map(|p| p.url.as_str())] {
        let backend = if url.is_some() { "PostgreSQL" } else { "SQLite" };
        if backend == "PostgreSQL" && pg.is_none() {
            continue;
        }
        let t = TestApp::on(Config::default(), url).await;
        let (key, _) = t.key(Plan::Enterprise, None).await;
        let nul = "https://shop.example/a\u{0}b";
        let proof = "eyJ4NDAyVmVyc2lvbiI6MX0=";
        let gateway = [
            (
                "/payment/receive",
                json!({"walletAddress": SOL_A, "paymentProof": proof, "expectedAmount": 0.01, "resource": nul}),
            ),
            (
                "/transaction/receive",
                json!({"walletAddress": SOL_A, "paymentProof": proof, "expectedAmount": 0.01, "resource": nul}),
            ),
            (
                "/payment/send",
                json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": 0.01, "resource": nul}),
            ),
            (
                "/transaction/send",
                json!({"walletAddress": SOL_A, "recipientAddress": SOL_B, "amount": 0.01, "resource": nul}),
            ),
        ];
        let requirement = json!({"scheme": "exact-native", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
            "amount": "10000000", "asset": "native", "payTo": SOL_A, "maxTimeoutSeconds": 30});
        let v2 = json!({"x402Version": 2, "paymentPayload": {"x402Version": 2, "accepted": requirement,
            "payload": {"transaction": "AQID"}, "resource": {"url": nul}}, "paymentRequirements": requirement});
        let v1 = json!({"x402Version": 1,
            "paymentPayload": {"x402Version": 1, "scheme": "exact-native", "network": "solana-devnet", "payload": {"transaction": "AQID"}},
            "paymentRequirements": {"scheme": "exact-native", "network": "solana-devnet", "maxAmountRequired": "10000000",
                "resource": nul, "description": "", "mimeType": "", "payTo": SOL_A, "maxTimeoutSeconds": 30, "asset": "native"}});
        let x402 = [("/verify", v2.clone()), ("/settle", v2), ("/verify", v1.clone()), ("/settle", v1)];
        for (path, body) in gateway.into_iter().chain(x402) {
            // The JSON text carries the escape `\u0000`, as a client's would.
            let text = body.to_string();
            assert!(text.contains("\\u0000"), "{text}");
            let a = t.post(path, &key, text, None).await;
            assert_envelope(&a, StatusCode::BAD_REQUEST, "INVALID_PARAMETERS");
            assert!(a.message().contains("resource"), "{backend} {path}: {}", a.message());
        }
        let label =
            NewKey { plan: Plan::Standard, rpm: None, label: Some("a\0b".into()), account: None, env: KeyEnv::Test };
        assert!(
            matches!(admin::create_key(&*t.store, label, start()).await, Err(admin::AdminError::Invalid(_))),
            "{backend}"
        );
        let account =
            NewKey { plan: Plan::Standard, rpm: None, label: None, account: Some("acct\0".into()), env: KeyEnv::Test };
        assert!(
            matches!(admin::create_key(&*t.store, account, start()).await, Err(admin::AdminError::Invalid(_))),
            "{backend}"
        );
    }
    if let Some(pg) = pg {
        pg.drop_schema().await;
    }
}
