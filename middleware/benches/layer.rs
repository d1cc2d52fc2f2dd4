//! Benchmark: one request through an axum router, three ways, in one run:
//!
//! * `bare`: the handler without the layer;
//! * `402`: the layer answering a request without payment (builds the challenge);
//! * `repeat`: the layer serving a proof it settled before, again (the retry a payment buys): no
//!   verification, one more answer claimed from the facilitator, which counts them.
//!
//! each measured twice: in process (`tower::oneshot`, the layer's own cost against a handler that
//! costs almost nothing) and over HTTP on 127.0.0.1 with a keep-alive client (what a buyer sees).
//!
//! The facilitator is a stand-in on 127.0.0.1 that confirms at once and counts nothing (every
//! claim is its payment's first answer of 10,000): the repeat path's facilitator call is one
//! round trip on 127.0.0.1. Run: `cargo bench -p tollgate --bench layer`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, StatusCode};
use serde_json::json;
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tower::ServiceExt as _;

const NETWORK: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

async fn report() -> &'static str {
    "{\"report\": 42}"
}

fn stand_in() -> Router {
    Router::new().route(
        "/payment/receive",
        post(|| async {
            axum::Json(json!({
                "paymentId": "pay_1", "status": "confirmed", "mode": "hosted", "network": NETWORK,
                "from": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4", "to": PAY_TO,
                "amount": 0.01, "amountAtomic": "10000000", "asset": "native", "transaction": "5sig",
                "resource": "http://shop.example/report", "metadata": {"method": "GET"}, "createdAt": "2026-11-22T00:00:00Z", "updatedAt": "2026-11-22T00:00:00Z",
                "answers": {"served": 1, "uses": 10_000}
            }))
        }),
    )
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let facilitator = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, stand_in()).await });
        url
    });
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&facilitator, "tg_test_bench"))
        .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .resource("http://shop.example/report")
        .build()
        .unwrap();
    let bare = Router::new().route("/report", get(report));
    let paid = Router::new().route("/report", get(report)).route_layer(layer);
    let proof = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": NETWORK, "payload": {"transaction": "AQID"}
    }))
    .unwrap();
    let plain = || Request::get("/report").body(Body::empty()).unwrap();
    let with_proof = || Request::get("/report").header("X-PAYMENT", &proof).body(Body::empty()).unwrap();
    // Settle the proof once, so the path below is a repeat.
    let first = runtime.block_on(paid.clone().oneshot(with_proof())).unwrap();
    let status = first.status();
    let body = runtime.block_on(http_body_util::BodyExt::collect(first.into_body())).unwrap().to_bytes();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));

    let mut group = c.benchmark_group("paid route");
    group.bench_function("bare", |b| {
        b.to_async(&runtime)
            .iter(|| async { assert_eq!(bare.clone().oneshot(plain()).await.unwrap().status(), StatusCode::OK) });
    });
    group.bench_function("402", |b| {
        b.to_async(&runtime).iter(|| async {
            assert_eq!(paid.clone().oneshot(plain()).await.unwrap().status(), StatusCode::PAYMENT_REQUIRED);
        });
    });
    group.bench_function("repeat", |b| {
        b.to_async(&runtime).iter(|| async {
            assert_eq!(paid.clone().oneshot(with_proof()).await.unwrap().status(), StatusCode::OK);
        });
    });
    group.finish();

    // The same three over HTTP.
    let serve = |app: Router| {
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/report", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await });
            url
        })
    };
    let (bare_url, paid_url) = (serve(bare), serve(paid));
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("paid route over HTTP");
    for (name, url, header, status) in [
        ("bare", &bare_url, None, 200),
        ("bare, with the payment header", &bare_url, Some(proof.as_str()), 200),
        ("402", &paid_url, None, 402),
        ("repeat", &paid_url, Some(proof.as_str()), 200),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let mut request = client.get(url.as_str());
                if let Some(proof) = header {
                    request = request.header("X-PAYMENT", proof);
                }
                let answer = request.send().await.unwrap();
                assert_eq!(answer.status().as_u16(), status);
                answer.bytes().await.unwrap()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
