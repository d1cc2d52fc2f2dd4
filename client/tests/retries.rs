//! A paid request whose answer is lost — the connection drops after the seller served it — is
//! sent again with the same payment when that cannot run it twice: the seller takes the
//! `payment-identifier` extension (it answers the repeat as it answered the first), or the method
//! is idempotent. A `POST` to a seller without the extension is not sent again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::post;
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_client::{Buyer, PayError, Request};

/// Serves `app` on a free port of 127.0.0.1: its base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// In front of `upstream`: forwards every request, and drops the connection of the first paid
/// one of each path after the seller answered it (its answer is lost).
async fn losing_front(upstream: String) -> String {
    let lost: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let http = reqwest::Client::new();
    let app = Router::new().fallback(move |request: axum::extract::Request| {
        let (upstream, lost, http) = (upstream.clone(), lost.clone(), http.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
            let path = parts.uri.path().to_owned();
            let answer = http
                .request(parts.method.clone(), format!("{upstream}{path}"))
                .headers(parts.headers.clone())
                .body(body)
                .send()
                .await
                .unwrap();
            let paid = parts.headers.contains_key("payment-signature") || parts.headers.contains_key("x-payment");
            let first = paid && !lost.lock().unwrap().contains(&path);
            if first {
                lost.lock().unwrap().push(path);
                // Ends this connection's task without an answer: the buyer's connection closes.
                panic!("the answer is lost (on purpose)");
            }
            let (status, headers) = (answer.status(), answer.headers().clone());
            (status, headers, answer.bytes().await.unwrap())
        }
    });
    serve(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_answer_is_asked_again_with_the_same_payment_only_when_that_cannot_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let facilitator = FacilitatorClient::new(&demo.facilitator_url, &demo.seller_api_key);
    let price = Price::native_sol("0.001").unwrap().pay_to(demo.seller.parse().unwrap());
    let runs = Arc::new(AtomicUsize::new(0));
    let order = |runs: Arc<AtomicUsize>| {
        post(move |body: String| async move { format!("order {}: {body}", runs.fetch_add(1, Ordering::SeqCst) + 1) })
    };
    let layer = |identifier: bool| {
        let builder = PaymentLayer::builder().facilitator(facilitator.clone()).accept(price.clone());
        if identifier { builder.payment_identifier(false) } else { builder }.build().unwrap()
    };
    let seller = Router::new()
        .route("/order", order(runs.clone()).route_layer(layer(true)))
        .route("/plain-order", order(runs.clone()).route_layer(layer(false)));
    let front = losing_front(serve(seller).await).await;
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).without_cap();
    let sent = || async { demo.history(&demo.buyer, "sent").await.unwrap()["total"].as_u64().unwrap() };

    // The seller takes payment identifiers: the POST is sent again, answered as it was.
    let request = Request::new(reqwest::Method::POST, format!("{front}/order")).body("two apples");
    let paid = buyer.send(&request).await.unwrap();
    assert_eq!((paid.status, paid.body_text()), (200, "order 1: two apples".to_owned()));
    assert!(paid.headers.contains_key("payment-response"), "x402 v2, with the extension");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the order was taken once");
    assert_eq!(sent().await, 1, "paid once");

    // Without them, a POST whose answer is lost is not sent again (it could run twice).
    let request = Request::new(reqwest::Method::POST, format!("{front}/plain-order")).body("three pears");
    let lost = buyer.send(&request).await.unwrap_err();
    assert!(matches!(lost, PayError::Http(_)), "{lost}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(sent().await, 2, "the payment that left settled; nothing more");
}
