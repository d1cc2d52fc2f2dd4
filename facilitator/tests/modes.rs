//! Development mode is asked for, never implied: the real binary, started the ways an operator
//! would, refuses to run short of a setting and serves exactly the chains configured.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use alloy::node_bindings::Anvil;
use serde_json::Value;
use tollgate_facilitator::chains::solana::embedded::EmbeddedLedger;
use tollgate_facilitator::devnet;

use common::process::{Daemon, cli_with, refused};

const SERVE: [&str; 3] = ["serve", "--listen", "127.0.0.1:0"];

async fn get(url: &str, key: Option<&str>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.get(url);
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_dev_the_daemon_refuses_to_start_short_of_a_setting() {
    let dir = tempfile::tempdir().unwrap();

    // Nothing configured: no chain to serve. The refusal names what to set, and nothing is made.
    for env in [&[][..], &[("TOLLGATE_DEVE", "1")][..], &[("TOLLGATE_DEV", "0")][..]] {
        let err = refused(dir.path(), env, &SERVE);
        for named in ["TOLLGATE_SOLANA_RPC_URL", "TOLLGATE_EVM_RPC_URL", "--dev"] {
            assert!(err.contains(named), "{env:?}: the refusal names {named}: {err}");
        }
    }
    assert!(!dir.path().join("tollgate.db").exists(), "no database is created by a refused start");
    assert!(!dir.path().join("tollgate-master.key").exists(), "no master key is generated outside --dev");
    // A value that is neither true nor false is a mistake, not production.
    let err = refused(dir.path(), &[("TOLLGATE_DEV", "yes please")], &SERVE);
    assert!(err.contains("TOLLGATE_DEV"), "{err}");

    // The embedded ledger and a configured Solana RPC are two answers to one question.
    let err = refused(
        dir.path(),
        &[("TOLLGATE_DEV", "1"), ("TOLLGATE_SOLANA_RPC_URL", "http://127.0.0.1:1/secret-path")],
        &SERVE,
    );
    assert!(err.contains("TOLLGATE_SOLANA_RPC_URL"), "{err}");
    assert!(!err.contains("secret-path"), "{err}");

    // Development mode makes an account with a custodial wallet, sealed under a generated key.
    let dev = [("TOLLGATE_DEV", "1")];
    // `--json` says which key was made (a listing would show every account's keys).
    let created: Value =
        serde_json::from_str(&cli_with(dir.path(), &dev, &["keys", "create", "--plan", "premium", "--json"])).unwrap();
    assert!(created["key"].as_str().unwrap().starts_with("tg_live_"), "{created}");
    assert_eq!(created["plan"], "premium");
    let key_id = created["id"].as_str().unwrap();
    let wallet = cli_with(dir.path(), &dev, &["wallets", "create", "--key", key_id, "--chain", "solana"]);
    assert!(!wallet.trim().is_empty());
    let dev_key_file = dir.path().join("tollgate-master.key");
    let dev_key = std::fs::read_to_string(&dev_key_file).unwrap();

    // Production on a real Solana RPC, without the master key: the wallet would be stranded.
    let ledger = EmbeddedLedger::start().await.unwrap();
    let production = [("TOLLGATE_SOLANA_RPC_URL", ledger.rpc_url())];
    let err = refused(dir.path(), &production, &SERVE);
    assert!(err.contains("TOLLGATE_MASTER_KEY") && err.contains("1 custodial wallet(s)"), "{err}");
    assert!(!err.contains(dev_key.trim()), "the key itself is never printed: {err}");

    // Another well-formed key does not open what the database holds: refused, not started with
    // wallets it cannot spend (and webhook secrets it cannot open).
    let other_key = "22".repeat(32);
    let err = refused(
        dir.path(),
        &[("TOLLGATE_SOLANA_RPC_URL", ledger.rpc_url()), ("TOLLGATE_MASTER_KEY", other_key.as_str())],
        &SERVE,
    );
    assert!(err.contains("does not open"), "{err}");

    // With the key, it serves that one chain and no development endpoint.
    let with_key = [("TOLLGATE_SOLANA_RPC_URL", ledger.rpc_url()), ("TOLLGATE_MASTER_KEY", dev_key.trim())];
    let key = cli_with(dir.path(), &with_key, &["keys", "create", "--plan", "enterprise"]).trim().to_owned();
    let daemon = Daemon::start_with(dir.path(), &with_key);
    let (status, _) = get(&format!("{}/dev/airdrop", daemon.base), Some(&key)).await;
    assert_eq!(status, 404, "no /dev/airdrop outside development mode");
    let (status, supported) = get(&format!("{}/supported", daemon.base), Some(&key)).await;
    assert_eq!(status, 200, "{supported}");
    let networks: Vec<&str> =
        supported["kinds"].as_array().unwrap().iter().filter_map(|k| k["network"].as_str()).collect();
    assert!(!networks.is_empty() && networks.iter().all(|n| n.starts_with("solana:")), "{networks:?}");
    daemon.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evm_only_daemon_serves_evm_alone() {
    let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = anvil.endpoint();
    let env = [("TOLLGATE_EVM_RPC_URL", endpoint.as_str())];
    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "enterprise"]).trim().to_owned();
    let daemon = Daemon::start_with(dir.path(), &env);
    let (status, supported) = get(&format!("{}/supported", daemon.base), Some(&key)).await;
    assert_eq!(status, 200, "{supported}");
    let networks: Vec<&str> =
        supported["kinds"].as_array().unwrap().iter().filter_map(|k| k["network"].as_str()).collect();
    assert!(!networks.is_empty() && networks.iter().all(|n| *n == "eip155:31337"), "{networks:?}");
    let (status, _) = get(&format!("{}/dev/airdrop", daemon.base), Some(&key)).await;
    assert_eq!(status, 404);
    let (status, ready) = get(&format!("{}/readyz", daemon.base), None).await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["chains"]["eip155:31337"]["ok"], true, "{ready}");
    assert!(!dir.path().join("tollgate-master.key").exists(), "no master key is generated outside --dev");
    // The node goes away: the instance is not ready, and says which chain, without its URL.
    drop(anvil);
    // Probes are reused for 2 s (the route is public): the next one finds the node gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (status, ready) = loop {
        let (status, ready) = get(&format!("{}/readyz", daemon.base), None).await;
        if status != 200 || std::time::Instant::now() > deadline {
            break (status, ready);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!((status, ready["reason"].as_str()), (503, Some("chain")), "{ready}");
    assert!(!ready.to_string().contains("127.0.0.1"), "no RPC detail in a public answer: {ready}");
    assert_eq!(ready["chains"]["eip155:31337"]["ok"], false, "{ready}");
    daemon.terminate();
}
