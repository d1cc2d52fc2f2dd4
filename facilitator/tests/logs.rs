//! Nothing secret reaches the logs: not the `Authorization` header, not `?api-key=`, not the
//! database password, even at the most verbose level.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::Request;
use tollgate_facilitator::admin::{NewKey, create_key};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::{AppState, router};
use tower::ServiceExt as _;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn keys_never_appear_in_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("logs.db").to_str().unwrap()).unwrap(),
        // Behind a key, so that the key's requests go through the guard (and its logging).
        public_supported: false,
        ..Config::default()
    };
    let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let new = NewKey { plan: Plan::Premium, rpm: None, label: None, account: None, env: KeyEnv::Live };
    let key = create_key(&*store, new, chrono::Utc::now()).await.unwrap().secret.expose().to_owned();
    let app = router(AppState::new(config, store, Arc::new(SystemClock)));

    let requests = [
        Request::get("/supported").header("authorization", format!("Bearer {key}")).body(Body::empty()).unwrap(),
        Request::get(format!("/ws?api-key={key}")).body(Body::empty()).unwrap(),
        Request::post("/payment/send")
            .header("authorization", format!("Bearer {key}"))
            .body(Body::from("{broken"))
            .unwrap(),
        Request::get("/supported").header("authorization", format!("Bearer {key}x")).body(Body::empty()).unwrap(),
    ];
    for req in requests {
        let _ = app.clone().oneshot(req).await.unwrap();
    }

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("/supported") && logs.contains("/ws"), "the requests were logged:\n{logs}");
    let secret_part = &key["tg_live_".len()..];
    assert!(!logs.contains(secret_part), "an API key leaked into the logs:\n{logs}");
}
