//! The real binary, started with no configuration at all in an empty directory: it creates
//! `tollgate.db`, listens, answers in the error envelope, issues keys through its CLI, and stops
//! cleanly on SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::time::Duration;

use serde_json::{Value, json};

use common::process::{Daemon, cli, cli_with, command};

async fn call(client: &reqwest::Client, req: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = client.execute(req.build().unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_in_development_mode_without_config_and_answers_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with(dir.path(), &[("TOLLGATE_DEV", "1")]);
    assert!(dir.path().join("tollgate.db").exists(), "the default SQLite file is created in the working directory");

    let standard = cli(dir.path(), &["keys", "create", "--plan", "standard", "--label", "e2e"]).trim().to_owned();
    assert!(standard.starts_with("tg_live_"), "{standard}");
    let listing = cli(dir.path(), &["keys", "list"]);
    assert!(listing.contains("standard") && listing.contains("e2e"));
    assert!(!listing.contains(&standard), "listings never show the key");

    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", daemon.base);
    let history = url("/payment/history/9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin");

    let (s, h, b) = call(&client, client.get(&history)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (401, Some("UNAUTHORIZED")));
    assert!(h.contains_key("x-request-id"));
    let (s, _, _) =
        call(&client, client.get(&history).bearer_auth("tg_live_1111111111111111111111111111111111111111111")).await;
    assert_eq!(s, 401);

    let (s, _, b) = call(
        &client,
        client.get(url("/token/info/9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin")).bearer_auth(&standard),
    )
    .await;
    assert_eq!((s, b["error"]["code"].as_str()), (403, Some("FORBIDDEN")));

    let (s, _, b) = call(
        &client,
        client
            .post(url("/payment/send"))
            .bearer_auth(&standard)
            .header("content-type", "application/json")
            .body("{oops"),
    )
    .await;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("INVALID_PARAMETERS")));
    let (s, _, b) = call(&client, client.get(format!("{history}?limit=501")).bearer_auth(&standard)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (400, Some("INVALID_PARAMETERS")));
    let (s, _, b) =
        call(&client, client.get(url("/payment/status/pay_01JD3Q8Z7Y6X5W4V3T2S1R0Q9P")).bearer_auth(&standard)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (404, Some("NOT_FOUND")));
    // A Solana address that is not one of this account's custodial wallets.
    let (s, _, b) = call(&client, client.post(url("/payment/send")).bearer_auth(&standard).json(&json!({
        "walletAddress": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "recipientAddress": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4", "amount": 0.01
    }))).await;
    assert_eq!((s, b["error"]["code"].as_str()), (403, Some("FORBIDDEN")));

    // 6 requests made so far with this key; the 101st in the minute is refused.
    let mut statuses = Vec::new();
    for _ in 0..95 {
        statuses.push(call(&client, client.get(&history).bearer_auth(&standard)).await.0);
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let (s, h, b) = call(&client, client.get(&history).bearer_auth(&standard)).await;
    assert_eq!((s, b["error"]["code"].as_str()), (429, Some("RATE_LIMIT")));
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(h["x-ratelimit-remaining"], "0");

    // Hosted mode end to end on the embedded ledger: a custodial wallet made by the CLI (its key
    // sealed under the development master key, kept 0600 beside the database), funded, paying.
    let premium = cli(dir.path(), &["keys", "create", "--plan", "premium", "--test"]).trim().to_owned();
    let premium_id =
        cli(dir.path(), &["keys", "list"]).lines().last().unwrap().split_whitespace().next().unwrap().to_owned();
    let payer =
        cli(dir.path(), &["--dev", "wallets", "create", "--key", &premium_id, "--chain", "solana"]).trim().to_owned();
    let payee =
        cli(dir.path(), &["--dev", "wallets", "create", "--key", &premium_id, "--chain", "solana"]).trim().to_owned();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join("tollgate-master.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The ledger refuses to fund the system program or to leave a new account below rent
    // exemption: answered as the caller's mistake, not as a chain failure.
    for (body, code) in [
        (json!({"address": "11111111111111111111111111111111", "amount": 1}), "INVALID_RECIPIENT"),
        (json!({"address": payer, "amount": 0.0005}), "INVALID_PARAMETERS"),
    ] {
        let (s, _, b) = call(&client, client.post(url("/dev/airdrop")).bearer_auth(&premium).json(&body)).await;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some(code)), "{b}");
    }
    let (s, _, b) = call(
        &client,
        client.post(url("/dev/airdrop")).bearer_auth(&premium).json(&json!({"address": payer, "amount": 1})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let (s, _, b) = call(
        &client,
        client
            .post(url("/payment/send"))
            .bearer_auth(&premium)
            .json(&json!({"walletAddress": payer, "recipientAddress": payee, "amount": 0.25})),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (200, Some("confirmed")), "{b}");
    assert!(b["paymentProof"].is_string());
    let (_, _, history) =
        call(&client, client.get(url(&format!("/payment/history/{payee}"))).bearer_auth(&premium)).await;
    assert_eq!(history["payments"][0]["direction"], "received");

    // Deleting through the CLI (another process) takes effect once the key cache expires.
    let id = cli(dir.path(), &["keys", "list"]).lines().nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    cli(dir.path(), &["keys", "delete", &id]);
    assert!(!cli(dir.path(), &["keys", "list"]).contains(&id));

    let status = daemon.terminate();
    assert!(status.success(), "graceful shutdown exits 0, got {status:?}");
}

#[test]
fn cli_refuses_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = command(dir.path()).args(["keys", "create", "--plan", "gold"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown plan"));
    let out = command(dir.path()).args(["keys", "delete", "key_missing"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no key key_missing"));
    let out = command(dir.path()).args(["keys", "list"]).env("TOLLGATE_LISTEN", "nonsense").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TOLLGATE_LISTEN"));
}

/// Crash safety: the daemon is killed (SIGKILL) after it stored a payment's transaction id and
/// before it read the confirmation; restarted on the same database and chain, it finishes the
/// payment from chain evidence, and exactly one transfer happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_finishes_its_payment_after_restart() {
    use solana_sdk::pubkey::Pubkey;
    use tollgate_facilitator::chains::solana::embedded::EmbeddedLedger;
    use tollgate_facilitator::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};

    // The chain lives in the test process, so it outlives the daemon.
    let ledger = EmbeddedLedger::start().await.unwrap();
    let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // No wait for confirmation: /payment/send answers `pending` as soon as it has broadcast.
    std::fs::write(
        dir.path().join("tollgate.toml"),
        format!("solana_rpc_url = \"{}\"\n[limits]\nsend_wait_secs = 0\n", ledger.rpc_url()),
    )
    .unwrap();
    let master = "11".repeat(32);
    let env = [("TOLLGATE_CONFIG", "tollgate.toml"), ("TOLLGATE_MASTER_KEY", master.as_str())];

    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "premium"]).trim().to_owned();
    let key_id = cli_with(dir.path(), &env, &["keys", "list"])
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let wallet =
        cli_with(dir.path(), &env, &["wallets", "create", "--key", &key_id, "--chain", "solana"]).trim().to_owned();
    let wallet_key: Pubkey = wallet.parse().unwrap();
    let airdrop = rpc.request_airdrop(&wallet_key, 1_000_000_000).await.unwrap();
    let confirmed = rpc.wait_for_outcome(&airdrop, std::time::Duration::from_secs(30)).await.unwrap();
    assert!(matches!(confirmed, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })), "{confirmed:?}");
    let payee = Pubkey::new_unique();

    let daemon = Daemon::start_with(dir.path(), &env);
    let client = reqwest::Client::new();
    let send = json!({"walletAddress": wallet, "recipientAddress": payee.to_string(), "amount": 0.1});
    let (s, _, pending) =
        call(&client, client.post(format!("{}/payment/send", daemon.base)).bearer_auth(&key).json(&send)).await;
    assert_eq!((s, pending["status"].as_str()), (202, Some("pending")), "{pending}");
    assert!(pending["transaction"].is_string());
    let id = pending["paymentId"].as_str().unwrap().to_owned();
    let mut daemon = daemon;
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();

    // What the killed daemon left: the transaction id, no verdict.
    let store = tollgate_facilitator::store::SqlStore::connect(
        &tollgate_facilitator::config::DatabaseUrl::parse(dir.path().join("tollgate.db").to_str().unwrap()).unwrap(),
    )
    .await
    .unwrap();
    let left = tollgate_facilitator::store::PaymentStore::get_payment(&store, &id).await.unwrap().unwrap();
    assert_eq!(left.payment.status.as_str(), "pending");
    assert_eq!(left.payment.transaction.as_deref(), pending["transaction"].as_str());
    store.close().await;

    // Restarted, it serves at once and reconciles in the background: the payment's verdict
    // comes from the chain within the first pass (a real process: its time is the system's).
    let daemon = Daemon::start_with(dir.path(), &env);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        let (s, _, status) =
            call(&client, client.get(format!("{}/payment/status/{id}", daemon.base)).bearer_auth(&key)).await;
        assert_eq!(s, 200, "{status}");
        if status["status"] != "pending" || std::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(status["status"], "confirmed", "{status}");
    assert_eq!(rpc.balance(&payee).await.unwrap(), 100_000_000, "exactly one transfer landed");
    assert!(daemon.terminate().success());
}

/// Crash safety of a metered settlement: the daemon is killed (SIGKILL) while it waits for its
/// upto settlement to be mined (anvil mines nothing meanwhile). Restarted on the same database,
/// the seller's retry of the same /settle is answered with that one settlement once it is mined:
/// the charge moved once, never the most, never twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_during_an_upto_settlement_charges_it_once_after_restart() {
    use alloy::primitives::{TxKind, U256};
    use alloy::providers::Provider as _;
    use alloy::signers::local::PrivateKeySigner;
    use tollgate_encoding::permit2::{Erc20, PERMIT2};
    use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
    use tollgate_facilitator::devnet::{self, DevToken, TokenKind};

    use common::permit2::{Permit, body};

    let anvil = alloy::node_bindings::Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().unwrap();
    let rpc = EvmRpc::connect(&anvil.endpoint(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let eth = U256::from(10u128.pow(19));
    let (deployer, signer, buyer) =
        (PrivateKeySigner::random(), PrivateKeySigner::random(), PrivateKeySigner::random());
    for who in [&deployer, &signer, &buyer] {
        devnet::set_evm_balance(&rpc, who.address(), eth).await.unwrap();
    }
    devnet::install_permit2(&rpc, &deployer).await.unwrap();
    let token = DevToken::deploy(&rpc, deployer, TokenKind::Plain, ("Plain USD", "PUSD", 6)).await.unwrap();
    token.mint(&rpc, buyer.address(), U256::from(1_000_000u64)).await.unwrap();
    let approve = alloy::sol_types::SolCall::abi_encode(&Erc20::approveCall { spender: PERMIT2, value: U256::MAX });
    devnet::send_evm(&rpc, &buyer, TxKind::Call(token.address), approve).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let signer_key = alloy::primitives::hex::encode(signer.to_bytes());
    let env = [("TOLLGATE_EVM_RPC_URL", anvil.endpoint()), ("TOLLGATE_EVM_SIGNER_KEY", signer_key)];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "premium"]).trim().to_owned();
    let seller = alloy::primitives::Address::repeat_byte(0x54);
    let permit = Permit::upto(token.address, 50_000, seller, signer.address()).signed(&buyer, rpc.chain_id());
    let most = json!({"scheme": "upto", "network": format!("eip155:{}", rpc.chain_id()), "amount": "50000",
        "asset": token.address.to_string(), "payTo": seller.to_string(), "maxTimeoutSeconds": 30,
        "extra": {"assetTransferMethod": "permit2", "facilitatorAddress": signer.address().to_string()}});
    let mut charged = most.clone();
    charged["amount"] = json!("20000");
    let settle = body(&most, &charged, permit, json!({}));

    // Nothing is mined from now on: the settlement is broadcast and waits.
    let _: Value = rpc.provider().raw_request("evm_setAutomine".into(), (false,)).await.unwrap();
    let mut daemon = Daemon::start_with(dir.path(), &env);
    let client = reqwest::Client::new();
    let url = format!("{}/settle", daemon.base);
    let waiting = tokio::spawn({
        let (client, url, key, settle) = (client.clone(), url, key.clone(), settle.clone());
        async move { client.post(url).bearer_auth(key).json(&settle).send().await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rpc.provider().get_transaction_count(signer.address()).pending().await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the settlement was never broadcast");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    assert!(waiting.await.unwrap().is_err(), "the seller's connection died with the daemon");

    // The chain goes on; the daemon is restarted on the same database; the seller retries.
    let _: Value = rpc.provider().raw_request("evm_mine".into(), ()).await.unwrap();
    let _: Value = rpc.provider().raw_request("evm_setAutomine".into(), (true,)).await.unwrap();
    let daemon = Daemon::start_with(dir.path(), &env);
    let (_, _, answer) =
        call(&client, client.post(format!("{}/settle", daemon.base)).bearer_auth(&key).json(&settle)).await;
    assert_eq!((answer["success"].as_bool(), answer["amount"].as_str()), (Some(true), Some("20000")), "{answer}");
    assert_eq!(token.balance_of(&rpc, seller).await.unwrap(), U256::from(20_000u64), "charged once, the charge");
    assert_eq!(rpc.provider().get_transaction_count(signer.address()).await.unwrap(), 1, "one settlement sent");
    assert!(daemon.terminate().success());
}

/// Three daemons on one PostgreSQL database, one proof presented to them 64 times at once: it
/// settles once — one payment, one transfer — whichever instance each request reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_on_one_postgres_settle_a_proof_once() {
    use solana_sdk::pubkey::Pubkey;
    use solana_sdk::signature::Keypair;
    use solana_sdk::signer::Signer as _;
    use tollgate_facilitator::chains::solana::embedded::EmbeddedLedger;
    use tollgate_facilitator::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};

    let Some(pg) = common::process::PgSchema::create("three_daemons_on_one_postgres_settle_a_proof_once").await else {
        return;
    };
    let database = pg.url.clone();

    let ledger = EmbeddedLedger::start().await.unwrap();
    let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tollgate.toml"),
        format!(
            "database_url = \"{database}\"\nsolana_rpc_url = \"{}\"\n[limits]\ndatabase_max_connections = 5\n",
            ledger.rpc_url()
        ),
    )
    .unwrap();
    let env = [("TOLLGATE_CONFIG", "tollgate.toml")];
    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "premium"]).trim().to_owned();
    let buyer = Keypair::new();
    let airdrop = rpc.request_airdrop(&buyer.pubkey(), 1_000_000_000).await.unwrap();
    rpc.wait_for_outcome(&airdrop, Duration::from_secs(30)).await.unwrap();
    let seller = Pubkey::new_unique();
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let proof = common::solana::signed_proof(&rpc.network().to_string(), &buyer, &seller, 10_000_000, blockhash);
    let body = json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 0.01});

    let daemons = [
        Daemon::start_with(dir.path(), &env),
        Daemon::start_with(dir.path(), &env),
        Daemon::start_with(dir.path(), &env),
    ];
    let client = reqwest::Client::new();
    let racers: Vec<_> = (0..64)
        .map(|i| {
            let request = client.post(format!("{}/payment/receive", daemons[i % 3].base)).bearer_auth(&key).json(&body);
            let client = client.clone();
            tokio::spawn(async move { call(&client, request).await })
        })
        .collect();
    let (mut confirmed, mut ids) = (0, std::collections::BTreeSet::new());
    for racer in racers {
        let (status, _, answer) = racer.await.unwrap();
        match status {
            200 => confirmed += 1,
            202 => {}
            402 => {
                let message = answer["error"]["message"].as_str().unwrap();
                assert!(message.contains("already used"), "{answer}");
                ids.insert(message.split("payment ").nth(1).unwrap().trim_end_matches(')').to_owned());
                continue;
            }
            other => panic!("{other}: {answer}"),
        }
        ids.insert(answer["paymentId"].as_str().unwrap().to_owned());
    }
    assert_eq!(confirmed, 1, "one verdict for one proof");
    assert_eq!(ids.len(), 1, "one payment: {ids:?}");
    assert_eq!(rpc.balance(&seller).await.unwrap(), 10_000_000, "one transfer");
    let id = ids.into_iter().next().unwrap();
    for daemon in &daemons {
        let (s, _, record) =
            call(&client, client.get(format!("{}/payment/status/{id}", daemon.base)).bearer_auth(&key)).await;
        assert_eq!((s, record["status"].as_str()), (200, Some("confirmed")), "{record}");
    }
    for daemon in daemons {
        assert!(daemon.terminate().success());
    }
    pg.drop_schema().await;
}
