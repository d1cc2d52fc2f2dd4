//! The demo page in a real browser: headless Chromium (Debian's) driven by playwright-core
//! (`tests/browser/pay-and-fetch.mjs`; `scripts/test` installs both). "Pay & fetch" pays in
//! hosted mode and shows the content and the transaction; the live feed lists the payment.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pay_and_fetch_in_a_headless_browser() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/pay-and-fetch.mjs");
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-page.png");
    let url = format!("{}/", demo.shop_url);
    let output =
        tokio::task::spawn_blocking(move || Command::new("node").arg(&script).arg(&url).arg(&screenshot).output())
            .await
            .unwrap()
            .expect("node runs (scripts/test installs what the browser test needs)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the browser script failed: {stderr}");
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    println!("screenshot: {}", Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-page.png").display());

    // The page showed the paid content and the transaction that paid it.
    let transaction = seen["transaction"].as_str().unwrap();
    assert!(!transaction.is_empty(), "{seen}");
    assert_eq!(seen["content"]["quote"]["pair"], "SOL/USD", "{seen}");
    assert_eq!(seen["content"]["transaction"], transaction, "the handler saw the same payment");
    assert_eq!(seen["content"]["paidBy"], demo.page_buyer.as_str());
    assert!(seen["feedTransactions"].as_array().unwrap().iter().any(|t| t == transaction), "{seen}");
    // The paid POST card: listed with its method, its sample text posted and summarized.
    let posted = &seen["posted"];
    assert_eq!(posted["path"], "POST /summarize", "{seen}");
    assert_eq!(posted["content"]["words"], 19, "{seen}");
    assert_eq!(posted["content"]["summary"], "Tollgate sells any request, not only a GET:", "{seen}");
    assert_eq!(posted["content"]["transaction"], posted["transaction"], "{seen}");

    // The transaction is on the ledger, and the payment is the page buyer's, confirmed.
    let backend = demo.state.chains.embedded_solana().unwrap();
    let signature = transaction.parse().unwrap();
    let outcome = backend.rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(5)).await.unwrap();
    assert!(matches!(outcome, Some(tollgate_facilitator::chains::TxOutcome::Confirmed { .. })), "{outcome:?}");
    let history = demo.history(&demo.seller, "received").await.unwrap();
    assert_eq!(history["total"], 2, "{history}");
    for (payment, method, path) in
        [(&history["payments"][0], "POST", "/summarize"), (&history["payments"][1], "GET", "/quote")]
    {
        assert_eq!(payment["status"], "confirmed", "{history}");
        assert_eq!(payment["from"], demo.page_buyer.as_str());
        assert_eq!(payment["metadata"]["method"], method, "the payment is bound to its request's method");
        assert!(payment["resource"].as_str().unwrap().ends_with(path), "{history}");
    }
}
