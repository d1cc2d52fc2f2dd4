//! The official x402 buyer (`@x402/fetch` + `@x402/evm` from npm, run by Node) pays a Tollgate
//! seller on a real anvil: x402 v2, an EIP-3009 token price, any ERC-20 through Permit2 (with or
//! without an allowance) and a metered `upto` route, through the gateway and through the x402
//! facilitator API. What it signs must match what the layer offered, to the last field. Tollgate's
//! own buyer pays the same Permit2 routes.
//!
//! `scripts/test` installs the packages into `.tools/x402/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::path::PathBuf;
use std::sync::Arc;

use alloy::node_bindings::{Anvil, AnvilInstance};
use alloy::primitives::U256;
use alloy::signers::local::PrivateKeySigner;
use axum::extract::Query;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{Value, json};
use tollgate::protocol::AtomicAmount;
use tollgate::{Charge, FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_client::{Buyer, Cap};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::Chains;
use tollgate_facilitator::chains::evm::EvmBackend;
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::devnet::{self, DevToken, TokenKind};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::wallets::MasterKey;
use tollgate_facilitator::{AppState, router};

const TOKEN_NAME: &str = "Tollgate USD";

/// Where `scripts/test` installs the official client's packages.
fn node_modules() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/x402/node_modules");
    assert!(
        path.join("@x402/fetch").exists() && path.join("@x402/evm").exists(),
        "the official x402 client is not installed in {}: run scripts/test (it installs it)",
        path.display()
    );
    path
}

/// Runs the official buyer against `url`, allowed to pay up to `cap` of `asset` on `network`
/// (whose JSON-RPC is `rpc`): its one-line JSON report.
async fn official_buyer(url: &str, key: &PrivateKeySigner, cap: (&str, &str, u64), rpc: &str) -> Value {
    official_buyer_with(url, key, cap, rpc, &[]).await
}

/// As [`official_buyer`], with more of the script's environment (`HANG_UP_AFTER_BYTES`).
async fn official_buyer_with(
    url: &str,
    key: &PrivateKeySigner,
    (network, asset, cap): (&str, &str, u64),
    rpc: &str,
    env: &[(&str, &str)],
) -> Value {
    let mut envs = vec![("RPC_URL", rpc)];
    envs.extend_from_slice(env);
    let cap = cap.to_string();
    run_node("x402-buyer.cjs", &[url, network, asset, &cap], key, &envs).await
}

/// Runs the official sign-in-with-x client (`@x402/extensions`) against `url` with `key`: its
/// one-line JSON report.
async fn official_sign_in(url: &str, key: &PrivateKeySigner) -> Value {
    run_node("siwx-client.cjs", &[url], key, &[]).await
}

/// Runs `tests/js/<script>` on Node with `args`, `key` as `BUYER_KEY` and `env`: the one JSON
/// line it prints.
async fn run_node(script: &str, args: &[&str], key: &PrivateKeySigner, env: &[(&str, &str)]) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js").join(script);
    let output = tokio::process::Command::new("node")
        .arg(path)
        .args(args)
        .envs(env.iter().copied())
        .env("NODE_PATH", node_modules())
        .env("BUYER_KEY", alloy::hex::encode_prefixed(key.to_bytes()))
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{script} failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap()
}

/// The official buyer buys a pass (an EIP-3009 price with a day pass), then the official
/// sign-in-with-x client signs the layer's challenge (EIP-4361) with the same key: Tollgate accepts
/// it, and serves the pass's payer without a payment; another key's sign-in is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sign_in_with_x_client_signs_in_with_a_pass() {
    assert!(
        node_modules().join("@x402/extensions").exists(),
        "the official x402 extensions are not installed: run scripts/test (it installs them)"
    );
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    let minter = PrivateKeySigner::random();
    devnet::set_evm_balance(&rpc, minter.address(), U256::from(10u128.pow(19))).await.unwrap();
    let token = DevToken::deploy(&rpc, minter, TokenKind::Eip3009, (TOKEN_NAME, "TUSD", 6)).await.unwrap();
    let buyer = PrivateKeySigner::random();
    token.mint(&rpc, buyer.address(), U256::from(10_000_000u64)).await.unwrap();
    let network = format!("eip155:{}", rpc.chain_id());
    let seller_address = PrivateKeySigner::random().address();
    let price = Price::token(token.address.to_string().parse().unwrap(), "1.5", 6)
        .unwrap()
        .extra(json!({"name": TOKEN_NAME, "version": "2"}))
        .pay_to(seller_address.to_string().parse().unwrap())
        .on(network.parse().unwrap())
        .pass(std::time::Duration::from_secs(86_400));
    // The seller's public origin is its own address here: the official client checks that the
    // challenge is bound to the site it asked.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&facilitator_url, &key))
        .accept(price)
        .sign_in_origin(&origin)
        .build()
        .unwrap();
    let handler = |Extension(payment): Extension<Payment>| async move {
        axum::Json(json!({"payer": payment.payer, "passUntil": payment.pass_until}))
    };
    let app = Router::new().route("/report", get(handler)).route_layer(layer);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("{origin}/report");

    let bought =
        official_buyer(&url, &buyer, (&network, &token.address.to_string(), 2_000_000), &anvil.endpoint()).await;
    assert_eq!(bought["status"], 200, "{bought}");
    let signed = official_sign_in(&url, &buyer).await;
    assert_eq!(signed["status"], 200, "{signed}");
    let body: Value = serde_json::from_str(signed["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["payer"].as_str().unwrap().to_lowercase(), buyer.address().to_string().to_lowercase());
    assert!(body["passUntil"].as_i64().is_some(), "{body}");
    let stranger = official_sign_in(&url, &PrivateKeySigner::random()).await;
    assert_eq!(stranger["status"], 402, "{stranger}");
    assert!(stranger["body"].as_str().unwrap().contains("holds no pass"), "{stranger}");
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(1_500_000u64), "paid once");
}

/// A seller selling `/report` for 1.5 tokens, through `facilitator`.
async fn seller(facilitator: FacilitatorClient, price: Price) -> String {
    let layer = PaymentLayer::builder().facilitator(facilitator).accept(price).description("A report").build().unwrap();
    let handler = |Extension(payment): Extension<Payment>| async move {
        axum::Json(json!({"report": 42, "payer": payment.payer, "amount": payment.amount.to_string()}))
    };
    let app = Router::new().route("/report", get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/report", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A seller of a metered `/complete?words=N`: N words of answer at `per_word` atomic units
/// each (a `Charge` the layer settles after serving), through `facilitator`.
async fn metered_seller(facilitator: FacilitatorClient, price: Price, per_word: u128) -> String {
    let layer = PaymentLayer::builder().facilitator(facilitator).accept(price).description("Words").build().unwrap();
    let handler = move |Query(q): Query<std::collections::HashMap<String, u64>>| async move {
        let words = q.get("words").copied().unwrap_or(0);
        let charge = Charge::per_unit(words, AtomicAmount(per_word));
        (Extension(charge), vec!["word"; usize::try_from(words).unwrap()].join(" "))
    };
    let app = Router::new().route("/complete", get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/complete", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A facilitator on a fresh anvil: the anvil, its RPC, the facilitator's URL, an API key, and
/// the folder of its database.
async fn facilitator() -> (AnvilInstance, EvmRpc, String, String, tempfile::TempDir) {
    node_modules(); // installed, or say how
    let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().expect("anvil starts");
    let rpc = EvmRpc::connect(&anvil.endpoint(), DEFAULT_CALL_TIMEOUT).await.unwrap();
    let eth = U256::from(10u128.pow(19));
    // The facilitator: its settling account, SQLite, an API key.
    let signer = PrivateKeySigner::random();
    devnet::set_evm_balance(&rpc, signer.address(), eth).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("f.db").to_str().unwrap()).unwrap(),
        ..Config::default()
    };
    let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let chains = Chains::none().with_evm(EvmBackend::new(rpc.clone()).with_signer(signer));
    let state = AppState::new(config, store.clone(), Arc::new(SystemClock))
        .with_chains(chains)
        .with_master_key(MasterKey::generate().unwrap());
    let new = NewKey { plan: Plan::Enterprise, rpm: Some(10_000), label: None, account: None, env: KeyEnv::Test };
    let key = admin::create_key(&*store, new, chrono::Utc::now()).await.unwrap().secret.expose().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    (anvil, rpc, facilitator_url, key, dir)
}

/// The official buyer pays a price of 1.5 of `token` (paid as `method` says) once through each
/// way the layer reaches the facilitator (at `url` with `key`, on the anvil at `rpc_url`),
/// settled before the handler: the gateway's one `/payment/receive`, and x402 `/verify` +
/// `/settle`. Each purchase is served with the payer and amount, and moves the price once.
async fn pays_once_in_each_mode(
    (rpc_url, url, key): (String, &str, &str),
    rpc: &EvmRpc,
    (token, buyer): (&DevToken, &PrivateKeySigner),
    method: impl Fn(Price) -> Price,
) {
    let network = format!("eip155:{}", rpc.chain_id());
    let seller_address = PrivateKeySigner::random().address();
    let price = method(
        Price::token(token.address.to_string().parse().unwrap(), "1.5", 6)
            .unwrap()
            .pay_to(seller_address.to_string().parse().unwrap())
            .on(network.parse().unwrap()),
    );
    let modes =
        [("gateway", FacilitatorClient::new(url, key)), ("x402", FacilitatorClient::x402(url).with_api_key(key))];
    for (n, (mode, facilitator)) in modes.into_iter().enumerate() {
        let shop = seller(facilitator, price.clone()).await;
        let report = official_buyer(&shop, buyer, (&network, &token.address.to_string(), 2_000_000), &rpc_url).await;
        assert_eq!(report["status"], 200, "{mode}: {report}");
        let body: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["report"], 42, "{mode}");
        assert_eq!(
            body["payer"].as_str().unwrap().to_lowercase(),
            buyer.address().to_string().to_lowercase(),
            "{mode}"
        );
        assert_eq!(body["amount"], "1500000", "{mode}");
        let receipt = &report["paymentResponse"];
        assert_eq!(
            (receipt["success"].as_bool(), receipt["network"].as_str()),
            (Some(true), Some(&*network)),
            "{mode}: {report}"
        );
        assert!(receipt["transaction"].as_str().unwrap().starts_with("0x"), "{mode}: {report}");
        // The money moved, once per purchase.
        let paid = u64::try_from(n + 1).unwrap() * 1_500_000;
        assert_eq!(token.balance_of(rpc, seller_address).await.unwrap(), U256::from(paid), "{mode}");
        assert_eq!(token.balance_of(rpc, buyer.address()).await.unwrap(), U256::from(10_000_000 - paid), "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_x402_client_pays_an_eip3009_price_on_anvil() {
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    let eth = U256::from(10u128.pow(19));

    // The token, a buyer holding 10 of it, a seller.
    let minter = PrivateKeySigner::random();
    devnet::set_evm_balance(&rpc, minter.address(), eth).await.unwrap();
    let token = DevToken::deploy(&rpc, minter, TokenKind::Eip3009, (TOKEN_NAME, "TUSD", 6)).await.unwrap();
    let buyer = PrivateKeySigner::random();
    token.mint(&rpc, buyer.address(), U256::from(10_000_000u64)).await.unwrap();
    let facilitator = (anvil.endpoint(), facilitator_url.as_str(), key.as_str());
    let by_eip3009 = |price: Price| price.extra(json!({"name": TOKEN_NAME, "version": "2"}));
    pays_once_in_each_mode(facilitator, &rpc, (&token, &buyer), by_eip3009).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_x402_client_pays_a_plain_erc20_through_permit2_on_anvil() {
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    // A token without EIP-3009, a buyer holding 10 of it who approved Permit2 once.
    let (token, buyer) = permit2_buyer(&rpc, Holder::Approved).await;
    let facilitator = (anvil.endpoint(), facilitator_url.as_str(), key.as_str());
    pays_once_in_each_mode(facilitator, &rpc, (&token, &buyer), Price::permit2).await;
}

/// Who holds what, on a facilitator's anvil with Permit2 and the x402 proxies installed.
#[derive(Clone, Copy)]
enum Holder {
    /// A plain ERC-20; the buyer has ETH and approved Permit2 once.
    Approved,
    /// A plain ERC-20; the buyer has ETH and no Permit2 allowance.
    Unapproved,
    /// An EIP-2612 token named "Permit USD"; the buyer has no ETH and no Permit2 allowance.
    Gasless,
}

/// A token and a buyer holding 10 of it, as `holder` says.
async fn permit2_buyer(rpc: &EvmRpc, holder: Holder) -> (DevToken, PrivateKeySigner) {
    let eth = U256::from(10u128.pow(19));
    let deployer = PrivateKeySigner::random();
    devnet::set_evm_balance(rpc, deployer.address(), eth).await.unwrap();
    devnet::install_permit2(rpc, &deployer).await.unwrap();
    let (kind, name) = match holder {
        Holder::Gasless => (TokenKind::Eip2612, "Permit USD"),
        Holder::Approved | Holder::Unapproved => (TokenKind::Plain, "Plain USD"),
    };
    let token = DevToken::deploy(rpc, deployer, kind, (name, "PUSD", 6)).await.unwrap();
    let buyer = PrivateKeySigner::random();
    token.mint(rpc, buyer.address(), U256::from(10_000_000u64)).await.unwrap();
    if !matches!(holder, Holder::Gasless) {
        devnet::set_evm_balance(rpc, buyer.address(), eth).await.unwrap();
    }
    if matches!(holder, Holder::Approved) {
        let approve = tollgate_encoding::permit2::Erc20::approveCall {
            spender: tollgate_encoding::permit2::PERMIT2,
            value: U256::MAX,
        };
        let data = alloy::sol_types::SolCall::abi_encode(&approve);
        devnet::send_evm(rpc, &buyer, alloy::primitives::TxKind::Call(token.address), data).await.unwrap();
    }
    (token, buyer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_x402_client_pays_a_metered_upto_route_what_it_used_on_anvil() {
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    let (token, buyer) = permit2_buyer(&rpc, Holder::Approved).await;
    let seller_address = PrivateKeySigner::random().address();
    let network = format!("eip155:{}", anvil.chain_id());
    // At most 2 tokens a request; 0.05 a word.
    let price = Price::upto(token.address.to_string().parse().unwrap(), "2", 6)
        .unwrap()
        .pay_to(seller_address.to_string().parse().unwrap())
        .on(network.parse().unwrap());
    // Through the gateway's client and a plain x402 client, both settling after the handler.
    let modes = [
        ("gateway", FacilitatorClient::new(&facilitator_url, &key)),
        ("x402", FacilitatorClient::x402(&facilitator_url).with_api_key(&key)),
    ];
    let mut paid = 0u64;
    for (mode, facilitator) in modes {
        let url = metered_seller(facilitator, price.clone(), 50_000).await;
        let report = official_buyer(
            &format!("{url}?words=7"),
            &buyer,
            (&network, &token.address.to_string(), 2_000_000),
            &anvil.endpoint(),
        )
        .await;
        assert_eq!(report["status"], 200, "{mode}: {report}");
        assert_eq!(report["body"], "word word word word word word word", "{mode}");
        let receipt = &report["paymentResponse"];
        assert_eq!(
            (receipt["success"].as_bool(), receipt["amount"].as_str()),
            (Some(true), Some("350000")),
            "{mode}: {report}"
        );
        assert!(receipt["transaction"].as_str().unwrap().starts_with("0x"), "{mode}: {report}");
        // 7 words at 0.05: 0.35 moved, not the 2 authorized, once.
        paid += 350_000;
        assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid), "{mode}");
        assert_eq!(token.balance_of(&rpc, buyer.address()).await.unwrap(), U256::from(10_000_000 - paid), "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_x402_client_without_an_allowance_pays_by_eip2612_or_its_signed_approval() {
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    let network = format!("eip155:{}", anvil.chain_id());
    // An EIP-2612 token, a buyer with no ETH: its permit rides in the settlement (gasless). A
    // plain token, a buyer with ETH: its signed approval is broadcast first (erc20ApprovalGasSponsoring).
    for holder in [Holder::Gasless, Holder::Unapproved] {
        let (token, buyer) = permit2_buyer(&rpc, holder).await;
        let eth_before = rpc.balance(buyer.address()).await.unwrap();
        let seller_address = PrivateKeySigner::random().address();
        let mut price = Price::token(token.address.to_string().parse().unwrap(), "1.5", 6)
            .unwrap()
            .pay_to(seller_address.to_string().parse().unwrap())
            .on(network.parse().unwrap())
            .permit2();
        if matches!(holder, Holder::Gasless) {
            price = price.extra(json!({"name": "Permit USD", "version": "1"}));
        }
        let url = seller(FacilitatorClient::x402(&facilitator_url).with_api_key(&key), price).await;
        let report =
            official_buyer(&url, &buyer, (&network, &token.address.to_string(), 2_000_000), &anvil.endpoint()).await;
        assert_eq!(report["status"], 200, "{report}");
        assert_eq!(report["paymentResponse"]["success"].as_bool(), Some(true), "{report}");
        assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(1_500_000u64));
        assert_eq!(token.balance_of(&rpc, buyer.address()).await.unwrap(), U256::from(8_500_000u64));
        let allowance = tollgate_encoding::permit2::Erc20::allowanceCall {
            owner: buyer.address(),
            spender: tollgate_encoding::permit2::PERMIT2,
        };
        let granted = tollgate_facilitator::chains::evm::erc20::view(&rpc, token.address, &allowance).await.unwrap();
        let eth_after = rpc.balance(buyer.address()).await.unwrap();
        match holder {
            // The permit granted exactly what it moved, and the buyer paid no gas.
            Holder::Gasless => assert_eq!((granted, eth_after), (U256::ZERO, U256::ZERO)),
            // Its approval was sent, at its own gas.
            _ => assert!(granted == U256::MAX && eth_after < eth_before, "{granted} {eth_after}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tollgate_client_pays_permit2_exact_and_upto_approving_permit2_once() {
    let (anvil, rpc, facilitator_url, key, _dir) = facilitator().await;
    // A plain ERC-20 (no EIP-2612): the buyer must approve Permit2 itself, once, paying the gas.
    let (token, signer) = permit2_buyer(&rpc, Holder::Unapproved).await;
    let seller_address = PrivateKeySigner::random().address();
    let network = format!("eip155:{}", anvil.chain_id());
    let asset: tollgate::protocol::Address = token.address.to_string().parse().unwrap();
    let pay_to: tollgate::protocol::Address = seller_address.to_string().parse().unwrap();
    let facilitator = FacilitatorClient::x402(&facilitator_url).with_api_key(&key);
    let exact = Price::token(asset, "1.5", 6).unwrap().pay_to(pay_to).on(network.parse().unwrap()).permit2();
    let exact_url = seller(facilitator.clone(), exact).await;
    let upto = Price::upto(asset, "2", 6).unwrap().pay_to(pay_to).on(network.parse().unwrap());
    let upto_url = metered_seller(facilitator, upto, 50_000).await;
    let buyer = Buyer::new()
        .with_evm(signer.clone(), &anvil.endpoint())
        .unwrap()
        .with_cap(Cap::parse(&format!("2@{}", token.address)).unwrap());

    let paid = buyer.get(&exact_url).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert!(made.approval.is_some(), "no allowance: Permit2 approved first");
    assert_eq!((made.amount, made.authorized), (AtomicAmount(1_500_000), None));
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(1_500_000u64));

    // Metered: 4 words at 0.05 of the 2 authorized; no second approval.
    let paid = buyer.get(&format!("{upto_url}?words=4")).await.unwrap();
    assert_eq!((paid.status, paid.body_text()), (200, "word word word word".to_owned()));
    let made = paid.payment.unwrap();
    assert_eq!(made.approval, None, "approved once");
    assert_eq!((made.amount, made.authorized), (AtomicAmount(200_000), Some(AtomicAmount(2_000_000))));
    assert_eq!(made.whole.to_string(), "0.2");
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(1_700_000u64));
    assert_eq!(token.balance_of(&rpc, signer.address()).await.unwrap(), U256::from(8_300_000u64));

    // A cap below the most a metered route may charge: not paid, whatever it would use.
    let frugal = Buyer::new()
        .with_evm(signer, &anvil.endpoint())
        .unwrap()
        .with_cap(Cap::parse(&format!("1@{}", token.address)).unwrap());
    let refused = frugal.get(&format!("{upto_url}?words=1")).await.unwrap_err();
    assert!(matches!(refused, tollgate_client::PayError::OverCap { .. }), "{refused}");
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(1_700_000u64));
}

/// The Python service of `proxy/examples/upstream.py`, running: its URL, and the process.
async fn python_upstream() -> (String, tokio::process::Child) {
    use tokio::io::AsyncBufReadExt as _;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proxy/examples/upstream.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .args(["--port", "0"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    (line.strip_prefix("listening on ").unwrap().to_owned(), child)
}

/// A metered route sold by `tollgate-proxy` (in process) in front of the Python service, which
/// reports the words it wrote in `X-Usage-Words`: the official buyer and Tollgate's pay what
/// was used; a usage past the most is capped; a garbled one is not settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_x402_client_pays_a_metered_route_sold_by_tollgate_proxy() {
    let (anvil, rpc, facilitator_url, key, dir) = facilitator().await;
    let (token, buyer) = permit2_buyer(&rpc, Holder::Approved).await;
    let seller_address = PrivateKeySigner::random().address();
    let network = format!("eip155:{}", anvil.chain_id());
    let (upstream, _python) = python_upstream().await;
    let key_file = dir.path().join("facilitator.key");
    std::fs::write(&key_file, &key).unwrap();
    let metered = |name: &str, path: &str| {
        let reported = if path.starts_with("/stream") { "trailer" } else { "header" };
        format!(
            r#"
[[route]]
name = "{name}"
path = "{path}"
usage = {{ {reported} = "X-Usage-Words", unit_price = "0.05" }}
[[route.accept]]
asset = "{token}"
max = "2"
decimals = 6
network = "{network}"
pay_to = "{seller_address}"
"#,
            token = token.address
        )
    };
    let text = format!(
        "listen = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n[facilitator]\nurl = \"{facilitator_url}\"\napi_key_file = \"{}\"\n{}{}{}",
        key_file.display(),
        metered("summary", "/summary"),
        metered("huge", "/huge-usage"),
        metered("bad", "/bad-usage"),
    ) + &metered("streamed", "/stream-summary")
        + &format!(
            "\n[[route]]\nname = \"forecast\"\npath = \"/forecast\"\n[[route.accept]]\nasset = \"{}\"\namount = \"1.5\"\ndecimals = 6\nnetwork = \"{network}\"\npay_to = \"{seller_address}\"\ntransfer = \"permit2\"\n",
            token.address
        );
    let proxy = Arc::new(tollgate_proxy::Proxy::new(&tollgate_proxy::ProxyFile::parse(&text).unwrap(), None).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let drain = std::time::Duration::from_secs(1);
    tokio::spawn(tollgate_proxy::server::serve(listener, proxy, std::future::pending(), drain));

    // 7 words at 0.05: 0.35 moved, not the 2 authorized; the usage header does not reach the buyer.
    let cap = (network.as_str(), token.address.to_string(), 2_000_000);
    let report =
        official_buyer(&format!("{url}/summary?words=7"), &buyer, (cap.0, &cap.1, cap.2), &anvil.endpoint()).await;
    assert_eq!(report["status"], 200, "{report}");
    let body: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["summary"].as_str().unwrap().split(' ').count(), 7);
    assert_eq!(report["paymentResponse"]["amount"], "350000", "{report}");
    let mut paid = 350_000u64;
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid));

    // A fixed price through Permit2 (`exact`), paid by the official buyer through the proxy.
    let report =
        official_buyer(&format!("{url}/forecast?city=Oslo"), &buyer, (cap.0, &cap.1, cap.2), &anvil.endpoint()).await;
    assert_eq!(report["status"], 200, "{report}");
    let body: Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["city"], "Oslo");
    assert_eq!(report["paymentResponse"]["success"], true, "{report}");
    paid += 1_500_000;
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid));

    // Tollgate's buyer: 3 words; then a service claiming more than the most is capped at it.
    let tollgate_buyer = Buyer::new()
        .with_evm(buyer.clone(), &anvil.endpoint())
        .unwrap()
        .with_cap(Cap::parse(&format!("2@{}", token.address)).unwrap());
    let three = tollgate_buyer.get(&format!("{url}/summary?words=3")).await.unwrap();
    assert_eq!(three.payment.as_ref().unwrap().amount, AtomicAmount(150_000));
    paid += 150_000;
    let huge = tollgate_buyer.get(&format!("{url}/huge-usage")).await.unwrap();
    assert_eq!(huge.payment.as_ref().unwrap().amount, AtomicAmount(2_000_000), "capped at the most");
    paid += 2_000_000;
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid));

    // Streamed, its usage in a trailer at the end: 4 words settled once it has ended.
    let streamed = tollgate_buyer.get(&format!("{url}/stream-summary?words=4")).await.unwrap();
    assert_eq!(streamed.body_text(), "the quick brown fox ");
    // (The answer ends after its settlement: the buyer has read it whole, so it is settled.)
    paid += 200_000;
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid), "4 words at 0.05");

    // The official buyer hangs up after the first words of a streamed answer: the proxy reads
    // the rest from the service, and the 20 words it reported are settled, once (the balances
    // below would show a second settlement).
    let report = official_buyer_with(
        &format!("{url}/stream-summary?words=20&ms=25"),
        &buyer,
        (cap.0, &cap.1, cap.2),
        &anvil.endpoint(),
        &[("HANG_UP_AFTER_BYTES", "1")],
    )
    .await;
    assert_eq!((report["status"].as_u64(), report["hungUp"].as_bool()), (Some(200), Some(true)), "{report}");
    let received = report["body"].as_str().unwrap();
    assert!(received.split_whitespace().count() < 20, "hung up before the end: {received:?}");
    paid += 1_000_000;
    let mut settled = U256::ZERO;
    for _ in 0..200 {
        settled = token.balance_of(&rpc, seller_address).await.unwrap();
        if settled == U256::from(paid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(settled, U256::from(paid), "20 words at 0.05, settled after the buyer left");

    // A usage that cannot be read: the buyer is told, nothing is settled.
    let refused = tollgate_buyer.get(&format!("{url}/bad-usage")).await.unwrap_err();
    assert!(
        matches!(&refused, tollgate_client::PayError::Refused { status: 502, reason } if reason.contains("usage")),
        "{refused:?}"
    );
    assert_eq!(token.balance_of(&rpc, seller_address).await.unwrap(), U256::from(paid));
    assert_eq!(token.balance_of(&rpc, buyer.address()).await.unwrap(), U256::from(10_000_000 - paid));
}

/// The demo on a fresh anvil (its batch-settlement contracts and EIP-3009 token), its EVM buyer's
/// key and seller, and the official client's packages checked.
struct TokenDemo {
    _anvil: AnvilInstance,
    _dir: tempfile::TempDir,
    demo: tollgate_demo::Demo,
    evm: tollgate_demo::EvmDemo,
    rpc: EvmRpc,
    key: PrivateKeySigner,
    seller: alloy::primitives::Address,
}

async fn token_demo() -> TokenDemo {
    node_modules();
    let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options =
        tollgate_demo::Options { evm_rpc_url: Some(anvil.endpoint()), ..tollgate_demo::Options::new(dir.path()) };
    let demo = tollgate_demo::start(&options).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let rpc = EvmRpc::connect(&evm.rpc_url, DEFAULT_CALL_TIMEOUT).await.unwrap();
    let key: PrivateKeySigner = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let seller = evm.seller.parse().unwrap();
    TokenDemo { _anvil: anvil, _dir: dir, demo, evm, rpc, key, seller }
}

/// The JSON answer of a `POST` of `body` to `url`.
async fn post_json(url: &str, body: &Value) -> Value {
    reqwest::Client::new().post(url).json(body).send().await.unwrap().json().await.unwrap()
}

/// `who`'s balance of `token`.
async fn balance_of(rpc: &EvmRpc, token: alloy::primitives::Address, who: alloy::primitives::Address) -> U256 {
    tollgate_facilitator::chains::evm::erc20::balance_of(rpc, token, who).await.unwrap()
}

/// The demo's per-call route (`/ticker`, x402 batch-settlement): the official batch-settlement
/// client pays it 20 times in a row with one deposit (one transaction: every other call is a
/// signed voucher checked by the layer), each answer saying what it charged; then its cooperative
/// refund claims exactly the sum of the charges and returns the rest in one transaction, and the
/// claimed charges are swept to the seller.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_batch_client_pays_the_demo_ticker_twenty_times_with_one_deposit() {
    let TokenDemo { _anvil, _dir, demo, evm, rpc, key, seller, .. } = token_demo().await;
    let network = format!("eip155:{}", evm.chain_id);
    let balance = |who| balance_of(&rpc, evm.token.parse().unwrap(), who);
    let buyer_before = balance(key.address()).await;
    let block_before = rpc.block_number().await.unwrap();

    let url = format!("{}/ticker", demo.shop_url);
    let envs = [("RPC_URL", evm.rpc_url.as_str())];
    let report = run_node("batch-buyer.cjs", &[&url, &network, &evm.token, "10000", "20"], &key, &envs).await;
    let statuses: Vec<u64> = report["statuses"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(statuses, vec![200; 20], "{report}");
    let blocks = rpc.block_number().await.unwrap() - block_before;
    assert!(blocks <= 2, "20 paid calls took {blocks} transactions: {report}");
    let mut sent = Vec::new();
    for n in block_before + 1..=block_before + blocks {
        let block = post_json(
            &evm.rpc_url,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": [format!("{n:#x}"), true]}),
        )
        .await;
        for tx in block["result"]["transactions"].as_array().unwrap() {
            sent.push(format!(
                "{} {}",
                tx["to"],
                &tx["input"].as_str().unwrap_or_default()[..10.min(tx["input"].as_str().unwrap_or_default().len())]
            ));
        }
    }
    let deposits: Vec<usize> = report["paymentResponses"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, r)| r["transaction"].as_str().is_some_and(|t| !t.is_empty()))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(sent.len(), 1, "one deposit: {sent:?} at {deposits:?}; {}", report["paymentResponses"][0]);
    for (i, receipt) in report["paymentResponses"].as_array().unwrap().iter().enumerate() {
        assert_eq!(receipt["success"], true, "{receipt}");
        assert_eq!(receipt["extra"]["chargedAmount"], "100", "{receipt}");
        let cumulative = ((i + 1) * 100).to_string();
        assert_eq!(receipt["extra"]["channelState"]["chargedCumulativeAmount"], cumulative.as_str(), "{receipt}");
    }
    let deposit = report["paymentResponses"][0]["transaction"].as_str().unwrap();
    assert!(deposit.starts_with("0x"), "the first call deposits: {report}");
    // The deposit (the announced minimum, 0.01) is escrowed; nothing has reached the seller yet.
    assert_eq!(buyer_before - balance(key.address()).await, U256::from(10_000));
    assert_eq!(balance(seller).await, U256::ZERO);

    // A new client (no state: it recovers the channel from the chain) asks for its refund.
    let report = run_node("batch-buyer.cjs", &[&url, &network, &evm.token, "10000", "0", "refund"], &key, &envs).await;
    assert_eq!(report["refund"]["success"], true, "{report}");
    // ... a client that recovered from the chain counts what was claimed there (nothing yet), so
    // the layer's corrective answer tells it what was charged, and the refund claims it.
    assert_eq!(buyer_before - balance(key.address()).await, U256::from(2_000), "the buyer paid 20 × 100: {report}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while balance(seller).await != U256::from(2_000) {
        assert!(std::time::Instant::now() < deadline, "the claimed charges are never swept to the seller");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let escrow = balance(tollgate_encoding::batch::BATCH_SETTLEMENT).await;
    assert_eq!(escrow, U256::ZERO, "nothing is left in the escrow");
}

/// A Tollgate seller (the layer, on the demo's facilitator) selling `/tick` at 100 base units
/// from channels, claiming at once when 50 calls are charged: the official batch-settlement
/// client pays it 50 times with one transaction (its deposit); the seller's claim and sweep then
/// move exactly the 50 charges to the seller (two transactions more); the client's cooperative
/// refund returns exactly the rest of its deposit, and the escrow is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_batch_client_pays_fifty_times_then_the_seller_claims_exactly_the_charges() {
    let TokenDemo { _anvil, _dir, demo, evm, rpc, key, seller } = token_demo().await;
    let network = format!("eip155:{}", evm.chain_id);
    let token: alloy::primitives::Address = evm.token.parse().unwrap();
    let balance = |who| balance_of(&rpc, token, who);
    let price = Price::batch(evm.token.parse().unwrap(), "0.0001", tollgate_demo::DEMO_TOKEN_DECIMALS)
        .unwrap()
        .pay_to(evm.seller.parse().unwrap())
        .on(network.parse().unwrap())
        .extra(json!({"name": tollgate_demo::DEMO_TOKEN_NAME, "version": "2", "minDeposit": "10000"}));
    let api_key = std::fs::read_to_string(&demo.seller_api_key_file).unwrap();
    let policy = tollgate::batch::ClaimPolicy { threshold: Some(AtomicAmount(5_000)), ..Default::default() };
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(&demo.facilitator_url, api_key.trim()))
        .accept(price)
        .channels(tollgate::batch::MemoryChannels::new())
        .claim_policy(policy)
        .build()
        .unwrap();
    let app = Router::new().route("/tick", get(|| async { "{\"tick\":1}" })).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/tick", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (buyer_before, seller_before) = (balance(key.address()).await, balance(seller).await);
    let block_before = rpc.block_number().await.unwrap();

    let envs = [("RPC_URL", evm.rpc_url.as_str())];
    let report = run_node("batch-buyer.cjs", &[&url, &network, &evm.token, "10000", "50"], &key, &envs).await;
    let statuses: Vec<u64> = report["statuses"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(statuses, vec![200; 50], "{report}");
    let responses = report["paymentResponses"].as_array().unwrap();
    let with_transaction = responses.iter().filter(|r| r["transaction"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(with_transaction.count(), 1, "the deposit alone went on chain: {report}");
    assert_eq!(responses[49]["extra"]["channelState"]["chargedCumulativeAmount"], "5000", "{report}");

    // The 50th charge reached the threshold: the seller claims and sweeps, exactly the charges.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while balance(seller).await == seller_before {
        assert!(std::time::Instant::now() < deadline, "the seller never claimed");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(balance(seller).await - seller_before, U256::from(5_000));
    let blocks = rpc.block_number().await.unwrap() - block_before;
    assert_eq!(blocks, 3, "a deposit, a claim and a sweep");
    assert_eq!(buyer_before - balance(key.address()).await, U256::from(10_000), "the deposit is still escrowed");

    // The cooperative refund returns exactly what was not charged.
    let report = run_node("batch-buyer.cjs", &[&url, &network, &evm.token, "10000", "0", "refund"], &key, &envs).await;
    assert_eq!(report["refund"]["success"], true, "{report}");
    assert_eq!(buyer_before - balance(key.address()).await, U256::from(5_000), "the buyer paid 50 × 100: {report}");
    assert_eq!(balance(seller).await - seller_before, U256::from(5_000));
    assert_eq!(balance(tollgate_encoding::batch::BATCH_SETTLEMENT).await, U256::ZERO, "nothing is left in escrow");
}

/// The official batch-settlement server (`@x402/core`'s HTTP resource server with `@x402/evm`'s
/// batch-settlement server scheme, on Node) sells `/tick` through Tollgate's facilitator, which it
/// reaches over HTTP with the demo seller's key; Tollgate's own buyer pays it: one deposit, then a
/// voucher a call and no transaction; the official channel manager claims and sweeps exactly the
/// charges through the facilitator (its requirement names no channel terms: the claim's channel
/// does), and the buyer's cooperative refund through the official server returns the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tollgates_buyer_pays_the_official_batch_server_selling_through_tollgates_facilitator() {
    use tokio::io::AsyncBufReadExt as _;
    let TokenDemo { _anvil, _dir, demo, evm, rpc, key, seller, .. } = token_demo().await;
    let balance = |who| balance_of(&rpc, evm.token.parse().unwrap(), who);

    let network = format!("eip155:{}", evm.chain_id);
    let mut server = tokio::process::Command::new("node")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js/batch-seller.cjs"))
        .env("NODE_PATH", node_modules())
        .envs([
            ("FACILITATOR_URL", demo.facilitator_url.as_str()),
            ("API_KEY", demo.seller_api_key.as_str()),
            ("NETWORK", network.as_str()),
            ("TOKEN", evm.token.as_str()),
            ("TOKEN_NAME", TOKEN_NAME),
            ("TOKEN_VERSION", "2"),
            ("PAY_TO", evm.seller.as_str()),
            ("PRICE", "100"),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next_line().await.unwrap().expect("the server says where")).unwrap();
    let url = format!("{}/tick", ready["url"].as_str().unwrap());

    let buyer = Buyer::new()
        .with_evm(key.clone(), &evm.rpc_url)
        .unwrap()
        .with_cap(Cap::parse(&format!("0.0001@{}", evm.token)).unwrap());
    let before = balance(key.address()).await;
    let mut quiet = None;
    for call in 1..=5 {
        let paid = buyer.get(&url).await.unwrap();
        assert_eq!(paid.status, 200, "{}", paid.body_text());
        let body: Value = serde_json::from_slice(&paid.body).unwrap();
        assert_eq!(body["tick"], call);
        let made = paid.payment.unwrap();
        assert_eq!((made.amount.get(), made.transaction.is_some()), (100, call == 1), "{made:?}");
        let receipt = paid.settlement.unwrap_or_else(|| panic!("call {call}: no settlement in {:?}", paid.headers));
        assert_eq!(
            receipt.extra.as_ref().unwrap()["channelState"]["chargedCumulativeAmount"],
            (call * 100).to_string()
        );
        if call == 1 {
            quiet = Some(rpc.block_number().await.unwrap());
        }
    }
    assert_eq!(rpc.block_number().await.unwrap(), quiet.unwrap(), "calls 2 to 5: vouchers, no transaction");
    let deposited = before - balance(key.address()).await;
    assert!(deposited >= U256::from(500), "the first call deposited {deposited}");

    // The official channel manager claims and sweeps through Tollgate's facilitator.
    let claimed = post_json(&format!("{}/claim", ready["url"].as_str().unwrap()), &json!({})).await;
    assert_eq!(claimed["claims"][0]["vouchers"], 1, "{claimed}");
    assert!(claimed["settle"]["transaction"].as_str().is_some_and(|t| t.starts_with("0x")), "{claimed}");
    assert_eq!(balance(seller).await, U256::from(500), "exactly the five charges reached the seller");

    // The rest comes back through the official server's refund.
    let refunded = buyer.refund(&url, None).await.unwrap();
    assert_eq!(U256::from(refunded.amount.get()), deposited - U256::from(500));
    assert_eq!(before - balance(key.address()).await, U256::from(500), "the buyer paid its five calls, no more");
    server.kill().await.unwrap();
}

/// An official seller (`@x402/core`'s HTTP resource server with `@x402/extensions`' bazaar server
/// extension, on Node) declares `/weather` and settles through Tollgate's facilitator; the
/// official buyer pays it; the official discovery client (`withBazaar`) then lists and searches
/// Tollgate's catalog and finds the route as its seller declared it: its URL without the query,
/// its service metadata, the way it was paid, and the declaration.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_official_sellers_declaration_is_cataloged_and_the_official_discovery_client_finds_it() {
    use tokio::io::AsyncBufReadExt as _;
    let TokenDemo { _anvil, _dir, demo, evm, key, .. } = token_demo().await;
    let network = format!("eip155:{}", evm.chain_id);
    let mut server = tokio::process::Command::new("node")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("js/bazaar-seller.cjs"))
        .env("NODE_PATH", node_modules())
        .envs([
            ("FACILITATOR_URL", demo.facilitator_url.as_str()),
            ("API_KEY", demo.seller_api_key.as_str()),
            ("NETWORK", network.as_str()),
            ("TOKEN", evm.token.as_str()),
            ("TOKEN_NAME", TOKEN_NAME),
            ("TOKEN_VERSION", "2"),
            ("PAY_TO", evm.seller.as_str()),
            ("PRICE", "10000"),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let ready: Value = serde_json::from_str(&lines.next_line().await.unwrap().expect("the server says where")).unwrap();
    let origin = ready["url"].as_str().unwrap().to_owned();

    let paid =
        official_buyer(&format!("{origin}/weather?city=Porto"), &key, (&network, &evm.token, 20_000), &evm.rpc_url)
            .await;
    assert_eq!(paid["status"], 200, "{paid}");

    // The catalog is written in the background of the settlement: asked until it is there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let found = loop {
        let found = run_node("bazaar-client.cjs", &[&demo.facilitator_url, "official weather"], &key, &[]).await;
        if found["search"]["resources"].as_array().is_some_and(|r| !r.is_empty())
            || std::time::Instant::now() > deadline
        {
            break found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let [entry] = found["search"]["resources"].as_array().unwrap().as_slice() else { panic!("{found}") };
    assert_eq!(entry["resource"], format!("{origin}/weather"), "{entry}");
    assert_eq!(entry["type"], "http");
    assert_eq!(entry["serviceName"], "Official Weather");
    assert_eq!(entry["tags"], json!(["weather", "official"]));
    assert_eq!(entry["accepts"][0]["amount"], "10000");
    assert_eq!(entry["accepts"][0]["payTo"].as_str().unwrap().to_lowercase(), evm.seller.to_lowercase());
    let declared = &entry["extensions"]["bazaar"]["info"];
    assert_eq!(declared["input"]["queryParams"], json!({"city": "Lisbon"}), "{entry}");
    assert_eq!(declared["output"]["example"], json!({"city": "Lisbon", "celsius": 18}));
    let listed = found["list"]["items"].as_array().unwrap();
    assert!(listed.iter().any(|item| item["resource"] == entry["resource"]), "{found}");
    assert!(found["list"]["pagination"]["total"].as_u64().unwrap() >= 1, "{found}");
}
