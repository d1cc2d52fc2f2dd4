//! Benchmark: one whole paid request on the demo — the buyer's GET meets a 402, signs a
//! transfer (fresh blockhash from the ledger), retries with `X-PAYMENT`; the layer asks the
//! facilitator, which checks, broadcasts and waits for the embedded ledger's confirmation; the
//! handler answers. Also: the 402 alone, and one `/payment/receive`-free request (a cached
//! proof), to show what the ledger's confirmation costs.
//!
//! Run: `cargo bench -p tollgate-demo --bench paid_request`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TOLLGATE_LOG").unwrap_or_else(|_| "warn".into()))
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let demo = runtime.block_on(tollgate_demo::start(&tollgate_demo::Options::new(dir.path()))).unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = tollgate_client::Buyer::new().with_solana(key, &demo.solana_rpc_url);
    let quote = format!("{}/quote", demo.shop_url);
    let http = reqwest::Client::new();

    let mut group = c.benchmark_group("demo");
    group.sample_size(20).measurement_time(Duration::from_secs(20));
    group.bench_function("402 only", |b| {
        b.to_async(&runtime)
            .iter(|| async { assert_eq!(http.get(&quote).send().await.unwrap().status().as_u16(), 402) });
    });
    group.bench_function("402 → pay → 200 (new proof each time)", |b| {
        b.to_async(&runtime).iter(|| async { assert_eq!(buyer.get(&quote).await.unwrap().status, 200) });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
