//! Signed webhooks from the real daemon to a real receiving HTTP server on 127.0.0.1: delivery,
//! signature check, retry after a 500, a restart in the middle of retrying, accounts kept apart,
//! and endpoints into the facilitator's own network refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};
use tollgate_protocol::webhook;

use common::process::{Daemon, cli_with};

/// What the receiver got: (path, headers, body), and how it answers.
#[derive(Default)]
struct Inbox {
    received: Mutex<Vec<(String, HeaderMap, Bytes)>>,
    /// Statuses to answer, in order; then 200.
    script: Mutex<Vec<u16>>,
    /// Answer this to everything (after the script) while set.
    always: Mutex<Option<u16>>,
}

impl Inbox {
    fn received(&self) -> Vec<(String, HeaderMap, Bytes)> {
        self.received.lock().unwrap().clone()
    }
}

async fn receive(
    State(inbox): State<Arc<Inbox>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    inbox.received.lock().unwrap().push((path, headers, body));
    let scripted = {
        let mut script = inbox.script.lock().unwrap();
        (!script.is_empty()).then(|| script.remove(0))
    };
    let status = scripted.or(*inbox.always.lock().unwrap()).unwrap_or(200);
    StatusCode::from_u16(status).unwrap()
}

async fn receiver() -> (String, Arc<Inbox>) {
    let inbox = Arc::new(Inbox::default());
    let app = Router::new().route("/{path}", post(receive)).with_state(inbox.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, inbox)
}

async fn call(method: reqwest::Method, url: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method, url).bearer_auth(key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let response = req.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The event ids delivered to `path` with a good signature under `secret`.
fn verified_events(inbox: &Inbox, path: &str, secret: &str) -> Vec<(String, String)> {
    let now = chrono::Utc::now().timestamp();
    inbox
        .received()
        .iter()
        .filter(|(p, _, _)| p == path)
        .map(|(_, headers, body)| {
            let signature = headers[webhook::SIGNATURE_HEADER].to_str().unwrap();
            webhook::verify(secret, signature, body, now, webhook::DEFAULT_TOLERANCE_SECS)
                .unwrap_or_else(|e| panic!("a delivery that does not verify: {e}"));
            let event: Value = serde_json::from_slice(body).unwrap();
            assert_eq!(headers["tollgate-event-id"].to_str().unwrap(), event["id"].as_str().unwrap());
            (event["id"].as_str().unwrap().to_owned(), event["type"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Waits until every delivery in the endpoint's log is `delivered`; returns the log. Long enough
/// for a claim left by a killed sender to lapse (the attempt's timeout, 1 s here, plus 30 s).
async fn all_delivered(base: &str, endpoint: &str, key: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, log) = call(reqwest::Method::GET, &format!("{base}/webhooks/{endpoint}/deliveries"), key, None).await;
        assert_eq!(s, 200, "{log}");
        let deliveries = log["deliveries"].as_array().unwrap().clone();
        if !deliveries.is_empty() && deliveries.iter().all(|d| d["state"] == "delivered") {
            return deliveries;
        }
        assert!(Instant::now() < deadline, "deliveries still not delivered: {log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const ADMIN: &str = "admin-token-for-metrics-0123456789";

/// The value of the first sample of `name` whose labels include every one of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let matches =
            (series == name || series.starts_with(&format!("{name}{{"))) && labels.iter().all(|l| series.contains(l));
        matches.then(|| value.parse().ok()).flatten()
    })
}

struct Shop {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Shop {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Loopback receivers are allowed here (tests); retries start after a second.
        std::fs::write(
            dir.path().join("tollgate.toml"),
            "[webhooks]\nallow_private_targets = true\nrequire_https = false\nretry_base_secs = 1\ntimeout_secs = 1\n",
        )
        .unwrap();
        let env = vec![
            ("TOLLGATE_DEV".into(), "1".into()),
            ("TOLLGATE_CONFIG".into(), "tollgate.toml".into()),
            ("TOLLGATE_ADMIN_TOKEN".into(), ADMIN.into()),
        ];
        Self { dir, env }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    fn cli(&self, args: &[&str]) -> String {
        cli_with(self.dir.path(), &self.env(), args).trim().to_owned()
    }

    /// A premium key of a new account and two custodial Solana wallets of it.
    fn customer(&self) -> (String, String, String) {
        let created: Value =
            serde_json::from_str(&self.cli(&["keys", "create", "--plan", "premium", "--json"])).unwrap();
        let id = created["id"].as_str().unwrap();
        let payer = self.cli(&["wallets", "create", "--key", id, "--chain", "solana"]);
        let payee = self.cli(&["wallets", "create", "--key", id, "--chain", "solana"]);
        (created["key"].as_str().unwrap().to_owned(), payer, payee)
    }

    fn start(&self) -> Daemon {
        Daemon::start_with(self.dir.path(), &self.env())
    }
}

async fn pay(base: &str, key: &str, payer: &str, payee: &str) -> String {
    let (s, paid) = call(
        reqwest::Method::POST,
        &format!("{base}/payment/send"),
        key,
        Some(json!({"walletAddress": payer, "recipientAddress": payee, "amount": 0.01})),
    )
    .await;
    assert_eq!((s, paid["status"].as_str()), (200, Some("confirmed")), "{paid}");
    paid["paymentId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_changes_reach_the_seller_signed_and_retried_across_a_restart() {
    let shop = Shop::new();
    let (hooks, inbox) = receiver().await;
    let (key, payer, payee) = shop.customer();
    let (other_key, _, _) = shop.customer();
    let daemon = shop.start();
    let base = daemon.base.clone();

    let (s, created) = call(
        reqwest::Method::POST,
        &format!("{base}/webhooks"),
        &key,
        Some(json!({"url": format!("{hooks}/seller"), "description": "shop"})),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    let endpoint = created["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_") && endpoint.starts_with("whe_"), "{created}");
    let (s, other) = call(
        reqwest::Method::POST,
        &format!("{base}/webhooks"),
        &other_key,
        Some(json!({"url": format!("{hooks}/other")})),
    )
    .await;
    assert_eq!(s, 201, "{other}");
    // The list never shows the secret; another account sees only its own.
    let (_, listed) = call(reqwest::Method::GET, &format!("{base}/webhooks"), &key, None).await;
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 1, "{listed}");
    assert!(!listed.to_string().contains(&secret));
    let (s, _) = call(reqwest::Method::GET, &format!("{base}/webhooks/{endpoint}/deliveries"), &other_key, None).await;
    assert_eq!(s, 404, "another account's endpoint is not found");

    // The first delivery answers 500, then every one 200.
    inbox.script.lock().unwrap().push(500);
    let (s, _) =
        call(reqwest::Method::POST, &format!("{base}/dev/airdrop"), &key, Some(json!({"address": payer, "amount": 1})))
            .await;
    assert_eq!(s, 200);
    let first = pay(&base, &key, &payer, &payee).await;
    let confirmed = format!("evt_{first}_confirmed");
    let log = all_delivered(&base, &endpoint, &key).await;
    let events = verified_events(&inbox, "seller", &secret);
    let kinds: BTreeSet<&str> = events.iter().map(|(_, kind)| kind.as_str()).collect();
    assert!(kinds.contains("payment.confirmed") && events.iter().any(|(id, _)| *id == confirmed), "{kinds:?}");
    // The 500 was retried: one event arrived twice, and the log says so.
    let ids: Vec<&str> = events.iter().map(|(id, _)| id.as_str()).collect();
    let distinct: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), distinct.len() + 1, "exactly the refused delivery came again: {ids:?}");
    assert_eq!(log.len(), distinct.len(), "one delivery per event");
    let retried: Vec<&Value> = log.iter().filter(|d| d["attempts"] == 2).collect();
    assert_eq!(retried.len(), 1, "{log:?}");
    assert_eq!((retried[0]["state"].as_str(), retried[0]["lastStatus"].as_u64()), (Some("delivered"), Some(200)));

    // What an operator sees: the payment, its settlement time, the refused and the delivered
    // attempts, the chain calls, the fee payer's balance, the routes. Only with the admin token.
    let client = reqwest::Client::new();
    // A client's made-up method does not become a label value (each would be a new series).
    let odd = reqwest::Method::from_bytes(b"XMADEUPMETHOD").unwrap();
    client.request(odd, format!("{base}/nope")).send().await.unwrap();
    let scrape = client.get(format!("{base}/metrics")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(scrape.status().as_u16(), 200);
    let metrics = scrape.text().await.unwrap();
    assert_eq!(
        sample(&metrics, "tollgate_payments_total", &["status=\"confirmed\"", "scheme=\"exact-native\""]),
        Some(1.0),
        "{metrics}"
    );
    assert!(sample(&metrics, "tollgate_settlement_seconds_count", &[]).is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(sample(&metrics, "tollgate_webhook_deliveries_total", &["outcome=\"retry\""]), Some(1.0), "{metrics}");
    assert!(
        sample(&metrics, "tollgate_webhook_deliveries_total", &["outcome=\"delivered\""]).is_some_and(|n| n >= 3.0)
    );
    assert!(sample(&metrics, "tollgate_rpc_calls_total", &["chain=\"Solana\""]).is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(sample(&metrics, "tollgate_signer_balance", &["role=\"fee_payer\""]).is_some_and(|n| n > 0.0), "{metrics}");
    assert!(sample(&metrics, "tollgate_http_requests_total", &["route=\"/payment/send\"", "status=\"200\""]).is_some());
    assert!(!metrics.contains(&payer), "no address of a customer in labels");
    assert!(!metrics.contains("XMADEUPMETHOD") && metrics.contains("method=\"other\""), "{metrics}");
    assert_eq!(sample(&metrics, "tollgate_webhook_backlog", &[]), Some(0.0));
    for token in [None, Some("wrong")] {
        let mut req = client.get(format!("{base}/metrics"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        assert_eq!(req.send().await.unwrap().status().as_u16(), 401);
    }
    let ready: Value = client.get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["chains"].as_object().map(|c| c.values().all(|c| c["ok"] == true)), Some(true), "{ready}");

    // The receiver is down (503) while the next payment is made; the daemon is killed while it
    // retries, and the receiver comes back before the daemon does.
    *inbox.always.lock().unwrap() = Some(503);
    let second = pay(&base, &key, &payer, &payee).await;
    let second_confirmed = format!("evt_{second}_confirmed");
    wait_for("a refused attempt at the second payment's confirmation", || {
        inbox
            .received()
            .iter()
            .any(|(_, _, body)| String::from_utf8_lossy(body).contains(&second_confirmed))
            .then_some(())
    })
    .await;
    // Killed once the refusal is recorded (a kill in the middle of an attempt leaves its claim to
    // lapse, which `all_delivered` also waits out).
    let deliveries = format!("{base}/webhooks/{endpoint}/deliveries");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, log) = call(reqwest::Method::GET, &deliveries, &key, None).await;
        let recorded = log["deliveries"].as_array().is_some_and(|all| {
            all.iter().any(|d| d["eventId"] == second_confirmed.as_str() && d["attempts"].as_u64() >= Some(1))
        });
        if recorded {
            break;
        }
        assert!(Instant::now() < deadline, "the refused attempt is never recorded: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.kill();
    *inbox.always.lock().unwrap() = None;
    let restarted = shop.start();
    all_delivered(&restarted.base, &endpoint, &key).await;
    assert!(
        verified_events(&inbox, "seller", &secret).iter().any(|(id, _)| *id == second_confirmed),
        "the confirmation refused before the restart is delivered after it"
    );

    // The other account's endpoint heard nothing of these payments.
    assert!(inbox.received().iter().all(|(p, _, _)| p != "other"), "another account's payments leaked");
    // Deleting the endpoint stops it, and it is gone.
    let (s, _) =
        call(reqwest::Method::DELETE, &format!("{}/webhooks/{endpoint}", restarted.base), &other_key, None).await;
    assert_eq!(s, 404, "another account cannot delete it");
    let (s, _) = call(reqwest::Method::DELETE, &format!("{}/webhooks/{endpoint}", restarted.base), &key, None).await;
    assert_eq!(s, 200);
    restarted.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_into_the_facilitator_network_are_refused_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("TOLLGATE_DEV", "1")];
    let created: Value =
        serde_json::from_str(&cli_with(dir.path(), &env, &["keys", "create", "--plan", "standard", "--json"])).unwrap();
    let key = created["key"].as_str().unwrap();
    let daemon = Daemon::start_with(dir.path(), &env);
    for url in [
        "http://hooks.example/x",
        "https://127.0.0.1:8443/x",
        "https://localhost/x",
        "https://169.254.169.254/latest/meta-data/",
        "https://10.0.0.7/x",
        "https://[::1]/x",
        "https://[::ffff:127.0.0.1]/x",
        "https://user:pw@hooks.example/x",
        "not a url",
    ] {
        let (s, body) =
            call(reqwest::Method::POST, &format!("{}/webhooks", daemon.base), key, Some(json!({"url": url}))).await;
        assert_eq!((s, body["error"]["code"].as_str()), (400, Some("INVALID_PARAMETERS")), "{url}: {body}");
    }
    let (s, body) = call(
        reqwest::Method::POST,
        &format!("{}/webhooks", daemon.base),
        key,
        Some(json!({"url": "https://1.1.1.1/x", "extra": 1})),
    )
    .await;
    assert_eq!(s, 400, "unknown fields are refused: {body}");
    let (s, body) = call(
        reqwest::Method::POST,
        &format!("{}/webhooks", daemon.base),
        key,
        Some(json!({"url": "https://1.1.1.1/x"})),
    )
    .await;
    assert_eq!(s, 201, "a public address is accepted: {body}");
    daemon.terminate();
}

/// One account's endpoint that never answers holds one sending slot, not the others: another
/// account's delivery goes out at once while forty queued for the silent endpoint wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_does_not_hold_up_other_accounts() {
    use tollgate_facilitator::config::{Config, DatabaseUrl, WebhookSettings};
    use tollgate_facilitator::store::{NewPayment, SqlStore};
    use tollgate_facilitator::webhooks::{self, Sender};

    let dir = tempfile::tempdir().unwrap();
    let settings = WebhookSettings {
        allow_private_targets: true,
        require_https: false,
        timeout_secs: 10,
        ..WebhookSettings::default()
    };
    let config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("w.db").to_str().unwrap()).unwrap(),
        webhooks: settings.clone(),
        ..Config::default()
    };
    let store = std::sync::Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let master = tollgate_facilitator::wallets::MasterKey::generate().unwrap();
    let state = tollgate_facilitator::AppState::new(
        config,
        store,
        std::sync::Arc::new(tollgate_facilitator::clock::SystemClock),
    )
    .with_master_key(master);

    // A listener that accepts and never answers; a receiver that answers at once.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
    let held = std::sync::Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = silent.accept().await.unwrap();
            keep.lock().unwrap().push(stream);
        }
    });
    let (hooks, inbox) = receiver().await;
    let now = chrono::Utc::now();
    for account in ["acct_slow", "acct_fine"] {
        state.store.create_account(account, now).await.unwrap();
    }
    let master = state.master_key.as_deref();
    webhooks::register(&*state.store, master, &settings, "acct_slow", &silent_url, None, now).await.unwrap();
    let fine = webhooks::register(&*state.store, master, &settings, "acct_fine", &format!("{hooks}/fine"), None, now)
        .await
        .unwrap();
    let network: tollgate_protocol::Network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".parse().unwrap();
    let wallets = (
        "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".to_owned(),
        "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".to_owned(),
    );
    for i in 0..40 {
        let p = NewPayment::native(
            format!("pay_slow{i}"),
            "acct_slow",
            network.clone(),
            wallets.clone(),
            tollgate_protocol::AtomicAmount(1),
            now,
        );
        state.store.insert_payment(&p).await.unwrap();
    }
    let p = NewPayment::native("pay_fine", "acct_fine", network, wallets, tollgate_protocol::AtomicAmount(1), now);
    state.store.insert_payment(&p).await.unwrap();

    let sender = Sender::new(state.store.clone(), state.master_key.clone(), settings, state.clock.clone()).unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let task = tokio::spawn(webhooks::send_periodically(sender, stopped));
    wait_for("the other account's delivery", || {
        verified_events(&inbox, "fine", &fine.secret).iter().any(|(id, _)| id == "evt_pay_fine_verified").then_some(())
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "delivered after {:?}", started.elapsed());
    assert_eq!(held.lock().unwrap().len(), 1, "one attempt at a time at the silent endpoint");
    let _ = stop.send(true);
    task.await.unwrap();
}
