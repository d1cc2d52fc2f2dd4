//! The buyer's payment channels (x402 `batch-settlement`) against the demo's `/ticker` on a real
//! anvil with the settlement contracts: one deposit pays ten calls and the next calls cost a
//! signature each (no transaction); the count survives a restart in the budget file and is
//! recovered from the seller's corrective 402 when lost; what is left comes back by a
//! cooperative refund. And what a seller that breaks the client rules gets: a charge above the
//! price, a running total that is not the buyer's, a count backed by someone else's voucher —
//! the buyer stops signing, or refuses, and never counts more than it signed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::process::{Command, Output};
use std::sync::Arc;

use alloy::providers::{Provider as _, RootProvider};
use alloy::sol_types::SolCall as _;
use tollgate_client::{Budget, Buyer, Cap, PayError, PaymentMiddleware, PrivateKeySigner};

struct Shop {
    _anvil: alloy::node_bindings::AnvilInstance,
    dir: tempfile::TempDir,
    demo: tollgate_demo::Demo,
    evm: tollgate_demo::EvmDemo,
    key: PrivateKeySigner,
    chain: RootProvider,
}

async fn shop() -> Shop {
    // The in-process demo's warnings (a refused claim, a sweep put off), printed with a failed test.
    let filter = std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter(filter).try_init();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let key: PrivateKeySigner = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let chain = RootProvider::new_http(evm.rpc_url.parse().unwrap());
    Shop { _anvil: anvil, dir, demo, evm, key, chain }
}

impl Shop {
    fn ticker(&self) -> String {
        format!("{}/ticker", self.demo.shop_url)
    }

    /// A buyer with the demo's EVM key, capped at the ticker's price, counting its channels in
    /// `budget` (in memory when `None`).
    fn buyer(&self, budget: Option<&str>) -> Buyer {
        let buyer = Buyer::new()
            .with_evm(self.key.clone(), &self.evm.rpc_url)
            .unwrap()
            .with_cap(Cap::parse(&format!("0.0001@{}", self.evm.token)).unwrap());
        match budget {
            Some(name) => buyer.with_budget(Budget::open(&self.dir.path().join(name), vec![]).unwrap()),
            None => buyer,
        }
    }

    /// `owner`'s balance of the demo token, atomic units.
    async fn tokens(&self, owner: &str) -> u128 {
        let call = tollgate_encoding::evm::Erc3009::balanceOfCall { owner: owner.parse().unwrap() };
        let request = alloy::rpc::types::TransactionRequest::default()
            .to(self.evm.token.parse().unwrap())
            .input(alloy::primitives::Bytes::from(call.abi_encode()).into());
        let answer = self.chain.call(request).await.unwrap();
        tollgate_encoding::evm::Erc3009::balanceOfCall::abi_decode_returns(&answer).unwrap().to()
    }

    async fn block(&self) -> u64 {
        self.chain.get_block_number().await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_deposit_pays_ten_calls_and_the_rest_comes_back_by_refund() {
    let shop = shop().await;
    let before = shop.tokens(&shop.evm.buyer).await;
    let buyer = shop.buyer(Some("budget.db"));

    let mut deposits = Vec::new();
    let mut quiet_from = 0;
    for call in 1..=15 {
        if call == 2 {
            quiet_from = shop.block().await;
        }
        if call == 11 {
            assert_eq!(shop.block().await, quiet_from, "calls 2 to 10 sent no transaction");
        }
        let paid = buyer.get(&shop.ticker()).await.unwrap();
        assert_eq!(paid.status, 200, "{}", paid.body_text());
        let made = paid.payment.unwrap();
        assert_eq!(made.amount.get(), 100, "0.0001 of a 6-decimal token");
        assert!(made.channel.is_some());
        if let Some(deposit) = made.transaction {
            deposits.push((call, deposit));
        }
    }
    // 0.001 deposited (the seller's minDeposit, ten times the cap), then topped up at call 11.
    assert_eq!(deposits.iter().map(|(call, _)| *call).collect::<Vec<_>>(), [1, 11], "{deposits:?}");
    assert_eq!(before - shop.tokens(&shop.evm.buyer).await, 2_000, "two deposits of 0.001 left the buyer");

    let channels = buyer.channels().await.unwrap();
    assert_eq!(channels.len(), 1);
    let channel = &channels[0];
    assert_eq!((channel.balance.get(), channel.charged.get(), channel.signed.get()), (2_000, 1_500, 1_500));
    assert_eq!((channel.unspent().get(), channel.halted.as_deref()), (500, None));

    // A restart: the count is in the budget file, and the next voucher follows it.
    let again = shop.buyer(Some("budget.db"));
    let block = shop.block().await;
    assert!(again.get(&shop.ticker()).await.unwrap().payment.unwrap().transaction.is_none());
    assert_eq!(shop.block().await, block, "a voucher, no transaction");

    // What is left (2,000 − 1,600) comes back; the seller's charges are claimed with it and swept
    // (in the background: the sweep may land before the refund's answer is read, so the seller's
    // balance is read before the refund).
    let seller_before = shop.tokens(&shop.evm.seller).await;
    let refunded = again.refund(&shop.ticker(), None).await.unwrap();
    assert_eq!(refunded.amount.get(), 400);
    assert!(refunded.transaction.is_some());
    assert_eq!(before - shop.tokens(&shop.evm.buyer).await, 1_600, "the buyer paid exactly its 16 calls");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while shop.tokens(&shop.evm.seller).await == seller_before {
        assert!(std::time::Instant::now() < deadline, "the claimed charges were never swept to the seller");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(shop.tokens(&shop.evm.seller).await - seller_before, 1_600);
    // Nothing left: a second refund is refused before anything is sent.
    assert!(matches!(again.refund(&shop.ticker(), None).await, Err(PayError::Channel(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_that_lost_its_count_takes_the_sellers_when_the_voucher_is_its_own() {
    let shop = shop().await;
    let first = shop.buyer(None);
    for _ in 0..3 {
        first.get(&shop.ticker()).await.unwrap();
    }
    // A new process with no record: the chain says nothing was claimed yet, so its first voucher
    // (100) is below the seller's count (300); the corrective 402 shows the buyer's own voucher
    // for 300, and the request is paid again at 400, once.
    let fresh = shop.buyer(None);
    let paid = fresh.get(&shop.ticker()).await.unwrap();
    assert_eq!(paid.status, 200);
    assert_eq!(paid.payment.unwrap().amount.get(), 100);
    let channel = &fresh.channels().await.unwrap()[0];
    assert_eq!((channel.charged.get(), channel.signed.get(), channel.balance.get()), (400, 400, 1_000));

    // Through a program's own reqwest client too.
    let http = PaymentMiddleware::client(Arc::new(shop.buyer(None)));
    let answer = http.get(shop.ticker()).send().await.unwrap();
    assert_eq!(answer.status(), 200);
}

/// Runs `tollgate-pay` with `args` and the demo buyer's key in its environment.
async fn pay(shop: &Shop, args: Vec<String>) -> Output {
    let key = std::fs::read_to_string(&shop.evm.buyer_key_file).unwrap().trim().to_owned();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tollgate-pay")).args(args).env("TOLLGATE_EVM_KEY", key).output().unwrap()
    })
    .await
    .unwrap()
}

/// The arguments after `--` of a printed command.
fn printed_args(command: &str) -> Vec<String> {
    command.split_once(" -- ").unwrap().1.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_printed_ticker_command_deposits_once_then_signs_and_refunds_by_the_cli() {
    let shop = shop().await;
    let command = shop.demo.channel_pay_command().unwrap();
    let args = printed_args(&command);
    let prefix =
        format!("paid 0.0001 of token {} on eip155:{} from payment channel 0x", shop.evm.token, shop.evm.chain_id);
    for run in 0..3 {
        let out = pay(&shop, args.clone()).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.starts_with(&prefix), "{stderr}");
        assert_eq!(stderr.contains("deposit transaction 0x"), run == 0, "{stderr}");
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(body["tick"]["pair"], "ETH/USD");
    }
    // The demo page lists the channel as the shop's layer keeps it.
    let page: serde_json::Value =
        reqwest::get(format!("{}/demo/channels", shop.demo.shop_url)).await.unwrap().json().await.unwrap();
    let listed = &page["channels"][0];
    assert_eq!((listed["deposited"].as_str(), listed["charged"].as_str()), (Some("0.01"), Some("0.0003")), "{page}");
    assert_eq!(listed["payer"].as_str().unwrap().to_lowercase(), shop.evm.buyer.to_lowercase());
    let budget = args[args.iter().position(|a| a == "--budget-file").unwrap() + 1].clone();
    let keys = vec!["--evm-rpc".to_owned(), shop.evm.rpc_url.clone(), "--budget-file".into(), budget];
    let list =
        pay(&shop, [vec!["channels".to_owned()], keys.clone(), vec!["--json".into(), "list".into()]].concat()).await;
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!((listed["charged"].as_str(), listed["unspent"].as_str()), (Some("300"), Some("9700")), "{listed}");

    let ticker = shop.ticker();
    let refund = pay(&shop, [vec!["channels".to_owned()], keys.clone(), vec!["refund".into(), ticker]].concat()).await;
    let stderr = String::from_utf8_lossy(&refund.stderr);
    assert!(refund.status.success(), "{stderr}");
    assert!(stderr.starts_with("refunded 9700 atomic units from channel 0x"), "{stderr}");

    // Without the budget file, `list` says where channels are kept (exit 2).
    let out = pay(&shop, vec!["channels".into(), "list".into()]).await;
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A seller that answers a channel payment as told: `respond` gets the payment header and gives
/// the status and headers of the answer.
async fn lying_seller(
    shop: &Shop,
    respond: impl Fn(&serde_json::Value) -> (u16, Vec<(&'static str, String)>) + Send + Sync + 'static,
) -> String {
    lying_seller_asking(shop, |required| required, respond).await
}

/// As [`lying_seller`], its payment request each time what `rewrite` makes of the demo's.
async fn lying_seller_asking(
    shop: &Shop,
    rewrite: impl Fn(serde_json::Value) -> serde_json::Value + Send + Sync + 'static,
    respond: impl Fn(&serde_json::Value) -> (u16, Vec<(&'static str, String)>) + Send + Sync + 'static,
) -> String {
    // The demo's own offer for /ticker: the buyer's channel with the demo's seller.
    let first = reqwest::get(shop.ticker()).await.unwrap();
    let required: serde_json::Value =
        tollgate_client::protocol::x402::header::decode(first.headers()["payment-required"].to_str().unwrap()).unwrap();
    let (respond, rewrite) = (Arc::new(respond), Arc::new(rewrite));
    let app = axum::Router::new().route(
        "/ticker",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let (required, respond, rewrite) = (required.clone(), respond.clone(), rewrite.clone());
            async move {
                let Some(payment) = headers.get("payment-signature") else {
                    let required = tollgate_client::protocol::x402::header::encode(&rewrite(required)).unwrap();
                    return axum::response::Response::builder()
                        .status(402)
                        .header("payment-required", required)
                        .body(axum::body::Body::from("{}"))
                        .unwrap();
                };
                let payload: serde_json::Value =
                    tollgate_client::protocol::x402::header::decode(payment.to_str().unwrap()).unwrap();
                let (status, headers) = respond(&payload);
                let mut answer = axum::response::Response::builder().status(status);
                for (name, value) in headers {
                    answer = answer.header(name, value);
                }
                answer.body(axum::body::Body::from("{\"tick\":1}")).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ticker", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A `PAYMENT-RESPONSE` header saying `extra`.
fn settled(extra: serde_json::Value) -> Vec<(&'static str, String)> {
    let response = serde_json::json!({"success": true, "transaction": "", "network": "eip155:31337", "extra": extra});
    vec![("payment-response", tollgate_client::protocol::x402::header::encode(&response).unwrap())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seller_that_breaks_the_client_rules_is_not_signed_for_again() {
    let shop = shop().await;
    // Charged twice the price: the buyer stops signing on that channel.
    let greedy = lying_seller(&shop, |_| (200, settled(serde_json::json!({"chargedAmount": "200"})))).await;
    let buyer = shop.buyer(None);
    let paid = buyer.get(&greedy).await.unwrap();
    assert_eq!(paid.payment.unwrap().amount.get(), 100, "counted at the price, never at the charge claimed");
    let channel = buyer.channels().await.unwrap().remove(0);
    assert!(channel.halted.as_deref().unwrap().contains("charged 200"), "{channel:?}");
    assert_eq!(channel.charged.get(), 100, "never more than signed");
    let block = shop.block().await;
    assert!(matches!(buyer.get(&greedy).await, Err(PayError::Channel(_))));
    assert!(matches!(buyer.get(&shop.ticker()).await, Err(PayError::Channel(_))), "the same channel, halted");
    assert_eq!(shop.block().await, block, "nothing signed, nothing sent");

    // A running total that is not the buyer's: stopped too.
    let miscounting = lying_seller(&shop, |_| {
        (200, settled(serde_json::json!({"chargedAmount": "100", "channelState": {"chargedCumulativeAmount": "900"}})))
    })
    .await;
    let buyer = shop.buyer(None);
    buyer.get(&miscounting).await.unwrap();
    let channel = buyer.channels().await.unwrap().remove(0);
    assert!(channel.halted.as_deref().unwrap().contains("900"), "{channel:?}");

    // A corrective 402 whose count is backed by a stranger's voucher: not taken, not paid again.
    let stranger = PrivateKeySigner::random();
    let chain_id = shop.evm.chain_id;
    let forging = lying_seller(&shop, move |payload| {
        let id: alloy::primitives::B256 = payload["payload"]["voucher"]["channelId"].as_str().unwrap().parse().unwrap();
        let digest = tollgate_encoding::batch::voucher_digest(chain_id, id, 5_000);
        let signature = alloy::signers::SignerSync::sign_hash_sync(&stranger, &digest).unwrap();
        let mut accepted = payload["accepted"].clone();
        accepted["extra"]["channelState"] = serde_json::json!({"chargedCumulativeAmount": "5000"});
        accepted["extra"]["voucherState"] = serde_json::json!({"signedMaxClaimable": "5000",
            "signature": format!("0x{}", alloy::hex::encode(signature.as_bytes()))});
        let required = serde_json::json!({"x402Version": 2, "error": tollgate_client::protocol::x402::batch::reason::CUMULATIVE_MISMATCH,
            "resource": payload["resource"], "accepts": [accepted]});
        (402, vec![("payment-required", tollgate_client::protocol::x402::header::encode(&required).unwrap())])
    })
    .await;
    let buyer = shop.buyer(None);
    let refused = buyer.get(&forging).await;
    assert!(matches!(refused, Err(PayError::Refused { status: 402, .. })), "{refused:?}");
    let channel = buyer.channels().await.unwrap().remove(0);
    assert!(channel.charged.get() < 5_000 && channel.signed.get() < 5_000, "{channel:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_proxied_service_is_paid_per_call_from_a_channel_the_proxy_keeps_on_file() {
    let shop = shop().await;
    let forecast = shop.demo.proxy_url().expect("python3 runs the proxied service");
    let buyer = shop.buyer(None);
    let first = buyer.get(&forecast).await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body_text());
    assert!(first.payment.as_ref().unwrap().transaction.is_some(), "the first call deposits");
    let block = shop.block().await;
    for _ in 0..3 {
        let paid = buyer.get(&forecast).await.unwrap();
        assert_eq!(paid.status, 200);
        let made = paid.payment.unwrap();
        assert_eq!((made.amount.get(), made.transaction), (100, None));
    }
    assert_eq!(shop.block().await, block, "vouchers, no transaction");
    // The proxy's journal holds the channel's count before each answer is released.
    let journal = std::fs::read_to_string(shop.dir.path().join("proxy-channels.jsonl")).unwrap();
    let channel = &buyer.channels().await.unwrap()[0];
    assert_eq!(channel.charged.get(), 400);
    assert!(journal.contains(&channel.id), "{journal}");
}

/// A seller that keeps each voucher and answers it with a corrective 402 showing that very
/// voucher as already charged (attacker finding: the buyer took the count, signed the next one,
/// and deposited again, while nothing was served): refused, and the buyer stops signing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seller_that_shows_back_the_voucher_just_sent_gets_no_more() {
    let shop = shop().await;
    let most = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = most.clone();
    let echoing = lying_seller(&shop, move |payload| {
        let voucher = &payload["payload"]["voucher"];
        let max: u64 = voucher["maxClaimableAmount"].as_str().unwrap().parse().unwrap();
        seen.fetch_max(max, std::sync::atomic::Ordering::SeqCst);
        let mut accepted = payload["accepted"].clone();
        accepted["extra"]["channelState"] = serde_json::json!({"chargedCumulativeAmount": max.to_string()});
        accepted["extra"]["voucherState"] =
            serde_json::json!({"signedMaxClaimable": max.to_string(), "signature": voucher["signature"]});
        let required = serde_json::json!({"x402Version": 2, "error": tollgate_client::protocol::x402::batch::reason::CUMULATIVE_MISMATCH,
            "resource": payload["resource"], "accepts": [accepted]});
        (402, vec![("payment-required", tollgate_client::protocol::x402::header::encode(&required).unwrap())])
    })
    .await;
    let buyer = shop.buyer(Some("echo.db"));
    assert!(matches!(buyer.get(&echoing).await, Err(PayError::Refused { status: 402, .. })));
    for _ in 0..2 {
        assert!(matches!(buyer.get(&echoing).await, Err(PayError::Channel(_))), "stopped signing");
    }
    assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 100, "never signed past the first voucher");
    let channel = &buyer.channels().await.unwrap()[0];
    assert_eq!((channel.charged.get(), channel.signed.get()), (0, 100), "{channel:?}");
    assert!(channel.halted.as_deref().unwrap().contains("showed it back"), "{channel:?}");
    // The voucher that left stays counted in the budget (the seller may hold it); nothing else.
    let budget = Budget::open(&shop.dir.path().join("echo.db"), vec![]).unwrap();
    let statuses: Vec<String> = budget.spends().await.unwrap().into_iter().map(|s| s.status).collect();
    assert_eq!(statuses.iter().filter(|s| *s == "reserved").count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| s == "reserved" || s == "released"), "{statuses:?}");
}

/// A seller that names a new channel at every request (another receiver authorizer each time):
/// what the buyer keeps locked in channels of the asset, all told, stays within its deposit
/// limit — the second channel's deposit is refused before anything is signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seller_naming_a_new_channel_each_time_locks_no_more_than_the_deposit_limit() {
    let shop = shop().await;
    let rotating = lying_seller_asking(
        &shop,
        |mut required| {
            let authorizer = PrivateKeySigner::random().address().to_string();
            required["accepts"][0]["extra"]["receiverAuthorizer"] = serde_json::json!(authorizer);
            required
        },
        |_| (200, settled(serde_json::json!({"chargedAmount": "0", "channelState": {"chargedCumulativeAmount": "0"}}))),
    )
    .await;
    let buyer = shop.buyer(None);
    let first = buyer.get(&rotating).await.unwrap();
    assert!(first.payment.unwrap().transaction.is_none(), "the fake settles nothing");
    let locked: u128 = buyer.channels().await.unwrap().iter().map(|c| c.unspent().get()).sum();
    assert_eq!(locked, 1_000, "ten times the 0.0001 cap");
    let second = buyer.get(&rotating).await;
    assert!(matches!(second, Err(PayError::DepositOverLimit { .. })), "{second:?}");
    assert_eq!(buyer.channels().await.unwrap().len(), 1, "no second channel opened");
}
