//! `tollgate-load repeats`: what a repeat answer costs a seller. A shop (the `tollgate` layer,
//! as a seller mounts it, on 127.0.0.1) sells `/report` for 0.01 of an EIP-3009 token on anvil,
//! through the daemon at `--daemon`. Each of `--count` fresh payments is sent once (its first
//! answer: verified, settled, served), then `--repeats` more times with the same header (served
//! again within the ticket, or refused past it), one request at a time. Prints the latency of
//! first answers, of served repeats and of refused ones (p50/p90/p99), and how many of each.
//!
//! `scripts/bench-answers` runs it against a daemon on PostgreSQL and counts the database's
//! writes around it.

use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context as _, bail};
use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};
use tollgate::{FacilitatorClient, PaymentLayer, Price};
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::devnet::{DevToken, TokenKind, set_evm_balance};

use crate::{PRICE, TOKEN_NAME, TOKEN_VERSION, eip3009_payload};

/// What `repeats` is told.
pub struct Repeats<'a> {
    pub rpc: &'a str,
    pub daemon: &'a str,
    pub key: &'a str,
    /// The daemon's settling account (funded with ETH for gas).
    pub facilitator: Address,
    pub count: usize,
    pub repeats: usize,
    /// Answers one payment buys (the layer's `ticket_uses`).
    pub uses: u32,
}

pub async fn run(r: Repeats<'_>) -> anyhow::Result<()> {
    let rpc = EvmRpc::connect(r.rpc, DEFAULT_CALL_TIMEOUT).await?;
    let ether = U256::from(10u128.pow(20));
    let minter = PrivateKeySigner::random();
    set_evm_balance(&rpc, minter.address(), ether).await?;
    set_evm_balance(&rpc, r.facilitator, ether).await?;
    let token = DevToken::deploy(&rpc, minter, TokenKind::Eip3009, (TOKEN_NAME, "TUSD", 6)).await?;
    let payer = PrivateKeySigner::random();
    let total = PRICE.checked_mul(u128::try_from(r.count)?).context("too many payments")?;
    token.mint(&rpc, payer.address(), U256::from(total)).await?;
    let seller = Address::repeat_byte(0x5e);

    let price = Price::token(token.address.to_string().parse()?, "0.01", 6)?
        .extra(json!({"name": TOKEN_NAME, "version": TOKEN_VERSION}))
        .on(rpc.network().clone())
        .pay_to(seller.to_string().parse()?);
    let layer = PaymentLayer::builder()
        .facilitator(FacilitatorClient::new(r.daemon, r.key))
        .accept(price)
        .ticket_uses(r.uses)
        .build()?;
    let app = Router::new().route("/report", get(|| async { "the report" })).route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/report", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let http = reqwest::Client::new();
    let offered = http.get(&url).send().await?;
    let required = offered.headers().get("payment-required").context("no PAYMENT-REQUIRED header")?;
    let required: Value = tollgate_protocol::x402::header::decode(required.to_str()?)?;
    let accepted = required["accepts"][0].clone();
    let valid_before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() + 86_400;

    let mut first = Vec::with_capacity(r.count);
    let (mut served, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..r.count {
        let payload = eip3009_payload(&payer, (token.address, seller), rpc.chain_id(), valid_before)?;
        let header = tollgate_protocol::x402::header::encode(
            &json!({"x402Version": 2, "accepted": accepted, "payload": payload, "resource": required["resource"]}),
        )?;
        let (status, took) = timed(&http, &url, &header).await?;
        if status != 200 {
            bail!("a fresh payment was answered {status}");
        }
        first.push(took);
        for _ in 0..r.repeats {
            let (status, took) = timed(&http, &url, &header).await?;
            match status {
                200 => served.push(took),
                402 => refused.push(took),
                other => bail!("a repeat was answered {other}"),
            }
        }
    }
    println!("first answers: {} served, {}", first.len(), percentiles(&mut first));
    if r.repeats > 0 {
        println!("repeats served: {}, {}", served.len(), percentiles(&mut served));
        println!("repeats refused: {}, {}", refused.len(), percentiles(&mut refused));
    }
    Ok(())
}

/// `GET url` with the payment header: the status and how long the whole answer took.
async fn timed(http: &reqwest::Client, url: &str, header: &str) -> anyhow::Result<(u16, Duration)> {
    let start = Instant::now();
    let answer = http.get(url).header("PAYMENT-SIGNATURE", header).send().await?;
    let status = answer.status().as_u16();
    answer.bytes().await?;
    Ok((status, start.elapsed()))
}

/// `p50 … p90 … p99 …` of `samples`, in milliseconds.
fn percentiles(samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return "none".into();
    }
    samples.sort_unstable();
    let at = |p: usize| samples.get((samples.len() * p / 100).min(samples.len().saturating_sub(1)));
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1_000.0);
    format!("p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms", ms(at(50)), ms(at(90)), ms(at(99)))
}
