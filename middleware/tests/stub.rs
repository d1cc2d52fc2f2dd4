//! The layer against a stand-in facilitator (an axum app on 127.0.0.1 that answers as the
//! gateway would): the pending path, and a plain `tower::Service` that is not axum.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
use tower::{Layer as _, ServiceExt as _};

const NETWORK: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

/// A gateway payment record of a GET; a confirmed one was confirmed just now.
fn record(status: &str, resource: &str) -> Value {
    let now = chrono::Utc::now().to_rfc3339();
    let confirmed_at = (status == "confirmed").then(|| now.clone());
    json!({
        "resource": resource,
        "paymentId": "pay_1", "status": status, "mode": "hosted", "network": NETWORK,
        "from": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4", "to": PAY_TO,
        "amount": 0.01, "amountAtomic": "10000000", "asset": "native", "transaction": "5sig",
        "createdAt": now, "updatedAt": now, "confirmedAt": confirmed_at, "metadata": {"method": "GET"},
        "payer": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
    })
}

/// A gateway whose `/payment/receive` answers "pending" and whose status answers `later`, for
/// the resource the receive named.
async fn stub(later: &'static str) -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let resource = Arc::new(std::sync::Mutex::new(String::new()));
    let seen = resource.clone();
    let app = Router::new()
        .route(
            "/payment/receive",
            post(move |axum::Json(body): axum::Json<Value>| {
                counted.fetch_add(1, Ordering::SeqCst);
                let named = body["resource"].as_str().unwrap_or_default().to_owned();
                seen.lock().unwrap().clone_from(&named);
                async move { (StatusCode::ACCEPTED, axum::Json(record("pending", &named))) }
            }),
        )
        .route(
            "/payment/status/{id}",
            get(move || {
                let named = resource.lock().unwrap().clone();
                async move { axum::Json(record(later, &named)) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

fn layer(url: &str) -> PaymentLayer {
    PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(url, "tg_test_key"))
        .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .retry_after_secs(3)
        .build()
        .unwrap()
}

fn proof() -> String {
    tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": NETWORK, "payload": {"transaction": "AQID"}
    }))
    .unwrap()
}

/// A plain tower service (no axum): `String` request bodies, `Full<Bytes>` responses.
fn plain(
    runs: Arc<AtomicUsize>,
) -> impl tower::Service<Request<String>, Response = Response<Full<Bytes>>, Error = Infallible, Future = impl Send>
+ Clone
+ Send {
    tower::service_fn(move |request: Request<String>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let payer = request.extensions().get::<Payment>().and_then(|p| p.payer.clone()).unwrap_or_default();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("paid by {payer}")))))
        }
    })
}

fn paid_request() -> Request<String> {
    Request::get("http://shop.example/report").header("X-PAYMENT", proof()).body(String::new()).unwrap()
}

#[tokio::test]
async fn pending_answers_503_with_retry_after_and_a_retry_is_served_once_confirmed() {
    let (url, calls) = stub("confirmed").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer(&url).layer(plain(runs.clone()));

    let response = service.clone().oneshot(paid_request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "3");
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!((body["paymentId"].as_str(), body["transaction"].as_str()), (Some("pay_1"), Some("5sig")));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "not served while pending");

    // The retry with the same proof follows the payment instead of paying again.
    let response = service.clone().oneshot(paid_request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("x-payment-response"));
    let text = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(text, "paid by 2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4");
    assert_eq!((calls.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn a_payment_that_failed_while_pending_is_refused_on_retry() {
    let (url, _) = stub("failed").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer(&url).layer(plain(runs.clone()));
    assert_eq!(service.clone().oneshot(paid_request()).await.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(service.clone().oneshot(paid_request()).await.unwrap().status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_plain_service_answers_402_without_payment() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer("http://127.0.0.1:9").layer(plain(runs.clone()));
    let response =
        service.oneshot(Request::get("http://shop.example/report").body(String::new()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(response.headers().contains_key("payment-required"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn invalid_configuration_fails_at_build() {
    use tollgate::BuildError;
    let facilitator = FacilitatorClient::new("http://127.0.0.1:9", "k");
    let sol = || Price::native_sol("0.01").unwrap();
    assert_eq!(
        PaymentLayer::builder().accept(sol().pay_to(PAY_TO.parse().unwrap())).build().unwrap_err(),
        BuildError::NoFacilitator
    );
    assert_eq!(PaymentLayer::builder().facilitator(facilitator.clone()).build().unwrap_err(), BuildError::NoPrice);
    assert_eq!(
        PaymentLayer::builder().facilitator(facilitator.clone()).accept(sol()).build().unwrap_err(),
        BuildError::NoRecipient(0)
    );
    let evm_address = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".parse().unwrap();
    assert!(matches!(
        PaymentLayer::builder().facilitator(facilitator.clone()).accept(sol().pay_to(evm_address)).build(),
        Err(BuildError::WrongRecipient(0, _))
    ));
    assert!(matches!(
        PaymentLayer::builder()
            .facilitator(facilitator)
            .accept(sol().pay_to(PAY_TO.parse().unwrap()))
            .resource("ftp://nope")
            .build(),
        Err(BuildError::ResourceUrl(_))
    ));
}

#[tokio::test]
async fn plain_hyper_serves_the_layer_over_http() {
    let (url, _) = stub("confirmed").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    // A hyper service with hyper's own request body type; no axum anywhere.
    let handler = tower::service_fn(move |_request: Request<hyper::body::Incoming>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"paid content")))) }
    });
    let service = layer(&url).layer(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shop = format!("http://{}/report", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    let client = reqwest::Client::new();
    let answer = client.get(&shop).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 402);
    assert!(answer.headers().contains_key("payment-required"));
    // Pending first (the stand-in says so), then served on the retry.
    let answer = client.get(&shop).header("X-PAYMENT", proof()).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 503);
    let answer = client.get(&shop).header("X-PAYMENT", proof()).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    assert_eq!(answer.text().await.unwrap(), "paid content");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn dynamic_pricing_can_let_a_request_through_or_price_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new("http://127.0.0.1:9", "k"))
        .pricing(|parts: &http::request::Parts| {
            let free = parts.uri.path() == "/free";
            let dear = parts.uri.query() == Some("size=large");
            async move {
                let amount = if dear { "0.05" } else { "0.01" };
                (!free).then(|| {
                    vec![
                        Price::native_sol(amount).unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()),
                    ]
                })
            }
        })
        .build()
        .unwrap();
    let service = layer.layer(plain(runs.clone()));
    let get = |uri: &str| Request::get(uri).body(String::new()).unwrap();
    let free = service.clone().oneshot(get("http://shop.example/free")).await.unwrap();
    assert_eq!(free.status(), StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for (uri, amount) in
        [("http://shop.example/report", "10000000"), ("http://shop.example/report?size=large", "50000000")]
    {
        let answer = service.clone().oneshot(get(uri)).await.unwrap();
        assert_eq!(answer.status(), StatusCode::PAYMENT_REQUIRED);
        let body: Value = serde_json::from_slice(&answer.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["accepts"][0]["maxAmountRequired"], amount);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// One route, priced per request: a proof paid (and remembered) for the cheap request does not buy
/// the dear one, from the layer's memory or by following its payment.
#[tokio::test]
async fn a_proof_for_a_cheap_request_does_not_buy_a_dear_one() {
    let (url, _) = stub("confirmed").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&url, "tg_test_key"))
        .pricing(|parts: &http::request::Parts| {
            let amount = if parts.uri.query() == Some("size=large") { "0.05" } else { "0.01" };
            async move {
                Some(vec![
                    Price::native_sol(amount).unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()),
                ])
            }
        })
        .build()
        .unwrap();
    let service = layer.layer(plain(runs.clone()));
    let paid = |uri: &str| Request::get(uri).header("X-PAYMENT", proof()).body(String::new()).unwrap();
    let pending = service.clone().oneshot(paid("http://shop.example/report")).await.unwrap();
    assert_eq!(pending.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Confirmed and remembered for the cheap request: served there, refused for the dear one.
    let cheap = service.clone().oneshot(paid("http://shop.example/report")).await.unwrap();
    assert_eq!(cheap.status(), StatusCode::OK);
    let dear = service.clone().oneshot(paid("http://shop.example/report?size=large")).await.unwrap();
    assert_eq!(dear.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "served once, for what was paid");
}
