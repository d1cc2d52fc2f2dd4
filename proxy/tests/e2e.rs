//! `tollgate-proxy` in front of a Python upstream, paid on the embedded Solana ledger: what it
//! sells, what it refuses, what it never settles, and how it streams, reloads and stops.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod common;

use std::io::{Read as _, Write as _};
use std::time::Duration;

use common::{Facilitator, Process, json_of, send};
use serde_json::Value;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;

const CENT: u64 = 10_000_000; // 0.01 SOL

/// A facilitator, the Python upstream, the seller's wallet and the proxy in front of it all.
struct World {
    f: Facilitator,
    upstream: Process,
    proxy: Process,
    seller: Pubkey,
    dir: tempfile::TempDir,
}

fn config(upstream: &str, facilitator: &str, seller: &Pubkey, forecast_price: &str) -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let price =
        |amount: &str| format!("[[route.accept]]\nasset = \"SOL\"\namount = \"{amount}\"\npay_to = \"{seller}\"\n");
    format!(
        r#"
listen = "127.0.0.1:0"
upstream = "{upstream}"

[facilitator]
url = "{facilitator}"
api_key_env = "TOLLGATE_API_KEY"

[timeouts]
response_ms = 1500
body_idle_ms = 500


[identity]
secret_env = "TOLLGATE_PROXY_SECRET"

[[route]]
name = "status"
path = "/status"
free = true

[[route]]
name = "free-echo"
path = "/free-echo/{{*rest}}"
free = true
rewrite = "/echo/{{rest}}"

[[route]]
name = "careless"
path = "/careless"
free = true


[[route]]
name = "forecast"
path = "/forecast"
methods = ["GET"]
description = "Tomorrow's weather"
{forecast}
[[route]]
name = "echo"
path = "/echo/{{*rest}}"
{cent}
[[route]]
name = "whoami"
path = "/whoami"
{two}
[[route]]
name = "upload"
path = "/upload"
methods = ["POST"]
{cent}
[[route]]
name = "events"
path = "/events"
{cent}
[[route]]
name = "slow"
path = "/slow"
settle = "after"
{cent}
[[route]]
name = "hangup"
path = "/hangup"
settle = "after"
{cent}
[[route]]
name = "down"
path = "/down"
settle = "after"
upstream = "http://{closed}"
{cent}"#,
        forecast = price(forecast_price),
        cent = price("0.01"),
        two = price("0.02"),
    )
}

impl World {
    async fn start() -> Self {
        let f = Facilitator::start().await;
        let seller = Pubkey::new_unique();
        f.airdrop(&seller, 1).await;
        let upstream = common::upstream();
        let dir = tempfile::tempdir().unwrap();
        let path = common::write_config(dir.path(), &config(&upstream.url, &f.url, &seller, "0.01"));
        let proxy = common::proxy(&path, &f.key);
        Self { f, upstream, proxy, seller, dir }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.proxy.url)
    }

    /// A buyer with 1 SOL.
    async fn buyer(&self) -> Keypair {
        let buyer = Keypair::new();
        self.f.airdrop(&buyer.pubkey(), 1).await;
        buyer
    }

    async fn proof(&self, buyer: &Keypair, lamports: u64) -> String {
        self.f.proof(buyer, &self.seller, lamports).await
    }

    async fn earned(&self) -> u64 {
        self.f.balance(&self.seller).await - 1_000_000_000
    }

    /// Sends raw bytes to the proxy and reads the whole answer (the request says `Connection: close`).
    fn raw(&self, request: &str) -> String {
        let address = self.proxy.url.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }
}

fn offered_amount(body: &str) -> String {
    json_of(body)["accepts"][0]["maxAmountRequired"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paid_route_is_served_once_paid_and_its_proof_serves_only_its_request() {
    let w = World::start().await;

    // Free, unmatched, and priced.
    let (status, _, body) = send("GET", &w.url("/status"), None).await;
    assert_eq!((status, json_of(&body)["status"].as_str()), (200, Some("up")));
    assert_eq!(send("GET", &w.url("/nothing-here"), None).await.0, 404);
    assert_eq!(send("POST", &w.url("/forecast"), None).await.0, 405, "the route takes GET only");
    let (status, headers, body) = send("GET", &w.url("/forecast"), None).await;
    assert_eq!(status, 402, "{body}");
    assert!(headers.contains_key("payment-required"));
    let offer = &json_of(&body)["accepts"][0];
    assert_eq!(offer["maxAmountRequired"], "10000000");
    assert_eq!(offer["payTo"], w.seller.to_string());
    assert_eq!(offer["resource"], w.url("/forecast"), "the resource is the proxy's URL");
    assert_eq!(offer["description"], "Tomorrow's weather");

    // Paid: served, the money moved once; the same proof serves the same request again.
    let buyer = w.buyer().await;
    let proof = w.proof(&buyer, CENT).await;
    let (status, headers, body) = send("GET", &w.url("/forecast"), Some(&proof)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["forecast"], "sunny, 21 C");
    assert!(headers.contains_key("x-payment-response"), "the settlement is told");
    assert_eq!(w.earned().await, CENT);
    assert_eq!(send("GET", &w.url("/forecast"), Some(&proof)).await.0, 200);
    assert_eq!(w.earned().await, CENT, "served again as its ticket, not paid again");
    // ... once: a payment serves the answer and one retry (ticket_uses = 2), not a flood.
    let (status, _, body) = send("GET", &w.url("/forecast"), Some(&proof)).await;
    assert_eq!(status, 402, "{body}");
    assert!(body.contains("pay again"), "{body}");

    // Replayed on another query, route or method: refused, nothing moves.
    for (method, path) in [("GET", "/forecast?city=Oslo"), ("GET", "/echo/forecast"), ("GET", "/whoami")] {
        let (status, _, body) = send(method, &w.url(path), Some(&proof)).await;
        assert_eq!(status, 402, "{method} {path}: {body}");
    }
    let echo_proof = w.proof(&buyer, CENT).await;
    assert_eq!(send("GET", &w.url("/echo/a"), Some(&echo_proof)).await.0, 200);
    assert_eq!(send("POST", &w.url("/echo/a"), Some(&echo_proof)).await.0, 402, "another method");
    assert_eq!(w.earned().await, 2 * CENT);

    // A dearer route with a cheaper proof: refused.
    let cheap = w.proof(&buyer, CENT).await;
    let (status, _, body) = send("GET", &w.url("/whoami"), Some(&cheap)).await;
    assert_eq!((status, offered_amount(&body)), (402, "20000000".to_owned()), "{body}");
    assert_eq!(w.earned().await, 2 * CENT);

    // The upstream learns who paid, in headers it checks with the shared secret (in Python).
    let dear = w.proof(&buyer, 2 * CENT).await;
    let (status, _, body) = send("GET", &w.url("/whoami"), Some(&dear)).await;
    assert_eq!(status, 200, "{body}");
    let paid_by = &json_of(&body)["paid_by"];
    assert_eq!(paid_by["payer"], buyer.pubkey().to_string(), "{body}");
    assert_eq!(paid_by["amount"], "20000000");
    assert_eq!(paid_by["asset"], "native");
    assert_eq!(paid_by["network"], w.f.network());
    assert!(paid_by["transaction"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(w.earned().await, 4 * CENT);
}

/// Two proxy processes on one facilitator (instances behind a load balancer). One proof sent to
/// both at once, three times: the money moves once, nothing fails, and the proof serves at most
/// its uses (2) in all. Another proof alternated between them twenty times: its answer and one
/// retry, then "pay again". Sixteen requests with a third proof at once over both: at most two
/// served, the rest refused with a reason (or told to retry while it settles). The facilitator
/// counts the answers for every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_proxies_on_one_facilitator_settle_a_proof_once_and_serve_its_uses_in_all() {
    let w = World::start().await;
    // Behind one load balancer, the instances name the resources by its public URL.
    let dir = tempfile::tempdir().unwrap();
    let shared =
        format!("public_url = \"https://shop.example\"\n{}", config(&w.upstream.url, &w.f.url, &w.seller, "0.01"));
    let path = common::write_config(dir.path(), &shared);
    let (first, second) = (common::proxy(&path, &w.f.key), common::proxy(&path, &w.f.key));
    let buyer = w.buyer().await;
    let proof = w.proof(&buyer, CENT).await;
    let urls = [format!("{}/forecast", first.url), format!("{}/forecast", second.url)];
    let mut served = 0;
    for _ in 0..3 {
        let (a, b) = tokio::join!(send("GET", &urls[0], Some(&proof)), send("GET", &urls[1], Some(&proof)));
        for (status, _, body) in [a, b] {
            // 503: the other instance's settlement of it is still under way (retry later).
            assert!([200, 402, 503].contains(&status), "{status}: {body}");
            served += usize::from(status == 200);
        }
    }
    assert_eq!(w.earned().await, CENT, "settled once");
    assert!((1..=2).contains(&served), "served {served} times: at most 2 uses in all");

    let proof = w.proof(&buyer, CENT).await;
    let mut statuses = Vec::new();
    for i in 0..20 {
        let (status, _, body) = send("GET", &urls[i % 2], Some(&proof)).await;
        if status == 402 {
            assert!(body.contains("served the 2 answers"), "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses[..2], [200, 200], "the answer, then its retry at the other instance");
    assert!(statuses[2..].iter().all(|s| *s == 402), "{statuses:?}");
    assert_eq!(w.earned().await, 2 * CENT);

    let proof = w.proof(&buyer, CENT).await;
    let racers: Vec<_> = (0..16)
        .map(|i| {
            let (url, proof) = (urls[i % 2].clone(), proof.clone());
            tokio::spawn(async move { send("GET", &url, Some(&proof)).await })
        })
        .collect();
    let mut served = 0;
    for racer in racers {
        let (status, _, body) = racer.await.unwrap();
        match status {
            200 => served += 1,
            402 => assert!(body.contains("pay again") || body.contains("already used"), "{body}"),
            503 => {}
            other => panic!("{other}: {body}"),
        }
    }
    assert!((1..=2).contains(&served), "served {served} times");
    assert_eq!(w.earned().await, 3 * CENT, "each proof settled once");
}

/// `key`'s `SIGN-IN-WITH-X` answer to the sign-in challenge of a 402's `PAYMENT-REQUIRED`.
fn signed_in(required: &http::HeaderMap, key: &Keypair) -> String {
    use tollgate::protocol::siwx::{self, Declaration, SignIn};
    let required: Value =
        tollgate::protocol::x402::header::decode(required["payment-required"].to_str().unwrap()).unwrap();
    let declared: Declaration = serde_json::from_value(required["extensions"][siwx::EXTENSION].clone()).unwrap();
    let mut answer =
        SignIn::answer(&declared.info, &declared.supported_chains[0], key.pubkey().to_string(), String::new());
    answer.signature = key.sign_message(siwx::message(&answer).unwrap().as_bytes()).to_string();
    answer.to_header()
}

/// `GET url` with a `SIGN-IN-WITH-X` header.
async fn sign_in(url: &str, header: &str) -> (u16, String) {
    let answer = reqwest::Client::new().get(url).header("SIGN-IN-WITH-X", header).send().await.unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap_or_default())
}

/// A day pass (`pass_secs`) sold by two proxies behind one public URL: bought at one on one
/// path of the route, it opens the other, on another path, to its payer's signed message, which reaches the upstream as the payer's identity
/// (never the sign-in header); the message serves once over both; a copy of the payment header
/// and a stranger's wallet are refused; paid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_sold_by_two_proxies_opens_both_to_its_payer() {
    let w = World::start().await;
    let dir = tempfile::tempdir().unwrap();
    let daily = format!(
        "\n[[route]]\nname = \"daily\"\npath = \"/daily/{{*rest}}\"\nrewrite = \"/echo/{{rest}}\"\n\
         [[route.accept]]\nasset = \"SOL\"\namount = \"0.02\"\npay_to = \"{seller}\"\npass_secs = 86400\n\
         \n[[route]]\nname = \"weekly\"\npath = \"/weekly\"\nrewrite = \"/echo/weekly\"\n\
         [[route.accept]]\nasset = \"SOL\"\namount = \"0.05\"\npay_to = \"{seller}\"\npass_secs = 604800\n",
        seller = w.seller
    );
    let shared = format!(
        "public_url = \"https://shop.example\"\n{}{daily}",
        config(&w.upstream.url, &w.f.url, &w.seller, "0.01")
    );
    let path = common::write_config(dir.path(), &shared);
    let (first, second) = (common::proxy(&path, &w.f.key), common::proxy(&path, &w.f.key));
    let urls = [format!("{}/daily/report", first.url), format!("{}/daily/report", second.url)];

    let buyer = w.buyer().await;
    let proof = w.proof(&buyer, 2 * CENT).await;
    assert_eq!(send("GET", &urls[0], Some(&proof)).await.0, 200, "bought");
    let (status, _, body) = send("GET", &urls[1], Some(&proof)).await;
    assert_eq!(status, 402, "a pass's payment serves one answer: {body}");

    // Another path of the route, at the other proxy: the pass opens the route.
    let other = format!("{}/daily/other?page=2", second.url);
    let (status, required, _) = send("GET", &other, None).await;
    assert_eq!(status, 402);
    let header = signed_in(&required, &buyer);
    let (status, body) = sign_in(&other, &header).await;
    assert_eq!(status, 200, "{body}");
    let seen = json_of(&body);
    let headers = seen["headers"].as_object().unwrap();
    let named = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
    assert_eq!(named("x-tollgate-payer"), Some(Value::from(buyer.pubkey().to_string())));
    assert_eq!(named("sign-in-with-x"), None, "the sign-in stays at the proxy");
    let (status, body) = sign_in(&urls[0], &header).await;
    assert_eq!(status, 402);
    assert!(body.contains("used before"), "{body}");
    // Another route's pass is not opened by it.
    let weekly = format!("{}/weekly", first.url);
    let (_, required, _) = send("GET", &weekly, None).await;
    let (status, body) = sign_in(&weekly, &signed_in(&required, &buyer)).await;
    assert_eq!(status, 402);
    assert!(body.contains("holds no pass"), "{body}");

    let stranger = Keypair::new();
    let (_, required, _) = send("GET", &urls[0], None).await;
    let (status, body) = sign_in(&urls[0], &signed_in(&required, &stranger)).await;
    assert_eq!(status, 402);
    assert!(body.contains("holds no pass"), "{body}");
    assert_eq!(w.earned().await, 2 * CENT, "paid once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_upstream_gets_clean_headers_and_crafted_requests_are_refused() {
    let w = World::start().await;
    let buyer = w.buyer().await;

    // What the upstream receives: no payment header, no hop-by-hop fields, no identity a
    // client forged, forwarding headers the proxy wrote.
    let proof = w.proof(&buyer, CENT).await;
    let answer = reqwest::Client::new()
        .get(w.url("/echo/x?q=1"))
        .header("X-PAYMENT", &proof)
        .header("Connection", "keep-alive, X-Drop-Me")
        .header("X-Drop-Me", "1")
        .header("X-Kept", "1")
        .header("X-Tollgate-Payer", "mallory")
        .header("X-Forwarded-For", "6.6.6.6")
        .header("Forwarded", "for=6.6.6.6")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let seen: Value = answer.json().await.unwrap();
    let headers: std::collections::BTreeMap<String, String> = seen["headers"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(seen["path"], "/echo/x?q=1");
    for gone in ["x-payment", "x-drop-me", "connection"] {
        assert!(!headers.contains_key(gone), "{gone} reached the upstream: {headers:?}");
    }
    assert_eq!(headers["x-kept"], "1");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "the client's own is not believed");
    assert!(headers["forwarded"].starts_with("for=127.0.0.1;host=\"127.0.0.1:"), "{}", headers["forwarded"]);
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["host"], w.upstream.url.trim_start_matches("http://"));
    assert_eq!(headers["x-tollgate-payer"], buyer.pubkey().to_string(), "the proxy's, not the client's");
    assert!(headers.contains_key("x-tollgate-signature"));

    // A free route, rewritten: a client's identity headers never pass.
    let answer = reqwest::Client::new()
        .get(w.url("/free-echo/abc"))
        .header("X-Tollgate-Payer", "mallory")
        .header("X-Tollgate-Signature", "t=1,v1=00")
        .send()
        .await
        .unwrap();
    let seen: Value = answer.json().await.unwrap();
    assert_eq!(seen["path"], "/echo/abc");
    let forged = seen["headers"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.to_ascii_lowercase().starts_with("x-tollgate"))
        .count();
    assert_eq!(forged, 0, "{seen}");

    // Paths that could reach another route at the upstream: 400; case and escapes still priced.
    let host = w.proxy.url.trim_start_matches("http://").to_owned();
    for path in [
        "/status/../forecast",
        "/status/%2e%2e/forecast",
        "/status/.%2E/forecast",
        "//forecast",
        "/status%2f..%2fforecast",
        "/forecast;jsessionid=1",
        "/status\\..\\forecast",
        "/./forecast",
    ] {
        let answer = w.raw(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
    }
    // A host that is not one (a colon or bracket outside an IPv6 literal, a port of letters) is
    // refused, not routed as some other host (found by fuzzing).
    for bad_host in ["127.0.0.1:x:80", "]:", "127.0.0.1[::1]:80", "127.0.0.1:8o"] {
        let answer = w.raw(&format!("GET /forecast HTTP/1.1\r\nHost: {bad_host}\r\nConnection: close\r\n\r\n"));
        assert!(answer.starts_with("HTTP/1.1 400"), "{bad_host}: {answer}");
    }
    for path in ["/FORECAST", "/%66orecast", "/forecast/"] {
        let answer = w.raw(&format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
        assert!(answer.starts_with("HTTP/1.1 402"), "{path} must be priced: {answer}");
    }
    // An absolute-form target naming another host is routed by it, path checked the same.
    let answer =
        w.raw(&format!("GET http://{host}/status/../forecast HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A GET with a body: refused (it has no meaning, and hides a second request).
    let hidden = "GET /forecast?city=SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n";
    let answer = w.raw(&format!(
        "GET /status HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{hidden}",
        hidden.len()
    ));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A body the upstream does not read is not read as its next request: the connection that
    // carried a body is not kept (else the next buyer would get the hidden request's answer).
    let hidden = "GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n";
    let answer = w.raw(&format!(
        "POST /careless HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{hidden}",
        hidden.len()
    ));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    for _ in 0..4 {
        let (status, _, body) = send("GET", &w.url("/status"), None).await;
        assert_eq!((status, json_of(&body)["status"].as_str()), (200, Some("up")), "desynchronized: {body}");
    }

    // A client that stalls mid-body is cut off (it would hold an upstream connection).
    let answer = w.raw(&format!("POST /free-echo/a HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100\r\n\r\nabc"));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("body could not be read"), "{answer}");

    // Conflicting framing: never both lengths to the upstream, and no second request hidden
    // in the body reaches it unpriced.
    let smuggled = "GET /forecast HTTP/1.1\r\nHost: x\r\n\r\n";
    let body = format!("0\r\n\r\n{smuggled}");
    let answer = w.raw(&format!(
        "POST /free-echo/a HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    assert!(!answer.contains("sunny"), "a smuggled request was served: {answer}");
    if answer.starts_with("HTTP/1.1 200") {
        let seen = json_of(answer.split("\r\n\r\n").nth(1).unwrap_or_default());
        let names: Vec<String> =
            seen["headers"].as_object().map(|h| h.keys().map(|k| k.to_ascii_lowercase()).collect()).unwrap_or_default();
        assert!(
            !(names.contains(&"content-length".to_owned()) && names.contains(&"transfer-encoding".to_owned())),
            "{seen}"
        );
        assert!(!seen["body"].as_str().unwrap_or_default().contains("GET /forecast"), "{seen}");
    } else {
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    assert_eq!(w.earned().await, CENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_down_slow_or_hanging_up_is_not_settled_where_settling_comes_after() {
    let w = World::start().await;
    let buyer = w.buyer().await;
    for (path, status) in [("/down", 502), ("/slow?ms=4000", 504), ("/hangup", 502)] {
        let proof = w.proof(&buyer, CENT).await;
        let (got, _, body) = send("GET", &w.url(path), Some(&proof)).await;
        assert_eq!(got, status, "{path}: {body}");
        assert_eq!(w.earned().await, 0, "{path}: nothing settled");
    }
    // The buyer's money is still its own: a request the upstream answers is paid once.
    let proof = w.proof(&buyer, CENT).await;
    let (status, _, body) = send("GET", &w.url("/slow?ms=10"), Some(&proof)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(w.earned().await, CENT);
}

/// The largest memory the proxy process has held (`VmHWM`), in KiB.
fn peak_kib(process: &Process) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_and_event_streams_pass_through_paid_and_unbuffered() {
    let w = World::start().await;
    let buyer = w.buyer().await;

    // 50 MiB up, paid: it reaches the upstream whole while the proxy's memory stays flat.
    let _ = send("GET", &w.url("/status"), None).await;
    let before = peak_kib(&w.proxy);
    let blob: Vec<u8> = (0..50 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let digest = {
        use sha2::Digest as _;
        sha2::Sha256::digest(&blob).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let proof = w.proof(&buyer, CENT).await;
    let answer =
        reqwest::Client::new().post(w.url("/upload")).header("X-PAYMENT", &proof).body(blob).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let stored: Value = answer.json().await.unwrap();
    assert_eq!((stored["bytes"].as_u64(), stored["sha256"].as_str()), (Some(50 * 1024 * 1024), Some(digest.as_str())));
    let grown = peak_kib(&w.proxy) - before;
    assert!(grown < 16 * 1024, "the proxy grew {grown} KiB for a 50 MiB upload");
    assert_eq!(w.earned().await, CENT);

    // Server-sent events, one a minute: the first arrives now, not when the stream ends.
    let proof = w.proof(&buyer, CENT).await;
    let first_event = async {
        let mut answer =
            reqwest::Client::new().get(w.url("/events?n=3&ms=60000")).header("X-PAYMENT", &proof).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "text/event-stream");
        String::from_utf8(answer.chunk().await.unwrap().unwrap().to_vec()).unwrap()
    };
    let first = tokio::time::timeout(Duration::from_secs(20), first_event).await.expect("the first event is held back");
    assert!(first.starts_with("id: 0\n"), "{first}");
    assert_eq!(w.earned().await, 2 * CENT);
}

/// `name`'s counter in the proxy's `/metrics`, with `label` among its labels.
async fn counter(w: &World, name: &str, label: &str) -> u64 {
    let text = reqwest::get(w.url("/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_under_load_loses_no_request_and_a_bad_file_keeps_the_routes() {
    let w = World::start().await;
    let path = w.dir.path().join("proxy.toml");
    // Not ready while an upstream is down (the "down" route's, on purpose); ready once the
    // routes in force need only reachable ones.
    // The public listener does not name the upstreams (ops_listen does).
    let (status, _, body) = send("GET", &w.url("/readyz"), None).await;
    assert_eq!((status, json_of(&body)), (503, serde_json::json!({"status": "unready"})), "{body}");
    assert_eq!(send("GET", &w.url("/healthz"), None).await.0, 200);
    // The same routes without "down" (the last one).
    let config = |upstream: &str, facilitator: &str, seller: &Pubkey, price: &str| {
        config(upstream, facilitator, seller, price).split("[[route]]\nname = \"down\"").next().unwrap().to_owned()
    };

    // Load while the price changes: every answer is a 200 or a 402 at the old or the new price.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..6 {
        let (url_free, url_paid, stop) = (w.url("/status"), w.url("/forecast"), stop.clone());
        load.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let free = client.get(&url_free).send().await.unwrap().status().as_u16();
                let paid = client.get(&url_paid).send().await.unwrap();
                let status = paid.status().as_u16();
                let amount = offered_amount(&paid.text().await.unwrap());
                seen.push((free, status, amount));
            }
            seen
        }));
    }
    let (upstream, facilitator) = (w.upstream.url.clone(), w.f.url.clone());
    for price in ["0.02", "0.03", "0.02"] {
        std::fs::write(&path, config(&upstream, &facilitator, &w.seller, price)).unwrap();
        let wanted = format!("{}0000000", &price[3..]);
        wait_for(|| async { offered_amount(&send("GET", &w.url("/forecast"), None).await.2) == wanted }).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answers = 0;
    for task in load {
        for (free, status, amount) in task.await.unwrap() {
            answers += 1;
            assert_eq!((free, status), (200, 402));
            assert!(["10000000", "20000000", "30000000"].contains(&amount.as_str()), "{amount}");
        }
    }
    assert!(answers > 0);

    // An invalid file: logged, counted, and the routes in force stay.
    std::fs::write(&path, "listen = \"127.0.0.1:0\"\n[[route]]\nname = 1\n").unwrap();
    wait_for(|| async { counter(&w, "tollgate_proxy_reloads_total", "result=\"error\"").await >= 1 }).await;
    assert_eq!(offered_amount(&send("GET", &w.url("/forecast"), None).await.2), "20000000");
    // SIGHUP reloads the file as it is (a good one again).
    std::fs::write(&path, config(&upstream, &facilitator, &w.seller, "0.01")).unwrap();
    let pid = w.proxy.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    wait_for(|| async { offered_amount(&send("GET", &w.url("/forecast"), None).await.2) == "10000000" }).await;
    wait_for(|| async { send("GET", &w.url("/readyz"), None).await.0 == 200 }).await;

    // Counted by route and outcome.
    assert!(counter(&w, "tollgate_proxy_requests_total", "outcome=\"challenged\"").await > 0);
    assert!(counter(&w, "tollgate_proxy_requests_total", "route=\"status\"").await > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_proxy_finishes_the_streams_in_progress() {
    let mut w = World::start().await;
    let buyer = w.buyer().await;
    let proof = w.proof(&buyer, CENT).await;
    let mut answer =
        reqwest::Client::new().get(w.url("/events?n=3&ms=300")).header("X-PAYMENT", &proof).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut received = String::from_utf8(answer.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    let pid = w.proxy.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    while let Some(chunk) = answer.chunk().await.unwrap() {
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(received.matches("data: ").count(), 3, "{received}");
    let exited = w.proxy.child.wait().unwrap();
    assert!(exited.success(), "{exited}");
    assert!(reqwest::get(w.url("/healthz")).await.is_err(), "no new connections after shutdown");
    assert_eq!(w.earned().await, CENT);
}

/// Polls `condition` until it holds (10 s at most).
async fn wait_for<F, Fut>(condition: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the condition did not hold within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_is_terminated_and_the_upstream_is_told_https() {
    let f = Facilitator::start().await;
    let seller = Pubkey::new_unique();
    let upstream = common::upstream();
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let tls = format!("[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n", cert.display(), key.display());
    let text =
        config(&upstream.url, &f.url, &seller, "0.01").replacen("[facilitator]", &format!("{tls}[facilitator]"), 1);
    let proxy = common::proxy(&common::write_config(dir.path(), &text), &f.key);
    let address: std::net::SocketAddr = proxy.url.trim_start_matches("https://").parse().unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap())
        .resolve("localhost", address)
        .build()
        .unwrap();
    let base = format!("https://localhost:{}", address.port());

    let seen: Value = client.get(format!("{base}/free-echo/x")).send().await.unwrap().json().await.unwrap();
    let proto = seen["headers"].as_object().unwrap().iter().find(|(k, _)| k.eq_ignore_ascii_case("x-forwarded-proto"));
    assert_eq!(proto.map(|(_, v)| v.as_str().unwrap()), Some("https"), "{seen}");
    let answer = client.get(format!("{base}/forecast")).send().await.unwrap();
    assert_eq!(answer.status(), 402);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["accepts"][0]["resource"], format!("{base}/forecast"), "the resource is the https URL");
    // Plain HTTP to the TLS port gets no answer.
    assert!(reqwest::get(format!("http://{address}/status")).await.is_err());
}
