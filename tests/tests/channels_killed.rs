//! A seller killed between serving a channel payment and committing its charge: a real
//! `tollgate-proxy` process selling a route from payment channels (x402 `batch-settlement`) on
//! the demo's anvil, its channels in a journal file, is killed (SIGKILL) while its upstream holds
//! the answer to a voucher. The answer never left, so nothing was charged: restarted on the same
//! journal, the proxy serves the same voucher once and charges it once, and a third sending of it
//! is refused with the seller's count.

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
    std::fs::write(
        &config,
        format!(
            r#"listen = "{listen}"
upstream = "{upstream}"
channels_file = "{journal}"

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
            upstream = service.url,
            journal = journal.display(),
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
