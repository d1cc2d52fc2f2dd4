//! The seller's side of x402 `batch-settlement` (`tollgate::Price::batch`) on a real anvil with
//! the contracts, through this facilitator over HTTP: a buyer's deposit and vouchers served and
//! charged, and what a cheating buyer tries refused before the handler runs — a voucher
//! replayed, lower than the last, signed by another key, for a channel paying someone else, in
//! another token, under another authorizer or withdrawal delay, or naming another channel; one
//! voucher sent twice at once (served once); then a cooperative refund that claims exactly what
//! was charged.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy::primitives::{Address, Uint};
use alloy::signers::local::PrivateKeySigner;
use axum::routing::get;
use base64::Engine as _;
use common::batch::World;
use serde_json::{Value, json};
use tollgate::batch::ChannelStore;
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_encoding::batch::ChannelConfig;
use tollgate_facilitator::plans::Plan;

/// A seller of two routes priced per request from channels (`/tick` 0.001, `/dear` 0.005, each
/// behind its own layer), a payer, and how many answers each handler made.
struct Seller {
    w: World,
    base: String,
    app: axum::Router,
    payer: PrivateKeySigner,
    config: ChannelConfig,
    served: Arc<AtomicUsize>,
    http: reqwest::Client,
    /// `/tick`'s handler waits for a permit when the test holds them back (hang-ups).
    gate: Arc<Gate>,
    /// The facilitator's URL, the seller's key and its wallet (another instance's shop).
    facilitator: String,
    key: String,
    wallet: String,
}

/// Holds `/tick`'s handler: it says when it started, and waits to be let go when closed.
#[derive(Default)]
struct Gate {
    closed: std::sync::atomic::AtomicBool,
    started: tokio::sync::Notify,
    open: tokio::sync::Notify,
}

async fn seller() -> Seller {
    seller_with(None).await
}

/// The seller, its layers keeping channels in `store` (by default the process's own).
async fn seller_with(store: Option<Arc<dyn ChannelStore>>) -> Seller {
    seller_of(store, false).await
}

/// The seller, its layers keeping channels in `store`, settling through the facilitator over
/// HTTP or, `in_process`, through its core in the seller's process.
async fn seller_of(store: Option<Arc<dyn ChannelStore>>, in_process: bool) -> Seller {
    let w = World::start().await;
    let (key, wallet, account) = w.t.customer_account().await;
    let receiver: Address = wallet.parse().unwrap();
    let authorizer = w.t.backend().signer.as_ref().unwrap().0.address();
    let payer = PrivateKeySigner::random();
    w.token.mint(&w.t, payer.address(), 1_000_000).await;
    // Vouchers signed by the payer's own key: checked by the layer in process.
    let config = w.config(payer.address(), payer.address(), receiver, authorizer, 7);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator = format!("http://{}", listener.local_addr().unwrap());
    let app = w.t.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let core = in_process.then(|| tollgate_facilitator::seller::InProcess::new(&w.t.state, &account, Plan::Premium));
    let layer = |amount: &str| match &core {
        Some(core) => layer_on(&w, core.clone(), (&wallet, amount), store.clone()),
        None => layer(&w, (&facilitator, &key, &wallet), amount, store.clone()),
    };
    let served = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Gate::default());
    let (count, held) = (served.clone(), gate.clone());
    let tick = move || {
        let (count, held) = (count.clone(), held.clone());
        async move {
            if held.closed.load(Ordering::SeqCst) {
                held.started.notify_one();
                held.open.notified().await;
            }
            format!("tick {}", count.fetch_add(1, Ordering::SeqCst) + 1)
        }
    };
    let count = served.clone();
    let dear = move || {
        let count = count.clone();
        async move { format!("dear {}", count.fetch_add(1, Ordering::SeqCst) + 1) }
    };
    let app = axum::Router::new()
        .route("/tick", get(tick).route_layer(layer("0.001")))
        .route("/dear", get(dear).route_layer(layer("0.005")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let served_app = app.clone();
    tokio::spawn(async move { axum::serve(listener, served_app).await });
    Seller { w, base, app, payer, config, served, http: reqwest::Client::new(), gate, facilitator, key, wallet }
}

/// A layer selling `amount` per request from channels kept in `store` (the process's own when
/// `None`), paid to `wallet` through the facilitator at `url` with `key`.
fn layer(
    w: &World,
    (url, key, wallet): (&str, &str, &str),
    amount: &str,
    store: Option<Arc<dyn ChannelStore>>,
) -> PaymentLayer {
    layer_on(w, FacilitatorClient::new(url, key), (wallet, amount), store)
}

/// A layer selling `amount` per request from channels paid to `wallet`, through `facilitator`.
fn layer_on(
    w: &World,
    facilitator: impl tollgate::facilitator::Facilitator + 'static,
    (wallet, amount): (&str, &str),
    store: Option<Arc<dyn ChannelStore>>,
) -> PaymentLayer {
    let price = Price::batch(w.token.address.to_string().parse().unwrap(), amount, 6)
        .unwrap()
        .pay_to(wallet.parse().unwrap())
        .on(w.t.network())
        .extra(json!({"name": common::evm::Token::NAME, "version": "2"}));
    let builder = PaymentLayer::builder().facilitator(facilitator).accept(price);
    match store {
        Some(store) => builder.channels(store),
        None => builder,
    }
    .build()
    .unwrap()
}

fn decode(header: &str) -> Value {
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap()
}

impl Seller {
    /// The requirement `path` offers (what a payload must accept, whole).
    async fn offer(&self, path: &str) -> Value {
        let answer = self.http.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert_eq!(answer.status(), 402);
        decode(answer.headers()["PAYMENT-REQUIRED"].to_str().unwrap())["accepts"][0].clone()
    }

    /// The `PAYMENT-SIGNATURE` header paying `path` with `payload`.
    async fn header(&self, path: &str, payload: Value) -> String {
        let header = json!({"x402Version": 2, "accepted": self.offer(path).await, "payload": payload});
        base64::engine::general_purpose::STANDARD.encode(header.to_string())
    }

    /// Sends `payload` for `/tick`: (status, body, the decoded PAYMENT-REQUIRED or
    /// PAYMENT-RESPONSE header).
    async fn pay(&self, payload: Value) -> (u16, String, Value) {
        self.pay_for("/tick", payload).await
    }

    async fn pay_for(&self, path: &str, payload: Value) -> (u16, String, Value) {
        let encoded = self.header(path, payload).await;
        let answer =
            self.http.get(format!("{}{path}", self.base)).header("PAYMENT-SIGNATURE", encoded).send().await.unwrap();
        let status = answer.status().as_u16();
        let said = ["PAYMENT-RESPONSE", "PAYMENT-REQUIRED"]
            .iter()
            .find_map(|h| answer.headers().get(*h))
            .map(|v| decode(v.to_str().unwrap()))
            .unwrap_or(Value::Null);
        (status, answer.text().await.unwrap(), said)
    }

    fn voucher(&self, config: &ChannelConfig, key: &PrivateKeySigner, max: u128) -> Value {
        self.w.voucher_payload(config, key, max)
    }

    /// Opens the channel: a deposit of 10,000 with the first voucher, for `/tick`.
    async fn open(&self) {
        let deposit = self.w.deposit_payload(&self.config, &self.payer, &self.payer, (10_000, 1_000), 1);
        let (status, _, said) = self.pay(deposit).await;
        assert_eq!(status, 200, "{said}");
    }
}

/// Waits (30 s at most) until channel `id` holds `(balance, claimed)` on chain.
async fn claimed_on_chain(w: &World, id: alloy::primitives::B256, expected: (u128, u128)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while w.channel(id).await != expected {
        assert!(std::time::Instant::now() < deadline, "the charges are not claimed: {:?}", w.channel(id).await);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn reason(said: &Value) -> &str {
    said["error"].as_str().or_else(|| said["errorReason"].as_str()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_serves_each_voucher_once_and_refuses_what_a_buyer_cheats_with() {
    let s = seller().await;
    let w = &s.w;
    let (payer, config) = (&s.payer, &s.config);

    // The deposit (10 requests' worth) with the first voucher: settled, served, charged.
    let deposit = w.deposit_payload(config, payer, payer, (10_000, 1_000), 1);
    let (status, body, said) = s.pay(deposit).await;
    assert_eq!((status, body.as_str()), (200, "tick 1"), "{said}");
    assert_eq!(said["extra"]["chargedAmount"], "1000", "{said}");
    assert_eq!(said["extra"]["channelState"]["balance"], "10000", "{said}");
    assert!(said["transaction"].as_str().unwrap().starts_with("0x"));

    // The next voucher: checked in process, served.
    let (status, _, said) = s.pay(s.voucher(config, payer, 2_000)).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "2000", "{said}");

    // Replayed, or lower than the last: the corrective 402 with the seller's count.
    for max in [2_000, 1_500] {
        let (status, _, said) = s.pay(s.voucher(config, payer, max)).await;
        assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_cumulative_amount_mismatch"));
        let state = &said["accepts"][0]["extra"];
        assert_eq!(state["channelState"]["chargedCumulativeAmount"], "2000", "{said}");
        assert_eq!(state["voucherState"]["signedMaxClaimable"], "2000", "{said}");
    }
    // Signed by another key.
    let stranger = PrivateKeySigner::random();
    let (status, _, said) = s.pay(s.voucher(config, &stranger, 3_000)).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_voucher_signature"));
    // The payer's own signature with v as 0 or 1 (attacker finding): recoverable off chain, but the
    // contract refuses it, so it could never be claimed. Refused before serving.
    let mut parity = s.voucher(config, payer, 3_000);
    let signature = parity["voucher"]["signature"].as_str().unwrap().to_owned();
    let v = u8::from_str_radix(&signature[130..], 16).unwrap() - 27;
    parity["voucher"]["signature"] = json!(format!("{}{v:02x}", &signature[..130]));
    let (status, _, said) = s.pay(parity).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_voucher_signature"), "{said}");
    // Channels of other terms than the seller's.
    let mut other = config.clone();
    other.receiver = stranger.address();
    let mut token = config.clone();
    token.token = stranger.address();
    let mut authorizer = config.clone();
    authorizer.receiverAuthorizer = stranger.address();
    let mut delay = config.clone();
    delay.withdrawDelay = Uint::from(1_800u64);
    for (c, why) in [
        (&other, "invalid_batch_settlement_evm_receiver_mismatch"),
        (&token, "invalid_batch_settlement_evm_token_mismatch"),
        (&authorizer, "invalid_batch_settlement_evm_receiver_authorizer_mismatch"),
        (&delay, "invalid_batch_settlement_evm_withdraw_delay_mismatch"),
    ] {
        let (status, _, said) = s.pay(s.voucher(c, payer, 3_000)).await;
        assert_eq!((status, reason(&said)), (402, why), "{said}");
    }
    // A voucher naming another channel than its configuration's, or its channel on another chain.
    let elsewhere = format!("{:#x}", config.id(w.chain() + 1));
    for id in [format!("0x{}", "ab".repeat(32)), elsewhere] {
        let mut named = s.voucher(config, payer, 3_000);
        named["voucher"]["channelId"] = json!(id);
        let (status, _, said) = s.pay(named).await;
        assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_channel_id_mismatch"));
    }
    assert_eq!(s.served.load(Ordering::SeqCst), 2, "nothing refused reached the handler");

    // One voucher sent twice at once: served once.
    let next = s.voucher(config, payer, 3_000);
    let (a, b) = tokio::join!(s.pay(next.clone()), s.pay(next));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 402], "{a:?} {b:?}");
    assert_eq!(s.served.load(Ordering::SeqCst), 3);

    // The buyer's refund: what was charged (3 × 1000) is claimed, the rest returned at once.
    let before = w.token.balance(&w.t, payer.address()).await;
    let refund = json!({"type": "refund", "channelConfig": s.voucher(config, payer, 3_000)["channelConfig"], "voucher": s.voucher(config, payer, 3_000)["voucher"]});
    let (status, body, said) = s.pay(refund.clone()).await;
    assert_eq!(status, 200, "{body} {said}");
    assert_eq!(w.token.balance(&w.t, payer.address()).await - before, 7_000);
    assert_eq!(
        w.channel(config.id(w.chain())).await,
        (3_000, 3_000),
        "balance and claimed: the charges stay for the seller"
    );
    // Sent again: nothing is left to refund.
    let (status, _, said) = s.pay(refund).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_refund_no_balance"), "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 3, "a refund is never served");
}

const MISMATCH: &str = "invalid_batch_settlement_evm_cumulative_amount_mismatch";

/// A seller running the facilitator's core in its own process (`InProcess`, no HTTP hop, no
/// key) sells from channels as one on the HTTP API does: the deposit settled by the core, the
/// vouchers checked in process, a replay refused with the seller's count, and the refund that
/// claims what was charged and returns the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seller_with_the_core_in_process_sells_from_channels_as_over_http() {
    let s = seller_of(None, true).await;
    let (w, payer, config) = (&s.w, &s.payer, &s.config);
    let deposit = w.deposit_payload(config, payer, payer, (10_000, 1_000), 1);
    let (status, body, said) = s.pay(deposit).await;
    assert_eq!((status, body.as_str()), (200, "tick 1"), "{said}");
    assert!(said["transaction"].as_str().unwrap().starts_with("0x"), "{said}");
    assert_eq!(said["extra"]["channelState"]["balance"], "10000", "{said}");
    let (status, _, said) = s.pay(s.voucher(config, payer, 2_000)).await;
    assert_eq!(status, 200, "{said}");
    let (status, _, said) = s.pay(s.voucher(config, payer, 2_000)).await;
    assert_eq!((status, reason(&said)), (402, MISMATCH), "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 2);

    let before = w.token.balance(&w.t, payer.address()).await;
    let voucher = s.voucher(config, payer, 2_000);
    let refund = json!({"type": "refund", "channelConfig": voucher["channelConfig"], "voucher": voucher["voucher"]});
    let (status, body, said) = s.pay(refund).await;
    assert_eq!(status, 200, "{body} {said}");
    assert_eq!(w.token.balance(&w.t, payer.address()).await - before, 8_000);
    assert_eq!(w.channel(config.id(w.chain())).await, (2_000, 2_000), "the two charges stay for the seller");
}

/// One channel paying two routes of the seller (two layers) is counted once: a voucher for the
/// dearer route that leaves out what the cheaper one charged is refused with the seller's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_channel_paying_two_routes_is_counted_once() {
    let s = seller().await;
    s.open().await;
    let (status, _, said) = s.pay_for("/dear", s.voucher(&s.config, &s.payer, 5_000)).await;
    assert_eq!((status, reason(&said)), (402, MISMATCH), "{said}");
    assert_eq!(said["accepts"][0]["extra"]["channelState"]["chargedCumulativeAmount"], "1000", "{said}");
    let (status, body, said) = s.pay_for("/dear", s.voucher(&s.config, &s.payer, 6_000)).await;
    assert_eq!((status, body.as_str()), (200, "dear 2"), "{said}");
    assert_eq!(said["extra"]["chargedAmount"], "5000", "{said}");
    let (status, _, said) = s.pay(s.voucher(&s.config, &s.payer, 7_000)).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "7000", "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 3);
}

/// A channel store that fails the next write when told to.
#[derive(Debug, Default)]
struct Faulty {
    inner: tollgate::batch::MemoryChannels,
    fail_next: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl ChannelStore for Faulty {
    async fn get(
        &self,
        id: &str,
    ) -> Result<Option<tollgate::batch::ChannelRecord>, tollgate::batch::ChannelStoreError> {
        self.inner.get(id).await
    }
    async fn put(
        &self,
        record: &tollgate::batch::ChannelRecord,
        expected: Option<u64>,
    ) -> Result<bool, tollgate::batch::ChannelStoreError> {
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(tollgate::batch::ChannelStoreError("the disk is full".into()));
        }
        self.inner.put(record, expected).await
    }
    async fn all(&self) -> Result<Vec<tollgate::batch::ChannelRecord>, tollgate::batch::ChannelStoreError> {
        self.inner.all().await
    }
}

/// The channel store fails between the chain and the answer: after a deposit landed, and after
/// the handler served. The answer is withheld (503) and nothing is charged; the buyer's retry is
/// served and charged once, and the deposit made once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_withholds_the_answer_and_the_retry_is_charged_once() {
    let faulty = Arc::new(Faulty::default());
    let s = seller_with(Some(faulty.clone())).await;
    let (w, id) = (&s.w, s.config.id(s.w.chain()));
    let deposit = w.deposit_payload(&s.config, &s.payer, &s.payer, (10_000, 1_000), 1);
    faulty.fail_next.store(true, Ordering::SeqCst);
    let (status, _, _) = s.pay(deposit.clone()).await;
    assert_eq!(status, 503);
    assert_eq!(s.served.load(Ordering::SeqCst), 0, "nothing served without a record");
    assert_eq!(w.channel(id).await, (10_000, 0), "the deposit landed");
    let (status, body, said) = s.pay(deposit).await;
    assert_eq!((status, body.as_str()), (200, "tick 1"), "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "1000", "{said}");
    assert_eq!(w.channel(id).await, (10_000, 0), "deposited once");

    faulty.fail_next.store(true, Ordering::SeqCst);
    let (status, body, _) = s.pay(s.voucher(&s.config, &s.payer, 2_000)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(s.served.load(Ordering::SeqCst), 2, "the handler ran; its answer was withheld");
    let (status, body, said) = s.pay(s.voucher(&s.config, &s.payer, 2_000)).await;
    assert_eq!((status, body.as_str()), (200, "tick 3"), "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "2000", "charged once: {said}");
}

/// A buyer hanging up while its request is served: nothing is charged, and the same voucher
/// sent again is served and charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_hanging_up_before_its_answer_is_not_charged_and_its_retry_is_charged_once() {
    use tower::ServiceExt as _;
    let s = seller().await;
    s.open().await;
    s.gate.closed.store(true, Ordering::SeqCst);
    let header = s.header("/tick", s.voucher(&s.config, &s.payer, 2_000)).await;
    let request =
        http::Request::get("/tick").header("PAYMENT-SIGNATURE", header).body(axum::body::Body::empty()).unwrap();
    let buyer = tokio::spawn(s.app.clone().oneshot(request));
    s.gate.started.notified().await;
    buyer.abort();
    assert!(buyer.await.unwrap_err().is_cancelled());
    s.gate.closed.store(false, Ordering::SeqCst);
    let (status, body, said) = s.pay(s.voucher(&s.config, &s.payer, 2_000)).await;
    assert_eq!((status, body.as_str()), (200, "tick 2"), "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "2000", "{said}");
}

/// Vouchers up to the deposit are served; one above it is refused, and nothing more is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voucher_above_what_the_channel_holds_is_refused() {
    let s = seller().await;
    s.open().await;
    for n in 2..=10u128 {
        let (status, _, said) = s.pay(s.voucher(&s.config, &s.payer, n * 1_000)).await;
        assert_eq!(status, 200, "{said}");
    }
    let (status, _, said) = s.pay(s.voucher(&s.config, &s.payer, 11_000)).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_cumulative_exceeds_balance"), "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 10);
}

/// The buyer starts a timed withdrawal and keeps spending. The layer learns it from the chain
/// (vouchers the payer signs itself are checked by the facilitator, which reads the channel)
/// and claims at once: the charges are claimed long before the withdrawal could complete, not
/// at the next claim period (5 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_started_while_spending_is_claimed_at_once() {
    use tollgate_encoding::batch::BatchSettlement as Contract;
    let s = seller_with(Some(Arc::new(tollgate::batch::MemoryChannels::new()))).await;
    let (w, payer) = (&s.w, &s.payer);
    let config = w.config(payer.address(), Address::ZERO, s.config.receiver, s.config.receiverAuthorizer, 8);
    let id = config.id(w.chain());
    let deposit = w.deposit_payload(&config, payer, payer, (10_000, 1_000), 2);
    assert_eq!(s.pay(deposit).await.0, 200);
    w.t.fund(&payer.address().to_string(), common::evm::ETH).await;
    assert!(w.send(payer, &Contract::initiateWithdrawCall { config: config.clone(), amount: 10_000 }).await);
    let (status, _, said) = s.pay(s.voucher(&config, payer, 2_000)).await;
    assert_eq!(status, 200, "{said}");
    assert_ne!(said["extra"]["channelState"]["withdrawRequestedAt"], 0, "{said}");
    claimed_on_chain(w, id, (10_000, 2_000)).await;
}

/// A payer withdraws all it can while the layer's state of its channel is fresh (attacker
/// finding: vouchers above what the channel kept were served from that state, and could never be
/// claimed). The layer knows the withdrawal (its top-up's answer said so), claims at once, and
/// reads a withdrawing channel again at every request: once the withdrawal completes, a voucher
/// above what is left is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_withdrawal_is_never_served_past_from_a_fresh_state() {
    use tollgate_encoding::batch::BatchSettlement as Contract;
    let s = seller_with(Some(Arc::new(tollgate::batch::MemoryChannels::new()))).await;
    let (w, payer) = (&s.w, &s.payer);
    // Vouchers signed by the payer's own key: checked by the layer in process while fresh.
    let config = w.config(payer.address(), payer.address(), s.config.receiver, s.config.receiverAuthorizer, 9);
    let id = config.id(w.chain());
    assert_eq!(s.pay(w.deposit_payload(&config, payer, payer, (5_000, 1_000), 3)).await.0, 200);
    w.t.fund(&payer.address().to_string(), common::evm::ETH).await;
    assert!(w.send(payer, &Contract::initiateWithdrawCall { config: config.clone(), amount: 5_000 }).await);
    // A top-up: settled by the facilitator, whose answer names the pending withdrawal.
    let (status, _, said) = s.pay(w.deposit_payload(&config, payer, payer, (1_000, 2_000), 4)).await;
    assert_eq!(status, 200, "{said}");
    claimed_on_chain(w, id, (6_000, 2_000)).await;
    w.wait(901).await;
    assert!(w.send(payer, &Contract::finalizeWithdrawCall { config: config.clone() }).await);
    assert_eq!(w.channel(id).await, (2_000, 2_000), "what was left went back; the claimed 2,000 stay");
    let served = s.served.load(Ordering::SeqCst);
    let (status, _, said) = s.pay(s.voucher(&config, payer, 3_000)).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_cumulative_exceeds_balance"), "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), served, "nothing served that could not be claimed");
}

/// One channel the claimer cannot claim (attacker finding: a bad row refused the whole batch,
/// every pass, and kept every other channel of the seller unclaimed): the batch refused, each
/// channel is claimed alone, and the good one is claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_that_cannot_be_claimed_keeps_no_other_unclaimed() {
    use tollgate_encoding::batch::BatchSettlement as Contract;
    let store = Arc::new(tollgate::batch::MemoryChannels::new());
    let s = seller_with(Some(store.clone())).await;
    let (w, payer) = (&s.w, &s.payer);
    // A record of a channel nobody funded, charged 5,000 under a voucher nobody signed, its
    // payer withdrawing (so that it is claimed at once too).
    let stranger = PrivateKeySigner::random();
    let bad = w.config(stranger.address(), stranger.address(), s.config.receiver, s.config.receiverAuthorizer, 10);
    let bad_id = format!("{:#x}", bad.id(w.chain()));
    let requirement: tollgate::protocol::x402::PaymentRequirements =
        serde_json::from_value(s.offer("/tick").await).unwrap();
    let record = tollgate::batch::ChannelRecord {
        channel_id: bad_id.clone(),
        config: serde_json::from_value(common::batch::config_json(&bad)).unwrap(),
        requirement,
        charged: tollgate::protocol::AtomicAmount(5_000),
        voucher: Some(tollgate::protocol::x402::batch::VoucherState {
            signed_max_claimable: tollgate::protocol::AtomicAmount(5_000),
            signature: format!("0x{}1b", "11".repeat(64)),
        }),
        chain: tollgate::protocol::x402::batch::ChannelState {
            channel_id: bad_id,
            balance: tollgate::protocol::AtomicAmount(5_000),
            total_claimed: tollgate::protocol::AtomicAmount(0),
            withdraw_requested_at: 1,
            refund_nonce: tollgate::protocol::AtomicAmount(0),
            charged_cumulative_amount: None,
        },
        synced_at: 0,
        refunding_since: 0,
        version: 0,
    };
    assert!(store.put(&record, None).await.unwrap());

    // A good channel, whose payer starts a withdrawal and spends: claimed at once.
    let config = w.config(payer.address(), Address::ZERO, s.config.receiver, s.config.receiverAuthorizer, 11);
    let id = config.id(w.chain());
    assert_eq!(s.pay(w.deposit_payload(&config, payer, payer, (10_000, 1_000), 5)).await.0, 200);
    w.t.fund(&payer.address().to_string(), common::evm::ETH).await;
    assert!(w.send(payer, &Contract::initiateWithdrawCall { config: config.clone(), amount: 10_000 }).await);
    assert_eq!(s.pay(s.voucher(&config, payer, 2_000)).await.0, 200);
    claimed_on_chain(w, id, (10_000, 2_000)).await;
}

/// The resource a deposit is recorded for is the one the seller names, never the one the buyer's
/// payload says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_is_recorded_for_the_sellers_resource_not_the_buyers() {
    let s = seller().await;
    let deposit = s.w.deposit_payload(&s.config, &s.payer, &s.payer, (10_000, 1_000), 1);
    let header = json!({"x402Version": 2, "accepted": s.offer("/tick").await, "payload": deposit,
        "resource": {"url": "https://elsewhere.example/free", "description": "", "mimeType": ""}});
    let encoded = base64::engine::general_purpose::STANDARD.encode(header.to_string());
    let url = format!("{}/tick", s.base);
    let answer = s.http.get(&url).header("PAYMENT-SIGNATURE", encoded).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let path = format!("/payment/history/{}?type=sent", s.payer.address());
    let (_, history) = s.w.t.call("GET", &path, &s.key, None).await;
    assert_eq!(history["payments"][0]["resource"], url.as_str(), "{history}");
}

/// Two instances of the seller share the channels through Redis (each its own store object and
/// lock, as two processes would have): a voucher charged on one is known to the other, and one
/// voucher sent to both at once is served once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_sharing_channels_through_redis_serve_each_voucher_once() {
    let Some(url) = common::process::redis_url("two_instances_sharing_channels_through_redis") else { return };
    let prefix = format!("tollgate-test-{}", rand::random::<u64>());
    let first: Arc<dyn ChannelStore> = Arc::new(tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap());
    let s = seller_with(Some(first)).await;
    let second: Arc<dyn ChannelStore> = Arc::new(tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap());
    let other = layer(&s.w, (&s.facilitator, &s.key, &s.wallet), "0.001", Some(second));
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let app = axum::Router::new()
        .route(
            "/tick",
            get(move || {
                let count = count.clone();
                async move { format!("other {}", count.fetch_add(1, Ordering::SeqCst) + 1) }
            }),
        )
        .route_layer(other);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second_url = format!("http://{}/tick", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let pay_second = |payload: Value| {
        let (http, url, header) = (s.http.clone(), second_url.clone(), s.header("/tick", payload));
        async move {
            let answer = http.get(url).header("PAYMENT-SIGNATURE", header.await).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };

    s.open().await;
    // The next voucher on the other instance: it knows what the first charged.
    assert_eq!(pay_second(s.voucher(&s.config, &s.payer, 1_000)).await.0, 402, "a replay on the other instance");
    assert_eq!(pay_second(s.voucher(&s.config, &s.payer, 2_000)).await, (200, "other 1".to_owned()));
    // One voucher sent to both at once: served once.
    let next = s.voucher(&s.config, &s.payer, 3_000);
    let (a, b) = tokio::join!(s.pay(next.clone()), pay_second(next));
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 402], "{a:?} {b:?}");
    // (Both handlers may have run; the loser's answer was withheld and nothing charged for it.)
    let (status, _, said) = s.pay(s.voucher(&s.config, &s.payer, 4_000)).await;
    assert_eq!(status, 200, "{said}");
    assert_eq!(said["extra"]["channelState"]["chargedCumulativeAmount"], "4000", "{said}");
}

/// A refund under way on one instance closes the channel on every instance sharing the store:
/// the refund claims the count it read, so a voucher charged meanwhile elsewhere would never be
/// claimable. (The refund is held mid-way here by writing its mark into the shared store, as an
/// instance does before it asks the facilitator.) A mark left by an instance that died mid-refund
/// closes the channel for the window only; then the chain is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_under_way_on_one_instance_closes_the_channel_on_the_others() {
    let Some(url) = common::process::redis_url("a_refund_under_way_on_one_instance") else { return };
    let prefix = format!("tollgate-test-{}", rand::random::<u64>());
    let shared = tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap();
    let s = seller_with(Some(Arc::new(tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap()))).await;
    let (config, payer) = (&s.config, &s.payer);
    let id = format!("{:#x}", config.id(s.w.chain()));
    s.open().await;
    assert_eq!(s.pay(s.voucher(config, payer, 2_000)).await.0, 200);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mark = |since: u64| {
        let (shared, id) = (&shared, &id);
        async move {
            let record = shared.get(id).await.unwrap().unwrap();
            let marked = tollgate::batch::ChannelRecord { refunding_since: since, ..record.clone() };
            assert!(shared.put(&marked, Some(record.version)).await.unwrap());
        }
    };

    // Another instance started a refund (it read a count of 2,000).
    mark(now).await;
    let (status, _, said) = s.pay(s.voucher(config, payer, 3_000)).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_channel_busy"), "{said}");
    let refund = json!({"type": "refund", "channelConfig": s.voucher(config, payer, 2_000)["channelConfig"], "voucher": s.voucher(config, payer, 2_000)["voucher"]});
    let (status, _, said) = s.pay(refund.clone()).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_channel_busy"), "a second refund: {said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 2, "nothing served while the refund may land");

    // That instance died before the refund was sent: past the window, the chain (which shows no
    // refund) is read again, and the channel serves.
    mark(now - tollgate::batch::REFUND_WINDOW.as_secs() - 1).await;
    let (status, body, said) = s.pay(s.voucher(config, payer, 3_000)).await;
    assert_eq!(status, 200, "{body} {said}");
    assert_eq!(shared.get(&id).await.unwrap().unwrap().refunding_since, 0, "the stale mark is cleared");

    // A refund through this instance opens the channel again once it landed, and what it left
    // is all the channel holds: a voucher above it is refused.
    let refund = json!({"type": "refund", "channelConfig": s.voucher(config, payer, 3_000)["channelConfig"], "voucher": s.voucher(config, payer, 3_000)["voucher"]});
    let (status, body, said) = s.pay(refund).await;
    assert_eq!(status, 200, "{body} {said}");
    let record = shared.get(&id).await.unwrap().unwrap();
    assert_eq!((record.refunding_since, record.chain.balance.get(), record.charged.get()), (0, 3_000, 3_000));
    let (status, _, said) = s.pay(s.voucher(config, payer, 4_000)).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_cumulative_exceeds_balance"), "{said}");
    assert_eq!(s.served.load(Ordering::SeqCst), 3);
}

/// The same refund sent to two instances sharing the store at once: one refunds, the other is
/// refused, and the payer gets the rest back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refund_sent_to_two_instances_at_once_refunds_once() {
    let Some(url) = common::process::redis_url("one_refund_sent_to_two_instances_at_once") else { return };
    let prefix = format!("tollgate-test-{}", rand::random::<u64>());
    let first: Arc<dyn ChannelStore> = Arc::new(tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap());
    let s = seller_with(Some(first)).await;
    let second: Arc<dyn ChannelStore> = Arc::new(tollgate::batch::RedisChannels::connect(&url, &prefix).await.unwrap());
    let other = layer(&s.w, (&s.facilitator, &s.key, &s.wallet), "0.001", Some(second));
    let app = axum::Router::new().route("/tick", get(|| async { "other" })).route_layer(other);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second_url = format!("http://{}/tick", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (config, payer) = (&s.config, &s.payer);
    s.open().await;
    assert_eq!(s.pay(s.voucher(config, payer, 2_000)).await.0, 200);

    let before = s.w.token.balance(&s.w.t, payer.address()).await;
    let refund = json!({"type": "refund", "channelConfig": s.voucher(config, payer, 2_000)["channelConfig"], "voucher": s.voucher(config, payer, 2_000)["voucher"]});
    let on_second = {
        let (http, url, header) = (s.http.clone(), second_url.clone(), s.header("/tick", refund.clone()).await);
        async move { http.get(url).header("PAYMENT-SIGNATURE", header).send().await.unwrap().status().as_u16() }
    };
    let (a, b) = tokio::join!(s.pay(refund.clone()), on_second);
    let mut statuses = [a.0, b];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 402], "{a:?} {b}");
    assert_eq!(s.w.token.balance(&s.w.t, payer.address()).await - before, 8_000, "the rest, returned once");
    assert_eq!(s.w.channel(config.id(s.w.chain())).await, (2_000, 2_000), "the charges stay for the seller");
}
