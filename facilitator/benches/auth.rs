//! Benchmark: cost of authentication + rate limiting + plan check per request.
//!
//! * `authenticate+admit`: the guard's work alone, steady state (key verdict cached).
//! * `router/healthz` vs `router/supported`: a whole request through the router without and with
//!   the guard; the difference is the per-request overhead a client sees.
//!
//! Run: `cargo bench -p tollgate-facilitator --bench auth`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::sync::Arc;

use axum::body::Body;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use tollgate_facilitator::admin::{NewKey, create_key};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::{Endpoint, Plan};
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::{AppState, router};
use tower::ServiceExt as _;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (state, key) = rt.block_on(async {
        let config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("bench.db").to_str().unwrap()).unwrap(),
            // Behind a key, so that `router/supported` goes through the guard.
            public_supported: false,
            ..Config::default()
        };
        let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
        // An enterprise key with a limit high enough never to trip during the run.
        let new = NewKey { plan: Plan::Enterprise, rpm: Some(u32::MAX), label: None, account: None, env: KeyEnv::Test };
        let key = create_key(&*store, new, chrono::Utc::now()).await.unwrap();
        let state = AppState::new(config, store, Arc::new(SystemClock));
        (state, key.secret.expose().to_owned())
    });
    let header = format!("Bearer {key}");

    c.bench_function("authenticate+admit", |b| {
        b.to_async(&rt).iter(|| async {
            let caller = state.auth.authenticate(Some(Ok(&header))).await.unwrap();
            state.auth.admit(&caller, Endpoint::Supported).await.unwrap()
        });
    });

    let app = router(state.clone());
    let mut group = c.benchmark_group("router");
    group.bench_function("healthz (no auth)", |b| {
        b.to_async(&rt).iter(|| async {
            app.clone().oneshot(Request::get("/healthz").body(Body::empty()).unwrap()).await.unwrap()
        });
    });
    group.bench_function("supported (auth + rate limit + plan)", |b| {
        b.to_async(&rt).iter(|| async {
            let req = Request::get("/supported").header("authorization", header.clone()).body(Body::empty()).unwrap();
            let response = app.clone().oneshot(req).await.unwrap();
            assert_eq!(response.status(), 200);
            response
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
