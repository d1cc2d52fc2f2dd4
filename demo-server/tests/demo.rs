//! The demo from the outside: it starts offline, and its buyer pays the shop through the real
//! facilitator and ledger.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_starts_and_its_buyer_pays_twice() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    println!("demo ready in {:?}", started.elapsed());
    assert!(demo.pay_command().contains(&demo.buyer_key_file.display().to_string()));

    // Unpaid: 402.
    let answer = reqwest::get(format!("{}/quote", demo.shop_url)).await.unwrap();
    assert_eq!(answer.status().as_u16(), 402);

    // What the printed command does: the buyer's key file, the ledger's RPC, a cap.
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = tollgate_client::Buyer::new()
        .with_solana(key, &demo.solana_rpc_url)
        .with_cap(tollgate_client::Cap::whole("0.01").unwrap());
    for path in ["/quote", "/quote", "/words?pay+per+word"] {
        let paid = buyer.get(&format!("{}{path}", demo.shop_url)).await.unwrap();
        assert_eq!(paid.status, 200, "{path}: {}", paid.body_text());
        assert!(paid.payment.is_some());
    }
    // Every payment is in the buyer's history (as the shop's account sees it).
    let history = demo.history(&demo.buyer, "sent").await.unwrap();
    assert_eq!(history["total"], 3, "{history}");
    let amounts: Vec<&str> =
        history["payments"].as_array().unwrap().iter().map(|p| p["amountAtomic"].as_str().unwrap()).collect();
    assert_eq!(amounts, ["3000000", "1000000", "1000000"], "newest first: 3 words, then two quotes");

    // The page's live feed names tokens by their symbols, not their addresses.
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let cap = tollgate_client::Cap::parse(&format!("0.1@{}", demo.spl_token)).unwrap();
    let buyer = tollgate_client::Buyer::new().with_solana(key, &demo.solana_rpc_url).with_cap(cap);
    assert_eq!(buyer.get(&format!("{}/report", demo.shop_url)).await.unwrap().status, 200);
    let feed: serde_json::Value =
        reqwest::get(format!("{}/demo/feed", demo.shop_url)).await.unwrap().json().await.unwrap();
    let shown: Vec<(String, &str)> = feed["payments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["amount"].to_string(), p["symbol"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(shown.first().map(|(_, symbol)| *symbol), Some(tollgate_demo::DEMO_TOKEN_SYMBOL), "{feed}");
    assert!(shown.iter().skip(1).all(|(_, symbol)| *symbol == "SOL"), "{feed}");
}
