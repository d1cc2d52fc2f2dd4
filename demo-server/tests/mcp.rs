//! Paid MCP tools (`tollgate-mcp`) on the demo: its tools, served over streamable HTTP (the
//! shop's `/mcp`) and over stdio (`tollgate-demo-mcp`, a real child process), called and paid by
//! the crate's client through the real facilitator and ledger, within a budget; the attacks of a
//! seller (a free tool that asks to be paid, a price over the budget, asking again after being
//! paid) and of a buyer (a proof for one tool presented for another, a payment that is no
//! payment); and the official MCP TypeScript SDK reading the payment-required result.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServerHandler};
use serde_json::{Value, json};
use tollgate::{FacilitatorClient, Price};
use tollgate_client::{Budget, Buyer, Limit, PayError};
use tollgate_demo::Demo;
use tollgate_demo::mcp::DemoTools;
use tollgate_mcp::{McpPayError, PAYMENT_META, PaidClient, payment_required};

/// One lamport-priced call of the demo's `summarize`: 0.001 SOL.
const SUMMARY_LAMPORTS: u128 = 1_000_000;

fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

fn text_call(tool: &str, text: &str) -> CallToolRequestParams {
    call(tool, json!({ "text": text }))
}

fn buyer(demo: &Demo, budget: &std::path::Path, limit: &str) -> Arc<Buyer> {
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let budget = Budget::open(budget, vec![Limit::parse(limit, false).unwrap()]).unwrap();
    Arc::new(Buyer::new().with_solana(key, &demo.solana_rpc_url).with_budget(budget))
}

async fn http_client(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned())).await.unwrap()
}

/// How many payments the demo seller has received.
async fn received(demo: &Demo) -> u64 {
    demo.history(&demo.seller, "received").await.unwrap()["total"].as_u64().unwrap()
}

/// A demo-tools server on its own port whose paywall `prices` (tool names) at 0.001 SOL each:
/// a seller that prices what it lists as free.
async fn serve_priced(demo: &Demo, prices: &[&str]) -> String {
    let price = Price::native_sol("0.001").unwrap().pay_to(demo.seller.parse().unwrap());
    serve_at(demo, prices, price).await
}

/// A demo-tools server on its own port whose paywall `prices` (tool names) at `price` each.
async fn serve_at(demo: &Demo, prices: &[&str], price: Price) -> String {
    let facilitator = FacilitatorClient::new(&demo.facilitator_url, &demo.seller_api_key);
    let mut builder = tollgate_mcp::ToolPaywall::builder();
    for tool in prices {
        let layer = tollgate::PaymentLayer::builder().facilitator(facilitator.clone()).accept(price.clone());
        builder = builder.tool(*tool, layer);
    }
    let tools = builder.build().unwrap();
    let service = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(tools.wrap(DemoTools::default())),
        Arc::new(rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default()),
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paid_tools_are_paid_once_over_http_and_stdio_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let budget_file = dir.path().join("agent-budget.db");
    // Two summaries fit; a third does not.
    let buyer = buyer(&demo, &budget_file, "0.002SOL/day");

    // Streamable HTTP: the shop's /mcp.
    let http = http_client(&demo.mcp_url()).await;
    let tools = http.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"summarize") && names.contains(&"count_words"), "{names:?}");
    let client = PaidClient::new(http.peer().clone(), buyer.clone(), demo.mcp_url());

    // The prices, before any call: the paid tool's are its payment-required result's; the free
    // tool has none. The paid tool's result declares it (x402 bazaar) from its own listing.
    let priced = client.priced_tools().await.unwrap();
    let price_of = |name: &str| priced.iter().find(|t| t.tool.name == name).unwrap().accepts.clone();
    assert!(price_of("count_words").is_empty());
    let unpaid = http.peer().call_tool(text_call("summarize", "a b")).await.unwrap();
    let Some(tollgate_protocol::x402::PaymentRequired::V2(required)) = payment_required(&unpaid) else {
        panic!("a v2 payment-required result: {unpaid:?}")
    };
    assert_eq!(price_of("summarize"), required.accepts);
    let declared = &required.extensions["bazaar"]["info"]["input"];
    assert_eq!(declared["toolName"], "summarize");
    assert_eq!(declared["inputSchema"]["required"], json!(["text"]));

    // A free tool is called once and costs nothing.
    let free = client.call_tool(text_call("count_words", "one two three")).await.unwrap();
    assert!(free.payment.is_none());
    assert_eq!(free.result.structured_content.as_ref().unwrap()["words"], 3);

    let before = received(&demo).await;
    let text = "Agents pay for tools: this text was summarized by a paid MCP tool over streamable HTTP.";
    let paid = client.call_tool(text_call("summarize", text)).await.unwrap();
    let made = paid.payment.expect("paid");
    assert_eq!(made.amount.get(), SUMMARY_LAMPORTS);
    let output = paid.result.structured_content.clone().unwrap();
    assert_eq!(output["words"], 16, "{output}");
    assert_eq!(output["paidBy"], demo.buyer.as_str(), "the tool saw the settled payment");
    let settlement = paid.settlement.expect("x402/payment-response");
    assert!(settlement.success);
    assert_eq!(Some(&settlement.transaction), made.transaction.as_ref());
    assert_eq!(output["transaction"], settlement.transaction.as_str());
    assert_eq!(received(&demo).await, before + 1, "settled once");
    let history = demo.history(&demo.seller, "received").await.unwrap();
    assert_eq!(history["payments"][0]["resource"], "mcp://tool/summarize", "bound to the tool: {history}");

    // stdio: the same tools in a child process, paid through the same facilitator.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate-demo-mcp"));
    command
        .arg("--facilitator")
        .arg(&demo.facilitator_url)
        .arg("--api-key-file")
        .arg(&demo.seller_api_key_file)
        .arg("--pay-to")
        .arg(&demo.seller);
    let stdio = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let stdio_client = PaidClient::new(stdio.peer().clone(), buyer.clone(), "mcp+stdio://tollgate-demo-mcp");
    let paid = stdio_client.call_tool(text_call("summarize", "paid over standard input and output")).await.unwrap();
    assert_eq!(paid.payment.as_ref().unwrap().amount.get(), SUMMARY_LAMPORTS);
    assert_eq!(paid.result.structured_content.as_ref().unwrap()["words"], 6);
    assert_eq!(received(&demo).await, before + 2);

    // The budget (0.002 SOL) is spent: the third summary is refused before anything is signed.
    let over = stdio_client.call_tool(text_call("summarize", "one more")).await.unwrap_err();
    assert!(matches!(over, McpPayError::Pay(PayError::OverBudget { .. })), "{over}");
    let over = client.call_tool(text_call("summarize", "one more")).await.unwrap_err();
    assert!(matches!(over, McpPayError::Pay(PayError::OverBudget { .. })), "{over}");
    assert_eq!(received(&demo).await, before + 2, "nothing paid over the budget");

    // A restarted agent keeps its spend: the log has both payments, each with its transaction.
    let reopened = Budget::open(&budget_file, vec![]).unwrap();
    let spends = reopened.spends().await.unwrap();
    assert_eq!(spends.len(), 2, "{spends:?}");
    assert!(spends.iter().all(|s| s.status == "paid" && s.transaction.is_some()), "{spends:?}");
    assert!(spends.iter().any(|s| s.url.starts_with("mcp+stdio://")), "{spends:?}");
    stdio.cancel().await.unwrap();
    http.cancel().await.unwrap();
}

/// `call` with `payment` in its `_meta`.
fn with_payment(mut params: CallToolRequestParams, payment: &Value) -> CallToolRequestParams {
    params.meta.get_or_insert_with(RequestMetaObject::default).insert(PAYMENT_META.into(), payment.clone());
    params
}

/// The demo's MCP tools over stdio: a new `tollgate-demo-mcp` process, paid to the demo seller.
async fn stdio_server(demo: &Demo) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate-demo-mcp"));
    command
        .arg("--facilitator")
        .arg(&demo.facilitator_url)
        .arg("--api-key-file")
        .arg(&demo.seller_api_key_file)
        .arg("--pay-to")
        .arg(&demo.seller);
    ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap()
}

/// One payment presented to three `tollgate-demo-mcp` processes started one after another (each
/// remembering nothing of the last): the call, its retry, then "pay again" — the facilitator
/// counts the answers, not the process. The same payment with other arguments is another request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_payment_over_three_stdio_processes_serves_its_call_and_one_retry() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let before = received(&demo).await;
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).without_cap();
    let first = stdio_server(&demo).await;
    let asked = first.peer().call_tool(text_call("summarize", "one paid summary")).await.unwrap();
    let authorization = buyer.authorize(&payment_required(&asked).unwrap(), "mcp+stdio://demo").await.unwrap();
    let payment = serde_json::to_value(authorization.payload()).unwrap();
    first.cancel().await.unwrap();

    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let stdio = stdio_server(&demo).await;
        let peer = stdio.peer().clone();
        let answer = peer.call_tool(with_payment(text_call("summarize", "one paid summary"), &payment)).await.unwrap();
        let other = peer.call_tool(with_payment(text_call("summarize", "another text"), &payment)).await.unwrap();
        assert_eq!(other.is_error, Some(true), "other arguments are another request: {other:?}");
        outcomes.push(if answer.is_error == Some(true) {
            let required = payment_required(&answer).expect("asked to pay again");
            assert!(format!("{answer:?}").contains("served the 2 answers"), "{answer:?}");
            assert!(!required.requirements().is_empty());
            "pay again"
        } else {
            assert_eq!(answer.structured_content.as_ref().unwrap()["words"], 3);
            "served"
        });
        stdio.cancel().await.unwrap();
    }
    assert_eq!(outcomes, ["served", "served", "pay again"]);
    assert_eq!(received(&demo).await, before + 1, "paid once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sellers_and_buyers_that_cheat_get_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let before = received(&demo).await;

    // A seller that asks to be paid for `count_words`, a tool the agent takes to be free.
    let greedy = serve_priced(&demo, &["summarize", "count_words"]).await;
    let http = http_client(&greedy).await;
    let budget_file = dir.path().join("budget.db");
    let client = PaidClient::new(http.peer().clone(), buyer(&demo, &budget_file, "1SOL"), greedy.clone())
        .paying_only(["summarize"]);
    let refused = client.call_tool(text_call("count_words", "free words")).await.unwrap_err();
    assert!(matches!(&refused, McpPayError::NotPaid(tool) if tool == "count_words"), "{refused}");
    assert!(Budget::open(&budget_file, vec![]).unwrap().spends().await.unwrap().is_empty(), "nothing reserved");

    // A price over the budget: refused before signing.
    let poor =
        PaidClient::new(http.peer().clone(), buyer(&demo, &dir.path().join("poor.db"), "0.0005SOL"), greedy.clone());
    let over = poor.call_tool(text_call("summarize", "too dear")).await.unwrap_err();
    assert!(matches!(over, McpPayError::Pay(PayError::OverBudget { .. })), "{over}");

    // A buyer presents a proof made for `summarize` to `count_words` (as dear): refused, and the
    // tool does not run.
    let peer = http.peer().clone();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let raw_buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).without_cap();
    let first = peer.call_tool(text_call("summarize", "a b c")).await.unwrap();
    let challenge = payment_required(&first).expect("payment required");
    let authorization = raw_buyer.authorize(&challenge, &greedy).await.unwrap();
    let payment = serde_json::to_value(authorization.payload()).unwrap();
    let paid = peer.call_tool(with_payment(text_call("summarize", "a b c"), &payment)).await.unwrap();
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
    assert_eq!(received(&demo).await, before + 1);
    let elsewhere = peer.call_tool(with_payment(text_call("count_words", "a b c d"), &payment)).await.unwrap();
    let again = payment_required(&elsewhere).expect("the proof pays summarize, not count_words");
    assert!(!again.requirements().is_empty());
    assert!(elsewhere.structured_content.as_ref().unwrap().get("words").is_none(), "the tool did not run");
    assert_eq!(received(&demo).await, before + 1, "settled once");

    // Payments that are no payment: an error result naming why, never a server error.
    for junk in [json!("not a payment"), json!({}), json!({"x402Version": 2, "accepted": 5}), json!([1, 2])] {
        let answer = peer.call_tool(with_payment(text_call("summarize", "x"), &junk)).await.unwrap();
        assert_eq!(answer.is_error, Some(true), "{junk}: {answer:?}");
        assert!(answer.structured_content.as_ref().unwrap().get("words").is_none(), "{junk}");
    }
    assert_eq!(received(&demo).await, before + 1);
    http.cancel().await.unwrap();
}

/// A seller that answers payment-required to every call, paid or not, each time dearer.
#[derive(Debug, Clone)]
struct AlwaysDearer {
    network: String,
    pay_to: String,
    asked: Arc<std::sync::atomic::AtomicU64>,
    payments_seen: Arc<std::sync::atomic::AtomicU64>,
}

impl ServerHandler for AlwaysDearer {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        if context.meta.get(PAYMENT_META).is_some() {
            self.payments_seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let asked = self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let required = json!({
            "x402Version": 2, "error": "pay more",
            "resource": {"url": "mcp://tool/anything", "description": "", "mimeType": "application/json"},
            "accepts": [{
                "scheme": "exact-native", "network": self.network,
                "amount": (u128::from(asked) * SUMMARY_LAMPORTS).to_string(), "asset": "native",
                "payTo": self.pay_to, "maxTimeoutSeconds": 60
            }]
        });
        let mut result = CallToolResult::error(vec![rmcp::model::ContentBlock::text("payment required")]);
        result.structured_content = Some(required);
        Ok(result.into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seller_that_asks_again_after_payment_is_paid_once() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    // The demo ledger's network, as the demo's own tool names it.
    let demo_tools = http_client(&demo.mcp_url()).await;
    let unpaid = demo_tools.peer().call_tool(text_call("summarize", "x")).await.unwrap();
    let network = payment_required(&unpaid).unwrap().requirements()[0].0.network.to_string();
    let seller =
        AlwaysDearer { network, pay_to: demo.seller.clone(), asked: Arc::default(), payments_seen: Arc::default() };
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let served = seller.clone();
    tokio::spawn(async move { served.serve(server_io).await.unwrap().waiting().await });
    let mcp = ().serve(client_io).await.unwrap();
    let budget_file = dir.path().join("budget.db");
    let buyer = buyer(&demo, &budget_file, "1SOL");
    let client = PaidClient::new(mcp.peer().clone(), buyer, "mcp+stdio://always-dearer");
    let refused = client.call_tool(text_call("summarize", "x")).await.unwrap_err();
    assert!(
        matches!(&refused, McpPayError::Pay(PayError::Refused { status: 402, reason }) if reason == "pay more"),
        "{refused}"
    );
    assert_eq!(seller.payments_seen.load(std::sync::atomic::Ordering::SeqCst), 1, "one proof sent");
    assert_eq!(seller.asked.load(std::sync::atomic::Ordering::SeqCst), 2, "asked twice, paid once");
    let spends = Budget::open(&budget_file, vec![]).unwrap().spends().await.unwrap();
    assert_eq!(spends.len(), 1, "the proof that left stays counted: {spends:?}");
    assert_eq!(spends[0].status, "reserved");
    assert_eq!(spends[0].amount.get(), SUMMARY_LAMPORTS, "at the first price, not the dearer one");
    mcp.cancel().await.unwrap();
}

/// Where `scripts/test` installs the official MCP TypeScript SDK.
fn mcp_sdk() -> std::path::PathBuf {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools/mcp/node_modules");
    assert!(
        path.join("@modelcontextprotocol/sdk").exists(),
        "the official MCP SDK is not installed in {}: run scripts/test (it installs it)",
        path.display()
    );
    path
}

/// The official SDK's client calls `tool` with `arguments` (and `payment` in `_meta`).
async fn official_client(url: &str, tool: &str, arguments: &Value, payment: Option<&Value>) -> Value {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/js/mcp-client.cjs");
    let mut command = tokio::process::Command::new("node");
    command.arg(script).args([url, tool, &arguments.to_string()]);
    if let Some(payment) = payment {
        command.arg(payment.to_string());
    }
    let output = command.env("NODE_PATH", mcp_sdk()).kill_on_drop(true).output().await.expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the official MCP client failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_mcp_sdk_sees_the_payment_request_of_the_transport_and_pays_through_meta() {
    let dir = tempfile::tempdir().unwrap();
    let demo = tollgate_demo::start(&tollgate_demo::Options::new(dir.path())).await.unwrap();
    let text = json!({"text": "an agent written in TypeScript"});

    let seen = official_client(&demo.mcp_url(), "summarize", &text, None).await;
    assert!(seen["tools"].as_array().unwrap().contains(&json!("summarize")), "{seen}");
    let result = &seen["result"];
    // The x402 MCP transport's shape: an error result, the PaymentRequired in structuredContent…
    assert_eq!(result["isError"], true, "{result}");
    let required = &result["structuredContent"];
    assert_eq!(required["x402Version"], 2, "{result}");
    assert_eq!(required["resource"]["url"], "mcp://tool/summarize");
    let offer = &required["accepts"][0];
    assert_eq!(offer["amount"], "1000000", "{offer}");
    assert_eq!(offer["payTo"], demo.seller.as_str());
    assert!(offer["network"].as_str().unwrap().starts_with("solana:"), "{offer}");
    for field in ["scheme", "asset", "maxTimeoutSeconds"] {
        assert!(!offer[field].is_null(), "{field}: {offer}");
    }
    // … and in content[0].text, wrapped as x402/error with code 402.
    let text_block: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text_block["x402/error"]["code"], 402);
    assert_eq!(text_block["x402/error"]["data"], *required);

    // A payment sent through the SDK's `_meta` is settled, and the settlement comes back in the
    // result's `_meta["x402/payment-response"]`.
    let before = received(&demo).await;
    let challenge: tollgate_protocol::x402::PaymentRequired = serde_json::from_value(required.clone()).unwrap();
    let key = tollgate_facilitator::wallets::read_solana_keypair(&demo.buyer_key_file).unwrap();
    let buyer = Buyer::new().with_solana(key, &demo.solana_rpc_url).without_cap();
    let authorization = buyer.authorize(&challenge, &demo.mcp_url()).await.unwrap();
    let payment = serde_json::to_value(authorization.payload()).unwrap();
    let paid = official_client(&demo.mcp_url(), "summarize", &text, Some(&payment)).await;
    let result = &paid["result"];
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["words"], 5, "{result}");
    let settlement = &result["_meta"]["x402/payment-response"];
    assert_eq!(settlement["success"], true, "{result}");
    assert_eq!(settlement["payer"], demo.buyer.as_str());
    assert_eq!(received(&demo).await, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_metered_tool_is_paid_through_permit2_for_what_it_used() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let pusd = evm.permit2_token.clone().expect("Permit2 is installed by scripts/test");
    let key: tollgate_client::PrivateKeySigner =
        std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let cap = tollgate_client::Cap::parse(&format!("0.05@{pusd}")).unwrap();
    let buyer = Arc::new(Buyer::new().with_evm(key, &anvil.endpoint()).unwrap().with_cap(cap));

    let http = http_client(&demo.mcp_url()).await;
    let client = PaidClient::new(http.peer().clone(), buyer, demo.mcp_url());
    let paid = client.call_tool(call("tell_story", json!({"words": 12}))).await.unwrap();
    let made = paid.payment.expect("paid");
    assert_eq!(made.authorized.map(|a| a.get()), Some(50_000), "authorized the most: 0.05 PUSD");
    assert_eq!(made.amount.get(), 12_000, "charged the 12 words told");
    let output = paid.result.structured_content.as_ref().unwrap();
    assert_eq!((output["words"].as_u64(), output["charged"].as_str()), (Some(12), Some("12000")));
    assert!(paid.result.meta.as_ref().unwrap().get(tollgate_mcp::CHARGE_META).is_none());
    assert_eq!(paid.settlement.unwrap().amount.map(|a| a.get()), Some(12_000));
    let history = demo.history(&evm.buyer, "sent").await.unwrap();
    assert_eq!(history["payments"][0]["amountAtomic"], "12000", "{history}");

    // A payment for 1 word, presented again for 50 (attacker finding): another request, refused,
    // and nothing more settled; presented again for the same word, its retry, charged nothing more
    // (the receipt names the 1 word settled); a third time, refused.
    let key: tollgate_client::PrivateKeySigner =
        std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let cap = tollgate_client::Cap::parse(&format!("0.05@{pusd}")).unwrap();
    let raw = Buyer::new().with_evm(key, &anvil.endpoint()).unwrap().with_cap(cap);
    let peer = http.peer().clone();
    let asked = peer.call_tool(call("tell_story", json!({"words": 1}))).await.unwrap();
    let authorization = raw.authorize(&payment_required(&asked).unwrap(), &demo.mcp_url()).await.unwrap();
    let payment = serde_json::to_value(authorization.payload()).unwrap();
    let one = peer.call_tool(with_payment(call("tell_story", json!({"words": 1})), &payment)).await.unwrap();
    assert_ne!(one.is_error, Some(true), "{one:?}");
    assert_eq!(one.meta.as_ref().unwrap()[tollgate_mcp::PAYMENT_RESPONSE_META]["amount"], "1000");
    let fifty = peer.call_tool(with_payment(call("tell_story", json!({"words": 50})), &payment)).await.unwrap();
    assert_eq!(fifty.is_error, Some(true), "{fifty:?}");
    assert!(fifty.structured_content.as_ref().unwrap().get("words").is_none(), "the tool did not run");
    let again = peer.call_tool(with_payment(call("tell_story", json!({"words": 1})), &payment)).await.unwrap();
    assert_ne!(again.is_error, Some(true), "{again:?}");
    assert_eq!(again.meta.as_ref().unwrap()[tollgate_mcp::PAYMENT_RESPONSE_META]["amount"], "1000");
    let third = peer.call_tool(with_payment(call("tell_story", json!({"words": 1})), &payment)).await.unwrap();
    assert_eq!(third.is_error, Some(true), "{third:?}");
    let history = demo.history(&evm.buyer, "sent").await.unwrap();
    assert_eq!(history["total"], 2, "{history}");
    assert_eq!(history["payments"][0]["amountAtomic"], "1000", "settled once, for the 1 word: {history}");
    http.cancel().await.unwrap();
}

/// A tool priced per call from a payment channel (x402 `batch-settlement`): the crate's client
/// deposits on the first call and signs a voucher on each next one (no transaction), each result
/// carrying the seller's count; a voucher presented again is refused and the tool does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_priced_per_call_from_a_channel_is_paid_by_vouchers() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, demo) = tollgate_demo::start_with_anvil(dir.path()).await.unwrap();
    let evm = demo.evm.clone().unwrap();
    let token = evm.token.parse().unwrap();
    let price = Price::batch(token, "0.0001", tollgate_demo::DEMO_TOKEN_DECIMALS)
        .unwrap()
        .pay_to(evm.seller.parse().unwrap())
        .on(format!("eip155:{}", evm.chain_id).parse().unwrap())
        .extra(json!({"name": tollgate_demo::DEMO_TOKEN_NAME, "version": "2"}));
    let url = serve_at(&demo, &["summarize"], price).await;
    let key: tollgate_client::PrivateKeySigner =
        std::fs::read_to_string(&evm.buyer_key_file).unwrap().trim().parse().unwrap();
    let cap = tollgate_client::Cap::parse(&format!("0.0001@{}", evm.token)).unwrap();
    let buyer = Arc::new(Buyer::new().with_evm(key, &anvil.endpoint()).unwrap().with_cap(cap));
    let http = http_client(&url).await;
    let client = PaidClient::new(http.peer().clone(), buyer.clone(), url.clone());
    let mut vouchers = Vec::new();
    for call in 1..=3u128 {
        let paid = client.call_tool(text_call("summarize", "paid from a channel")).await.unwrap();
        assert_ne!(paid.result.is_error, Some(true), "{:?}", paid.result);
        let made = paid.payment.expect("paid");
        assert_eq!((made.amount.get(), made.transaction.is_some()), (100, call == 1), "{made:?}");
        let count = &paid.settlement.unwrap().extra.unwrap()["channelState"]["chargedCumulativeAmount"];
        assert_eq!(count.as_str(), Some((call * 100).to_string().as_str()));
        vouchers.push(made.channel.unwrap());
    }
    assert!(vouchers.iter().all(|c| *c == vouchers[0]), "one channel");
    // The last voucher again: refused (the count has moved past it), the tool not run.
    let asked = http.peer().call_tool(text_call("summarize", "x")).await.unwrap();
    let authorization = buyer.authorize(&payment_required(&asked).unwrap(), &url).await.unwrap();
    let payment = serde_json::to_value(authorization.payload()).unwrap();
    let first = http.peer().call_tool(with_payment(text_call("summarize", "x"), &payment)).await.unwrap();
    assert_ne!(first.is_error, Some(true), "{first:?}");
    let replayed = http.peer().call_tool(with_payment(text_call("summarize", "x"), &payment)).await.unwrap();
    assert_eq!(replayed.is_error, Some(true), "{replayed:?}");
    assert!(replayed.structured_content.as_ref().unwrap().get("words").is_none(), "the tool did not run");
    http.cancel().await.unwrap();
}
