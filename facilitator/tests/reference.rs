//! The API reference the daemon serves at `/docs`: rendered from its own `/openapi.json`, every
//! operation on the page, nothing fetched from elsewhere. Checked over HTTP and in headless
//! Chromium against the real binary (`tests/browser/docs.mjs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::process::Daemon;

/// Every (METHOD, path) of an OpenAPI document.
fn operations(contract: &Value) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for (path, item) in contract["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                all.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_render_every_operation_of_the_contract_and_fetch_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    // Development mode: the embedded ledger, so `/dev/airdrop` is served and documented too.
    let daemon = Daemon::start_with(dir.path(), &[("TOLLGATE_DEV", "1")]);
    let client = reqwest::Client::new();
    let contract: Value =
        client.get(format!("{}/openapi.json", daemon.base)).send().await.unwrap().json().await.unwrap();
    let operations = operations(&contract);
    assert!(operations.len() >= 20, "{operations:?}");
    assert!(operations.contains(&("GET".into(), "/docs".into())), "the page is in the contract it renders");
    assert!(operations.contains(&("POST".into(), "/dev/airdrop".into())));

    // Over HTTP: one HTML page, no script, a policy that lets it load nothing from anywhere.
    let answer = client.get(format!("{}/docs", daemon.base)).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let policy = answer.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.starts_with("default-src 'none'") && !policy.contains("script-src"), "{policy}");
    let page = answer.text().await.unwrap();
    for (method, path) in &operations {
        assert!(page.contains(&format!("data-method=\"{method}\" data-path=\"{path}\"")), "{method} {path} is missing");
    }
    for tag in ["<script", "src=", "@import", "url("] {
        assert!(!page.contains(tag), "the page refers to something outside itself ({tag})");
    }
    // `/supported` is open by default: the page (as the contract) says it takes no key.
    let (_, supported) = page.split_once("data-path=\"/supported\"").unwrap();
    let supported = supported.split("</section>").next().unwrap();
    assert!(supported.contains("No API key needed"), "{supported}");

    // In a browser: each operation is a visible section, reachable from the navigation; the page
    // makes no request but its own, every in-page link has a target.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/docs.mjs");
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs.png");
    let (base, shot) = (daemon.base.clone(), screenshot.clone());
    let output = tokio::task::spawn_blocking(move || Command::new("node").arg(&script).arg(&base).arg(&shot).output())
        .await
        .unwrap()
        .expect("node runs (scripts/test installs what the browser test needs)");
    assert!(output.status.success(), "the browser script failed: {}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    println!("screenshot: {}", screenshot.display());
    assert_eq!(seen["operations"], operations.len(), "{seen}");
    assert_eq!(seen["found"], operations.len(), "every operation is on the page: {seen}");
    assert_eq!(seen["unlinked"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["brokenLinks"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["requests"], serde_json::json!([format!("{}/docs", daemon.base)]), "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
}
