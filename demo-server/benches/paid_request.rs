//! Benchmark: one whole paid request on the demo, and its parts.
//!
//! * `402 only`: the shop's challenge over HTTP.
//! * `402 → pay → 200`: the buyer's GET meets a 402, reads a fresh blockhash, signs a transfer,
//!   retries with `X-PAYMENT`; the layer asks the facilitator, which checks, broadcasts and waits
//!   for the embedded ledger's confirmation; the handler answers. A new proof each time.
//! * `buyer: blockhash + sign`: the buyer's own share (one RPC call and an ed25519 signature).
//!
//! Then, outside criterion, 100 interleaved rounds of three things, printed as p50 / p90 / p99
//! (parts are compared side by side, within one round):
//! the whole paid request; the facilitator alone (`POST /payment/receive` over HTTP with a transfer
//! signed beforehand: checks, chain reads, claim, broadcast, wait, records); and the ledger alone
//! (`sendTransaction`, then `getSignatureStatuses` until it has a verdict).
//!
//! Run: `cargo bench -p tollgate-demo --bench paid_request`. Criterion prints means; medians are
//! in `<target>/criterion/demo/<name>/new/estimates.json`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::ExactNativePayload;

/// A signed transfer of `lamports` from `buyer` to `to`, made unique as the client does (by its
/// compute-unit limit).
fn transfer(
    buyer: &Keypair,
    to: &solana_sdk::pubkey::Pubkey,
    lamports: u64,
    blockhash: solana_sdk::hash::Hash,
    n: u64,
) -> Transaction {
    let units = 1_000 + u32::try_from(n % 100_000).unwrap();
    let ixs = [
        solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(units),
        solana_system_interface::instruction::transfer(&buyer.pubkey(), to, lamports),
    ];
    Transaction::new_signed_with_payer(&ixs, Some(&buyer.pubkey()), &[buyer], blockhash)
}

fn bench(c: &mut Criterion) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into()))
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let demo = runtime.block_on(tollgate_demo::start(&tollgate_demo::Options::new(dir.path()))).unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let signer = key.insecure_clone();
    let buyer = tollgate_client::Buyer::new()
        .with_solana(key, &demo.solana_rpc_url)
        .with_cap(tollgate_client::Cap::parse("0.01SOL").expect("a cap"));
    let quote = format!("{}/quote", demo.shop_url);
    let http = reqwest::Client::new();
    let backend = demo.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let seller: solana_sdk::pubkey::Pubkey = demo.seller.parse().unwrap();
    // On a fresh ledger first.
    breakdown(&runtime, &buyer, &signer, &demo, "fresh ledger");

    let mut group = c.benchmark_group("demo");
    group.sample_size(30).measurement_time(Duration::from_secs(15));
    group.bench_function("402 only", |b| {
        b.to_async(&runtime)
            .iter(|| async { assert_eq!(http.get(&quote).send().await.unwrap().status().as_u16(), 402) });
    });
    group.bench_function("402 → pay → 200 (new proof each time)", |b| {
        b.to_async(&runtime).iter(|| async { assert_eq!(buyer.get(&quote).await.unwrap().status, 200) });
    });
    group.bench_function("buyer: blockhash + sign", |b| {
        b.to_async(&runtime).iter(|| async {
            let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
            transfer(&signer, &seller, 1_000_000, blockhash, 0)
        });
    });
    group.finish();

    // After criterion's thousands of payments, the same again.
    breakdown(&runtime, &buyer, &signer, &demo, "after criterion's payments");
}

/// The parts, interleaved so that each sees the ledger in the same state (compare parts within
/// one round, not across runs): p50, p90 and p99 of each.
fn breakdown(
    runtime: &tokio::runtime::Runtime,
    buyer: &tollgate_client::Buyer,
    signer: &Keypair,
    demo: &tollgate_demo::Demo,
    when: &str,
) {
    static ROUND: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let http = &reqwest::Client::new();
    let quote = &format!("{}/quote", demo.shop_url);
    let backend = demo.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let seller: &solana_sdk::pubkey::Pubkey = &demo.seller.parse().unwrap();
    let network = rpc.network();
    let rounds = 100;
    let mut times: [Vec<Duration>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    runtime.block_on(async {
        for _ in 0..rounds {
            let started = Instant::now();
            assert_eq!(buyer.get(quote).await.unwrap().status, 200);
            times[0].push(started.elapsed());

            // The facilitator alone, given a transfer signed beforehand.
            let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
            let n = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tx = transfer(signer, seller, 1_000_000, blockhash, 2 * n);
            let encoded =
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bincode::serialize(&tx).unwrap());
            let payload = PaymentPayload::exact_native_v1(network, &ExactNativePayload::Transaction(encoded));
            // The amount as JSON number text, as the gateway reads it (never a float).
            let body = format!(
                r#"{{"walletAddress":"{}","paymentProof":"{}","expectedAmount":0.001,"resource":"{quote}"}}"#,
                demo.seller,
                payload.to_header().unwrap()
            );
            let started = Instant::now();
            let answer = http
                .post(format!("{}/payment/receive", demo.facilitator_url))
                .bearer_auth(&demo.seller_api_key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status().as_u16(), 200, "{}", answer.text().await.unwrap());
            times[1].push(started.elapsed());

            // The ledger alone: send, then poll until it has a verdict.
            let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
            let tx = transfer(signer, seller, 1_000_000, blockhash, 2 * n + 1);
            let started = Instant::now();
            let signature = rpc.send(&tx).await.unwrap();
            let outcome = rpc.wait_for_outcome(&signature, Duration::from_secs(10)).await.unwrap();
            assert!(matches!(outcome, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })));
            times[2].push(started.elapsed());
        }
    });
    for (name, mut spent) in
        ["402 → pay → 200", "facilitator: /payment/receive", "ledger: send + confirm"].into_iter().zip(times)
    {
        spent.sort();
        println!(
            "{when}, {rounds} interleaved rounds: {name:30} p50 {:>9.2?}  p90 {:>9.2?}  p99 {:>9.2?}",
            spent[spent.len() / 2],
            spent[spent.len() * 9 / 10],
            spent[spent.len() * 99 / 100]
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
