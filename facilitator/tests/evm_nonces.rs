//! An EVM account's nonce: a pending payment whose (sender, nonce) another transaction took can
//! never land and expires; a broadcast lost on the way to the node leaves no gap in the
//! facilitator's nonces. Real anvil, behind a fault proxy where the node must seem to fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod common;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use common::evm::{ETH, EvmApp};
use common::rpc_proxy::Rule;
use http::StatusCode;
use serde_json::{Value, json};
use tollgate_facilitator::chains::evm::build::{Transfer, sign};
use tollgate_facilitator::settlement::reconcile::Reconciled;

/// The reconciler's pass an hour later, when every unfinished payment is due.
async fn reconcile_later(t: &EvmApp) -> Reconciled {
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_transfer_whose_nonce_another_transaction_took_expires() {
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let provider = t.backend().rpc.provider().clone();
    let _: Value = provider.raw_request("evm_setAutomine".into(), (false,)).await.unwrap();

    let proof = t.signed_proof(&buyer, seller_wallet.parse().unwrap(), ETH / 100, t.anvil.chain_id()).await;
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01, "timeout": 1});
    let (s, pending) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_eq!((s, pending["status"].as_str()), (StatusCode::ACCEPTED, Some("pending")), "{pending}");

    // The buyer replaces it (same nonce, higher fees, paying someone else), and that one is mined.
    let fees = t.backend().rpc.fees().await.unwrap();
    let replacement = Transfer {
        chain_id: t.anvil.chain_id(),
        nonce: 0,
        to: Address::repeat_byte(7),
        value: U256::from(1u64),
        gas_limit: 21_000,
        max_fee_per_gas: fees.max_fee_per_gas * 3,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas * 3 + 1_000_000_000,
    };
    let (raw, _) = sign(replacement.tx(), &buyer).unwrap();
    let raw = format!("0x{}", alloy::primitives::hex::encode(raw));
    let _: Value = provider.raw_request("eth_sendRawTransaction".into(), (raw,)).await.unwrap();
    let _: Value = provider.raw_request("evm_mine".into(), ()).await.unwrap();
    assert_eq!(t.backend().rpc.mined_nonce(buyer.address()).await.unwrap(), 1);

    assert_eq!(reconcile_later(&t).await, Reconciled { examined: 1, finished: 1 });
    let id = pending["paymentId"].as_str().unwrap();
    let (_, record) = t.call("GET", &format!("/payment/status/{id}"), &seller, None).await;
    assert_eq!(record["status"], "expired", "{record}");
    assert_eq!(t.balance(&seller_wallet).await, 0, "nothing reached the seller");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_send_lost_on_the_way_leaves_no_nonce_gap() {
    let t = EvmApp::start_behind_proxy().await;
    let proxy = t.proxy.clone().unwrap();
    let (key, wallet) = t.customer().await;
    t.fund(&wallet, ETH).await;
    let payee = PrivateKeySigner::random().address().to_string();
    let send = json!({"walletAddress": wallet, "recipientAddress": payee, "amount": 0.01});

    // The node never gets the first transaction, and the facilitator cannot know.
    proxy.rule("eth_sendRawTransactionSync", Rule::Lose);
    let (s, lost) = t.call("POST", "/payment/send", &key, Some(send.clone())).await;
    assert_eq!((s, lost["status"].as_str()), (StatusCode::ACCEPTED, Some("pending")), "{lost}");
    proxy.clear("eth_sendRawTransactionSync");

    // The next send takes the nonce the lost one left unused: it is not stuck behind a gap.
    let (s, paid) = t.call("POST", "/payment/send", &key, Some(send)).await;
    assert_eq!((s, paid["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{paid}");
    let direct = t.direct_rpc().await;
    assert_eq!(direct.mined_nonce(wallet.parse().unwrap()).await.unwrap(), 1, "one transaction, nonce 0");
    assert_eq!(t.balance(&payee).await, ETH / 100, "paid once");

    // The lost one can no longer land (its nonce is taken): it expires, and nothing more moves.
    assert_eq!(reconcile_later(&t).await, Reconciled { examined: 1, finished: 1 });
    let id = lost["paymentId"].as_str().unwrap();
    let (_, record) = t.call("GET", &format!("/payment/status/{id}"), &key, None).await;
    assert_eq!(record["status"], "expired", "{record}");
    assert_eq!(t.balance(&payee).await, ETH / 100);
}
