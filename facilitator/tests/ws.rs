//! `GET /ws` with a real WebSocket client (tokio-tungstenite) against the served facilitator on
//! the embedded ledger: subscriptions, events in order up to `confirmed`, who may follow what,
//! error events, plan and key checks before the upgrade, pings, and slow consumers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tollgate_facilitator::AppState;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_protocol::ChainFamily;

use common::ws::{Socket, next_json, send_json};

/// A verified hosted payment of `account` from `wallet`.
fn payment(account: &str, wallet: &str) -> tollgate_facilitator::store::NewPayment {
    tollgate_facilitator::store::NewPayment::native(
        format!("pay_{}", ulid::Ulid::new()),
        account,
        tollgate_protocol::Network::solana_devnet(),
        (wallet.to_owned(), solana_sdk::pubkey::Pubkey::new_unique().to_string()),
        tollgate_protocol::AtomicAmount(1_000_000),
        chrono::Utc::now(),
    )
}

/// A facilitator served on 127.0.0.1 with the embedded ledger.
struct Served {
    http: String,
    ws: String,
    state: AppState,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(configure: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("ws.db").to_str().unwrap()).unwrap(),
            dev: true,
            ..Config::default()
        };
        configure(&mut config);
        let state = AppState::from_config(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(tollgate_facilitator::run(listener, state.clone(), std::future::pending()));
        Self { http: format!("http://{addr}"), ws: format!("ws://{addr}/ws"), state, _dir: dir }
    }

    /// A key of a new account: (secret, account id).
    async fn key(&self, plan: Plan) -> (String, String) {
        let new = NewKey { plan, rpm: None, label: None, account: None, env: KeyEnv::Test };
        let created = admin::create_key(&*self.state.store, new, chrono::Utc::now()).await.unwrap();
        (created.secret.expose().to_owned(), created.record.account_id.clone())
    }

    /// A custodial Solana wallet of `key`'s account, funded with 1 SOL.
    async fn wallet(&self, key: &str) -> String {
        let key_id = self.state.auth.authenticate_key(key).await.unwrap().key_id.clone();
        let master = self.state.master_key.as_ref().unwrap();
        let wallet = admin::create_wallet(&*self.state.store, master, &key_id, ChainFamily::Solana, chrono::Utc::now())
            .await
            .unwrap();
        let rpc = &self.state.chains.embedded_solana().unwrap().rpc;
        let signature = rpc.request_airdrop(&wallet.parse().unwrap(), 1_000_000_000).await.unwrap();
        rpc.wait_for_outcome(&signature, Duration::from_secs(30)).await.unwrap();
        wallet
    }

    async fn connect(&self, key: &str) -> Result<Socket, WsError> {
        let mut request = self.ws.as_str().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
        tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wallet_subscriber_sees_a_hosted_payment_in_order_up_to_confirmed() {
    let t = Served::start(|_| {}).await;
    let (key, _) = t.key(Plan::Premium).await;
    let payer = t.wallet(&key).await;
    let payee = solana_sdk::pubkey::Pubkey::new_unique().to_string();

    let mut socket = t.connect(&key).await.unwrap();
    send_json(&mut socket, json!({"method": "subscribeWallet", "keys": [payer]})).await;
    assert_eq!(
        next_json(&mut socket).await,
        json!({"event": "subscribed", "method": "subscribeWallet", "keys": [payer]})
    );

    // Another account: it may not follow this account's custodial wallet, and following the
    // payee's (not custodial) address shows it none of this account's payments.
    let (other_key, _) = t.key(Plan::Premium).await;
    let mut other = t.connect(&other_key).await.unwrap();
    send_json(&mut other, json!({"method": "subscribeWallet", "keys": [payer]})).await;
    let refused = next_json(&mut other).await;
    assert_eq!((refused["event"].as_str(), refused["code"].as_str()), (Some("error"), Some("FORBIDDEN")), "{refused}");
    send_json(&mut other, json!({"method": "subscribeWallet", "keys": [payee]})).await;
    assert_eq!(next_json(&mut other).await["event"], "subscribed");

    let sent: Value = reqwest::Client::new()
        .post(format!("{}/payment/send", t.http))
        .bearer_auth(&key)
        .json(&json!({"walletAddress": payer, "recipientAddress": payee, "amount": 0.01}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sent["status"], "confirmed", "{sent}");
    let id = sent["paymentId"].as_str().unwrap();

    // Every transition, in order, ending with the confirmed record.
    let mut statuses = Vec::new();
    loop {
        let event = next_json(&mut socket).await;
        assert_eq!(event["event"], "payment.updated", "{event}");
        assert_eq!(event["payment"]["paymentId"], id);
        statuses.push(event["payment"]["status"].as_str().unwrap().to_owned());
        if statuses.last().unwrap() == "confirmed" {
            assert_eq!(event["payment"]["transaction"], sent["transaction"]);
            break;
        }
    }
    let order = ["verified", "submitted", "pending", "confirmed"];
    let ranks: Vec<usize> = statuses.iter().map(|s| order.iter().position(|o| o == s).unwrap()).collect();
    assert!(ranks.windows(2).all(|w| w[0] < w[1]), "in order: {statuses:?}");
    assert_eq!(statuses.first().map(String::as_str), Some("verified"), "{statuses:?}");

    // The other account got nothing: the first message it reads after the payment is the
    // answer to its next request (events already published are sent before requests are read).
    send_json(&mut other, json!({"method": "unsubscribeWallet", "keys": [payee]})).await;
    assert_eq!(next_json(&mut other).await["event"], "unsubscribed");

    // Following the payment itself works for its owner, not for others; its current state follows.
    send_json(&mut socket, json!({"method": "subscribePayment", "keys": [id]})).await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed");
    let current = next_json(&mut socket).await;
    assert_eq!(
        (current["event"].as_str(), current["payment"]["status"].as_str()),
        (Some("payment.updated"), Some("confirmed"))
    );
    send_json(&mut other, json!({"method": "subscribePayment", "keys": [id]})).await;
    assert_eq!(next_json(&mut other).await["code"], "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_get_error_events_and_the_connection_stays_up() {
    let t = Served::start(|c| c.limits.ws_max_subscriptions = 3).await;
    let (key, _) = t.key(Plan::Enterprise).await;
    let mut socket = t.connect(&key).await.unwrap();
    let wallet = |n: u8| solana_sdk::pubkey::Pubkey::new_from_array([n; 32]).to_string();

    for (message, code, words) in [
        ("not json".to_owned(), "INVALID_PARAMETERS", "not JSON"),
        (json!({"keys": []}).to_string(), "INVALID_PARAMETERS", "method is required"),
        (json!({"method": "subscribeEverything", "keys": ["x"]}).to_string(), "INVALID_PARAMETERS", "unknown method"),
        (json!({"method": "subscribeWallet", "keys": "x"}).to_string(), "INVALID_PARAMETERS", "array of strings"),
        (json!({"method": "subscribeWallet", "keys": [1]}).to_string(), "INVALID_PARAMETERS", "array of strings"),
        (json!({"method": "subscribeWallet", "keys": []}).to_string(), "INVALID_PARAMETERS", "1 to 3"),
        (
            json!({"method": "subscribeWallet", "keys": ["nope"]}).to_string(),
            "INVALID_PARAMETERS",
            "not a wallet address",
        ),
        (json!({"method": "subscribePayment", "keys": ["pay_unknown"]}).to_string(), "NOT_FOUND", "no payment"),
    ] {
        socket.send(Message::Text(message.clone().into())).await.unwrap();
        let answer = next_json(&mut socket).await;
        assert_eq!((answer["event"].as_str(), answer["code"].as_str()), (Some("error"), Some(code)), "{message}");
        assert!(answer["message"].as_str().unwrap().contains(words), "{message}: {answer}");
    }
    socket.send(Message::Binary(vec![1, 2, 3].into())).await.unwrap();
    assert_eq!(next_json(&mut socket).await["code"], "INVALID_PARAMETERS");

    // Still up: subscriptions work, up to the limit per connection.
    send_json(&mut socket, json!({"method": "subscribeWallet", "keys": [wallet(1), wallet(2)]})).await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed");
    send_json(&mut socket, json!({"method": "subscribeWallet", "keys": [wallet(3), wallet(4)]})).await;
    let over = next_json(&mut socket).await;
    assert!(over["message"].as_str().unwrap().contains("at most 3"), "{over}");
    send_json(&mut socket, json!({"method": "subscribeWallet", "keys": [wallet(2), wallet(3)]})).await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed", "one new, one already followed: 3 in all");

    // Too many messages at once: the extra ones are answered with RATE_LIMIT and ignored.
    let burst = json!({"method": "unsubscribeWallet", "keys": [wallet(9)]}).to_string();
    for _ in 0..40 {
        socket.send(Message::Text(burst.clone().into())).await.unwrap();
    }
    let mut limited = 0;
    for _ in 0..40 {
        if next_json(&mut socket).await["code"] == "RATE_LIMIT" {
            limited += 1;
        }
    }
    assert!(limited >= 10, "{limited} of 40 were limited");

    // A message over the size limit closes the connection (1009).
    let huge = "x".repeat(20 * 1024);
    let _ = socket.send(Message::Text(huge.into())).await;
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => break frame.map(|f| f.code),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break None,
        }
    };
    assert!(matches!(closed, Some(CloseCode::Size) | None), "{closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_plans_are_checked_before_the_upgrade() {
    let t = Served::start(|_| {}).await;
    let (standard, _) = t.key(Plan::Standard).await;
    let (premium, _) = t.key(Plan::Premium).await;
    let status = |e: WsError| match e {
        WsError::Http(response) => response.status().as_u16(),
        other => panic!("not an HTTP refusal: {other}"),
    };
    assert_eq!(status(t.connect(&standard).await.unwrap_err()), 403);
    assert_eq!(status(t.connect("tg_test_wrong").await.unwrap_err()), 401);
    let anonymous = tokio_tungstenite::connect_async(t.ws.as_str()).await.unwrap_err();
    assert_eq!(status(anonymous), 401);

    // Browsers cannot set headers: ?api-key= works too.
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{}?api-key={premium}", t.ws)).await.unwrap();
    send_json(
        &mut socket,
        json!({"method": "subscribeWallet", "keys": [solana_sdk::pubkey::Pubkey::new_unique().to_string()]}),
    )
    .await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_pings_its_clients() {
    let t = Served::start(|c| c.limits.ws_ping_secs = 1).await;
    let (key, _) = t.key(Plan::Premium).await;
    let mut socket = t.connect(&key).await.unwrap();
    // A ping arrives (the client library answers it with a pong when it reads).
    let first = tokio::time::timeout(Duration::from_secs(5), socket.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first, Message::Ping(_)), "{first:?}");

    // Unanswered pings end a connection: see `silent_for_too_long` in the handler's unit tests.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_consumer_is_disconnected_instead_of_buffered() {
    let mut t = Served::start(|_| {}).await;
    // A bus that keeps a single event for listeners that are behind.
    t.state.events = tollgate_facilitator::events::EventBus::new(1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tollgate_facilitator::run(listener, t.state.clone(), std::future::pending()));
    t.ws = format!("ws://{addr}/ws");

    let (key, account) = t.key(Plan::Premium).await;
    let mut socket = t.connect(&key).await.unwrap();
    let wallet = solana_sdk::pubkey::Pubkey::new_unique().to_string();
    send_json(&mut socket, json!({"method": "subscribeWallet", "keys": [wallet]})).await;
    assert_eq!(next_json(&mut socket).await["event"], "subscribed");

    // Many changes at once, faster than they can be sent.
    // (Inserted through the store, which publishes on the original bus, not this one.)
    let payment = t.state.store.insert_payment(&payment(&account, &wallet)).await.unwrap();
    for _ in 0..20_000 {
        t.state.events.publish(&payment);
    }
    let closed = loop {
        match tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => break frame.unwrap(),
            Some(Ok(_)) => {}
            other => panic!("the connection ended without a close frame: {other:?}"),
        }
    };
    assert_eq!(closed.code, CloseCode::Again);
    assert!(closed.reason.contains("too slow"), "{closed:?}");
    // The server let go of the listener.
    for _ in 0..100 {
        if t.state.events.listeners() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(t.state.events.listeners(), 0);
}

/// A deleted key's connections close: at once when the deletion is announced on this instance
/// (the dashboard's, or on PostgreSQL anyone's: see `scale_out.rs`), and within the key cache's
/// period (as HTTP requests with it) when another process deleted it from the same SQLite file
/// (the CLI). Other keys' stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_keys_connections_are_closed() {
    let t = Served::start(|c| c.limits.key_cache_ttl_secs = 1).await;
    let (announced, _) = t.key(Plan::Premium).await;
    let (quiet, _) = t.key(Plan::Premium).await;
    let (kept, _) = t.key(Plan::Premium).await;
    let id = |key: &str| {
        let auth = t.state.auth.clone();
        let key = key.to_owned();
        async move { auth.authenticate_key(&key).await.unwrap().key_id.clone() }
    };
    let (announced_id, quiet_id) = (id(&announced).await, id(&quiet).await);
    let mut sockets = [t.connect(&announced).await.unwrap(), t.connect(&quiet).await.unwrap()];
    let mut other = t.connect(&kept).await.unwrap();

    // Deleted and announced here (as the dashboard does): closed at once.
    assert!(t.state.store.delete_api_key(&announced_id).await.unwrap());
    t.state.events.revoke(&announced_id);
    let (code, reason) = common::ws::close_within(&mut sockets[0], Duration::from_millis(500)).await;
    assert_eq!((code, reason.as_str()), (1008, "the API key was deleted"));
    // Deleted by another process, nothing announced: closed at the next check of the key.
    assert!(t.state.store.delete_api_key(&quiet_id).await.unwrap());
    let (code, reason) = common::ws::close_within(&mut sockets[1], Duration::from_secs(3)).await;
    assert_eq!((code, reason.as_str()), (1008, "the API key was deleted"));
    // The other key's connection is still served.
    send_json(
        &mut other,
        json!({"method": "subscribeWallet", "keys": [solana_sdk::pubkey::Pubkey::new_unique().to_string()]}),
    )
    .await;
    assert_eq!(next_json(&mut other).await["event"], "subscribed");
}
