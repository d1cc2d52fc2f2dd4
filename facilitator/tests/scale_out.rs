//! Several daemon processes on one PostgreSQL and one Redis behave as one facilitator: one rate
//! limit, one event feed, one key list, one nonce sequence per sending account, and a payment
//! whose instance died is finished by another. Each test starts real daemons (the binary) in a
//! PostgreSQL schema of its own; they are skipped, and say so, without `TOLLGATE_TEST_POSTGRES_URL`
//! (and `TOLLGATE_TEST_REDIS_URL` where Redis is needed).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use alloy::node_bindings::Anvil;
use alloy::primitives::{Address, U256};
use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tollgate_facilitator::chains::evm::build::{Transfer, sign};
use tollgate_facilitator::chains::evm::rpc::EvmRpc;
use tollgate_facilitator::chains::solana::embedded::EmbeddedLedger;
use tollgate_facilitator::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
use tollgate_facilitator::devnet;

use common::process::{Daemon, PgSchema, cli_with, redis_url};
use common::rpc_proxy::{RpcProxy, Rule};
use common::ws::{Socket, next_json, send_json};

/// A 32-byte master key (hex) shared by the instances of a test.
const MASTER_KEY: &str = "6b2f0c5e9a71d3884f1e2a7c5d9b0e3f6a8c1d4e7b2f5a9c0d3e6f1a4b7c8d9e";

const ETH: u128 = 1_000_000_000_000_000_000;

/// Writes the shared configuration; returns the environment that points a daemon at it. Each
/// daemon opens at most 5 + 2 PostgreSQL connections (tests run at once share the server's 100).
fn configure(dir: &Path, lines: &[String]) -> [(&'static str, &'static str); 2] {
    // `GET /supported` behind a key: the tests' cheapest guarded route (rate limits, deleted keys).
    let text = "public_supported = false\n".to_owned()
        + &lines.join("\n")
        + "\n[limits]\ndatabase_max_connections = 5\nnonce_lease_connections = 2\n";
    std::fs::write(dir.join("tollgate.toml"), text).unwrap();
    [("TOLLGATE_CONFIG", "tollgate.toml"), ("TOLLGATE_MASTER_KEY", MASTER_KEY)]
}

/// The id (`key_…`) of the only key of a fresh schema.
fn only_key_id(dir: &Path, env: &[(&str, &str)]) -> String {
    let list = cli_with(dir, env, &["keys", "list"]);
    list.lines().nth(1).unwrap().split_whitespace().next().unwrap().to_owned()
}

/// What the instances of a test share: a PostgreSQL schema, the Solana ledger, the working
/// directory with the configuration, and (when asked) Redis.
struct Shared {
    pg: PgSchema,
    ledger: EmbeddedLedger,
    dir: tempfile::TempDir,
    /// `TOLLGATE_EVM_RPC_URL` of the daemons and the CLI, if any.
    evm_rpc_url: Option<String>,
    /// `TOLLGATE_EVM_SIGNER_KEY` (the facilitator's EIP-3009 account), if any.
    evm_signer_key: Option<String>,
}

impl Shared {
    /// `None` when PostgreSQL (or Redis, if `with_redis`) is not configured for tests.
    async fn set_up(test: &str, with_redis: bool) -> Option<Self> {
        let redis = if with_redis { Some(redis_url(test)?) } else { None };
        let pg = PgSchema::create(test).await?;
        let ledger = EmbeddedLedger::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut lines =
            vec![format!("database_url = \"{}\"", pg.url), format!("solana_rpc_url = \"{}\"", ledger.rpc_url())];
        lines.extend(redis.map(|url| format!("redis_url = \"{url}\"")));
        configure(dir.path(), &lines);
        Some(Self { pg, ledger, dir, evm_rpc_url: None, evm_signer_key: None })
    }

    fn env(&self) -> Vec<(&str, &str)> {
        let mut env = vec![("TOLLGATE_CONFIG", "tollgate.toml"), ("TOLLGATE_MASTER_KEY", MASTER_KEY)];
        env.extend(self.evm_rpc_url.as_deref().map(|url| ("TOLLGATE_EVM_RPC_URL", url)));
        env.extend(self.evm_signer_key.as_deref().map(|key| ("TOLLGATE_EVM_SIGNER_KEY", key)));
        env
    }

    fn cli(&self, args: &[&str]) -> String {
        cli_with(self.dir.path(), &self.env(), args).trim().to_owned()
    }

    fn daemon(&self) -> Daemon {
        Daemon::start_with(self.dir.path(), &self.env())
    }

    /// Two instances settling on `t`'s anvil from one funded facilitator account: the account,
    /// a premium key, the instances.
    async fn two_evm_instances(&mut self, t: &common::evm::EvmApp) -> (PrivateKeySigner, String, Daemon, Daemon) {
        let signer = PrivateKeySigner::random();
        t.fund(&signer.address().to_string(), 10 * ETH).await;
        self.evm_rpc_url = Some(t.anvil.endpoint());
        self.evm_signer_key = Some(alloy::primitives::hex::encode(signer.to_bytes()));
        let key = self.cli(&["keys", "create", "--plan", "premium"]);
        (signer, key, self.daemon(), self.daemon())
    }

    /// A premium key and `n` custodial EVM wallets of its account, each funded with `wei`.
    async fn evm_customer(&self, evm: &EvmRpc, n: usize, wei: u128) -> (String, Vec<String>) {
        let key = self.cli(&["keys", "create", "--plan", "premium"]);
        let key_id = only_key_id(self.dir.path(), &self.env());
        let mut wallets = Vec::new();
        for _ in 0..n {
            let wallet = self.cli(&["wallets", "create", "--key", &key_id, "--chain", "evm"]);
            set_balance(evm, wallet.parse().unwrap(), wei).await;
            wallets.push(wallet);
        }
        (key, wallets)
    }
}

async fn get(client: &reqwest::Client, url: String, key: &str) -> (u16, Value) {
    let response = client.get(url).bearer_auth(key).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn post(client: &reqwest::Client, url: String, key: &str, body: &Value) -> (u16, Value) {
    let response = client.post(url).bearer_auth(key).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A standard-plan key (100 requests a minute) used through three instances in turn: exactly 100
/// requests pass and 50 get 429, as with one instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_hold_one_rate_limit_through_redis() {
    let Some(shared) = Shared::set_up("three_instances_hold_one_rate_limit_through_redis", true).await else {
        return;
    };
    let key = shared.cli(&["keys", "create", "--plan", "standard"]);
    let daemons: Vec<Daemon> = (0..3).map(|_| shared.daemon()).collect();
    let client = reqwest::Client::new();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    let mut remaining = Vec::new();
    for i in 0..150 {
        let response = client.get(format!("{}/supported", daemons[i % 3].base)).bearer_auth(&key).send().await.unwrap();
        *answers.entry(response.status().as_u16()).or_default() += 1;
        if response.status() == 200 {
            remaining.push(response.headers()["x-ratelimit-remaining"].to_str().unwrap().parse::<u32>().unwrap());
        }
    }
    assert_eq!(answers, [(200, 100), (429, 50)].into_iter().collect(), "one limit for all instances");
    assert_eq!(remaining, (0..100).rev().collect::<Vec<_>>(), "one count, whichever instance answered");
    let ready: Value = client.get(format!("{}/readyz", daemons[0].base)).send().await.unwrap().json().await.unwrap();
    assert_eq!((&ready["status"], &ready["rateLimits"]), (&json!("ready"), &json!("shared")), "{ready}");
    for daemon in daemons {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// Redis is down: the documented choice is to fail open to per-instance limits. Requests are
/// served, and the instance still enforces the plan on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_an_instance_limits_on_its_own_and_keeps_serving() {
    let ledger = EmbeddedLedger::start().await.unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_redis = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let env = configure(
        dir.path(),
        &[format!("redis_url = \"{dead_redis}\""), format!("solana_rpc_url = \"{}\"", ledger.rpc_url())],
    );
    let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "standard"]).trim().to_owned();
    let daemon = Daemon::start_with(dir.path(), &env);
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..101 {
        statuses.push(get(&client, format!("{}/supported", daemon.base), &key).await.0);
    }
    assert!(statuses[..100].iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(statuses[100], 429, "the in-process fallback still enforces the plan");
    // Still ready (rate limits fail open), and saying why limits are per instance.
    let ready = client.get(format!("{}/readyz", daemon.base)).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!((ready["status"].as_str(), ready["rateLimits"].as_str()), (Some("ready"), Some("degraded")), "{ready}");
    assert_eq!(ready["rateLimitFallbacks"], 101, "every request counted in the process");
    assert!(daemon.terminate().success());
}

/// A WebSocket subscriber on instance A follows a payment received through instance B, every
/// change once and in order; a key deleted elsewhere is refused by B within a second (B's key
/// cache would otherwise trust it for 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_on_one_instance_reach_the_others_at_once() {
    let Some(shared) = Shared::set_up("changes_made_on_one_instance_reach_the_others_at_once", false).await else {
        return;
    };
    let rpc = SolanaRpc::connect(shared.ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let key = shared.cli(&["keys", "create", "--plan", "premium"]);
    let (a, b) = (shared.daemon(), shared.daemon());

    let seller = Pubkey::new_unique();
    let mut request = format!("{}/ws", a.base.replace("http://", "ws://")).into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let subscribe = json!({"method": "subscribeWallet", "keys": [seller.to_string()]});
    send_json(&mut socket, subscribe).await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed");

    let buyer = Keypair::new();
    let airdrop = rpc.request_airdrop(&buyer.pubkey(), 1_000_000_000).await.unwrap();
    rpc.wait_for_outcome(&airdrop, Duration::from_secs(30)).await.unwrap();
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let proof = common::solana::signed_proof(&rpc.network().to_string(), &buyer, &seller, 10_000_000, blockhash);
    let body = json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 0.01});
    let client = reqwest::Client::new();
    let (status, paid) = post(&client, format!("{}/payment/receive", b.base), &key, &body).await;
    assert_eq!((status, paid["status"].as_str()), (200, Some("confirmed")), "{paid}");

    let mut seen = Vec::new();
    loop {
        let event = next_json(&mut socket).await;
        assert_eq!(event["event"], "payment.updated", "{event}");
        assert_eq!(event["payment"]["paymentId"], paid["paymentId"]);
        let status = event["payment"]["status"].as_str().unwrap().to_owned();
        seen.push(status.clone());
        if status == "confirmed" {
            break;
        }
    }
    assert_eq!(seen, ["verified", "submitted", "confirmed"], "every change once, in order");

    // A second key, trusted by B (cached), with a WebSocket open on each instance, then
    // deleted from another process.
    let doomed = shared.cli(&["keys", "create", "--plan", "enterprise"]);
    assert_eq!(get(&client, format!("{}/supported", b.base), &doomed).await.0, 200);
    let mut doomed_sockets = [connect_ws(&a.base, &doomed).await, connect_ws(&b.base, &doomed).await];
    for socket in &mut doomed_sockets {
        send_json(socket, json!({"method": "subscribeWallet", "keys": [seller.to_string()]})).await;
        assert_eq!(next_json(socket).await["event"], "subscribed");
    }
    let list = shared.cli(&["keys", "list"]);
    let doomed_id = list.lines().skip(1).map(|l| l.split_whitespace().next().unwrap()).last().unwrap().to_owned();
    assert!(list.lines().last().unwrap().contains("enterprise"), "{list}");
    shared.cli(&["keys", "delete", &doomed_id]);
    let deleted = Instant::now();
    for socket in &mut doomed_sockets {
        let (code, reason) = common::ws::close_within(socket, Duration::from_secs(1)).await;
        assert_eq!((code, reason.as_str()), (1008, "the API key was deleted"));
    }
    loop {
        let (status, _) = get(&client, format!("{}/supported", b.base), &doomed).await;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        assert!(deleted.elapsed() < Duration::from_secs(1), "B still trusts a deleted key after a second");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&client, format!("{}/supported", a.base), &doomed).await.0, 401);
    assert_eq!(get(&client, format!("{}/supported", a.base), &key).await.0, 200, "other keys unaffected");

    drop(socket);
    for daemon in [a, b] {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// An anvil on 127.0.0.1, with its RPC.
async fn anvil() -> (alloy::node_bindings::AnvilInstance, EvmRpc) {
    let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().expect("anvil starts");
    let evm = EvmRpc::connect(&anvil.endpoint(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    (anvil, evm)
}

async fn connect_ws(base: &str, key: &str) -> Socket {
    let mut request = format!("{}/ws", base.replace("http://", "ws://")).into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.unwrap().0
}

/// One key's WebSocket messages are limited per key per second across its connections on every
/// instance (20 a second), through Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_message_limit_holds_across_instances() {
    let Some(shared) = Shared::set_up("the_websocket_message_limit_holds_across_instances", true).await else {
        return;
    };
    let key = shared.cli(&["keys", "create", "--plan", "premium"]);
    let (a, b) = (shared.daemon(), shared.daemon());
    let mut sockets = [connect_ws(&a.base, &key).await, connect_ws(&b.base, &key).await];
    let message = json!({"method": "subscribeWallet", "keys": [Pubkey::new_unique().to_string()]});
    let started = Instant::now();
    for i in 0..30 {
        send_json(&mut sockets[i % 2], message.clone()).await;
    }
    let (mut accepted, mut limited) = (0, 0);
    for socket in &mut sockets {
        for _ in 0..15 {
            let answer = next_json(socket).await;
            match answer["event"].as_str() {
                Some("subscribed") => accepted += 1,
                Some("error") if answer["code"] == "RATE_LIMIT" => limited += 1,
                _ => panic!("unexpected {answer}"),
            }
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(accepted + limited, 30);
    if elapsed < Duration::from_millis(900) {
        // All 30 within one window: 20 for the key, whichever connection and instance.
        assert_eq!((accepted, limited), (20, 10), "one limit for both instances");
    } else {
        // A very slow machine spread them over two windows: still far fewer than 2 × 20 + 10.
        assert!(limited > 0 && accepted <= 40, "{accepted} accepted, {limited} limited in {elapsed:?}");
    }
    drop(sockets);
    for daemon in [a, b] {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// Sets an account's balance on anvil.
async fn set_balance(rpc: &EvmRpc, address: Address, wei: u128) {
    let _: Value = rpc.provider().raw_request("anvil_setBalance".into(), (address, U256::from(wei))).await.unwrap();
}

/// 16 hosted sends from one custodial wallet, at once, split across two instances: 16 distinct
/// nonces (the account's row is leased through PostgreSQL), all confirmed, 16 transfers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_sends_from_one_wallet_across_two_instances_take_sixteen_nonces() {
    let test = "sixteen_sends_from_one_wallet_across_two_instances_take_sixteen_nonces";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    let (anvil, evm) = anvil().await;
    shared.evm_rpc_url = Some(anvil.endpoint());
    let (key, wallets) = shared.evm_customer(&evm, 1, 10 * ETH).await;
    let wallet = wallets[0].clone();
    let payee = PrivateKeySigner::random().address();
    let (a, b) = (shared.daemon(), shared.daemon());

    let client = reqwest::Client::new();
    let body = json!({"walletAddress": wallet, "recipientAddress": payee.to_string(), "amount": 0.01});
    let sends: Vec<_> = (0..16)
        .map(|i| {
            let (client, key, body) = (client.clone(), key.clone(), body.clone());
            let url = format!("{}/payment/send", if i % 2 == 0 { &a.base } else { &b.base });
            tokio::spawn(async move { post(&client, url, &key, &body).await })
        })
        .collect();
    let mut transactions = BTreeSet::new();
    for send in sends {
        let (status, answer) = send.await.unwrap();
        assert_eq!((status, answer["status"].as_str()), (200, Some("confirmed")), "{answer}");
        transactions.insert(answer["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(transactions.len(), 16, "16 transactions of their own");
    assert_eq!(evm.mined_nonce(wallet.parse().unwrap()).await.unwrap(), 16, "nonces 0..16, each once, no gap");
    assert_eq!(u128::try_from(evm.balance(payee).await.unwrap()).unwrap(), 16 * ETH / 100, "16 transfers");
    for daemon in [a, b] {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// Twelve x402 `exact` (EIP-3009) settlements at once over two instances, all sent from the
/// facilitator's one signing account: each takes its own nonce of that account (the row is leased
/// through PostgreSQL), all land, the seller is paid twelve times, the signer's nonce is 12.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eip3009_settlements_from_one_signer_across_two_instances_take_distinct_nonces() {
    use common::evm::{EvmApp, Token, x402_v2};
    let test = "eip3009_settlements_from_one_signer_across_two_instances_take_distinct_nonces";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    // The chain and the test token (EvmApp's own in-process facilitator is not used).
    let t = EvmApp::start().await;
    let token = Token::deploy(&t).await;
    let (signer, key, a, b) = shared.two_evm_instances(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 1_000_000).await;
    let seller = PrivateKeySigner::random().address();
    let requirement = token.requirement(&t, seller, 10_000);
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap();
    let client = reqwest::Client::new();
    let settles: Vec<_> = (0..12)
        .map(|i| {
            let nonce = alloy::primitives::B256::from(rand::random::<[u8; 32]>());
            let payload = token.authorize(&t, &buyer, seller, 10_000, (0, now + 600), nonce);
            let body = x402_v2(&requirement, payload);
            let url = format!("{}/settle", if i % 2 == 0 { &a.base } else { &b.base });
            let (client, key) = (client.clone(), key.clone());
            tokio::spawn(async move { post(&client, url, &key, &body).await })
        })
        .collect();
    let mut transactions = BTreeSet::new();
    for settle in settles {
        let (status, answer) = settle.await.unwrap();
        assert_eq!((status, answer["success"].as_bool()), (200, Some(true)), "{answer}");
        transactions.insert(answer["transaction"].as_str().unwrap().to_owned());
    }
    assert_eq!(transactions.len(), 12);
    assert_eq!(token.balance(&t, seller).await, 120_000, "paid twelve times");
    let rpc = t.direct_rpc().await;
    assert_eq!(rpc.mined_nonce(signer.address()).await.unwrap(), 12, "the signer's nonces 0..12, each once");
    for daemon in [a, b] {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// One Permit2 `exact` permit and one `upto` permit, each settled six times at once over two
/// instances on one PostgreSQL: each moves money once (the claim on the payer's Permit2 nonce is
/// the database's), every success names that one transaction, and the upto permit settled again
/// afterwards, for another charge, moves nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit2_permit_settled_at_once_through_two_instances_moves_money_once() {
    use common::evm::{EvmApp, x402_v2};
    use common::permit2::{P2Token, Permit, install, requirement};
    let test = "a_permit2_permit_settled_at_once_through_two_instances_moves_money_once";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    let t = EvmApp::start().await;
    install(&t).await;
    let token = P2Token::deploy(&t, devnet::TokenKind::Plain, "Plain USD").await;
    let (signer, key, a, b) = shared.two_evm_instances(&t).await;
    let buyer = PrivateKeySigner::random();
    token.mint(&t, buyer.address(), 1_000_000).await;
    token.approve_permit2(&t, &buyer, U256::MAX).await;
    let seller = PrivateKeySigner::random().address();
    let chain_id = t.anvil.chain_id();
    let client = reqwest::Client::new();
    // Six settlements of `body` at once, alternating instances: their answers.
    let six_at_once = |body: Value| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let url = format!("{}/settle", if i % 2 == 0 { &a.base } else { &b.base });
                let (client, key, body) = (client.clone(), key.clone(), body.clone());
                tokio::spawn(async move { post(&client, url, &key, &body).await })
            })
            .collect();
        async move {
            let mut answers = Vec::new();
            for handle in handles {
                answers.push(handle.await.unwrap());
            }
            answers
        }
    };
    // Whatever each answered, the successes name one transaction.
    let one_transaction = |answers: &[(u16, Value)]| {
        let settled: BTreeSet<&str> = answers
            .iter()
            .filter(|(_, v)| v["success"] == json!(true))
            .map(|(_, v)| v["transaction"].as_str().unwrap())
            .collect();
        assert_eq!(settled.len(), 1, "{answers:?}");
        assert!(answers.iter().all(|(status, _)| *status == 200), "{answers:?}");
    };

    let exact = requirement(&t, "exact", token.address(), seller, 100_000);
    let permit = Permit::exact(token.address(), 100_000, seller).signed(&buyer, chain_id);
    one_transaction(&six_at_once(x402_v2(&exact, permit)).await);
    assert_eq!(token.balance(&t, seller).await, 100_000, "the exact permit moved its price once");

    let mut upto = requirement(&t, "upto", token.address(), seller, 50_000);
    upto["extra"]["facilitatorAddress"] = json!(signer.address().to_string());
    let permit = Permit::upto(token.address(), 50_000, seller, signer.address()).signed(&buyer, chain_id);
    let mut charged = upto.clone();
    charged["amount"] = json!("20000");
    let body = json!({"x402Version": 2, "paymentPayload": {"x402Version": 2, "accepted": upto,
        "payload": permit, "resource": {"url": "https://seller.example/complete", "description": "", "mimeType": ""}},
        "paymentRequirements": charged});
    let answers = six_at_once(body.clone()).await;
    one_transaction(&answers);
    assert!(answers.iter().filter(|(_, v)| v["success"] == json!(true)).all(|(_, v)| v["amount"] == "20000"));
    assert_eq!(token.balance(&t, seller).await, 120_000, "the upto permit moved its charge once");
    // The same permit settled again for more: refused, nothing moves.
    let mut again = body;
    again["paymentRequirements"]["amount"] = json!("50000");
    let (status, answer) = post(&client, format!("{}/settle", b.base), &key, &again).await;
    assert_eq!((status, answer["success"].as_bool()), (200, Some(false)), "{answer}");
    assert_eq!(token.balance(&t, seller).await, 120_000);
    assert_eq!(token.balance(&t, buyer.address()).await, 880_000);
    for daemon in [a, b] {
        assert!(daemon.terminate().success());
    }
    shared.pg.drop_schema().await;
}

/// The database fails to record a wallet's next nonce after each accepted broadcast (a fault
/// injected with a trigger): the sends still confirm, and each next lease starts from the node's
/// count, so no nonce is reused or skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_go_on_when_the_next_nonce_cannot_be_recorded() {
    let test = "sends_go_on_when_the_next_nonce_cannot_be_recorded";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    let (anvil, evm) = anvil().await;
    shared.evm_rpc_url = Some(anvil.endpoint());
    let (key, wallets) = shared.evm_customer(&evm, 1, ETH).await;
    let daemon = shared.daemon();
    let db = sqlx::AnyPool::connect(&shared.pg.url).await.unwrap();
    for statement in [
        "CREATE FUNCTION refuse_nonce() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'disk full (injected)'; END; \
         $$ LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_nonce BEFORE UPDATE ON evm_nonces FOR EACH ROW EXECUTE FUNCTION refuse_nonce()",
    ] {
        sqlx::query(statement).execute(&db).await.unwrap();
    }
    let client = reqwest::Client::new();
    let payee = PrivateKeySigner::random().address().to_string();
    let body = json!({"walletAddress": wallets[0], "recipientAddress": payee, "amount": 0.01});
    for _ in 0..4 {
        let (status, answer) = post(&client, format!("{}/payment/send", daemon.base), &key, &body).await;
        assert_eq!((status, answer["status"].as_str()), (200, Some("confirmed")), "{answer}");
    }
    let recorded = "SELECT count(*) AS n FROM evm_nonces WHERE next_nonce IS NOT NULL";
    let recorded: i64 = sqlx::Row::get(&sqlx::query(recorded).fetch_one(&db).await.unwrap(), "n");
    assert_eq!(recorded, 0, "nothing was recorded");
    assert_eq!(evm.mined_nonce(wallets[0].parse().unwrap()).await.unwrap(), 4, "nonces 0..4, each once");
    db.close().await;
    assert!(daemon.terminate().success());
    shared.pg.drop_schema().await;
}

/// Sends from more wallets at once than the instance has database connections: each holds its
/// wallet's nonce row on a connection of the lease pool while its payment is written through the
/// work pool, so none waits for a connection another holds (before: a pool deadlock, then 500s);
/// wallets beyond the lease pool's size wait their turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_from_many_wallets_at_once_do_not_exhaust_the_pool() {
    let test = "sends_from_many_wallets_at_once_do_not_exhaust_the_pool";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    let (anvil, evm) = anvil().await;
    shared.evm_rpc_url = Some(anvil.endpoint());
    let (key, wallets) = shared.evm_customer(&evm, 12, ETH).await;
    let daemon = shared.daemon(); // 5 connections for the work, 2 for leases
    let client = reqwest::Client::new();
    let payee = PrivateKeySigner::random().address().to_string();
    let sends: Vec<_> = wallets
        .iter()
        .map(|wallet| {
            let body = json!({"walletAddress": wallet, "recipientAddress": payee, "amount": 0.01});
            let (client, key, url) = (client.clone(), key.clone(), format!("{}/payment/send", daemon.base));
            tokio::spawn(async move { post(&client, url, &key, &body).await })
        })
        .collect();
    for send in sends {
        let (status, answer) = send.await.unwrap();
        assert_eq!((status, answer["status"].as_str()), (200, Some("confirmed")), "{answer}");
    }
    assert!(daemon.terminate().success());
    shared.pg.drop_schema().await;
}

/// Instance A broadcasts a payment and is killed while it waits for the chain (which never
/// answers it). Instance B, running all along, finds the payment in its periodic reconciliation
/// when it falls due (A's wait plus a margin) and records the chain's verdict: confirmed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_left_by_a_killed_instance_is_finished_by_another() {
    let test = "a_payment_left_by_a_killed_instance_is_finished_by_another";
    let Some(mut shared) = Shared::set_up(test, false).await else { return };
    let (anvil, evm) = anvil().await;
    // A reaches anvil through a proxy that never tells it how its transaction went.
    let proxy = RpcProxy::start(&anvil.endpoint()).await;
    // (A node that serves no sync sends: A learns nothing from its send either.)
    proxy.rule("eth_sendRawTransactionSync", Rule::Unknown);
    proxy.rule("eth_getTransactionReceipt", Rule::Lose);
    let key = shared.cli(&["keys", "create", "--plan", "premium"]);
    shared.evm_rpc_url = Some(proxy.url.clone());
    let a = shared.daemon();
    shared.evm_rpc_url = Some(anvil.endpoint());
    let b = shared.daemon();

    let buyer = PrivateKeySigner::random();
    set_balance(&evm, buyer.address(), ETH).await;
    let seller = PrivateKeySigner::random().address();
    let fees = evm.fees().await.unwrap();
    let transfer = Transfer {
        chain_id: evm.chain_id(),
        nonce: 0,
        to: seller,
        value: U256::from(ETH / 100),
        gas_limit: 21_000,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
    };
    let (raw, hash) = sign(transfer.tx(), &buyer).unwrap();
    let proof = tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": evm.network().to_string(),
        "payload": {"transaction": format!("0x{}", alloy::primitives::hex::encode(raw))}
    }))
    .unwrap();
    let body =
        json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 0.01, "timeout": 2});
    let client = reqwest::Client::new();
    let waiting = tokio::spawn({
        let (client, url, key) = (client.clone(), format!("{}/payment/receive", a.base), key.clone());
        async move { client.post(url).bearer_auth(key).json(&body).send().await }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.calls("eth_sendRawTransaction") == 0 || proxy.calls("eth_getTransactionReceipt") == 0 {
        assert!(Instant::now() < deadline, "A never broadcast");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill();
    assert!(waiting.await.unwrap().is_err(), "the buyer's request died with A");
    assert!(evm.receipt(hash).await.unwrap().is_some(), "the transfer landed");

    let seller_history = format!("{}/payment/history/{seller}", b.base);
    let deadline = Instant::now() + Duration::from_secs(60);
    let record = loop {
        let (status, page) = get(&client, seller_history.clone(), &key).await;
        assert_eq!(status, 200, "{page}");
        let payments = page["payments"].as_array().cloned().unwrap_or_default();
        assert!(payments.len() <= 1, "one payment: {page}");
        if let Some(p) = payments.first()
            && p["status"] == "confirmed"
        {
            break p.clone();
        }
        assert!(Instant::now() < deadline, "B did not finish A's payment: {page}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(record["transaction"].as_str(), Some(format!("{hash:#x}").as_str()), "{record}");
    assert!(b.terminate().success());
    shared.pg.drop_schema().await;
}

/// Two instances work through one webhook outbox: every change of six payments made through
/// either is delivered once — claimed by one instance, never sent by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_deliver_each_webhook_once() {
    let Some(shared) = Shared::set_up("two_instances_deliver_each_webhook_once", false).await else { return };
    // Loopback receivers are allowed here; a refused delivery would be retried after a second.
    let config = shared.dir.path().join("tollgate.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[webhooks]\nallow_private_targets = true\nrequire_https = false\nretry_base_secs = 1\n");
    std::fs::write(&config, text).unwrap();

    // The receiver records the event id of every delivery it gets.
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let record = record.clone();
            async move {
                let id = headers.get("tollgate-event-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                record.lock().unwrap().push(id);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let rpc = SolanaRpc::connect(shared.ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let key = shared.cli(&["keys", "create", "--plan", "premium"]);
    let daemons = [shared.daemon(), shared.daemon()];
    let client = reqwest::Client::new();
    let (status, endpoint) = post(&client, format!("{}/webhooks", daemons[0].base), &key, &json!({"url": hook})).await;
    assert_eq!(status, 201, "{endpoint}");

    let buyer = Keypair::new();
    let airdrop = rpc.request_airdrop(&buyer.pubkey(), 1_000_000_000).await.unwrap();
    rpc.wait_for_outcome(&airdrop, Duration::from_secs(30)).await.unwrap();
    let seller = Pubkey::new_unique();
    let mut payments = Vec::new();
    for i in 0..6 {
        let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
        let lamports = 10_000_000 + i;
        let proof = common::solana::signed_proof(&rpc.network().to_string(), &buyer, &seller, lamports, blockhash);
        let body = json!({"walletAddress": seller.to_string(), "paymentProof": proof, "expectedAmount": 0.01});
        let (status, paid) =
            post(&client, format!("{}/payment/receive", daemons[i as usize % 2].base), &key, &body).await;
        assert_eq!((status, paid["status"].as_str()), (200, Some("confirmed")), "{paid}");
        payments.push(paid["paymentId"].as_str().unwrap().to_owned());
    }
    let expected: BTreeSet<String> =
        payments.iter().flat_map(|p| ["verified", "submitted", "confirmed"].map(|s| format!("evt_{p}_{s}"))).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: BTreeSet<String> = received.lock().unwrap().iter().cloned().collect();
        if got == expected || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A moment more, for a second sending of any of them to show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = received.lock().unwrap().clone();
    let distinct: BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(distinct, expected, "every change delivered");
    assert_eq!(got.len(), expected.len(), "each once, whichever instance sent it: {got:?}");
    for daemon in daemons {
        assert!(daemon.terminate().success());
    }
}
