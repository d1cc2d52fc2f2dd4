//! Sellers of payment channels (x402 `batch-settlement`) as real `tollgate-proxy` processes on
//! the demo's anvil:
//!
//! - one killed (SIGKILL) between serving a voucher and committing its charge, its channels in a
//!   journal file, while its upstream holds the answer. The answer never left, so nothing was
//!   charged: restarted on the same journal, the proxy serves the same voucher once and charges
//!   it once, and a third sending of it is refused with the seller's count;
//! - two selling one service, their channels in one Redis: each knows what the other charged,
//!   one voucher sent to both at once is served by one, and the refund through either returns
//!   exactly what neither charged.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate_client::{Buyer, Cap, PrivateKeySigner};
use tollgate_e2e::built;

/// The sold service: counts its answers, and holds them while `hold` is set (told by `started`).
struct Upstream {
    url: String,
    served: Arc<AtomicUsize>,
    hold: Arc<AtomicBool>,
    started: Arc<tokio::sync::Notify>,
}

async fn upstream() -> Upstream {
    let (served, hold, started) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)), Arc::default());
    let (count, held, told): (Arc<AtomicUsize>, Arc<AtomicBool>, Arc<tokio::sync::Notify>) =
        (served.clone(), hold.clone(), Arc::clone(&started));
    let app = axum::Router::new().route(
        "/quote",
        axum::routing::get(move || {
            let (count, held, told) = (count.clone(), held.clone(), told.clone());
            async move {
                if held.load(Ordering::SeqCst) {
                    told.notify_one();
                    std::future::pending::<()>().await;
                }
                format!("{{\"quote\":{}}}", count.fetch_add(1, Ordering::SeqCst) + 1)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { url, served, hold, started }
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `tollgate-proxy` on `config`, answering (402) on `url` once it is up.
async fn proxy(config: &std::path::Path, url: &str) -> tokio::process::Child {
    let child = tokio::process::Command::new(built("tollgate-proxy"))
        .arg("--config")
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(answer) = reqwest::get(url).await
            && answer.status() == 402
        {
            return child;
        }
        assert!(Instant::now() < deadline, "the proxy never answered on {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes a `tollgate-proxy` configuration at `path`: listening on `listen`, selling `upstream`'s
/// `/quote` at 0.0001 of the demo token from channels kept where `store` says.
fn write_config(path: &std::path::Path, (listen, upstream, store): (&str, &str, &str), demo: &tollgate_demo::Demo) {
    let evm = demo.evm.clone().unwrap();
    std::fs::write(
        path,
        format!(
            r#"listen = "{listen}"
upstream = "{upstream}"
{store}

[facilitator]
url = "{facilitator}"
api_key_file = "{key}"

[[route]]
name = "quote"
path = "/quote"
[[route.accept]]
scheme = "batch-settlement"
asset = "{token}"
amount = "0.0001"
decimals = {decimals}
pay_to = "{seller}"
network = "eip155:{chain}"
extra = {{ name = "{name}", version = "2" }}
"#,
            facilitator = demo.facilitator_url,
            key = demo.seller_api_key_file.display(),
            token = evm.token,
            decimals = tollgate_demo::DEMO_TOKEN_DECIMALS,
            seller = evm.seller,
            chain = evm.chain_id,
            name = tollgate_demo::DEMO_TOKEN_NAME,
        ),
    )
    .unwrap();
}

/// The channel's records in the proxy's journal: the charged count of each line naming it.
fn journal_counts(path: &std::path::Path, channel: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|record| record.to_string().to_lowercase().contains(&channel.to_lowercase()))
        .filter_map(|record| record["charged"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proxy_killed_while_serving_a_voucher_charges_it_once_after_its_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let service = upstream().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let journal = dir.path().join("killed-channels.jsonl");
    let config = dir.path().join("killed-proxy.toml");
    let store = format!("channels_file = \"{}\"", journal.display());
    write_config(&config, (&listen, &service.url, &store), &demo);
    let url = format!("http://{listen}/quote");
    let mut running = proxy(&config, &url).await;

    let key: PrivateKeySigner = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let buyer = Buyer::new()
        .with_evm(key, &anvil.endpoint())
        .unwrap()
        .with_cap(Cap::parse(&format!("0.0001@{}", evm.token)).unwrap());
    // The channel opened and one call charged.
    let first = buyer.get(&url).await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body_text());
    let channel = first.payment.unwrap().channel.unwrap();

    // The next voucher: the upstream holds its answer, and the proxy is killed meanwhile.
    service.hold.store(true, Ordering::SeqCst);
    let asked = reqwest::get(&url).await.unwrap();
    let required = asked.headers()["payment-required"].to_str().unwrap().to_owned();
    let challenge =
        tollgate_client::protocol::x402::PaymentRequired::from_answer(Some(&required), &asked.bytes().await.unwrap())
            .unwrap();
    let authorization = buyer.authorize(&challenge, &url).await.unwrap();
    let (name, value) = authorization.header();
    let (name, value) = (name.to_owned(), value.to_owned());
    let sent = {
        let (url, name, value) = (url.clone(), name.clone(), value.clone());
        tokio::spawn(async move { reqwest::Client::new().get(url).header(name, value).send().await })
    };
    tokio::time::timeout(Duration::from_secs(30), service.started.notified()).await.expect("the upstream was asked");
    running.start_kill().unwrap();
    running.wait().await.unwrap();
    assert!(sent.await.unwrap().is_err(), "the answer never left the killed proxy");
    assert_eq!(service.served.load(Ordering::SeqCst), 1);
    assert_eq!(journal_counts(&journal, &channel).last().map(String::as_str), Some("100"), "nothing more charged");

    // Restarted on the same journal: the same voucher is served, and charged, once.
    service.hold.store(false, Ordering::SeqCst);
    let _restarted = proxy(&config, &url).await;
    let again = reqwest::Client::new().get(&url).header(&name, &value).send().await.unwrap();
    assert_eq!(again.status(), 200);
    let settlement = again.headers()["payment-response"].to_str().unwrap().to_owned();
    let settled: tollgate_client::protocol::x402::SettleResponse =
        tollgate_client::protocol::x402::header::decode(&settlement).unwrap();
    assert_eq!(settled.extra.as_ref().unwrap()["channelState"]["chargedCumulativeAmount"], "200");
    buyer.settled(authorization, Some(&settled)).await;
    let thrice = reqwest::Client::new().get(&url).header(&name, &value).send().await.unwrap();
    assert_eq!(thrice.status(), 402, "the same voucher a third time");
    assert_eq!(service.served.load(Ordering::SeqCst), 2, "the upstream answered twice in all");
    assert_eq!(journal_counts(&journal, &channel).last().map(String::as_str), Some("200"));
    // The buyer goes on from the count it was answered.
    let next = buyer.get(&url).await.unwrap();
    assert_eq!(next.status, 200);
    assert_eq!(buyer.channels().await.unwrap()[0].charged.get(), 300);
}

/// The Redis of the shared-channels test, or `None` (the test is skipped, saying so).
fn redis_url() -> Option<String> {
    let url = std::env::var("TOLLGATE_TEST_REDIS_URL").ok().filter(|v| !v.is_empty());
    if url.is_none() {
        eprintln!("SKIPPED two_proxies_sharing_channels_in_redis: TOLLGATE_TEST_REDIS_URL is not set");
    }
    url
}

/// Sends `authorization` to `url`: the status and the settlement it answered with, if any.
async fn send(
    url: &str,
    authorization: &tollgate_client::Authorization,
) -> (u16, Option<tollgate_client::protocol::x402::SettleResponse>) {
    let (name, value) = authorization.header();
    let answer = reqwest::Client::new().get(url).header(name, value).send().await.unwrap();
    let settled = answer
        .headers()
        .get("payment-response")
        .map(|h| tollgate_client::protocol::x402::header::decode(h.to_str().unwrap()).unwrap());
    (answer.status().as_u16(), settled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_proxies_sharing_channels_in_redis_serve_each_voucher_once_and_refund_the_rest() {
    let Some(redis) = redis_url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let service = upstream().await;
    let prefix = format!("tollgate-e2e-{}", rand_suffix());
    // Each proxy reads the Redis URL from the variable the test runs with.
    let store = format!("channels_redis_env = \"TOLLGATE_TEST_REDIS_URL\"\nchannels_redis_prefix = \"{prefix}\"");
    let mut urls = Vec::new();
    let mut running = Vec::new();
    for name in ["first", "second"] {
        let listen = format!("127.0.0.1:{}", free_port());
        let config = dir.path().join(format!("{name}-proxy.toml"));
        write_config(&config, (&listen, &service.url, &store), &demo);
        let url = format!("http://{listen}/quote");
        running.push(proxy(&config, &url).await);
        urls.push(url);
    }
    let (first, second) = (urls[0].as_str(), urls[1].as_str());

    let rpc = tollgate_facilitator::chains::evm::rpc::EvmRpc::connect(
        &anvil.endpoint(),
        tollgate_facilitator::chains::evm::rpc::DEFAULT_CALL_TIMEOUT,
    )
    .await
    .unwrap();
    let token: alloy::primitives::Address = evm.token.parse().unwrap();
    let tokens = |who: alloy::primitives::Address| {
        let rpc = &rpc;
        async move { tollgate_facilitator::chains::evm::erc20::balance_of(rpc, token, who).await.unwrap() }
    };
    let key: PrivateKeySigner = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let payer = key.address();
    let seller: alloy::primitives::Address = evm.seller.parse().unwrap();
    let (held_before, earned_before) = (tokens(payer).await, tokens(seller).await);
    let buyer = Buyer::new()
        .with_evm(key, &anvil.endpoint())
        .unwrap()
        .with_cap(Cap::parse(&format!("0.0001@{}", evm.token)).unwrap());

    // Opened on the first, paid on the second: the second goes on from the first's count.
    assert_eq!(buyer.get(first).await.unwrap().status, 200);
    let next = buyer.get(second).await.unwrap();
    assert_eq!(next.status, 200, "{}", next.body_text());
    let channel = next.payment.unwrap().channel.unwrap();
    let mut charged = 200u128;
    let mut replay = None;

    // One voucher sent to both at once, six times: each served by one proxy only (the deposit,
    // ten calls' worth, keeps two unspent for the refund).
    for round in 0..6 {
        let asked = reqwest::get(first).await.unwrap();
        let required = asked.headers()["payment-required"].to_str().unwrap().to_owned();
        let challenge = tollgate_client::protocol::x402::PaymentRequired::from_answer(
            Some(&required),
            &asked.bytes().await.unwrap(),
        )
        .unwrap();
        let authorization = buyer.authorize(&challenge, first).await.unwrap();
        let (a, b) = tokio::join!(send(first, &authorization), send(second, &authorization));
        let mut statuses = [a.0, b.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 402], "round {round}: {a:?} {b:?}");
        let settled = if a.0 == 200 { a.1 } else { b.1 }.expect("the served answer says what was charged");
        charged += 100;
        let state = &settled.extra.as_ref().unwrap()["channelState"];
        assert_eq!(state["chargedCumulativeAmount"], charged.to_string(), "round {round}");
        if let Some(earlier) = replay.replace(authorization.header().1.to_owned()) {
            // The round before's voucher, again, on either proxy: refused.
            for url in [first, second] {
                let again = reqwest::Client::new().get(url).header("PAYMENT-SIGNATURE", &earlier).send().await.unwrap();
                assert_eq!(again.status(), 402, "round {round}: a replay on {url}");
            }
        }
        buyer.settled(authorization, Some(&settled)).await;
    }

    // Redis holds the count both proxies served, once each.
    let shared = tollgate::batch::RedisChannels::connect(&redis, &prefix).await.unwrap();
    let record = tollgate::batch::ChannelStore::get(&shared, &channel.to_lowercase()).await.unwrap().unwrap();
    assert_eq!(record.charged.get(), charged);
    assert!(service.served.load(Ordering::SeqCst) >= 8, "a withheld answer may have been made, never charged");

    // The refund, through the second: the chain keeps exactly what was served.
    let account = buyer.channels().await.unwrap().into_iter().find(|c| c.id.eq_ignore_ascii_case(&channel)).unwrap();
    assert_eq!(account.charged.get(), charged);
    let refunded = buyer.refund(second, None).await.unwrap();
    assert_eq!(refunded.amount.get(), account.balance.get() - charged);
    assert_eq!(
        tokens(payer).await,
        held_before - alloy::primitives::U256::from(charged),
        "the buyer paid what was served"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    // The refund's claim is swept to the seller in the background.
    while tokens(seller).await < earned_before + alloy::primitives::U256::from(charged) {
        assert!(Instant::now() < deadline, "the claimed charges never reached the seller");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(tokens(seller).await, earned_before + alloy::primitives::U256::from(charged));
}

/// A suffix no other run's Redis keys have.
fn rand_suffix() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{}-{now}", std::process::id())
}
