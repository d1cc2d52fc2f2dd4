//! The world of the proxy's end-to-end tests, in real processes where it matters: a
//! facilitator (in process, on the embedded Solana ledger and a SQLite file), the Python
//! upstream of `examples/upstream.py` (run by `python3`), and the `tollgate-proxy` binary.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::solana::build::Transfer;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::{AppState, router};

/// The secret the proxy signs identity headers with (the upstream checks them).
pub const SECRET: &str = "proxy-upstream-shared-secret";

/// A facilitator served on 127.0.0.1.
pub struct Facilitator {
    pub url: String,
    pub key: String,
    pub state: AppState,
    _dir: tempfile::TempDir,
}

impl Facilitator {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("f.db").to_str().unwrap()).unwrap(),
            dev: true,
            ..Config::default()
        };
        let state = AppState::from_config(config).await.unwrap();
        let created = admin::create_key(
            &*state.store,
            NewKey { plan: Plan::Enterprise, rpm: Some(100_000), label: None, account: None, env: KeyEnv::Test },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = router(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, key: created.secret.expose().to_owned(), state, _dir: dir }
    }

    pub fn network(&self) -> String {
        self.state.chains.embedded_solana().unwrap().rpc.network().to_string()
    }

    pub async fn airdrop(&self, to: &Pubkey, sol: u64) {
        let answer = reqwest::Client::new()
            .post(format!("{}/dev/airdrop", self.url))
            .bearer_auth(&self.key)
            .json(&json!({"address": to.to_string(), "amount": sol}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success());
    }

    pub async fn balance(&self, who: &Pubkey) -> u64 {
        self.state.chains.embedded_solana().unwrap().rpc.balance(who).await.unwrap()
    }

    /// A fresh x402 v1 `exact-native` proof: `buyer` pays `lamports` to `seller`.
    pub async fn proof(&self, buyer: &Keypair, seller: &Pubkey, lamports: u64) -> String {
        let rpc = &self.state.chains.embedded_solana().unwrap().rpc;
        let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
        let message = Transfer { from: buyer.pubkey(), to: *seller, lamports, priority_fee: None }.message(&blockhash);
        let tx = solana_sdk::transaction::Transaction::new(&[buyer], message, blockhash);
        let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
        tollgate::protocol::x402::header::encode(&json!({
            "x402Version": 1, "scheme": "exact-native", "network": self.network(),
            "payload": {"transaction": encoded}
        }))
        .unwrap()
    }
}

/// A child process killed when dropped.
pub struct Process {
    pub child: Child,
    /// The URL it printed (`listening on …`).
    pub url: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` and waits for its `listening on <url>` line.
fn start(mut command: Command) -> Process {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("the process ended before listening").unwrap();
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.trim().to_owned();
        }
    };
    // Keep reading its output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Process { child, url }
}

/// The Python upstream.
pub fn upstream() -> Process {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/upstream.py");
    let mut command = Command::new("python3");
    command.arg(script).args(["--port", "0"]).env("TOLLGATE_PROXY_SECRET", SECRET);
    start(command)
}

/// The proxy binary on `config` (its `listen` is 127.0.0.1:0).
pub fn proxy(config: &Path, api_key: &str) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate-proxy"));
    command
        .arg("--config")
        .arg(config)
        // More serving threads than this machine may have cores: tickets, reloads and the
        // drain are shared by threads that each accept on their own socket.
        .args(["--watch-ms", "100", "--drain-secs", "5", "--threads", "3"])
        .env("TOLLGATE_API_KEY", api_key)
        .env("TOLLGATE_PROXY_SECRET", SECRET)
        .env("TOLLGATE_LOG", "warn");
    start(command)
}

/// Writes `text` to `dir/proxy.toml`.
pub fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A GET (or `method`) with optional payment header: status, headers, body text.
pub async fn send(method: &str, url: &str, payment: Option<&str>) -> (u16, http::HeaderMap, String) {
    let mut request = reqwest::Client::new().request(method.parse().unwrap(), url);
    if let Some(proof) = payment {
        request = request.header("X-PAYMENT", proof);
    }
    let answer = request.send().await.unwrap();
    let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
    (status, headers, answer.text().await.unwrap_or_default())
}

/// The body as JSON.
pub fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}
