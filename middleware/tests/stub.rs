//! The layer against a scripted facilitator in memory (a [`Facilitator`] whose answers the test
//! chooses — no HTTP stand-in): the pending path, dynamic pricing, and a plain `tower::Service`
//! that is not axum.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tollgate::protocol::x402::Supported;
use tollgate::{Claim, Facilitator, FacilitatorClient, Payment, PaymentLayer, Price, Verdict};
use tower::{Layer as _, ServiceExt as _};

const NETWORK: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const BUYER: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";

/// A facilitator whose settlement of any claim is pending at first (payment `pay_1`, transaction
/// `5sig`), then, followed, `later`: confirmed (paying the claim's requirement, by [`BUYER`]) or
/// failed.
#[derive(Debug)]
struct Scripted {
    later: &'static str,
    settles: AtomicUsize,
    follows: AtomicUsize,
}

fn scripted(later: &'static str) -> Arc<Scripted> {
    Arc::new(Scripted { later, settles: AtomicUsize::new(0), follows: AtomicUsize::new(0) })
}

#[async_trait]
impl Facilitator for Scripted {
    async fn supported(&self) -> Result<Supported, Verdict> {
        Err(Verdict::Unavailable { timed_out: false, reason: "not asked: the networks are named".into() })
    }

    async fn settle_before(&self, _claim: Claim<'_>) -> Verdict {
        self.settles.fetch_add(1, Ordering::SeqCst);
        Verdict::Pending { payment_id: Some("pay_1".into()), transaction: Some("5sig".into()) }
    }

    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        self.settle_before(claim).await
    }

    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        self.settle_before(claim).await
    }

    async fn follow(&self, payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        self.follows.fetch_add(1, Ordering::SeqCst);
        assert_eq!(payment_id, Some("pay_1"), "the payment seen pending is followed");
        let r = claim.requirement;
        match self.later {
            "confirmed" => Verdict::Paid(
                Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to)
                    .with_payer(BUYER)
                    .with_transaction("5sig")
                    .with_payment_id("pay_1"),
            ),
            _ => Verdict::Refused { reason: "the payment failed".into() },
        }
    }

    async fn release(&self, _payment: &Payment) {}
}

fn layer(facilitator: impl Facilitator + 'static) -> PaymentLayer {
    PaymentLayer::builder()
        .facilitator(facilitator)
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
) -> impl tower::Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible, Future = impl Send>
+ Clone
+ Send {
    tower::service_fn(move |request: Request<Full<Bytes>>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let payer = request.extensions().get::<Payment>().and_then(|p| p.payer.clone()).unwrap_or_default();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!("paid by {payer}")))))
        }
    })
}

fn paid_request() -> Request<Full<Bytes>> {
    Request::get("http://shop.example/report").header("X-PAYMENT", proof()).body(Full::default()).unwrap()
}

#[tokio::test]
async fn pending_answers_503_with_retry_after_and_a_retry_is_served_once_confirmed() {
    let facilitator = scripted("confirmed");
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer(facilitator.clone()).layer(plain(runs.clone()));

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
    let settles = facilitator.settles.load(Ordering::SeqCst);
    assert_eq!((settles, facilitator.follows.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (1, 1, 1));
}

#[tokio::test]
async fn a_payment_that_failed_while_pending_is_refused_on_retry() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer(scripted("failed")).layer(plain(runs.clone()));
    assert_eq!(service.clone().oneshot(paid_request()).await.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(service.clone().oneshot(paid_request()).await.unwrap().status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_plain_service_answers_402_without_payment() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = layer(scripted("confirmed")).layer(plain(runs.clone()));
    let response =
        service.oneshot(Request::get("http://shop.example/report").body(Full::default()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(response.headers().contains_key("payment-required"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_declared_route_says_in_its_402_how_to_call_it_and_who_sells_it() {
    use tollgate::discovery::{Discovery, ServiceMetadata};
    let service = ServiceMetadata {
        service_name: Some("Weather Co".into()),
        tags: vec!["weather".into(), "forecast".into()],
        icon_url: Some("https://cdn.weather.example/icon.png".into()),
    };
    let paywall = PaymentLayer::builder()
        .facilitator(scripted("confirmed"))
        .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .description("Today's weather")
        .discovery(Discovery::http().query_example(json!({"city": "Lisbon"})).output_example(json!({"celsius": 18})))
        .service(service)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        // The second 402 comes from the layer's cache of challenges: the same declaration.
        let request = Request::get("http://shop.example/weather?city=Porto").body(Full::default()).unwrap();
        let response = paywall.clone().layer(plain(runs.clone())).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
        let header = response.headers()["payment-required"].to_str().unwrap().to_owned();
        let required: Value = tollgate::protocol::x402::header::decode(&header).unwrap();
        let bazaar = &required["extensions"]["bazaar"];
        assert_eq!(
            bazaar["info"]["input"],
            json!({"type": "http", "method": "GET", "queryParams": {"city": "Lisbon"}})
        );
        assert_eq!(bazaar["info"]["output"], json!({"type": "json", "example": {"celsius": 18}}));
        assert_eq!(
            bazaar["schema"]["properties"]["input"]["properties"]["method"]["enum"],
            json!(["GET", "HEAD", "DELETE"])
        );
        assert_eq!(required["resource"]["serviceName"], "Weather Co");
        assert_eq!(required["resource"]["tags"], json!(["weather", "forecast"]));
        assert_eq!(required["resource"]["iconUrl"], "https://cdn.weather.example/icon.png");
        assert_eq!(required["resource"]["description"], "Today's weather");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_declaration_or_service_metadata_the_bazaar_rules_refuse_fails_at_build() {
    use tollgate::BuildError;
    use tollgate::discovery::{BodyType, DeclarationError, Discovery, ServiceMetadata};
    let builder = || {
        PaymentLayer::builder()
            .facilitator(FacilitatorClient::new("http://127.0.0.1:9", "k"))
            .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()))
    };
    let get_with_body = Discovery::http().method("GET").body_example(BodyType::Json, json!({"q": 1}));
    assert!(matches!(
        builder().discovery(get_with_body).build(),
        Err(BuildError::Discovery(DeclarationError::Body(_)))
    ));
    let outside = Discovery::http().input_schema(json!({"properties": {"q": {"$ref": "https://schemas.example/q"}}}));
    assert!(matches!(
        builder().discovery(outside).build(),
        Err(BuildError::Discovery(DeclarationError::ExternalReference(_)))
    ));
    let megabyte = Discovery::http().output_example(json!({"blob": "x".repeat(1 << 20)}));
    assert!(matches!(builder().discovery(megabyte).build(), Err(BuildError::Discovery(DeclarationError::TooLarge(_)))));
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!([deep]);
    }
    let deep = Discovery::http().output_example(json!({"deep": deep}));
    assert!(matches!(builder().discovery(deep).build(), Err(BuildError::Discovery(DeclarationError::TooDeep(_)))));
    let text_object = Discovery::http().body_example(BodyType::Text, json!({"q": 1}));
    assert!(matches!(builder().discovery(text_object).build(), Err(BuildError::Discovery(DeclarationError::Body(_)))));
    let string_schema = Discovery::http().input_schema(json!("x"));
    assert!(matches!(
        builder().discovery(string_schema).build(),
        Err(BuildError::Discovery(DeclarationError::Body(_)))
    ));
    let bad = [
        ServiceMetadata { service_name: Some("Weather\u{1b}[31m".into()), ..ServiceMetadata::default() },
        ServiceMetadata { tags: (0..100).map(|i| format!("t{i}")).collect(), ..ServiceMetadata::default() },
        ServiceMetadata { tags: vec!["a".into(), "A".into()], ..ServiceMetadata::default() },
        ServiceMetadata { icon_url: Some("http://127.0.0.1/i.png".into()), ..ServiceMetadata::default() },
        ServiceMetadata { icon_url: Some("http://0x7f000001/i.png".into()), ..ServiceMetadata::default() },
    ];
    for service in bad {
        assert!(matches!(builder().service(service.clone()).build(), Err(BuildError::Service(_))), "{service:?}");
    }
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
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    // A hyper service; no axum anywhere. hyper's own request body is wrapped in the layer's
    // `RequestBody`, which it can read and hand on.
    let handler = tower::service_fn(move |_request: Request<tollgate::body::RequestBody>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"paid content")))) }
    });
    let service = tower::ServiceBuilder::new()
        .map_request(|request: Request<hyper::body::Incoming>| request.map(tollgate::body::RequestBody::new))
        .layer(layer(scripted("confirmed")))
        .service(handler);
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
    // Pending first (the script says so), then served on the retry.
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
    let get = |uri: &str| Request::get(uri).body(Full::default()).unwrap();
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
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = PaymentLayer::builder()
        .facilitator(scripted("confirmed"))
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
    let paid = |uri: &str| Request::get(uri).header("X-PAYMENT", proof()).body(Full::default()).unwrap();
    let pending = service.clone().oneshot(paid("http://shop.example/report")).await.unwrap();
    assert_eq!(pending.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Confirmed and remembered for the cheap request: served there, refused for the dear one.
    let cheap = service.clone().oneshot(paid("http://shop.example/report")).await.unwrap();
    assert_eq!(cheap.status(), StatusCode::OK);
    let dear = service.clone().oneshot(paid("http://shop.example/report?size=large")).await.unwrap();
    assert_eq!(dear.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "served once, for what was paid");
}

/// A facilitator that remembers the declaration each claim carried to it, and refuses.
#[derive(Debug, Default)]
struct Recording {
    declared: std::sync::Mutex<Vec<Option<serde_json::Value>>>,
}

#[async_trait]
impl Facilitator for Recording {
    async fn supported(&self) -> Result<Supported, Verdict> {
        Err(Verdict::Unavailable { timed_out: false, reason: "not asked: the networks are named".into() })
    }

    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        self.declared.lock().unwrap().push(claim.discovery.cloned());
        Verdict::Refused { reason: "recorded".into() }
    }

    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        self.settle_before(claim).await
    }

    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        self.settle_before(claim).await
    }

    async fn follow(&self, _payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        self.settle_before(claim).await
    }

    async fn release(&self, _payment: &Payment) {}
}

/// A route's declaration goes to the facilitator's catalog only where the seller names the
/// resource's origin: a URL made from the request's `Host` is the buyer's to choose.
#[tokio::test]
async fn a_declaration_reaches_catalogs_only_for_an_origin_the_seller_names() {
    use tollgate::discovery::Discovery;
    let recording = Arc::new(Recording::default());
    let route = |base: Option<&str>| {
        let mut builder = PaymentLayer::builder()
            .facilitator(recording.clone())
            .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
            .discovery(Discovery::http());
        if let Some(base) = base {
            builder = builder.resource_base(base);
        }
        builder.build().unwrap().layer(plain(Arc::new(AtomicUsize::new(0))))
    };
    let request = || {
        Request::get("http://evil.example/report")
            .header("host", "evil.example")
            .header("X-PAYMENT", proof())
            .body(Full::default())
            .unwrap()
    };
    route(None).oneshot(request()).await.unwrap();
    route(Some("https://shop.example")).oneshot(request()).await.unwrap();
    let declared = recording.declared.lock().unwrap().clone();
    assert_eq!(declared.len(), 2, "{declared:?}");
    assert_eq!(declared[0], None, "the buyer's Host named the resource: nothing to catalog");
    assert!(declared[1].as_ref().is_some_and(|d| d["info"]["input"]["method"] == "GET"), "{declared:?}");
}

/// A facilitator whose `/supported` never answers, counting the times it is asked.
#[derive(Debug, Default)]
struct Silent {
    asked: AtomicUsize,
}

#[async_trait]
impl Facilitator for Silent {
    async fn supported(&self) -> Result<Supported, Verdict> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }

    async fn settle_before(&self, _claim: Claim<'_>) -> Verdict {
        Verdict::Refused { reason: "not asked".into() }
    }

    async fn verify(&self, _claim: Claim<'_>) -> Verdict {
        Verdict::Refused { reason: "not asked".into() }
    }

    async fn settle(&self, _claim: Claim<'_>) -> Verdict {
        Verdict::Refused { reason: "not asked".into() }
    }

    async fn follow(&self, _payment_id: Option<&str>, _claim: Claim<'_>) -> Verdict {
        Verdict::Refused { reason: "not asked".into() }
    }

    async fn release(&self, _payment: &Payment) {}
}

/// A route whose offers need a facilitator that never answers leaves the manifest within 5 s,
/// and is not asked for again before 10 s: requests for the manifest meanwhile are answered
/// without it, at once, and never queue behind one another.
#[tokio::test(start_paused = true)]
async fn a_silent_facilitator_delays_the_manifest_5_s_once_in_10() {
    use tollgate::discovery::Storefront;
    let silent = Arc::new(Silent::default());
    let storefront = Storefront::new();
    // No network named: the offer needs the facilitator's /supported.
    PaymentLayer::builder()
        .facilitator(silent.clone())
        .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()))
        .listed(&storefront, "/report")
        .build()
        .unwrap();
    PaymentLayer::builder()
        .facilitator(silent.clone())
        .accept(Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .listed(&storefront, "/named")
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let (first, second) = tokio::join!(storefront.manifest("http://h"), storefront.manifest("http://h"));
    assert_eq!(started.elapsed(), std::time::Duration::from_secs(5), "one wait of 5 s for both");
    for manifest in [&first, &second] {
        let urls: Vec<&str> = manifest.items.iter().map(|i| i.resource.url.as_str()).collect();
        assert_eq!(urls, ["http://h/named"], "the route whose offers could be made");
    }
    assert_eq!(silent.asked.load(Ordering::SeqCst), 1);
    tokio::time::advance(std::time::Duration::from_secs(9)).await;
    let again = tokio::time::Instant::now();
    assert_eq!(storefront.manifest("http://h").await.items.len(), 1);
    assert_eq!((again.elapsed(), silent.asked.load(Ordering::SeqCst)), (std::time::Duration::ZERO, 1));
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    storefront.manifest("http://h").await;
    assert_eq!(silent.asked.load(Ordering::SeqCst), 2, "tried again after 10 s");
}
