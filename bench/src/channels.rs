//! `tollgate-load channels`: what a request costs a seller paid per request from channels (x402
//! `batch-settlement`), against an unpaid route and an `exact` (EIP-3009) one. A shop (the
//! `tollgate` layer, on 127.0.0.1) sells on a real anvil through the daemon at `--daemon`:
//!
//! - `/free`: not priced;
//! - `/exact`: 0.01 of an EIP-3009 token, each request one settlement on chain;
//! - `/tick`: 0.01 of the same token from a channel: one deposit per buyer (before the timed
//!   run), then a signed voucher per request (signed before the timed run: the buyer's cost is
//!   not the seller's).
//!
//! `--concurrency` buyers (one channel each) send their requests one after another, all at once.
//! For each route: requests/s, latency p50/p99, the daemon's and this process's CPU per request
//! (`--daemon-pid`), and RPC calls (`--proxy`, the counting proxy the daemon reaches anvil
//! through) and transactions (anvil's blocks) per 1,000 paid requests. The shop is then stopped:
//! the layer's last claim pass claims every channel and sweeps (counted with the vouchers).
//!
//! `scripts/bench-channels` starts the processes.

use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct as _;
use anyhow::{Context as _, bail};
use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};
use tollgate::batch::{ClaimPolicy, MemoryChannels, RedisChannels};
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_encoding::batch::{self as wire, ERC3009_COLLECTOR};
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::devnet::{DevToken, TokenKind, install_batch_settlement, set_evm_balance};

use crate::{PRICE, TOKEN_NAME, TOKEN_VERSION, eip3009_payload};

/// What `channels` is told.
pub struct Channels<'a> {
    pub rpc: &'a str,
    pub daemon: &'a str,
    pub daemon_pid: u32,
    pub proxy: &'a str,
    pub key: &'a str,
    /// The daemon's settling account (funded with ETH for gas).
    pub facilitator: Address,
    /// A custodial wallet of the key's account (its channels' claims are signed by the daemon).
    pub seller: Address,
    /// Requests per route (`exact`: `exact_count`).
    pub count: usize,
    pub exact_count: usize,
    pub concurrency: usize,
    /// Where two shop instances share their channels (vouchers measured through both too).
    pub redis: Option<&'a str>,
}

/// One route's run.
struct Measured {
    requests: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    daemon_cpu: Duration,
    own_cpu: Duration,
    rpc_calls: u64,
    transactions: u64,
    /// Commands Redis processed (the shared channels' reads and compare-and-sets).
    redis_commands: u64,
}

pub async fn run(c: Channels<'_>) -> anyhow::Result<()> {
    let rpc = EvmRpc::connect(c.rpc, DEFAULT_CALL_TIMEOUT).await?;
    let ether = U256::from(10u128.pow(20));
    let minter = PrivateKeySigner::random();
    set_evm_balance(&rpc, minter.address(), ether).await?;
    set_evm_balance(&rpc, c.facilitator, ether).await?;
    install_batch_settlement(&rpc, &minter).await?;
    let token = DevToken::deploy(&rpc, minter, TokenKind::Eip3009, (TOKEN_NAME, "TUSD", 6)).await?;
    let per_buyer = c.count.div_ceil(c.concurrency);
    let exact_per_buyer = c.exact_count.div_ceil(c.concurrency);
    let buyers: Vec<PrivateKeySigner> = (0..c.concurrency).map(|_| PrivateKeySigner::random()).collect();
    for buyer in &buyers {
        let channels = if c.redis.is_some() { 2 } else { 1 };
        let needs = PRICE * u128::try_from(channels * (per_buyer + 1) + exact_per_buyer)?;
        token.mint(&rpc, buyer.address(), U256::from(needs)).await?;
    }

    let prefix = format!("tollgate-bench-{}", rand::random::<u64>());
    let (shop, stop, tasks) = shop(&c, &rpc, token.address, &prefix).await?;
    let http = reqwest::Client::new();
    let offer = |path: &'static str| {
        let (http, shop) = (http.clone(), shop.clone());
        async move {
            let answer = http.get(format!("{shop}{path}")).send().await?;
            let required = answer.headers().get("payment-required").context("no PAYMENT-REQUIRED header")?;
            let required: Value = tollgate_protocol::x402::header::decode(required.to_str()?)?;
            anyhow::Ok(required["accepts"][0].clone())
        }
    };
    let header = |accepted: &Value, payload: Value| {
        tollgate_protocol::x402::header::encode(&json!({"x402Version": 2, "accepted": accepted, "payload": payload}))
    };

    // Unpaid.
    let free: Vec<Vec<Option<String>>> = (0..c.concurrency).map(|_| vec![None; per_buyer]).collect();
    let unpaid = measure(&c, (&rpc, &http), (&[format!("{shop}/free")], &[]), free).await?;

    // exact: a fresh EIP-3009 authorization per request.
    let accepted = offer("/exact").await?;
    let valid_before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() + 86_400;
    let mut exact = Vec::new();
    for buyer in &buyers {
        let mut headers = Vec::with_capacity(exact_per_buyer);
        for _ in 0..exact_per_buyer {
            let payload = eip3009_payload(buyer, (token.address, c.seller), rpc.chain_id(), valid_before)?;
            headers.push(Some(header(&accepted, payload)?));
        }
        exact.push(headers);
    }
    let exact = measure(&c, (&rpc, &http), (&[format!("{shop}/exact")], &[]), exact).await?;

    // Vouchers: each buyer's channel opened by a deposit (untimed), then a voucher per request.
    let accepted = offer("/tick").await?;
    let opened = Opened { token: token.address, accepted: &accepted, salt: 0, per_buyer };
    let single = vec![format!("{shop}/tick")];
    let mut paid = paid_from_channels(&c, (&rpc, &http), &buyers, &opened, (&single, &[])).await?;

    // The same through two instances sharing their channels in Redis: requests alternate between
    // this shop and a child process's, each buyer on a channel of its own again.
    let mut shared = None;
    if let Some(redis) = c.redis {
        let (second, second_pid, mut child) = spawn_second_shop(&c, token.address, redis, &prefix).await?;
        let accepted = offer("/shared").await?;
        let opened = Opened { token: token.address, accepted: &accepted, salt: 1 << 32, per_buyer };
        let urls = vec![format!("{shop}/shared"), format!("{second}/shared")];
        let mut measured = paid_from_channels(&c, (&rpc, &http), &buyers, &opened, (&urls, &[second_pid])).await?;
        // The child stops first: its last pass claims every shared channel and sweeps.
        let (calls, block) = (rpc_calls(&http, c.proxy).await?, rpc.block_number().await?);
        drop(child.stdin.take());
        tokio::time::timeout(Duration::from_secs(120), child.wait()).await.context("the second shop's last pass")??;
        measured.rpc_calls += rpc_calls(&http, c.proxy).await? - calls;
        measured.transactions += rpc.block_number().await? - block;
        shared = Some(measured);
    }

    // The shop stops: the layer's last pass claims every channel and sweeps.
    let (calls, block) = (rpc_calls(&http, c.proxy).await?, rpc.block_number().await?);
    drop(stop);
    tasks.close();
    tokio::time::timeout(Duration::from_secs(120), tasks.wait()).await.context("the last claim pass")?;
    paid.rpc_calls += rpc_calls(&http, c.proxy).await? - calls;
    paid.transactions += rpc.block_number().await? - block;

    println!(
        "route    requests  req/s     p50 ms  p99 ms  daemon CPU ms/req  shop+buyers CPU ms/req  RPC/1000 paid  tx/1000 paid"
    );
    for (name, m) in [("unpaid", &unpaid), ("exact", &exact), ("voucher", &paid)] {
        report(name, m, name != "unpaid");
    }
    if let Some(m) = &shared {
        report("voucher2", m, true);
    }
    println!(
        "voucher: {} channels; their deposits (made before the timed run) and the claim and sweep when the shop \
         stopped are in its RPC and transaction counts",
        buyers.len()
    );
    println!(
        "voucher throughput: {:.0}% of unpaid, {:.1}× exact",
        100.0 * rate(&paid) / rate(&unpaid),
        rate(&paid) / rate(&exact)
    );
    if let Some(m) = &shared {
        println!(
            "voucher2 (two instances, channels in Redis; CPU of both shops): {:.0}% of unpaid, {:.1}× exact, \
             {:.2} Redis commands per voucher",
            100.0 * rate(m) / rate(&unpaid),
            rate(m) / rate(&exact),
            m.redis_commands as f64 / m.requests as f64
        );
    }
    Ok(())
}

/// The shop: its URL, what stops it (dropped), and the layer's task tracker (its claimer).
async fn shop(
    c: &Channels<'_>,
    rpc: &EvmRpc,
    token: Address,
    prefix: &str,
) -> anyhow::Result<(String, tokio::sync::oneshot::Sender<()>, tollgate::TaskTracker)> {
    let domain = json!({"name": TOKEN_NAME, "version": TOKEN_VERSION});
    let token = token.to_string().parse()?;
    let seller = c.seller.to_string().parse()?;
    let network = rpc.network().clone();
    let exact = Price::token(token, "0.01", 6)?.extra(domain.clone()).on(network.clone()).pay_to(seller);
    let tick = Price::batch(token, "0.01", 6)?.extra(domain).on(network).pay_to(seller);
    let facilitator = FacilitatorClient::new(c.daemon, c.key);
    let tasks = tollgate::TaskTracker::new();
    let exact = PaymentLayer::builder().facilitator(facilitator.clone()).accept(exact).tasks(tasks.clone()).build()?;
    // Its own store (claimed at the end, when the shop stops), claimed once within the run.
    let tick = PaymentLayer::builder()
        .facilitator(facilitator)
        .accept(tick)
        .channels(MemoryChannels::new())
        .claim_policy(ClaimPolicy::default())
        .tasks(tasks.clone())
        .build()?;
    let answer = || async { "{\"tick\":\"3120.55\"}" };
    let mut app = Router::new()
        .route("/free", get(answer))
        .route("/exact", get(answer).route_layer(exact))
        .route("/tick", get(answer).route_layer(tick));
    if let Some(redis) = c.redis {
        let store = RedisChannels::connect(redis, prefix).await?;
        let network = rpc.network().clone();
        let shared = shared_layer((c.daemon, c.key), (token, seller, network), store, &tasks)?;
        app = app.route("/shared", get(answer).route_layer(shared));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok((url, stop, tasks))
}

/// A route's channels, one per buyer: the token, the route's offer, the salt of the channels'
/// configurations (channels of another route get others), and the requests each pays.
struct Opened<'a> {
    token: Address,
    accepted: &'a Value,
    salt: u64,
    per_buyer: usize,
}

/// Opens each buyer's channel by a deposit through `urls[0]` (untimed), then measures a voucher
/// per request, the requests of each buyer going to `urls` in turn (`others`: the processes of
/// the other shop instances, whose CPU is counted with this one's). The deposits' RPC calls and
/// transactions are counted with the vouchers'.
async fn paid_from_channels(
    c: &Channels<'_>,
    (rpc, http): (&EvmRpc, &reqwest::Client),
    buyers: &[PrivateKeySigner],
    opened: &Opened<'_>,
    (urls, others): (&[String], &[u32]),
) -> anyhow::Result<Measured> {
    let accepted = opened.accepted;
    let header = |payload: Value| {
        tollgate_protocol::x402::header::encode(&json!({"x402Version": 2, "accepted": accepted, "payload": payload}))
    };
    let authorizer: Address =
        accepted["extra"]["receiverAuthorizer"].as_str().context("no receiverAuthorizer")?.parse()?;
    let valid_before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() + 86_400;
    let mut vouchers = Vec::new();
    let (calls, block) = (rpc_calls(http, c.proxy).await?, rpc.block_number().await?);
    for (n, buyer) in buyers.iter().enumerate() {
        let config = wire::ChannelConfig {
            payer: buyer.address(),
            payerAuthorizer: buyer.address(),
            receiver: c.seller,
            receiverAuthorizer: authorizer,
            token: opened.token,
            withdrawDelay: alloy::primitives::Uint::from(tollgate_protocol::x402::batch::MIN_WITHDRAW_DELAY),
            salt: B256::from(U256::from(opened.salt) + U256::from(n)),
        };
        let deposit = PRICE * u128::try_from(opened.per_buyer + 1)?;
        let payload = deposit_payload(&config, buyer, (opened.token, rpc.chain_id()), deposit, valid_before)?;
        let answer = http.get(&urls[0]).header("PAYMENT-SIGNATURE", header(payload)?).send().await?;
        if answer.status() != 200 {
            bail!("a deposit was answered {}: {}", answer.status(), answer.text().await?);
        }
        let mut headers = Vec::with_capacity(opened.per_buyer);
        for i in 0..opened.per_buyer {
            let max = PRICE * u128::try_from(i + 2)?;
            headers.push(Some(header(voucher_payload(&config, buyer, rpc.chain_id(), max)?)?));
        }
        vouchers.push(headers);
    }
    let (deposit_calls, deposits) = (rpc_calls(http, c.proxy).await? - calls, rpc.block_number().await? - block);
    // The first voucher of each buyer went with its deposit: the timed run starts at the second,
    // on the next instance.
    let turned: Vec<String> = urls.iter().cycle().skip(1).take(urls.len()).cloned().collect();
    let mut paid = measure(c, (rpc, http), (&turned, others), vouchers).await?;
    paid.rpc_calls += deposit_calls;
    paid.transactions += deposits;
    Ok(paid)
}

/// What `channel-shop` is told.
pub struct SecondShop<'a> {
    pub rpc: &'a str,
    pub daemon: &'a str,
    pub key: &'a str,
    pub token: Address,
    pub seller: Address,
    pub redis: &'a str,
    pub prefix: &'a str,
}

/// The layer selling `/shared` from channels kept in `store`, through the daemon at `daemon`
/// with `key`.
fn shared_layer(
    (daemon, key): (&str, &str),
    (token, seller, network): (tollgate::protocol::Address, tollgate::protocol::Address, tollgate::protocol::Network),
    store: RedisChannels,
    tasks: &tollgate::TaskTracker,
) -> anyhow::Result<PaymentLayer> {
    let domain = json!({"name": TOKEN_NAME, "version": TOKEN_VERSION});
    let price = Price::batch(token, "0.01", 6)?.extra(domain).on(network).pay_to(seller);
    Ok(PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(daemon, key))
        .accept(price)
        .channels(store)
        .claim_policy(ClaimPolicy::default())
        .tasks(tasks.clone())
        .build()?)
}

/// `tollgate-load channel-shop`: another instance of the shop's `/shared`, in its own process.
pub async fn second_shop(s: SecondShop<'_>) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt as _;
    let rpc = EvmRpc::connect(s.rpc, DEFAULT_CALL_TIMEOUT).await?;
    let store = RedisChannels::connect(s.redis, s.prefix).await?;
    let tasks = tollgate::TaskTracker::new();
    let sold = (s.token.to_string().parse()?, s.seller.to_string().parse()?, rpc.network().clone());
    let layer = shared_layer((s.daemon, s.key), sold, store, &tasks)?;
    let app = Router::new().route("/shared", get(|| async { "{\"tick\":\"3120.55\"}" }).route_layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let served = axum::serve(listener, app).with_graceful_shutdown(async {
        // Until stdin closes.
        let mut rest = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    });
    served.await?;
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Starts `channel-shop` beside this process: its URL, its process id, and the child (whose
/// stdin, dropped, stops it).
async fn spawn_second_shop(
    c: &Channels<'_>,
    token: Address,
    redis: &str,
    prefix: &str,
) -> anyhow::Result<(String, u32, tokio::process::Child)> {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["channel-shop", "--rpc", c.rpc, "--daemon", c.daemon, "--key", c.key, "--redis", redis])
        .args(["--prefix", prefix, "--token", &token.to_string(), "--seller", &c.seller.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("the second shop's process id")?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().context("its stdout")?).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("the second shop did not start")??
        .context("the second shop stopped")?;
    let url = line.strip_prefix("listening on ").context("the second shop's first line")?.to_owned();
    Ok((url, pid, child))
}

/// Commands the Redis of `--redis` has processed (0 without one).
async fn redis_commands(c: &Channels<'_>) -> anyhow::Result<u64> {
    let Some(url) = c.redis else { return Ok(0) };
    let mut connection = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("stats").query_async(&mut connection).await?;
    let line = info.lines().find_map(|l| l.strip_prefix("total_commands_processed:")).context("Redis INFO stats")?;
    // This INFO and the connection's own handshake are not the shops'.
    Ok(line.trim().parse::<u64>()?)
}

/// Each buyer sends its requests (a header each, or none) to `url` one after another, all
/// buyers at once; every answer must be 200.
async fn measure(
    c: &Channels<'_>,
    (rpc, http): (&EvmRpc, &reqwest::Client),
    (urls, others): (&[String], &[u32]),
    buyers: Vec<Vec<Option<String>>>,
) -> anyhow::Result<Measured> {
    let (calls, block) = (rpc_calls(http, c.proxy).await?, rpc.block_number().await?);
    let shops = || -> anyhow::Result<Duration> { others.iter().map(|p| cpu(&p.to_string())).sum() };
    let (daemon, own, redis) = (cpu(&c.daemon_pid.to_string())?, cpu("self")? + shops()?, redis_commands(c).await?);
    // On stderr, for a profiler to attach to the timed part alone.
    eprintln!("timing {} requests to {}", buyers.iter().map(Vec::len).sum::<usize>(), urls.join(" and "));
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for headers in buyers {
        let (http, urls) = (http.clone(), urls.to_vec());
        running.spawn(async move {
            let mut took = Vec::with_capacity(headers.len());
            for (n, header) in headers.into_iter().enumerate() {
                let url = &urls[n % urls.len()];
                let mut request = http.get(url);
                if let Some(header) = &header {
                    request = request.header("PAYMENT-SIGNATURE", header);
                }
                let at = Instant::now();
                let answer = request.send().await?;
                let status = answer.status();
                let body = answer.bytes().await?;
                if status != 200 {
                    bail!("{url} answered {status}: {}", String::from_utf8_lossy(&body));
                }
                took.push(at.elapsed());
            }
            anyhow::Ok(took)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = running.join_next().await {
        latencies.extend(done??);
    }
    let wall = started.elapsed();
    let (daemon_cpu, own_cpu) = (cpu(&c.daemon_pid.to_string())? - daemon, cpu("self")? + shops()? - own);
    let redis_commands = redis_commands(c).await? - redis;
    latencies.sort_unstable();
    Ok(Measured {
        requests: latencies.len(),
        wall,
        latencies,
        daemon_cpu,
        own_cpu,
        rpc_calls: rpc_calls(http, c.proxy).await? - calls,
        transactions: rpc.block_number().await? - block,
        redis_commands,
    })
}

fn rate(m: &Measured) -> f64 {
    m.requests as f64 / m.wall.as_secs_f64()
}

fn report(name: &str, m: &Measured, paid: bool) {
    let at = |q: f64| m.latencies[((m.latencies.len() as f64 * q) as usize).min(m.latencies.len() - 1)];
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / m.requests as f64;
    let thousand = |n: u64| if paid { format!("{:.1}", n as f64 * 1000.0 / m.requests as f64) } else { "-".into() };
    println!(
        "{name:<8} {:>8}  {:>7.0}  {:>6.2}  {:>6.2}  {:>17.3}  {:>22.3}  {:>13}  {:>12}",
        m.requests,
        rate(m),
        at(0.5).as_secs_f64() * 1000.0,
        at(0.99).as_secs_f64() * 1000.0,
        per(m.daemon_cpu),
        per(m.own_cpu),
        thousand(m.rpc_calls),
        thousand(m.transactions),
    );
}

/// User + system CPU of `/proc/<pid>`.
fn cpu(pid: &str) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').context("/proc stat")?.1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // Linux's USER_HZ.
    Ok(Duration::from_millis(ticks * 10))
}

/// The counting proxy's total of RPC calls.
async fn rpc_calls(http: &reqwest::Client, proxy: &str) -> anyhow::Result<u64> {
    let counts: std::collections::BTreeMap<String, u64> =
        http.get(format!("{proxy}/__counts")).send().await?.json().await?;
    Ok(counts.values().sum())
}

/// A deposit of `amount` into `config`'s channel (EIP-3009 to the collector), with the first
/// voucher (one price).
fn deposit_payload(
    config: &wire::ChannelConfig,
    payer: &PrivateKeySigner,
    (token, chain_id): (Address, u64),
    amount: u128,
    valid_before: u64,
) -> anyhow::Result<Value> {
    let id = config.id(chain_id);
    let salt = U256::from_be_bytes(rand::random::<[u8; 32]>());
    let message = wire::ReceiveWithAuthorization {
        from: payer.address(),
        to: ERC3009_COLLECTOR,
        value: U256::from(amount),
        validAfter: U256::ZERO,
        validBefore: U256::from(valid_before),
        nonce: wire::erc3009_deposit_nonce(id, salt),
    };
    let domain = tollgate_encoding::evm::eip3009_domain(TOKEN_NAME.into(), TOKEN_VERSION.into(), chain_id, token);
    let signature = payer.sign_hash_sync(&message.eip712_signing_hash(&domain))?;
    let mut payload = voucher_payload(config, payer, chain_id, PRICE)?;
    payload["type"] = json!("deposit");
    payload["deposit"] = json!({
        "amount": amount.to_string(),
        "authorization": {"erc3009Authorization": {
            "validAfter": "0", "validBefore": valid_before.to_string(),
            "salt": format!("{:#x}", B256::from(salt)),
            "signature": format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        }},
    });
    Ok(payload)
}

/// A voucher of `max` in all on `config`'s channel, signed by `payer`.
fn voucher_payload(
    config: &wire::ChannelConfig,
    payer: &PrivateKeySigner,
    chain_id: u64,
    max: u128,
) -> anyhow::Result<Value> {
    let id = config.id(chain_id);
    let signature = payer.sign_hash_sync(&wire::voucher_digest(chain_id, id, max))?;
    Ok(json!({
        "type": "voucher",
        "channelConfig": {
            "payer": config.payer.to_string(), "payerAuthorizer": config.payerAuthorizer.to_string(),
            "receiver": config.receiver.to_string(), "receiverAuthorizer": config.receiverAuthorizer.to_string(),
            "token": config.token.to_string(), "withdrawDelay": config.withdrawDelay.to::<u64>(),
            "salt": format!("{:#x}", config.salt),
        },
        "voucher": {
            "channelId": format!("{id:#x}"), "maxClaimableAmount": max.to_string(),
            "signature": format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        },
    }))
}
