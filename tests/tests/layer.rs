//! The seller layer against a real facilitator in process (embedded Solana ledger, SQLite):
//! buyer → seller app behind `PaymentLayer` → facilitator over HTTP → ledger.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::routing::get;
use axum::{Extension, Router};
use base64::Engine as _;
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::solana::build::Transfer;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::{AppState, router};

/// A facilitator served on 127.0.0.1, counting `/payment/receive` calls.
struct Facilitator {
    url: String,
    key: String,
    state: AppState,
    receives: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Facilitator {
    async fn start() -> Self {
        Self::start_on(Plan::Enterprise, Some(100_000)).await
    }

    /// A facilitator whose key is on `plan` (`rpm` requests a minute, or the plan's).
    async fn start_on(plan: Plan, rpm: Option<u32>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("f.db").to_str().unwrap()).unwrap(),
            dev: true,
            ..Config::default()
        };
        let state = AppState::from_config(config).await.unwrap();
        let created = admin::create_key(
            &*state.store,
            NewKey { plan, rpm, label: None, account: None, env: KeyEnv::Test },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
        let receives = Arc::new(AtomicUsize::new(0));
        let counter = receives.clone();
        let app = router(state.clone()).layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                if req.uri().path() == "/payment/receive" {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                next.run(req)
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, key: created.secret.expose().to_owned(), state, receives, _dir: dir }
    }

    fn network(&self) -> String {
        self.state.chains.embedded_solana().unwrap().rpc.network().to_string()
    }

    async fn airdrop(&self, to: &Pubkey, sol: u64) {
        let answer = reqwest::Client::new()
            .post(format!("{}/dev/airdrop", self.url))
            .bearer_auth(&self.key)
            .json(&json!({"address": to.to_string(), "amount": sol}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success());
    }

    /// A fresh `exact-native` proof: `buyer` pays `lamports` to `seller`.
    async fn proof(&self, buyer: &Keypair, seller: &Pubkey, lamports: u64) -> String {
        let rpc = &self.state.chains.embedded_solana().unwrap().rpc;
        let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
        let message = Transfer { from: buyer.pubkey(), to: *seller, lamports, priority_fee: None }.message(&blockhash);
        let tx = solana_sdk::transaction::Transaction::new(&[buyer], message, blockhash);
        let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
        tollgate_protocol::x402::header::encode(&json!({
            "x402Version": 1, "scheme": "exact-native", "network": self.network(),
            "payload": {"transaction": encoded}
        }))
        .unwrap()
    }
}

/// The seller: two paid routes behind one layer, counting handler runs.
async fn seller(facilitator: &Facilitator, pay_to: Pubkey, runs: Arc<AtomicUsize>) -> String {
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&facilitator.url, &facilitator.key))
        .accept(Price::native_sol("0.01").unwrap().pay_to(pay_to.to_string().parse().unwrap()))
        .description("A daily report")
        .build()
        .unwrap();
    let handler = move |Extension(payment): Extension<Payment>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            axum::Json(json!({"report": "42", "payer": payment.payer, "transaction": payment.transaction}))
        }
    };
    let app = Router::new().route("/report", get(handler.clone())).route("/other", get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn get_with(url: &str, header: Option<(&str, &str)>) -> (u16, http::HeaderMap, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let answer = request.send().await.unwrap();
    let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
    (status, headers, answer.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paid_route_answers_402_then_serves_once_paid_and_caches_the_proof() {
    let f = Facilitator::start().await;
    let pay_to = Pubkey::new_unique();
    f.airdrop(&pay_to, 1).await; // an existing account can receive any amount
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = seller(&f, pay_to, runs.clone()).await;
    let report = format!("{shop}/report");

    // 402: the v1 body and the v2 header, as the x402 spec names their fields.
    let (status, headers, body) = get_with(&report, None).await;
    assert_eq!(status, 402);
    assert_eq!(body["x402Version"], 1);
    assert!(body["error"].as_str().unwrap().contains("payment required"));
    let offer = &body["accepts"][0];
    assert_eq!(offer["scheme"], "exact-native");
    assert_eq!(offer["network"], f.network());
    assert_eq!(offer["maxAmountRequired"], "10000000");
    assert_eq!(offer["asset"], "native");
    assert_eq!(offer["payTo"], pay_to.to_string());
    assert_eq!(offer["resource"], report);
    assert_eq!(
        (offer["description"].as_str(), offer["mimeType"].as_str()),
        (Some("A daily report"), Some("application/json"))
    );
    assert_eq!(offer["maxTimeoutSeconds"], 60);
    let v2: Value =
        tollgate_protocol::x402::header::decode(headers.get("payment-required").unwrap().to_str().unwrap()).unwrap();
    assert_eq!(v2["x402Version"], 2);
    assert_eq!(v2["resource"]["url"], report);
    assert_eq!(
        (v2["accepts"][0]["amount"].as_str(), v2["accepts"][0]["network"].as_str()),
        (Some("10000000"), Some(f.network().as_str()))
    );
    // A browser gets a page.
    let page = reqwest::Client::new().get(&report).header("accept", "text/html").send().await.unwrap();
    assert_eq!(page.status().as_u16(), 402);
    assert!(page.text().await.unwrap().contains("0.01 SOL"));

    // Pay: served, with the settlement header, and the handler sees the payment.
    let buyer = Keypair::new();
    f.airdrop(&buyer.pubkey(), 1).await;
    let proof = f.proof(&buyer, &pay_to, 10_000_000).await;
    let (status, headers, body) = get_with(&report, Some(("X-PAYMENT", &proof))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["payer"], buyer.pubkey().to_string());
    let settled: Value =
        tollgate_protocol::x402::header::decode(headers.get("x-payment-response").unwrap().to_str().unwrap()).unwrap();
    assert_eq!(
        (settled["success"].as_bool(), settled["transaction"].clone()),
        (Some(true), body["transaction"].clone())
    );
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (1, 1));

    // The same proof for the same request (its answer lost): the retry it buys, counted by the
    // facilitator (one call), served; a third time, refused: pay again.
    let (status, _, _) = get_with(&report, Some(("X-PAYMENT", &proof))).await;
    assert_eq!(status, 200);
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (2, 2));
    let (status, _, body) = get_with(&report, Some(("X-PAYMENT", &proof))).await;
    assert_eq!(status, 402);
    assert!(body["error"].as_str().unwrap().contains("served the 2 answers it buys"), "{body}");
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (3, 2));
    // For another resource: refused from memory.
    let (status, _, body) = get_with(&format!("{shop}/other"), Some(("X-PAYMENT", &proof))).await;
    assert_eq!(status, 402);
    assert!(body["error"].as_str().unwrap().contains("another resource"), "{body}");
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (3, 2));

    // 16 concurrent requests with one new proof: settled once, served what it buys (the answer
    // and one retry), the rest refused.
    let balance = f.state.chains.embedded_solana().unwrap().rpc.balance(&pay_to).await.unwrap();
    let proof = f.proof(&buyer, &pay_to, 10_000_000).await;
    let racers: Vec<_> = (0..16)
        .map(|_| {
            let (url, proof) = (report.clone(), proof.clone());
            tokio::spawn(async move { get_with(&url, Some(("X-PAYMENT", &proof))).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for r in racers {
        let (status, _, body) = r.await.unwrap();
        assert!(status == 200 || (status == 402 && body["error"].as_str().unwrap().contains("served")), "{body}");
        statuses.push(status);
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 2, "{statuses:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    let after = f.state.chains.embedded_solana().unwrap().rpc.balance(&pay_to).await.unwrap();
    assert_eq!(after - balance, 10_000_000, "money moved once");
    let receives = f.receives.load(Ordering::SeqCst);

    // Bad headers: 400 or 402, never the facilitator, never the handler.
    let wrong_network = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        "payload": {"transaction": "AQID"}
    }))
    .unwrap();
    let oversize = "A".repeat(17 * 1024);
    let not_json = base64::engine::general_purpose::STANDARD.encode("hello");
    for (header, value, expected) in [
        ("X-PAYMENT", "%%%not base64%%%", 400),
        ("X-PAYMENT", not_json.as_str(), 400),
        ("PAYMENT-SIGNATURE", oversize.as_str(), 400),
        ("X-PAYMENT", wrong_network.as_str(), 402),
    ] {
        let (status, _, body) = get_with(&report, Some((header, value))).await;
        assert_eq!(status, expected, "{header}: {body}");
    }
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (receives, 4));

    // A proof that underpays: refused by the facilitator once, then from the cache.
    let cheap = f.proof(&buyer, &pay_to, 1_000_000).await;
    for _ in 0..3 {
        let (status, _, body) = get_with(&report, Some(("X-PAYMENT", &cheap))).await;
        assert_eq!(status, 402, "{body}");
    }
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (receives + 1, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_facilitator_gives_502_and_the_handler_does_not_run() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let network: tollgate_protocol::Network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".parse().unwrap();
    let pay_to = Pubkey::new_unique();
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&gone, "tg_test_x"))
        .accept(Price::native_sol("0.01").unwrap().pay_to(pay_to.to_string().parse().unwrap()).on(network.clone()))
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let app = Router::new()
        .route(
            "/report",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "paid content" }
            }),
        )
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shop = format!("http://{}/report", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let proof = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": network.to_string(), "payload": {"transaction": "AQID"}
    }))
    .unwrap();
    let (status, _, _) = get_with(&shop, Some(("X-PAYMENT", &proof))).await;
    assert_eq!(status, 502);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verify_then_settle_charges_only_when_the_handler_succeeds() {
    let f = Facilitator::start().await;
    let pay_to = Pubkey::new_unique();
    f.airdrop(&pay_to, 1).await;
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::x402(&f.url).with_api_key(&f.key))
        .accept(Price::native_sol("0.01").unwrap().pay_to(pay_to.to_string().parse().unwrap()))
        .settlement_order(tollgate::SettlementOrder::VerifyThenSettle)
        .build()
        .unwrap();
    let app = Router::new()
        .route("/ok", get(|| async { "paid content" }))
        .route("/broken", get(|| async { (http::StatusCode::INTERNAL_SERVER_ERROR, "the handler failed") }))
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shop = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let rpc = &f.state.chains.embedded_solana().unwrap().rpc;
    let buyer = Keypair::new();
    f.airdrop(&buyer.pubkey(), 1).await;

    // The handler fails: the proof is verified but not settled; nothing moves.
    let proof = f.proof(&buyer, &pay_to, 10_000_000).await;
    let answer = reqwest::Client::new().get(format!("{shop}/broken")).header("X-PAYMENT", &proof).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 500);
    assert!(answer.headers().get("x-payment-response").is_none());
    assert_eq!(rpc.balance(&pay_to).await.unwrap(), 1_000_000_000);

    // The handler succeeds: settled after it, with the settlement header.
    let answer = reqwest::Client::new().get(format!("{shop}/ok")).header("X-PAYMENT", &proof).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let settled: Value =
        tollgate_protocol::x402::header::decode(answer.headers().get("x-payment-response").unwrap().to_str().unwrap())
            .unwrap();
    assert_eq!(settled["success"], true);
    assert_eq!(answer.text().await.unwrap(), "paid content");
    assert_eq!(rpc.balance(&pay_to).await.unwrap(), 1_010_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_spl_price_offers_the_facilitators_fee_payer() {
    let f = Facilitator::start().await;
    let mint: tollgate_protocol::Address = Pubkey::new_unique().to_string().parse().unwrap();
    let pay_to: tollgate_protocol::Address = Pubkey::new_unique().to_string().parse().unwrap();
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&f.url, &f.key))
        .accept(Price::token(mint, "1.5", 6).unwrap().pay_to(pay_to))
        .build()
        .unwrap();
    let app = Router::new().route("/data", get(|| async { "data" })).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shop = format!("http://{}/data", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (status, _, body) = get_with(&shop, None).await;
    assert_eq!(status, 402);
    let offer = &body["accepts"][0];
    assert_eq!((offer["scheme"].as_str(), offer["maxAmountRequired"].as_str()), (Some("exact"), Some("1500000")));
    assert_eq!(offer["asset"], mint.to_string());
    let fee_payer = f.state.chains.embedded_solana().unwrap().fee_payer().unwrap().to_string();
    assert_eq!(offer["extra"]["feePayer"], fee_payer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v2_payment_signature_must_name_an_offered_requirement() {
    let f = Facilitator::start().await;
    let pay_to = Pubkey::new_unique();
    f.airdrop(&pay_to, 1).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = seller(&f, pay_to, runs.clone()).await;
    let report = format!("{shop}/report");
    let (_, headers, _) = get_with(&report, None).await;
    let offered: Value =
        tollgate_protocol::x402::header::decode(headers.get("payment-required").unwrap().to_str().unwrap()).unwrap();
    let accepted = offered["accepts"][0].clone();

    let buyer = Keypair::new();
    f.airdrop(&buyer.pubkey(), 1).await;
    let v1: Value = tollgate_protocol::x402::header::decode(&f.proof(&buyer, &pay_to, 10_000_000).await).unwrap();
    let v2 = |accepted: &Value| {
        tollgate_protocol::x402::header::encode(&json!({
            "x402Version": 2, "accepted": accepted, "payload": v1["payload"], "resource": offered["resource"]
        }))
        .unwrap()
    };
    // A cheaper "accepted" than offered: not a match, no facilitator call.
    let mut cheaper = accepted.clone();
    cheaper["amount"] = json!("1");
    let (status, _, body) = get_with(&report, Some(("PAYMENT-SIGNATURE", &v2(&cheaper)))).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(f.receives.load(Ordering::SeqCst), 0);

    let (status, headers, body) = get_with(&report, Some(("PAYMENT-SIGNATURE", &v2(&accepted)))).await;
    assert_eq!(status, 200, "{body}");
    let settled: Value =
        tollgate_protocol::x402::header::decode(headers.get("payment-response").unwrap().to_str().unwrap()).unwrap();
    assert_eq!((settled["success"].as_bool(), settled["network"].as_str()), (Some(true), Some(f.network().as_str())));
    assert!(headers.get("x-payment-response").is_none(), "a v2 request gets the v2 header");
    assert_eq!((f.receives.load(Ordering::SeqCst), runs.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_buyer_client_pays_the_402_and_gets_the_content_twice_with_two_payments() {
    use tollgate_client::{Buyer, Cap, PayError};
    let f = Facilitator::start().await;
    let pay_to = Pubkey::new_unique();
    f.airdrop(&pay_to, 1).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = seller(&f, pay_to, runs.clone()).await;
    let report = format!("{shop}/report");
    let rpc_url = f.state.chains.embedded_solana().unwrap().embedded.as_ref().unwrap().rpc_url().to_owned();
    let keypair = Keypair::new();
    f.airdrop(&keypair.pubkey(), 1).await;
    let buyer_key = keypair.pubkey();

    // Over the cap: nothing is paid.
    let stingy = Buyer::new()
        .with_solana(Keypair::try_from(keypair.to_bytes().as_slice()).unwrap(), &rpc_url)
        .with_cap(Cap::whole("0.005").unwrap());
    assert!(matches!(stingy.get(&report).await, Err(PayError::OverCap { .. })));
    assert_eq!(f.receives.load(Ordering::SeqCst), 0);

    let buyer = Buyer::new().with_solana(keypair, &rpc_url).with_cap(Cap::whole("0.01").unwrap());
    let mut transactions = Vec::new();
    for round in 1..=2 {
        let paid = buyer.get(&report).await.unwrap();
        assert_eq!(paid.status, 200);
        let body: Value = serde_json::from_slice(&paid.body).unwrap();
        assert_eq!(body["report"], "42");
        let made = paid.payment.unwrap();
        assert_eq!((made.amount.get(), made.whole.to_string()), (10_000_000, "0.01".to_owned()));
        let settlement = paid.settlement.unwrap();
        assert!(settlement.success);
        assert_eq!(made.transaction.as_deref(), Some(settlement.transaction.as_str()));
        transactions.push(settlement.transaction);
        assert_eq!(f.receives.load(Ordering::SeqCst), round, "a new proof each time");
    }
    assert_ne!(transactions[0], transactions[1]);
    let rpc = &f.state.chains.embedded_solana().unwrap().rpc;
    assert_eq!(rpc.balance(&pay_to).await.unwrap(), 1_000_000_000 + 20_000_000);
    assert!(rpc.balance(&buyer_key).await.unwrap() < 1_000_000_000 - 20_000_000, "two payments and their fees");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // No key for this kind of payment.
    let keyless = Buyer::new();
    assert!(matches!(keyless.get(&report).await, Err(PayError::NoOption(_))));
}

/// A stranger sends the seller 1,000 proofs that look right (a signed transfer of the price to
/// the seller, from a wallet that holds nothing): each one is the facilitator's to refuse, so
/// each reaches it, with the seller's key on the standard plan (100 requests a minute). Refused
/// proofs are given back to the key's window: the paying buyer after them is served, and the key
/// still has its requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_refused_proofs_from_a_stranger_do_not_rate_limit_the_seller() {
    let facilitator = Facilitator::start_on(Plan::Standard, None).await;
    let seller_key = Keypair::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let shop = seller(&facilitator, seller_key.pubkey(), runs.clone()).await;
    let report = format!("{shop}/report");
    let mut proofs = Vec::new();
    for _ in 0..1_000 {
        proofs.push(facilitator.proof(&Keypair::new(), &seller_key.pubkey(), 10_000_000).await);
    }
    let mut refused = 0;
    for chunk in proofs.chunks(8) {
        let mut set = tokio::task::JoinSet::new();
        for proof in chunk {
            let (url, proof) = (report.clone(), proof.clone());
            set.spawn(async move { get_with(&url, Some(("X-PAYMENT", &proof))).await });
        }
        while let Some(answer) = set.join_next().await {
            let (status, _, body) = answer.unwrap();
            assert_eq!(status, 402, "{body}");
            refused += 1;
        }
    }
    assert_eq!((refused, runs.load(Ordering::SeqCst)), (1_000, 0));
    assert_eq!(facilitator.receives.load(Ordering::SeqCst), 1_000, "each one was the facilitator's to refuse");

    let buyer = Keypair::new();
    facilitator.airdrop(&buyer.pubkey(), 1).await;
    let proof = facilitator.proof(&buyer, &seller_key.pubkey(), 10_000_000).await;
    let (status, _, body) = get_with(&report, Some(("X-PAYMENT", &proof))).await;
    assert_eq!((status, &body["report"]), (200, &json!("42")), "{body}");
    // What counted this minute: the airdrop, the paid receive and this call — not the refusals
    // (nor the layer's `/supported` look-ups: that route is open, outside the key's limit).
    let answer = reqwest::Client::new()
        .get(format!("{}/payment/history/{}", facilitator.url, seller_key.pubkey()))
        .bearer_auth(&facilitator.key)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let remaining: u32 = answer.headers()["x-ratelimit-remaining"].to_str().unwrap().parse().unwrap();
    assert!(remaining >= 100 - 5, "{remaining} requests left of 100");
}

/// A seller of `/report/1` and `/report/2` (GET, and POST on the first) at one price, behind a
/// layer on `facilitator` settling in `order`; its handler runs are counted.
async fn two_reports(
    facilitator: FacilitatorClient,
    order: tollgate::SettlementOrder,
    pay_to: Pubkey,
    runs: Arc<AtomicUsize>,
) -> String {
    let layer = PaymentLayer::builder()
        .facilitator(facilitator)
        .accept(Price::native_sol("0.01").unwrap().pay_to(pay_to.to_string().parse().unwrap()))
        .settlement_order(order)
        // Instances behind one load balancer name the same resources.
        .resource_base("https://shop.example")
        .build()
        .unwrap();
    let handler = move || {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            "paid content"
        }
    };
    let app = Router::new()
        .route("/report/1", get(handler.clone()).post(handler.clone()))
        .route("/report/2", get(handler))
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A v2 `PAYMENT-SIGNATURE` for the same proof, with `resource` as the buyer writes it.
fn rewrapped(v2: &str, resource: Option<&str>) -> String {
    let mut payload: Value = tollgate_protocol::x402::header::decode(v2).unwrap();
    match resource {
        Some(url) => payload["resource"]["url"] = json!(url),
        None => {
            payload.as_object_mut().unwrap().remove("resource");
        }
    }
    tollgate_protocol::x402::header::encode(&payload).unwrap()
}

/// One proof pays for one request: its resource as the seller names it and its method. Wrapped
/// again (v2: another `resource`, or none), presented for another resource or method, to this
/// seller or to another instance of it (nothing remembered, the facilitator asked): refused, in
/// both facilitator modes and both settlement orders, and the money moved once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proof_wrapped_again_for_another_resource_or_method_is_refused() {
    use tollgate::SettlementOrder::{SettleBefore, VerifyThenSettle};
    let f = Facilitator::start().await;
    let rpc = &f.state.chains.embedded_solana().unwrap().rpc;
    let gateway = || FacilitatorClient::new(&f.url, &f.key);
    let x402 = || FacilitatorClient::x402(&f.url).with_api_key(&f.key);
    let client = reqwest::Client::new();
    for (mode, order) in
        [("gateway", SettleBefore), ("gateway", VerifyThenSettle), ("x402", SettleBefore), ("x402", VerifyThenSettle)]
    {
        for version in [1, 2] {
            let case = format!("{mode}, {order:?}, v{version}");
            let facilitator = || if mode == "gateway" { gateway() } else { x402() };
            let pay_to = Pubkey::new_unique();
            f.airdrop(&pay_to, 1).await;
            let runs = Arc::new(AtomicUsize::new(0));
            let shop = two_reports(facilitator(), order, pay_to, runs.clone()).await;
            let first = format!("{shop}/report/1");
            let second = "https://shop.example/report/2";
            let buyer = Keypair::new();
            f.airdrop(&buyer.pubkey(), 1).await;
            let v1 = f.proof(&buyer, &pay_to, 10_000_000).await;
            let (name, header) = if version == 1 {
                ("X-PAYMENT", v1)
            } else {
                let (_, headers, _) = get_with(&first, None).await;
                let offered: Value =
                    tollgate_protocol::x402::header::decode(headers.get("payment-required").unwrap().to_str().unwrap())
                        .unwrap();
                let inner: Value = tollgate_protocol::x402::header::decode(&v1).unwrap();
                let v2 = json!({"x402Version": 2, "accepted": offered["accepts"][0], "payload": inner["payload"],
                                "resource": offered["resource"]});
                ("PAYMENT-SIGNATURE", tollgate_protocol::x402::header::encode(&v2).unwrap())
            };
            let (status, _, body) = get_with(&first, Some((name, &header))).await;
            assert_eq!(status, 200, "{case}: {body}");
            assert_eq!(rpc.balance(&pay_to).await.unwrap(), 1_010_000_000, "{case}");

            // The same shop, then another instance of it that remembers nothing.
            let other_instance = two_reports(facilitator(), order, pay_to, runs.clone()).await;
            for shop in [&shop, &other_instance] {
                let mut attempts = vec![(format!("{shop}/report/2"), header.clone())];
                if version == 2 {
                    attempts.push((format!("{shop}/report/2"), rewrapped(&header, Some(second))));
                    attempts.push((format!("{shop}/report/2"), rewrapped(&header, None)));
                }
                for (url, header) in attempts {
                    let (status, _, body) = get_with(&url, Some((name, &header))).await;
                    assert_eq!(status, 402, "{case}: {url}: {body}");
                }
            }
            // Another method of the same resource: where the layer remembers the proof, at the
            // other instance (the facilitator binds the method too), and in the other protocol
            // version's header.
            let other_first = format!("{other_instance}/report/1");
            let posted = client.post(&first).header(name, &header).send().await.unwrap();
            assert_eq!(posted.status().as_u16(), 402, "{case}: POST with a GET's proof");
            let posted = client.post(&other_first).header(name, &header).send().await.unwrap();
            assert_eq!(posted.status().as_u16(), 402, "{case}: POST with a GET's proof, at the other instance");
            let inner: Value = tollgate_protocol::x402::header::decode(&header).unwrap();
            let (other_name, other_version) = if version == 1 {
                let (_, headers, _) = get_with(&first, None).await;
                let offered: Value =
                    tollgate_protocol::x402::header::decode(headers.get("payment-required").unwrap().to_str().unwrap())
                        .unwrap();
                let v2 = json!({"x402Version": 2, "accepted": offered["accepts"][0], "payload": inner["payload"],
                                "resource": offered["resource"]});
                ("PAYMENT-SIGNATURE", tollgate_protocol::x402::header::encode(&v2).unwrap())
            } else {
                let v1 = json!({"x402Version": 1, "scheme": inner["accepted"]["scheme"],
                                "network": inner["accepted"]["network"], "payload": inner["payload"]});
                ("X-PAYMENT", tollgate_protocol::x402::header::encode(&v1).unwrap())
            };
            for url in [&first, &other_first] {
                let posted = client.post(url).header(other_name, &other_version).send().await.unwrap();
                assert_eq!(
                    posted.status().as_u16(),
                    402,
                    "{case}: POST with a GET's proof in the other version: {url}"
                );
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{case}: served once");

            // The request it paid for, again, at the other instance (its answer was lost): the
            // seller's own payment for that resource, its second and last answer (v2: without
            // the buyer's copy of the resource, the seller names it), counted by the facilitator
            // for every instance; a third time, at either: used up.
            let again = if version == 2 { rewrapped(&header, None) } else { header.clone() };
            let (status, _, body) = get_with(&other_first, Some((name, &again))).await;
            assert_eq!(status, 200, "{case}: {body}");
            for url in [&first, &other_first] {
                let (status, _, body) = get_with(url, Some((name, &header))).await;
                assert_eq!(status, 402, "{case}: {url}: {body}");
                assert!(body["error"].as_str().unwrap().contains("served the 2 answers"), "{case}: {body}");
            }
            assert_eq!(runs.load(Ordering::SeqCst), 2, "{case}: served twice");
            assert_eq!(rpc.balance(&pay_to).await.unwrap(), 1_010_000_000, "{case}: paid once");
        }
    }
}

/// At the facilitator: a v2 `/settle` repeated by the seller answers its settlement only for the
/// resource it was made for; without a resource, or another one, the proof is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_settlement_is_answered_again_only_for_its_resource() {
    let f = Facilitator::start().await;
    let pay_to = Pubkey::new_unique();
    f.airdrop(&pay_to, 1).await;
    let buyer = Keypair::new();
    f.airdrop(&buyer.pubkey(), 1).await;
    let inner: Value = tollgate_protocol::x402::header::decode(&f.proof(&buyer, &pay_to, 10_000_000).await).unwrap();
    let requirement = json!({"scheme": "exact-native", "network": f.network(), "amount": "10000000",
                             "asset": "native", "payTo": pay_to.to_string(), "maxTimeoutSeconds": 30});
    let settle = |resource: Option<&str>| {
        let mut payload = json!({"x402Version": 2, "accepted": requirement, "payload": inner["payload"]});
        if let Some(url) = resource {
            payload["resource"] = json!({"url": url, "description": "", "mimeType": ""});
        }
        let body = json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirement});
        let (url, key) = (format!("{}/settle", f.url), f.key.clone());
        async move {
            let answer = reqwest::Client::new().post(url).bearer_auth(key).json(&body).send().await.unwrap();
            assert_eq!(answer.status().as_u16(), 200);
            answer.json::<Value>().await.unwrap()
        }
    };
    let first = settle(Some("https://shop.example/report/1")).await;
    assert_eq!(first["success"], true, "{first}");
    let again = settle(Some("https://shop.example/report/1")).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &first["transaction"]));
    for other in [None, Some("https://shop.example/report/2")] {
        let refused = settle(other).await;
        assert_eq!(refused["success"], false, "{other:?}: {refused}");
        assert_eq!(refused["errorReason"], "duplicate_settlement", "{other:?}: {refused}");
    }
}
