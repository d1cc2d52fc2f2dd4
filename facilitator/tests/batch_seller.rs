//! The seller's side of x402 `batch-settlement` (`tollgate::Price::batch`) on a real anvil with
//! the contracts, through this facilitator over HTTP: a buyer's deposit and vouchers served and
//! charged, and what a cheating buyer tries refused before the handler runs — a voucher
//! replayed, lower than the last, signed by another key, for a channel paying someone else, in
//! another token, under another authorizer or withdrawal delay, or naming another channel; one
//! voucher sent twice at once (served once); then a cooperative refund that claims exactly what
//! was charged.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy::primitives::{Address, Uint};
use alloy::signers::local::PrivateKeySigner;
use axum::routing::get;
use base64::Engine as _;
use common::batch::World;
use serde_json::{Value, json};
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_encoding::batch::ChannelConfig;

/// A seller behind the layer, a payer, and what the handler served.
struct Seller {
    w: World,
    url: String,
    payer: PrivateKeySigner,
    config: ChannelConfig,
    served: Arc<AtomicUsize>,
    http: reqwest::Client,
}

async fn seller() -> Seller {
    let w = World::start().await;
    let (key, wallet) = w.t.customer().await;
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

    let price = Price::batch(w.token.address.to_string().parse().unwrap(), "0.001", 6)
        .unwrap()
        .pay_to(wallet.parse().unwrap())
        .on(w.t.network())
        .extra(json!({"name": common::evm::Token::NAME, "version": "2"}));
    let layer =
        PaymentLayer::builder().facilitator(FacilitatorClient::new(&facilitator, &key)).accept(price).build().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let handler = move || {
        let count = count.clone();
        async move { format!("tick {}", count.fetch_add(1, Ordering::SeqCst) + 1) }
    };
    let app = axum::Router::new().route("/tick", get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tick", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Seller { w, url, payer, config, served, http: reqwest::Client::new() }
}

fn decode(header: &str) -> Value {
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(header).unwrap()).unwrap()
}

impl Seller {
    /// The requirement the layer offers (what a payload must accept, whole).
    async fn offer(&self) -> Value {
        let answer = self.http.get(&self.url).send().await.unwrap();
        assert_eq!(answer.status(), 402);
        decode(answer.headers()["PAYMENT-REQUIRED"].to_str().unwrap())["accepts"][0].clone()
    }

    /// Sends `payload` for the offer: (status, body, the decoded PAYMENT-REQUIRED or
    /// PAYMENT-RESPONSE header).
    async fn pay(&self, payload: Value) -> (u16, String, Value) {
        let header = json!({"x402Version": 2, "accepted": self.offer().await, "payload": payload});
        let encoded = base64::engine::general_purpose::STANDARD.encode(header.to_string());
        let answer = self.http.get(&self.url).header("PAYMENT-SIGNATURE", encoded).send().await.unwrap();
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
    // A voucher naming another channel than its configuration's.
    let mut named = s.voucher(config, payer, 3_000);
    named["voucher"]["channelId"] = json!(format!("0x{}", "ab".repeat(32)));
    let (status, _, said) = s.pay(named).await;
    assert_eq!((status, reason(&said)), (402, "invalid_batch_settlement_evm_channel_id_mismatch"));
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
