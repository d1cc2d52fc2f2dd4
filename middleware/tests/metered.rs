//! Metered prices (`upto`), payment flows, the `payment-identifier` extension and the caching
//! headers, against a facilitator in memory that records every amount it is asked to settle.
//!
//! The buyer authorizes a maximum; the handler reports what the request used; the layer settles
//! that after serving — capped at the maximum, nothing for zero or for a failed handler, once
//! for concurrent and repeated requests with one permit. A permit naming another settling
//! account, or for another maximum, costs the seller no facilitator call.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::extract::Query;
use axum::routing::{get, post};
use axum::{Extension, Json};
use base64::Engine as _;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tollgate::layer::BuildError;
use tollgate::protocol::AtomicAmount;
use tollgate::protocol::x402::{Supported, SupportedKind};
use tollgate::{Charge, Claim, Facilitator, Payment, PaymentLayer, Price, SettlementOrder, Verdict};
use tower::ServiceExt as _;

const NETWORK: &str = "eip155:31337";
const PAY_TO: &str = "0x1111111111111111111111111111111111111111";
const TOKEN: &str = "0x2222222222222222222222222222222222222222";
const BUYER: &str = "0x3333333333333333333333333333333333333333";
/// The facilitator's settling account, as its `/supported` names it.
const SETTLER: &str = "0x4444444444444444444444444444444444444444";
const UPTO_PROXY: &str = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";
/// The most a request may cost: 0.01 of a 6-decimal token.
const MAX: u128 = 10_000;
/// What a word of answer costs.
const PER_WORD: u128 = 100;
/// A nonce the facilitator refuses.
const REFUSED_NONCE: u64 = 666;

/// A facilitator in memory: every verify passes (but for [`REFUSED_NONCE`], or all when told
/// `permit2_allowance_required`), every settlement succeeds, and each is recorded.
#[derive(Debug, Default)]
struct Ledger {
    verifies: AtomicUsize,
    settled: Mutex<Vec<u128>>,
    settled_before: AtomicUsize,
    no_allowance: bool,
    /// When set, a settlement says it started, waits to be released, and says it is done.
    gate: Option<Arc<Gate>>,
    /// When set, the first settlement is left pending (then followed).
    pending_once: std::sync::atomic::AtomicBool,
    /// The amounts pending settlements were followed for.
    followed: Mutex<Vec<u128>>,
}

/// The steps of a settlement held open by the test.
#[derive(Debug, Default)]
struct Gate {
    started: tokio::sync::Notify,
    release: tokio::sync::Notify,
    done: tokio::sync::Notify,
}

impl Ledger {
    fn settled(&self) -> Vec<u128> {
        self.settled.lock().unwrap().clone()
    }

    fn refuses(claim: &Claim<'_>) -> bool {
        claim.payload.payload()["permit2Authorization"]["nonce"].as_str() == Some(&*REFUSED_NONCE.to_string())
    }
}

#[async_trait]
impl Facilitator for Ledger {
    async fn supported(&self) -> Result<Supported, Verdict> {
        let kind = |scheme: &str, extra: Option<Value>| SupportedKind {
            x402_version: 2,
            scheme: scheme.into(),
            network: NETWORK.into(),
            extra,
        };
        Ok(Supported {
            kinds: vec![kind("exact", None), kind("upto", Some(json!({"facilitatorAddress": SETTLER})))],
            extensions: vec![],
            signers: serde_json::Map::new(),
        })
    }

    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        self.settled_before.fetch_add(1, Ordering::SeqCst);
        self.settle(claim).await
    }

    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        self.verifies.fetch_add(1, Ordering::SeqCst);
        if self.no_allowance {
            return Verdict::Refused { reason: "permit2_allowance_required: approve Permit2 first".into() };
        }
        if Self::refuses(&claim) {
            return Verdict::Refused { reason: "permit2_invalid_nonce: used".into() };
        }
        let r = claim.requirement;
        Verdict::Paid(Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to).with_payer(BUYER))
    }

    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        if Self::refuses(&claim) {
            return Verdict::Refused { reason: "permit2_invalid_nonce: used".into() };
        }
        if self.pending_once.swap(false, Ordering::SeqCst) {
            self.settled.lock().unwrap().push(claim.requirement.amount.get());
            return Verdict::Pending { payment_id: Some("pay_1".into()), transaction: Some("0xpending".into()) };
        }
        let r = claim.requirement;
        if let Some(gate) = &self.gate {
            gate.started.notify_one();
            gate.release.notified().await;
        }
        self.settled.lock().unwrap().push(r.amount.get());
        if let Some(gate) = &self.gate {
            gate.done.notify_one();
        }
        // Settling takes a moment: concurrent requests with one permit overlap.
        tokio::task::yield_now().await;
        Verdict::Paid(
            Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to)
                .with_payer(BUYER)
                .with_transaction("0xsettled"),
        )
    }

    async fn follow(&self, payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        assert_eq!(payment_id, Some("pay_1"), "the payment seen pending is followed");
        let r = claim.requirement;
        self.followed.lock().unwrap().push(r.amount.get());
        Verdict::Paid(
            Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to)
                .with_payer(BUYER)
                .with_transaction("0xpending"),
        )
    }

    async fn release(&self, _payment: &Payment) {}
}

#[derive(serde::Deserialize)]
struct Words {
    words: Option<u64>,
}

/// What the handler saw of the payment, for the test to read back.
type Seen = Arc<Mutex<Vec<Payment>>>;

/// `/complete?words=N` answers N words and charges [`PER_WORD`] each; `/greedy` charges more
/// than the maximum; `/uncharged` reports nothing; `/fail` answers 500. All priced at most
/// [`MAX`] of [`TOKEN`], with `others` besides.
fn shop(ledger: Arc<Ledger>, order: SettlementOrder, others: Vec<Price>, seen: Seen) -> Router {
    let metered = Price::upto(TOKEN.parse().unwrap(), "0.01", 6).unwrap();
    let mut builder = PaymentLayer::builder().facilitator(ledger).settlement_order(order);
    for price in std::iter::once(metered).chain(others) {
        builder = builder.accept(price.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()));
    }
    let layer = builder.build().unwrap();
    let complete = move |Query(q): Query<Words>, Extension(payment): Extension<Payment>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(payment);
            let n = q.words.unwrap_or(0);
            let text = vec!["word"; usize::try_from(n).unwrap()].join(" ");
            (Extension(Charge::per_unit(n, AtomicAmount(PER_WORD))), text)
        }
    };
    Router::new()
        .route("/complete", get(complete))
        .route("/greedy", get(|| async { (Extension(Charge::atomic(MAX * 1_000)), "everything") }))
        .route("/uncharged", get(|| async { "no report" }))
        .route("/fail", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, Extension(Charge::atomic(5)), "broke") }))
        .route_layer(layer)
}

fn store(ledger: &Arc<Ledger>) -> Router {
    shop(ledger.clone(), SettlementOrder::SettleBefore, vec![], Seen::default())
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn settlement(&self) -> Value {
        decode(self.headers["payment-response"].to_str().unwrap())
    }

    fn cache_control(&self) -> &str {
        self.headers.get("cache-control").map_or("", |v| v.to_str().unwrap())
    }
}

async fn call(app: &Router, method: &str, uri: &str, payment: Option<&str>) -> Answer {
    let mut request = Request::builder().method(method).uri(uri).header("host", "shop.example");
    if let Some(p) = payment {
        request = request.header("payment-signature", p);
    }
    let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let (head, body) = response.into_parts();
    let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Answer { status: head.status, headers: head.headers, body }
}

fn decode(header: &str) -> Value {
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap()
}

/// The offers of a 402 answer.
async fn offers(app: &Router, method: &str, uri: &str) -> (Value, Vec<Value>) {
    let challenge = call(app, method, uri, None).await;
    assert_eq!(challenge.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(challenge.cache_control(), "no-store", "a 402 is no one's to keep");
    let required = decode(challenge.headers["payment-required"].to_str().unwrap());
    let accepts = required["accepts"].as_array().unwrap().clone();
    (required, accepts)
}

/// A v2 Permit2 payload accepting `offer`, with nonce `nonce`, changed by `tweak`.
fn permit(offer: &Value, nonce: u64, tweak: impl FnOnce(&mut Value)) -> String {
    let now = chrono::Utc::now().timestamp();
    let mut payload = json!({
        "x402Version": 2,
        "accepted": offer,
        "payload": {
            "signature": format!("0x{}", "11".repeat(65)),
            "permit2Authorization": {
                "from": BUYER, "permitted": {"token": TOKEN, "amount": offer["amount"]},
                "spender": UPTO_PROXY, "nonce": nonce.to_string(), "deadline": (now + 300).to_string(),
                "witness": {"to": PAY_TO, "facilitator": SETTLER, "validAfter": "0"}
            }
        }
    });
    tweak(&mut payload);
    tollgate::protocol::x402::header::encode(&payload).unwrap()
}

/// The metered offer of a 402 answer.
async fn metered_offer(app: &Router, uri: &str) -> Value {
    let (_, accepts) = offers(app, "GET", uri).await;
    accepts.into_iter().find(|o| o["scheme"] == "upto").unwrap()
}

#[tokio::test]
async fn a_metered_route_settles_what_its_handler_used_after_serving_it() {
    let ledger = Arc::new(Ledger::default());
    let seen = Seen::default();
    let app = shop(ledger.clone(), SettlementOrder::SettleBefore, vec![], seen.clone());
    let offer = metered_offer(&app, "/complete?words=7").await;
    assert_eq!(offer["amount"], MAX.to_string(), "the maximum is offered");
    assert_eq!(
        offer["extra"],
        json!({"assetTransferMethod": "permit2", "facilitatorAddress": SETTLER}),
        "the settling account the permit must name, from /supported; no paymentFlow: authorization is upto's only flow"
    );

    let proof = permit(&offer, 1, |_| {});
    let paid = call(&app, "GET", "/complete?words=7", Some(&proof)).await;
    assert_eq!((paid.status, paid.body.split(' ').count()), (StatusCode::OK, 7));
    assert_eq!(ledger.settled(), vec![7 * PER_WORD], "seven words settled, not the maximum");
    let settlement = paid.settlement();
    assert_eq!((settlement["amount"].as_str(), settlement["success"].as_bool()), (Some("700"), Some(true)));
    assert_eq!(paid.cache_control(), "private", "a paid answer stays out of shared caches");
    let handed = seen.lock().unwrap()[0].clone();
    assert_eq!((handed.amount, handed.maximum), (AtomicAmount(MAX), Some(AtomicAmount(MAX))));
    assert_eq!(handed.transaction, None, "the handler runs before the settlement");

    // The same permit again (the buyer hung up and retries): served, never settled twice.
    let again = call(&app, "GET", "/complete?words=7", Some(&proof)).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(ledger.settled(), vec![700]);
    // ... but not for another resource.
    let elsewhere = call(&app, "GET", "/complete?words=9", Some(&proof)).await;
    assert_eq!(elsewhere.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(ledger.settled(), vec![700]);
}

#[tokio::test]
async fn a_charge_is_capped_at_the_maximum_and_nothing_is_settled_for_zero_or_a_failure() {
    let ledger = Arc::new(Ledger::default());
    let app = store(&ledger);
    let pay = |uri: &'static str, nonce: u64| {
        let app = app.clone();
        async move {
            let offer = metered_offer(&app, uri).await;
            call(&app, "GET", uri, Some(&permit(&offer, nonce, |_| {}))).await
        }
    };

    let greedy = pay("/greedy", 1).await;
    assert_eq!(greedy.status, StatusCode::OK);
    assert_eq!(ledger.settled(), vec![MAX], "a handler charging more settles the most authorized");

    let nothing = pay("/complete?words=0", 2).await;
    assert_eq!(nothing.status, StatusCode::OK);
    assert_eq!(ledger.settled(), vec![MAX], "zero: nothing settled");
    let settlement = nothing.settlement();
    assert_eq!((settlement["amount"].as_str(), settlement["transaction"].as_str()), (Some("0"), Some("")));

    let failed = pay("/fail", 3).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(failed.headers.get("payment-response").is_none());
    assert_eq!(ledger.settled(), vec![MAX], "a failed handler settles nothing, whatever it charged");

    let unreported = pay("/uncharged", 4).await;
    assert_eq!(unreported.status, StatusCode::OK);
    assert_eq!(ledger.settled(), vec![MAX, MAX], "no report: the maximum, as x402's servers settle it");
}

/// Eight requests at once with one permit: one settlement, and the payment serves what it buys —
/// its answer and one retry (the layer counts them: this facilitator does not) — and no more.
#[tokio::test]
async fn concurrent_requests_with_one_permit_settle_once_and_serve_what_it_buys() {
    let ledger = Arc::new(Ledger::default());
    let seen = Seen::default();
    let app = shop(ledger.clone(), SettlementOrder::SettleBefore, vec![], seen.clone());
    let offer = metered_offer(&app, "/complete?words=3").await;
    let proof = permit(&offer, 9, |_| {});
    let answers = futures_util::future::join_all((0..8).map(|_| {
        let (app, proof) = (app.clone(), proof.clone());
        async move { call(&app, "GET", "/complete?words=3", Some(&proof)).await }
    }))
    .await;
    let served = answers.iter().filter(|a| a.status == StatusCode::OK && a.body == "word word word").count();
    let refused = answers.iter().filter(|a| a.status == StatusCode::PAYMENT_REQUIRED).count();
    assert_eq!((served, refused), (2, 6), "the answer and one retry; the rest pay again");
    assert_eq!(ledger.settled(), vec![300], "one settlement");
    assert_eq!(ledger.verifies.load(Ordering::SeqCst), 1, "one verify");
}

#[tokio::test]
async fn a_permit_for_another_settler_maximum_or_recipient_costs_no_facilitator_call() {
    let ledger = Arc::new(Ledger::default());
    let app = store(&ledger);
    let offer = metered_offer(&app, "/complete?words=1").await;
    type Tweak = Box<dyn FnOnce(&mut Value)>;
    let tweaks: [(&str, Tweak); 4] = [
        (
            "upto_facilitator_mismatch",
            Box::new(|p| p["payload"]["permit2Authorization"]["witness"]["facilitator"] = json!(BUYER)),
        ),
        (
            "upto_facilitator_mismatch",
            Box::new(|p| {
                p["payload"]["permit2Authorization"]["witness"].as_object_mut().unwrap().remove("facilitator");
            }),
        ),
        (
            "permit2_amount_mismatch",
            Box::new(|p| p["payload"]["permit2Authorization"]["permitted"]["amount"] = json!("9999")),
        ),
        (
            "invalid_permit2_recipient_mismatch",
            Box::new(|p| p["payload"]["permit2Authorization"]["witness"]["to"] = json!(BUYER)),
        ),
    ];
    for (i, (why, tweak)) in tweaks.into_iter().enumerate() {
        let answer = call(&app, "GET", "/complete?words=1", Some(&permit(&offer, 100 + i as u64, tweak))).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{why}");
        assert_eq!(answer.settlement()["errorReason"], why);
        assert_eq!(answer.cache_control(), "no-store");
    }
    // A dearer maximum accepted than offered: matches no offer.
    let dearer = permit(&offer, 200, |p| {
        p["accepted"]["amount"] = json!("20000");
        p["payload"]["permit2Authorization"]["permitted"]["amount"] = json!("20000");
    });
    assert_eq!(call(&app, "GET", "/complete?words=1", Some(&dearer)).await.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(ledger.verifies.load(Ordering::SeqCst), 0, "the facilitator was never asked");
    assert!(ledger.settled().is_empty());
}

#[tokio::test]
async fn payment_flows_are_written_per_price_and_unsupported_ones_refused() {
    let exact = || Price::token(TOKEN.parse().unwrap(), "0.001", 6).unwrap().permit2();
    // Settle-before: exact is `upfront`, upto stays `authorization` (no key) and is settled after.
    let ledger = Arc::new(Ledger::default());
    let app = shop(ledger.clone(), SettlementOrder::SettleBefore, vec![exact()], Seen::default());
    let (_, accepts) = offers(&app, "GET", "/complete?words=2").await;
    let by_scheme = |s: &str| accepts.iter().find(|o| o["scheme"] == s).unwrap().clone();
    assert_eq!(by_scheme("exact")["extra"]["paymentFlow"], "upfront");
    assert!(by_scheme("upto")["extra"].get("paymentFlow").is_none());
    let paid = call(&app, "GET", "/complete?words=2", Some(&permit(&by_scheme("upto"), 1, |_| {}))).await;
    assert_eq!(paid.status, StatusCode::OK);
    assert_eq!(
        (ledger.verifies.load(Ordering::SeqCst), ledger.settled_before.load(Ordering::SeqCst)),
        (1, 0),
        "upto: verified, served, then settled"
    );
    let upfront = permit(&by_scheme("exact"), 2, |p| p["payload"]["permit2Authorization"]["spender"] = json!(SETTLER));
    assert_eq!(call(&app, "GET", "/complete?words=2", Some(&upfront)).await.status, StatusCode::OK);
    assert_eq!(ledger.settled_before.load(Ordering::SeqCst), 1, "exact upfront: settled before the handler");

    // Verify-then-settle: no paymentFlow written at all.
    let ledger = Arc::new(Ledger::default());
    let app = shop(ledger, SettlementOrder::VerifyThenSettle, vec![exact()], Seen::default());
    let (_, accepts) = offers(&app, "GET", "/complete").await;
    assert!(accepts.iter().all(|o| o["extra"].get("paymentFlow").is_none()), "{accepts:?}");

    // A price may name its own flow; one its scheme is not paid in fails the build.
    let build = |price: Price| {
        PaymentLayer::builder()
            .facilitator(Ledger::default())
            .accept(price.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
            .build()
    };
    let metered = || Price::upto(TOKEN.parse().unwrap(), "0.01", 6).unwrap();
    for (price, why) in [
        (metered().extra(json!({"paymentFlow": "upfront"})), "upto is not paid in the upfront flow"),
        (exact().extra(json!({"paymentFlow": "escrow"})), "exact is not paid in the escrow flow"),
        (
            exact().extra(json!({"paymentFlow": "later"})),
            "paymentFlow \"later\" is not authorization, upfront or escrow",
        ),
    ] {
        assert_eq!(build(price).unwrap_err(), BuildError::PaymentFlow(0, why.into()));
    }
    assert!(build(exact().extra(json!({"paymentFlow": "authorization"}))).is_ok());
}

#[tokio::test]
async fn a_buyer_without_a_permit2_allowance_is_answered_412() {
    let ledger = Arc::new(Ledger { no_allowance: true, ..Ledger::default() });
    let app = store(&ledger);
    let offer = metered_offer(&app, "/complete?words=1").await;
    let answer = call(&app, "GET", "/complete?words=1", Some(&permit(&offer, 1, |_| {}))).await;
    assert_eq!(answer.status, StatusCode::PRECONDITION_FAILED, "{}", answer.body);
    assert_eq!(answer.settlement()["errorReason"], "permit2_allowance_required");
    assert!(answer.headers.contains_key("payment-required"), "the offers come with it");
    assert_eq!(answer.cache_control(), "no-store");
    assert!(ledger.settled().is_empty());
}

#[tokio::test]
async fn a_payment_identifier_names_one_paid_request() {
    let ledger = Arc::new(Ledger::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let metered = Price::upto(TOKEN.parse().unwrap(), "0.01", 6).unwrap();
    let layer = PaymentLayer::builder()
        .facilitator(ledger.clone())
        .accept(metered.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .payment_identifier(true)
        .build()
        .unwrap();
    let counter = runs.clone();
    let app = Router::new()
        .route(
            "/order",
            post(move || {
                let runs = counter.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    (Extension(Charge::atomic(1_000)), Json(json!({"order": n})))
                }
            }),
        )
        .route_layer(layer);
    let (required, accepts) = offers(&app, "POST", "/order").await;
    assert_eq!(required["extensions"]["payment-identifier"]["info"]["required"], true);
    let offer = &accepts[0];
    let with_id = |nonce: u64, id: Option<&str>| {
        permit(offer, nonce, |p| {
            if let Some(id) = id {
                p["extensions"] = json!({"payment-identifier": {"info": {"required": true, "id": id}}});
            }
        })
    };
    let (id_a, id_b, id_c) =
        ("pay_aaaaaaaaaaaaaaaaaaaaaaaa", "pay_bbbbbbbbbbbbbbbbbbbbbbbb", "pay_cccccccccccccccccccccccc");

    let none = call(&app, "POST", "/order", Some(&with_id(1, None))).await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST, "required, and none given");
    let malformed = call(&app, "POST", "/order", Some(&with_id(1, Some("short")))).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let first = call(&app, "POST", "/order", Some(&with_id(1, Some(id_a)))).await;
    assert_eq!((first.status, first.body.as_str()), (StatusCode::OK, r#"{"order":1}"#));
    let repeat = call(&app, "POST", "/order", Some(&with_id(1, Some(id_a)))).await;
    assert_eq!((repeat.status, repeat.body.as_str()), (StatusCode::OK, r#"{"order":1}"#), "the answer given");
    assert_eq!(repeat.headers["payment-response"], first.headers["payment-response"]);
    assert_eq!((runs.load(Ordering::SeqCst), ledger.settled()), (1, vec![1_000]), "one order, one settlement");

    let other_proof = call(&app, "POST", "/order", Some(&with_id(2, Some(id_a)))).await;
    assert_eq!(other_proof.status, StatusCode::CONFLICT);
    assert_eq!(other_proof.cache_control(), "no-store");
    let second = call(&app, "POST", "/order", Some(&with_id(2, Some(id_b)))).await;
    assert_eq!((second.status, second.body.as_str()), (StatusCode::OK, r#"{"order":2}"#));

    // Two proofs racing under one new id: one is served and settled, the other is 409.
    let id_d = "pay_dddddddddddddddddddddddd";
    let (fourth, fifth) = (with_id(4, Some(id_d)), with_id(5, Some(id_d)));
    let (x, y) = tokio::join!(call(&app, "POST", "/order", Some(&fourth)), call(&app, "POST", "/order", Some(&fifth)));
    let mut statuses = [x.status, y.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    assert_eq!(ledger.settled(), vec![1_000, 1_000, 1_000], "the winner only");

    // A refused payment lets its id go: the buyer pays again under it.
    let refused = call(&app, "POST", "/order", Some(&with_id(REFUSED_NONCE, Some(id_c)))).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED);
    let retried = call(&app, "POST", "/order", Some(&with_id(3, Some(id_c)))).await;
    assert_eq!((retried.status, retried.body.as_str()), (StatusCode::OK, r#"{"order":4}"#));
    assert_eq!(ledger.settled(), vec![1_000, 1_000, 1_000, 1_000]);
}

#[tokio::test]
async fn a_buyer_hanging_up_after_being_served_is_charged_once_and_its_retry_served() {
    let gate = Arc::new(Gate::default());
    let ledger = Arc::new(Ledger { gate: Some(gate.clone()), ..Ledger::default() });
    let app = store(&ledger);
    let offer = metered_offer(&app, "/complete?words=5").await;
    let proof = permit(&offer, 1, |_| {});
    let buyer = tokio::spawn({
        let (app, proof) = (app.clone(), proof.clone());
        async move { call(&app, "GET", "/complete?words=5", Some(&proof)).await }
    });
    // The handler served; its settlement is under way when the buyer hangs up.
    gate.started.notified().await;
    buyer.abort();
    assert!(buyer.await.unwrap_err().is_cancelled());
    gate.release.notify_one();
    // (A bound, not a wait: without its own task the settlement would have been dropped.)
    tokio::time::timeout(std::time::Duration::from_secs(10), gate.done.notified())
        .await
        .expect("the settlement went on after the buyer hung up");
    assert_eq!(ledger.settled(), vec![500], "what was served is charged");
    // The settling task remembers the payment for the permit once the facilitator answered.
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    let retry = call(&app, "GET", "/complete?words=5", Some(&proof)).await;
    assert_eq!((retry.status, retry.body.as_str()), (StatusCode::OK, "word word word word word"));
    assert_eq!(retry.settlement()["amount"], "500");
    assert_eq!(
        (ledger.settled(), ledger.verifies.load(Ordering::SeqCst)),
        (vec![500], 1),
        "served again, not settled again"
    );
}

#[tokio::test]
async fn a_metered_settlement_left_pending_is_followed_for_its_charge_not_the_most() {
    let ledger = Arc::new(Ledger { pending_once: true.into(), ..Ledger::default() });
    let app = store(&ledger);
    let offer = metered_offer(&app, "/complete?words=8").await;
    let proof = permit(&offer, 1, |_| {});
    let first = call(&app, "GET", "/complete?words=8", Some(&proof)).await;
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE, "broadcast, not yet confirmed: {}", first.body);
    assert_eq!(first.cache_control(), "no-store");
    let retry = call(&app, "GET", "/complete?words=8", Some(&proof)).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.body);
    assert_eq!(retry.settlement()["amount"], "800", "the charge, as settled");
    assert_eq!(*ledger.followed.lock().unwrap(), vec![800], "followed for the 8 words charged, not the most");
    assert_eq!(ledger.settled(), vec![800], "settled once");
}

/// The chunks a streamed handler sends, handed over by the test: `/stream` streams them, then
/// reports a charge of [`PER_WORD`] per chunk ([`tollgate::DeferredCharge`]); `/stream-silent`
/// ends without reporting; `/stream-garbled` reports a failure.
type Feed = Arc<Mutex<Option<tokio::sync::mpsc::Receiver<&'static str>>>>;

fn streaming_shop(ledger: Arc<Ledger>, feed: Feed) -> Router {
    let metered = Price::upto(TOKEN.parse().unwrap(), "0.01", 6).unwrap();
    let layer = PaymentLayer::builder()
        .facilitator(ledger)
        .accept(metered.pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap()))
        .build()
        .unwrap();
    let stream = move |uri: http::Uri| {
        let feed = feed.clone();
        async move {
            let deferred = tollgate::DeferredCharge::new();
            let receiver = feed.lock().unwrap().take().expect("a feed for each streamed request");
            let reporting = deferred.clone();
            let chunks = futures_util::stream::unfold((receiver, 0u64), move |(mut receiver, sent)| {
                let (reporting, path) = (reporting.clone(), uri.path().to_owned());
                async move {
                    match receiver.recv().await {
                        Some(chunk) => Some((Ok::<_, std::convert::Infallible>(chunk), (receiver, sent + 1))),
                        None => {
                            match path.as_str() {
                                "/stream" => reporting.report(Charge::per_unit(sent, AtomicAmount(PER_WORD))),
                                "/stream-garbled" => reporting.fail("usage: lots"),
                                _ => {}
                            }
                            None
                        }
                    }
                }
            });
            (Extension(deferred), Body::from_stream(chunks))
        }
    };
    Router::new()
        .route("/stream", get(stream.clone()))
        .route("/stream-silent", get(stream.clone()))
        .route("/stream-garbled", get(stream))
        .route_layer(layer)
}

/// A new feed for the next streamed request: its sender.
fn feed(feed: &Feed) -> tokio::sync::mpsc::Sender<&'static str> {
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    *feed.lock().unwrap() = Some(receiver);
    sender
}

#[tokio::test]
async fn a_streamed_answer_reporting_its_charge_at_the_end_is_settled_once_for_it() {
    let ledger = Arc::new(Ledger::default());
    let chunks = Feed::default();
    let app = streaming_shop(ledger.clone(), chunks.clone());
    let offer = metered_offer(&app, "/stream").await;

    // Streamed as written: the first chunk arrives while the handler is still writing.
    let sender = feed(&chunks);
    let request = Request::get("/stream").header("host", "shop.example").header("te", "trailers");
    let proof = permit(&offer, 1, |_| {});
    let response =
        app.clone().oneshot(request.header("payment-signature", &proof).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["trailer"], "PAYMENT-RESPONSE");
    let mut body = response.into_body();
    sender.send("one ").await.unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "one ");
    assert!(ledger.settled().is_empty(), "nothing settled before the end");
    for chunk in ["two ", "three"] {
        sender.send(chunk).await.unwrap();
    }
    drop(sender);
    let rest = body.collect().await.unwrap();
    let trailers = rest.trailers().cloned().expect("the settlement as a trailer");
    assert_eq!(String::from_utf8(rest.to_bytes().to_vec()).unwrap(), "two three");
    assert_eq!(decode(trailers["payment-response"].to_str().unwrap())["amount"], "300");
    assert_eq!(ledger.settled(), vec![300], "3 chunks at 100");

    // Ending without a report, or with a failed one: nothing is settled.
    for path in ["/stream-silent", "/stream-garbled"] {
        let sender = feed(&chunks);
        sender.send("words").await.unwrap();
        drop(sender);
        let answer = call(&app, "GET", path, Some(&permit(&offer, 2, |_| {}))).await;
        assert_eq!((answer.status, answer.body.as_str()), (StatusCode::OK, "words"), "{path}");
        assert_eq!(ledger.settled(), vec![300], "{path}: nothing settled");
    }
}

#[tokio::test]
async fn a_buyer_hanging_up_mid_stream_is_charged_once_what_the_stream_reported() {
    let gate = Arc::new(Gate::default());
    let ledger = Arc::new(Ledger { gate: Some(gate.clone()), ..Ledger::default() });
    let chunks = Feed::default();
    let app = streaming_shop(ledger.clone(), chunks.clone());
    let offer = metered_offer(&app, "/stream").await;
    let proof = permit(&offer, 1, |_| {});

    let sender = feed(&chunks);
    let request = Request::get("/stream").header("host", "shop.example").header("payment-signature", &proof);
    let response = app.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let mut body = response.into_body();
    sender.send("one ").await.unwrap();
    assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "one ");
    // The buyer hangs up; the handler goes on writing and reports 4 chunks at its end.
    drop(body);
    for chunk in ["two ", "three ", "four"] {
        sender.send(chunk).await.unwrap();
    }
    drop(sender);
    gate.started.notified().await;
    gate.release.notify_one();
    tokio::time::timeout(std::time::Duration::from_secs(10), gate.done.notified())
        .await
        .expect("the stream's charge is settled after the buyer hung up");
    assert_eq!(ledger.settled(), vec![400], "what the stream reported, once");
}
