//! EVM payments on a real chain: anvil (installed by `scripts/test` from the npm registry into
//! `.tools/`, or named by `TOLLGATE_ANVIL`), started per test on 127.0.0.1 with a free port.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use common::evm::{ETH, EvmApp, TestToken, Token, x402_v2};
use common::rpc_proxy::{Rule, calls_since};

use alloy::primitives::{Address, U256};
use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use axum::body::{Body, to_bytes};
use http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_facilitator::chains::evm::EvmBackend;
use tollgate_facilitator::chains::evm::build::sign;
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::devnet::{self};
use tower::ServiceExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosted_eth_send_confirms_and_its_receipt_is_accepted_once() {
    let t = EvmApp::start().await;
    let (alice, alice_wallet) = t.customer().await;
    let (bob, bob_wallet) = t.customer().await;
    t.fund(&alice_wallet, ETH).await;

    let resource = "https://seller.example/report";
    let pay =
        json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.01, "resource": resource});
    let (s, paid) = t.call("POST", "/payment/send", &alice, Some(pay)).await;
    assert_eq!(s, StatusCode::OK, "{paid}");
    assert_eq!(paid["status"], "confirmed");
    assert_eq!(paid["network"], t.network().to_string());
    assert_eq!(paid["amountAtomic"], (ETH / 100).to_string());
    assert_eq!(t.balance(&bob_wallet).await, ETH / 100);
    assert!(t.balance(&alice_wallet).await < ETH - ETH / 100, "alice paid the amount and the gas");

    let (_, sent) = t.call("GET", &format!("/payment/history/{alice_wallet}?type=sent"), &alice, None).await;
    assert_eq!((sent["total"].as_u64(), sent["payments"][0]["direction"].as_str()), (Some(1), Some("sent")));
    let (_, received) = t.call("GET", &format!("/payment/history/{bob_wallet}?type=received"), &bob, None).await;
    assert_eq!(
        (received["total"].as_u64(), received["payments"][0]["direction"].as_str()),
        (Some(1), Some("received"))
    );

    // The receipt: accepted once, for its terms only.
    let proof = paid["paymentProof"].as_str().unwrap();
    let receive = |expected: Value, resource: &str| json!({"walletAddress": bob_wallet, "paymentProof": proof, "expectedAmount": expected, "resource": resource});
    for (body, why) in [
        (receive(json!(0.02), resource), "less than"),
        (receive(json!(0.01), "https://seller.example/other"), "another resource"),
    ] {
        let (s, e) = t.call("POST", "/payment/receive", &bob, Some(body)).await;
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")),
            "{e}"
        );
        assert!(e["error"]["message"].as_str().unwrap().contains(why), "{e}");
    }
    let (s, got) = t.call("POST", "/payment/receive", &bob, Some(receive(json!(0.01), resource))).await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!((got["status"].as_str(), got["payer"].as_str()), (Some("confirmed"), Some(alice_wallet.as_str())));
    assert_eq!(got["transaction"], paid["transaction"]);
    let (s, again) = t.call("POST", "/payment/receive", &bob, Some(receive(json!(0.01), resource))).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{again}");
    assert!(again["error"]["message"].as_str().unwrap().contains("already used"), "{again}");

    // Not enough for value plus gas.
    let (s, e) = t
        .call(
            "POST",
            "/payment/send",
            &bob,
            Some(json!({"walletAddress": bob_wallet, "recipientAddress": alice_wallet, "amount": 0.01})),
        )
        .await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INSUFFICIENT_BALANCE")), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_from_one_wallet_take_consecutive_nonces() {
    let t = EvmApp::start().await;
    let (alice, alice_wallet) = t.customer().await;
    let (_, bob_wallet) = t.customer().await;
    t.fund(&alice_wallet, ETH).await;
    let sends: Vec<_> = (0..5)
        .map(|_| {
            let app = t.app.clone();
            let body =
                json!({"walletAddress": alice_wallet, "recipientAddress": bob_wallet, "amount": 0.001}).to_string();
            let key = alice.clone();
            tokio::spawn(async move {
                let req = Request::post("/payment/send")
                    .header("authorization", format!("Bearer {key}"))
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap();
                app.oneshot(req).await.unwrap().status()
            })
        })
        .collect();
    for s in sends {
        assert_eq!(s.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(t.balance(&bob_wallet).await, 5 * ETH / 1000);
    let rpc = &t.backend().rpc;
    assert_eq!(rpc.mined_nonce(alice_wallet.parse().unwrap()).await.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_transfer_settles_once_when_32_identical_requests_race() {
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let proof = t.signed_proof(&buyer, seller_wallet.parse().unwrap(), ETH / 100, t.anvil.chain_id()).await;
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01}).to_string();
    let racers: Vec<_> = (0..32)
        .map(|_| {
            let (app, body, key) = (t.app.clone(), body.clone(), seller.clone());
            tokio::spawn(async move {
                let req = Request::post("/payment/receive")
                    .header("authorization", format!("Bearer {key}"))
                    .header("content-type", "application/json")
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
    let (mut settled, mut in_flight) = (Vec::new(), Vec::new());
    for r in racers {
        let (status, body) = r.await.unwrap();
        match status {
            StatusCode::OK => settled.push(body),
            StatusCode::ACCEPTED => in_flight.push(body),
            StatusCode::PAYMENT_REQUIRED => {
                assert!(body["error"]["message"].as_str().unwrap().contains("already used"), "{body}")
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(settled.len(), 1, "exactly one settlement");
    for body in &in_flight {
        assert_eq!(body["paymentId"], settled[0]["paymentId"]);
    }
    assert_eq!(settled[0]["payer"], buyer.address().to_string());
    assert_eq!(t.balance(&seller_wallet).await, ETH / 100, "paid once");
    assert_eq!(t.backend().rpc.mined_nonce(buyer.address()).await.unwrap(), 1, "one transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underpaying_wrong_chain_and_wrong_recipient_transfers_are_refused() {
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let seller_address: Address = seller_wallet.parse().unwrap();
    let chain = t.anvil.chain_id();
    for (proof, why) in [
        (t.signed_proof(&buyer, seller_address, ETH / 1000, chain).await, "less than"),
        (t.signed_proof(&buyer, seller_address, ETH / 100, chain + 1).await, "signed for chain"),
        (t.signed_proof(&buyer, Address::repeat_byte(9), ETH / 100, chain).await, "not"),
    ] {
        let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});
        let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")),
            "{e}"
        );
        assert!(e["error"]["message"].as_str().unwrap().contains(why), "{why}: {e}");
    }
    // A sender without the funds.
    let poor = PrivateKeySigner::random();
    let proof = t.signed_proof(&poor, seller_address, ETH / 100, chain).await;
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});
    let (s, e) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("insufficient_funds"), "{e}");
    assert_eq!(t.balance(&seller_wallet).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_mined_after_the_wait_is_pending_then_reconciled() {
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let provider = t.backend().rpc.provider().clone();
    let _: Value = provider.raw_request("evm_setAutomine".into(), (false,)).await.unwrap();

    let proof = t.signed_proof(&buyer, seller_wallet.parse().unwrap(), ETH / 100, t.anvil.chain_id()).await;
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01, "timeout": 1});
    let (s, pending) = t.call("POST", "/payment/receive", &seller, Some(body)).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{pending}");
    assert_eq!(pending["status"], "pending");
    let hash = pending["transaction"].as_str().unwrap().to_owned();
    assert!(hash.starts_with("0x") && hash.len() == 66, "{pending}");

    // Still not mined: the reconciler (its passes a minute and an hour later, when the payment
    // is due) leaves it pending.
    let pass = common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::minutes(1)).await;
    assert_eq!((pass.examined, pass.finished), (1, 0));
    let (_, still) =
        t.call("GET", &format!("/payment/status/{}", pending["paymentId"].as_str().unwrap()), &seller, None).await;
    assert_eq!(still["status"], "pending");

    let _: Value = provider.raw_request("evm_mine".into(), ()).await.unwrap();
    let pass = common::reconcile_in(&*t.store, &t.state.chains, chrono::Duration::hours(1)).await;
    assert_eq!((pass.examined, pass.finished), (1, 1));
    let (_, done) =
        t.call("GET", &format!("/payment/status/{}", pending["paymentId"].as_str().unwrap()), &seller, None).await;
    assert_eq!((done["status"].as_str(), done["transaction"].as_str()), (Some("confirmed"), Some(hash.as_str())));
    assert_eq!(t.balance(&seller_wallet).await, ETH / 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_transaction_is_signed_by_the_caller_and_confirmed() {
    use alloy::consensus::Transaction as _;
    use base64::Engine as _;
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let payer = PrivateKeySigner::random();
    let payer_wallet = payer.address().to_string();
    t.fund(&payer_wallet, ETH).await;
    let seller = Address::repeat_byte(0x42).to_string();
    let rpc = &t.backend().rpc;

    let body = json!({"walletAddress": payer_wallet, "recipientAddress": seller, "amount": 0.02});
    let (s, built) = t.call("POST", "/transaction/send", &key, Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    let head = rpc.block_number().await.unwrap();
    assert_eq!(built["lastValidBlockHeight"].as_u64(), Some(head + 50));
    assert!(built["expiresAt"].as_i64().unwrap() > chrono::Utc::now().timestamp() + 50);
    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    assert_eq!(bytes[0], 2, "an EIP-1559 signing payload");
    let tx = <alloy::consensus::TxEip1559 as alloy::rlp::Decodable>::decode(&mut &bytes[1..]).unwrap();
    assert_eq!(
        (tx.chain_id, tx.nonce, tx.to(), tx.value()),
        (t.anvil.chain_id(), 0, Some(seller.parse().unwrap()), U256::from(ETH / 50))
    );

    // Reported before it exists: nothing changes.
    let id = built["paymentId"].as_str().unwrap();
    let unseen = format!("0x{}", "ab".repeat(32));
    let (s, same) =
        t.call("POST", "/transaction/confirm", &key, Some(json!({"paymentId": id, "transaction": unseen}))).await;
    assert_eq!((s, same["status"].as_str()), (StatusCode::OK, Some("built")), "{same}");

    let (raw, hash) = sign(tx, &payer).unwrap();
    let sent = rpc.send_raw(&raw).await.unwrap();
    assert_eq!(sent, hash);
    rpc.wait_for_outcome(hash, std::time::Duration::from_secs(10)).await.unwrap();
    let (s, confirmed) = t
        .call("POST", "/transaction/confirm", &key, Some(json!({"paymentId": id, "transaction": format!("{hash:#x}")})))
        .await;
    assert_eq!((s, confirmed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{confirmed}");
    assert_eq!(t.balance(&seller).await, ETH / 50);
    let (_, history) = t.call("GET", &format!("/payment/history/{payer_wallet}?type=sent"), &key, None).await;
    assert_eq!((history["total"].as_u64(), history["payments"][0]["mode"].as_str()), (Some(1), Some("local")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_receive_hands_the_checked_transfer_to_the_seller_once() {
    use base64::Engine as _;
    let t = EvmApp::start().await;
    let (seller, seller_wallet) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    t.fund(&buyer.address().to_string(), ETH).await;
    let proof = t.signed_proof(&buyer, seller_wallet.parse().unwrap(), ETH / 100, t.anvil.chain_id()).await;
    let body = json!({"walletAddress": seller_wallet, "paymentProof": proof, "expectedAmount": 0.01});
    let (s, built) = t.call("POST", "/transaction/receive", &seller, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    assert_eq!(
        (built["payer"].as_str(), built["amount"].as_f64()),
        (Some(buyer.address().to_string().as_str()), Some(0.01))
    );
    let (s, again) = t.call("POST", "/transaction/receive", &seller, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{again}");

    let raw = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let rpc = &t.backend().rpc;
    let hash = rpc.send_raw(&raw).await.unwrap();
    rpc.wait_for_outcome(hash, std::time::Duration::from_secs(10)).await.unwrap();
    let confirm = json!({"paymentId": built["paymentId"], "transaction": format!("{hash:#x}")});
    let (s, done) = t.call("POST", "/transaction/confirm", &seller, Some(confirm)).await;
    assert_eq!((s, done["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{done}");
    assert_eq!(t.balance(&seller_wallet).await, ETH / 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eip3009_authorizations_are_verified_settled_once_and_refused_when_wrong() {
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x51);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let window = (now - 60, now + 300);
    let requirement = token.requirement(&t, seller, 1_000_000);

    // ERC-20 token info; an account without code is not a token.
    let (s, info) = t.call("GET", &format!("/token/info/{}", token.address), &key, None).await;
    assert_eq!(s, StatusCode::OK, "{info}");
    assert_eq!(
        (info["standard"].as_str(), info["name"].as_str(), info["symbol"].as_str()),
        (Some("erc20"), Some("Tollgate USD"), Some("TUSD"))
    );
    assert_eq!((info["decimals"].as_u64(), info["supply"].as_str()), (Some(6), Some("5000000")));
    let (s, _) = t.call("GET", &format!("/token/info/{seller}"), &key, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Nor is it a token on a Solana network.
    let solana = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
    let (s, e) = t.call("GET", &format!("/token/info/{}?network={solana}", token.address), &key, None).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("NOT_FOUND")), "{e}");

    // /supported lists exact on this chain, with the account that settles it.
    let (_, supported) = t.call("GET", "/supported", &key, None).await;
    let network = t.network().to_string();
    let kinds = supported["kinds"].as_array().unwrap();
    assert!(
        kinds.iter().any(|k| k["scheme"] == "exact" && k["network"] == network && k["x402Version"] == 2),
        "{supported}"
    );
    let signer = t.backend().signer.as_ref().unwrap().0.address().to_string();
    assert_eq!(supported["signers"][&network], json!([signer]));

    let nonce = alloy::primitives::B256::repeat_byte(1);
    let good = x402_v2(&requirement, token.authorize(&t, &buyer, seller, 1_000_000, window, nonce));
    let (s, v) = t.call("POST", "/verify", &key, Some(good.clone())).await;
    assert_eq!((s, v["isValid"].as_bool()), (StatusCode::OK, Some(true)), "{v}");
    assert_eq!(v["payer"], buyer.address().to_string());

    let other = PrivateKeySigner::random();
    let reason = |v: &Value| v["invalidReason"].as_str().unwrap_or_default().to_owned();
    for (payload, why) in [
        (token.authorize(&t, &buyer, seller, 999_999, window, nonce), "invalid_exact_evm_payload_authorization_value"),
        (
            token.authorize(&t, &buyer, Address::repeat_byte(9), 1_000_000, window, nonce),
            "invalid_exact_evm_payload_recipient_mismatch",
        ),
        (
            token.authorize(&t, &buyer, seller, 1_000_000, (now - 60, now + 3), nonce),
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        // Valid for 20 s more: less than a settlement may take to land (30 s by default).
        (
            token.authorize(&t, &buyer, seller, 1_000_000, (now - 60, now + 20), nonce),
            "invalid_exact_evm_payload_authorization_valid_before",
        ),
        (
            token.authorize(&t, &buyer, seller, 1_000_000, (now + 60, now + 300), nonce),
            "invalid_exact_evm_payload_authorization_valid_after",
        ),
        (token.authorize(&t, &other, seller, 1_000_000, window, nonce), "invalid_exact_evm_payload_signature"),
    ] {
        let mut forged = payload;
        if why.ends_with("signature") {
            forged["authorization"]["from"] = json!(buyer.address().to_string()); // signed by someone else
        }
        let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&requirement, forged))).await;
        assert_eq!(reason(&v), why, "{v}");
    }
    // Signed by someone else for a payer who holds nothing: the signature is the reason named
    // (the chain's refusal is only explained by what the facilitator then checks itself).
    let mut forged = token.authorize(&t, &other, seller, 1_000_000, window, nonce);
    forged["authorization"]["from"] = json!(Address::repeat_byte(0x77).to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&requirement, forged))).await;
    assert_eq!(reason(&v), "invalid_exact_evm_payload_signature", "{v}");
    let rich = token.authorize(&t, &buyer, seller, 9_000_000, window, nonce);
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&token.requirement(&t, seller, 9_000_000), rich))).await;
    assert_eq!(reason(&v), "insufficient_funds");

    let (s, settled) = t.call("POST", "/settle", &key, Some(good.clone())).await;
    assert_eq!((s, settled["success"].as_bool()), (StatusCode::OK, Some(true)), "{settled}");
    assert_eq!(settled["payer"], buyer.address().to_string());
    // `amount`: what moved, in atomic units (the current spec's SettleResponse.amount).
    assert_eq!(settled["amount"], "1000000", "{settled}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
    // The same authorization settled again by the same seller: that settlement (idempotent).
    let (_, again) = t.call("POST", "/settle", &key, Some(good.clone())).await;
    assert_eq!((again["success"].as_bool(), &again["transaction"]), (Some(true), &settled["transaction"]), "{again}");
    assert_eq!(again["amount"], "1000000", "{again}");
    // Verified again (a seller that does not remember it): used.
    let (_, v) = t.call("POST", "/verify", &key, Some(good.clone())).await;
    assert_eq!(reason(&v), "duplicate_settlement", "{v}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");

    // An authorization someone else already used on chain: its nonce is spent.
    let nonce2 = alloy::primitives::B256::repeat_byte(2);
    let spent = token.authorize(&t, &buyer, seller, 1_000_000, window, nonce2);
    {
        use alloy::sol_types::SolCall as _;
        let a = &spent["authorization"];
        let n = |f: &str| U256::from(a[f].as_str().unwrap().parse::<u128>().unwrap());
        let data = TestToken::transferWithAuthorizationCall {
            from: buyer.address(),
            to: seller,
            value: n("value"),
            validAfter: n("validAfter"),
            validBefore: n("validBefore"),
            nonce: nonce2,
            signature: alloy::primitives::hex::decode(spent["signature"].as_str().unwrap().trim_start_matches("0x"))
                .unwrap()
                .into(),
        }
        .abi_encode();
        Token::send(&t, &token.minter, alloy::primitives::TxKind::Call(token.address), data).await;
    }
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&requirement, spent))).await;
    assert_eq!(reason(&v), "invalid_exact_evm_payload_authorization_nonce_used", "{v}");

    // The gateway's receive takes a v2 exact payload too; expectedAmount is in whole tokens.
    let (seller_key, seller_wallet) = t.customer().await;
    let seller_address: Address = seller_wallet.parse().unwrap();
    let requirement = token.requirement(&t, seller_address, 500_000);
    let payload = token.authorize(&t, &buyer, seller_address, 500_000, window, alloy::primitives::B256::repeat_byte(3));
    let header = tollgate_protocol::x402::header::encode(&x402_v2(&requirement, payload)["paymentPayload"]).unwrap();
    let mut body = json!({"walletAddress": seller_wallet, "paymentProof": header, "expectedAmount": 0.5});
    // The price is in the token: unnamed, the price is in ETH and the authorization does not pay it.
    let (s, e) = t.call("POST", "/payment/receive", &seller_key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("name the asset"), "{e}");
    body["asset"] = json!(token.address.to_string());
    let (s, got) = t.call("POST", "/payment/receive", &seller_key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{got}");
    assert_eq!(
        (got["asset"].as_str(), got["amountAtomic"].as_str()),
        (Some(token.address.to_string().as_str()), Some("500000"))
    );
    let (s, _) = t.call("POST", "/payment/receive", &seller_key, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(token.balance(&t, seller_address).await, 500_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facilitator_account_recovers_when_its_nonce_moves_elsewhere() {
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x52);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let requirement = token.requirement(&t, seller, 1_000_000);
    let settle = |byte: u8| {
        let payload = token.authorize(
            &t,
            &buyer,
            seller,
            1_000_000,
            (now - 60, now + 300),
            alloy::primitives::B256::repeat_byte(byte),
        );
        t.call("POST", "/settle", &key, Some(x402_v2(&requirement, payload)))
    };
    let (_, first) = settle(1).await;
    assert_eq!(first["success"], true, "{first}");

    // The same account sends a transaction the facilitator does not know about (another
    // process, an operator). The facilitator asks the node for its nonce at most every
    // `ASK_EVERY` (a settlement is three calls: estimate, send, receipt), so the next settlement
    // takes the nonce that transaction used: the node refuses it, nothing moves, the payment
    // fails (its proof stays claimed: the buyer signs another), and the lease after a refusal
    // asks the node again, so the next settlement lands.
    let facilitator = t.backend().signer.as_ref().unwrap().0.clone();
    Token::send(&t, &facilitator, alloy::primitives::TxKind::Call(seller), Vec::new()).await;
    let (_, second) = settle(2).await;
    assert_eq!(second["success"], false, "{second}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "refused, nothing moved");
    let (_, again) = settle(2).await;
    assert_eq!(again["success"], false, "{again}");
    let (_, third) = settle(3).await;
    assert_eq!(third["success"], true, "{third}");
    assert_eq!(token.balance(&t, seller).await, 2_000_000);

    // A restarted facilitator (a fresh nonce manager) starts from the chain.
    let rpc = EvmRpc::connect(&t.anvil.endpoint(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let restarted = EvmBackend::new(rpc).with_signer(facilitator.clone());
    let lease = restarted.nonces.lease(&restarted.rpc, facilitator.address()).await.unwrap();
    assert_eq!(lease.nonce(), 3, "two settlements and the outside transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_receive_of_an_eip3009_authorization_is_sent_by_the_seller() {
    use alloy::consensus::Transaction as _;
    use base64::Engine as _;
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let seller = PrivateKeySigner::random();
    t.fund(&seller.address().to_string(), ETH).await;
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let requirement = token.requirement(&t, seller.address(), 2_000_000);
    let payload = token.authorize(
        &t,
        &buyer,
        seller.address(),
        2_000_000,
        (now - 60, now + 300),
        alloy::primitives::B256::repeat_byte(9),
    );
    let header = tollgate_protocol::x402::header::encode(&x402_v2(&requirement, payload)["paymentPayload"]).unwrap();
    let body = json!({
        "walletAddress": seller.address().to_string(),
        "paymentProof": header,
        "expectedAmount": 2,
        "asset": token.address.to_string(),
    });
    let (s, built) = t.call("POST", "/transaction/receive", &key, Some(body.clone())).await;
    assert_eq!(s, StatusCode::OK, "{built}");
    assert_eq!(
        (built["payer"].as_str(), built["amount"].as_f64()),
        (Some(buyer.address().to_string().as_str()), Some(2.0))
    );
    let (s, _) = t.call("POST", "/transaction/receive", &key, Some(body)).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "the proof is claimed");

    let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
    let tx = <alloy::consensus::TxEip1559 as alloy::rlp::Decodable>::decode(&mut &bytes[1..]).unwrap();
    assert_eq!(tx.to(), Some(token.address), "a call to the token, from the seller's account");
    let (raw, hash) = sign(tx, &seller).unwrap();
    let rpc = &t.backend().rpc;
    rpc.send_raw(&raw).await.unwrap();
    rpc.wait_for_outcome(hash, std::time::Duration::from_secs(10)).await.unwrap();
    let confirm = json!({"paymentId": built["paymentId"], "transaction": format!("{hash:#x}")});
    let (s, done) = t.call("POST", "/transaction/confirm", &key, Some(confirm)).await;
    assert_eq!((s, done["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{done}");
    assert_eq!(token.balance(&t, seller.address()).await, 2_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_wallet_pays_with_an_eip1271_signature() {
    use alloy::sol_types::SolValue as _;
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let owner = PrivateKeySigner::random();
    let mut code = alloy::primitives::hex::decode(devnet::TEST_WALLET_BYTECODE.trim()).unwrap();
    code.extend(owner.address().abi_encode()); // one address argument: one word
    let wallet = Token::send(&t, &token.minter, alloy::primitives::TxKind::Create, code).await.unwrap();
    token.mint(&t, wallet, 3_000_000).await;
    let seller = Address::repeat_byte(0x53);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let requirement = token.requirement(&t, seller, 1_000_000);
    let nonce = alloy::primitives::B256::repeat_byte(4);

    // Signed by someone who is not the wallet's owner: the wallet says no.
    let stranger = PrivateKeySigner::random();
    let forged = token.authorize_as(&t, (wallet, &stranger), seller, 1_000_000, (now - 60, now + 300), nonce);
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&requirement, forged))).await;
    assert_eq!(v["invalidReason"], "invalid_exact_evm_payload_signature", "{v}");
    // The identity precompile echoes the question, whose first bytes are the "yes" selector:
    // an echo is no wallet's answer.
    let echo = Address::with_last_byte(4);
    let forged = token.authorize_as(&t, (echo, &stranger), seller, 1_000_000, (now - 60, now + 300), nonce);
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&requirement, forged))).await;
    assert_eq!(v["invalidReason"], "invalid_exact_evm_payload_signature", "{v}");

    let signed = token.authorize_as(&t, (wallet, &owner), seller, 1_000_000, (now - 60, now + 300), nonce);
    let body = x402_v2(&requirement, signed);
    let (_, v) = t.call("POST", "/verify", &key, Some(body.clone())).await;
    assert_eq!((v["isValid"].as_bool(), v["payer"].as_str()), (Some(true), Some(wallet.to_string().as_str())), "{v}");
    let (_, settled) = t.call("POST", "/settle", &key, Some(body)).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
}

/// The signature of an authorization is the token's to check (a verify's one simulation runs
/// it), so a contract that takes any call without checking anything is no token to be paid in:
/// refused on verify and on settle, nothing sent. And the zero address (what a failed
/// `ecrecover` returns) is never a payer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_does_not_check_signatures_is_refused() {
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    // Runtime code: return the word 6 to any call (so `decimals()` answers 6, and a
    // `transferWithAuthorization` of anything succeeds), deployed by init code that returns it.
    let code = alloy::primitives::hex::decode(
        "600a600c600039600a6000f3" /* init */
            .to_owned()
            + "600660005260206000f3",
    )
    .unwrap();
    let lax = Token::send(&t, &token.minter, alloy::primitives::TxKind::Create, code).await.unwrap();
    let lax = Token { address: lax, minter: token.minter.clone() };
    let (victim, stranger) = (PrivateKeySigner::random(), PrivateKeySigner::random());
    token.mint(&t, victim.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x54);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let (window, nonce) = ((now - 60, now + 300), alloy::primitives::B256::repeat_byte(5));
    let signer = t.backend().signer.as_ref().unwrap().0.address();
    let sent_before = t.backend().rpc.pending_nonce(signer).await.unwrap();

    let forged = lax.authorize_as(&t, (victim.address(), &stranger), seller, 1_000_000, window, nonce);
    let body = x402_v2(&lax.requirement(&t, seller, 1_000_000), forged);
    let (_, v) = t.call("POST", "/verify", &key, Some(body.clone())).await;
    assert_eq!(v["invalidReason"], "invalid_payment_requirements", "{v}");
    assert!(v["invalidMessage"].as_str().unwrap().contains("does not check EIP-3009 signatures"), "{v}");
    let (_, settled) = t.call("POST", "/settle", &key, Some(body)).await;
    assert_eq!(
        (settled["success"].as_bool(), settled["errorReason"].as_str()),
        (Some(false), Some("invalid_payment_requirements")),
        "{settled}"
    );
    assert_eq!(t.backend().rpc.pending_nonce(signer).await.unwrap(), sent_before, "nothing sent");

    // Another asset: the victim holds both tokens, and pays for a requirement in one with an
    // authorization signed for the other (its EIP-712 domain names its own contract). The
    // token asked for refuses the signature in the simulation; nothing moves.
    let other = Token::deploy(&t).await;
    other.mint(&t, victim.address(), 5_000_000).await;
    let cheap = other.authorize(&t, &victim, seller, 1_000_000, window, nonce);
    let (_, v) =
        t.call("POST", "/verify", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), cheap.clone()))).await;
    assert_eq!(v["invalidReason"], "invalid_exact_evm_payload_signature", "{v}");
    let (_, settled) =
        t.call("POST", "/settle", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), cheap))).await;
    assert_eq!(settled["errorReason"], "invalid_exact_evm_payload_signature", "{settled}");
    assert_eq!((token.balance(&t, seller).await, other.balance(&t, seller).await), (0, 0));
    assert_eq!(t.backend().rpc.pending_nonce(signer).await.unwrap(), sent_before, "nothing sent");

    // On the real token: a payer of zero is refused before the chain is asked.
    let mut zero = token.authorize(&t, &stranger, seller, 1_000_000, window, nonce);
    zero["authorization"]["from"] = json!(Address::ZERO.to_string());
    let (_, v) = t.call("POST", "/verify", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), zero))).await;
    assert_eq!(v["invalidReason"], "invalid_exact_evm_payload_signature", "{v}");
    // And it pays from a real payer as before.
    let paid = token.authorize(&t, &victim, seller, 1_000_000, window, nonce);
    let (_, settled) =
        t.call("POST", "/settle", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), paid))).await;
    assert_eq!(settled["success"], json!(true), "{settled}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
}

/// RPC calls by method made between two snapshots of the proxy's counts.
/// The hot path of x402 on EVM: once the token's decimals are known, a verify is one
/// `eth_call` (the settlement simulated from the facilitator's account), and a settlement is one
/// `eth_estimateGas` before sending (the simulation again, as the chain is then, which gives the
/// gas limit): an authorization spent elsewhere between the two is refused, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_is_one_call_and_a_settlement_one_estimate() {
    let t = EvmApp::start_behind_proxy().await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x52);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let window = (now - 60, now + 300);
    let requirement = token.requirement(&t, seller, 1_000_000);
    let body = |n: u8| {
        let nonce = alloy::primitives::B256::repeat_byte(n);
        x402_v2(&requirement, token.authorize(&t, &buyer, seller, 1_000_000, window, nonce))
    };
    let verify = |b: Value| async { t.call("POST", "/verify", &key, Some(b)).await.1 };

    // The first verify of a token also reads its decimals.
    assert_eq!(verify(body(1)).await["isValid"], json!(true));
    let before = proxy.all_calls();
    let v = verify(body(2)).await;
    assert_eq!(v["isValid"], json!(true), "{v}");
    let calls = calls_since(&before, &proxy.all_calls());
    // What the settlement will sign with (fees, the facilitator's nonce) is read ahead in the
    // background, not by the verify: see `settlements_make_three_calls_each`.
    let own: std::collections::BTreeMap<_, _> =
        calls.into_iter().filter(|(m, _)| !READ_AHEAD.contains(&m.as_str())).collect();
    assert_eq!(own, [("eth_call".to_owned(), 1)].into(), "one verify, one call");

    // Settled: estimated once (no separate simulation), then sent.
    let before = proxy.all_calls();
    let (s, settled) = t.call("POST", "/settle", &key, Some(body(2))).await;
    assert_eq!((s, settled["success"].as_bool()), (StatusCode::OK, Some(true)), "{settled}");
    let calls = calls_since(&before, &proxy.all_calls());
    assert_eq!((calls.get("eth_call"), calls.get("eth_estimateGas")), (None, Some(&1)), "{calls:?}");
    assert_eq!(token.balance(&t, seller).await, 1_000_000);
    let (_, settled) = t.call("POST", "/settle", &key, Some(body(3))).await;
    assert_eq!(settled["success"], json!(true), "{settled}");
    assert_eq!(token.balance(&t, seller).await, 2_000_000);

    // A verify stands for its own terms only: the same authorization settled at once for a
    // dearer requirement, or one paying someone else, is refused.
    assert_eq!(verify(body(5)).await["isValid"], json!(true));
    let authorization = body(5)["paymentPayload"]["payload"].clone();
    for (requirement, why) in [
        (token.requirement(&t, seller, 2_000_000), "invalid_exact_evm_payload_authorization_value"),
        (token.requirement(&t, Address::repeat_byte(0x53), 1_000_000), "invalid_exact_evm_payload_recipient_mismatch"),
    ] {
        let (_, refused) = t.call("POST", "/settle", &key, Some(x402_v2(&requirement, authorization.clone()))).await;
        assert_eq!((refused["success"].as_bool(), refused["errorReason"].as_str()), (Some(false), Some(why)));
    }
    assert_eq!(token.balance(&t, seller).await, 2_000_000);

    // Verified, then settled by eight requests at once: one transfer, one transaction named.
    assert_eq!(verify(body(6)).await["isValid"], json!(true));
    let answers = common::call_concurrently(&t.app, "/settle", &key, &body(6), 8).await;
    let transactions: std::collections::BTreeSet<_> =
        answers.iter().filter_map(|(_, a)| a["transaction"].as_str().filter(|t| !t.is_empty())).collect();
    assert_eq!(transactions.len(), 1, "{answers:?}");
    assert!(answers.iter().any(|(_, a)| a["success"] == json!(true)), "{answers:?}");
    assert_eq!(token.balance(&t, seller).await, 3_000_000, "paid once");

    // Verified, then its nonce spent by someone else before the settlement: refused with the
    // reason, nothing sent, and the seller paid by the other transfer only.
    assert_eq!(verify(body(4)).await["isValid"], json!(true));
    {
        use alloy::sol_types::SolCall as _;
        let spent = &body(4)["paymentPayload"]["payload"];
        let a = &spent["authorization"];
        let n = |f: &str| U256::from(a[f].as_str().unwrap().parse::<u128>().unwrap());
        let data = TestToken::transferWithAuthorizationCall {
            from: buyer.address(),
            to: seller,
            value: n("value"),
            validAfter: n("validAfter"),
            validBefore: n("validBefore"),
            nonce: alloy::primitives::B256::repeat_byte(4),
            signature: alloy::primitives::hex::decode(spent["signature"].as_str().unwrap().trim_start_matches("0x"))
                .unwrap()
                .into(),
        }
        .abi_encode();
        Token::send(&t, &token.minter, alloy::primitives::TxKind::Call(token.address), data).await;
    }
    assert_eq!(token.balance(&t, seller).await, 4_000_000);
    let (s, settled) = t.call("POST", "/settle", &key, Some(body(4))).await;
    assert_eq!((s, settled["success"].as_bool()), (StatusCode::OK, Some(false)), "{settled}");
    assert_eq!(settled["errorReason"], "invalid_exact_evm_payload_authorization_nonce_used", "{settled}");
    assert_eq!(token.balance(&t, seller).await, 4_000_000);
}

/// What a facilitator reads ahead of its settlements, in the background.
const READ_AHEAD: [&str; 2] = ["eth_feeHistory", "eth_getTransactionCount"];

/// Verifications at once go to the node together, in JSON-RPC batches: each still gets its own
/// verdict (payers who cannot pay among payers who can).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifications_at_once_share_batches_and_keep_their_own_verdicts() {
    let t = EvmApp::start_behind_proxy().await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let (rich, poor) = (PrivateKeySigner::random(), PrivateKeySigner::random());
    token.mint(&t, rich.address(), 5_000_000).await;
    token.mint(&t, poor.address(), 999_999).await;
    let seller = Address::repeat_byte(0x53);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let requirement = token.requirement(&t, seller, 1_000_000);
    let body = |payer: &PrivateKeySigner, n: u8| {
        let nonce = alloy::primitives::B256::repeat_byte(n);
        x402_v2(&requirement, token.authorize(&t, payer, seller, 1_000_000, (now - 60, now + 300), nonce))
    };
    let verify = |b: Value| async { t.call("POST", "/verify", &key, Some(b)).await.1 };
    // The first verify of a token also reads its decimals.
    assert_eq!(verify(body(&rich, 0)).await["isValid"], json!(true));

    let before = proxy.all_calls();
    let payers: Vec<bool> = (1..=48).map(|n| n % 3 != 0).collect();
    let bodies = payers.iter().zip(1u8..).map(|(can, n)| body(if *can { &rich } else { &poor }, n));
    let verdicts = futures_util::future::join_all(bodies.map(verify)).await;
    for (verdict, can) in verdicts.iter().zip(&payers) {
        let expected = if *can { (true, "") } else { (false, "insufficient_funds") };
        let got = (verdict["isValid"].as_bool().unwrap(), verdict["invalidReason"].as_str().unwrap_or_default());
        assert_eq!(got, expected, "{verdict}");
    }
    // One simulation each; a refused one's reason is read after it (the payer's balance, whether
    // its nonce was used).
    let calls = calls_since(&before, &proxy.all_calls());
    assert_eq!(calls.get("eth_call"), Some(&(32 + 16 * 3)), "{calls:?}");
    let batches = proxy.batches();
    assert!(batches.iter().any(|n| *n > 1), "48 verifications at once shared no batch: {batches:?}");
}

/// `/settle` of an EIP-3009 authorization in two RPC calls on a chain that mines at once and
/// serves `eth_sendRawTransactionSync` (EIP-7966: the send answers with the receipt), three on
/// one that does not: the estimate (the settlement simulated as the chain is then, which gives
/// its gas limit), the broadcast, and the receipt, whose logs carry the transfer (the transaction
/// itself is the one the facilitator signed, so it is not read back). The fees and the
/// facilitator's nonce are not read per settlement: the receipts keep them current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_make_two_or_three_calls_each() {
    let t = EvmApp::start_behind_proxy().await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 27_000_000).await;
    let seller = Address::repeat_byte(0x52);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let requirement = token.requirement(&t, seller, 1_000_000);
    let (t, key) = (&t, &key);
    let settle = |n: u8| {
        let nonce = alloy::primitives::B256::repeat_byte(n);
        let body = x402_v2(&requirement, token.authorize(t, &buyer, seller, 1_000_000, (now - 60, now + 300), nonce));
        async move {
            let settled = t.call("POST", "/settle", key, Some(body)).await.1;
            assert_eq!(settled["success"], json!(true), "{settled}");
        }
    };
    // The first settlement of a token reads what the token is (its decimals, its domain), and
    // the facilitator's fees and nonce.
    settle(0).await;

    let before = proxy.all_calls();
    for n in 1..=20 {
        settle(n).await;
    }
    let mut calls = calls_since(&before, &proxy.all_calls());
    let mut made = |m: &str| calls.remove(m).unwrap_or(0);
    assert_eq!((made("eth_estimateGas"), made("eth_sendRawTransactionSync")), (20, 20), "an estimate and a send each");
    assert!(calls.is_empty(), "nothing else: {calls:?}");

    // A node that takes the transaction, then fails while waiting for its receipt: not a refusal
    // (the transaction lands); the plain send that follows says the node has it, and the
    // settlement is watched and confirmed as any other.
    proxy.rule("eth_sendRawTransactionSync", Rule::FailAfter("receipts subscription was closed"));
    settle(21).await;
    assert_eq!(token.balance(t, seller).await, 22_000_000, "paid once");
    proxy.clear("eth_sendRawTransactionSync");

    // A node without sync sends: given up at the first answer that says so, then plain sends
    // and one receipt each (another look only when the first comes before the block).
    proxy.rule("eth_sendRawTransactionSync", Rule::Unknown);
    let before = proxy.all_calls();
    for n in 22..=26 {
        settle(n).await;
    }
    let mut calls = calls_since(&before, &proxy.all_calls());
    let mut made = |m: &str| calls.remove(m).unwrap_or(0);
    let sends = (made("eth_estimateGas"), made("eth_sendRawTransactionSync"), made("eth_sendRawTransaction"));
    assert_eq!(sends, (5, 1, 5), "the sync send tried once more, then plain sends");
    let receipts = made("eth_getTransactionReceipt");
    assert!((5..10).contains(&receipts), "{receipts} receipts");
    // The send the node answered uncertainly made the next lease ask for the nonce, once.
    assert_eq!(made("eth_getTransactionCount"), 1);
    assert!(calls.is_empty(), "nothing else: {calls:?}");
    assert_eq!(token.balance(t, seller).await, 27_000_000);
}

/// A node that answers a plain send with an error that is not a refusal (its own internal
/// error, after taking the transaction): the settlement is not failed on its word. The
/// transaction waits in the pool; the settlement answers "not confirmed within the wait", and
/// once the block comes the seller following it is answered success: the money moved once,
/// recorded once. (Failed at once, it would have been recorded failed while the transfer landed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_the_node_answers_with_its_own_error_is_watched_not_failed() {
    let t = EvmApp::start_behind_proxy().await;
    let proxy = t.proxy.as_ref().unwrap();
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 1_000_000).await;
    let seller = Address::repeat_byte(0x53);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let mut requirement = token.requirement(&t, seller, 1_000_000);
    requirement["maxTimeoutSeconds"] = json!(1);
    let nonce = alloy::primitives::B256::repeat_byte(1);
    let body = x402_v2(&requirement, token.authorize(&t, &buyer, seller, 1_000_000, (now - 60, now + 300), nonce));

    // Plain sends (this node serves no sync sends), which it takes and answers with an error;
    // nothing is mined until the test says.
    let direct = t.direct_rpc().await;
    let _: Value = direct.provider().raw_request("evm_setAutomine".into(), (false,)).await.unwrap();
    proxy.rule("eth_sendRawTransactionSync", Rule::Unknown);
    proxy.rule("eth_sendRawTransaction", Rule::FailAfter("internal error"));
    let (_, first) = t.call("POST", "/settle", &key, Some(body.clone())).await;
    assert_eq!(first["errorReason"], "settle_exact_evm_transaction_confirmation_timed_out", "{first}");

    let _: Value = direct.provider().raw_request("evm_mine".into(), ()).await.unwrap();
    let (_, settled) = t.call("POST", "/settle", &key, Some(body)).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["transaction"], first["transaction"], "the transaction it sent, followed");
    assert_eq!(token.balance(&t, seller).await, 1_000_000, "paid once");
}

/// A local payment is the transaction built for it, on EVM too: a stranger's build of the same
/// order (same sender, nonce and recipient) is another transaction, and the transfer the buyer
/// signed from another account's build does not confirm it; nor does a transfer the buyer made
/// otherwise. The stranger's payment expires only once the chain says its transaction can no
/// longer land (the buyer's nonce used), never on a block count alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_confirm_a_local_payment_with_another_transfer() {
    use base64::Engine as _;
    let t = EvmApp::start().await;
    let (alice, _) = t.customer().await;
    let (mallory, _) = t.customer().await;
    let buyer = PrivateKeySigner::random();
    let buyer_wallet = buyer.address().to_string();
    t.fund(&buyer_wallet, ETH).await;
    let shop = Address::repeat_byte(0x42).to_string();
    let rpc = &t.backend().rpc;
    let order = json!({"walletAddress": buyer_wallet, "recipientAddress": shop, "amount": 0.02});
    let (s, mine) = t.call("POST", "/transaction/send", &alice, Some(order.clone())).await;
    assert_eq!(s, StatusCode::OK, "{mine}");
    let (s, theirs) = t.call("POST", "/transaction/send", &mallory, Some(order)).await;
    assert_eq!(s, StatusCode::OK, "{theirs}");
    assert_ne!(mine["transaction"], theirs["transaction"], "two builds, two transactions");
    let unsigned = |built: &Value| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(built["transaction"].as_str().unwrap()).unwrap();
        <alloy::consensus::TxEip1559 as alloy::rlp::Decodable>::decode(&mut &bytes[1..]).unwrap()
    };
    assert_eq!(unsigned(&mine).nonce, unsigned(&theirs).nonce, "one sender, one next nonce");

    let (raw, hash) = sign(unsigned(&mine), &buyer).unwrap();
    rpc.send_raw(&raw).await.unwrap();
    rpc.wait_for_outcome(hash, std::time::Duration::from_secs(10)).await.unwrap();
    let confirm = |key: &str, built: &Value, tx: String| {
        let (body, key) = (json!({"paymentId": built["paymentId"], "transaction": tx}), key.to_owned());
        let t = &t;
        async move { t.call("POST", "/transaction/confirm", &key, Some(body)).await }
    };
    let hash = format!("{hash:#x}");
    let (s, e) = confirm(&mallory, &theirs, hash.clone()).await;
    assert_eq!((s, e["error"]["code"].as_str()), (StatusCode::PAYMENT_REQUIRED, Some("INVALID_PAYMENT_PROOF")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not the one built"), "{e}");
    let (s, confirmed) = confirm(&alice, &mine, hash).await;
    assert_eq!((s, confirmed["status"].as_str()), (StatusCode::OK, Some("confirmed")), "{confirmed}");

    // A plain transfer from the buyer to the shop for the amount, made otherwise.
    let (raw, other) =
        sign(alloy::consensus::TxEip1559 { nonce: 1, gas_limit: 21_000, ..unsigned(&mine) }, &buyer).unwrap();
    rpc.send_raw(&raw).await.unwrap();
    rpc.wait_for_outcome(other, std::time::Duration::from_secs(10)).await.unwrap();
    let (s, e) = confirm(&mallory, &theirs, format!("{other:#x}")).await;
    assert_eq!(s, StatusCode::PAYMENT_REQUIRED, "{e}");
    // The buyer's nonce is used: the stranger's transaction can never land, so its payment expires
    // when next asked about (whatever transaction is reported as not on chain).
    let (s, expired) = confirm(&mallory, &theirs, format!("0x{}", "ab".repeat(32))).await;
    assert_eq!((s, expired["status"].as_str()), (StatusCode::OK, Some("expired")), "{expired}");
    assert_eq!(t.balance(&shop).await, 2 * ETH / 50);
}

alloy::sol! {
    /// The test token's switches for attack tests.
    interface CheatingToken {
        function setTransferFeeBps(uint256 bps) external;
        function setHollow(bool hollow) external;
    }
}

/// Confirmed means the money arrived: a token that keeps a fee on every transfer, and one that
/// moves nothing while its `transferWithAuthorization` succeeds (it checks signatures, so it
/// passes the facilitator's probe), both settle on chain without error. What arrived at the
/// seller is read from the token's `Transfer` logs: less than asked is `failed`, naming what
/// arrived, never `confirmed` — on x402 `/settle` and on the gateway's `/payment/receive`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_delivers_less_than_it_says_is_failed_not_confirmed() {
    use alloy::sol_types::SolCall as _;
    let t = EvmApp::start().await;
    let (key, _) = t.customer().await;
    let token = Token::deploy(&t).await;
    let payer = PrivateKeySigner::random();
    token.mint(&t, payer.address(), 5_000_000).await;
    let seller = Address::repeat_byte(0x55);
    let now = chrono::Utc::now().timestamp().unsigned_abs();
    let window = (now - 60, now + 300);
    let switch = |data: Vec<u8>| Token::send(&t, &token.minter, alloy::primitives::TxKind::Call(token.address), data);

    // 1% kept on every transfer: 990,000 of 1,000,000 arrive.
    switch(CheatingToken::setTransferFeeBpsCall { bps: U256::from(100) }.abi_encode()).await;
    let fee_taken = token.authorize(&t, &payer, seller, 1_000_000, window, alloy::primitives::B256::repeat_byte(1));
    let (_, settled) =
        t.call("POST", "/settle", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), fee_taken))).await;
    assert_eq!(
        (settled["success"].as_bool(), settled["errorReason"].as_str()),
        (Some(false), Some("settle_exact_failed_onchain")),
        "{settled}"
    );
    assert!(settled["errorMessage"].as_str().unwrap().contains("only 990000 of the 1000000"), "{settled}");
    assert_eq!(token.balance(&t, seller).await, 990_000, "it did move, less than asked");

    // Hollow: success, no Transfer, nothing moved.
    switch(CheatingToken::setTransferFeeBpsCall { bps: U256::ZERO }.abi_encode()).await;
    switch(CheatingToken::setHollowCall { hollow: true }.abi_encode()).await;
    let hollow = token.authorize(&t, &payer, seller, 1_000_000, window, alloy::primitives::B256::repeat_byte(2));
    let (_, settled) =
        t.call("POST", "/settle", &key, Some(x402_v2(&token.requirement(&t, seller, 1_000_000), hollow))).await;
    assert_eq!(settled["success"], false, "{settled}");
    assert!(settled["errorMessage"].as_str().unwrap().contains("only 0 of the 1000000"), "{settled}");
    let third = token.authorize(&t, &payer, seller, 1_000_000, window, alloy::primitives::B256::repeat_byte(3));
    let proof = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact", "network": t.network().to_string(), "payload": third
    }))
    .unwrap();
    let receive = json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 1,
                         "asset": token.address.to_string()});
    let (s, refused) = t.call("POST", "/payment/receive", &key, Some(receive)).await;
    assert_eq!((s.as_u16(), refused["error"]["code"].as_str()), (402, Some("INVALID_PAYMENT_PROOF")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("only 0 of"), "{refused}");
    assert_eq!(token.balance(&t, seller).await, 990_000);
}
