//! What one payment buys, across processes: seller processes (the `axum_seller` example, the
//! layer as the README shows it, with its defaults) on facilitator daemons (the binary) share one
//! count of answers in the database — on a SQLite file with one daemon, and on PostgreSQL with
//! two. A proof replayed to every instance, at once, after a restart of its seller, or past a
//! cache of one proof serves its answer and one retry, no more; an answer that reached no buyer
//! (a failed handler, a buyer who hung up before the first byte) is given back. A pass bought at
//! one instance opens every instance to its payer's signed message, once per message.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_facilitator::chains::solana::embedded::EmbeddedLedger;
use tollgate_facilitator::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};

use common::process::{Daemon, PgSchema, cli_with};

/// What the example shop charges for `/report`: 0.001 SOL.
const PRICE: u64 = 1_000_000;

/// A binary cargo built beside this test: `examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join(name);
    assert!(path.exists(), "{} is not built: run the tests with `cargo test --workspace`", path.display());
    path
}

/// One process of the example shop (`/report` for 0.001 SOL), on a free port.
struct Shop {
    child: Child,
    url: String,
}

impl Shop {
    fn start(facilitator: &str, key: &str, seller: &Pubkey) -> Self {
        let mut child = Command::new(example("axum_seller"))
            .env("TOLLGATE_URL", facilitator)
            .env("TOLLGATE_API_KEY", key)
            .env("SELLER_SOLANA", seller.to_string())
            .env("LISTEN", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("shop on ").unwrap_or_else(|| panic!("the shop said {line:?}")).to_owned();
        Self { child, url: format!("{url}/report") }
    }
}

impl Drop for Shop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Facilitator daemons on one database, a Solana ledger, and a key.
struct World {
    ledger: EmbeddedLedger,
    rpc: SolanaRpc,
    dir: tempfile::TempDir,
    pg: Option<PgSchema>,
    daemons: Vec<Daemon>,
    key: String,
    seller: Pubkey,
}

impl World {
    /// One daemon on a SQLite file.
    async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tollgate.db");
        Self::start(dir, &format!("database_url = \"{}\"", db.display()), None, 1).await
    }

    /// Two daemons on one PostgreSQL schema; `None` without `TOLLGATE_TEST_POSTGRES_URL`.
    async fn postgres(test: &str) -> Option<Self> {
        let pg = PgSchema::create(test).await?;
        let line = format!(
            "database_url = \"{}\"\n[limits]\ndatabase_max_connections = 5\nnonce_lease_connections = 2",
            pg.url
        );
        Some(Self::start(tempfile::tempdir().unwrap(), &line, Some(pg), 2).await)
    }

    async fn start(dir: tempfile::TempDir, database: &str, pg: Option<PgSchema>, daemons: usize) -> Self {
        let ledger = EmbeddedLedger::start().await.unwrap();
        let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await.unwrap();
        let config = format!("solana_rpc_url = \"{}\"\n{database}\n", ledger.rpc_url());
        std::fs::write(dir.path().join("tollgate.toml"), config).unwrap();
        let env = [("TOLLGATE_CONFIG", "tollgate.toml")];
        let key = cli_with(dir.path(), &env, &["keys", "create", "--plan", "enterprise"]).trim().to_owned();
        let daemons = (0..daemons).map(|_| Daemon::start_with(dir.path(), &env)).collect();
        let seller = Pubkey::new_unique();
        let world = Self { ledger, rpc, dir, pg, daemons, key, seller };
        world.fund(&seller).await; // an existing account can receive any amount
        world
    }

    /// The daemon `i` (of however many there are).
    fn facilitator(&self, i: usize) -> &str {
        &self.daemons[i % self.daemons.len()].base
    }

    async fn fund(&self, to: &Pubkey) {
        let airdrop = self.rpc.request_airdrop(to, 1_000_000_000).await.unwrap();
        self.rpc.wait_for_outcome(&airdrop, Duration::from_secs(30)).await.unwrap();
    }

    /// A fresh proof: a new funded buyer pays `lamports` to the seller.
    async fn proof(&self, lamports: u64) -> String {
        self.proof_by(&Keypair::new(), lamports).await
    }

    /// A proof of `buyer` (funded now) paying `lamports` to the seller.
    async fn proof_by(&self, buyer: &Keypair, lamports: u64) -> String {
        self.fund(&buyer.pubkey()).await;
        let (blockhash, _) = self.rpc.latest_blockhash().await.unwrap();
        common::solana::signed_proof(&self.rpc.network().to_string(), buyer, &self.seller, lamports, blockhash)
    }

    async fn earned(&self) -> u64 {
        self.rpc.balance(&self.seller).await.unwrap() - 1_000_000_000
    }

    async fn finish(self) {
        drop(self.daemons);
        drop(self.ledger);
        drop(self.dir);
        if let Some(pg) = self.pg {
            pg.drop_schema().await;
        }
    }
}

/// `GET url` with the payment, as a load balancer in front of the shops forwards it: naming the
/// shop's public host (the layer names the resource by it, so every instance names the same).
async fn get(url: &str, proof: &str) -> (u16, String) {
    let request = reqwest::Client::new().get(url).header("host", "shop.example").header("X-PAYMENT", proof);
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// Two shop processes (on the two daemons, when there are two), one proof alternated between
/// them twenty times: its answer, its retry at the other shop, then refused — the count lives in
/// the database. Sixteen requests with another proof at once, over both: at most two served, the
/// rest refused with a reason (or told to retry while it settles), the money moved once.
async fn one_proof_on_two_shops_serves_its_answer_and_one_retry(w: World) {
    let shops = [Shop::start(w.facilitator(0), &w.key, &w.seller), Shop::start(w.facilitator(1), &w.key, &w.seller)];
    let proof = w.proof(PRICE).await;
    let mut statuses = Vec::new();
    for i in 0..20 {
        let (status, body) = get(&shops[i % 2].url, &proof).await;
        if status == 402 {
            assert!(body.contains("served the 2 answers it buys"), "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses[..2], [200, 200], "{statuses:?}");
    assert!(statuses[2..].iter().all(|s| *s == 402), "{statuses:?}");
    assert_eq!(w.earned().await, PRICE, "paid once");

    let proof = w.proof(PRICE).await;
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let (url, proof) = (shops[i % 2].url.clone(), proof.clone());
            tokio::spawn(async move { get(&url, &proof).await })
        })
        .collect();
    let mut served = 0;
    for racer in racers {
        match racer.await.unwrap() {
            (200, _) => served += 1,
            (402, body) => assert!(body.contains("served the 2") || body.contains("already used"), "{body}"),
            (503, _) => {}
            (status, body) => panic!("{status}: {body}"),
        }
    }
    assert!((1..=2).contains(&served), "served {served}");
    assert_eq!(w.earned().await, 2 * PRICE, "each proof paid once");
    drop(shops);
    w.finish().await;
}

/// A shop process killed and started again between the uses of a proof (its memory gone): the
/// retry is served once, a third use refused.
async fn a_restarted_shop_regains_no_answer(w: World) {
    let proof = w.proof(PRICE).await;
    for expected in [200, 200, 402] {
        let shop = Shop::start(w.facilitator(0), &w.key, &w.seller);
        assert_eq!(get(&shop.url, &proof).await.0, expected);
    }
    assert_eq!(w.earned().await, PRICE);
    w.finish().await;
}

/// Where a gated handler is: it says when it starts, waits for `go`, and says when it is dropped
/// unfinished (its request cancelled: the buyer hung up).
#[derive(Clone, Default)]
struct Gate {
    started: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
    dropped: Arc<tokio::sync::Notify>,
}

/// Notifies when dropped.
struct OnDrop(Arc<tokio::sync::Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

/// An in-process shop on `w`'s first daemon whose handler answers 500 while `failing` says so,
/// and waits for `gate` when one is given; `uses` answers a payment.
async fn shop_in_process(w: &World, uses: u32, capacity: u64, failing: Arc<AtomicUsize>, gate: Option<Gate>) -> String {
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(w.facilitator(0), &w.key))
        .accept(Price::native_sol("0.001").unwrap().pay_to(w.seller.to_string().parse().unwrap()))
        .ticket_uses(uses)
        .cache(capacity, Duration::from_secs(600), Duration::from_secs(10))
        .build()
        .unwrap();
    let handler = move || {
        let (failing, gate) = (failing.clone(), gate.clone());
        async move {
            if let Some(gate) = gate {
                gate.started.notify_one();
                let _dropped = OnDrop(gate.dropped.clone());
                gate.go.notified().await;
            }
            if failing.load(Ordering::SeqCst) > 0 {
                failing.fetch_sub(1, Ordering::SeqCst);
                return (http::StatusCode::INTERNAL_SERVER_ERROR, "broken");
            }
            (http::StatusCode::OK, "the report")
        }
    };
    let app = Router::new().route("/report", routing::get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/report", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A shop that remembers one proof at most: two proofs interleaved evict each other, and each
/// still serves its answer and one retry, no more.
async fn a_cache_of_one_proof_regains_no_answer(w: World) {
    let url = shop_in_process(&w, 2, 1, Arc::default(), None).await;
    let (a, b) = (w.proof(PRICE).await, w.proof(PRICE).await);
    let mut statuses = Vec::new();
    for proof in [&a, &b, &a, &b, &a, &b] {
        statuses.push(get(&url, proof).await.0);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 402, 402]);
    assert_eq!(w.earned().await, 2 * PRICE);
    w.finish().await;
}

/// Retries `url` with `proof` until it is served (an answer given back is given back by a task:
/// a few milliseconds), for at most 10 s.
async fn served_within(url: &str, proof: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if get(url, proof).await.0 == 200 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One answer per payment (`ticket_uses(1)`). A handler answering 500 gives its answer back: the
/// retry is served, the next refused. A buyer who hangs up before the first byte (its request
/// dropped while the handler runs) gets its answer back; one who reads the whole answer, then
/// hangs up, gets nothing more.
async fn answers_that_reach_no_buyer_are_given_back(w: World) {
    let failing = Arc::new(AtomicUsize::new(1));
    let url = shop_in_process(&w, 1, 100, failing.clone(), None).await;
    let proof = w.proof(PRICE).await;
    assert_eq!(get(&url, &proof).await.0, 500, "the handler failed after the payment");
    assert!(served_within(&url, &proof).await, "its answer was given back");
    assert_eq!(get(&url, &proof).await.0, 402, "one answer, delivered");

    let gate = Gate::default();
    let gated = shop_in_process(&w, 1, 100, Arc::default(), Some(gate.clone())).await;
    let proof = w.proof(PRICE).await;
    let address = gated.trim_start_matches("http://").trim_end_matches("/report").to_owned();
    let request =
        format!("GET /report HTTP/1.1\r\nHost: shop.example\r\nX-PAYMENT: {proof}\r\nConnection: close\r\n\r\n");
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    // Settled, the handler running: the buyer hangs up before the first byte, and the server
    // drops the request.
    gate.started.notified().await;
    drop(socket);
    tokio::time::timeout(Duration::from_secs(10), gate.dropped.notified()).await.expect("the request was dropped");
    // Its retry is served (the handler let through from now on), then no more.
    let releaser = tokio::spawn({
        let go = gate.go.clone();
        async move {
            loop {
                go.notify_one();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    assert!(served_within(&gated, &proof).await, "the hung-up answer was given back");
    assert_eq!(get(&gated, &proof).await.0, 402);

    // The whole answer read, then the buyer hangs up: it was delivered.
    let proof = w.proof(PRICE).await;
    let request =
        format!("GET /report HTTP/1.1\r\nHost: shop.example\r\nX-PAYMENT: {proof}\r\nConnection: close\r\n\r\n");
    let answer = tokio::task::spawn_blocking(move || {
        let mut socket = std::net::TcpStream::connect(&address).unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("the report"), "{answer}");
    assert_eq!(get(&gated, &proof).await.0, 402, "delivered: nothing more");
    releaser.abort();
    assert_eq!(w.earned().await, 3 * PRICE);
    w.finish().await;
}

/// An in-process shop selling an hour of `/report` for 0.001 SOL on `w`'s daemon `i`, on the
/// public origin `https://shop.example`; its handler says whom it served.
async fn pass_shop(w: &World, i: usize) -> String {
    let price = Price::native_sol("0.001").unwrap().pay_to(w.seller.to_string().parse().unwrap());
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(w.facilitator(i), &w.key))
        .accept(price.pass(Duration::from_secs(3_600)))
        .sign_in_origin("https://shop.example")
        .build()
        .unwrap();
    let handler = |axum::Extension(p): axum::Extension<tollgate::Payment>| async move { p.payer.unwrap_or_default() };
    let app = Router::new().route("/report", routing::get(handler)).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/report", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// `key`'s `SIGN-IN-WITH-X` answer to the challenge of `url`'s 402.
async fn signed_in_by(url: &str, key: &Keypair) -> String {
    use tollgate_protocol::siwx::{self, Declaration, SignIn};
    let answer = reqwest::Client::new().get(url).header("host", "shop.example").send().await.unwrap();
    assert_eq!(answer.status(), 402);
    let required = tollgate_protocol::x402::header::decode(answer.headers()["payment-required"].to_str().unwrap());
    let required: serde_json::Value = required.unwrap();
    let declared: Declaration = serde_json::from_value(required["extensions"][siwx::EXTENSION].clone()).unwrap();
    let mut signed =
        SignIn::answer(&declared.info, &declared.supported_chains[0], key.pubkey().to_string(), String::new());
    signed.signature = key.sign_message(siwx::message(&signed).unwrap().as_bytes()).to_string();
    signed.to_header()
}

/// `GET url` with a `SIGN-IN-WITH-X` header.
async fn sign_in(url: &str, header: &str) -> (u16, String) {
    let request = reqwest::Client::new().get(url).header("host", "shop.example").header("SIGN-IN-WITH-X", header);
    let answer = request.send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// A pass bought at one shop (on the first daemon) opens the other (on the second, when there
/// are two) to its payer's sign-in; each signed message is used once over both, at once too; a
/// stranger's wallet is refused; the money moved once.
async fn a_pass_opens_every_shop_to_its_payer_once_per_message(w: World) {
    let shops = [pass_shop(&w, 0).await, pass_shop(&w, 1).await];
    let buyer = Keypair::new();
    let proof = w.proof_by(&buyer, PRICE).await;
    assert_eq!(get(&shops[0], &proof).await.0, 200, "bought");
    assert_eq!(get(&shops[1], &proof).await.0, 402, "a pass's payment serves one answer");

    let header = signed_in_by(&shops[1], &buyer).await;
    assert_eq!(sign_in(&shops[1], &header).await, (200, buyer.pubkey().to_string()));
    let (status, body) = sign_in(&shops[0], &header).await;
    assert_eq!(status, 402, "the message was used at the other shop");
    assert!(body.contains("used before"), "{body}");

    // One fresh message sent to both shops at once, eight times each: served once.
    let header = signed_in_by(&shops[0], &buyer).await;
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let (url, header) = (shops[i % 2].clone(), header.clone());
            tokio::spawn(async move { sign_in(&url, &header).await })
        })
        .collect();
    let mut served = 0;
    for racer in racers {
        match racer.await.unwrap() {
            (200, _) => served += 1,
            (402, body) => assert!(body.contains("used before"), "{body}"),
            (status, body) => panic!("{status}: {body}"),
        }
    }
    assert_eq!(served, 1);

    let stranger = Keypair::new();
    let (status, body) = sign_in(&shops[1], &signed_in_by(&shops[1], &stranger).await).await;
    assert_eq!(status, 402);
    assert!(body.contains("holds no pass"), "{body}");
    assert_eq!(w.earned().await, PRICE, "paid once");
    w.finish().await;
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::World::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(world) = super::World::postgres(stringify!($name)).await else { return };
                    super::$name(world).await;
                }
            )*
        }
    };
}

on_both!(
    one_proof_on_two_shops_serves_its_answer_and_one_retry,
    a_restarted_shop_regains_no_answer,
    a_cache_of_one_proof_regains_no_answer,
    answers_that_reach_no_buyer_are_given_back,
    a_pass_opens_every_shop_to_its_payer_once_per_message,
);
