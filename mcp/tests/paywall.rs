//! The paywall's answers in the MCP transport, against a scripted facilitator in memory and an
//! `rmcp` client and server joined by an in-memory stream: a settlement pending then confirmed,
//! a facilitator that fails or does not answer, a settlement refused after the tool ran, a tool
//! that fails or asks for input, a metered tool's reported charge, and one payment sent by
//! several calls at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, MetaObject, RequestMetaObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};
use tollgate::protocol::x402::Supported;
use tollgate::{Claim, Facilitator, Payment, PaymentLayer, Price, SettlementOrder, Verdict};
use tollgate_mcp::{CHARGE_META, PAYMENT_META, PAYMENT_RESPONSE_META, PENDING_KEY, ToolPaywall, payment_required};

const NETWORK: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
const BUYER: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
const EVM_NETWORK: &str = "eip155:31337";
const EVM_PAY_TO: &str = "0x1111111111111111111111111111111111111111";
const TOKEN: &str = "0x2222222222222222222222222222222222222222";
const SETTLER: &str = "0x5555555555555555555555555555555555555555";

/// What the scripted facilitator answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Settling is pending; followed, it is confirmed.
    PendingThenPaid,
    /// Nothing can be asked.
    Unavailable,
    /// Verified; settling (after the tool) is refused.
    RefusedAfter,
    /// Verified; settling settles what is asked.
    Settles,
}

#[derive(Debug)]
struct Scripted {
    script: Script,
    settled: std::sync::Mutex<Vec<u128>>,
    follows: AtomicUsize,
}

fn paid(claim: &Claim<'_>, amount: u128) -> Verdict {
    let r = claim.requirement;
    Verdict::Paid(
        Payment::new(r.network.clone(), r.asset, tollgate::protocol::AtomicAmount(amount), r.pay_to)
            .with_payer(BUYER)
            .with_transaction("5sig"),
    )
}

#[async_trait]
impl Facilitator for Scripted {
    async fn supported(&self) -> Result<Supported, Verdict> {
        Err(Verdict::Unavailable { timed_out: false, reason: "not asked: the networks are named".into() })
    }
    async fn settle_before(&self, claim: Claim<'_>) -> Verdict {
        match self.script {
            Script::PendingThenPaid => Verdict::Pending { payment_id: Some("pay_1".into()), transaction: None },
            Script::Unavailable => Verdict::Unavailable { timed_out: false, reason: "down".into() },
            _ => {
                self.settled.lock().unwrap().push(claim.requirement.amount.get());
                paid(&claim, claim.requirement.amount.get())
            }
        }
    }
    async fn verify(&self, claim: Claim<'_>) -> Verdict {
        match self.script {
            Script::Unavailable => Verdict::Unavailable { timed_out: true, reason: "slow".into() },
            _ => {
                let r = claim.requirement;
                Verdict::Paid(Payment::new(r.network.clone(), r.asset, r.amount, r.pay_to).with_payer(BUYER))
            }
        }
    }
    async fn settle(&self, claim: Claim<'_>) -> Verdict {
        match self.script {
            Script::RefusedAfter => Verdict::Refused { reason: "insufficient_funds: the payer cannot pay".into() },
            _ => {
                let amount = claim.requirement.amount.get();
                self.settled.lock().unwrap().push(amount);
                paid(&claim, amount)
            }
        }
    }
    async fn follow(&self, _payment_id: Option<&str>, claim: Claim<'_>) -> Verdict {
        self.follows.fetch_add(1, Ordering::SeqCst);
        paid(&claim, claim.requirement.amount.get())
    }
    async fn release(&self, _payment: &Payment) {}

    /// A pass holder is whoever signs its message with the key it names, and is [`PASS_HOLDER`].
    async fn sign_in(
        &self,
        sign_in: tollgate::SignInClaim<'_>,
    ) -> Result<tollgate::protocol::gateway::PassHolder, Verdict> {
        use tollgate::protocol::siwx;
        let signed =
            siwx::SignIn::from_header(sign_in.header).map_err(|e| Verdict::Refused { reason: e.to_string() })?;
        let key: solana_sdk::pubkey::Pubkey = signed.address.parse().unwrap();
        let signature: solana_sdk::signature::Signature = signed.signature.parse().unwrap();
        let message = siwx::message(&signed).unwrap();
        assert_eq!((sign_in.origin, signed.domain.as_str()), ("https://tools.example", "tools.example"));
        if !signature.verify(key.as_ref(), message.as_bytes()) || signed.address != *PASS_HOLDER {
            return Err(Verdict::Refused { reason: "no_pass: holds no pass".into() });
        }
        Ok(tollgate::protocol::gateway::PassHolder {
            payer: signed.address,
            network: NETWORK.parse().unwrap(),
            payment_id: "pay_pass".into(),
            valid_until: chrono::Utc::now() + chrono::Duration::hours(1),
        })
    }
}

/// The wallet that bought the pass to `pass`.
static PASS_HOLDER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use solana_sdk::signer::Signer as _;
    holder().pubkey().to_string()
});

/// Its key.
fn holder() -> solana_sdk::signature::Keypair {
    solana_sdk::signature::Keypair::new_from_array([7; 32])
}

/// Tools that count their runs: `echo` answers its text, `fail` fails, `meter` reports a
/// charge of `used` atomic units.
#[derive(Debug, Clone, Default)]
struct Tools {
    runs: Arc<AtomicUsize>,
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        assert!(context.meta.get(PAYMENT_META).is_none(), "the tool never sees the payment");
        let payer = context.extensions.get::<Payment>().and_then(|p| p.payer.clone());
        match request.name.as_ref() {
            "ask" => Ok(CallToolResponse::InputRequired(rmcp::model::InputRequiredResult::new(None, Some("s".into())))),
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text("the tool failed")]).into()),
            "meter" => {
                let used = request.arguments.as_ref().and_then(|a| a.get("used")).cloned().unwrap_or(Value::Null);
                let mut result = CallToolResult::success(vec![ContentBlock::text("metered")]);
                let mut meta = MetaObject::default();
                meta.insert(CHARGE_META.into(), used);
                result.meta = Some(meta);
                Ok(result.into())
            }
            _ => {
                let mut result = CallToolResult::success(vec![ContentBlock::text("echo")]);
                result.structured_content = Some(json!({"payer": payer}));
                Ok(result.into())
            }
        }
    }
}

struct Setup {
    client: RunningService<RoleClient, ()>,
    facilitator: Arc<Scripted>,
    runs: Arc<AtomicUsize>,
}

async fn setup(script: Script, order: SettlementOrder) -> Setup {
    let facilitator = Arc::new(Scripted { script, settled: Default::default(), follows: AtomicUsize::new(0) });
    let price = Price::native_sol("0.01").unwrap().pay_to(PAY_TO.parse().unwrap()).on(NETWORK.parse().unwrap());
    let layer = |order| {
        PaymentLayer::builder()
            .facilitator(facilitator.clone())
            .accept(price.clone())
            .settlement_order(order)
            .retry_after_secs(3)
    };
    // At most 0.05 of a 6-decimal token, settled for what the tool reports.
    let metered = Price::upto(TOKEN.parse().unwrap(), "0.05", 6)
        .unwrap()
        .pay_to(EVM_PAY_TO.parse().unwrap())
        .on(EVM_NETWORK.parse().unwrap())
        .extra(json!({"facilitatorAddress": SETTLER}));
    let paywall = ToolPaywall::builder()
        .tool("echo", layer(order))
        .tool("fail", layer(order))
        .tool("ask", layer(order))
        .tool("meter", PaymentLayer::builder().facilitator(facilitator.clone()).accept(metered))
        .tool(
            "pass",
            PaymentLayer::builder()
                .facilitator(facilitator.clone())
                .accept(price.clone().pass(std::time::Duration::from_secs(3_600)))
                .sign_in_origin("https://tools.example"),
        )
        .build()
        .unwrap();
    let tools = Tools::default();
    let runs = tools.runs.clone();
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = paywall.wrap(tools);
    tokio::spawn(async move { server.serve(server_io).await.unwrap().waiting().await });
    let client = ().serve(client_io).await.unwrap();
    Setup { client, facilitator, runs }
}

/// A v1 `exact-native` proof (its transaction is the facilitator's to judge).
fn payment() -> Value {
    json!({"x402Version": 1, "scheme": "exact-native", "network": NETWORK, "payload": {"transaction": "AQID"}})
}

/// A v1 `upto` permit for at most 0.05 of the token, letting [`SETTLER`] settle.
fn permit() -> Value {
    json!({
        "x402Version": 1, "scheme": "upto", "network": EVM_NETWORK,
        "payload": {"signature": format!("0x{}", "11".repeat(65)), "permit2Authorization": {
            "from": "0x3333333333333333333333333333333333333333",
            "permitted": {"token": TOKEN, "amount": "50000"},
            "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001", "nonce": "7",
            "deadline": "99999999999", "witness": {"to": EVM_PAY_TO, "validAfter": "0", "facilitator": SETTLER}}}
    })
}

fn call(tool: &str, payment: Option<Value>) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Some(payment) = payment {
        params.meta.get_or_insert_with(RequestMetaObject::default).insert(PAYMENT_META.into(), payment);
    }
    params
}

#[tokio::test]
async fn an_unpaid_call_gets_the_payment_request_and_the_tool_does_not_run() {
    let s = setup(Script::Settles, SettlementOrder::SettleBefore).await;
    let result = s.client.peer().call_tool(call("echo", None)).await.unwrap();
    let required = payment_required(&result).expect("payment required");
    let (requirement, resource) = &required.requirements()[0];
    assert_eq!(resource.url, "mcp://tool/echo");
    assert_eq!(requirement.amount.get(), 10_000_000);
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_pending_payment_is_answered_pending_and_served_once_confirmed_with_the_same_payment() {
    let s = setup(Script::PendingThenPaid, SettlementOrder::SettleBefore).await;
    let first = s.client.peer().call_tool(call("echo", Some(payment()))).await.unwrap();
    assert_eq!(first.is_error, Some(true));
    assert_eq!(first.structured_content.as_ref().unwrap()[PENDING_KEY]["retryAfter"], 3, "{first:?}");
    assert!(payment_required(&first).is_none(), "pending is not a request to pay again");
    assert_eq!(s.runs.load(Ordering::SeqCst), 0, "not served while pending");

    let second = s.client.peer().call_tool(call("echo", Some(payment()))).await.unwrap();
    assert_ne!(second.is_error, Some(true), "{second:?}");
    assert_eq!(second.structured_content.as_ref().unwrap()["payer"], BUYER, "the tool saw the payment");
    let settlement = &second.meta.as_ref().unwrap()[PAYMENT_RESPONSE_META];
    assert_eq!(settlement["success"], true);
    assert_eq!(settlement["transaction"], "5sig");
    assert_eq!((s.facilitator.follows.load(Ordering::SeqCst), s.runs.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn a_facilitator_that_fails_is_an_error_and_one_that_does_not_answer_is_pending() {
    // It failed (502): an error; nothing was charged.
    let s = setup(Script::Unavailable, SettlementOrder::SettleBefore).await;
    let error = s.client.peer().call_tool(call("echo", Some(payment()))).await.unwrap_err();
    assert!(error.to_string().contains("facilitator"), "{error}");
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
    // It did not answer in time (504): the payment may yet settle, so the buyer is told to call
    // again with the same payment, not to pay again.
    let s = setup(Script::Unavailable, SettlementOrder::VerifyThenSettle).await;
    let result = s.client.peer().call_tool(call("echo", Some(payment()))).await.unwrap();
    assert!(result.structured_content.as_ref().unwrap().get(PENDING_KEY).is_some(), "{result:?}");
    assert!(payment_required(&result).is_none());
    assert_eq!(s.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_paid_tool_that_asks_for_input_is_not_handed_over_unsettled() {
    // Verified, then the tool asks for input (or starts a task): its answer would let the buyer
    // finish unpaid; it is withheld, and nothing is settled.
    let s = setup(Script::Settles, SettlementOrder::VerifyThenSettle).await;
    for _ in 0..2 {
        let error = s.client.peer().call_tool(call("ask", Some(payment()))).await.unwrap_err();
        assert!(error.to_string().contains("one call"), "{error}");
    }
    assert!(s.facilitator.settled.lock().unwrap().is_empty());
    // Settled before the tool: the buyer is told, with the settlement.
    let s = setup(Script::Settles, SettlementOrder::SettleBefore).await;
    let result = s.client.peer().call_tool(call("ask", Some(payment()))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(result.meta.as_ref().unwrap()[PAYMENT_RESPONSE_META]["success"], true, "{result:?}");
}

#[tokio::test]
async fn the_payment_request_speaks_of_meta_not_headers() {
    let s = setup(Script::Settles, SettlementOrder::SettleBefore).await;
    let result = s.client.peer().call_tool(call("echo", None)).await.unwrap();
    let error = result.structured_content.as_ref().unwrap()["error"].as_str().unwrap().to_owned();
    assert!(error.contains("_meta") && !error.contains("header"), "{error}");
}

#[tokio::test]
async fn a_settlement_refused_after_the_tool_ran_is_a_payment_request_naming_the_failure() {
    let s = setup(Script::RefusedAfter, SettlementOrder::VerifyThenSettle).await;
    let result = s.client.peer().call_tool(call("echo", Some(payment()))).await.unwrap();
    assert!(payment_required(&result).is_some(), "{result:?}");
    let failure = &result.structured_content.as_ref().unwrap()[PAYMENT_RESPONSE_META];
    assert_eq!(failure["success"], false, "{result:?}");
    assert_eq!(failure["errorReason"], "insufficient_funds");
    assert!(result.structured_content.as_ref().unwrap().get("payer").is_none(), "the answer was not served");
}

#[tokio::test]
async fn a_tool_that_fails_is_not_settled_after_it() {
    let s = setup(Script::Settles, SettlementOrder::VerifyThenSettle).await;
    let result = s.client.peer().call_tool(call("fail", Some(payment()))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(payment_required(&result).is_none(), "{result:?}");
    assert!(result.meta.as_ref().and_then(|m| m.get(PAYMENT_RESPONSE_META)).is_none());
    assert!(s.facilitator.settled.lock().unwrap().is_empty(), "nothing settled");
    assert_eq!(s.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_metered_tool_is_charged_what_it_reports_capped_and_the_report_is_not_shown() {
    let s = setup(Script::Settles, SettlementOrder::VerifyThenSettle).await;
    let with_usage = |used: Value| {
        let mut params = call("meter", Some(permit()));
        params.arguments = json!({ "used": used }).as_object().cloned();
        params
    };
    let result = s.client.peer().call_tool(with_usage(json!("2500"))).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let meta = result.meta.as_ref().unwrap();
    assert!(meta.get(CHARGE_META).is_none(), "the report is the seller's");
    assert_eq!(meta[PAYMENT_RESPONSE_META]["amount"], "2500", "the settlement says what was charged");
    // A charge above the most authorized is capped at it; a number is read too. (A new permit:
    // the first one's ticket would serve the call again.)
    let mut second = permit();
    second["payload"]["permit2Authorization"]["nonce"] = json!("8");
    let mut params = call("meter", Some(second));
    params.arguments = json!({ "used": 99_999_999_999_u64 }).as_object().cloned();
    let _ = s.client.peer().call_tool(params).await.unwrap();
    assert_eq!(*s.facilitator.settled.lock().unwrap(), [2_500, 50_000]);
}

/// Eight calls at once with one payment: one settlement, the call and one retry served (this
/// facilitator does not count answers: the paywall's layer does), the rest asked to pay again.
/// A tool sold with a pass: the buyer's wallet that holds it signs in through
/// `_meta["sign-in-with-x"]` and is served without paying; another wallet is asked to pay, and pays.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pass_holder_signs_in_to_a_tool_through_meta() {
    let s = setup(Script::Settles, SettlementOrder::SettleBefore).await;
    let offline = "http://127.0.0.1:9"; // never asked: signing needs no chain
    let holder = tollgate_client::Buyer::new().with_solana(holder(), offline).without_cap();
    let client =
        tollgate_mcp::PaidClient::new(s.client.peer().clone(), std::sync::Arc::new(holder), "mcp+stdio://tools");
    let answer = client.call_tool(call("pass", None)).await.unwrap();
    assert_eq!(answer.signed_in.as_deref(), Some(PASS_HOLDER.as_str()), "{:?}", answer.result);
    assert!(answer.payment.is_none());
    assert_eq!(answer.result.structured_content.as_ref().unwrap()["payer"], PASS_HOLDER.as_str());
    assert!(s.facilitator.settled.lock().unwrap().is_empty(), "nothing paid");
    // A wallet without a pass: its sign-in is refused, and the new payment request is paid.
    let stranger = tollgate_client::Buyer::new()
        .with_wallet(std::sync::Arc::new(Signing(solana_sdk::signature::Keypair::new())))
        .without_cap();
    let client =
        tollgate_mcp::PaidClient::new(s.client.peer().clone(), std::sync::Arc::new(stranger), "mcp+stdio://tools");
    let answer = client.call_tool(call("pass", None)).await.unwrap();
    assert_eq!(answer.signed_in, None);
    assert!(answer.payment.is_some(), "paid instead");
    assert_eq!(s.facilitator.settled.lock().unwrap().len(), 1);
}

/// A Solana wallet that signs messages and pays with a payload the scripted facilitator takes.
#[derive(Debug)]
struct Signing(solana_sdk::signature::Keypair);

#[async_trait]
impl tollgate_client::Wallet for Signing {
    fn family(&self) -> tollgate::protocol::ChainFamily {
        tollgate::protocol::ChainFamily::Solana
    }
    fn address(&self) -> String {
        use solana_sdk::signer::Signer as _;
        self.0.pubkey().to_string()
    }
    async fn decimals(
        &self,
        _: &tollgate::protocol::x402::PaymentRequirements,
    ) -> Result<Option<u8>, tollgate_client::PayError> {
        Ok(Some(9))
    }
    async fn prove(
        &self,
        _: &tollgate::protocol::x402::PaymentRequirements,
        _: &serde_json::Map<String, Value>,
    ) -> Result<tollgate_client::Proof, tollgate_client::PayError> {
        Ok(tollgate_client::Proof::new(json!({"transaction": "AQID"})))
    }
    async fn sign_message(&self, message: &str) -> Result<String, tollgate_client::PayError> {
        use solana_sdk::signer::Signer as _;
        Ok(self.0.sign_message(message.as_bytes()).to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_payment_sent_by_several_calls_at_once_is_settled_once() {
    let s = setup(Script::Settles, SettlementOrder::SettleBefore).await;
    let calls = (0..8).map(|_| {
        let peer = s.client.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("echo", Some(payment()))).await.unwrap() })
    });
    let mut served = 0;
    for answer in futures_util::future::join_all(calls).await {
        let answer = answer.unwrap();
        if answer.is_error == Some(true) {
            let required = answer.structured_content.as_ref().unwrap();
            assert!(required["error"].as_str().unwrap().starts_with("answers_used"), "{answer:?}");
        } else {
            assert_eq!(answer.meta.as_ref().unwrap()[PAYMENT_RESPONSE_META]["transaction"], "5sig");
            served += 1;
        }
    }
    assert_eq!(served, 2);
    assert_eq!(s.facilitator.settled.lock().unwrap().len(), 1, "one settlement");
}
