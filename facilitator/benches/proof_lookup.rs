//! The used-proof lookup every `/verify` makes, on SQLite, over 100,000 payments that hold proofs.
//!
//! - a proof no payment holds (nearly every verify): answered by the direct read on the caller's
//!   thread (`store/sql/proofs.rs`);
//! - a proof a payment holds: the direct read, then the whole payment through the pool;
//! - for comparison, the same kind of miss through the pool: a payment id no row has.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench proof_lookup` (the data set is built in a
//! temporary file first: about a minute).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use chrono::DateTime;
use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_facilitator::config::DatabaseUrl;
use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _, SqlStore};
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::{Address, AtomicAmount, Network};

const ACCOUNT: &str = "acct_bench";
const PAYMENTS: u32 = 100_000;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = DatabaseUrl::parse(dir.path().join("proofs.db").to_str().unwrap()).unwrap();
    let store = rt.block_on(async {
        let store = SqlStore::connect(&url).await.unwrap();
        let t0 = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        store.create_account(ACCOUNT, t0).await.unwrap();
        let (from, to) = (Address::Solana([1; 32]).to_string(), Address::Solana([2; 32]).to_string());
        for n in 0..PAYMENTS {
            let p = NewPayment {
                status: PaymentStatus::Confirmed,
                proof_id: Some(format!("proof_{n:08}")),
                ..NewPayment::native(
                    format!("pay_{n:08}"),
                    ACCOUNT,
                    Network::solana_devnet(),
                    (from.clone(), to.clone()),
                    AtomicAmount(1_000),
                    t0,
                )
            };
            store.insert_payment(&p).await.unwrap();
        }
        store
    });

    let mut group = c.benchmark_group(format!("used-proof lookup over {PAYMENTS} payments (SQLite)"));
    let mut n = 0u32;
    group.bench_function("a proof no payment holds (direct read)", |b| {
        b.to_async(&rt).iter(|| {
            n = n.wrapping_add(1);
            let proof = format!("fresh_{n}");
            let store = &store;
            async move { assert!(store.payment_by_proof(&proof).await.unwrap().is_none()) }
        });
    });
    group.bench_function("a proof a payment holds (direct read, then the pool)", |b| {
        b.to_async(&rt).iter(|| {
            n = n.wrapping_add(7919);
            let proof = format!("proof_{:08}", n % PAYMENTS);
            let store = &store;
            async move { assert!(store.payment_by_proof(&proof).await.unwrap().is_some()) }
        });
    });
    group.bench_function("for comparison: a miss through the pool (unknown payment id)", |b| {
        b.to_async(&rt).iter(|| {
            n = n.wrapping_add(1);
            let id = format!("pay_fresh_{n}");
            let store = &store;
            async move { assert!(store.get_payment(&id).await.unwrap().is_none()) }
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
