//! The dashboard: over HTTP (sign-in, cookie, CSRF, off without a token) and in headless
//! Chromium (`tests/browser/dashboard.mjs`: generate a key, read it once, use it, delete it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl, Secret};
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::{AppState, router};

const ADMIN: &str = "correct horse battery staple";

/// A facilitator (no chains) served on 127.0.0.1; its URL.
async fn serve(admin_token: Option<&str>) -> (String, AppState, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("d.db").to_str().unwrap()).unwrap(),
        admin_token: admin_token.map(Secret::new),
        ..Config::default()
    };
    let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let state = AppState::new(config, store, Arc::new(SystemClock));
    (listen(&state).await, state, dir)
}

/// Serves `state` on 127.0.0.1; its URL.
async fn listen(state: &AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// Signs in; the session cookie (`name=value`).
async fn sign_in(url: &str) -> String {
    let answer = client().post(format!("{url}/dashboard/login")).form(&[("token", ADMIN)]).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 303);
    let cookie = answer.headers()["set-cookie"].to_str().unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/dashboard"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    cookie.split(';').next().unwrap().to_owned()
}

/// The CSRF token of the signed-in page.
/// Signs the session `cookie` out with the page's `csrf` token.
async fn sign_out(url: &str, cookie: &str, csrf: &str) -> reqwest::Response {
    client()
        .post(format!("{url}/dashboard/logout"))
        .header("cookie", cookie)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .unwrap()
}

fn csrf_of(page: &str) -> String {
    let (_, rest) = page.split_once("name=\"csrf\" value=\"").unwrap();
    rest.split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn sign_in_csrf_and_key_management_over_http() {
    let (url, state, _dir) = serve(Some(ADMIN)).await;
    let http = client();

    // Not signed in: the sign-in form, and no key listing.
    let answer = http.get(format!("{url}/dashboard")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    assert!(answer.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert!(answer.text().await.unwrap().contains("Admin token"));
    let wrong = http.post(format!("{url}/dashboard/login")).form(&[("token", "guess")]).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());

    let cookie = sign_in(&url).await;
    let page = http.get(format!("{url}/dashboard")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("<h2>API Keys</h2>") && page.contains("Generate New Key") && page.contains("Recent payments")
    );
    let csrf = csrf_of(&page);

    // A form without the right CSRF token does nothing.
    for forged in ["", "0123"] {
        let answer = http
            .post(format!("{url}/dashboard/keys"))
            .header("cookie", &cookie)
            .form(&[("csrf", forged), ("plan", "premium"), ("label", "forged")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 403);
    }
    assert!(state.store.list_api_keys().await.unwrap().is_empty());
    // Nor does a right token without the session.
    let answer = http
        .post(format!("{url}/dashboard/keys"))
        .form(&[("csrf", csrf.as_str()), ("plan", "premium")])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);

    // Generate: shown once, stored hashed, listed without its secret.
    let made = http
        .post(format!("{url}/dashboard/keys"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str()), ("plan", "premium"), ("label", "<b>shop</b>")])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, rest) = made.split_once("<code id=\"new-key\">").unwrap();
    let secret = rest.split('<').next().unwrap().to_owned();
    assert!(secret.starts_with("tg_test_"), "{secret}");
    assert!(made.contains("&lt;b&gt;shop&lt;/b&gt;") && !made.contains("<b>shop</b>"), "labels are escaped");
    let keys = state.store.list_api_keys().await.unwrap();
    assert_eq!(keys.len(), 1);
    assert_ne!(keys[0].hash, secret);
    let again =
        http.get(format!("{url}/dashboard")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(!again.contains(&secret), "a key is shown once");
    assert!(again.contains(&keys[0].id));

    // Rotation: a second key for the same account.
    let account = keys[0].account_id.clone();
    assert!(again.contains(&format!("<option value=\"{account}\">")), "accounts are offered");
    let rotated = http
        .post(format!("{url}/dashboard/keys"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str()), ("plan", "premium"), ("label", "shop v2"), ("account", account.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(rotated.status().as_u16(), 200);
    let keys = state.store.list_api_keys().await.unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| k.account_id == account), "both keys of one account");

    // Behind a TLS proxy that says so, the cookie is Secure.
    let proxied = http
        .post(format!("{url}/dashboard/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("token", ADMIN)])
        .send()
        .await
        .unwrap();
    assert!(proxied.headers()["set-cookie"].to_str().unwrap().ends_with("; Secure"));

    // Sign out: the cookie is cleared.
    let out = sign_out(&url, &cookie, &csrf).await;
    assert!(out.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
}

/// Webhook endpoints are registered and deleted in the dashboard, which shows the signing secret
/// once, and lists the delivery log with each delivery's outcome.
#[tokio::test]
async fn webhook_endpoints_and_their_delivery_log_in_the_dashboard() {
    use tollgate_facilitator::store::DeliveryOutcome;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        database_url: DatabaseUrl::parse(dir.path().join("d.db").to_str().unwrap()).unwrap(),
        admin_token: Some(Secret::new(ADMIN)),
        ..Config::default()
    };
    config.webhooks.allow_private_targets = true;
    config.webhooks.require_https = false;
    let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
    let state = AppState::new(config, store, Arc::new(SystemClock))
        .with_master_key(tollgate_facilitator::wallets::MasterKey::generate().unwrap());
    let url = listen(&state).await;
    let created = tollgate_facilitator::admin::create_key(
        &*state.store,
        tollgate_facilitator::admin::NewKey {
            plan: tollgate_facilitator::plans::Plan::Premium,
            rpm: None,
            label: Some("shop".into()),
            account: None,
            env: tollgate_facilitator::auth::keys::KeyEnv::Test,
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let account = created.record.account_id.clone();

    let http = client();
    let cookie = sign_in(&url).await;
    let page =
        http.get(format!("{url}/dashboard")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("<h2>Webhooks</h2>") && page.contains("No endpoints yet."), "{page}");
    let csrf = csrf_of(&page);
    let add = |form: Vec<(&'static str, String)>| {
        http.post(format!("{url}/dashboard/webhooks")).header("cookie", &cookie).form(&form).send()
    };
    // A forged form does nothing; a bad URL is refused with the reason.
    let forged = add(vec![("csrf", "x".into()), ("account", account.clone()), ("url", "http://127.0.0.1:9/h".into())]);
    assert_eq!(forged.await.unwrap().status().as_u16(), 403);
    let bad = add(vec![("csrf", csrf.clone()), ("account", account.clone()), ("url", "ftp://x".into())]);
    assert!(bad.await.unwrap().text().await.unwrap().contains("url must be https"));
    let added = add(vec![
        ("csrf", csrf.clone()),
        ("account", account.clone()),
        ("url", "http://127.0.0.1:9/hook".into()),
        ("description", "<script>alert(1)</script>".into()),
    ]);
    let page = added.await.unwrap().text().await.unwrap();
    let (_, rest) = page.split_once("id=\"new-endpoint-secret\">").unwrap();
    let secret = rest.split('<').next().unwrap();
    assert!(secret.starts_with("whsec_"), "{page}");
    assert!(!page.contains("<script>alert(1)</script>") && page.contains("&lt;script&gt;"), "descriptions are escaped");
    let endpoints = state.store.webhook_endpoints(Some(&account)).await.unwrap();
    assert_eq!(endpoints.len(), 1);
    let endpoint = endpoints[0].id.clone();

    // A payment change queues a delivery; its outcome shows in the log.
    let p = tollgate_facilitator::store::NewPayment::native(
        "pay_dash",
        account.as_str(),
        "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1".parse().unwrap(),
        (
            "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".to_owned(),
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".to_owned(),
        ),
        tollgate_protocol::AtomicAmount(1_000),
        chrono::Utc::now(),
    );
    state.store.insert_payment(&p).await.unwrap();
    let now = chrono::Utc::now();
    let due = state.store.claim_webhook_deliveries(now, 10, now + chrono::Duration::seconds(60), &[]).await.unwrap();
    assert_eq!(due.len(), 1);
    let outcome = DeliveryOutcome::Retry {
        status: Some(502),
        error: "the endpoint answered 502 Bad Gateway".into(),
        next_at: now + chrono::Duration::seconds(10),
    };
    state.store.record_webhook_attempt(due[0].id, now, &outcome).await.unwrap();
    let page =
        http.get(format!("{url}/dashboard")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(&endpoint) && page.contains("evt_pay_dash_verified"), "{page}");
    assert!(page.contains("the endpoint answered 502 Bad Gateway") && page.contains("delivery-pending"), "{page}");
    assert!(!page.contains(secret), "the secret is shown once only");

    // Deleted: gone with its deliveries.
    let deleted = http
        .post(format!("{url}/dashboard/webhooks/{endpoint}/delete"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str()), ("account", account.as_str())])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(deleted.contains(&format!("Endpoint {endpoint} deleted")), "{deleted}");
    assert!(state.store.webhook_endpoints(None).await.unwrap().is_empty());
    assert!(state.store.webhook_deliveries(None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_dashboard_is_off_without_an_admin_token() {
    let (url, _state, _dir) = serve(None).await;
    let answer = client().get(format!("{url}/dashboard")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 404);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_FOUND", "{body}");
    let login = client().post(format!("{url}/dashboard/login")).form(&[("token", "")]).send().await.unwrap();
    assert_eq!(login.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_use_and_delete_a_key_in_a_headless_browser() {
    let (url, _state, _dir) = serve(Some(ADMIN)).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let shot = screenshot.clone();
    let output =
        tokio::task::spawn_blocking(move || Command::new("node").arg(&script).arg(&url).arg(ADMIN).arg(&shot).output())
            .await
            .unwrap()
            .expect("node runs (scripts/test installs what the browser test needs)");
    assert!(output.status.success(), "the browser script failed: {}", String::from_utf8_lossy(&output.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    println!("screenshot: {}", screenshot.display());
    assert!(seen["key"].as_str().unwrap().starts_with("tg_"), "{seen}");
    assert_eq!(seen["listed"], true, "{seen}");
    assert_eq!(seen["statusBefore"], 200, "the new key works: {seen}");
    assert_eq!(seen["shownAgain"], false, "{seen}");
    assert_eq!(seen["gone"], true, "{seen}");
    assert_eq!(seen["statusAfter"], 401, "a deleted key is refused at once: {seen}");
}

/// Signing out ends every session, a copied cookie too; sign-in attempts are limited (ten a
/// minute), so the admin token cannot be guessed at speed: past the limit even the right token
/// waits.
#[tokio::test]
async fn signing_out_ends_every_session_and_sign_ins_are_throttled() {
    let (url, _state, _dir) = serve(Some(ADMIN)).await;
    let http = client();
    let cookie = sign_in(&url).await;
    let copied = cookie.clone();
    let other_session = sign_in(&url).await;
    let page = http.get(format!("{url}/dashboard")).header("cookie", &cookie).send().await.unwrap();
    let csrf = csrf_of(&page.text().await.unwrap());
    let out = sign_out(&url, &cookie, &csrf).await;
    assert_eq!(out.status().as_u16(), 303);
    for session in [&copied, &other_session] {
        let answer = http.get(format!("{url}/dashboard")).header("cookie", session).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 401, "a session made before signing out");
    }
    let fresh = sign_in(&url).await;
    assert_eq!(
        http.get(format!("{url}/dashboard")).header("cookie", &fresh).send().await.unwrap().status().as_u16(),
        200
    );

    // Guesses: ten are answered (the successful sign-ins were given back), then every attempt
    // waits, the right token too.
    for _ in 0..10 {
        let wrong = http.post(format!("{url}/dashboard/login")).form(&[("token", "guess")]).send().await.unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
    }
    for token in ["guess", ADMIN] {
        let answer = http.post(format!("{url}/dashboard/login")).form(&[("token", token)]).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 429, "{token}");
        assert!(answer.headers().contains_key("retry-after"));
        assert!(answer.headers().get("set-cookie").is_none());
    }
}
