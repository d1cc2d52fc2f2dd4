//! Passes bound to the wallet that paid (x402 `sign-in-with-x`), through the seller layer on the
//! facilitator core in process: real payments on the embedded Solana ledger and on anvil, real
//! signatures. The payer signs in during its pass and is served without paying; a copied payment
//! header, a stranger's wallet, a replayed message, another domain, another key's signature and
//! an expired pass are refused with their reasons. On EVM, an EIP-1271 contract wallet signs in
//! through its owner's key.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::Address as EvmAddress;
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate::{Payment, PaymentLayer, Price};
use tollgate_facilitator::chains::solana::embedded;
use tollgate_facilitator::clock::ManualClock;
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::seller::InProcess;
use tollgate_facilitator::store::AccountStore as _;
use tollgate_protocol::siwx::{self, Declaration, SignIn};
use tower::ServiceExt as _;

use common::evm::{EvmApp, Token};
use common::solana::{SolanaApp, signed_proof};

/// A shop selling one hour of `/report` (and `/other`, another scope) for `price`; its handler
/// says who it served and on which pass.
fn shop(facilitator: InProcess, price: Price) -> Router {
    let layer = PaymentLayer::builder()
        .facilitator(facilitator)
        .accept(price.pass(Duration::from_secs(3_600)))
        .resource_base("https://shop.test")
        .build()
        .unwrap();
    let handler = |axum::Extension(p): axum::Extension<Payment>| async move {
        axum::Json(json!({"payer": p.payer, "paymentId": p.payment_id, "passUntil": p.pass_until}))
    };
    Router::new().route("/report", get(handler)).route("/other", get(handler)).route_layer(layer)
}

async fn call(shop: &Router, path: &str, header: Option<(&str, &str)>) -> (StatusCode, http::HeaderMap, String) {
    let mut request = Request::builder().uri(path);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let response = shop.clone().oneshot(request.body(axum::body::Body::empty()).unwrap()).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// The v2 payment request of `path`.
async fn required(shop: &Router, path: &str) -> Value {
    let (status, headers, _) = call(shop, path, None).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    tollgate_protocol::x402::header::decode(headers["payment-required"].to_str().unwrap()).unwrap()
}

/// A signed answer to `required`'s sign-in challenge by `address`, `edit`ed before it is signed
/// with `sign`, as its `SIGN-IN-WITH-X` header.
fn sign_in(
    required: &Value,
    address: String,
    edit: impl FnOnce(&mut SignIn),
    sign: impl FnOnce(&str) -> String,
) -> String {
    let declared: Declaration = serde_json::from_value(required["extensions"][siwx::EXTENSION].clone()).unwrap();
    let mut answer = SignIn::answer(&declared.info, &declared.supported_chains[0], address, String::new());
    edit(&mut answer);
    answer.signature = sign(&siwx::message(&answer).unwrap());
    answer.to_header()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solana_pass_serves_its_payer_who_signs_in_and_nobody_else() {
    let clock = ManualClock::new(chrono::Utc::now());
    let t = SolanaApp::start_at(Arc::new(clock.clone())).await;
    t.store.create_account("acct_shop", chrono::Utc::now()).await.ok();
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let seller = Keypair::new().pubkey();
    let price =
        Price::native_sol("0.01").unwrap().on(rpc.network().clone()).pay_to(seller.to_string().parse().unwrap());
    let shop = shop(InProcess::new(&t.state, "acct_shop", Plan::Premium), price);

    // The 402 sells the pass and declares the sign-in, bound to the configured origin.
    let offer = required(&shop, "/report").await;
    assert_eq!(offer["accepts"][0]["extra"]["pass"]["seconds"], 3_600);
    let declared = &offer["extensions"][siwx::EXTENSION];
    assert_eq!(
        (declared["info"]["domain"].as_str(), declared["info"]["uri"].as_str()),
        (Some("shop.test"), Some("https://shop.test/report"))
    );
    assert_eq!(declared["supportedChains"][0], json!({"chainId": rpc.network().to_string(), "type": "ed25519"}));
    assert_ne!(
        required(&shop, "/report").await["extensions"][siwx::EXTENSION]["info"]["nonce"],
        declared["info"]["nonce"],
        "a fresh nonce each time"
    );

    // Bought: served once with the payment.
    let buyer = Keypair::new();
    embedded::fund(rpc, &buyer).await.unwrap();
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let paid = signed_proof(&rpc.network().to_string(), &buyer, &seller, 10_000_000, blockhash);
    let (status, _, body) = call(&shop, "/report", Some(("x-payment", &paid))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(t.lamports(&seller.to_string()).await, 10_000_000);
    // A copy of its header, presented again: a pass's payment serves one answer.
    let (status, _, body) = call(&shop, "/report", Some(("x-payment", &paid))).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert!(body.contains("served the 1 answer it buys"), "{body}");

    // The payer signs in: served, without paying, on its pass.
    let me = buyer.pubkey().to_string();
    fn sign(key: &Keypair) -> impl FnOnce(&str) -> String + '_ {
        move |message: &str| key.sign_message(message.as_bytes()).to_string()
    }
    let signed = sign_in(&required(&shop, "/report").await, me.clone(), |_| {}, sign(&buyer));
    let (status, _, body) = call(&shop, "/report", Some((siwx::HEADER, &signed))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let served: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served["payer"], me.as_str());
    assert!(served["passUntil"].as_i64().unwrap() > chrono::Utc::now().timestamp() + 3_500, "{served}");

    // Refused, each with its reason.
    let refused = |body: &str, why: &str| assert!(body.contains(why), "{why}: {body}");
    let (status, _, body) = call(&shop, "/report", Some((siwx::HEADER, &signed))).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "a replayed message");
    refused(&body, "used before");
    let stranger = Keypair::new();
    let theirs = sign_in(&required(&shop, "/report").await, stranger.pubkey().to_string(), |_| {}, sign(&stranger));
    refused(&call(&shop, "/report", Some((siwx::HEADER, &theirs))).await.2, "holds no pass");
    let elsewhere = sign_in(
        &required(&shop, "/report").await,
        me.clone(),
        |s| {
            s.domain = "evil.test".into();
            s.uri = "https://evil.test/report".into();
        },
        sign(&buyer),
    );
    refused(&call(&shop, "/report", Some((siwx::HEADER, &elsewhere))).await.2, "signed for evil.test");
    let forged = sign_in(&required(&shop, "/report").await, me.clone(), |_| {}, sign(&stranger));
    refused(&call(&shop, "/report", Some((siwx::HEADER, &forged))).await.2, "invalid_siwx_signature");
    // A field spanning lines could pass for the fields after it (one signed text, two readings):
    // no message is written from it, so it is refused before any signature is read.
    let signed = sign_in(&required(&shop, "/report").await, me.clone(), |_| {}, sign(&buyer));
    let mut split = SignIn::from_header(&signed).unwrap();
    split.statement = Some("Sign in\nURI: https://evil.test/report".into());
    refused(&call(&shop, "/report", Some((siwx::HEADER, &split.to_header()))).await.2, "invalid_siwx_message");
    let old = sign_in(
        &required(&shop, "/report").await,
        me.clone(),
        |s| s.issued_at = "2020-01-01T00:00:00.000Z".into(),
        sign(&buyer),
    );
    refused(&call(&shop, "/report", Some((siwx::HEADER, &old))).await.2, "older than 5 minutes");
    // The pass is for its scope: another resource of the shop is not opened by it.
    let other = sign_in(&required(&shop, "/other").await, me.clone(), |_| {}, sign(&buyer));
    refused(&call(&shop, "/other", Some((siwx::HEADER, &other))).await.2, "holds no pass");

    // An hour later the pass has ended (a message made at the facilitator's new time).
    clock.advance(Duration::from_secs(3_601));
    let later =
        (chrono::Utc::now() + chrono::Duration::seconds(3_601)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let expired = sign_in(
        &required(&shop, "/report").await,
        me.clone(),
        |s| {
            s.issued_at = later;
            s.expiration_time = None;
        },
        sign(&buyer),
    );
    refused(&call(&shop, "/report", Some((siwx::HEADER, &expired))).await.2, "or it ended");
    assert_eq!(t.lamports(&seller.to_string()).await, 10_000_000, "paid once");
}

/// 32 bytes that no two calls share (an EIP-3009 nonce).
fn rand_bytes() -> [u8; 32] {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut bytes = [7u8; 32];
    bytes[..8].copy_from_slice(&n.to_be_bytes());
    bytes[8..16].copy_from_slice(&chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default().to_be_bytes());
    bytes
}

/// An EIP-3009 payment header for the shop's offer of `path`, from account `from` signed by
/// `key`.
async fn eip3009(
    shop: &Router,
    path: &str,
    t: &EvmApp,
    token: &Token,
    (from, key): (EvmAddress, &PrivateKeySigner),
) -> String {
    let offer = required(shop, path).await;
    let accepted = offer["accepts"][0].clone();
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let pay_to: EvmAddress = accepted["payTo"].as_str().unwrap().parse().unwrap();
    let nonce = alloy::primitives::B256::from(rand_bytes());
    let payload = token.authorize_as(t, (from, key), pay_to, 1_000_000, (now - 60, now + 300), nonce);
    tollgate_protocol::x402::header::encode(&json!({"x402Version": 2, "accepted": accepted, "payload": payload}))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evm_pass_serves_its_payer_key_or_contract_wallet_who_signs_in() {
    use alloy::sol_types::SolValue as _;
    let t = EvmApp::start().await;
    t.store.create_account("acct_shop", chrono::Utc::now()).await.ok();
    let token = Token::deploy(&t).await;
    let seller = EvmAddress::repeat_byte(0x53);
    let price = Price::token(token.address.to_string().parse().unwrap(), "1", Token::DECIMALS)
        .unwrap()
        .extra(json!({"name": Token::NAME, "version": "2"}))
        .on(t.network())
        .pay_to(seller.to_string().parse().unwrap());
    let shop = shop(InProcess::new(&t.state, "acct_shop", Plan::Premium), price);
    let declared = required(&shop, "/report").await;
    assert_eq!(declared["extensions"][siwx::EXTENSION]["supportedChains"][0]["type"], "eip191");

    // A key: pays, then signs in (EIP-191).
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let paid = eip3009(&shop, "/report", &t, &token, (buyer.address(), &buyer)).await;
    assert_eq!(call(&shop, "/report", Some(("payment-signature", &paid))).await.0, StatusCode::OK);
    let sign = |key: &PrivateKeySigner| {
        let key = key.clone();
        move |message: &str| {
            format!(
                "0x{}",
                alloy::primitives::hex::encode(key.sign_message_sync(message.as_bytes()).unwrap().as_bytes())
            )
        }
    };
    let me = buyer.address().to_checksum(None);
    let signed = sign_in(&required(&shop, "/report").await, me.clone(), |_| {}, sign(&buyer));
    let (status, _, body) = call(&shop, "/report", Some((siwx::HEADER, &signed))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["payer"], me.as_str());
    let stranger = PrivateKeySigner::random();
    let forged = sign_in(&required(&shop, "/report").await, me, |_| {}, sign(&stranger));
    assert!(call(&shop, "/report", Some((siwx::HEADER, &forged))).await.2.contains("invalid_siwx_signature"));

    // A contract wallet (EIP-1271, its owner's key): pays, then signs in through its owner.
    let owner = PrivateKeySigner::random();
    let mut code = alloy::primitives::hex::decode(tollgate_facilitator::devnet::TEST_WALLET_BYTECODE.trim()).unwrap();
    code.extend(owner.address().abi_encode());
    let wallet = Token::send(&t, &token.minter, alloy::primitives::TxKind::Create, code).await.unwrap();
    token.mint(&t, wallet, 5_000_000).await;
    let paid = eip3009(&shop, "/report", &t, &token, (wallet, &owner)).await;
    let (status, _, body) = call(&shop, "/report", Some(("payment-signature", &paid))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let signed = sign_in(&required(&shop, "/report").await, wallet.to_checksum(None), |_| {}, sign(&owner));
    let (status, _, body) = call(&shop, "/report", Some((siwx::HEADER, &signed))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["payer"], wallet.to_checksum(None).as_str());
    // Its owner's key is no holder of the wallet's pass.
    let owner_alone =
        sign_in(&required(&shop, "/report").await, owner.address().to_checksum(None), |_| {}, sign(&owner));
    assert!(call(&shop, "/report", Some((siwx::HEADER, &owner_alone))).await.2.contains("holds no pass"));
    assert_eq!(token.balance(&t, seller).await, 2_000_000, "two passes bought, nothing else paid");
}
