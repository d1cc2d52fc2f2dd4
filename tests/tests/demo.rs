//! End to end on the demo: `tollgate-client` → the demo shop (`PaymentLayer`) → the facilitator
//! over HTTP → a real chain. Solana on the embedded ledger (native SOL and SPL `exact`), EVM on
//! a real anvil (native ETH, EIP-3009 `exact`, any ERC-20 through Permit2 and a metered `upto`
//! route).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use alloy::node_bindings::Anvil;
use alloy::primitives::{Address, U256};
use solana_sdk::signer::Signer as _;
use tollgate_client::{Buyer, Cap, PayError, PrivateKeySigner};
use tollgate_demo::Options;
use tollgate_facilitator::chains::solana::spl::associated_token_address;
use tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM;
use tollgate_facilitator::devnet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_solana_buyer_pays_native_sol_and_spl_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&Options::new(dir.path())).await.unwrap();
    let backend = demo.state.chains.embedded_solana().unwrap();
    let rpc = &backend.rpc;
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer_key = key.pubkey();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).with_cap(Cap::whole("0.05").unwrap());
    let seller: solana_sdk::pubkey::Pubkey = demo.seller.parse().unwrap();
    let sol_before = rpc.balance(&seller).await.unwrap();

    // /quote: 0.001 SOL, a System transfer the buyer signs.
    let paid = buyer.get(&format!("{}/quote", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert_eq!((made.amount.get(), made.whole.to_string()), (1_000_000, "0.001".to_owned()));
    let settlement = paid.settlement.expect("a settlement header");
    assert!(settlement.success);
    assert_eq!(made.transaction.as_deref(), Some(settlement.transaction.as_str()));
    assert_eq!(rpc.balance(&seller).await.unwrap(), sol_before + 1_000_000);

    // /report: the SPL token comes first in the shop's offers; the facilitator pays the fee.
    let mint: solana_sdk::pubkey::Pubkey = demo.spl_token.parse().unwrap();
    let token_balance = |owner| async move {
        let ata = associated_token_address(&owner, &mint, &TOKEN_PROGRAM);
        let (_, data) = rpc.account(&ata).await.unwrap().unwrap();
        u64::from_le_bytes(data[64..72].try_into().unwrap())
    };
    let (buyer_tokens, buyer_sol) = (token_balance(buyer_key).await, rpc.balance(&buyer_key).await.unwrap());
    let paid = buyer.get(&format!("{}/report", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert_eq!(made.asset, tollgate_protocol::x402::Asset::Token(demo.spl_token.parse().unwrap()));
    assert_eq!(made.whole.to_string(), "0.05");
    assert_eq!(token_balance(seller).await, 50_000);
    assert_eq!(token_balance(buyer_key).await, buyer_tokens - 50_000);
    assert_eq!(rpc.balance(&buyer_key).await.unwrap(), buyer_sol, "the buyer pays no fee for a token payment");
    let body: serde_json::Value = serde_json::from_slice(&paid.body).unwrap();
    assert_eq!(body["transaction"].as_str(), made.transaction.as_deref());

    // Both are in the buyer's history, newest first.
    let sent = demo.history(&demo.buyer, "sent").await.unwrap();
    assert_eq!(sent["total"], 2, "{sent}");
    assert_eq!(sent["payments"][0]["asset"], demo.spl_token.as_str());
    assert_eq!(sent["payments"][1]["asset"], "native");

    // A cap below every price: refused before anything is signed.
    let frugal = Buyer::new()
        .with_solana(
            tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap(),
            &demo.solana_rpc_url,
        )
        .with_cap(Cap::whole("0.0001").unwrap());
    let refused = frugal.get(&format!("{}/quote", demo.shop_url)).await.unwrap_err();
    assert!(matches!(refused, PayError::OverCap { .. }), "{refused}");
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 2);

    // The Python service sold through tollgate-proxy: paid like any route (TUSD first), and
    // the service knows who paid from the proxy's signed headers.
    let url = demo.proxy_url().expect("python3 runs the proxied service");
    let paid = buyer.get(&url).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let body: serde_json::Value = serde_json::from_slice(&paid.body).unwrap();
    assert_eq!((body["city"].as_str(), body["forecast"].as_str()), (Some("Lisbon"), Some("sunny, 21 C")));
    assert_eq!(body["paid_by"]["payer"], buyer_key.to_string(), "{body}");
    assert_eq!(body["paid_by"]["amount"], "10000");
    assert_eq!(token_balance(seller).await, 60_000);
    assert_eq!(demo.history(&demo.buyer, "sent").await.unwrap()["total"], 3);
}

/// The demo with a fresh anvil (kept alive with its data folder by the caller).
async fn evm_demo() -> (alloy::node_bindings::AnvilInstance, tempfile::TempDir, tollgate_demo::Demo) {
    let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = Options { evm_rpc_url: Some(anvil.endpoint()), ..Options::new(dir.path()) };
    let demo = tollgate_demo::start(&options).await.unwrap();
    (anvil, dir, demo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_evm_buyer_pays_native_eth_and_eip3009_tokens_on_anvil() {
    let (_anvil, _dir, demo) = evm_demo().await;
    let evm = demo.evm.clone().unwrap();
    let backend = demo.state.chains.evm(&tollgate_protocol::Network::eip155(evm.chain_id)).unwrap();
    let rpc = &backend.rpc;
    let key = std::fs::read_to_string(&evm.buyer_key_file).unwrap();
    let signer: PrivateKeySigner = key.trim().parse().unwrap();
    assert_eq!(signer.address().to_checksum(None), evm.buyer);
    // An EVM key only: the Solana offers are not this buyer's to pay.
    let buyer = Buyer::new().with_evm(signer, &evm.rpc_url).unwrap().with_cap(Cap::whole("0.1").unwrap());
    let seller: Address = evm.seller.parse().unwrap();

    // /quote: 0.0001 ETH, an EIP-1559 transfer the buyer signs and the facilitator broadcasts.
    let paid = buyer.get(&format!("{}/quote", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert_eq!(made.whole.to_string(), "0.0001");
    assert_eq!(rpc.balance(seller).await.unwrap(), U256::from(100_000_000_000_000u128));
    // Twice in a row: the client's nonces follow each other.
    assert_eq!(buyer.get(&format!("{}/quote", demo.shop_url)).await.unwrap().status, 200);
    assert_eq!(rpc.balance(seller).await.unwrap(), U256::from(200_000_000_000_000u128));

    // /report: the EIP-3009 token; the buyer signs off chain, the facilitator submits and pays gas.
    let token: Address = evm.token.parse().unwrap();
    let eth_before = rpc.balance(evm.buyer.parse().unwrap()).await.unwrap();
    let paid = buyer.get(&format!("{}/report", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert_eq!(made.whole.to_string(), "0.05");
    assert!(made.transaction.as_deref().is_some_and(|t| t.starts_with("0x")), "{made:?}");
    let seller_tokens = tollgate_facilitator::chains::evm::erc20::balance_of(rpc, token, seller).await.unwrap();
    assert_eq!(seller_tokens, U256::from(50_000));
    assert_eq!(rpc.balance(evm.buyer.parse().unwrap()).await.unwrap(), eth_before, "no gas paid by the buyer");

    let sent = demo.history(&evm.buyer, "sent").await.unwrap();
    assert_eq!(sent["total"], 3, "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_evm_buyer_pays_through_permit2_and_a_metered_story_what_it_used() {
    let (_anvil, _dir, demo) = evm_demo().await;
    let evm = demo.evm.clone().unwrap();
    let pusd: Address = evm.permit2_token.clone().expect("Permit2 is installed by scripts/test").parse().unwrap();
    let rpc = &demo.state.chains.evm(&tollgate_protocol::Network::eip155(evm.chain_id)).unwrap().rpc;
    let signer: PrivateKeySigner = std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let buyer =
        Buyer::new().with_evm(signer, &evm.rpc_url).unwrap().with_cap(Cap::parse(&format!("0.05@{pusd}")).unwrap());
    let (seller, me): (Address, Address) = (evm.seller.parse().unwrap(), evm.buyer.parse().unwrap());
    let pusd_of = |who: Address| async move {
        tollgate_facilitator::chains::evm::erc20::balance_of(rpc, pusd, who).await.unwrap()
    };
    let eth_before = rpc.balance(me).await.unwrap();

    // /report in PUSD through Permit2: no allowance, so an EIP-2612 permit rides along.
    let paid = buyer.get(&format!("{}/report", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let made = paid.payment.unwrap();
    assert_eq!((made.whole.to_string(), made.approval), ("0.05".to_owned(), None));
    assert_eq!(pusd_of(seller).await, U256::from(50_000));

    // The metered story: 12 words at 0.001 of the 0.05 authorized, then 50 (the most).
    let paid = buyer.get(&format!("{}/story?words=12", demo.shop_url)).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    let body: serde_json::Value = serde_json::from_slice(&paid.body).unwrap();
    assert_eq!(body["story"].as_str().unwrap().split(' ').count(), 12);
    let made = paid.payment.unwrap();
    assert_eq!((made.whole.to_string(), made.authorized.map(|a| a.get())), ("0.012".to_owned(), Some(50_000)));
    assert_eq!(pusd_of(seller).await, U256::from(62_000), "12 words moved, not the 50 authorized");
    let paid = buyer.get(&format!("{}/story?words=80", demo.shop_url)).await.unwrap();
    assert_eq!(paid.payment.unwrap().whole.to_string(), "0.05", "told 50 words at most");
    assert_eq!(pusd_of(seller).await, U256::from(112_000));
    assert_eq!(pusd_of(me).await, U256::from(100_000_000 - 112_000));
    assert_eq!(rpc.balance(me).await.unwrap(), eth_before, "the buyer paid no gas: the facilitator did");
    let sent = demo.history(&evm.buyer, "sent").await.unwrap();
    assert_eq!(sent["total"], 3, "{sent}");

    // The proxied Python service's metered summary: charged for the words it reported.
    let url = format!("{}/summary?words=12", demo.proxied.as_ref().expect("python3 runs").url);
    let paid = buyer.get(&url).await.unwrap();
    assert_eq!(paid.status, 200, "{}", paid.body_text());
    assert_eq!(paid.payment.unwrap().whole.to_string(), "0.012");
    assert_eq!(pusd_of(seller).await, U256::from(124_000));
}

/// Every paid route of the demo's shop and of the service it sells through `tollgate-proxy` is
/// in its origin's `/.well-known/x402.json`, offered exactly as its live 402 offers it, with the
/// route's declaration; free routes are not; the origin is the one the request names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_well_known_manifests_list_every_paid_route_as_its_402_offers_it() {
    use tollgate_protocol::x402::PaymentRequiredV2;
    use tollgate_protocol::x402::bazaar::Manifest;

    let (_anvil, _dir, demo) = evm_demo().await;
    let proxy = demo.proxied.as_ref().expect("python3 runs the proxied service").url.clone();
    let http = reqwest::Client::new();
    let origins = [
        (demo.shop_url.clone(), vec!["/quote", "/report", "/summarize", "/words", "/daily", "/story", "/ticker"]),
        (proxy, vec!["/forecast", "/events", "/upload", "/whoami", "/summary"]),
    ];
    for (origin, mut paid) in origins {
        let answer = http.get(format!("{origin}/.well-known/x402.json")).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["access-control-allow-origin"], "*");
        assert!(
            answer.headers()["vary"].to_str().unwrap().contains("x-forwarded-host"),
            "a cache keeps one per origin"
        );
        let mut manifest: Manifest = answer.json().await.unwrap();
        assert_eq!(manifest.x402_version, 2);
        // The shop lists its MCP tools too, at their mcp:// resources, declared from their own
        // listing (their prices are held to the tools' own in demo-server/tests/mcp.rs).
        let (tools, http_items): (Vec<_>, Vec<_>) = manifest.items.into_iter().partition(|item| item.kind == "mcp");
        manifest.items = http_items;
        let mut tool_urls: Vec<&str> = tools.iter().map(|t| t.resource.url.as_str()).collect();
        tool_urls.sort_unstable();
        if origin == demo.shop_url {
            assert_eq!(tool_urls, ["mcp://tool/summarize", "mcp://tool/tell_story"]);
            assert!(tools.iter().all(|t| t.input["toolName"].is_string() && t.input["inputSchema"].is_object()));
        } else {
            assert!(tools.is_empty());
        }
        let mut listed: Vec<String> = manifest.items.iter().map(|item| item.resource.url.clone()).collect();
        listed.sort();
        paid.sort_unstable();
        assert_eq!(listed, paid.iter().map(|path| format!("{origin}{path}")).collect::<Vec<_>>(), "{origin}");
        for item in &manifest.items {
            assert_eq!(item.kind, "http");
            let method = item.input["method"].as_str().unwrap();
            let live = match method {
                "GET" => http.get(&item.resource.url),
                "POST" => http.post(&item.resource.url).body("some words"),
                other => panic!("{other}"),
            }
            .send()
            .await
            .unwrap();
            assert_eq!(live.status(), 402, "{}", item.resource.url);
            let required: PaymentRequiredV2 =
                tollgate_protocol::x402::header::decode(live.headers()["payment-required"].to_str().unwrap()).unwrap();
            assert_eq!(item.accepts, required.accepts, "{}", item.resource.url);
            assert_eq!(item.resource.description.as_deref(), Some(required.resource.description.as_str()));
            assert_eq!(item.resource.service, required.resource.service);
            // The declaration the 402 carries is the one the manifest lifts; a route declaring
            // nothing (the proxy's /upload: a body method without an example) is listed with
            // its method alone.
            match required.extensions.get("bazaar") {
                Some(declaration) => {
                    let declared: tollgate_protocol::x402::bazaar::Declaration =
                        serde_json::from_value(declaration.clone()).unwrap();
                    assert_eq!(declared.lifted_input(), item.input, "{}", item.resource.url);
                    assert_eq!(declared.info.output, item.output);
                }
                None => {
                    assert!(item.resource.url.ends_with("/upload"), "{} declares nothing", item.resource.url);
                    assert_eq!(serde_json::Value::Object(item.input.clone()), serde_json::json!({"method": "POST"}));
                }
            }
        }
    }

    // The proxy's forecast, as its [route.discovery] declares it.
    let proxy = &demo.proxied.as_ref().unwrap().url;
    let manifest: Manifest =
        http.get(format!("{proxy}/.well-known/x402.json")).send().await.unwrap().json().await.unwrap();
    let forecast = manifest.items.iter().find(|item| item.resource.url.ends_with("/forecast")).unwrap();
    assert_eq!(forecast.input["queryParams"], serde_json::json!({"city": "Paris"}));
    assert_eq!(forecast.resource.service.service_name.as_deref(), Some("Demo weather"));
    assert_eq!(forecast.resource.service.tags, ["weather", "demo"]);

    // The shop names its origin: a request naming another host (a buyer's choice) changes no
    // URL of its manifest.
    let manifest: Manifest = http
        .get(format!("{}/.well-known/x402.json", demo.shop_url))
        .header("x-forwarded-host", "shop.example")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let on_the_web = manifest.items.iter().filter(|item| item.kind == "http");
    assert!(
        on_the_web.clone().count() >= 5
            && on_the_web.into_iter().all(|item| item.resource.url.starts_with(&format!("{}/", demo.shop_url))),
        "{manifest:?}"
    );
}

/// After the demo's first payments the facilitator's catalog holds its routes as the shop and
/// the proxy declared them, and `tollgate-pay search` and `discover` print them with a command
/// line that buys them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_its_first_payments_the_demo_is_found_in_the_catalog_and_by_its_manifest() {
    use tollgate_client::discovery::ForSale;

    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&Options::new(dir.path())).await.unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).with_cap(Cap::whole("0.05").unwrap());
    assert_eq!(buyer.get(&format!("{}/quote", demo.shop_url)).await.unwrap().status, 200);
    assert_eq!(buyer.get(&demo.proxy_url().expect("python3 runs the proxied service")).await.unwrap().status, 200);

    // The catalog is written in the background of each settlement.
    let found = |query: &'static str| {
        let (buyer, facilitator) = (&buyer, demo.facilitator_url.clone());
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let page = buyer.search(&facilitator, query, None).await.unwrap();
                if !page.resources.is_empty() || std::time::Instant::now() > deadline {
                    return page.resources.into_iter().map(ForSale::from).collect::<Vec<_>>();
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    let quote = found("sol/usd quote").await;
    let [quote] = quote.as_slice() else { panic!("{quote:?}") };
    assert_eq!(quote.url, format!("{}/quote", demo.shop_url));
    assert_eq!(quote.service_name.as_deref(), Some("Tollgate demo shop"));
    let manifest = buyer.discover(&demo.shop_url).await.unwrap();
    let listed = manifest.items.into_iter().map(ForSale::from).find(|i| i.url == quote.url).unwrap();
    assert_eq!(listed.input, quote.input, "the catalog holds what the shop declares");
    assert!(listed.accepts.contains(&quote.accepts[0]), "the settled way to pay is one the shop offers");
    let forecast = found("weather forecast").await;
    assert_eq!(forecast.len(), 1, "{forecast:?}");
    let line = forecast[0].command_line().unwrap();
    let proxy = &demo.proxied.as_ref().unwrap().url;
    assert!(line.starts_with(&format!("tollgate-pay '{proxy}/forecast?city=Paris'")), "{line}");

    // The command, as a buyer types it.
    let pay = tollgate_e2e::built("tollgate-pay");
    let searched = std::process::Command::new(&pay)
        .args(["search", "--facilitator", &demo.facilitator_url, "quote"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&searched.stdout);
    assert!(searched.status.success(), "{}", String::from_utf8_lossy(&searched.stderr));
    assert!(text.contains(&format!("GET {}/quote — A SOL/USD quote", demo.shop_url)), "{text}");
    assert!(text.contains(&format!("tollgate-pay '{}/quote' --max", demo.shop_url)), "{text}");
    let discovered = std::process::Command::new(&pay).args(["discover", &demo.shop_url]).output().unwrap();
    let text = String::from_utf8_lossy(&discovered.stdout);
    assert!(discovered.status.success(), "{}", String::from_utf8_lossy(&discovered.stderr));
    for path in ["/quote", "/report", "/summarize", "/words", "/daily"] {
        assert!(text.contains(&format!("{}{path} — ", demo.shop_url)), "{path}: {text}");
    }
    assert!(text.contains("-d 'Paid per request, settled on chain.'"), "{text}");
    let page = reqwest::get(format!("{}/", demo.shop_url)).await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"href="/.well-known/x402.json""#), "the demo page links its manifest");
    let nowhere = std::process::Command::new(&pay).args(["discover", &demo.facilitator_url]).output().unwrap();
    assert_eq!(
        nowhere.status.code(),
        Some(1),
        "a facilitator has no manifest: {}",
        String::from_utf8_lossy(&nowhere.stderr)
    );
}
