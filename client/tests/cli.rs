//! `tollgate-pay`, the binary, against the demo: the command the demo prints pays and prints the
//! content; a second run pays again; a cap below the price exits 1 without paying.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::process::{Command, Output};

/// Runs `tollgate-pay` with the arguments of a printed command (what follows `--`).
async fn run(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tollgate-pay")).args(args).envs(env).output().unwrap()
    })
    .await
    .unwrap()
}

/// The arguments after `--` of a printed `cargo run … -- …` command.
fn printed_args(command: &str) -> Vec<String> {
    let (_, args) = command.split_once(" -- ").unwrap();
    args.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_printed_command_pays_and_a_second_run_pays_again() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let args = printed_args(&demo.pay_command());

    let mut transactions = Vec::new();
    for _ in 0..2 {
        let out = run(args.clone(), vec![]).await;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stderr}");
        let body: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(body["quote"]["pair"], "SOL/USD");
        assert!(stderr.starts_with("paid 0.001 SOL on solana:"), "{stderr}");
        let transaction = body["transaction"].as_str().unwrap().to_owned();
        assert!(stderr.contains(&transaction), "stderr names the transaction: {stderr}");
        transactions.push(transaction);
    }
    assert_ne!(transactions[0], transactions[1], "a new proof each run");
    let history = demo.history(&demo.buyer, "sent").await.unwrap();
    assert_eq!(history["total"], 2, "{history}");
    let listed: Vec<&str> =
        history["payments"].as_array().unwrap().iter().map(|p| p["transaction"].as_str().unwrap()).collect();
    assert_eq!(listed, [transactions[1].as_str(), transactions[0].as_str()]);

    // Over the cap: exit 1, the reason on stderr, nothing paid.
    let mut frugal = args.clone();
    let max = frugal.iter().position(|a| a == "--max").unwrap();
    frugal[max + 1] = "0.0005SOL".into();
    let out = run(frugal.clone(), vec![]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the price 0.001 SOL is above the spending cap of 0.0005 SOL"), "{stderr}");
    // A cap in another asset takes no SOL offer; a cap without an asset is refused.
    for (cap, why) in [("1ETH", "none in the cap's asset (1 ETH)"), ("1", "names no asset")] {
        frugal[max + 1] = cap.into();
        let out = run(frugal.clone(), vec![]).await;
        assert_eq!(out.status.code(), Some(1), "{cap}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{cap}: {stderr}");
    }
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2);

    // No key at all: exit 1 with what was offered.
    let out = run(vec![format!("{}/quote", demo.shop_url)], vec![]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no offered way to pay fits this buyer"));

    // The printed `proxy` line's URL (a Python service behind tollgate-proxy), paid by its
    // printed command: 0.001 SOL.
    let command = demo.proxy_pay_command().expect("python3 runs the proxied service");
    assert!(command.ends_with(&demo.proxy_url().unwrap()), "{command}");
    let out = run(printed_args(&command), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with("paid 0.001 SOL on solana:"), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["city"], "Lisbon");
    assert_eq!(body["paid_by"]["payer"], demo.buyer, "{body}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3);
}

/// The demo with a fresh anvil (kept alive with its data folder by the caller).
async fn evm_demo() -> (alloy::node_bindings::AnvilInstance, tempfile::TempDir, tollgate_demo::Demo) {
    let anvil = alloy::node_bindings::Anvil::at(tollgate_facilitator::devnet::anvil_binary().unwrap())
        .host("127.0.0.1")
        .try_spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options =
        tollgate_demo::Options { evm_rpc_url: Some(anvil.endpoint()), ..tollgate_demo::Options::new(dir.path()) };
    let demo = tollgate_demo::start(&options).await.unwrap();
    (anvil, dir, demo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_printed_evm_command_pays_with_an_eip3009_authorization() {
    let (_anvil, _dir, demo) = evm_demo().await;
    let evm = demo.evm.clone().unwrap();
    let command = demo.evm_pay_command("/report").unwrap();
    assert!(command.starts_with(&format!("TOLLGATE_EVM_KEY=$(cat {})", evm.buyer_key_file.display())));
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().to_owned();

    let out = run(printed_args(&command), vec![("TOLLGATE_EVM_KEY", key)]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with(&format!("paid 0.05 of token {} on eip155:{}", evm.token, evm.chain_id)), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(body["report"].as_str().unwrap().starts_with("Daily report"));
    assert_eq!(demo.history(&evm.buyer, "sent").await.unwrap()["total"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_printed_metered_command_pays_for_the_words_told() {
    let (_anvil, _dir, demo) = evm_demo().await;
    let evm = demo.evm.clone().unwrap();
    let pusd = evm.permit2_token.clone().expect("Permit2 is installed by scripts/test");
    let command = demo.permit2_pay_command("/story?words=12").unwrap();
    assert!(command.contains(&format!("--max 0.05@{pusd}")), "{command}");
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().to_owned();

    let out = run(printed_args(&command), vec![("TOLLGATE_EVM_KEY", key)]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let paid = format!("paid 0.012 of token {pusd} of 50000 atomic units authorized on eip155:{}", evm.chain_id);
    assert!(stderr.starts_with(&paid), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((body["words"].as_u64(), body["charged"].as_str()), (Some(12), Some("12000")));

    // The proxied Python service's metered summary, by its printed command: 12 words reported.
    let command = demo.proxy_metered_command().expect("python3 runs the proxied service");
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().to_owned();
    let out = run(printed_args(&command), vec![("TOLLGATE_EVM_KEY", key)]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with(&paid), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["summary"].as_str().unwrap().split(' ').count(), 12);
}
