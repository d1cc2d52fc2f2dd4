//! `tollgate-load`: the pieces of the x402 load benchmark that need a chain or a signer
//! (`scripts/bench-load` starts the processes and drives them with `wrk`).
//!
//! - `prepare`: on a running anvil, deploys a test token, funds a payer and the facilitator's
//!   account, and writes N distinct signed payments as x402 v2 `/verify` bodies (one per line)
//!   and as a `wrk` script that posts them round-robin. `--scheme eip3009` (the default): EIP-3009
//!   authorizations of an EIP-3009 token; `permit2`: `exact` Permit2 permits of a plain ERC-20
//!   (Permit2 and the x402 proxies installed first, the payer's approval given once); `upto`:
//!   `upto` permits of it, verified for their most.
//! - `proxy`: a JSON-RPC proxy in front of anvil that counts the calls by method
//!   (`GET /__counts`), to tell how many RPC calls one verify costs.
//! - `pairs`: `/verify` then `/settle` of the same payloads, one after the other, counting the
//!   RPC calls each makes through the proxy.
//! - `upstream`, `stub-facilitator`: the fixtures of `scripts/bench-proxy` (`tollgate-proxy`
//!   against the service it sells, directly).
//! - `repeats`: a shop paid through the daemon, each payment answered, then repeated: the
//!   latency of first answers and of repeats (`scripts/bench-answers`).
//! - `channels`: a shop selling an unpaid route, an `exact` one and one paid from channels
//!   (`batch-settlement`) through the daemon: requests/s, latency, CPU, RPC calls and
//!   transactions per paid request (`scripts/bench-channels`); with `--redis`, also through two
//!   instances (this process and a `channel-shop` child) sharing their channels in Redis.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct as _;
use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use tollgate_encoding::permit2::{self as wire, EXACT_PROXY, PERMIT2, Permit2Message, UPTO_PROXY};
use tollgate_facilitator::chains::evm::erc20::TransferWithAuthorization;
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::devnet::{DevToken, TokenKind, install_permit2, send_evm, set_evm_balance};

const TOKEN_NAME: &str = "Tollgate USD";
const TOKEN_VERSION: &str = "2";
/// Base units each authorization pays (0.01 of a 6-decimal token).
const PRICE: u128 = 10_000;

mod catalog;
mod channels;
mod proxied;
mod repeats;

#[derive(Debug, Parser)]
#[command(name = "tollgate-load", about = "Fixtures, RPC counting and verify/settle pairs for scripts/bench-load")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The discovery catalog's query latency: fills a catalog, times list and search queries.
    Catalog {
        /// A SQLite file (made anew) or a PostgreSQL URL (an empty schema).
        #[arg(long)]
        database: String,
        /// How many entries.
        #[arg(long, default_value_t = 100_000)]
        entries: usize,
        /// Runs of each query.
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Only fill the catalog (`fill`), or only time the queries of one filled before
        /// (`measure`: e.g. after PostgreSQL's `ANALYZE`, as its autovacuum runs after a bulk
        /// load); default both.
        #[arg(long, default_value = "both")]
        phase: String,
    },
    /// Deploy the token, fund the accounts, sign the authorizations; write the bodies to `--out`.
    Prepare {
        /// anvil's RPC URL.
        #[arg(long)]
        rpc: String,
        /// How many distinct authorizations.
        #[arg(long, default_value_t = 2000)]
        count: usize,
        /// The facilitator's settling key (its account is funded with ETH for gas).
        #[arg(long)]
        facilitator_key: PrivateKeySigner,
        /// What the payments are: `eip3009`, `permit2` (`exact` through Permit2) or `upto`.
        #[arg(long, default_value = "eip3009")]
        scheme: Scheme,
        /// Folder for `bodies.jsonl` and `verify.lua`.
        #[arg(long)]
        out: PathBuf,
    },
    /// Count JSON-RPC calls by method on their way to `--upstream`; prints `listening on URL`.
    Proxy {
        /// anvil's RPC URL.
        #[arg(long)]
        upstream: String,
    },
    /// `/verify` then `/settle` of the first `--count` bodies, counting RPC calls through `--proxy`.
    Pairs {
        /// The daemon's base URL.
        #[arg(long)]
        daemon: String,
        /// An API key of a plan with /verify and /settle.
        #[arg(long)]
        key: String,
        /// The counting proxy's URL.
        #[arg(long)]
        proxy: String,
        /// `bodies.jsonl` from `prepare`.
        #[arg(long)]
        bodies: PathBuf,
        /// How many pairs.
        #[arg(long, default_value_t = 20)]
        count: usize,
        /// Bodies left out first, from the end of the file (settled by an earlier run).
        #[arg(long, default_value_t = 0)]
        skip: usize,
    },
    /// A shop on the daemon: `--count` payments, each answered then repeated `--repeats` times.
    Repeats {
        /// anvil's RPC URL.
        #[arg(long)]
        rpc: String,
        /// The daemon's base URL.
        #[arg(long)]
        daemon: String,
        /// An API key of a plan with the gateway's receive.
        #[arg(long)]
        key: String,
        /// The daemon's settling key (its account is funded with ETH for gas).
        #[arg(long)]
        facilitator_key: PrivateKeySigner,
        /// How many payments.
        #[arg(long, default_value_t = 500)]
        count: usize,
        /// Repeats of each payment's header after its first answer.
        #[arg(long, default_value_t = 1)]
        repeats: usize,
        /// Answers one payment buys (the layer's `ticket_uses`).
        #[arg(long, default_value_t = 2)]
        uses: u32,
    },
    /// A shop on the daemon selling an unpaid route, `exact` and channels (`batch-settlement`).
    Channels {
        /// anvil's RPC URL (blocks are counted there).
        #[arg(long)]
        rpc: String,
        /// The daemon's base URL.
        #[arg(long)]
        daemon: String,
        /// The daemon's process id (its CPU is read from /proc).
        #[arg(long)]
        daemon_pid: u32,
        /// The counting proxy the daemon reaches anvil through.
        #[arg(long)]
        proxy: String,
        /// An API key of the account `--seller` belongs to.
        #[arg(long)]
        key: String,
        /// The daemon's settling key (its account is funded with ETH for gas).
        #[arg(long)]
        facilitator_key: PrivateKeySigner,
        /// A custodial EVM wallet of the key's account (paid; its claims signed by the daemon).
        #[arg(long)]
        seller: Address,
        /// Requests to the unpaid route and in vouchers.
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// Requests paid with `exact`.
        #[arg(long, default_value_t = 400)]
        exact_count: usize,
        /// Buyers at once (one channel each).
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// A Redis URL: vouchers are also measured through two shop instances (this process and
        /// a `channel-shop` child) sharing their channels there.
        #[arg(long)]
        redis: Option<String>,
    },
    /// For `channels`: a second shop instance selling `/shared` from channels kept in Redis;
    /// prints `listening on URL` and stops (its claimer's last pass done) when stdin closes.
    ChannelShop {
        /// anvil's RPC URL (the network's chain id).
        #[arg(long)]
        rpc: String,
        /// The daemon's base URL.
        #[arg(long)]
        daemon: String,
        /// An API key of the account `--seller` belongs to.
        #[arg(long)]
        key: String,
        /// The EIP-3009 token sold in.
        #[arg(long)]
        token: Address,
        /// Who is paid.
        #[arg(long)]
        seller: Address,
        /// Where the channels are kept.
        #[arg(long)]
        redis: String,
        /// Their key prefix there.
        #[arg(long)]
        prefix: String,
    },
    /// For `scripts/bench-proxy`: an upstream answering `GET /hello` at once; prints `listening on URL`.
    Upstream,
    /// For `scripts/bench-proxy`: an x402 facilitator that accepts every proof; prints `listening on URL`.
    StubFacilitator,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Prepare { rpc, count, facilitator_key, scheme, out } => {
            prepare(&rpc, count, (facilitator_key.address(), scheme), &out).await
        }
        Command::Proxy { upstream } => proxy(upstream).await,
        Command::Pairs { daemon, key, proxy, bodies, count, skip } => {
            pairs(&daemon, &key, &proxy, &bodies, (skip, count)).await
        }
        Command::Channels {
            rpc,
            daemon,
            daemon_pid,
            proxy,
            key,
            facilitator_key,
            seller,
            count,
            exact_count,
            concurrency,
            redis,
        } => {
            let facilitator = facilitator_key.address();
            let (rpc, daemon, proxy, key) = (&rpc, &daemon, &proxy, &key);
            channels::run(channels::Channels {
                rpc,
                daemon,
                daemon_pid,
                proxy,
                key,
                facilitator,
                seller,
                count,
                exact_count,
                concurrency,
                redis: redis.as_deref(),
            })
            .await
        }
        Command::ChannelShop { rpc, daemon, key, token, seller, redis, prefix } => {
            channels::second_shop(channels::SecondShop {
                rpc: &rpc,
                daemon: &daemon,
                key: &key,
                token,
                seller,
                redis: &redis,
                prefix: &prefix,
            })
            .await
        }
        Command::Repeats { rpc, daemon, key, facilitator_key, count, repeats, uses } => {
            let facilitator = facilitator_key.address();
            repeats::run(repeats::Repeats { rpc: &rpc, daemon: &daemon, key: &key, facilitator, count, repeats, uses })
                .await
        }
        Command::Catalog { database, entries, queries, phase } => {
            catalog::run(&database, entries, queries, &phase).await
        }
        Command::Upstream => proxied::upstream().await,
        Command::StubFacilitator => proxied::stub_facilitator().await,
    }
}

/// What `prepare` signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scheme {
    /// EIP-3009 `transferWithAuthorization` of an EIP-3009 token.
    Eip3009,
    /// x402 `exact` through Permit2, of a plain ERC-20.
    Permit2,
    /// x402 `upto` through Permit2, of a plain ERC-20 (verified for the most).
    Upto,
}

async fn prepare(
    url: &str,
    count: usize,
    (facilitator, scheme): (Address, Scheme),
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let rpc = EvmRpc::connect(url, DEFAULT_CALL_TIMEOUT).await?;
    let ether = U256::from(10u128.pow(20));
    let minter = PrivateKeySigner::random();
    set_evm_balance(&rpc, minter.address(), ether).await?;
    set_evm_balance(&rpc, facilitator, ether).await?;
    let payer = PrivateKeySigner::random();
    let token = if scheme == Scheme::Eip3009 {
        DevToken::deploy(&rpc, minter, TokenKind::Eip3009, (TOKEN_NAME, "TUSD", 6)).await?
    } else {
        // Permit2 and the proxies, a plain token, and the payer's one approval of Permit2.
        install_permit2(&rpc, &minter).await?;
        let token = DevToken::deploy(&rpc, minter, TokenKind::Plain, ("Plain USD", "PUSD", 6)).await?;
        set_evm_balance(&rpc, payer.address(), ether).await?;
        let approve = wire::Erc20::approveCall { spender: PERMIT2, value: U256::MAX };
        let data = alloy::sol_types::SolCall::abi_encode(&approve);
        send_evm(&rpc, &payer, alloy::primitives::TxKind::Call(token.address), data).await?;
        token
    };
    let total = PRICE.checked_mul(u128::try_from(count)?).context("too many payments")?;
    token.mint(&rpc, payer.address(), U256::from(total)).await?;

    let seller = Address::repeat_byte(0x5e);
    let network = rpc.network().to_string();
    let extra = match scheme {
        Scheme::Eip3009 => json!({"name": TOKEN_NAME, "version": TOKEN_VERSION}),
        Scheme::Permit2 => json!({"assetTransferMethod": "permit2"}),
        Scheme::Upto => json!({"assetTransferMethod": "permit2", "facilitatorAddress": facilitator.to_string()}),
    };
    let requirement = json!({
        "scheme": if scheme == Scheme::Upto { "upto" } else { "exact" }, "network": network,
        "amount": PRICE.to_string(), "asset": token.address.to_string(), "payTo": seller.to_string(),
        "maxTimeoutSeconds": 30, "extra": extra,
    });
    let valid_before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() + 86_400;
    let mut bodies = String::new();
    for _ in 0..count {
        let payload = match scheme {
            Scheme::Eip3009 => eip3009_payload(&payer, (token.address, seller), rpc.chain_id(), valid_before)?,
            Scheme::Permit2 | Scheme::Upto => {
                let upto = (scheme == Scheme::Upto).then_some(facilitator);
                permit2_payload(&payer, (token.address, seller), (rpc.chain_id(), upto), valid_before)?
            }
        };
        let body = json!({
            "x402Version": 2,
            "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": payload,
                               "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}},
            "paymentRequirements": requirement,
        });
        bodies.push_str(&body.to_string());
        bodies.push('\n');
    }
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("bodies.jsonl"), &bodies)?;
    std::fs::write(out.join("verify.lua"), wrk_script(&bodies))?;
    println!("token {} payer {} bodies {count}", token.address, payer.address());
    Ok(())
}

/// An EIP-3009 authorization of [`PRICE`] of `token` to `seller`, signed by `payer`.
fn eip3009_payload(
    payer: &PrivateKeySigner,
    (token, seller): (Address, Address),
    chain_id: u64,
    valid_before: u64,
) -> anyhow::Result<Value> {
    let domain = alloy::sol_types::eip712_domain! {
        name: TOKEN_NAME,
        version: TOKEN_VERSION,
        chain_id: chain_id,
        verifying_contract: token,
    };
    let nonce = B256::from(rand::random::<[u8; 32]>());
    let message = TransferWithAuthorization {
        from: payer.address(),
        to: seller,
        value: U256::from(PRICE),
        validAfter: U256::ZERO,
        validBefore: U256::from(valid_before),
        nonce,
    };
    let signature = payer.sign_hash_sync(&message.eip712_signing_hash(&domain))?;
    Ok(json!({
        "signature": format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        "authorization": {
            "from": payer.address().to_string(), "to": seller.to_string(), "value": PRICE.to_string(),
            "validAfter": "0", "validBefore": valid_before.to_string(), "nonce": format!("{nonce:#x}"),
        },
    }))
}

/// A Permit2 permit of [`PRICE`] of `token` to `seller` (for the exact proxy, or for the upto
/// proxy settled by `upto`), signed by `payer`.
fn permit2_payload(
    payer: &PrivateKeySigner,
    (token, seller): (Address, Address),
    (chain_id, upto): (u64, Option<Address>),
    deadline: u64,
) -> anyhow::Result<Value> {
    let message = Permit2Message {
        token,
        amount: U256::from(PRICE),
        spender: if upto.is_some() { UPTO_PROXY } else { EXACT_PROXY },
        nonce: U256::from_be_bytes(rand::random::<[u8; 32]>()),
        deadline: U256::from(deadline),
        to: seller,
        facilitator: upto,
        valid_after: U256::ZERO,
    };
    let signature = payer.sign_hash_sync(&message.signing_hash(chain_id))?;
    let mut witness = json!({"to": seller.to_string(), "validAfter": "0"});
    if let Some(facilitator) = upto {
        witness["facilitator"] = json!(facilitator.to_string());
    }
    Ok(json!({
        "signature": format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        "permit2Authorization": {
            "from": payer.address().to_string(),
            "permitted": {"token": token.to_string(), "amount": PRICE.to_string()},
            "spender": message.spender.to_string(), "nonce": message.nonce.to_string(),
            "deadline": deadline.to_string(), "witness": witness,
        },
    }))
}

/// A `wrk` script posting the bodies round-robin (each thread from its own offset) and counting
/// answers that are not `200` with `"isValid":true`.
fn wrk_script(bodies: &str) -> String {
    let mut lua = String::from("local bodies = {\n");
    for line in bodies.lines() {
        // Lua long brackets: the JSON holds no "]==]".
        lua.push_str("[==[");
        lua.push_str(line);
        lua.push_str("]==],\n");
    }
    lua.push_str(
        r#"}
local i = 0
local invalid = 0
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
function init(args)
  i = (id or 0) * 997
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("TOLLGATE_LOAD_KEY")
end
function request()
  i = i + 1
  return wrk.format(nil, "/verify", nil, bodies[(i % #bodies) + 1])
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"isValid":true', 1, true) then
    invalid = invalid + 1
  end
end
function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do bad = bad + (t:get("invalid") or 0) end
  io.write(string.format("invalid_answers %d\n", bad))
  for _, p in ipairs({50, 90, 99, 99.9}) do
    io.write(string.format("latency_p%s_us %d\n", p, latency:percentile(p)))
  end
  io.write(string.format("requests %d\n", summary.requests))
  io.write(string.format("duration_us %d\n", summary.duration))
  io.write(string.format("socket_errors %d\n", summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
  io.write(string.format("non_2xx %d\n", summary.errors.status))
end
"#,
    );
    lua
}

type Counts = Arc<Mutex<BTreeMap<String, u64>>>;

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    counts: Counts,
    /// HTTP requests (a batch of calls is one).
    requests: Arc<std::sync::atomic::AtomicU64>,
}

async fn proxy(upstream: String) -> anyhow::Result<()> {
    let state =
        ProxyState { upstream, http: reqwest::Client::new(), counts: Counts::default(), requests: Arc::default() };
    let app = axum::Router::new()
        .route("/", axum::routing::post(forward))
        .route("/__counts", axum::routing::get(counts))
        .route("/__requests", axum::routing::get(requests))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn forward(
    axum::extract::State(s): axum::extract::State<ProxyState>,
    body: bytes::Bytes,
) -> Result<axum::response::Response, axum::http::StatusCode> {
    let bad_gateway = |_| axum::http::StatusCode::BAD_GATEWAY;
    s.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(call) = serde_json::from_slice::<Value>(&body) {
        let calls = match call {
            Value::Array(batch) => batch,
            one => vec![one],
        };
        let mut counts = s.counts.lock().map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
        for c in calls {
            let method = c.get("method").and_then(Value::as_str).unwrap_or("?").to_owned();
            *counts.entry(method).or_default() += 1;
        }
    }
    let answer = s
        .http
        .post(&s.upstream)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(bad_gateway)?;
    let status = answer.status().as_u16();
    let bytes = answer.bytes().await.map_err(bad_gateway)?;
    axum::response::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(bytes))
        .map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)
}

async fn requests(axum::extract::State(s): axum::extract::State<ProxyState>) -> String {
    s.requests.load(std::sync::atomic::Ordering::Relaxed).to_string()
}

async fn counts(axum::extract::State(s): axum::extract::State<ProxyState>) -> axum::Json<BTreeMap<String, u64>> {
    axum::Json(s.counts.lock().map(|c| c.clone()).unwrap_or_default())
}

/// RPC calls by method since `before`.
async fn counted(
    http: &reqwest::Client,
    proxy: &str,
    before: &BTreeMap<String, u64>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let now: BTreeMap<String, u64> = http.get(format!("{proxy}/__counts")).send().await?.json().await?;
    Ok(now
        .into_iter()
        .map(|(m, n)| {
            let d = n - before.get(&m).copied().unwrap_or(0);
            (m, d)
        })
        .filter(|(_, n)| *n > 0)
        .collect())
}

async fn pairs(
    daemon: &str,
    key: &str,
    proxy: &str,
    bodies: &std::path::Path,
    (skip, count): (usize, usize),
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let bodies = std::fs::read_to_string(bodies)?;
    let (mut verify_calls, mut settle_calls) = (BTreeMap::<String, u64>::new(), BTreeMap::<String, u64>::new());
    let add = |into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>| {
        for (m, n) in from {
            *into.entry(m).or_default() += n;
        }
    };
    let mut done = 0;
    // The last bodies: the load runs post the first ones, and a settled authorization is used.
    for line in bodies.lines().rev().skip(skip).take(count) {
        let body: Value = serde_json::from_str(line)?;
        let before = counted(&http, proxy, &BTreeMap::new()).await?;
        let verdict: Value =
            http.post(format!("{daemon}/verify")).bearer_auth(key).json(&body).send().await?.json().await?;
        if verdict["isValid"] != json!(true) {
            bail!("verify refused a valid authorization: {verdict}");
        }
        let mid = counted(&http, proxy, &BTreeMap::new()).await?;
        add(&mut verify_calls, counted(&http, proxy, &before).await?);
        let settled: Value =
            http.post(format!("{daemon}/settle")).bearer_auth(key).json(&body).send().await?.json().await?;
        if settled["success"] != json!(true) {
            bail!("settle failed after verify: {settled}");
        }
        add(&mut settle_calls, counted(&http, proxy, &mid).await?);
        done += 1;
    }
    let per = |calls: &BTreeMap<String, u64>| {
        let total: u64 = calls.values().sum();
        let each: Vec<String> = calls.iter().map(|(m, n)| format!("{m} {:.2}", *n as f64 / done as f64)).collect();
        format!("{:.2} ({})", total as f64 / done as f64, each.join(", "))
    };
    println!("pairs {done}");
    println!("rpc_per_verify_before_settle {}", per(&verify_calls));
    println!("rpc_per_settle_after_verify {}", per(&settle_calls));
    Ok(())
}
