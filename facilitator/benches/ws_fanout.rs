//! Benchmark: WebSocket fan-out. `TOLLGATE_WS_SUBSCRIBERS` (default 1,000) clients follow one
//! wallet over real WebSocket connections to the served facilitator (SQLite); payments of that
//! wallet are then inserted and moved `verified` → `submitted` → `confirmed` through the store,
//! `TOLLGATE_WS_ROUNDS` (default 20) times. For every client and every change it measures the
//! delay from just before the store write to the client's receipt of the `payment.updated` event,
//! and prints p50 / p99 / max, plus the process's resident memory before and after connecting.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench ws_fanout`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a benchmark reports on stdout

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::{NewPayment, PaymentUpdate, SqlStore};
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::gateway::PaymentStatus;

#[derive(serde::Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    payment: Record<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record<'a> {
    payment_id: &'a str,
    status: &'a str,
}

/// Resident memory of this process, KiB (Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    // Index arithmetic on a count, not money.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    let subscribers = env_or("TOLLGATE_WS_SUBSCRIBERS", 1_000);
    let rounds = env_or("TOLLGATE_WS_ROUNDS", 20);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("ws.db").to_str().unwrap()).unwrap(),
            ..Config::default()
        };
        let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
        let state = AppState::new(config, store, Arc::new(SystemClock));
        let new = NewKey { plan: Plan::Enterprise, rpm: Some(1_000_000), label: None, account: None, env: KeyEnv::Test };
        let key = admin::create_key(&*state.store, new, chrono::Utc::now()).await.unwrap();
        let account = key.record.account_id.clone();
        let secret = key.secret.expose().to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let wallet = solana_sdk::pubkey::Pubkey::new_unique().to_string();

        let before = rss_kib();
        let (tx, mut rx) = mpsc::unbounded_channel::<(String, String, Instant)>();
        let connect_started = Instant::now();
        for _ in 0..subscribers {
            let url = format!("ws://{addr}/ws?api-key={secret}");
            let config = WebSocketConfig::default().read_buffer_size(4 * 1024).write_buffer_size(0);
            let (mut socket, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await.unwrap();
            let subscribe = serde_json::json!({"method": "subscribeWallet", "keys": [wallet]}).to_string();
            socket.send(Message::Text(subscribe.into())).await.unwrap();
            let answer = socket.next().await.unwrap().unwrap();
            assert!(answer.to_text().unwrap().contains("subscribed"), "{answer:?}");
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(Ok(message)) = socket.next().await {
                    let received = Instant::now();
                    if let Message::Text(text) = message {
                        // Only the two fields the measurement needs (the rest is skipped unparsed).
                        let event: Event<'_> = serde_json::from_str(&text).unwrap();
                        let _ = tx.send((event.payment.payment_id.to_owned(), event.payment.status.to_owned(), received));
                    }
                }
            });
        }
        let connected = rss_kib();
        println!(
            "{subscribers} subscribers connected in {:?}; resident memory {} MiB before, {} MiB after (+{} KiB each)",
            connect_started.elapsed(),
            before / 1024,
            connected / 1024,
            (connected.saturating_sub(before)) / subscribers.max(1) as u64
        );

        let mut delays = Vec::with_capacity(subscribers * rounds * 3);
        for round in 0..rounds {
            let id = format!("pay_bench_{round}");
            let payment = NewPayment::native(
                id.clone(),
                account.clone(),
                tollgate_protocol::Network::solana_devnet(),
                (wallet.clone(), solana_sdk::pubkey::Pubkey::new_unique().to_string()),
                tollgate_protocol::AtomicAmount(1_000_000),
                chrono::Utc::now(),
            );
            let mut changed = Vec::new();
            changed.push(Instant::now());
            state.store.insert_payment(&payment).await.unwrap();
            for (from, to) in [(PaymentStatus::Verified, PaymentStatus::Submitted), (PaymentStatus::Submitted, PaymentStatus::Confirmed)] {
                changed.push(Instant::now());
                let update = PaymentUpdate {
                    transaction: (to == PaymentStatus::Submitted).then(|| format!("tx_{round}")),
                    ..PaymentUpdate::to(to, chrono::Utc::now())
                };
                state.store.transition_payment(&id, from, &update).await.unwrap();
            }
            // Every subscriber gets the three events of this payment.
            for _ in 0..subscribers * 3 {
                let (got, status, received) =
                    tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("every event arrives").unwrap();
                assert_eq!(got, id);
                let step = match status.as_str() {
                    "verified" => 0,
                    "submitted" => 1,
                    _ => 2,
                };
                delays.push(received.duration_since(changed[step]));
            }
        }
        delays.sort();
        println!(
            "{} deliveries ({subscribers} subscribers × {rounds} payments × 3 changes): p50 {:?}, p99 {:?}, max {:?}; resident memory now {} MiB",
            delays.len(),
            percentile(&delays, 0.50),
            percentile(&delays, 0.99),
            delays.last().copied().unwrap_or_default(),
            rss_kib() / 1024
        );
    });
}
