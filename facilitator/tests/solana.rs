//! Hosted payments on a real SVM: the embedded ledger (surfpool's Surfnet, offline, loopback).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use common::solana::{SolanaApp, signed_message, signed_proof, signed_transfer, spl_fixture, x402_exact};

use axum::body::{Body, to_bytes};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signature::Signature;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::devnet::send_solana;
use tollgate_protocol::Address;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::{ExactNativePayload, receipt_message};
use tower::ServiceExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_send_confirms_and_shows_in_both_histories() {
    let t = SolanaApp::start().await;
    let (alice, _, alice_wallet) = t.customer().await;
    let (bob, _, bob_wallet) = t.customer().await;

    let (s, supported) = t.call("GET", "/supported", &alice, None).await;
    assert_eq!(s, StatusCode::OK);
    let network = t.state.chains.embedded_solana().unwrap().rpc.network().to_string();
    let fee_payer = t.state.chains.embedded_solana().unwrap().fee_payer().unwrap().to_string();
    assert_eq!(
        supported["kinds"],
        json!([
            {"x402Version": 1, "scheme": "exact-native", "network": network},
            {"x402Version": 1, "scheme": "exact", "network": network, "extra": {"feePayer": fee_payer}},
            {"x402Version": 2, "scheme": "exact-native", "network": network},
            {"x402Version": 2, "scheme": "exact", "network": network, "extra": {"feePayer": fee_payer}}
        ])
    );
    assert_eq!(supported["signers"][&network], json!([fee_payer]));

    let (s, funded) = t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": alice_wallet, "amount": 2}))).await;
    assert_eq!(s, StatusCode::OK, "{funded}");
    assert_eq!(funded["amountAtomic"], "2000000000");
    assert_eq!(t.lamports(&alice_wallet).await, 2_000_000_000);

    let body = json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.01, "resource": "https://seller.example/report", "metadata": {"reference": "inv-42"}});
    let (s, paid) = t.call("POST", "/payment/send", &alice, Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{paid}");
    assert_eq!(paid["status"], "confirmed");
    assert_eq!(paid["amount"], json!(0.01));
    assert_eq!(paid["amountAtomic"], "10000000");
    assert_eq!(paid["fee"], json!(0.000005));
    assert_eq!(paid["metadata"]["reference"], "inv-42");
    let signature: Signature = paid["transaction"].as_str().unwrap().parse().unwrap();
    assert_eq!(t.lamports(&bob_wallet).await, 10_000_000, "exactly the amount arrived");
    assert_eq!(t.lamports(&alice_wallet).await, 2_000_000_000 - 10_000_000 - 5_000, "amount plus the fee left");

    // The proof is an exact-native receipt signed by the sending key, bound to the resource.
    let proof = PaymentPayload::from_header(paid["paymentProof"].as_str().unwrap()).unwrap();
    assert_eq!(proof.scheme(), "exact-native");
    let ExactNativePayload::Receipt(receipt) = ExactNativePayload::from_value(proof.payload()).unwrap() else {
        panic!("not a receipt")
    };
    assert_eq!(receipt.transaction, signature.to_string());
    let bob_address: Address = bob_wallet.parse().unwrap();
    let message =
        receipt_message(proof.network(), &receipt.transaction, &bob_address, Some("https://seller.example/report"));
    let alice_key: Pubkey = alice_wallet.parse().unwrap();
    assert!(receipt.signature.parse::<Signature>().unwrap().verify(&alice_key.to_bytes(), message.as_bytes()));

    let id = paid["paymentId"].as_str().unwrap();
    let (s, status) = t.call("GET", &format!("/payment/status/{id}"), &alice, None).await;
    assert_eq!((s, status["status"].as_str()), (StatusCode::OK, Some("confirmed")));
    assert!(status["confirmedAt"].is_string());
    let (s, _) = t.call("GET", &format!("/payment/status/{id}"), &bob, None).await;
    assert_eq!(s, StatusCode::OK, "the receiving custodial wallet's account sees it too");

    let (_, sent) = t.call("GET", &format!("/payment/history/{alice_wallet}?type=sent"), &alice, None).await;
    assert_eq!(sent["total"], 1);
    assert_eq!(sent["payments"][0]["direction"], "sent");
    let (_, received) = t.call("GET", &format!("/payment/history/{bob_wallet}"), &bob, None).await;
    assert_eq!(received["total"], 1);
    assert_eq!(received["payments"][0]["direction"], "received");
    assert_eq!(received["payments"][0]["paymentId"], id);

    // Reporting a hosted payment's own transaction answers its record; any other transaction
    // cannot be its transaction, and changes nothing.
    let own = json!({"paymentId": id, "transaction": signature.to_string()});
    let (s, record) = t.call("POST", "/transaction/confirm", &alice, Some(own)).await;
    assert_eq!((s, record["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{record}");
    let other = json!({"paymentId": id, "transaction": Signature::from([9u8; 64]).to_string()});
    let (s, e) = t.call("POST", "/transaction/confirm", &alice, Some(other)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    let (_, status) = t.call("GET", &format!("/payment/status/{id}"), &alice, None).await;
    assert_eq!(status["transaction"], signature.to_string());

    // Another account builds a local payment with the same wallets and amount and reports
    // alice's transfer as its own: one transfer is one payment, the report is refused, and bob
    // still sees one payment received.
    let (carol, _, _) = t.customer().await;
    let order = json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.01});
    let (s, built) = t.call("POST", "/transaction/send", &carol, Some(order)).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    let planted = built["paymentId"].as_str().unwrap();
    let reuse = json!({"paymentId": planted, "transaction": signature.to_string()});
    let (s, e) = t.call("POST", "/transaction/confirm", &carol, Some(reuse)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    let (_, planted) = t.call("GET", &format!("/payment/status/{planted}"), &carol, None).await;
    assert_eq!((planted["status"].as_str(), &planted["transaction"]), (Some("built"), &Value::Null), "{planted}");
    let (_, received) = t.call("GET", &format!("/payment/history/{bob_wallet}"), &bob, None).await;
    let confirmed = received["payments"].as_array().unwrap().iter().filter(|p| p["status"] == "confirmed").count();
    assert_eq!(confirmed, 1, "{received}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_send_refuses_what_it_cannot_pay() {
    let t = SolanaApp::start().await;
    let (alice, _, alice_wallet) = t.customer().await;
    let (bob, _, bob_wallet) = t.customer().await;
    let stranger = Pubkey::new_unique().to_string();
    t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": alice_wallet, "amount": 1}))).await;

    let send =
        |amount: Value, to: &str| json!({"walletAddress": alice_wallet, "recipientAddress": to, "amount": amount});
    let (s, e) = t.call("POST", "/payment/send", &alice, Some(send(json!(5), &bob_wallet))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INSUFFICIENT_BALANCE")), "{e}");
    // Everything but the fee would leave a dust balance below rent exemption.
    let (s, e) = t.call("POST", "/payment/send", &alice, Some(send(json!(0.9999), &bob_wallet))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INSUFFICIENT_BALANCE")), "{e}");
    // Below the contract's minimum (which also keeps new accounts above rent exemption).
    let (s, e) = t.call("POST", "/payment/send", &alice, Some(send(json!(0.0008), &stranger))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("INVALID_PARAMETERS")), "{e}");
    // Only the owning account spends from a custodial wallet.
    let (s, e) = t.call("POST", "/payment/send", &bob, Some(send(json!(0.01), &bob_wallet))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("FORBIDDEN")), "{e}");
    // A program or a sysvar cannot be credited: refused before anything is signed or recorded
    // (the chain would fail the transfer), hosted or built for the payer to sign.
    for unpayable in [
        "11111111111111111111111111111111",            // the system program
        "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", // the token program
        "SysvarC1ock11111111111111111111111111111111", // the clock sysvar
        "Sysvar1nstructions1111111111111111111111111", // reserved, though no account exists
        "NativeLoader1111111111111111111111111111111", // likewise
    ] {
        let (s, e) = t.call("POST", "/payment/send", &alice, Some(send(json!(0.01), unpayable))).await;
        assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("INVALID_RECIPIENT")), "{e}");
        let (s, e) = t.call("POST", "/transaction/send", &alice, Some(send(json!(0.01), unpayable))).await;
        assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("INVALID_RECIPIENT")), "{e}");
    }
    let (_, history) = t.call("GET", &format!("/payment/history/{alice_wallet}"), &alice, None).await;
    assert_eq!(history["total"], 0, "{history}");
    // Nothing moved.
    assert_eq!(t.lamports(&alice_wallet).await, 1_000_000_000);
    assert_eq!(t.lamports(&bob_wallet).await, 0);

    // Airdrops are for Solana addresses, within bounds.
    let (s, _) = t
        .call(
            "POST",
            "/dev/airdrop",
            &alice,
            Some(json!({"address": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "amount": 1})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": alice_wallet, "amount": 5000}))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_is_accepted_once_and_only_for_its_terms() {
    let t = SolanaApp::start().await;
    let (alice, _, alice_wallet) = t.customer().await;
    let (bob, _, bob_wallet) = t.customer().await;
    let (_, _, carol_wallet) = t.customer().await;
    t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": alice_wallet, "amount": 1}))).await;
    let resource = "https://seller.example/report";
    let pay =
        json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.01, "resource": resource});
    let (s, paid) = t.call("POST", "/payment/send", &alice, Some(pay)).await;
    assert_eq!(s, StatusCode::OK, "{paid}");
    let proof = paid["paymentProof"].as_str().unwrap();

    let receive = |wallet: &str, expected: Value, resource: &str| json!({"walletAddress": wallet, "paymentProof": proof, "expectedAmount": expected, "resource": resource});
    // Wrong terms are refused and do not use the proof up.
    for (body, why) in [
        (receive(&bob_wallet, json!(0.02), resource), "less than"),
        (receive(&bob_wallet, json!(0.01), "https://seller.example/other"), "another resource"),
        (receive(&carol_wallet, json!(0.01), resource), "does not verify"),
    ] {
        let (s, e) = t.call("POST", "/payment/receive", &bob, Some(body)).await;
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")),
            "{e}"
        );
        assert!(e["error"]["message"].as_str().unwrap().contains(why), "{e}");
    }
    let (s, received) =
        t.call("POST", "/payment/receive", &bob, Some(receive(&bob_wallet, json!(0.01), resource))).await;
    assert_eq!(s, StatusCode::OK, "{received}");
    assert_eq!(received["status"], "confirmed");
    assert_eq!(received["payer"], alice_wallet);
    assert_eq!(received["transaction"], paid["transaction"]);
    assert_eq!(received["amountAtomic"], "10000000");
    let (s, again) = t.call("POST", "/payment/receive", &bob, Some(receive(&bob_wallet, json!(0.01), resource))).await;
    assert_eq!((s, again["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")));
    assert!(again["error"]["message"].as_str().unwrap().contains("already used"), "{again}");
    // A bare transaction id is not a receipt.
    let forged = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": received["network"],
        "payload": {"receipt": {"transaction": paid["transaction"], "from": alice_wallet, "signature": "1111111111111111111111111111111111111111111111111111111111111111"}}
    }))
    .unwrap();
    let body = json!({"walletAddress": bob_wallet, "paymentProof": forged, "expectedAmount": 0.01});
    let (s, _) = t.call("POST", "/payment/receive", &bob, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_transfer_settles_once_when_32_identical_requests_race() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (seller, _, seller_wallet) = t.customer().await;
    let buyer = solana_sdk::signature::Keypair::new();
    t.call("POST", "/dev/airdrop", &seller, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let seller_key: Pubkey = seller_wallet.parse().unwrap();
    let (blockhash, _) = backend.rpc.latest_blockhash().await.unwrap();
    let proof = signed_proof(&network, &buyer, &seller_key, 10_000_000, blockhash);

    let receive = |wallet: &str, expected: Value| json!({"walletAddress": wallet, "paymentProof": proof, "expectedAmount": expected});
    let (s, e) = t.call("POST", "/payment/receive", &seller, Some(receive(&seller_wallet, json!(0.02)))).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")),
        "underpaying: {e}"
    );
    let (s, e) = t
        .call("POST", "/payment/receive", &seller, Some(receive(&Pubkey::new_unique().to_string(), json!(0.01))))
        .await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")),
        "wrong recipient: {e}"
    );

    let racers: Vec<_> = (0..32)
        .map(|_| {
            let app = t.app.clone();
            let body = receive(&seller_wallet, json!(0.01)).to_string();
            let key = seller.clone();
            tokio::spawn(async move {
                let req = Request::post("/payment/receive")
                    .header("authorization", format!("Bearer {key}"))
                    .body(Body::from(body))
                    .unwrap();
                let response = app.oneshot(req).await.unwrap();
                let status = response.status();
                let body: Value =
                    serde_json::from_slice(&to_bytes(response.into_body(), usize::MAX).await.unwrap()).unwrap();
                (status, body)
            })
        })
        .collect();
    let mut settled = Vec::new();
    let mut in_flight = Vec::new();
    for r in racers {
        let (status, body) = r.await.unwrap();
        match status {
            StatusCode::OK => settled.push(body),
            // The stored outcome of the one settlement, still under way.
            StatusCode::ACCEPTED => in_flight.push(body),
            StatusCode::PAYMENT_REQUIRED => {
                assert!(body["error"]["message"].as_str().unwrap().contains("already used"), "{body}")
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(settled.len(), 1, "exactly one settlement");
    for body in &in_flight {
        assert_eq!(body["paymentId"], settled[0]["paymentId"], "one payment: {body}");
        assert!(["verified", "submitted", "pending"].contains(&body["status"].as_str().unwrap()), "{body}");
    }
    assert_eq!(settled[0]["status"], "confirmed");
    assert_eq!(settled[0]["payer"], buyer.pubkey().to_string());
    assert_eq!(t.lamports(&seller_wallet).await, 10_000_000, "paid once");
    assert_eq!(t.lamports(&buyer.pubkey().to_string()).await, 1_000_000_000 - 10_000_000 - 5_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_signed_against_an_unknown_blockhash_is_refused() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (seller, _, seller_wallet) = t.customer().await;
    let buyer = solana_sdk::signature::Keypair::new();
    t.call("POST", "/dev/airdrop", &seller, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let network = t.state.chains.embedded_solana().unwrap().rpc.network().to_string();
    let proof = signed_proof(
        &network,
        &buyer,
        &seller_wallet.parse().unwrap(),
        10_000_000,
        solana_sdk::hash::Hash::new_unique(),
    );
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});
    let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("expired"), "{e}");
    assert_eq!(t.lamports(&seller_wallet).await, 0);
}

/// A transfer signed against a real blockhash that then ages past 150 blocks: refused as
/// expired, and nothing moves (on the embedded ledger, blocks are produced at once to get there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_whose_blockhash_aged_out_is_refused() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (seller, _, seller_wallet) = t.customer().await;
    let buyer = solana_sdk::signature::Keypair::new();
    t.call("POST", "/dev/airdrop", &seller, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let (blockhash, last_valid) = backend.rpc.latest_blockhash().await.unwrap();
    let network = backend.rpc.network().to_string();
    let proof = signed_proof(&network, &buyer, &seller_wallet.parse().unwrap(), 10_000_000, blockhash);
    let height = backend.rpc.block_height().await.unwrap();
    backend.embedded.as_ref().unwrap().produce_blocks(last_valid + 1 - height).unwrap();
    assert!(!backend.rpc.blockhash_valid(&blockhash).await.unwrap());
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});
    let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("expired"), "{e}");
    assert_eq!(t.lamports(&seller_wallet).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseen_transactions_expire_only_past_their_horizon() {
    use tollgate_facilitator::settlement::reconcile::reconcile_once;
    use tollgate_facilitator::settlement::{Event, advance};
    use tollgate_facilitator::store::{NewPayment, PaymentStore as _};
    use tollgate_protocol::gateway::PaymentStatus;

    let t = SolanaApp::start().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let height = backend.rpc.block_height().await.unwrap();
    let now = chrono::Utc::now();
    // Two broadcasts the chain never saw: one whose horizon has passed, one still open.
    for (id, horizon) in [("pay_past", height.saturating_sub(1)), ("pay_open", height + 1_000_000)] {
        let p = NewPayment {
            last_valid_block_height: Some(horizon),
            next_check_at: Some(now),
            ..NewPayment::native(
                id,
                "acct",
                backend.rpc.network().clone(),
                (Pubkey::new_unique().to_string(), Pubkey::new_unique().to_string()),
                tollgate_protocol::AtomicAmount(1),
                now,
            )
        };
        t.store.insert_payment(&p).await.unwrap();
        let never_sent = Signature::new_unique().to_string();
        advance(&*t.store, id, &Event::Submit { transaction: never_sent }, now).await.unwrap();
        advance(&*t.store, id, &Event::WaitTimedOut, now).await.unwrap();
    }
    let pass = reconcile_once(&*t.store, &SystemClock, &t.state.chains).await.unwrap();
    assert_eq!((pass.examined, pass.finished), (2, 1));
    let past = t.store.get_payment("pay_past").await.unwrap().unwrap();
    assert_eq!(past.payment.status, PaymentStatus::Expired);
    assert!(past.error.unwrap().contains("block height"));
    assert_eq!(
        t.store.get_payment("pay_open").await.unwrap().unwrap().payment.status,
        PaymentStatus::Pending,
        "no verdict without evidence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_transaction_is_signed_by_the_caller_and_confirmed() {
    use base64::Engine as _;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;

    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let buyer = solana_sdk::signature::Keypair::new();
    let seller = Pubkey::new_unique();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;

    // A builtin program cannot pay: refused as a bad parameter, not a chain failure.
    let system = json!({"walletAddress": "11111111111111111111111111111111", "recipientAddress": seller.to_string(), "amount": 0.05});
    let (s, e) = t.call("POST", "/transaction/send", &key, Some(system)).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("INVALID_PARAMETERS")), "{e}");
    let body = json!({"walletAddress": buyer.pubkey().to_string(), "recipientAddress": seller.to_string(), "amount": 0.05, "priorityFee": 0.00001});
    let (s, built) = t.call("POST", "/transaction/send", &key, Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    assert_eq!(built["encoding"], "base64");
    assert!(built["lastValidBlockHeight"].as_u64().unwrap() > 0);
    let now = chrono::Utc::now().timestamp();
    let expires = built["expiresAt"].as_i64().unwrap();
    assert!((now + 50..=now + 70).contains(&expires), "expires about 60 s after building");
    let id = built["paymentId"].as_str().unwrap();
    let (_, status) = t.call("GET", &format!("/payment/status/{id}"), &key, None).await;
    assert_eq!((status["status"].as_str(), status["mode"].as_str()), (Some("built"), Some("local")));

    // The caller decodes, inspects, signs with its own key, and broadcasts through its own RPC.
    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let mut tx: Transaction = bincode::deserialize(&bytes).unwrap();
    assert_eq!(tx.message.account_keys[0], buyer.pubkey(), "the caller's wallet pays the fee");
    assert_eq!(tx.message.instructions.len(), 3, "compute-unit limit and price, then the transfer");
    let blockhash = tx.message.recent_blockhash;
    tx.sign(&[&buyer], blockhash);
    let backend = t.state.chains.embedded_solana().unwrap();
    let signature = backend.rpc.send(&tx).await.unwrap();
    let confirmed = backend.rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap();
    assert!(matches!(confirmed, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })), "{confirmed:?}");

    // A transaction that does not pay this payment is refused.
    let other = solana_sdk::signature::Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": other.pubkey().to_string(), "amount": 1}))).await;
    let (blockhash, _) = backend.rpc.latest_blockhash().await.unwrap();
    let stray = Transaction::new_signed_with_payer(
        &[solana_system_interface::instruction::transfer(&other.pubkey(), &seller, 50_000_000)],
        Some(&other.pubkey()),
        &[&other],
        blockhash,
    );
    let stray_sig = backend.rpc.send(&stray).await.unwrap();
    let confirmed = backend.rpc.wait_for_outcome(&stray_sig, std::time::Duration::from_secs(30)).await.unwrap();
    assert!(matches!(confirmed, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })), "{confirmed:?}");
    let (s, e) = t
        .call(
            "POST",
            "/transaction/confirm",
            &key,
            Some(json!({"paymentId": id, "transaction": stray_sig.to_string()})),
        )
        .await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    // So is an EVM transaction hash: it cannot be this Solana payment's transaction.
    let evm_hash = format!("0x{}", "5a".repeat(32));
    let (s, e) =
        t.call("POST", "/transaction/confirm", &key, Some(json!({"paymentId": id, "transaction": evm_hash}))).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("eip155 transaction id"), "{e}");
    let (_, status) = t.call("GET", &format!("/payment/status/{id}"), &key, None).await;
    assert_eq!(status["status"], "built", "nothing recorded");

    let (s, confirmed) = t
        .call(
            "POST",
            "/transaction/confirm",
            &key,
            Some(json!({"paymentId": id, "transaction": signature.to_string()})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{confirmed}");
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(confirmed["transaction"], signature.to_string());
    assert_eq!(
        t.lamports(&seller.to_string()).await,
        50_000_000 + 50_000_000,
        "the built payment and the stray transfer"
    );
    // Confirming again is harmless; history covers local mode.
    let (s, again) = t
        .call(
            "POST",
            "/transaction/confirm",
            &key,
            Some(json!({"paymentId": id, "transaction": signature.to_string()})),
        )
        .await;
    assert_eq!((s, again["status"].as_str()), (StatusCode::OK, Some("confirmed")));
    let (_, history) = t.call("GET", &format!("/payment/history/{}?type=sent", buyer.pubkey()), &key, None).await;
    assert_eq!(history["total"], 1);
    assert_eq!(history["payments"][0]["mode"], "local");

    let (s, _) = t
        .call(
            "POST",
            "/transaction/confirm",
            &key,
            Some(json!({"paymentId": "pay_unknown", "transaction": signature.to_string()})),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_info_answers_404_for_what_is_not_a_mint() {
    let t = SolanaApp::start().await;
    let (key, _, wallet) = t.customer().await;
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": wallet, "amount": 1}))).await;
    for address in [Pubkey::new_unique().to_string(), wallet] {
        let (s, e) = t.call("GET", &format!("/token/info/{address}"), &key, None).await;
        assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("NOT_FOUND")), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_exact_spl_is_verified_settled_once_and_hostile_shapes_are_refused() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let fixture = spl_fixture::Fixture::new(rpc).await;
    let mint = fixture.mint.to_string();
    // The buyer holds tokens and no SOL at all: the facilitator pays the fee.
    let buyer = Keypair::new();
    fixture.account(rpc, &buyer.pubkey(), 5_000_000).await;
    let seller = Pubkey::new_unique();
    let seller_ata = fixture.account(rpc, &seller, 0).await;
    let sponsor_sol = rpc.balance(&fee_payer).await.unwrap();

    let tx = fixture.exact_tx(rpc, &fee_payer, &buyer, &seller_ata, 1_000_000, 1_000).await;
    let body = x402_exact(&network, &tx, &seller.to_string(), &mint, 1_000_000, &fee_payer.to_string());
    // The mint the test made, as /token/info reads it.
    let (s, info) = t.call("GET", &format!("/token/info/{mint}"), &key, None).await;
    assert_eq!(s, StatusCode::OK, "{info}");
    assert_eq!((info["standard"].as_str(), info["decimals"].as_u64()), (Some("spl-token"), Some(6)));
    assert_eq!((info["supply"].as_str(), info["name"].as_str()), (Some("5000000"), None));
    assert_eq!(info["mintAuthority"], fixture.funder.pubkey().to_string());

    let (s, verified) = t.call("POST", "/verify", &key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{verified}");
    assert_eq!(verified, json!({"isValid": true, "payer": buyer.pubkey().to_string()}));

    // The exact scheme wants exactly the price, and the seller's own associated account.
    let pricier = x402_exact(&network, &tx, &seller.to_string(), &mint, 2_000_000, &fee_payer.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(pricier)).await;
    assert_eq!(v["invalidReason"], "invalid_exact_svm_payload_transaction_amount_mismatch", "{v}");
    let elsewhere =
        x402_exact(&network, &tx, &Pubkey::new_unique().to_string(), &mint, 1_000_000, &fee_payer.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(elsewhere)).await;
    assert_eq!(v["invalidReason"], "invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata", "{v}");
    let other_payer =
        x402_exact(&network, &tx, &seller.to_string(), &mint, 1_000_000, &Pubkey::new_unique().to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(other_payer)).await;
    assert_eq!(v["invalidReason"], "invalid_payment_requirements", "{v}");
    // More than the buyer holds: refused before anything is signed or sent.
    let greedy = fixture.exact_tx(rpc, &fee_payer, &buyer, &seller_ata, 9_000_000, 1_000).await;
    let (_, v) = t
        .call(
            "POST",
            "/verify",
            &key,
            Some(x402_exact(&network, &greedy, &seller.to_string(), &mint, 9_000_000, &fee_payer.to_string())),
        )
        .await;
    assert_eq!(v["invalidReason"], "insufficient_funds", "{v}");
    // Paying to an account the seller does not have.
    let nowhere_owner = Pubkey::new_unique();
    let nowhere = tollgate_facilitator::chains::solana::spl::associated_token_address(
        &nowhere_owner,
        &fixture.mint,
        &tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM,
    );
    let lost = fixture.exact_tx(rpc, &fee_payer, &buyer, &nowhere, 1_000_000, 1_000).await;
    let (_, v) = t
        .call(
            "POST",
            "/verify",
            &key,
            Some(x402_exact(&network, &lost, &nowhere_owner.to_string(), &mint, 1_000_000, &fee_payer.to_string())),
        )
        .await;
    assert_eq!(v["invalidReason"], "invalid_exact_svm_payload_transaction_receiver_ata_not_found", "{v}");

    // A transaction that also moves the fee payer's SOL, or names it in a memo: refused by
    // /settle, so never signed or broadcast.
    let drain = solana_system_interface::instruction::transfer(&fee_payer, &buyer.pubkey(), 1_000_000_000);
    let named = solana_sdk::instruction::Instruction::new_with_bytes(
        tollgate_facilitator::chains::solana::verify::MEMO_V2,
        b"hi",
        vec![solana_sdk::instruction::AccountMeta::new_readonly(fee_payer, true)],
    );
    for (extra, reason) in [
        (drain, "invalid_exact_svm_payload_transaction_instructions"),
        (named, "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts"),
    ] {
        let hostile = fixture.exact_tx_with(rpc, &fee_payer, &buyer, (&seller_ata, 1_000_000, 1_000), &[extra]).await;
        let hostile_body =
            x402_exact(&network, &hostile, &seller.to_string(), &mint, 1_000_000, &fee_payer.to_string());
        let (s, refused) = t.call("POST", "/settle", &key, Some(hostile_body)).await;
        assert_eq!(s, StatusCode::OK, "{refused}");
        assert_eq!((refused["success"].as_bool(), refused["errorReason"].as_str()), (Some(false), Some(reason)));
        assert_eq!(refused["transaction"], "", "nothing was broadcast");
    }
    assert_eq!(rpc.balance(&fee_payer).await.unwrap(), sponsor_sol, "the fee payer signed and paid nothing");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 0);

    let (s, settled) = t.call("POST", "/settle", &key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{settled}");
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["payer"], buyer.pubkey().to_string());
    assert_eq!(settled["network"], network);
    // `amount`: what moved, in atomic units (the current spec's SettleResponse.amount).
    assert_eq!(settled["amount"], "1000000", "{settled}");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 1_000_000);
    assert!(rpc.balance(&fee_payer).await.unwrap() < sponsor_sol, "the fee payer paid the fee");
    assert_eq!(rpc.balance(&buyer.pubkey()).await.unwrap(), 0, "the buyer paid no SOL");

    // The same payment settled again by the same seller: that settlement (idempotent), nothing
    // moves; verified again: used.
    let (_, again) = t.call("POST", "/settle", &key, Some(body.clone())).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &settled["transaction"]), "{again}");
    let (_, v) = t.call("POST", "/verify", &key, Some(body)).await;
    assert_eq!(v["invalidReason"], "duplicate_settlement", "{v}");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_spl_proof_settles_through_payment_receive_and_local_mode() {
    use base64::Engine as _;
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let fixture = spl_fixture::Fixture::new(rpc).await;
    let buyer = Keypair::new();
    fixture.account(rpc, &buyer.pubkey(), 5_000_000).await;
    let seller = Keypair::new();
    let seller_ata = fixture.account(rpc, &seller.pubkey(), 0).await;
    let header = |tx: &str| {
        tollgate_protocol::x402::header::encode(
            &json!({"x402Version": 1, "scheme": "exact", "network": network, "payload": {"transaction": tx}}),
        )
        .unwrap()
    };

    // Hosted: the facilitator sponsors and settles; expectedAmount is in whole tokens.
    let tx = fixture.exact_tx(rpc, &fee_payer, &buyer, &seller_ata, 1_500_000, 1_000).await;
    let mut receive =
        json!({"walletAddress": seller.pubkey().to_string(), "paymentProof": header(&tx), "expectedAmount": 1.5});
    // Unnamed, the price is in SOL: a token transfer does not pay it.
    let (s, e) = t.call("POST", "/payment/receive", &key, Some(receive.clone())).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    receive["asset"] = json!(fixture.mint.to_string());
    let (s, received) = t.call("POST", "/payment/receive", &key, Some(receive.clone())).await;
    assert_eq!(s, StatusCode::OK, "{received}");
    assert_eq!(received["status"], "confirmed");
    assert_eq!(received["asset"], fixture.mint.to_string());
    assert_eq!(received["amountAtomic"], "1500000");
    assert_eq!(received["payer"], buyer.pubkey().to_string());
    let (s, again) = t.call("POST", "/payment/receive", &key, Some(receive)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{again}");
    assert!(again["error"]["message"].as_str().unwrap().contains("already used"), "{again}");

    // Local: the seller is the fee payer; the facilitator checks and records, the seller signs,
    // broadcasts and reports.
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": seller.pubkey().to_string(), "amount": 1}))).await;
    let tx = fixture.exact_tx(rpc, &seller.pubkey(), &buyer, &seller_ata, 1_000_000, 1_000).await;
    let mint = fixture.mint.to_string();
    let body = json!({"walletAddress": seller.pubkey().to_string(), "paymentProof": header(&tx), "expectedAmount": 1, "asset": mint});
    let (s, built) = t.call("POST", "/transaction/receive", &key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    assert_eq!(
        (built["payer"].as_str(), built["amount"].as_f64()),
        (Some(buyer.pubkey().to_string().as_str()), Some(1.0))
    );
    let (s, used) = t.call("POST", "/transaction/receive", &key, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "the proof is claimed: {used}");
    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let mut to_sign: solana_sdk::transaction::Transaction = bincode::deserialize(&bytes).unwrap();
    let blockhash = to_sign.message.recent_blockhash;
    to_sign.partial_sign(&[&seller], blockhash);
    let signature = rpc.send(&to_sign).await.unwrap();
    rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap();
    let confirm = json!({"paymentId": built["paymentId"], "transaction": signature.to_string()});
    let (s, confirmed) = t.call("POST", "/transaction/confirm", &key, Some(confirm)).await;
    assert_eq!((s, confirmed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{confirmed}");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 2_500_000);

    // A seller-sponsored transaction whose priority fee is above the seller's cap is refused:
    // 20,000 units at 5,000,000 micro-lamports is 100,000 lamports, above 0.00001 SOL.
    let tx = fixture.exact_tx(rpc, &seller.pubkey(), &buyer, &seller_ata, 1_000_000, 5_000_000).await;
    let capped = json!({"walletAddress": seller.pubkey().to_string(), "paymentProof": header(&tx), "expectedAmount": 1, "priorityFee": 0.00001, "asset": mint});
    let (s, e) = t.call("POST", "/transaction/receive", &key, Some(capped)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("above the priorityFee"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x402_v2_exact_native_verify_and_settle() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let buyer = Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let seller = Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": seller.pubkey().to_string(), "amount": 1}))).await;
    let (blockhash, _) = backend.rpc.latest_blockhash().await.unwrap();
    let tx = signed_transfer(&buyer, &seller.pubkey(), 10_000_000, blockhash);
    let requirement = |amount: &str| {
        json!({"scheme": "exact-native", "network": network, "amount": amount, "asset": "native",
               "payTo": seller.pubkey().to_string(), "maxTimeoutSeconds": 30})
    };
    let body = |accepted: Value, required: Value| {
        json!({"x402Version": 2,
               "paymentPayload": {"x402Version": 2, "accepted": accepted, "payload": {"transaction": tx},
                                  "resource": {"url": "https://seller.example/a", "description": "", "mimeType": ""}},
               "paymentRequirements": required})
    };
    let reason = |v: &Value| v["invalidReason"].as_str().unwrap_or_default().to_owned();

    let good = body(requirement("10000000"), requirement("10000000"));
    let (s, v) = t.call("POST", "/verify", &key, Some(good.clone())).await;
    assert_eq!((s, v["isValid"].as_bool()), (StatusCode::OK, Some(true)), "{v}");
    assert_eq!(v["payer"], buyer.pubkey().to_string());
    // At least the price: a cheaper requirement is met, a dearer one is not.
    let (_, v) = t.call("POST", "/verify", &key, Some(body(requirement("5000000"), requirement("5000000")))).await;
    assert_eq!(v["isValid"], true, "{v}");
    let (_, v) = t.call("POST", "/verify", &key, Some(body(requirement("20000000"), requirement("20000000")))).await;
    assert_eq!(reason(&v), "invalid_exact_svm_payload_transaction_amount_mismatch");
    // What the buyer accepted must be what the seller asks.
    let (_, v) = t.call("POST", "/verify", &key, Some(body(requirement("5000000"), requirement("10000000")))).await;
    assert_eq!(reason(&v), "invalid_payment_requirements");
    let mut exact = requirement("10000000");
    exact["scheme"] = json!("exact");
    let (_, v) = t.call("POST", "/verify", &key, Some(body(requirement("10000000"), exact))).await;
    assert_eq!(reason(&v), "invalid_scheme");
    let mut elsewhere = requirement("10000000");
    elsewhere["network"] = json!("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
    let (_, v) = t.call("POST", "/verify", &key, Some(body(elsewhere.clone(), elsewhere))).await;
    assert_eq!(reason(&v), "invalid_network");
    let mut other_payee = requirement("10000000");
    other_payee["payTo"] = json!(Pubkey::new_unique().to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(body(other_payee.clone(), other_payee))).await;
    assert_eq!(reason(&v), "invalid_exact_native_payload_recipient_mismatch");
    // A requirement paying an EVM address on a Solana network is the seller's own contradiction:
    // a verdict in x402's words, like any other well-formed request, never a settlement.
    let mut evm_payee = requirement("10000000");
    evm_payee["payTo"] = json!("0x70997970c51812dc3a010c7d01b50e0d17dc79c8");
    for path in ["/verify", "/settle"] {
        let (s, v) = t.call("POST", path, &key, Some(body(evm_payee.clone(), evm_payee.clone()))).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let why = if path == "/verify" { &v["invalidReason"] } else { &v["errorReason"] };
        assert_eq!(why, "invalid_payment_requirements", "{v}");
    }

    let (s, settled) = t.call("POST", "/settle", &key, Some(good.clone())).await;
    assert_eq!(s, StatusCode::OK, "{settled}");
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["network"], network, "v2 answers name the CAIP-2 network");
    assert_eq!(settled["transaction"], tx_signature(&tx));
    assert_eq!(settled["amount"], "10000000", "what moved, in lamports: {settled}");
    assert_eq!(t.lamports(&seller.pubkey().to_string()).await, 1_000_000_000 + 10_000_000);
    // Settled again by the same seller for the same terms: that settlement again (x402 /settle
    // is idempotent, so a seller that saw it pending can follow it), paid once.
    let (_, again) = t.call("POST", "/settle", &key, Some(good.clone())).await;
    assert_eq!(again["success"], true, "{again}");
    assert_eq!(again["transaction"], settled["transaction"], "the settling transaction is named: {again}");
    // A seller that does not remember the proof verifies it first: used.
    let (_, v) = t.call("POST", "/verify", &key, Some(good.clone())).await;
    assert_eq!(reason(&v), "duplicate_settlement", "{v}");
    assert!(v["invalidMessage"].as_str().unwrap().contains("already used"), "{v}");
    // Another account settling it: used, and not its business which transaction settled it.
    let (stranger, _, _) = t.customer().await;
    let (_, theirs) = t.call("POST", "/settle", &stranger, Some(good.clone())).await;
    assert_eq!(
        (theirs["success"].as_bool(), theirs["errorReason"].as_str()),
        (Some(false), Some("duplicate_settlement"))
    );
    assert_eq!(theirs["transaction"], "", "{theirs}");
    // The same proof for a dearer requirement, by the same seller: it does not pay that, used.
    let (_, dearer) =
        t.call("POST", "/settle", &key, Some(body(requirement("20000000"), requirement("20000000")))).await;
    assert_eq!(dearer["errorReason"], "duplicate_settlement", "{dearer}");
    assert_eq!(t.lamports(&seller.pubkey().to_string()).await, 1_000_000_000 + 10_000_000, "paid once");
}

fn tx_signature(encoded: &str) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
    let tx: solana_sdk::transaction::Transaction = bincode::deserialize(&bytes).unwrap();
    tx.signatures[0].to_string()
}

/// A settlement right after a verify takes that verify's pass only for what the verify checked:
/// a buyer who verifies a transfer to its own account (paying itself, with its own key) cannot
/// then settle it as a payment to a seller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_exact_spl_transfer_settles_only_for_the_recipient_it_was_verified_for() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let fixture = spl_fixture::Fixture::new(rpc).await;
    let mint = fixture.mint.to_string();
    let buyer = Keypair::new();
    let buyer_ata = fixture.account(rpc, &buyer.pubkey(), 5_000_000).await;
    let seller = Pubkey::new_unique();
    let seller_ata = fixture.account(rpc, &seller, 0).await;

    // To itself: refused (nothing would move, at the fee payer's cost).
    let tx = fixture.exact_tx(rpc, &fee_payer, &buyer, &buyer_ata, 1_000_000, 1_000).await;
    let to_self = x402_exact(&network, &tx, &buyer.pubkey().to_string(), &mint, 1_000_000, &fee_payer.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(to_self)).await;
    assert!(v["invalidMessage"].as_str().unwrap().contains("itself"), "{v}");
    // To an accomplice: verified as a payment to the accomplice.
    let accomplice = Pubkey::new_unique();
    let accomplice_ata = fixture.account(rpc, &accomplice, 0).await;
    let tx = fixture.exact_tx(rpc, &fee_payer, &buyer, &accomplice_ata, 1_000_000, 1_000).await;
    let to_accomplice = x402_exact(&network, &tx, &accomplice.to_string(), &mint, 1_000_000, &fee_payer.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(to_accomplice)).await;
    assert_eq!(v["isValid"], json!(true), "{v}");
    // Settled at once as a payment to the seller: refused, nothing moves.
    let to_seller = x402_exact(&network, &tx, &seller.to_string(), &mint, 1_000_000, &fee_payer.to_string());
    let (_, settled) = t.call("POST", "/settle", &key, Some(to_seller)).await;
    assert_eq!(settled["success"], json!(false), "{settled}");
    assert_eq!(settled["errorReason"], "invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata", "{settled}");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 0);
    assert_eq!(fixture.balance(rpc, &buyer_ata).await, 5_000_000);

    // A transfer to the seller, verified, then settled by eight requests at once: whichever takes
    // the verify's pass, the proof settles once.
    let tx = fixture.exact_tx(rpc, &fee_payer, &buyer, &seller_ata, 1_000_000, 1_000).await;
    let body = x402_exact(&network, &tx, &seller.to_string(), &mint, 1_000_000, &fee_payer.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(body.clone())).await;
    assert_eq!(v["isValid"], json!(true), "{v}");
    let answers = common::call_concurrently(&t.app, "/settle", &key, &body, 8).await;
    let transactions: std::collections::BTreeSet<_> =
        answers.iter().filter_map(|(_, a)| a["transaction"].as_str().filter(|t| !t.is_empty())).collect();
    assert_eq!(transactions.len(), 1, "{answers:?}");
    assert!(answers.iter().any(|(_, a)| a["success"] == json!(true)), "{answers:?}");
    assert_eq!(fixture.balance(rpc, &seller_ata).await, 1_000_000, "paid once");
    assert_eq!(fixture.balance(rpc, &buyer_ata).await, 4_000_000);
}

/// An `exact-native` transfer's fee is derived from its signatures and compute-unit price once
/// the cluster's lamports per signature is known: the lamports the SVM itself charges, for every
/// shape a payer may send, and one `getFeeForMessage` for all the verifies that follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_native_fees_are_derived_as_the_cluster_charges_them() {
    use solana_compute_budget_interface::ComputeBudgetInstruction as Budget;
    use solana_sdk::instruction::Instruction;
    use solana_sdk::message::{Message, VersionedMessage};
    use solana_sdk::signer::Signer as _;
    use solana_system_interface::instruction::transfer;
    use tollgate_facilitator::chains::solana::build::Transfer;
    use tollgate_facilitator::chains::solana::verify::{FeeParts, MEMO_V2};

    let t = SolanaApp::start_behind_proxy().await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let (a, b, to) = (Keypair::new(), Keypair::new(), Pubkey::new_unique());
    let pay = |from: &Keypair| transfer(&from.pubkey(), &to, 1_000_000);
    let shapes: Vec<(&str, Vec<Instruction>)> = vec![
        ("a plain transfer", vec![pay(&a)]),
        ("a limit without price", vec![Budget::set_compute_unit_limit(500), pay(&a)]),
        (
            "a price of 1 on one unit",
            vec![Budget::set_compute_unit_limit(1), Budget::set_compute_unit_price(1), pay(&a)],
        ),
        (
            "a price rounded up",
            vec![Budget::set_compute_unit_price(1_000_001), Budget::set_compute_unit_limit(1_000), pay(&a)],
        ),
        (
            "a limit above the cluster's ceiling",
            vec![Budget::set_compute_unit_limit(2_000_000), Budget::set_compute_unit_price(1_000_000), pay(&a)],
        ),
        ("a price of zero", vec![Budget::set_compute_unit_price(0), pay(&a)]),
        ("two signers", vec![pay(&a), pay(&b)]),
        ("a memo", vec![Instruction::new_with_bytes(MEMO_V2, b"order 7", vec![]), pay(&a)]),
    ];
    for (shape, instructions) in shapes {
        let message = Message::new_with_blockhash(&instructions, Some(&a.pubkey()), &blockhash);
        let charged = rpc.fee_for(&message).await.unwrap();
        let parts = FeeParts::of(&VersionedMessage::Legacy(message)).unwrap_or_else(|| panic!("{shape}: underived"));
        assert_eq!(parts.fee(5_000), charged, "{shape}: {parts:?}");
        let told = (parts.priority == 0).then_some(5_000);
        assert_eq!(parts.rate_in(charged), told, "{shape}: only a fee without priority part tells the rate");
    }
    // A price without a limit: the limit is the cluster's to choose, so the cluster is asked.
    let unlimited = Message::new_with_blockhash(&[Budget::set_compute_unit_price(5), pay(&a)], None, &blockhash);
    assert_eq!(FeeParts::of(&VersionedMessage::Legacy(unlimited)), None);

    // Payers funded to the lamport: the derived fee decides, and only the first verify asks it.
    let network = rpc.network().to_string();
    let seller = Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": seller.pubkey().to_string(), "amount": 1}))).await;
    let funded = |lamports: u64| async move {
        let payer = Keypair::new();
        let signature = rpc.request_airdrop(&payer.pubkey(), lamports).await.unwrap();
        rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap().unwrap();
        payer
    };
    let verify_message = |payer: Keypair, message: Message| {
        let encoded = signed_message(&payer, message);
        let requirement = json!({"scheme": "exact-native", "network": network, "amount": "10000000",
                                 "asset": "native", "payTo": seller.pubkey().to_string(), "maxTimeoutSeconds": 30});
        let body = json!({"x402Version": 2,
            "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": {"transaction": encoded},
                               "resource": {"url": "https://seller.example/a", "description": "", "mimeType": ""}},
            "paymentRequirements": requirement});
        let (t, key) = (&t, key.clone());
        async move { t.call("POST", "/verify", &key, Some(body)).await.1 }
    };
    // Each signed against a fresh blockhash: funding the payers takes a while.
    let (seller_key, verify_message) = (seller.pubkey(), &verify_message);
    let verify = |payer: Keypair, priority_fee: Option<u64>| async move {
        let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
        let tx = Transfer { from: payer.pubkey(), to: seller_key, lamports: 10_000_000, priority_fee };
        verify_message(payer, tx.message(&blockhash)).await
    };
    // A first payer whose price makes the cluster's fee saturate: if its answer taught the rate,
    // the rate would be the payer's to choose (here 0), and later payers' fees would go unseen.
    let poisoner = Keypair::new();
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let saturating = Message::new_with_blockhash(
        &[
            Budget::set_compute_unit_limit(1_000_000),
            Budget::set_compute_unit_price(u64::MAX),
            transfer(&poisoner.pubkey(), &seller.pubkey(), 10_000_000),
        ],
        Some(&poisoner.pubkey()),
        &blockhash,
    );
    let v = verify_message(poisoner, saturating).await;
    assert_ne!(v["isValid"], true, "{v}");
    let before = proxy.calls("getFeeForMessage");
    let v = verify(funded(10_005_000).await, None).await;
    assert_eq!(v["isValid"], true, "amount and base fee, to the lamport: {v}");
    let v = verify(funded(10_005_999).await, Some(1_000)).await;
    assert_eq!(v["invalidReason"], "insufficient_funds", "a priority fee of 1,000 lamports: one short: {v}");
    let v = verify(funded(10_006_000).await, Some(1_000)).await;
    assert_eq!(v["isValid"], true, "{v}");
    let v = verify(funded(10_004_999).await, None).await;
    assert_eq!(v["invalidReason"], "insufficient_funds", "{v}");
    assert_eq!(proxy.calls("getFeeForMessage") - before, 1, "the rate is learned once, the rest derived");
}

/// A seller's repeated `/settle` of a settled proof is answered with its settlement for
/// [`REPEAT_WINDOW`](tollgate_facilitator::payment::REPEAT_WINDOW) after its confirmation, for
/// the resource it was made for; later, the proof is used: a paid request is not a ticket forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_is_answered_again_only_within_the_repeat_window() {
    use solana_sdk::signer::Signer as _;
    let clock = tollgate_facilitator::clock::ManualClock::new(chrono::Utc::now());
    let t = SolanaApp::start_at(std::sync::Arc::new(clock.clone())).await;
    let (key, _, _) = t.customer().await;
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let network = rpc.network().to_string();
    let (seller, buyer) = (Keypair::new(), Keypair::new());
    for who in [&seller, &buyer] {
        t.call("POST", "/dev/airdrop", &key, Some(json!({"address": who.pubkey().to_string(), "amount": 1}))).await;
    }
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let requirement = json!({"scheme": "exact-native", "network": network, "amount": "10000000",
                             "asset": "native", "payTo": seller.pubkey().to_string(), "maxTimeoutSeconds": 30});
    let body = json!({"x402Version": 2,
        "paymentPayload": {"x402Version": 2, "accepted": requirement,
                           "payload": {"transaction": signed_transfer(&buyer, &seller.pubkey(), 10_000_000, blockhash)},
                           "resource": {"url": "https://seller.example/a", "description": "", "mimeType": ""}},
        "paymentRequirements": requirement});
    let (_, first) = t.call("POST", "/settle", &key, Some(body.clone())).await;
    assert_eq!(first["success"], true, "{first}");
    clock.advance(std::time::Duration::from_secs(9 * 60));
    let (_, again) = t.call("POST", "/settle", &key, Some(body.clone())).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &first["transaction"]));
    clock.advance(std::time::Duration::from_secs(2 * 60));
    let (_, late) = t.call("POST", "/settle", &key, Some(body)).await;
    assert_eq!((late["success"].as_bool(), late["errorReason"].as_str()), (Some(false), Some("duplicate_settlement")));
}

/// A local payment is the transaction built for it. A stranger builds a payment from a buyer's
/// wallet to a shop and confirms it with a transfer the buyer made otherwise (an x402 payment),
/// or with the transaction another account built for the same order: refused, nothing recorded.
/// Two builds of one order are two transactions; the buyer's account and the stranger's racing
/// to confirm the one the buyer signed: the buyer's payment is confirmed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_confirm_a_local_payment_with_another_transfer() {
    use base64::Engine as _;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;
    let t = SolanaApp::start().await;
    let (alice, _, _) = t.customer().await;
    let (mallory, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let (buyer, shop) = (Keypair::new(), Keypair::new());
    for who in [&buyer, &shop] {
        t.call("POST", "/dev/airdrop", &alice, Some(json!({"address": who.pubkey().to_string(), "amount": 1}))).await;
    }
    let order = json!({"walletAddress": buyer.pubkey().to_string(), "recipientAddress": shop.pubkey().to_string(), "amount": 0.05});
    let build = |key: String| {
        let (t, order) = (&t, order.clone());
        async move {
            let (s, built) = t.call("POST", "/transaction/send", &key, Some(order)).await;
            assert_eq!(s, StatusCode::OK, "{built}");
            built
        }
    };
    let confirm = |key: String, id: String, tx: String| {
        let t = &t;
        async move { t.call("POST", "/transaction/confirm", &key, Some(json!({"paymentId": id, "transaction": tx}))).await }
    };
    let rpc = &backend.rpc;
    let land = |tx: Transaction| async move {
        let signature = rpc.send(&tx).await.unwrap();
        rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap().unwrap();
        signature.to_string()
    };

    // The buyer pays the shop the same amount outside local mode (an exact-native proof, say).
    let transfer = solana_system_interface::instruction::transfer(&buyer.pubkey(), &shop.pubkey(), 50_000_000);
    let paid = send_solana(rpc, &buyer, &[], &[transfer]).await.unwrap().to_string();
    let stranger = build(mallory.clone()).await;
    let stranger_id = stranger["paymentId"].as_str().unwrap().to_owned();
    let (s, e) = confirm(mallory.clone(), stranger_id.clone(), paid.clone()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not the one built"), "{e}");

    // Alice builds the same order; the buyer signs Alice's transaction.
    let built = build(alice.clone()).await;
    assert_ne!(built["transaction"], stranger["transaction"], "two builds, two transactions");
    let alice_id = built["paymentId"].as_str().unwrap().to_owned();
    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let mut tx: Transaction = bincode::deserialize(&bytes).unwrap();
    let blockhash = tx.message.recent_blockhash;
    tx.sign(&[&buyer], blockhash);
    let signed = land(tx).await;
    let (mine, theirs) = tokio::join!(
        confirm(alice.clone(), alice_id.clone(), signed.clone()),
        confirm(mallory.clone(), stranger_id.clone(), signed.clone())
    );
    assert_eq!((mine.0, mine.1["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{}", mine.1);
    assert_eq!(theirs.0, StatusCode::PAYMENT_REQUIRED, "{}", theirs.1);
    let (_, status) = t.call("GET", &format!("/payment/status/{stranger_id}"), &mallory, None).await;
    assert_eq!((status["status"].as_str(), &status["transaction"]), (Some("built"), &Value::Null), "{status}");
    // Eight confirms of Alice's payment at once: one record, confirmed.
    let racers: Vec<_> = (0..8).map(|_| confirm(alice.clone(), alice_id.clone(), signed.clone())).collect();
    for (s, answer) in futures_util::future::join_all(racers).await {
        assert_eq!((s, answer["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{answer}");
    }
    let (_, history) = t.call("GET", &format!("/payment/history/{}?type=sent", buyer.pubkey()), &alice, None).await;
    assert_eq!(history["total"], 1, "{history}");
}

/// Confirmed means the money arrived, on Solana too: what a landed transaction moved is read
/// from the payee's balance before and after it. A payment recorded for more than its transfer
/// moved fails, naming what arrived; one for what it moved is confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_that_moved_less_than_its_payment_fails_it() {
    use solana_sdk::signer::Signer as _;
    use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _};
    use tollgate_protocol::gateway::{Direction, PaymentStatus};
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let (buyer, shop) = (Keypair::new(), Keypair::new());
    for who in [&buyer, &shop] {
        t.call("POST", "/dev/airdrop", &key, Some(json!({"address": who.pubkey().to_string(), "amount": 1}))).await;
    }
    let transfer = solana_system_interface::instruction::transfer(&buyer.pubkey(), &shop.pubkey(), 10_000_000);
    let signature = send_solana(rpc, &buyer, &[], &[transfer]).await.unwrap();
    let now = chrono::Utc::now();
    t.store.create_account("acct", now).await.unwrap();
    let recorded = |id: &str, side: Direction, lamports: u128| NewPayment {
        owner_side: side,
        status: PaymentStatus::Pending,
        transaction: Some(signature.to_string()),
        next_check_at: Some(now),
        ..NewPayment::native(
            id,
            "acct",
            rpc.network().clone(),
            (buyer.pubkey().to_string(), shop.pubkey().to_string()),
            tollgate_protocol::AtomicAmount(lamports),
            now,
        )
    };
    t.store.insert_payment(&recorded("pay_more", Direction::Sent, 20_000_000)).await.unwrap();
    t.store.insert_payment(&recorded("pay_exact", Direction::Received, 10_000_000)).await.unwrap();
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::seconds(1)).await;
    let more = t.store.get_payment("pay_more").await.unwrap().unwrap();
    assert_eq!(more.payment.status, PaymentStatus::Failed);
    assert!(more.error.as_deref().unwrap().contains("only 10000000 of the 20000000"), "{:?}", more.error);
    let exact = t.store.get_payment("pay_exact").await.unwrap().unwrap();
    assert_eq!((exact.payment.status, exact.payment.amount_atomic.get()), (PaymentStatus::Confirmed, 10_000_000));
}

/// Token-2022 on the embedded ledger. Mints whose payments cannot be settled exactly — a
/// transfer fee, a permanent delegate, non-transferable, pausable, a transfer hook — are refused
/// on `/verify` with their reason, and `/token/info` lists their extensions and why. A transfer in
/// a transfer-fee mint made anyway (by the real Token-2022 program) delivers less than it moves:
/// a payment recorded for it fails, naming what arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_2022_mints_that_cannot_settle_exactly_are_refused() {
    use common::solana::{mint_2022, set_account, transfer_checked};
    use solana_sdk::instruction::{AccountMeta, Instruction};
    use solana_sdk::signer::Signer as _;
    use tollgate_facilitator::chains::solana::spl::{ASSOCIATED_TOKEN_PROGRAM, associated_token_address};
    use tollgate_facilitator::chains::solana::token::TOKEN_2022_PROGRAM;
    use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _};
    use tollgate_protocol::gateway::{Direction, PaymentStatus};
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let (rpc, url) = (&backend.rpc, backend.embedded.as_ref().unwrap().rpc_url().to_owned());
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let (funder, buyer, shop) = (Keypair::new(), Keypair::new(), Keypair::new());
    for who in [&funder, &buyer, &shop] {
        t.call("POST", "/dev/airdrop", &key, Some(json!({"address": who.pubkey().to_string(), "amount": 1}))).await;
    }
    // TransferFeeConfig: authorities, withheld, then the older and newer fees (epoch, max, bps).
    let mut fee_config = vec![0u8; 72];
    for _ in 0..2 {
        fee_config.extend_from_slice(&0u64.to_le_bytes());
        fee_config.extend_from_slice(&1_000_000_000u64.to_le_bytes());
        fee_config.extend_from_slice(&100u16.to_le_bytes());
    }
    let delegate = Pubkey::new_unique();
    let mut hook = vec![0u8; 32];
    hook.extend_from_slice(Pubkey::new_unique().as_ref());
    // (extension type, its value), its name, and why it is refused.
    let refused = [
        ((1, fee_config), "transferFeeConfig", "transfer fee (100 basis points"),
        ((12, delegate.to_bytes().to_vec()), "permanentDelegate", "can move anyone's tokens"),
        ((9, vec![]), "nonTransferable", "cannot be transferred"),
        ((26, vec![0; 33]), "pausable", "can be paused"),
        ((14, hook), "transferHook", "hook program"),
    ];
    let mut fee_mint = None;
    for (extension, name, why) in refused {
        let mint = Pubkey::new_unique();
        set_account(&url, &mint, &TOKEN_2022_PROGRAM, &mint_2022(&funder.pubkey(), &[extension])).await;
        fee_mint.get_or_insert(mint);
        let (s, info) = t.call("GET", &format!("/token/info/{mint}"), &key, None).await;
        assert_eq!((s, &info["standard"], &info["extensions"]), (StatusCode::OK, &json!("token-2022"), &json!([name])));
        assert!(info["refused"].as_str().unwrap().contains(why), "{info}");
        // An exact payment in it, as a buyer would sign it.
        let source = associated_token_address(&buyer.pubkey(), &mint, &TOKEN_2022_PROGRAM);
        let destination = associated_token_address(&shop.pubkey(), &mint, &TOKEN_2022_PROGRAM);
        let transfer =
            transfer_checked(TOKEN_2022_PROGRAM, (source, mint, destination), buyer.pubkey(), (1_000_000, 6));
        let budget = [
            solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(20_000),
            solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(1),
        ];
        let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
        let message = solana_sdk::message::Message::new_with_blockhash(
            &[budget[0].clone(), budget[1].clone(), transfer],
            Some(&fee_payer),
            &blockhash,
        );
        let mut tx = solana_sdk::transaction::Transaction::new_unsigned(message);
        tx.partial_sign(&[&buyer], blockhash);
        use base64::Engine as _;
        let tx = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
        let body =
            x402_exact(&network, &tx, &shop.pubkey().to_string(), &mint.to_string(), 1_000_000, &fee_payer.to_string());
        let (_, v) = t.call("POST", "/verify", &key, Some(body)).await;
        assert_eq!(
            (v["isValid"].as_bool(), v["invalidReason"].as_str()),
            (Some(false), Some("invalid_payment_requirements")),
            "{name}: {v}"
        );
        assert!(v["invalidMessage"].as_str().unwrap().contains(why), "{name}: {v}");
    }

    // The transfer-fee mint, used anyway: the real program keeps 1% of what moves.
    let mint = fee_mint.unwrap();
    let ata = |owner: &Pubkey| associated_token_address(owner, &mint, &TOKEN_2022_PROGRAM);
    let create = |owner: &Pubkey| {
        Instruction::new_with_bytes(
            ASSOCIATED_TOKEN_PROGRAM,
            &[1],
            vec![
                AccountMeta::new(funder.pubkey(), true),
                AccountMeta::new(ata(owner), false),
                AccountMeta::new_readonly(*owner, false),
                AccountMeta::new_readonly(mint, false),
                AccountMeta::new_readonly(solana_system_interface::program::ID, false),
                AccountMeta::new_readonly(TOKEN_2022_PROGRAM, false),
            ],
        )
    };
    let mut mint_to = vec![7];
    mint_to.extend_from_slice(&5_000_000u64.to_le_bytes());
    let mint_to = Instruction::new_with_bytes(
        TOKEN_2022_PROGRAM,
        &mint_to,
        vec![
            AccountMeta::new(mint, false),
            AccountMeta::new(ata(&buyer.pubkey()), false),
            AccountMeta::new_readonly(funder.pubkey(), true),
        ],
    );
    send_solana(rpc, &funder, &[], &[create(&buyer.pubkey()), create(&shop.pubkey()), mint_to]).await.unwrap();
    let accounts = (ata(&buyer.pubkey()), mint, ata(&shop.pubkey()));
    let transfer = transfer_checked(TOKEN_2022_PROGRAM, accounts, buyer.pubkey(), (1_000_000, 6));
    let signature = send_solana(rpc, &buyer, &[], &[transfer]).await.unwrap();
    let now = chrono::Utc::now();
    t.store.create_account("acct", now).await.unwrap();
    let payment = NewPayment {
        owner_side: Direction::Received,
        status: PaymentStatus::Pending,
        transaction: Some(signature.to_string()),
        asset: mint.to_string(),
        decimals: 6,
        next_check_at: Some(now),
        ..NewPayment::native(
            "pay_fee",
            "acct",
            rpc.network().clone(),
            (buyer.pubkey().to_string(), shop.pubkey().to_string()),
            tollgate_protocol::AtomicAmount(1_000_000),
            now,
        )
    };
    t.store.insert_payment(&payment).await.unwrap();
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::seconds(1)).await;
    let after = t.store.get_payment("pay_fee").await.unwrap().unwrap();
    assert_eq!(after.payment.status, PaymentStatus::Failed);
    assert!(after.error.as_deref().unwrap().contains("only 990000 of the 1000000"), "{:?}", after.error);
}

/// `exact-native` transfers the runtime would refuse are refused at `/verify`, before anything is
/// claimed or served: to a new account, less than the rent-exempt minimum; leaving the payer (or
/// a separate fee payer) with dust below that minimum; a fee payer that cannot pay the fee.
/// Spending all, and paying an existing account any amount, pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_native_transfers_the_runtime_would_refuse_for_rent_are_refused() {
    use solana_sdk::signer::Signer as _;
    use solana_system_interface::instruction::transfer;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let network = rpc.network().to_string();
    let rent = rpc.rent_exempt_minimum().await.unwrap();
    let funded = |lamports: u64| async move {
        let who = Keypair::new();
        let signature = rpc.request_airdrop(&who.pubkey(), lamports).await.unwrap();
        rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap().unwrap();
        who
    };
    let shop = funded(1_000_000_000).await;
    let verify = |signers: Vec<Keypair>, fee_payer: Pubkey, to: Pubkey, lamports: u64| {
        let (t, key, network) = (&t, key.clone(), network.clone());
        async move {
            let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
            let message = solana_sdk::message::Message::new_with_blockhash(
                &[transfer(&signers.last().unwrap().pubkey(), &to, lamports)],
                Some(&fee_payer),
                &blockhash,
            );
            let refs: Vec<&Keypair> = signers.iter().collect();
            let tx = solana_sdk::transaction::Transaction::new(&refs, message, blockhash);
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
            let requirement = json!({"scheme": "exact-native", "network": network, "amount": lamports.to_string(),
                                     "asset": "native", "payTo": to.to_string(), "maxTimeoutSeconds": 30});
            let body = json!({"x402Version": 2,
                "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": {"transaction": encoded},
                                   "resource": {"url": "https://seller.example/a", "description": "", "mimeType": ""}},
                "paymentRequirements": requirement});
            t.call("POST", "/verify", &key, Some(body)).await.1
        }
    };
    let refused = |v: &Value, reason: &str, why: &str| {
        assert_eq!((v["isValid"].as_bool(), v["invalidReason"].as_str()), (Some(false), Some(reason)), "{v}");
        assert!(v["invalidMessage"].as_str().unwrap().contains(why), "{v}");
    };

    // A new account, paid less than the minimum; then the minimum.
    let payer = funded(1_000_000_000).await;
    let fresh = Pubkey::new_unique();
    let v = verify(vec![payer.insecure_clone()], payer.pubkey(), fresh, 1_000).await;
    refused(&v, "invalid_payment_requirements", "does not exist yet");
    let v = verify(vec![payer.insecure_clone()], payer.pubkey(), fresh, rent).await;
    assert_eq!(v["isValid"], true, "{v}");
    // An existing account: any amount.
    let v = verify(vec![payer.insecure_clone()], payer.pubkey(), shop.pubkey(), 1_000).await;
    assert_eq!(v["isValid"], true, "{v}");

    // The payer left with dust; with nothing left at all.
    let fee = 5_000;
    let dusty = funded(10_000_000 + fee + 1_000).await;
    let v = verify(vec![dusty.insecure_clone()], dusty.pubkey(), shop.pubkey(), 10_000_000).await;
    refused(&v, "insufficient_funds", "would leave the payer 1000 lamports");
    let v = verify(vec![dusty.insecure_clone()], dusty.pubkey(), shop.pubkey(), 10_000_000 + 1_000).await;
    assert_eq!(v["isValid"], true, "everything spent: {v}");

    // A separate fee payer that cannot pay the fee, or would keep dust.
    let poor = funded(rent + 1_000).await;
    let v = verify(vec![poor.insecure_clone(), payer.insecure_clone()], poor.pubkey(), shop.pubkey(), 1_000).await;
    refused(&v, "insufficient_funds", "would leave the fee payer");
    let sponsor = funded(1_000_000_000).await;
    let v =
        verify(vec![sponsor.insecure_clone(), payer.insecure_clone()], sponsor.pubkey(), shop.pubkey(), 1_000).await;
    assert_eq!(v["isValid"], true, "{v}");
}

/// Sponsorship is accounted: a stranger's account settles exact payments between wallets it
/// holds both ends of, each costing the facilitator's fee payer its fees, until the plan's daily
/// budget is spent: then `/settle` and `/verify` answer 429, and the fee payer has spent at most
/// the budget. A payment to the payer itself is refused outright.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_loop_stops_at_the_plans_sponsorship_budget() {
    use solana_sdk::signer::Signer as _;
    use tollgate_facilitator::plans::Plan;
    // Room for three settlements of 10,001 lamports (two signatures, and a priority of 20
    // micro-lamports a unit over 20,000 units, rounded up), not four.
    let t = SolanaApp::start_configured(|c| c.plans.get_mut(Plan::Premium).sponsorship.lamports_per_day = 35_000).await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let network = rpc.network().to_string();
    let fee_payer = backend.fee_payer().unwrap();
    let fixture = spl_fixture::Fixture::new(rpc).await;
    let (payer, payee) = (Keypair::new(), Keypair::new());
    fixture.account(rpc, &payer.pubkey(), 5_000_000).await;
    let payee_ata = fixture.account(rpc, &payee.pubkey(), 0).await;
    let mint = fixture.mint.to_string();
    let before = rpc.balance(&fee_payer).await.unwrap();
    let settle = |tx: String, to: String| {
        let body = x402_exact(&network, &tx, &to, &mint, 1_000, &fee_payer.to_string());
        let (t, key) = (&t, key.clone());
        async move { t.call("POST", "/settle", &key, Some(body)).await }
    };
    let mut settled = 0;
    let refused = loop {
        let tx = fixture.exact_tx(rpc, &fee_payer, &payer, &payee_ata, 1_000, 20).await;
        let (s, answer) = settle(tx, payee.pubkey().to_string()).await;
        if s != StatusCode::OK {
            break (s, answer);
        }
        assert_eq!(answer["success"], true, "{answer}");
        settled += 1;
        assert!(settled <= 3, "settled past the budget");
    };
    assert_eq!(settled, 3);
    assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{}", refused.1);
    assert_eq!(refused.1["error"]["code"], "RATE_LIMIT");
    assert!(refused.1["error"]["message"].as_str().unwrap().contains("budget"), "{}", refused.1);
    // /verify says so too, before a seller serves what it could not settle.
    let tx = fixture.exact_tx(rpc, &fee_payer, &payer, &payee_ata, 1_000, 20).await;
    let (s, _) = t
        .call(
            "POST",
            "/verify",
            &key,
            Some(x402_exact(&network, &tx, &payee.pubkey().to_string(), &mint, 1_000, &fee_payer.to_string())),
        )
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let spent = before - rpc.balance(&fee_payer).await.unwrap();
    assert!(spent <= 35_000, "the fee payer spent {spent} lamports, more than the budget");
    assert_eq!(spent, 3 * 10_001, "three settlements' fees");

    // Another account has its own budget; a payment to the payer itself is refused.
    let (other, _, _) = t.customer().await;
    let payer_ata = tollgate_facilitator::chains::solana::spl::associated_token_address(
        &payer.pubkey(),
        &fixture.mint,
        &tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM,
    );
    let to_itself = fixture.exact_tx(rpc, &fee_payer, &payer, &payer_ata, 1_000, 20).await;
    let body = x402_exact(&network, &to_itself, &payer.pubkey().to_string(), &mint, 1_000, &fee_payer.to_string());
    let (s, answer) = t.call("POST", "/settle", &other, Some(body)).await;
    assert_eq!((s, answer["success"].as_bool()), (StatusCode::OK, Some(false)), "{answer}");
    assert!(answer["errorMessage"].as_str().unwrap().contains("itself"), "{answer}");
}

/// Anyone may build a local payment to anyone's wallet: the payee's account (whose custodial
/// wallet it pays) learns of it — history, status, webhooks — only once it is confirmed, never
/// of a build that only carries a stranger's metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_to_another_accounts_wallet_reaches_it_only_once_confirmed() {
    use base64::Engine as _;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;
    use tollgate_facilitator::store::WebhookStore as _;
    let t = SolanaApp::start().await;
    let (victim, _, victim_wallet) = t.customer().await;
    let (builder, _, _) = t.customer().await;
    t.call("POST", "/dev/airdrop", &victim, Some(json!({"address": victim_wallet, "amount": 1}))).await;
    let victim_account = t.state.auth.authenticate_key(&victim).await.unwrap().account_id.clone();
    let endpoint = tollgate_facilitator::store::StoredWebhookEndpoint {
        id: "whe_victim".into(),
        account_id: victim_account,
        url: "https://victim.example/hook".into(),
        description: None,
        sealed_secret: "sealed".into(),
        created_at: chrono::Utc::now(),
    };
    t.store.insert_webhook_endpoint(&endpoint, 10).await.unwrap();
    let buyer = Keypair::new();
    t.call("POST", "/dev/airdrop", &builder, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let order = json!({"walletAddress": buyer.pubkey().to_string(), "recipientAddress": victim_wallet, "amount": 0.05,
                       "metadata": {"note": "you owe me"}});
    let (s, built) = t.call("POST", "/transaction/send", &builder, Some(order)).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    let id = built["paymentId"].as_str().unwrap().to_owned();
    let (_, history) = t.call("GET", &format!("/payment/history/{victim_wallet}"), &victim, None).await;
    assert_eq!(history["total"], 0, "the payee's account does not see a build: {history}");
    assert_eq!(t.call("GET", &format!("/payment/status/{id}"), &victim, None).await.0, StatusCode::NOT_FOUND);
    assert!(t.store.webhook_deliveries(Some(&endpoint.id), 10).await.unwrap().is_empty(), "nor is it notified");

    // Signed, sent, confirmed: now it is the payee's too.
    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let mut tx: Transaction = bincode::deserialize(&bytes).unwrap();
    let blockhash = tx.message.recent_blockhash;
    tx.sign(&[&buyer], blockhash);
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let signature = rpc.send(&tx).await.unwrap();
    rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await.unwrap().unwrap();
    let confirm = json!({"paymentId": id, "transaction": signature.to_string()});
    let (s, confirmed) = t.call("POST", "/transaction/confirm", &builder, Some(confirm)).await;
    assert_eq!((s, confirmed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{confirmed}");
    let (_, history) = t.call("GET", &format!("/payment/history/{victim_wallet}?type=received"), &victim, None).await;
    assert_eq!((history["total"].as_u64(), history["payments"][0]["paymentId"].as_str()), (Some(1), Some(id.as_str())));
    let (s, status) = t.call("GET", &format!("/payment/status/{id}"), &victim, None).await;
    assert_eq!((s, status["status"].as_str()), (StatusCode::OK, Some("confirmed")));
    let events: Vec<String> =
        t.store.webhook_deliveries(Some(&endpoint.id), 10).await.unwrap().into_iter().map(|d| d.event_type).collect();
    assert_eq!(events, ["payment.confirmed"], "notified once, of the confirmation");
}

/// With `solana_commitment = "finalized"`, a verdict waits for a rooted block on every path. The
/// embedded ledger roots at once, so a proxy makes the node say "confirmed, not yet rooted" (one
/// confirmation; no transaction at `finalized`) until the test roots it: a receive whose wait ends
/// first answers pending; the reconciler confirms it once the block is rooted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalized_commitment_confirms_only_rooted_transfers() {
    use common::rpc_proxy::Rule;
    use solana_sdk::signer::Signer as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = SolanaApp::start_full(true, Arc::new(SystemClock), |c| {
        c.solana_commitment = tollgate_facilitator::config::SolanaCommitment::Finalized;
    })
    .await;
    let proxy = t.proxy.as_ref().unwrap();
    // Rooted at once (as the ledger is) while the test funds its wallets.
    let rooted = Arc::new(AtomicBool::new(true));
    let seen = rooted.clone();
    proxy.rule(
        "getSignatureStatuses",
        Rule::Rewrite(Arc::new(move |_, mut result| {
            if !seen.load(Ordering::SeqCst)
                && let Some(statuses) = result["value"].as_array_mut()
            {
                for status in statuses.iter_mut().filter(|s| !s.is_null()) {
                    status["confirmations"] = json!(1);
                    status["confirmationStatus"] = json!("confirmed");
                }
            }
            result
        })),
    );
    let seen = rooted.clone();
    proxy.rule(
        "getTransaction",
        Rule::Rewrite(Arc::new(move |params, result| {
            let finalized = params[1]["commitment"] == "finalized";
            if finalized && !seen.load(Ordering::SeqCst) { Value::Null } else { result }
        })),
    );
    let (key, _, _) = t.customer().await;
    let rpc = &t.state.chains.embedded_solana().unwrap().rpc;
    let (buyer, shop) = (Keypair::new(), Keypair::new());
    for who in [&buyer, &shop] {
        t.call("POST", "/dev/airdrop", &key, Some(json!({"address": who.pubkey().to_string(), "amount": 1}))).await;
    }
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let proof = signed_proof(&rpc.network().to_string(), &buyer, &shop.pubkey(), 10_000_000, blockhash);
    let body = json!({"walletAddress": shop.pubkey().to_string(), "paymentProof": proof, "expectedAmount": 0.01, "timeout": 1});
    rooted.store(false, Ordering::SeqCst);
    let (s, pending) = t.call("POST", "/payment/receive", &key, Some(body)).await;
    assert_eq!((s, pending["status"].as_str()), (StatusCode::ACCEPTED, Some("pending")), "{pending}");
    let id = pending["paymentId"].as_str().unwrap();
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::minutes(20)).await;
    let (_, status) = t.call("GET", &format!("/payment/status/{id}"), &key, None).await;
    assert_eq!(status["status"], "pending", "not rooted yet: {status}");
    rooted.store(true, Ordering::SeqCst);
    common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::minutes(40)).await;
    let (_, status) = t.call("GET", &format!("/payment/status/{id}"), &key, None).await;
    assert_eq!(status["status"], "confirmed", "{status}");
}

/// An x402 `/settle` whose payload declares its route (x402 `bazaar`) is cataloged under the
/// settling account, and the seller is told in the `EXTENSION-RESPONSES` sidechannel: processing
/// on the first settlement, then success (or the refusal and its reason) when the same
/// declaration is settled again once the catalog has handled it. A declaration the catalog
/// refuses changes nothing of the settlement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x402_settlement_is_cataloged_and_the_seller_is_told_in_extension_responses() {
    use base64::Engine as _;
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let buyer = Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let seller = Keypair::new();
    let declared = |schema: Value| {
        json!({"info": {"input": {"type": "http", "method": "GET", "queryParams": {"city": "Lisbon"}}},
               "schema": schema})
    };
    // One settlement's body: `lamports` to the seller, declared as `declaration` says.
    let body = |lamports: u64, declaration: Value, tx: String| {
        let requirement = json!({"scheme": "exact-native", "network": network, "amount": lamports.to_string(),
                                 "asset": "native", "payTo": seller.pubkey().to_string(), "maxTimeoutSeconds": 30});
        json!({"x402Version": 2,
            "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": {"transaction": tx},
                "resource": {"url": "https://seller.example/weather?city=Porto", "description": "Weather by city",
                             "mimeType": "application/json", "serviceName": "Weather Co", "tags": ["weather"]},
                "extensions": {"bazaar": declaration}},
            "paymentRequirements": requirement})
    };
    // Settles `body` (again), answering the settlement and what the sidechannel said of `bazaar`.
    let settle = |body: Value| {
        let (app, key) = (t.app.clone(), key.clone());
        async move {
            let request = Request::post("/settle")
                .header("authorization", format!("Bearer {key}"))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap();
            let answer = app.oneshot(request).await.unwrap();
            let header = answer.headers().get("extension-responses").map(|h| h.to_str().unwrap().to_owned());
            let settled: Value =
                serde_json::from_slice(&to_bytes(answer.into_body(), usize::MAX).await.unwrap()).unwrap();
            let said = header.map_or(Value::Null, |h| {
                let decoded = base64::engine::general_purpose::STANDARD.decode(h).unwrap();
                serde_json::from_slice::<Value>(&decoded).unwrap()["bazaar"].clone()
            });
            (settled, said)
        }
    };
    // Settled again (the same proof for the same terms: answered again) until the catalog has
    // handled the declaration: what the sidechannel then says.
    let handled = |body: Value| {
        let settle = &settle;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let (settled, said) = settle(body.clone()).await;
                assert_eq!(settled["success"], true, "{settled}");
                if said["status"] != "processing" || std::time::Instant::now() > deadline {
                    return said;
                }
                tokio::task::yield_now().await;
            }
        }
    };
    let signed = |lamports: u64| {
        let (rpc, buyer, seller) = (&backend.rpc, &buyer, seller.pubkey());
        async move { signed_transfer(buyer, &seller, lamports, rpc.latest_blockhash().await.unwrap().0) }
    };

    let good = body(1_000_000, declared(json!({"type": "object", "required": ["input"]})), signed(1_000_000).await);
    let (settled, said) = settle(good.clone()).await;
    assert_eq!((settled["success"].as_bool(), said), (Some(true), json!({"status": "processing"})), "{settled}");
    assert_eq!(handled(good).await, json!({"status": "success"}));
    let (_, own) = t.call("GET", "/discovery/own", &key, None).await;
    let items = own["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{own}");
    assert_eq!(items[0]["resource"], "https://seller.example/weather", "{own}");
    assert_eq!(items[0]["serviceName"], "Weather Co");

    // A schema that refers outside itself: refused and said so; the settlement stands.
    let hostile =
        body(2_000_000, declared(json!({"$ref": "https://evil.example/schema.json"})), signed(2_000_000).await);
    let (settled, said) = settle(hostile.clone()).await;
    assert_eq!((settled["success"].as_bool(), said), (Some(true), json!({"status": "processing"})), "{settled}");
    let said = handled(hostile).await;
    assert_eq!(said["status"], "rejected", "{said}");
    assert!(said["rejectedReason"].as_str().unwrap().contains("evil.example"), "{said}");
    let (_, own) = t.call("GET", "/discovery/own", &key, None).await;
    assert_eq!(own["items"].as_array().unwrap().len(), 1, "nothing more cataloged: {own}");
    assert_eq!(t.lamports(&seller.pubkey().to_string()).await, 3_000_000, "both settled");
}

/// The gateway's `/payment/receive` catalogs a route from its `discovery` field only when the
/// offer it names is the one the buyer's x402 v2 payload accepted, to the last field, and the
/// payment's own resource; another account naming a resource already cataloged lists nothing.
/// The payment is settled the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_catalogs_only_the_offer_its_buyer_accepted_and_a_resource_once() {
    use solana_sdk::signer::Signer as _;
    let t = SolanaApp::start().await;
    let (key, _, _) = t.customer().await;
    let (other, _, _) = t.customer().await;
    let backend = t.state.chains.embedded_solana().unwrap();
    let network = backend.rpc.network().to_string();
    let buyer = Keypair::new();
    t.call("POST", "/dev/airdrop", &key, Some(json!({"address": buyer.pubkey().to_string(), "amount": 1}))).await;
    let seller = Keypair::new();
    let url = "https://shop.example/quote";
    let offer = json!({"scheme": "exact-native", "network": network, "amount": "1000000", "asset": "native",
                       "payTo": seller.pubkey().to_string(), "maxTimeoutSeconds": 60});
    let declaration = json!({"info": {"input": {"type": "http", "method": "GET"}}, "schema": {"type": "object"}});
    // A receive by `account` of a fresh v2 payment accepting `offer`, declaring `declared` as its offer.
    let receive = |account: String, declared: Value, resource: &'static str| {
        let (app, rpc, buyer, seller, offer, declaration) =
            (t.app.clone(), &backend.rpc, &buyer, seller.pubkey(), offer.clone(), declaration.clone());
        async move {
            let tx = signed_transfer(buyer, &seller, 1_000_000, rpc.latest_blockhash().await.unwrap().0);
            let proof = tollgate_protocol::x402::header::encode(&json!({
                "x402Version": 2, "accepted": offer, "payload": {"transaction": tx},
                "resource": {"url": url, "description": "", "mimeType": ""}}))
            .unwrap();
            let body = json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 0.001,
                "resource": url, "discovery": {"resource": {"url": resource, "description": "A quote", "mimeType": "application/json"},
                "accepted": declared, "declaration": declaration}});
            let (status, received) = common::call(&app, "POST", "/payment/receive", &account, Some(body)).await;
            assert_eq!((status, received["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{received}");
        }
    };
    // The catalog's entries (written in the background: asked until there are `at_least`, or for
    // a while), as the store holds them.
    let entries = |at_least: usize| {
        let store = t.store.clone();
        async move {
            use tollgate_facilitator::store::CatalogStore as _;
            let all = tollgate_facilitator::store::CatalogFilter { limit: 100, ..Default::default() };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            loop {
                let (found, _) = store.catalog_list(&all).await.unwrap();
                if found.len() >= at_least || std::time::Instant::now() > deadline {
                    return found;
                }
                tokio::task::yield_now().await;
            }
        }
    };

    // Offers that are not the one the buyer accepted, or another resource: nothing cataloged.
    let mut upto = offer.clone();
    upto["scheme"] = json!("upto");
    let mut phishing = offer.clone();
    phishing["extra"] = json!({"note": "pay at http://phish.example"});
    let mut forever = offer.clone();
    forever["maxTimeoutSeconds"] = json!(9_007_199_254_740_991_u64);
    for declared in [upto, phishing, forever] {
        receive(key.clone(), declared, url).await;
    }
    receive(key.clone(), offer.clone(), "https://shop.example/other").await;
    assert!(entries(1).await.is_empty(), "an offer the buyer did not accept was cataloged");
    // The offer accepted, for the payment's resource: cataloged.
    receive(key.clone(), offer.clone(), url).await;
    let found = entries(1).await;
    let [entry] = found.as_slice() else { panic!("{found:?}") };
    assert_eq!(entry.url, url);
    let (_, own) = t.call("GET", "/discovery/own", &key, None).await;
    assert_eq!(own["items"][0]["resource"], url, "{own}");
    // Another account paying the same seller for the same resource lists nothing of its own.
    receive(other.clone(), offer.clone(), url).await;
    let found = entries(2).await;
    assert_eq!(found.len(), 1, "another account took the resource: {found:?}");
    assert_eq!(found[0].account_id, entry.account_id);
    let (_, theirs) = t.call("GET", "/discovery/own", &other, None).await;
    assert_eq!(theirs["items"], json!([]), "{theirs}");
    assert_eq!(t.lamports(&seller.pubkey().to_string()).await, 6_000_000, "every payment settled");
}
