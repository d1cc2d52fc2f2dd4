//! An EVM account's nonce: a pending payment whose (sender, nonce) another transaction took can
//! never land and expires; a broadcast lost on the way to the node leaves no gap in the
//! facilitator's nonces. Real anvil, behind a fault proxy where the node must seem to fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

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

/// The facilitator's daemons (one, or several on one PostgreSQL) settling x402 `exact` (EIP-3009)
/// proofs from one signing account, reaching anvil through a fault proxy.
struct Settlers {
    t: EvmApp,
    proxy: common::rpc_proxy::RpcProxy,
    token: common::evm::Token,
    signer: PrivateKeySigner,
    dir: tempfile::TempDir,
    key: String,
    daemons: Vec<common::process::Daemon>,
}

impl Settlers {
    /// `instances` daemons on `database_url` (SQLite in the test's directory when `None`), their
    /// own nonces taken as lost after 2 s unknown to the node.
    async fn start(instances: usize, database_url: Option<&str>) -> Self {
        let t = EvmApp::start().await;
        let token = common::evm::Token::deploy(&t).await;
        let proxy = common::rpc_proxy::RpcProxy::start(&t.anvil.endpoint()).await;
        let signer = PrivateKeySigner::random();
        t.fund(&signer.address().to_string(), 10 * ETH).await;
        let dir = tempfile::tempdir().unwrap();
        let database = database_url.map(|url| format!("database_url = \"{url}\"\n")).unwrap_or_default();
        std::fs::write(
            dir.path().join("tollgate.toml"),
            format!("{database}[limits]\nevm_nonce_gap_secs = 2\ndatabase_max_connections = 5\nnonce_lease_connections = 2\n"),
        )
        .unwrap();
        let mut settlers = Self { t, proxy, token, signer, dir, key: String::new(), daemons: Vec::new() };
        let signer_key = alloy::primitives::hex::encode(settlers.signer.to_bytes());
        let env = [
            ("TOLLGATE_CONFIG", "tollgate.toml"),
            ("TOLLGATE_MASTER_KEY", "6b2f0c5e9a71d3884f1e2a7c5d9b0e3f6a8c1d4e7b2f5a9c0d3e6f1a4b7c8d9e"),
            ("TOLLGATE_EVM_RPC_URL", settlers.proxy.url.as_str()),
            ("TOLLGATE_EVM_SIGNER_KEY", signer_key.as_str()),
        ];
        let created = common::process::cli_with(settlers.dir.path(), &env, &["keys", "create", "--plan", "premium"]);
        let daemons = (0..instances).map(|_| common::process::Daemon::start_with(settlers.dir.path(), &env)).collect();
        settlers.key = created.trim().to_owned();
        settlers.daemons = daemons;
        settlers
    }
}

/// One settlement's proof: its EIP-3009 nonce and the `/settle` body.
type Proof = (alloy::primitives::B256, Value);

/// Settles `body` through `base`: the answer.
async fn settle(client: &reqwest::Client, base: &str, key: &str, body: &Value) -> Value {
    let response = client.post(format!("{base}/settle")).bearer_auth(key).json(body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "settle answered {}", response.status());
    response.json().await.unwrap()
}

/// A verdict not reached yet: broadcast, and not confirmed within the wait.
fn pending(answer: &Value) -> bool {
    answer["errorReason"] == "settle_exact_evm_transaction_confirmation_timed_out"
}

/// Steady traffic: three sellers settle in turn, each one proof after another, through the
/// daemons in turn; one of the facilitator's transactions is taken by the node and lost (its
/// pool forgets it). The nonces the facilitator handed out after it wait behind a gap until
/// the facilitator takes its nonce as lost (2 s here) and uses it again: the traffic goes on,
/// the last settlements succeed at once, and in the end every proof is settled once or refused
/// — the money moved for exactly the proofs answered `success`, one transaction each.
async fn a_lost_settlement_is_recovered_under_steady_traffic(s: &Settlers) {
    let (t, token) = (&s.t, &s.token);
    let buyer = PrivateKeySigner::random();
    token.mint(t, buyer.address(), 1_000_000_000).await;
    let seller = PrivateKeySigner::random().address();
    let mut requirement = token.requirement(t, seller, 1_000);
    requirement["maxTimeoutSeconds"] = json!(2);
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap();
    let proofs: Vec<Proof> = (0..30)
        .map(|_| {
            let nonce = alloy::primitives::B256::from(rand::random::<[u8; 32]>());
            let payload = token.authorize(t, &buyer, seller, 1_000, (0, now + 3_600), nonce);
            (nonce, common::evm::x402_v2(&requirement, payload))
        })
        .collect();
    let bases: Vec<String> = s.daemons.iter().map(|d| d.base.clone()).collect();
    let client = reqwest::Client::new();
    let mut answers = vec![Value::Null; proofs.len()];
    for (i, (_, body)) in proofs.iter().enumerate().take(3) {
        answers[i] = settle(&client, &bases[i % bases.len()], &s.key, body).await;
        assert_eq!(answers[i]["success"], true, "{}", answers[i]);
    }

    // The next broadcast is taken and lost: the facilitator believes it in the pool.
    s.proxy.rule("eth_sendRawTransactionSync", Rule::AnswerOnce(-32_603, "Transaction confirmation timeout"));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let mine: Vec<(usize, Value)> =
                (3 + w..proofs.len()).step_by(3).map(|i| (i, proofs[i].1.clone())).collect();
            let (client, bases, key) = (client.clone(), bases.clone(), s.key.clone());
            tokio::spawn(async move {
                let mut answered = Vec::new();
                for (i, body) in mine {
                    let answer = settle(&client, &bases[i % bases.len()], &key, &body).await;
                    answered.push((i, answer));
                }
                answered
            })
        })
        .collect();
    for worker in workers {
        for (i, answer) in worker.await.unwrap() {
            answers[i] = answer;
        }
    }
    let waited: Vec<usize> = (3..proofs.len()).filter(|&i| pending(&answers[i])).collect();
    assert!(!waited.is_empty(), "the lost transaction's settlement was answered as settled: {answers:?}");
    // The traffic recovered: each seller's last settlements succeeded as they were made.
    for w in 0..3 {
        let last: Vec<usize> = (3 + w..proofs.len()).step_by(3).rev().take(2).collect();
        for i in last {
            assert_eq!(answers[i]["success"], true, "proof {i} after the recovery: {}", answers[i]);
        }
    }

    // Sellers follow the pending ones (settle again) until each has its verdict: the lost one
    // expires when the reconciler sees its nonce taken by another transaction.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    for &i in &waited {
        while pending(&answers[i]) {
            assert!(std::time::Instant::now() < deadline, "proof {i} never reached a verdict: {}", answers[i]);
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            answers[i] = settle(&client, &bases[i % bases.len()], &s.key, &proofs[i].1).await;
        }
    }

    // Money and records agree, proof by proof.
    let rpc = t.direct_rpc().await;
    let mut settled = 0u128;
    for (i, ((nonce, _), answer)) in proofs.iter().zip(&answers).enumerate() {
        let used =
            tollgate_facilitator::chains::evm::erc20::authorization_used(&rpc, token.address, buyer.address(), *nonce)
                .await
                .unwrap();
        assert_eq!(answer["success"] == true, used, "proof {i}: answered {answer}, its authorization used: {used}");
        settled += u128::from(used);
    }
    // Only the lost one was not settled: no other buyer was refused for the facilitator's
    // own nonces (the ones handed out behind the gap, a nonce used twice after it).
    let refused: Vec<usize> = (0..proofs.len()).filter(|&i| answers[i]["success"] != true).collect();
    assert_eq!(refused.len(), 1, "{:?}", refused.iter().map(|&i| &answers[i]).collect::<Vec<_>>());
    assert!(waited.contains(&refused[0]), "the refused one is the lost one, which waited");
    // Its seller, following it, hears that it failed (nothing moved), not that it was "used".
    let verdict = &answers[refused[0]];
    assert_eq!(verdict["errorReason"], "settle_exact_failed_onchain", "{verdict}");
    assert!(verdict["errorMessage"].as_str().unwrap().contains("was used by another transaction"), "{verdict}");
    assert_eq!(settled, 29);
    assert_eq!(token.balance(t, seller).await, 1_000 * settled, "the seller was paid once per success");
    assert_eq!(
        u128::from(rpc.mined_nonce(s.signer.address()).await.unwrap()),
        settled,
        "one transaction of the facilitator's per settlement, none for the lost one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_settlement_is_recovered_under_steady_traffic_on_one_instance() {
    let s = Settlers::start(1, None).await;
    a_lost_settlement_is_recovered_under_steady_traffic(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_settlement_is_recovered_under_steady_traffic_across_two_instances() {
    let test = "a_lost_settlement_is_recovered_under_steady_traffic_across_two_instances";
    let Some(pg) = common::process::PgSchema::create(test).await else { return };
    let s = Settlers::start(2, Some(&pg.url)).await;
    a_lost_settlement_is_recovered_under_steady_traffic(&s).await;
    drop(s);
    pg.drop_schema().await;
}
