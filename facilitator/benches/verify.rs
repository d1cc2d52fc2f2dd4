//! Benchmark: checking an `exact-native` signed-transaction proof without the chain — base64
//! decode, transaction decode, ed25519 signature check, and the payment rules. One core.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench verify`.

#![allow(missing_docs)] // criterion_group! generates an undocumented function
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed benchmark

use base64::Engine as _;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::Transaction;
use tollgate_facilitator::chains::solana::build::Transfer;
use tollgate_facilitator::chains::solana::verify::{check_signed_transfer, decode};

fn bench(c: &mut Criterion) {
    let payer = Keypair::new();
    let seller = Pubkey::new_unique();
    let blockhash = Hash::new_unique();
    let message = Transfer { from: payer.pubkey(), to: seller, lamports: 10_000_000, priority_fee: Some(10_000) }
        .message(&blockhash);
    let tx = Transaction::new(&[&payer], message, blockhash);
    let encoded = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());

    let mut group = c.benchmark_group("exact-native proof");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode + signature + rules", |b| {
        b.iter(|| {
            let tx = decode(std::hint::black_box(&encoded)).unwrap();
            check_signed_transfer(&tx, &seller, 10_000_000).unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
