//! Benchmark: one whole paid request on the demo, and its parts.
//!
//! * `402 only`: the shop's challenge over HTTP.
//! * `402 → pay → 200`: the buyer's GET meets a 402, reads a fresh blockhash, signs a transfer,
//!   retries with `X-PAYMENT`; the layer asks the facilitator, which checks, broadcasts and waits
//!   for the embedded ledger's confirmation; the handler answers. A new proof each time.
//! * `buyer: blockhash + sign`: the buyer's own share (one RPC call and an ed25519 signature).
//! * `facilitator: /payment/receive`: the facilitator alone over HTTP, given a fresh signed
//!   transfer (made outside the measurement): checks, chain reads, claim, broadcast, wait, records.
//! * `ledger: send + confirm`: the embedded ledger alone, given a fresh signed transfer:
//!   `sendTransaction`, then `getSignatureStatuses` until it has a verdict.
//!
//! Run: `cargo bench -p tollgate-demo --bench paid_request`. Criterion prints the mean; the
//! median of each is in `<target>/criterion/demo/<name>/new/estimates.json`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::schemes::ExactNativePayload;

/// Memo program v2 (makes every transfer of the same amount unique).
const MEMO: solana_sdk::pubkey::Pubkey =
    solana_sdk::pubkey::Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");

/// A signed transfer of `lamports` from `buyer` to `to`, unique by its memo.
fn transfer(
    buyer: &Keypair,
    to: &solana_sdk::pubkey::Pubkey,
    lamports: u64,
    blockhash: solana_sdk::hash::Hash,
    n: u64,
) -> Transaction {
    let ixs = [
        solana_system_interface::instruction::transfer(&buyer.pubkey(), to, lamports),
        solana_sdk::instruction::Instruction::new_with_bytes(MEMO, format!("bench:{n}").as_bytes(), vec![]),
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
    let buyer = tollgate_client::Buyer::new().with_solana(key, &demo.solana_rpc_url);
    let quote = format!("{}/quote", demo.shop_url);
    let http = reqwest::Client::new();
    let backend = demo.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let seller: solana_sdk::pubkey::Pubkey = demo.seller.parse().unwrap();
    let network = rpc.network().clone();
    let counter = std::sync::atomic::AtomicU64::new(0);
    let fresh = || {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (blockhash, _) = runtime.block_on(rpc.latest_blockhash()).unwrap();
        transfer(&signer, &seller, 1_000_000, blockhash, n)
    };

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
    group.bench_function("facilitator: /payment/receive", |b| {
        b.to_async(&runtime).iter_batched(
            || {
                let tx = fresh();
                let encoded = base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    bincode::serialize(&tx).unwrap(),
                );
                let payload = PaymentPayload::exact_native_v1(&network, &ExactNativePayload::Transaction(encoded));
                // The amount as JSON number text, as the gateway reads it (never a float).
                format!(
                    r#"{{"walletAddress":"{}","paymentProof":"{}","expectedAmount":0.001,"resource":"{quote}"}}"#,
                    demo.seller,
                    payload.to_header().unwrap()
                )
            },
            |body| async {
                let answer = http
                    .post(format!("{}/payment/receive", demo.facilitator_url))
                    .bearer_auth(&demo.seller_api_key)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status().as_u16(), 200, "{}", answer.text().await.unwrap());
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function("ledger: send + confirm", |b| {
        b.to_async(&runtime).iter_batched(
            fresh,
            |tx| async move {
                let signature = rpc.send(&tx).await.unwrap();
                let outcome = rpc.wait_for_outcome(&signature, Duration::from_secs(10)).await.unwrap();
                assert!(matches!(outcome, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })));
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
