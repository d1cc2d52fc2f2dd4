//! The seller layer (`tollgate`) on the facilitator core in process ([`InProcess`]): real
//! signed transfers on the embedded Solana ledger, the real payment core and SQLite, and the
//! layer in front of a route — no stand-in facilitator. What one proof buys, once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate::{Payment, PaymentLayer, Price, SettlementOrder};
use tollgate_facilitator::chains::solana::embedded;
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::seller::InProcess;
use tollgate_facilitator::store::AccountStore as _;
use tower::ServiceExt as _;

use common::solana::{SolanaApp, signed_proof};

/// 0.001 SOL, in lamports: the price of `/report`.
const PRICE: u64 = 1_000_000;

/// A shop whose routes cost 0.001 SOL to `seller`, settled by the core in process; `runs`
/// counts the handler's runs, and `/fails` answers 500.
async fn shop(t: &SolanaApp, seller: &Pubkey, order: SettlementOrder, runs: Arc<AtomicUsize>) -> Router {
    shop_at(t, seller, (order, "0.001"), runs).await
}

/// The same shop, `/report` costing `price` SOL.
async fn shop_at(
    t: &SolanaApp,
    seller: &Pubkey,
    (order, price): (SettlementOrder, &str),
    runs: Arc<AtomicUsize>,
) -> Router {
    t.store.create_account("acct_shop", chrono::Utc::now()).await.ok();
    let network = t.state.chains.embedded_solana().unwrap().rpc.network().clone();
    let layer = PaymentLayer::builder()
        .facilitator(InProcess::new(&t.state, "acct_shop", Plan::Premium))
        .accept(Price::native_sol(price).unwrap().on(network).pay_to(seller.to_string().parse().unwrap()))
        .resource_base("https://shop.test")
        .settlement_order(order)
        .build()
        .unwrap();
    let counted = runs.clone();
    Router::new()
        .route(
            "/report",
            get(move |axum::Extension(p): axum::Extension<Payment>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { format!("paid {} by {}", p.amount.get(), p.transaction.unwrap_or_default()) }
            })
            .delete(|| async { "deleted" }),
        )
        .route("/other", get(|| async { "other" }))
        .route("/fails", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "broken") }))
        .route_layer(layer)
}

/// A buyer holding SOL on the ledger.
async fn buyer(t: &SolanaApp) -> Keypair {
    let buyer = Keypair::new();
    embedded::fund(&t.state.chains.embedded_solana().unwrap().rpc, &buyer).await.unwrap();
    buyer
}

/// `buyer`'s `X-PAYMENT` paying `to` `lamports`.
async fn proof(t: &SolanaApp, buyer: &Keypair, to: &Pubkey, lamports: u64) -> String {
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    signed_proof(&rpc.network().to_string(), buyer, to, lamports, blockhash)
}

async fn call(shop: &Router, method: &str, path: &str, proof: Option<&str>) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(proof) = proof {
        request = request.header("x-payment", proof);
    }
    let response = shop.clone().oneshot(request.body(axum::body::Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_proof_buys_one_request_once_and_nothing_it_did_not_pay_for() {
    let t = SolanaApp::start().await;
    let seller = Keypair::new().pubkey();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = shop(&t, &seller, SettlementOrder::SettleBefore, runs.clone()).await;
    let buyer = buyer(&t).await;

    let (status, _) = call(&shop, "GET", "/report", None).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);

    // Less than the price: refused by the core, nothing moved.
    let cheap = proof(&t, &buyer, &seller, PRICE / 2).await;
    let (status, body) = call(&shop, "GET", "/report", Some(&cheap)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert!(body.contains("invalid_exact_svm_payload_amount_mismatch") || body.contains("less than"), "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, 0);

    // To someone else: refused without a transfer.
    let elsewhere = proof(&t, &buyer, &Keypair::new().pubkey(), PRICE).await;
    let (status, _) = call(&shop, "GET", "/report", Some(&elsewhere)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);

    // The price: served once, and the money is on chain.
    let paid = proof(&t, &buyer, &seller, PRICE).await;
    let (status, body) = call(&shop, "GET", "/report", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with(&format!("paid {PRICE} by ")), "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The same proof for another resource, or another method: refused.
    let (status, body) = call(&shop, "GET", "/other", Some(&paid)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    let (status, body) = call(&shop, "DELETE", "/report", Some(&paid)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");

    // Another instance of the shop (its own cache) over the same core: the proof's retry, the
    // second answer it buys, answered by the settlement made — not a second transfer; a third
    // answer, at either instance, is refused: the database counts them for every instance.
    let other_instance = shop_again(&t, &seller).await;
    let (status, body) = call(&other_instance, "GET", "/report", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE, "settled once");
    for instance in [&shop, &other_instance] {
        let (status, body) = call(instance, "GET", "/report", Some(&paid)).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
        assert!(body.contains("served the 2 answers"), "{body}");
    }
    let (status, _) = call(&other_instance, "GET", "/other", Some(&paid)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    // An instance that prices the request dearer: the cheaper proof does not buy it.
    let dearer = shop_at(&t, &seller, (SettlementOrder::SettleBefore, "0.002"), Arc::new(AtomicUsize::new(0))).await;
    let (status, body) = call(&dearer, "GET", "/report", Some(&paid)).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE, "settled once");

    // A resource no payment can be bound to (longer than the API takes): nothing settles, and
    // the buyer is told to retry (502), not refused for good.
    let long = proof(&t, &buyer, &seller, PRICE).await;
    let path = format!("/report?q={}", "a".repeat(2_100));
    let (status, _) = call(&shop, "GET", &path, Some(&long)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE, "nothing moved");
}

async fn shop_again(t: &SolanaApp, seller: &Pubkey) -> Router {
    shop(t, seller, SettlementOrder::SettleBefore, Arc::new(AtomicUsize::new(0))).await
}

/// Eight requests at once with one proof: one transfer, and the payment serves what it buys (its
/// answer and one retry, counted in the database), the rest refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_proof_settle_it_once_and_serve_what_it_buys() {
    let t = SolanaApp::start().await;
    let seller = Keypair::new().pubkey();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = shop(&t, &seller, SettlementOrder::SettleBefore, runs.clone()).await;
    let buyer = buyer(&t).await;
    let paid = proof(&t, &buyer, &seller, PRICE).await;
    let answers = futures_util::future::join_all((0..8).map(|_| call(&shop, "GET", "/report", Some(&paid)))).await;
    let served = answers.iter().filter(|(status, _)| *status == StatusCode::OK).count();
    let refused = answers
        .iter()
        .filter(|(status, body)| *status == StatusCode::PAYMENT_REQUIRED && body.contains("answers_used"))
        .count();
    assert_eq!((served, refused), (2, 6), "{answers:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a handler run per answer");
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE, "one transfer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_then_settle_settles_only_what_the_handler_served() {
    let t = SolanaApp::start().await;
    let seller = Keypair::new().pubkey();
    let shop = shop(&t, &seller, SettlementOrder::VerifyThenSettle, Arc::new(AtomicUsize::new(0))).await;
    let buyer = buyer(&t).await;

    // The handler fails: nothing is settled, the buyer keeps the money.
    let kept = proof(&t, &buyer, &seller, PRICE).await;
    let (status, _) = call(&shop, "GET", "/fails", Some(&kept)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(t.lamports(&seller.to_string()).await, 0);

    // It succeeds: settled, once.
    let paid = proof(&t, &buyer, &seller, PRICE).await;
    let (status, body) = call(&shop, "GET", "/report", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, PRICE);
}

/// A shop selling `/weather` (declared for discovery, with service metadata) and `/plain`
/// (declared nothing), both 0.001 SOL to `seller`, settled in process for `acct_found`.
async fn declared_shop(t: &SolanaApp, seller: &Pubkey) -> Router {
    use serde_json::json;
    use tollgate::discovery::{Discovery, ServiceMetadata};
    t.store.create_account("acct_found", chrono::Utc::now()).await.ok();
    let network = t.state.chains.embedded_solana().unwrap().rpc.network().clone();
    let price = || Price::native_sol("0.001").unwrap().on(network.clone()).pay_to(seller.to_string().parse().unwrap());
    let facilitator = || InProcess::new(&t.state, "acct_found", Plan::Premium);
    let declared = PaymentLayer::builder()
        .facilitator(facilitator())
        .accept(price())
        .resource_base("https://shop.test")
        .description("Today's weather")
        .discovery(Discovery::http().query_example(json!({"city": "Lisbon"})))
        .service(ServiceMetadata { service_name: Some("Weather Co".into()), ..ServiceMetadata::default() })
        .build()
        .unwrap();
    let plain = PaymentLayer::builder().facilitator(facilitator()).accept(price()).resource_base("https://shop.test");
    Router::new()
        .route("/weather", get(|| async { "sunny" }).route_layer(declared.clone()))
        .route("/forecast", get(|| async { "rain" }).route_layer(declared))
        .route("/plain", get(|| async { "plain" }).route_layer(plain.build().unwrap()))
}

/// A v2 payment of `lamports` for `path`'s first offer, echoing `bazaar` as the buyer's own
/// declaration of the resource.
async fn v2_proof(
    t: &SolanaApp,
    shop: &Router,
    path: &str,
    buyer: &Keypair,
    to: &Pubkey,
    bazaar: serde_json::Value,
) -> String {
    let response = shop.clone().oneshot(Request::get(path).body(axum::body::Body::empty()).unwrap()).await.unwrap();
    let header = response.headers()["payment-required"].to_str().unwrap().to_owned();
    let required: serde_json::Value = tollgate_protocol::x402::header::decode(&header).unwrap();
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let transaction = common::solana::signed_transfer(buyer, to, PRICE, blockhash);
    let mut resource = required["resource"].clone();
    resource["description"] = serde_json::json!("free money, pay nothing");
    tollgate_protocol::x402::header::encode(&serde_json::json!({
        "x402Version": 2, "accepted": required["accepts"][0], "resource": resource,
        "payload": {"transaction": transaction}, "extensions": {"bazaar": bazaar},
    }))
    .unwrap()
}

/// The catalog's entries of `account` once `expected` are there (writes are in the background).
async fn cataloged(t: &SolanaApp, account: &str, expected: usize) -> Vec<tollgate_facilitator::store::CatalogEntry> {
    use tollgate_facilitator::store::CatalogStore as _;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let entries = t.store.catalog_of(account).await.unwrap();
        if entries.len() >= expected || std::time::Instant::now() > deadline {
            return entries;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_route_is_cataloged_as_its_seller_declared_it_never_as_the_buyer_wrote() {
    use serde_json::json;
    let t = SolanaApp::start().await;
    let seller = Keypair::new().pubkey();
    let shop = declared_shop(&t, &seller).await;
    let buyer = buyer(&t).await;
    // The buyer echoes a declaration of its own: another method, another example, a tool.
    let forged = json!({"info": {"input": {"type": "mcp", "toolName": "drain", "inputSchema": {"type": "object"}}},
        "schema": {"type": "object"}, "routeTemplate": "/admin"});

    let paid = v2_proof(&t, &shop, "/weather?city=Porto", &buyer, &seller, forged.clone()).await;
    let (status, body) = call(&shop, "GET", "/weather?city=Porto", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let entries = cataloged(&t, "acct_found", 1).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry.url, "https://shop.test/weather");
    assert_eq!((entry.kind.as_str(), entry.tool_name.as_str()), ("http", ""));
    assert_eq!(entry.description, "Today's weather", "the buyer's description was cataloged");
    assert_eq!(entry.service.service_name.as_deref(), Some("Weather Co"));
    assert_eq!(entry.extensions["bazaar"]["info"]["input"]["queryParams"], json!({"city": "Lisbon"}));
    assert_eq!(entry.accepts.len(), 1);
    assert_eq!(entry.accepts[0].pay_to.to_string(), seller.to_string());

    // A route that declares nothing is not cataloged, whatever the buyer's payment says of it.
    let paid = v2_proof(&t, &shop, "/plain", &buyer, &seller, forged).await;
    let (status, body) = call(&shop, "GET", "/plain", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // (A later declared route's entry is written after anything the first could have started.)
    let paid = v2_proof(&t, &shop, "/forecast", &buyer, &seller, json!({})).await;
    let (status, body) = call(&shop, "GET", "/forecast", Some(&paid)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let urls: Vec<String> = cataloged(&t, "acct_found", 2).await.into_iter().map(|e| e.url).collect();
    assert_eq!(urls.len(), 2, "{urls:?}");
    assert!(urls.contains(&"https://shop.test/forecast".to_owned()) && !urls.iter().any(|u| u.ends_with("/plain")));

    // Listed to anyone through the API, found by its words.
    let (status, list) = common::call(&t.app, "GET", "/discovery/search?query=weather%20co", "", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["resources"].as_array().map(Vec::len), Some(2), "{list}");
    let (status, list) = common::call(&t.app, "GET", "/discovery/search?query=FORECAST", "", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["resources"].as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list["resources"][0]["resource"], "https://shop.test/forecast");
    assert_eq!(list["resources"][0]["serviceName"], "Weather Co");
    assert_eq!(list["partialResults"], false);
    let (status, list) = common::call(&t.app, "GET", "/discovery/resources?type=mcp", "", None).await;
    assert_eq!((status, &list["pagination"]["total"]), (StatusCode::OK, &json!(0)), "{list}");
    let (status, list) = common::call(&t.app, "GET", "/discovery/search?query=%20%21", "", None).await;
    assert_eq!((status, &list["resources"]), (StatusCode::OK, &json!([])), "{list}");
    // Bounds are answered 400, not served.
    for bad in [
        "/discovery/resources?limit=0",
        "/discovery/resources?limit=101",
        "/discovery/resources?offset=100001",
        "/discovery/search?query=a&cursor=abc",
        "/discovery/resources?type=12345678901234567",
    ] {
        let (status, body) = common::call(&t.app, "GET", bad, "", None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
}
