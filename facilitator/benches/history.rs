//! History pages over 1,000,000 stored payments on SQLite.
//!
//! The data set: one account, 1,000 wallets; a "hot" wallet takes part in 100,000 payments
//! (half sent, half received), the rest are spread over the other wallets. It is built once
//! through the real `Store::insert_payment` path and kept in
//! `target/bench-data/history-1m.db` for later runs.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench history` (the first run fills the file: a
//! few minutes). `TOLLGATE_BENCH_PAYMENTS=N` builds a smaller set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use chrono::{DateTime, Duration, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use tollgate_facilitator::admin::{NewKey, create_key};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _, SqlStore};
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::gateway::{Direction, PaymentStatus};
use tollgate_protocol::{Address, AtomicAmount, Network};
use tower::ServiceExt as _;

const ACCOUNT: &str = "acct_bench";

fn wallet(i: u32) -> String {
    let mut bytes = [7u8; 32];
    bytes[..4].copy_from_slice(&i.to_be_bytes());
    Address::Solana(bytes).to_string()
}

fn payment(n: u64, from: String, to: String, at: DateTime<Utc>) -> NewPayment {
    NewPayment {
        status: PaymentStatus::Confirmed,
        fee_atomic: Some(AtomicAmount(5000)),
        transaction: Some(format!("sig{n}")),
        resource: Some("https://seller.example/report".into()),
        ..NewPayment::native(
            format!("pay_bench_{n:08}"),
            ACCOUNT,
            Network::solana_devnet(),
            (from, to),
            AtomicAmount(10_000_000 + u128::from(n)),
            at,
        )
    }
}

async fn dataset(total: u64) -> (Arc<SqlStore>, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("history-{total}.db"));
    let store = Arc::new(SqlStore::connect(&DatabaseUrl::parse(path.to_str().unwrap()).unwrap()).await.unwrap());
    let have = store.history(ACCOUNT, &wallet(0), None, 1, 0).await.unwrap().total;
    let hot_share = total / 10;
    if have >= hot_share {
        return (store, path);
    }
    let start = Instant::now();
    let t0 = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
    if !store.account_exists(ACCOUNT).await.unwrap() {
        store.create_account(ACCOUNT, t0).await.unwrap();
    }
    // Every tenth payment involves the hot wallet 0; the others pair wallets 1..1000.
    for n in 0..total {
        let (from, to) = if n % 10 == 0 {
            if n % 20 == 0 {
                (wallet(0), wallet(1 + (n as u32 % 999)))
            } else {
                (wallet(1 + (n as u32 % 999)), wallet(0))
            }
        } else {
            (wallet(1 + (n as u32 % 999)), wallet(1 + ((n as u32 + 7) % 999)))
        };
        store.insert_payment(&payment(n, from, to, t0 + Duration::milliseconds(n as i64))).await.unwrap();
        if n % 100_000 == 99_999 {
            eprintln!("  {} payments stored ({:.0} s)", n + 1, start.elapsed().as_secs_f64());
        }
    }
    eprintln!("built {total} payments in {:.0} s", start.elapsed().as_secs_f64());
    (store, path)
}

fn bench(c: &mut Criterion) {
    let total: u64 = std::env::var("TOLLGATE_BENCH_PAYMENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (store, path) = rt.block_on(dataset(total));
    let hot = wallet(0);
    let cold = wallet(500);

    let mut group = c.benchmark_group(format!("history over {total} payments"));
    for (name, w, dir, offset) in [
        ("hot wallet, all, first page", &hot, None, 0),
        ("hot wallet, sent, first page", &hot, Some(Direction::Sent), 0),
        ("hot wallet, all, offset 10000", &hot, None, 10_000),
        ("ordinary wallet, all, first page", &cold, None, 0),
    ] {
        group.bench_function(format!("store: {name}"), |b| {
            b.to_async(&rt).iter(|| async {
                let page = store.history(ACCOUNT, w, dir, 50, offset).await.unwrap();
                assert_eq!(page.entries.len(), 50);
                page
            });
        });
    }

    // The same first page through HTTP: authentication, JSON, and all.
    let (app, key) = rt.block_on(async {
        let config = Config { database_url: DatabaseUrl::parse(path.to_str().unwrap()).unwrap(), ..Config::default() };
        let new = NewKey {
            plan: Plan::Enterprise,
            rpm: Some(u32::MAX),
            label: None,
            account: Some(ACCOUNT.into()),
            env: KeyEnv::Test,
        };
        let key = create_key(&*store, new, Utc::now()).await.unwrap();
        (router(AppState::new(config, store.clone(), Arc::new(SystemClock))), key.secret.expose().to_owned())
    });
    let uri = format!("/payment/history/{hot}?limit=50");
    group.bench_function("http: hot wallet, all, first page", |b| {
        b.to_async(&rt).iter(|| async {
            let req = Request::get(&uri).header("authorization", format!("Bearer {key}")).body(Body::empty()).unwrap();
            let response = app.clone().oneshot(req).await.unwrap();
            assert_eq!(response.status(), 200);
            axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
