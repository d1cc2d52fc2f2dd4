//! The demo's MCP tools, sold with `tollgate-mcp`: `summarize` (paid, as `POST /summarize`),
//! `count_words` (free) and, with EVM and Permit2, `tell_story` (metered, `upto`: charged per
//! word told). The shop serves them over streamable HTTP at `/mcp`; `tollgate-demo-mcp` serves
//! them over stdio.

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tollgate::discovery::Storefront;
use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
use tollgate_mcp::{CHARGE_META, PaidServer, ToolPaywall};
use tollgate_protocol::AtomicAmount;

/// What a word of story costs, in atomic units of the story's token (0.001 PUSD).
const STORY_PER_WORD: AtomicAmount = AtomicAmount(1_000);
/// The longest story told.
const STORY_MAX_WORDS: u64 = 50;

/// The demo's tools (an ordinary `rmcp` server: it knows nothing of payments but the
/// [`Payment`] its paid calls find in their context).
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoTools {
    /// Whether `tell_story` is listed (it is sold with Permit2 on EVM only).
    pub story: bool,
}

fn schema(properties: &Value, required: &[&str]) -> Arc<serde_json::Map<String, Value>> {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn text_argument(request: &CallToolRequestParams, name: &str) -> Result<String, ErrorData> {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ErrorData::invalid_params(format!("the argument {name} (a string) is required"), None))
}

fn answer(value: &Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    result.structured_content = Some(value.clone());
    result
}

impl DemoTools {
    /// The tools, as `tools/list` gives them (and as their discovery declarations say them).
    #[must_use]
    pub fn tools(&self) -> Vec<Tool> {
        let text = schema(&json!({"text": {"type": "string", "description": "The text"}}), &["text"]);
        let mut tools = vec![
            Tool::new("summarize", "A summary of the text: its word count and first eight words (paid)", text.clone()),
            Tool::new("count_words", "How many words the text has (free)", text),
        ];
        if self.story {
            let words = json!({"words": {"type": "integer", "minimum": 1, "maximum": STORY_MAX_WORDS}});
            tools.push(Tool::new(
                "tell_story",
                "A story of the words asked for, charged 0.001 PUSD a word told (at most 50)",
                schema(&words, &["words"]),
            ));
        }
        tools
    }
}

impl ServerHandler for DemoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions("Tollgate demo tools: summarize is paid (x402), count_words is free.")
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let payment = context.extensions.get::<Payment>();
        let paid_by = payment.and_then(|p| p.payer.clone());
        let transaction = payment.and_then(|p| p.transaction.clone());
        match request.name.as_ref() {
            "summarize" => {
                let text = text_argument(&request, "text")?;
                let words: Vec<&str> = text.split_whitespace().collect();
                let summary = words.iter().take(8).copied().collect::<Vec<_>>().join(" ");
                let value =
                    json!({"words": words.len(), "summary": summary, "paidBy": paid_by, "transaction": transaction});
                Ok(answer(&value).into())
            }
            "count_words" => {
                let text = text_argument(&request, "text")?;
                Ok(answer(&json!({"words": text.split_whitespace().count()})).into())
            }
            "tell_story" if self.story => {
                const WORDS: [&str; 10] = ["once", "a", "buyer", "paid", "only", "for", "the", "words", "it", "read"];
                let asked = request.arguments.as_ref().and_then(|a| a.get("words")).and_then(Value::as_u64);
                let told = asked.unwrap_or(12).clamp(1, STORY_MAX_WORDS);
                let text: Vec<&str> = (0..told).map(|i| WORDS[usize::try_from(i).unwrap_or(0) % WORDS.len()]).collect();
                let charged = STORY_PER_WORD.get() * u128::from(told);
                let mut result =
                    answer(&json!({"story": text.join(" "), "words": told, "charged": charged.to_string()}));
                // What this call used: the tool reports it, the paywall charges it (capped).
                let mut meta = MetaObject::default();
                meta.insert(CHARGE_META.into(), Value::String(charged.to_string()));
                result.meta = Some(meta);
                Ok(result.into())
            }
            other => Err(ErrorData::invalid_params(format!("no tool named {other}"), None)),
        }
    }
}

/// The prices of the demo's tools: `summarize` at `summarize` (the first price a buyer can pay
/// wins), `tell_story` at `story` (an `upto` price).
///
/// # Errors
/// A price the layer refuses.
pub fn paywall(
    facilitator: &FacilitatorClient,
    summarize: &[Price],
    story: Option<&Price>,
    listed: Option<&Storefront>,
) -> anyhow::Result<ToolPaywall> {
    // Each priced tool declares itself (x402 `bazaar`) from its own listing.
    let tools = DemoTools { story: story.is_some() }.tools();
    let tool = |name: &str| tools.iter().find(|t| t.name == name).cloned();
    let mut layer = PaymentLayer::builder().facilitator(facilitator.clone()).description("A summary of the text");
    for price in summarize {
        layer = layer.accept(price.clone());
    }
    // One payment serves its call, and one retry of a buyer whose answer was lost.
    let summarize = tool("summarize").ok_or_else(|| anyhow::anyhow!("no summarize tool"))?;
    let mut builder = ToolPaywall::builder().declared_tool(&summarize, layer.ticket_uses(2));
    if let Some(story) = story
        && let Some(tell_story) = tool("tell_story")
    {
        let told = "A story, charged 0.001 PUSD a word it tells (at most 50 words, 0.05 PUSD)";
        let layer = PaymentLayer::builder().facilitator(facilitator.clone()).description(told).accept(story.clone());
        builder = builder.declared_tool(&tell_story, layer.ticket_uses(2));
    }
    if let Some(storefront) = listed {
        builder = builder.listed(storefront);
    }
    builder.build().map_err(|(tool, e)| anyhow::anyhow!("tool {tool}: {e}"))
}

/// The paid tools over streamable HTTP (mounted at `/mcp`).
pub(crate) fn http_service(
    paywall: ToolPaywall,
    story: bool,
) -> StreamableHttpService<PaidServer<DemoTools>, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(paywall.wrap(DemoTools { story })),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    )
}
