//! What a cheating buyer (or an unlucky network, disk or client) does to the payment pipeline,
//! on real chains: each attack must end with the money and the records agreeing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;

use alloy::primitives::{Address, B256};
use alloy::signers::local::PrivateKeySigner;
use common::evm::{ETH, EvmApp, Token};
use common::rpc_proxy::Rule;
use common::solana::{SolanaApp, signed_proof, spl_fixture::Fixture};
use http::StatusCode;
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;

fn v1_header(network: &str, scheme: &str, payload: Value) -> String {
    tollgate_protocol::x402::header::encode(
        &json!({"x402Version": 1, "scheme": scheme, "network": network, "payload": payload}),
    )
    .unwrap()
}

fn v2_header(accepted: &Value, payload: Value) -> String {
    tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 2, "accepted": accepted, "payload": payload,
        "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}
    }))
    .unwrap()
}

fn assert_refused(s: StatusCode, e: &Value) {
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
}

/// A buyer mints a worthless SPL token, opens the seller's account for it, and pays a token
/// price with it: refused whether the seller names its token or (as the source contract's
/// receive has no asset) names none; nothing is signed, the fee payer pays nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worthless_spl_token_does_not_pay_a_token_price() {
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let real = Fixture::new(rpc).await;
    let junk = Fixture::new(rpc).await;
    let buyer = Keypair::new();
    junk.account(rpc, &buyer.pubkey(), 5_000_000).await;
    let seller = Keypair::new();
    real.account(rpc, &seller.pubkey(), 0).await;
    let seller_junk = junk.account(rpc, &seller.pubkey(), 0).await;
    let sponsor_sol = rpc.balance(&fee_payer).await.unwrap();

    let tx = junk.exact_tx(rpc, &fee_payer, &buyer, &seller_junk, 50_000, 1_000).await;
    let proof = v1_header(&network, "exact", json!({"transaction": tx}));
    let wallet = seller.pubkey().to_string();
    for body in [
        json!({"walletAddress": wallet, "paymentProof": proof, "expectedAmount": 0.05}),
        json!({"walletAddress": wallet, "paymentProof": proof, "expectedAmount": 0.05, "asset": real.mint.to_string()}),
    ] {
        let (s, e) = t.call("POST", "/payment/receive", &key, Some(body)).await;
        assert_refused(s, &e);
    }
    // The same through local mode: no transaction is handed out for it.
    let body = json!({"walletAddress": wallet, "paymentProof": proof, "expectedAmount": 0.05});
    let (s, e) = t.call("POST", "/transaction/receive", &key, Some(body)).await;
    assert_refused(s, &e);
    assert_eq!(junk.balance(rpc, &seller_junk).await, 0, "no junk moved");
    assert_eq!(rpc.balance(&fee_payer).await.unwrap(), sponsor_sol, "the fee payer signed and paid nothing");
}

/// The EVM twin: an EIP-3009 authorization of a token contract the payer deployed himself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_deployed_eip3009_token_does_not_pay() {
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let real = Token::deploy(&t).await;
    let junk = Token::deploy(&t).await;
    let payer = PrivateKeySigner::random();
    junk.mint(&t, payer.address(), 1_000_000).await;
    let pay_to: Address = seller_wallet.parse().unwrap();
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap();
    let authorization =
        junk.authorize(&t, &payer, pay_to, 50_000, (now - 60, now + 600), B256::from(rand::random::<[u8; 32]>()));
    let proof = v2_header(&junk.requirement(&t, pay_to, 50_000), authorization);
    let signer = t.backend().signer.as_ref().unwrap().0.address();
    let signer_nonce = t.backend().rpc.pending_nonce(signer).await.unwrap();
    for body in [
        json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.05}),
        json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.05, "asset": real.address.to_string()}),
    ] {
        let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
        assert_refused(s, &e);
    }
    assert_eq!(junk.balance(&t, pay_to).await, 0);
    assert_eq!(t.backend().rpc.pending_nonce(signer).await.unwrap(), signer_nonce, "the facilitator sent nothing");
}

/// Agents paying the same price in parallel: every send is its own transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_identical_hosted_sends_on_solana_are_sixteen_transfers() {
    let t = SolanaApp::start().await;
    let (alice, _, alice_wallet) = t.customer().await;
    let (_, _, bob_wallet) = t.customer().await;
    t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": alice_wallet, "amount": 2}))).await;
    let body = json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.001});
    let mut transactions = std::collections::BTreeSet::new();
    for (s, paid) in common::call_concurrently(&t.app, "/payment/send", &alice, &body, 16).await {
        assert_eq!((s, paid["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{paid}");
        transactions.insert(paid["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(transactions.len(), 16, "sixteen distinct transactions");
    assert_eq!(t.lamports(&bob_wallet).await, 16 * 1_000_000);
    assert_eq!(t.lamports(&alice_wallet).await, 2_000_000_000 - 16 * (1_000_000 + 5_000));
}

/// The same on anvil: a nonce each, all mined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_identical_hosted_sends_on_anvil_are_sixteen_transfers() {
    let t = EvmApp::start().await;
    let (alice, alice_wallet) = t.customer().await;
    let (_, bob_wallet) = t.customer().await;
    t.fund(&alice_wallet, ETH).await;
    let body = json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.001});
    let mut transactions = std::collections::BTreeSet::new();
    let mut fees = 0u128;
    for (s, paid) in common::call_concurrently(&t.app, "/payment/send", &alice, &body, 16).await {
        assert_eq!((s, paid["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{paid}");
        let hash = paid["transaction"].as_str().unwrap().to_owned();
        let receipt = t.backend().rpc.receipt(hash.parse().unwrap()).await.unwrap().unwrap();
        fees += receipt.gas_used as u128 * receipt.effective_gas_price;
        transactions.insert(hash);
    }
    assert_eq!(transactions.len(), 16, "sixteen distinct transactions");
    assert_eq!(t.balance(&bob_wallet).await, 16 * ETH / 1000);
    assert_eq!(t.balance(&alice_wallet).await, ETH - 16 * ETH / 1000 - fees, "amounts plus the fees, nothing more");
    let rpc = &t.backend().rpc;
    assert_eq!(rpc.mined_nonce(alice_wallet.parse().unwrap()).await.unwrap(), 16);
}

/// A storage fault injected (by a SQLite trigger) at each write of a receive: afterwards the proof
/// has either settled once or is still usable — never claimed by a payment that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_fault_at_any_step_leaves_the_proof_settled_once_or_usable() {
    let t = SolanaApp::start().await;
    let (seller, _, seller_wallet) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let seller_key: Pubkey = seller_wallet.parse().unwrap();
    let mut paid = 0;
    for (step, when) in common::FAULT_STEPS {
        let buyer = Keypair::new();
        t.call("POST", "/dev/airdrop", &seller, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1})))
            .await;
        let (blockhash, _) = backend.rpc.latest_blockhash().await.unwrap();
        let proof = signed_proof(&network, &buyer, &seller_key, 10_000_000, blockhash);
        let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});

        common::sqlite(
            &t.db_path(),
            &format!("CREATE TRIGGER fault {when} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"),
        )
        .await;
        let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body.clone())).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{step}: {e}");
        common::sqlite(&t.db_path(), "DROP TRIGGER fault").await;

        // The facilitator catches up on its own (the reconciler's pass an hour later, when
        // whatever was left is long due), and the seller's retry gets the one outcome.
        common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await;
        let (s, answer) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
        match s {
            StatusCode::OK => assert_eq!(answer["status"], "confirmed", "{step}: {answer}"),
            StatusCode::PAYMENT_REQUIRED => {
                let message = answer["error"]["message"].as_str().unwrap();
                assert!(message.contains("already used"), "{step}: {answer}");
                let id = message.split("payment ").nth(1).unwrap().trim_end_matches(')');
                let (s, record) = t.call("GET", &format!("/payment/status/{id}"), &seller, None).await;
                assert_eq!((s, record["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{step}: {record}");
            }
            other => panic!("{step}: {other} {answer}"),
        }
        paid += 10_000_000;
        assert_eq!(t.lamports(&seller_wallet).await, paid, "{step}: paid exactly once");
        assert_eq!(t.lamports(&buyer.pubkey().to_string()).await, 1_000_000_000 - 10_000_000 - 5_000, "{step}");
    }
}

/// Payments whose statuses the node has forgotten (its status cache keeps ~2 minutes): a payment
/// confirmed on chain is found in history and confirmed, never expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_read_after_the_status_window_is_confirmed_not_expired() {
    let t = SolanaApp::start_behind_proxy().await;
    let proxy = t.proxy.clone().unwrap();
    let (seller, _, seller_wallet) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let buyer = Keypair::new();
    t.call("POST", "/dev/airdrop", &seller, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let (blockhash, _) = backend.rpc.latest_blockhash().await.unwrap();
    let proof = signed_proof(&network, &buyer, &seller_wallet.parse().unwrap(), 10_000_000, blockhash);

    // Recent statuses are forgotten at once; only a history search finds them; and the chain is
    // far past every horizon.
    let forget = |params: &Value, result: Value| {
        let searches_history = params.get(1).and_then(|c| c.get("searchTransactionHistory")) == Some(&json!(true));
        if searches_history {
            return result;
        }
        let mut result = result;
        if let Some(values) = result.get_mut("value").and_then(Value::as_array_mut) {
            values.iter_mut().for_each(|v| *v = Value::Null);
        }
        result
    };
    proxy.rule("getSignatureStatuses", Rule::Rewrite(Arc::new(forget)));
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01, "timeout": 1});
    let (s, answer) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert!(s == StatusCode::OK || s == StatusCode::ACCEPTED, "{answer}");
    proxy.rule("getBlockHeight", Rule::Rewrite(Arc::new(|_, h| json!(h.as_u64().unwrap() + 1_000_000))));
    // The reconciler's pass an hour later, when the payment is long due.
    let pass = common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await;
    assert_eq!((pass.examined, pass.finished), (1, 1));
    let id = answer["paymentId"].as_str().unwrap();
    let (_, record) = t.call("GET", &format!("/payment/status/{id}"), &seller, None).await;
    assert_eq!(record["status"], "confirmed", "{record}");
    assert_eq!(t.lamports(&seller_wallet).await, 10_000_000);
}

/// A signed transfer whose nonce is above the sender's next one would sit in the node's queue
/// forever (and hold the proof): refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evm_transfer_with_a_future_nonce_is_refused() {
    use tollgate_facilitator::chains::evm::build::{Transfer, sign};
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let rpc = &t.backend().rpc;
    let fees = rpc.fees().await.unwrap();
    let transfer = Transfer {
        chain_id: t.anvil.chain_id(),
        nonce: 1,
        to: seller_wallet.parse().unwrap(),
        value: alloy::primitives::U256::from(ETH / 100),
        gas_limit: 21_000,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
    };
    let (raw, _) = sign(transfer.tx(), &buyer).unwrap();
    let network = t.network().to_string();
    let proof = v1_header(
        &network,
        "exact-native",
        json!({"transaction": format!("0x{}", alloy::primitives::hex::encode(raw))}),
    );
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01, "timeout": 1});
    let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_refused(s, &e);
    assert!(e["error"]["message"].as_str().unwrap().contains("nonce"), "{e}");
}

/// A hosted send under an `Idempotency-Key` whose verdict cannot be recorded (a storage fault
/// after the broadcast) answers 500; the retry with the same key gets that answer again, never a
/// second transfer. The reconciler then records what the chain says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_failed_after_its_broadcast_is_not_sent_again_by_its_key() {
    use tower::ServiceExt as _;
    let t = SolanaApp::start().await;
    let (key, _, wallet) = t.customer().await;
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": wallet, "amount": 1}))).await;
    let to = Pubkey::new_unique().to_string();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": to, "amount": 1}))).await;
    let body = json!({"walletAddress": wallet, "recipientAddress": to, "amount": 0.01}).to_string();
    let send = || {
        let request = http::Request::post("/payment/send")
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .header("idempotency-key", "order-7")
            .body(axum::body::Body::from(body.clone()))
            .unwrap();
        let app = t.app.clone();
        async move {
            let answer = app.oneshot(request).await.unwrap();
            (answer.status(), answer.headers().get("idempotent-replayed").is_some())
        }
    };
    common::sqlite(
        &t.db_path(),
        "CREATE TRIGGER fault BEFORE UPDATE OF status ON payments WHEN NEW.status IN ('confirmed', 'failed', 'pending') \
         BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
    )
    .await;
    assert_eq!(send().await, (StatusCode::INTERNAL_SERVER_ERROR, false));
    common::sqlite(&t.db_path(), "DROP TRIGGER fault").await;
    assert_eq!(send().await, (StatusCode::INTERNAL_SERVER_ERROR, true), "the same answer, replayed");
    assert_eq!(t.lamports(&to).await, 1_000_000_000 + 10_000_000, "one transfer");
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await;
    let (_, history) = t.call("GET", &format!("/payment/history/{wallet}?type=sent"), &key, None).await;
    assert_eq!((history["total"].as_u64(), history["payments"][0]["status"].as_str()), (Some(1), Some("confirmed")));
}
