//! The seller layer against the buyers who try to cheat it, with stand-in facilitators on
//! 127.0.0.1 (Tollgate's gateway and a plain x402 facilitator) whose every answer the test
//! chooses: a paid header replayed on a dearer request, a facilitator answering for another asset
//! or network, a settlement left pending, a facilitator slower than the layer, a refusal, and a
//! stranger's junk that must never cost the seller a facilitator call.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price, Quote};
use tower::{Layer as _, ServiceExt as _};

const NETWORK: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const BUYER: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
const JUNK_MINT: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
/// One word of `/words?...` costs 0.001 SOL.
const PER_WORD: u64 = 1_000_000;

/// What a stand-in facilitator says, and how often it was asked.
#[derive(Default)]
struct Stand {
    calls: AtomicUsize,
    settles: AtomicUsize,
    verifies: AtomicUsize,
    /// Answers by call number (the last one repeats).
    script: std::sync::Mutex<Vec<(StatusCode, Value)>>,
    /// Delay of the first call.
    first_delay: Option<Duration>,
    /// x402 `/verify` answers that the proof was settled already.
    verify_says_used: bool,
    /// The resource the last `/payment/receive` named: a gateway record answered without one is
    /// for it.
    resource: std::sync::Mutex<String>,
}

impl Stand {
    fn scripted(answers: Vec<(StatusCode, Value)>) -> Arc<Self> {
        Arc::new(Self { script: std::sync::Mutex::new(answers), ..Self::default() })
    }

    async fn next(&self, resource: &str) -> (StatusCode, axum::Json<Value>) {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n == 0
            && let Some(delay) = self.first_delay
        {
            tokio::time::sleep(delay).await;
        }
        let script = self.script.lock().unwrap();
        let (status, mut body) = script.get(n).or(script.last()).cloned().unwrap();
        if body.get("paymentId").is_some() && body.get("resource").is_none() {
            body["resource"] = json!(resource);
        }
        (status, axum::Json(body))
    }
}

/// A gateway record of a payment of `amount` lamports (or of `asset`) to `to`.
/// A gateway payment record of a GET; a confirmed one was confirmed just now.
fn record(status: &str, amount: u64, asset: &str, to: &str) -> Value {
    let now = chrono::Utc::now().to_rfc3339();
    let confirmed_at = (status == "confirmed").then(|| now.clone());
    json!({
        "paymentId": "pay_1", "status": status, "mode": "hosted", "network": NETWORK,
        "from": BUYER, "to": to, "amount": 0.001, "amountAtomic": amount.to_string(), "asset": asset,
        "transaction": "5sig", "createdAt": now, "updatedAt": now, "confirmedAt": confirmed_at, "metadata": {"method": "GET"},
        "payer": BUYER
    })
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A gateway: `/payment/receive` answers from `receive`'s script, `/payment/status/{id}` from
/// `status`'s.
async fn gateway(receive: Arc<Stand>, status: Arc<Stand>) -> String {
    type Stands = State<(Arc<Stand>, Arc<Stand>)>;
    let app = Router::new()
        .route(
            "/payment/receive",
            post(|State((r, _)): Stands, axum::Json(body): axum::Json<Value>| async move {
                r.settles.fetch_add(1, Ordering::SeqCst);
                let named = body["resource"].as_str().unwrap_or_default().to_owned();
                r.resource.lock().unwrap().clone_from(&named);
                r.next(&named).await
            }),
        )
        .route(
            "/payment/status/{id}",
            get(|State((r, s)): Stands| async move {
                let named = r.resource.lock().unwrap().clone();
                s.next(&named).await
            }),
        )
        .with_state((receive, status));
    serve(app).await
}

/// An x402 facilitator: `/verify` always valid, `/settle` from the script.
async fn x402(settle: Arc<Stand>) -> String {
    let app = Router::new()
        .route(
            "/verify",
            post(|State(s): State<Arc<Stand>>| async move {
                s.verifies.fetch_add(1, Ordering::SeqCst);
                axum::Json(if s.verify_says_used {
                    json!({"isValid": false, "invalidReason": "duplicate_settlement", "invalidMessage": "proof already used"})
                } else {
                    json!({"isValid": true, "payer": BUYER})
                })
            }),
        )
        .route(
            "/settle",
            post(|State(s): State<Arc<Stand>>| async move {
                s.settles.fetch_add(1, Ordering::SeqCst);
                s.next("").await
            }),
        )
        .with_state(settle);
    serve(app).await
}

fn settled(network: &str) -> (StatusCode, Value) {
    (StatusCode::OK, json!({"success": true, "transaction": "5sig", "network": network, "payer": BUYER}))
}

/// `/words?a+b+c` costs one `PER_WORD` per word.
fn words_layer(facilitator: FacilitatorClient) -> PaymentLayer {
    PaymentLayer::builder()
        .facilitator(facilitator)
        .pricing(|parts: &http::request::Parts| {
            let words = parts.uri.query().map_or(1, |q| q.split('+').count() as u64);
            async move {
                let price = Price::native_sol(&format!("0.00{words}")).unwrap();
                Some(vec![price.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap())])
            }
        })
        .retry_after_secs(1)
        .build()
        .unwrap()
}

/// The gateway's 402 for a proof the caller's own payment `pay_1` holds.
fn used_by_pay_1() -> Value {
    json!({"error": {"code": "INVALID_PAYMENT_PROOF", "message": "proof already used (payment pay_1)",
                     "remedy": "Retry with a fresh proof", "paymentId": "pay_1"}})
}

/// A layer selling `/report` for 0.001 SOL that asks the gateway to wait 1 s
/// (`maxTimeoutSeconds`) and gives up `margin` later.
fn impatient_layer(url: String, margin: Duration) -> PaymentLayer {
    let facilitator =
        FacilitatorClient::new(url, "tg_test_key").with_timeout(Duration::from_millis(100)).with_settle_margin(margin);
    PaymentLayer::builder()
        .facilitator(facilitator)
        .accept(Price::native_sol("0.001").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .max_timeout_seconds(1)
        .build()
        .unwrap()
}

/// Counts handler runs; answers with the payer and amount it was told were paid.
fn handler(
    runs: Arc<AtomicUsize>,
) -> impl tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible, Future = impl Send>
+ Clone
+ Send {
    tower::service_fn(move |request: Request<Full<Bytes>>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let p = request.extensions().get::<Payment>().unwrap();
            let text = format!("{} paid {} of {}", p.payer.clone().unwrap_or_default(), p.amount, p.asset);
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
        }
    })
}

fn v1_proof() -> String {
    tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": NETWORK, "payload": {"transaction": "AQID"}
    }))
    .unwrap()
}

/// A v2 proof accepting what the 402 answer to `uri` offered.
async fn v2_proof(service: &impl Shop, uri: &str) -> String {
    let challenge = service.get(uri, None).await;
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required: Value = decode(challenge.headers()["payment-required"].to_str().unwrap());
    tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 2, "resource": required["resource"], "accepted": required["accepts"][0],
        "payload": {"transaction": "AQID"}
    }))
    .unwrap()
}

fn decode(header: &str) -> Value {
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap()
}

async fn text(response: Response<tollgate::body::PaymentBody>) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// A layered service that GETs with an optional payment header.
trait Shop {
    async fn get(&self, uri: &str, proof: Option<(&str, &str)>) -> Response<tollgate::body::PaymentBody>;
}

impl<S> Shop for S
where
    S: tower::Service<Request<Full<Bytes>>, Response = Response<tollgate::body::PaymentBody>, Error = Infallible>
        + Clone
        + Send,
    S::Future: Send,
{
    async fn get(&self, uri: &str, proof: Option<(&str, &str)>) -> Response<tollgate::body::PaymentBody> {
        let mut request = Request::get(uri);
        if let Some((name, value)) = proof {
            request = request.header(name, value);
        }
        self.clone().oneshot(request.body(Full::default()).unwrap()).await.unwrap()
    }
}

/// The issue's replay: `/words?a` paid with one header, the same header sent to the nine-word
/// request. Both protocol versions, both facilitator kinds: 402, and the dear handler never runs.
#[tokio::test]
async fn a_paid_header_replayed_on_a_dearer_request_is_refused() {
    let dear = "http://shop.example/words?a+b+c+d+e+f+g+h+i";
    for gateway_mode in [true, false] {
        for v1 in [true, false] {
            let (facilitator, stand) = if gateway_mode {
                let stand = Stand::scripted(vec![(StatusCode::OK, record("confirmed", PER_WORD, "native", PAY_TO))]);
                let url = gateway(stand.clone(), Stand::scripted(vec![])).await;
                (FacilitatorClient::new(url, "tg_test_key"), stand)
            } else {
                let stand = Stand::scripted(vec![settled(NETWORK)]);
                (FacilitatorClient::x402(x402(stand.clone()).await), stand)
            };
            let runs = Arc::new(AtomicUsize::new(0));
            let shop = words_layer(facilitator).layer(handler(runs.clone()));
            let case = format!("gateway {gateway_mode}, v1 {v1}");
            let (name, proof) = if v1 {
                ("X-PAYMENT", v1_proof())
            } else {
                ("PAYMENT-SIGNATURE", v2_proof(&shop, "http://shop.example/words?a").await)
            };
            let cheap = shop.get("http://shop.example/words?a", Some((name, &proof))).await;
            assert_eq!(cheap.status(), StatusCode::OK, "{case}");
            assert_eq!(text(cheap).await, format!("{BUYER} paid {PER_WORD} of native"), "{case}");
            let replayed = shop.get(dear, Some((name, &proof))).await;
            assert_eq!(replayed.status(), StatusCode::PAYMENT_REQUIRED, "{case}");
            // A retry of the cheap request is still served, from memory.
            let again = shop.get("http://shop.example/words?a", Some((name, &proof))).await;
            assert_eq!(again.status(), StatusCode::OK, "{case}");
            assert_eq!(runs.load(Ordering::SeqCst), 2, "{case}: the dear request never ran");
            assert_eq!(stand.settles.load(Ordering::SeqCst), 1, "{case}: settled once");
        }
    }
}

/// A pricing function that names one resource for several prices: the proof is bound to what
/// it settled, so a dearer price of the same resource is refused.
#[tokio::test]
async fn a_named_resource_binds_the_price_it_was_paid_at() {
    let stand = Stand::scripted(vec![(StatusCode::OK, record("confirmed", PER_WORD, "native", PAY_TO))]);
    let url = gateway(stand.clone(), Stand::scripted(vec![])).await;
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(url, "tg_test_key"))
        .pricing(|parts: &http::request::Parts| {
            let dear = parts.headers.contains_key("x-dear");
            async move {
                let price = Price::native_sol(if dear { "0.005" } else { "0.001" }).unwrap();
                let prices = vec![price.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap())];
                Some(Quote::new(prices).for_resource("https://shop.example/report"))
            }
        })
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let paid = shop.get("http://anything.example/x", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(paid.status(), StatusCode::OK);
    let request = Request::get("http://anything.example/x")
        .header("X-PAYMENT", v1_proof())
        .header("x-dear", "1")
        .body(Full::default())
        .unwrap();
    let dear = shop.clone().oneshot(request).await.unwrap();
    assert_eq!(dear.status(), StatusCode::PAYMENT_REQUIRED);
    let body: Value = serde_json::from_str(&text(dear).await).unwrap();
    assert_eq!(body["accepts"][0]["resource"], "https://shop.example/report");
    assert!(body["error"].as_str().unwrap().contains("cheaper request"), "{body}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The facilitator says the proof paid a worthless token, someone else, or too little: the
/// layer does not serve, whatever "confirmed" says.
#[tokio::test]
async fn a_gateway_answer_for_another_asset_recipient_or_amount_is_not_served() {
    for (answer, what) in [
        (record("confirmed", PER_WORD, JUNK_MINT, PAY_TO), "another asset"),
        (record("confirmed", PER_WORD, "native", BUYER), "another recipient"),
        (record("confirmed", PER_WORD - 1, "native", PAY_TO), "less"),
    ] {
        let stand = Stand::scripted(vec![(StatusCode::OK, answer)]);
        let url = gateway(stand, Stand::scripted(vec![])).await;
        let runs = Arc::new(AtomicUsize::new(0));
        let shop = words_layer(FacilitatorClient::new(url, "tg_test_key")).layer(handler(runs.clone()));
        let response = shop.get("http://shop.example/words?a", Some(("X-PAYMENT", &v1_proof()))).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{what}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{what}");
    }
}

/// An x402 facilitator claiming success on another network: not a payment of this offer.
#[tokio::test]
async fn an_x402_success_on_another_network_is_not_served() {
    let stand = Stand::scripted(vec![settled("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp")]);
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = words_layer(FacilitatorClient::x402(x402(stand).await)).layer(handler(runs.clone()));
    let response = shop.get("http://shop.example/words?a", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// x402 v2 `settlement_pending`: 503 with `Retry-After`, then the retry settles the same payload
/// again (the facilitator answers with that settlement) and is served; verified once, served once.
#[tokio::test]
async fn an_x402_settlement_pending_is_followed_by_settling_again() {
    let stand = Stand::scripted(vec![
        (
            StatusCode::OK,
            json!({"success": false, "errorReason": "settlement_pending", "transaction": "5sig", "network": NETWORK}),
        ),
        settled(NETWORK),
    ]);
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = words_layer(FacilitatorClient::x402(x402(stand.clone()).await)).layer(handler(runs.clone()));
    let proof = v2_proof(&shop, "http://shop.example/words?a").await;
    let pending = shop.get("http://shop.example/words?a", Some(("PAYMENT-SIGNATURE", &proof))).await;
    assert_eq!(pending.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(pending.headers()["retry-after"], "1");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "not served while pending");
    let served = shop.get("http://shop.example/words?a", Some(("PAYMENT-SIGNATURE", &proof))).await;
    assert_eq!(served.status(), StatusCode::OK);
    let receipt = decode(served.headers()["payment-response"].to_str().unwrap());
    assert_eq!((receipt["success"].as_bool(), receipt["transaction"].as_str()), (Some(true), Some("5sig")));
    assert_eq!(
        (stand.verifies.load(Ordering::SeqCst), stand.settles.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)),
        (1, 2, 1),
        "verified once, settled (and followed) once more, served once"
    );
}

/// A confirmed record whose answer counted one answer of two (Tollgate's gateway with a ticket).
fn counted(served: u32) -> Value {
    let mut record = record("confirmed", PER_WORD, "native", PAY_TO);
    record["answers"] = json!({"served": served, "uses": 2});
    record
}

/// The gateway takes longer than the layer waits: the layer answers 503 and remembers the proof;
/// the retry sends it again, and the gateway answers with the caller's payment that holds it, one
/// answer counted. One settlement, one handler run, no status poll.
#[tokio::test]
async fn a_gateway_slower_than_the_layer_is_followed_on_retry() {
    let receive = Arc::new(Stand {
        script: std::sync::Mutex::new(vec![(StatusCode::OK, counted(1)), (StatusCode::OK, counted(1))]),
        first_delay: Some(Duration::from_millis(2_500)),
        ..Stand::default()
    });
    let status = Stand::scripted(vec![(StatusCode::OK, record("confirmed", PER_WORD, "native", PAY_TO))]);
    let url = gateway(receive.clone(), status.clone()).await;
    // The settlement wait asked is 1 s (maxTimeoutSeconds); the layer waits 0.5 s beyond it.
    let layer = impatient_layer(url, Duration::from_millis(500));
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let slow = shop.get("http://shop.example/report", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(slow.status(), StatusCode::SERVICE_UNAVAILABLE, "{}", text(slow).await);
    // The first call is still being answered (the payment settles meanwhile).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let retry = shop.get("http://shop.example/report", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(text(retry).await, format!("{BUYER} paid {PER_WORD} of native"));
    assert_eq!(
        (receive.calls.load(Ordering::SeqCst), status.calls.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)),
        (2, 0, 1)
    );
}

/// The buyer hung up after paying (attacker finding): the layer never saw the answer and
/// remembers nothing. The retry sends the proof again, and the gateway answers with the seller's
/// own payment holding it, one more answer counted: the buyer is not refused after paying, and
/// nothing is settled again. The same proof on a dearer request is the gateway's to refuse.
#[tokio::test]
async fn a_retry_after_the_buyer_hung_up_is_served_by_the_sellers_own_payment() {
    let receive = Stand::scripted(vec![(StatusCode::OK, counted(2)), (StatusCode::PAYMENT_REQUIRED, used_by_pay_1())]);
    let status = Stand::scripted(vec![]);
    let url = gateway(receive.clone(), status.clone()).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = words_layer(FacilitatorClient::new(url, "tg_test_key")).layer(handler(runs.clone()));
    let retry = shop.get("http://shop.example/words?a", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(retry.status(), StatusCode::OK);
    let dear = shop.get("http://shop.example/words?a+b", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(dear.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!((runs.load(Ordering::SeqCst), status.calls.load(Ordering::SeqCst)), (1, 0));
}

/// The same with an x402 facilitator, in verify-then-settle order: `/verify` says the proof was
/// settled, `/settle` answers the seller's own settlement (Tollgate's is idempotent for it), and
/// the retry is served with it, settled once more only in the facilitator's books, never on chain.
#[tokio::test]
async fn an_x402_retry_after_the_buyer_hung_up_is_served_by_the_settlement_made() {
    let stand = Arc::new(Stand {
        script: std::sync::Mutex::new(vec![settled(NETWORK)]),
        verify_says_used: true,
        ..Stand::default()
    });
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::x402(x402(stand.clone()).await))
        .accept(Price::native_sol("0.001").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .settlement_order(tollgate::SettlementOrder::VerifyThenSettle)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let retry = shop.get("http://shop.example/report", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert!(retry.headers().contains_key("x-payment-response"));
    assert_eq!(
        (stand.verifies.load(Ordering::SeqCst), stand.settles.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)),
        (1, 1, 1),
        "asked to settle once, served once"
    );
}

/// The same, but the payment the gateway answers with was made for another resource (a gateway
/// that binds badly, or a proof used elsewhere on this shop): it does not pay this one.
#[tokio::test]
async fn a_followed_payment_made_for_another_resource_is_refused() {
    let mut elsewhere = record("confirmed", PER_WORD, "native", PAY_TO);
    elsewhere["resource"] = json!("http://shop.example/cheap");
    let receive = Arc::new(Stand {
        script: std::sync::Mutex::new(vec![
            (StatusCode::PAYMENT_REQUIRED, used_by_pay_1()),
            (StatusCode::OK, elsewhere),
        ]),
        first_delay: Some(Duration::from_millis(3_000)),
        ..Stand::default()
    });
    let url = gateway(receive, Stand::scripted(vec![])).await;
    let layer = impatient_layer(url, Duration::from_millis(100));
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let slow = shop.get("http://shop.example/report", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(slow.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry = shop.get("http://shop.example/report", Some(("X-PAYMENT", &v1_proof()))).await;
    assert_eq!(retry.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(text(retry).await.contains("another resource"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refused_settlement_carries_the_failure_header() {
    let stand = Stand::scripted(vec![(
        StatusCode::OK,
        json!({"success": false, "errorReason": "insufficient_funds", "errorMessage": "the payer holds 0 SOL",
               "transaction": "", "network": NETWORK}),
    )]);
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = words_layer(FacilitatorClient::x402(x402(stand).await)).layer(handler(runs.clone()));
    let proof = v2_proof(&shop, "http://shop.example/words?a").await;
    for _ in 0..2 {
        // The second answer comes from the layer's memory of the refusal, with the same header.
        let refused = shop.get("http://shop.example/words?a", Some(("PAYMENT-SIGNATURE", &proof))).await;
        assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(refused.headers().contains_key("payment-required"));
        let failure = decode(refused.headers()["payment-response"].to_str().unwrap());
        assert_eq!(
            failure,
            json!({"success": false, "errorReason": "insufficient_funds", "transaction": "", "network": NETWORK,
                   "errorMessage": "insufficient_funds: the payer holds 0 SOL"})
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// v2: `accepted` must be the whole offered requirement, timeout and `extra` included.
#[tokio::test]
async fn a_v2_payment_accepting_a_changed_offer_is_refused_without_the_facilitator() {
    let stand = Stand::scripted(vec![settled(NETWORK)]);
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = words_layer(FacilitatorClient::x402(x402(stand.clone()).await)).layer(handler(runs.clone()));
    let challenge = shop.get("http://shop.example/words?a", None).await;
    let required = decode(challenge.headers()["payment-required"].to_str().unwrap());
    for change in [json!({"maxTimeoutSeconds": 3600}), json!({"extra": {"feePayer": BUYER}})] {
        let mut accepted = required["accepts"][0].clone();
        for (k, v) in change.as_object().unwrap() {
            accepted[k] = v.clone();
        }
        let proof = tollgate_protocol::x402::header::encode(&json!({
            "x402Version": 2, "accepted": accepted, "payload": {"transaction": "AQID"}
        }))
        .unwrap();
        let refused = shop.get("http://shop.example/words?a", Some(("PAYMENT-SIGNATURE", &proof))).await;
        assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED, "{change}");
    }
    assert_eq!((stand.verifies.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (0, 0));
}

/// A stranger's junk never reaches the facilitator: undecodable, for another offer, to another
/// recipient, for another amount, expired. 1,000 of them cost the seller no call; then a real
/// buyer is served with one.
#[tokio::test]
async fn a_strangers_junk_costs_the_seller_no_facilitator_call() {
    let token = "0x2222222222222222222222222222222222222222";
    let seller = "0x1111111111111111111111111111111111111111";
    let network = "eip155:31337";
    let stand = Stand::scripted(vec![settled(network)]);
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::x402(x402(stand.clone()).await))
        .accept(
            Price::token(token.parse().unwrap(), "1", 6)
                .unwrap()
                .pay_to(seller.parse().unwrap())
                .on(network.parse().unwrap())
                .extra(json!({"name": "Test Token", "version": "2"})),
        )
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let authorization = |i: u64, to: &str, value: &str, before: u64| {
        tollgate_protocol::x402::header::encode(&json!({
            "x402Version": 1, "scheme": "exact", "network": network,
            "payload": {"signature": format!("0x{}", "11".repeat(65)), "authorization": {
                "from": "0x3333333333333333333333333333333333333333", "to": to, "value": value,
                "validAfter": "0", "validBefore": before.to_string(), "nonce": format!("0x{i:064x}")}}
        }))
        .unwrap()
    };
    let stranger = "0x4444444444444444444444444444444444444444";
    for i in 0..1_000u64 {
        let junk = match i % 5 {
            0 => authorization(i, stranger, "1000000", now + 600),
            1 => authorization(i, seller, "1", now + 600),
            2 => authorization(i, seller, "1000000", now.saturating_sub(1)),
            3 => tollgate_protocol::x402::header::encode(
                &json!({"x402Version": 1, "scheme": "exact", "network": network, "payload": {"nonsense": i}}),
            )
            .unwrap(),
            _ => tollgate_protocol::x402::header::encode(&json!({
                "x402Version": 1, "scheme": "exact", "network": "eip155:1", "payload": {"nonsense": i}
            }))
            .unwrap(),
        };
        let refused = shop.get("http://shop.example/report", Some(("X-PAYMENT", &junk))).await;
        assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED, "junk {i}");
    }
    assert_eq!(stand.verifies.load(Ordering::SeqCst) + stand.settles.load(Ordering::SeqCst), 0);
    let good = authorization(7_777, seller, "1000000", now + 600);
    let served = shop.get("http://shop.example/report", Some(("X-PAYMENT", &good))).await;
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!((stand.verifies.load(Ordering::SeqCst), stand.settles.load(Ordering::SeqCst)), (1, 1));
}

/// A `SIGN-IN-WITH-X` header on a route that sells no pass means nothing: the request is one
/// without payment (402), and costs the seller no facilitator call (attacker finding: it was
/// answered 502, "facilitator unavailable").
#[tokio::test]
async fn a_sign_in_where_no_pass_is_sold_is_a_request_without_payment() {
    let (receive, status) = (Stand::scripted(vec![]), Stand::scripted(vec![]));
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&gateway(receive.clone(), status.clone()).await, "k"))
        .accept(Price::native_sol("0.001").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .sign_in_origin("https://shop.example")
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = layer.layer(handler(runs.clone()));
    let signed = base64::engine::general_purpose::STANDARD.encode(br#"{"domain":"shop.example"}"#);
    for header in ["!!!", signed.as_str()] {
        let answer = shop.get("http://shop.example/report", Some(("SIGN-IN-WITH-X", header))).await;
        assert_eq!(answer.status(), StatusCode::PAYMENT_REQUIRED, "{header}");
        let body = text(answer).await;
        assert!(!body.contains("sign-in"), "no sign-in is tried or declared where no pass is sold: {body}");
    }
    assert_eq!((receive.calls.load(Ordering::SeqCst), status.calls.load(Ordering::SeqCst)), (0, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// Behind a TLS-terminating proxy, the resource URL says https (RFC 7239 `Forwarded`, or
/// `X-Forwarded-Proto` / `X-Forwarded-Host`), with the query; declared extensions are in the 402.
#[tokio::test]
async fn the_resource_url_follows_the_proxy_and_extensions_are_declared() {
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new("http://127.0.0.1:9", "k"))
        .accept(Price::native_sol("0.001").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .extension("bazaar", json!({"info": {"input": {"type": "http", "method": "GET"}}}))
        .build()
        .unwrap();
    let shop = layer.layer(handler(Arc::new(AtomicUsize::new(0))));
    let cases = [
        (vec![("host", "internal:8080")], "http://internal:8080/report?q=1"),
        (
            vec![("host", "internal:8080"), ("x-forwarded-proto", "https"), ("x-forwarded-host", "shop.example")],
            "https://shop.example/report?q=1",
        ),
        (
            vec![("host", "internal:8080"), ("forwarded", "for=1.2.3.4;proto=https;host=\"shop.example\", proto=http")],
            "https://shop.example/report?q=1",
        ),
        (vec![("host", "bad host/"), ("x-forwarded-proto", "gopher")], "http://localhost/report?q=1"),
    ];
    for (headers, url) in cases {
        let mut request = Request::get("/report?q=1");
        for (k, v) in &headers {
            request = request.header(*k, *v);
        }
        let answer = shop.clone().oneshot(request.body(Full::default()).unwrap()).await.unwrap();
        let required = decode(answer.headers()["payment-required"].to_str().unwrap());
        assert_eq!(required["resource"]["url"], url, "{headers:?}");
        assert_eq!(required["extensions"]["bazaar"]["info"]["input"]["method"], "GET");
    }
}
