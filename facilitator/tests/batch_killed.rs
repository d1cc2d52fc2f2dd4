//! The facilitator killed in the middle of a `batch-settlement` claim: a real daemon process
//! (its own SQLite database, settling from its own account on the test's anvil) broadcasts a
//! seller's claim while anvil mines nothing, and is killed (SIGKILL) before it sees the receipt.
//! The chain then mines the claim; restarted on the same database, the daemon answers the same
//! claim sent again without sending a second one; the sweep moves exactly what was claimed, once,
//! and a second sweep moves nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::time::{Duration, Instant};

use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use common::batch::{World, config_json, voucher};
use common::process::{Daemon, cli_with};
use serde_json::{Value, json};

const MASTER_KEY: &str = "2b7e151628aed2a6abf7158809cf4f3c762e7160f38b4da56a784d9045190cfe";

async fn settle(base: &str, key: &str, body: &Value) -> reqwest::Result<Value> {
    reqwest::Client::new().post(format!("{base}/settle")).bearer_auth(key).json(body).send().await?.json().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_claim_claims_once_and_sweeps_once() {
    let w = World::start().await;
    let rpc = w.t.backend().rpc.clone();
    let signer = PrivateKeySigner::random();
    w.t.fund(&signer.address().to_string(), common::evm::ETH).await;
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, signer_key) = (w.t.anvil.endpoint(), alloy::primitives::hex::encode(signer.to_bytes()));
    let env = [
        ("TOLLGATE_EVM_RPC_URL", endpoint.as_str()),
        ("TOLLGATE_EVM_SIGNER_KEY", signer_key.as_str()),
        ("TOLLGATE_MASTER_KEY", MASTER_KEY),
    ];
    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "premium"]).trim().to_owned();
    let listed = cli_with(dir.path(), &env, &["keys", "list"]);
    let key_id = listed.lines().nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    let wallet =
        cli_with(dir.path(), &env, &["wallets", "create", "--key", &key_id, "--chain", "evm"]).trim().to_owned();
    let receiver: alloy::primitives::Address = wallet.parse().unwrap();

    // A channel of 10,000 paying the seller's wallet, claims authorized by the daemon's account.
    let payer = PrivateKeySigner::random();
    w.token.mint(&w.t, payer.address(), 10_000).await;
    let config = w.config(payer.address(), payer.address(), receiver, signer.address(), 1);
    let id = config.id(w.chain());
    assert!(w.send(&w.relayer, &w.deposit_3009(&config, &payer, 10_000, id, 1)).await);
    let requirement = w.requirement(receiver, signer.address(), 1_000);
    let claim = json!({"type": "claim", "claims": [{
        "voucher": {"channel": config_json(&config), "maxClaimableAmount": "3000"},
        "signature": voucher(&w, &payer, id, 3_000).to_string(), "totalClaimed": "3000"}]});
    let body = |payload: Value| {
        json!({"x402Version": 2, "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": payload},
            "paymentRequirements": requirement})
    };

    // Nothing is mined: the claim is broadcast and waits; the daemon is killed meanwhile.
    let _: Value = rpc.provider().raw_request("evm_setAutomine".into(), (false,)).await.unwrap();
    let daemon = Daemon::start_with(dir.path(), &env);
    let waiting = tokio::spawn({
        let (base, key, claim) = (daemon.base.clone(), key.clone(), body(claim.clone()));
        async move { settle(&base, &key, &claim).await }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while rpc.provider().get_transaction_count(signer.address()).pending().await.unwrap() == 0 {
        assert!(Instant::now() < deadline, "the claim was never broadcast");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.kill();
    assert!(waiting.await.unwrap().is_err(), "the seller's connection died with the daemon");
    let _: Value = rpc.provider().raw_request("evm_mine".into(), ()).await.unwrap();
    let _: Value = rpc.provider().raw_request("evm_setAutomine".into(), (true,)).await.unwrap();
    assert_eq!(w.channel(id).await, (10_000, 3_000), "the broadcast claim landed");

    // Restarted on the same database, the same claim sent again: no second claim.
    let daemon = Daemon::start_with(dir.path(), &env);
    let again = settle(&daemon.base, &key, &body(claim)).await.unwrap();
    assert_eq!(w.channel(id).await, (10_000, 3_000), "claimed once: {again}");
    let sent = rpc.provider().get_transaction_count(signer.address()).await.unwrap();

    // The sweep moves exactly what was claimed, once.
    let sweep = json!({"type": "settle", "receiver": wallet, "token": w.token.address.to_string()});
    let swept = settle(&daemon.base, &key, &body(sweep.clone())).await.unwrap();
    assert_eq!((swept["success"].as_bool(), swept["amount"].as_str()), (Some(true), Some("3000")), "{swept}");
    assert_eq!(w.balance(receiver).await, 3_000);
    // Asked again for the same claims: the same sweep, nothing more sent.
    let twice = settle(&daemon.base, &key, &body(sweep)).await.unwrap();
    assert_eq!((twice["success"].as_bool(), &twice["transaction"]), (Some(true), &swept["transaction"]), "{twice}");
    assert_eq!(w.balance(receiver).await, 3_000, "swept once");
    assert_eq!(
        rpc.provider().get_transaction_count(signer.address()).await.unwrap(),
        sent + 1,
        "after the landed claim: the one sweep, nothing else ({again})"
    );
    assert!(daemon.terminate().success());
}
