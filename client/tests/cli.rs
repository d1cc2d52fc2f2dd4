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

/// The arguments after `--` of a printed `cargo run … -- …` command (as a shell splits them:
/// words, or text in single quotes).
fn printed_args(command: &str) -> Vec<String> {
    let (_, args) = command.split_once(" -- ").unwrap();
    let mut words = Vec::new();
    for (i, part) in args.split('\'').enumerate() {
        if i % 2 == 1 {
            words.push(part.to_owned());
        } else {
            words.extend(part.split_whitespace().map(str::to_owned));
        }
    }
    words
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

    // Over the cap: exit 3, the reason on stderr, nothing paid.
    let mut frugal = args.clone();
    let max = frugal.iter().position(|a| a == "--max").unwrap();
    frugal[max + 1] = "0.0005SOL".into();
    let out = run(frugal.clone(), vec![]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the price 0.001 SOL is above the spending cap of 0.0005 SOL"), "{stderr}");
    // A cap in another asset takes no SOL offer (3); a cap without an asset is refused (2).
    for (cap, why, code) in [("1ETH", "none in the cap's asset (1 ETH)", 3), ("1", "names no asset", 2)] {
        frugal[max + 1] = cap.into();
        let out = run(frugal.clone(), vec![]).await;
        assert_eq!(out.status.code(), Some(code), "{cap}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{cap}: {stderr}");
    }
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2);

    // No cap at all: refused before anything is signed (exit 3), the offer and the flag to add
    // on stderr; `--no-cap` says to pay whatever is asked.
    let mut uncapped = args.clone();
    uncapped.drain(max..max + 2);
    let out = run(uncapped.clone(), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("refusing to pay 0.001 SOL"), "{stderr}");
    assert!(stderr.contains("--max 0.001SOL") && stderr.contains("--no-cap"), "{stderr}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2, "nothing paid");
    let mut dry = uncapped.clone();
    dry.insert(0, "--dry-run".into());
    let out = run(dry, vec![]).await;
    assert_eq!(out.status.code(), Some(3), "a dry run says the same");
    assert!(String::from_utf8_lossy(&out.stderr).contains("would pay nothing: refusing to pay"));
    uncapped.insert(0, "--no-cap".into());
    let out = run(uncapped, vec![]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3);

    // A day pass: paid once, then the same wallet signs in instead of paying again.
    let mut daily = args.clone();
    let url = daily.len() - 1;
    daily[url] = format!("{}/daily", demo.shop_url);
    daily[max + 1] = "0.05SOL".into();
    let out = run(daily.clone(), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.starts_with("paid 0.02 SOL"), "{stderr}");
    let out = run(daily, vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.trim(), format!("signed in as {} with a pass bought before: nothing paid", demo.buyer));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["paidBy"], demo.buyer.as_str(), "{body}");
    assert!(body["passUntil"].as_i64().is_some(), "{body}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 4, "the pass, paid once");

    // No key at all: exit 3 with what was offered.
    let out = run(vec![format!("{}/quote", demo.shop_url)], vec![]).await;
    assert_eq!(out.status.code(), Some(3));
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
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 5);
}

/// The demo with a fresh anvil (kept alive with its data folder by the caller).
async fn evm_demo() -> (alloy::node_bindings::AnvilInstance, tempfile::TempDir, tollgate_demo::Demo) {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
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

    // The same cap naming the token by its symbol, as its contract says it.
    let mut args = printed_args(&command);
    let max = args.iter().position(|a| a == "--max").unwrap();
    args[max + 1] = format!("0.1{}", tollgate_demo::DEMO_TOKEN_SYMBOL.to_lowercase());
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().to_owned();
    let out = run(args.clone(), vec![("TOLLGATE_EVM_KEY", key.clone())]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with(&format!("paid 0.05 of token {}", evm.token)), "{stderr}");
    assert_eq!(demo.history(&evm.buyer, "sent").await.unwrap()["total"], 2);
    // A symbol no offer's token has: nothing to pay with.
    args[max + 1] = "0.1USDC".into();
    let out = run(args, vec![("TOLLGATE_EVM_KEY", key)]).await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));

    // A paid POST on EVM, in ETH: the body is posted again with the signed transfer.
    let mut args = printed_args(&demo.evm_pay_command("/summarize").unwrap());
    let max = args.iter().position(|a| a == "--max").unwrap();
    args[max + 1] = "0.001ETH".into();
    args.splice(max + 2..max + 2, ["-d".to_owned(), "paid on evm".to_owned()]);
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().to_owned();
    let out = run(args, vec![("TOLLGATE_EVM_KEY", key)]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with(&format!("paid 0.0001 ETH on eip155:{}", evm.chain_id)), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((body["words"].as_u64(), body["summary"].as_str()), (Some(3), Some("paid on evm")));
    assert_eq!(demo.history(&evm.buyer, "sent").await.unwrap()["total"], 3);
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

/// A paid `POST`: the body is sent with the payment too, `-i`, `-o`, `--json` and `--dry-run`
/// say what they should, and a seller that redirects the paid request to another origin never
/// gets the payment header sent there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paid_post_sends_its_body_and_no_payment_follows_a_redirect_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let mut keys = printed_args(&demo.pay_command());
    keys.pop(); // the URL
    let with = |extra: &[&str]| keys.iter().cloned().chain(extra.iter().map(|a| (*a).to_owned())).collect::<Vec<_>>();
    let summarize = format!("{}/summarize", demo.shop_url);
    let text = "one two three four five six seven eight nine ten";

    // The demo's printed command for its paid POST.
    let out = run(printed_args(&demo.post_pay_command()), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.starts_with("paid 0.001 SOL on solana:"), "{stderr}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((body["words"].as_u64(), body["summary"].as_str()), (Some(4), Some("any text to summarize")));

    // -X POST -d TEXT -i --json: status line and headers, then the body; the payment as JSON.
    let out = run(with(&["-X", "POST", "-d", text, "-i", "--json", summarize.as_str()]), vec![]).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let (head, body) = stdout.split_once("\n\n").unwrap();
    assert!(head.starts_with("HTTP 200 OK\n"), "{head}");
    assert!(head.to_ascii_lowercase().contains("payment-response: "), "{head}");
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (body["words"].as_u64(), body["summary"].as_str()),
        (Some(10), Some("one two three four five six seven eight"))
    );
    let paid: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(paid["paid"]["amount"], "1000000", "{paid}");
    assert_eq!(paid["paid"]["asset"], "SOL");
    assert_eq!(paid["paid"]["transaction"], body["transaction"]);
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2);

    // -d @file (POST implied), -o FILE.
    let (posted, saved) = (dir.path().join("text.txt"), dir.path().join("answer.json"));
    std::fs::write(&posted, "a b c").unwrap();
    let at_file = format!("@{}", posted.display());
    let out = run(with(&["-d", at_file.as_str(), "-o", saved.to_str().unwrap(), summarize.as_str()]), vec![]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(saved["words"], 3);
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3);

    // --dry-run: the offers and what it would pay; nothing paid. Under --max: exit 3.
    let out = run(with(&["-X", "POST", "-d", text, "--dry-run", summarize.as_str()]), vec![]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("would pay 0.001 SOL on solana:"), "{stderr}");
    let mut frugal = with(&["-X", "POST", "-d", text, "--dry-run", "--json", summarize.as_str()]);
    let max = frugal.iter().position(|a| a == "--max").unwrap();
    frugal[max + 1] = "0.0001SOL".into();
    let out = run(frugal, vec![]).await;
    assert_eq!(out.status.code(), Some(3));
    let said: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert!(
        said["wouldPay"].is_null() && said["whyNot"].as_str().unwrap().contains("above the spending cap"),
        "{said}"
    );
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3, "a dry run pays nothing");

    // A malformed header, or the payment header given by hand: exit 2, nothing sent.
    for bad in ["NoColon", "X-PAYMENT: forged"] {
        let out = run(with(&["-H", bad, summarize.as_str()]), vec![]).await;
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", String::from_utf8_lossy(&out.stderr));
    }

    // A seller whose paid answer redirects to another origin: the payment is not sent there.
    let thief = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let thief_url = format!("http://{}", thief.local_addr().unwrap());
    let stolen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = stolen.clone();
    std::thread::spawn(move || {
        for mut stream in thief.incoming().flatten() {
            use std::io::Read as _;
            let mut buffer = vec![0; 8192];
            let n = stream.read(&mut buffer).unwrap_or(0);
            seen.lock().unwrap().push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
    });
    let first = reqwest::get(format!("{}/quote", demo.shop_url)).await.unwrap();
    assert_eq!(first.status(), 402);
    let challenge = (first.headers().get("payment-required").cloned(), first.bytes().await.unwrap());
    let proofs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = proofs.clone();
    let app = axum::Router::new().route(
        "/pay-me",
        axum::routing::get(move |headers: axum::http::HeaderMap, uri: axum::http::Uri| {
            let (challenge, thief_url, counted) = (challenge.clone(), thief_url.clone(), counted.clone());
            async move {
                use axum::response::IntoResponse as _;
                let paying = headers.contains_key("x-payment") || headers.contains_key("payment-signature");
                counted.fetch_add(usize::from(paying), std::sync::atomic::Ordering::SeqCst);
                // `?again`: asks again after being paid (the buyer pays once, then stops).
                if paying && uri.query() != Some("again") {
                    let to = format!("{thief_url}/collect");
                    return (axum::http::StatusCode::TEMPORARY_REDIRECT, [("location", to)]).into_response();
                }
                let mut answer = (axum::http::StatusCode::PAYMENT_REQUIRED, challenge.1).into_response();
                if let Some(v2) = challenge.0 {
                    answer.headers_mut().insert("payment-required", v2);
                }
                answer
            }
        }),
    );
    let seller = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let seller_url = format!("http://{}/pay-me", seller.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(seller, app).await });
    let out = run(with(&["-i", seller_url.as_str()]), vec![]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("HTTP 307"), "the redirect is answered as is: {stdout}");
    // A seller that answers 402 again once paid: one proof sent, refused (4), not paid again.
    let out = run(with(&[&format!("{seller_url}?again")]), vec![]).await;
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(proofs.load(std::sync::atomic::Ordering::SeqCst), 2, "one proof per run");
    assert!(stolen.lock().unwrap().is_empty(), "the other origin got: {:?}", stolen.lock().unwrap());
}

/// Budgets in a file, across runs and concurrent runs of the binary: 3 payments fit a budget of
/// 0.003 SOL a day and the 4th is refused (exit 3) in a later process; 20 processes at once
/// under a budget of 10 payments pay 10. The file is the spend log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_file_holds_across_runs_and_concurrent_runs() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let args = printed_args(&demo.pay_command());
    let with = |extra: &[&str]| extra.iter().map(|a| (*a).to_owned()).chain(args.iter().cloned()).collect::<Vec<_>>();
    let daily = dir.path().join("daily.db");
    let daily = daily.to_str().unwrap();

    for _ in 0..3 {
        let out = run(with(&["--budget-file", daily, "--budget", "0.003SOL/day"]), vec![]).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = run(with(&["--budget-file", daily, "--budget", "0.003SOL/day"]), vec![]).await;
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not fit the budget of 0.003 SOL per 24 h (0.003 spent)"), "{stderr}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3);
    // A budget without a file to count in is refused.
    assert_eq!(run(with(&["--budget", "1SOL"]), vec![]).await.status.code(), Some(2));

    // 20 at once, 10 payments' worth: 10 pay, 10 are refused before signing anything.
    let shared = dir.path().join("shared.db");
    let shared = shared.to_str().unwrap().to_owned();
    let runs: Vec<_> = (0..20).map(|_| run(with(&["--budget-file", &shared, "--budget", "0.01SOL"]), vec![])).collect();
    let codes: Vec<Option<i32>> = futures_codes(runs).await;
    assert_eq!(codes.iter().filter(|c| **c == Some(0)).count(), 10, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == Some(3)).count(), 10, "{codes:?}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 13);
    let log = tollgate_client::Budget::open(std::path::Path::new(&shared), Vec::new()).unwrap().spends().await.unwrap();
    assert_eq!(log.len(), 10);
    assert!(log.iter().all(|s| s.status == "paid" && s.transaction.is_some()), "{log:?}");
}

/// The exit codes of runs started together.
async fn futures_codes(runs: Vec<impl std::future::Future<Output = Output> + Send + 'static>) -> Vec<Option<i32>> {
    let handles: Vec<_> = runs.into_iter().map(tokio::spawn).collect();
    let mut codes = Vec::new();
    for handle in handles {
        codes.push(handle.await.unwrap().status.code());
    }
    codes
}
