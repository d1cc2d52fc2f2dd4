//! The seller side: [`ToolPaywall`] prices tools; [`PaidServer`] wraps an `rmcp` service so that
//! calls of those tools pay through the Tollgate layer.
//!
//! A priced call becomes one HTTP request to a [`tollgate::PaymentService`] around the tool —
//! the payment from `_meta["x402/payment"]` in its `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1)
//! header — and the layer's answer becomes the tool result:
//!
//! | the layer answers | the tool result |
//! |---|---|
//! | the tool's answer (it ran: paid, or settled after it) | the tool's result, with `_meta["x402/payment-response"]` when settled |
//! | 402 (no payment, refused, used, settlement failed) | `isError`, the `PaymentRequired` in `structuredContent` and `content[0].text` |
//! | 503 (broadcast, not confirmed), 504 (the facilitator did not answer in time) | `isError`, `structuredContent["tollgate/pending"]`: call again with the same payment |
//! | 400, 409, 412 | `isError`, the layer's reason |
//! | 502 (facilitator unavailable) | a JSON-RPC error: nothing was charged |
//!
//! A priced tool answers in one call: an answer that asks for input or starts a task is not
//! given to the buyer (its result would be fetched unpaid) and is not settled after.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt as _, Full};
use std::borrow::Cow;

#[allow(deprecated)]
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, ContentBlock, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams, GetSkillResult, GetTaskParams,
    GetTaskResult, InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListSkillsResult, ListToolsResult, MetaObject, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tollgate::discovery::{Discovery, Storefront};
use tollgate::{BuildError, Charge, Payment, PaymentLayer, PaymentLayerBuilder, TaskTracker};
use tollgate_protocol::x402::PaymentPayload;
use tollgate_protocol::x402::header::{
    PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE,
};
use tower::{Layer as _, ServiceExt as _};

use crate::{ACCEPTS_META, ERROR_KEY, PAYMENT_META, PAYMENT_RESPONSE_META, PENDING_KEY, SIGN_IN_META};

/// The result `_meta` key in which a metered tool (`upto`) reports what its call used, in atomic
/// units of the price's asset (a string of digits, or a number). It is charged that, capped at
/// the price; without it, the whole price. The key is removed before the buyer sees the result.
pub const CHARGE_META: &str = "tollgate/charge";

/// Marks the answers the tool wrote (not the layer).
const TOOL_ANSWER: &str = "x-tollgate-mcp-tool";

/// Why a paid tool's answer that asks for input or starts a task is not given.
const INCOMPLETE: &str = "a paid tool answers in one call: this one asked for input or started a task, which are not \
                          sold (nothing was settled after it)";

/// The layer's reason for a call without payment, in HTTP's words, and in the MCP transport's.
const NO_PAYMENT_HTTP: &str = "payment required: send an X-PAYMENT or PAYMENT-SIGNATURE header";
const NO_PAYMENT_MCP: &str = "payment required: call the tool again with the payment in _meta[\"x402/payment\"]";

/// The resource a paid tool is sold as: `mcp://tool/<name>`, as x402's MCP transport names it.
#[must_use]
pub fn tool_resource(name: &str) -> String {
    format!("mcp://tool/{name}")
}

/// Which tools cost what. Cheap to clone: clones share the proof caches and settlements.
#[derive(Debug, Clone)]
pub struct ToolPaywall {
    tools: Arc<HashMap<String, PaymentLayer>>,
    tasks: TaskTracker,
    /// Every priced tool, for the prices `tools/list` shows.
    storefront: Storefront,
}

/// Builds a [`ToolPaywall`].
#[derive(Debug, Default)]
#[must_use]
pub struct ToolPaywallBuilder {
    tools: Vec<(String, PaymentLayerBuilder)>,
    tasks: Option<TaskTracker>,
    listed: Option<Storefront>,
}

impl ToolPaywallBuilder {
    /// Prices the tool `name` as `layer` prices a route: its facilitator, prices (fixed, or
    /// metered with [`tollgate::Price::upto`]), description, settlement order, ticket and cache.
    /// Its resource is set to [`tool_resource`].
    pub fn tool(mut self, name: impl Into<String>, layer: PaymentLayerBuilder) -> Self {
        self.tools.push((name.into(), layer));
        self
    }

    /// Prices `tool` as [`Self::tool`] does, declared for discovery (x402 `bazaar`) from the
    /// tool itself: its name, description and `inputSchema`, as `tools/list` gives them (an
    /// `rmcp` tool router's `list_all()`). The declaration is in every payment-required result
    /// of the tool, and facilitators catalog the tool under its seller from it.
    pub fn declared_tool(self, tool: &Tool, layer: PaymentLayerBuilder) -> Self {
        let mut declared = Discovery::tool(tool.name.to_string(), Value::Object((*tool.input_schema).clone()));
        if let Some(description) = &tool.description {
            declared = declared.tool_description(description.to_string());
        }
        self.tool(tool.name.to_string(), layer.discovery(declared))
    }

    /// Lists every priced tool in `storefront` too: an HTTP server serving the tools lists them
    /// in its `/.well-known/x402.json` (as `mcp` items, at their `mcp://tool/<name>`).
    pub fn listed(mut self, storefront: &Storefront) -> Self {
        self.listed = Some(storefront.clone());
        self
    }

    /// Where the settlements that outlive their call run, for every tool (see
    /// [`PaymentLayerBuilder::tasks`]): a server shutting down closes and awaits it.
    pub fn tasks(mut self, tracker: TaskTracker) -> Self {
        self.tasks = Some(tracker);
        self
    }

    /// Builds every tool's layer.
    ///
    /// # Errors
    /// The first tool's [`BuildError`], named.
    pub fn build(self) -> Result<ToolPaywall, (String, BuildError)> {
        let tasks = self.tasks.unwrap_or_default();
        let storefront = Storefront::new();
        let mut tools = HashMap::new();
        for (name, layer) in self.tools {
            let built = layer.resource(tool_resource(&name)).tasks(tasks.clone()).build();
            let built = built.map_err(|e| (name.clone(), e))?;
            storefront.list_fixed(&built);
            if let Some(listed) = &self.listed {
                listed.list_fixed(&built);
            }
            tools.insert(name, built);
        }
        Ok(ToolPaywall { tools: Arc::new(tools), tasks, storefront })
    }
}

impl ToolPaywall {
    /// Starts a builder.
    pub fn builder() -> ToolPaywallBuilder {
        ToolPaywallBuilder::default()
    }

    /// Wraps `server` (any `rmcp` service: a `ServerHandler`, a tool router): calls of priced
    /// tools pay first; everything else passes through.
    pub fn wrap<S>(&self, server: S) -> PaidServer<S> {
        PaidServer { inner: Arc::new(server), paywall: self.clone() }
    }

    /// Whether `tool` has a price.
    #[must_use]
    pub fn prices(&self, tool: &str) -> bool {
        self.tools.contains_key(tool)
    }

    /// Where settlements that outlive their call run: at shutdown, close it and await it.
    #[must_use]
    pub const fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }
}

/// An `rmcp` server whose priced tools are paid for ([`ToolPaywall::wrap`]). A paid tool finds
/// the settled [`Payment`] in its request context's extensions.
#[derive(Debug)]
pub struct PaidServer<S> {
    inner: Arc<S>,
    paywall: ToolPaywall,
}

impl<S> Clone for PaidServer<S> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), paywall: self.paywall.clone() }
    }
}

// Everything but `call_tool` is the wrapped server's, the legacy methods (logging, resource
// subscriptions) included.
#[allow(deprecated)]
impl<S: ServerHandler> ServerHandler for PaidServer<S> {
    fn ping(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.ping(context)
    }

    fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<InitializeResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.initialize(request, context)
    }

    fn negotiate_initialize(&self, request: &InitializeRequestParams) -> Result<InitializeResult, McpError> {
        self.inner.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<DiscoverResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.discover(context)
    }

    fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CompleteResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.complete(request, context)
    }

    fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.set_level(request, context)
    }

    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetPromptResponse, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_prompt(request, context)
    }

    fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListPromptsResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_prompts(request, context)
    }

    fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourcesResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_resources(request, context)
    }

    fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourceTemplatesResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_resource_templates(request, context)
    }

    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceResponse, McpError>> + MaybeSendFuture + '_ {
        self.inner.read_resource(request, context)
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    fn listen(
        &self,
        context: SubscriptionContext,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.listen(context)
    }

    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.subscribe(request, context)
    }

    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.unsubscribe(request, context)
    }

    /// A priced tool pays first, through its layer; any other is called as is.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        match self.paywall.tools.get(request.name.as_ref()) {
            Some(layer) => self.paid_call(layer, request, context).await,
            None => self.inner.call_tool(request, context).await,
        }
    }

    /// The wrapped server's tools, each priced one with its ways to pay in
    /// `_meta["tollgate/accepts"]` ([`crate::ACCEPTS_META`]).
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut listed = self.inner.list_tools(request, context).await?;
        let manifest = self.paywall.storefront.manifest("").await;
        for tool in &mut listed.tools {
            let resource = tool_resource(&tool.name);
            if let Some(item) = manifest.items.iter().find(|item| item.resource.url == resource) {
                tool.meta.get_or_insert_with(MetaObject::default).insert(ACCEPTS_META.into(), json!(item.accepts));
            }
        }
        Ok(listed)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CustomResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.on_custom_request(request, context)
    }

    fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_cancelled(notification, context)
    }

    fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_progress(notification, context)
    }

    fn on_initialized(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_initialized(context)
    }

    fn on_roots_list_changed(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_roots_list_changed(context)
    }

    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_custom_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_task(request, context)
    }

    fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.update_task(request, context)
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.cancel_task(request, context)
    }

    fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListSkillsResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_skills(request, context)
    }

    fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetSkillResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_skill(request, context)
    }

    fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceDirectoryResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.read_resource_directory(request, context)
    }
}

impl<S: ServerHandler> PaidServer<S> {
    /// One call of a priced tool, through its layer.
    async fn paid_call(
        &self,
        layer: &PaymentLayer,
        mut call: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The payment is the layer's to read; the tool does not see it.
        let payment =
            context.meta.remove(PAYMENT_META).or_else(|| call.meta.as_mut().and_then(|meta| meta.remove(PAYMENT_META)));
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri("/")
            .header(http::header::ACCEPT, "application/json");
        if let Some(payment) = payment {
            let (name, value) = payment_header(&payment);
            request = request.header(name, value);
        }
        // A pass's holder signing in: its payload, in the header the layer reads.
        let sign_in =
            context.meta.remove(SIGN_IN_META).or_else(|| call.meta.as_mut().and_then(|meta| meta.remove(SIGN_IN_META)));
        if let Some(sign_in) = sign_in {
            let encoded = base64::engine::general_purpose::STANDARD.encode(sign_in.to_string());
            request = request.header(tollgate_protocol::siwx::HEADER, encoded);
        }
        // The call's arguments are the request's body: a repeat of a paid call is served only for
        // the same arguments (the layer tells requests apart by method, resource and body).
        let arguments = canonical(&Value::Object(call.arguments.clone().unwrap_or_default())).to_string();
        let request = request
            .body(Full::new(Bytes::from(arguments)))
            .map_err(|e| ErrorData::internal_error(format!("cannot make the payment request: {e}"), None))?;
        let tool = RunTool { inner: self.inner.clone(), call: Arc::new(Mutex::new(Some((call, context)))) };
        let answer = match layer.layer(tool).oneshot(request).await {
            Ok(answer) => answer,
            Err(never) => match never {},
        };
        let (head, body) = answer.into_parts();
        let body = body.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
        translate(&head, &body)
    }
}

/// `value` with every object's keys in order: one text for the same arguments, however they were
/// written.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut sorted = serde_json::Map::new();
            for key in keys {
                sorted.insert(key.clone(), canonical(&map[key]));
            }
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The header a `_meta["x402/payment"]` value travels in to the layer, and its value. A payment
/// that is not an x402 payload is passed as sent, for the layer to refuse with its reason.
#[must_use]
pub fn payment_header(payment: &Value) -> (&'static str, String) {
    match serde_json::from_value::<PaymentPayload>(payment.clone()) {
        Ok(payload @ PaymentPayload::V1(_)) => (X_PAYMENT, payload.to_header().unwrap_or_default()),
        Ok(payload) => (PAYMENT_SIGNATURE, payload.to_header().unwrap_or_default()),
        Err(_) => (PAYMENT_SIGNATURE, base64::engine::general_purpose::STANDARD.encode(payment.to_string())),
    }
}

/// The call a [`RunTool`] holds until it runs.
type HeldCall = Arc<Mutex<Option<(CallToolRequestParams, RequestContext<RoleServer>)>>>;

/// The tool, as the layer's inner service: runs the call it holds once.
struct RunTool<S> {
    inner: Arc<S>,
    call: HeldCall,
}

impl<S> Clone for RunTool<S> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), call: self.call.clone() }
    }
}

type Answer = http::Response<Full<Bytes>>;

impl<S: ServerHandler, B> tower::Service<http::Request<B>> for RunTool<S> {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let paid = request.extensions().get::<Payment>().cloned();
        let call = self.call.lock().ok().and_then(|mut held| held.take());
        let inner = self.inner.clone();
        Box::pin(async move {
            let Some((call, mut context)) = call else {
                return Ok(tool_answer(StatusCode::INTERNAL_SERVER_ERROR, &json!({"error": "the tool ran already"})));
            };
            if let Some(paid) = paid {
                context.extensions.insert(paid);
            }
            Ok(match inner.call_tool(call, context).await {
                Ok(CallToolResponse::Complete(result)) => completed(result),
                // Asking for input, or a task: the call did not complete. Its answer is not
                // handed over (a task's result would be fetched unpaid with `tasks/get`), and
                // nothing is settled after it.
                Ok(_) => {
                    let error = ErrorData::internal_error(INCOMPLETE, None);
                    tool_answer(StatusCode::CONFLICT, &json!({ "error": error }))
                }
                Err(error) => tool_answer(StatusCode::INTERNAL_SERVER_ERROR, &json!({"error": error})),
            })
        })
    }
}

/// A completed call's answer to the layer: the result, and for a metered price its charge.
fn completed(mut result: CallToolResult) -> Answer {
    let charge = result.meta.as_mut().and_then(|meta| meta.remove(CHARGE_META)).and_then(|v| {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        text.parse::<u128>().ok()
    });
    if result.meta.as_ref().is_some_and(|meta| meta.is_empty()) {
        result.meta = None;
    }
    // A failed tool is not settled after it (nor charged for a metered price).
    let status = if result.is_error == Some(true) { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
    let mut answer = tool_answer(status, &json!({"result": result}));
    if let Some(charge) = charge {
        answer.extensions_mut().insert(Charge::atomic(charge));
    }
    answer
}

fn tool_answer(status: StatusCode, body: &Value) -> Answer {
    let mut answer = http::Response::new(Full::new(Bytes::from(body.to_string())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(TOOL_ANSWER, http::HeaderValue::from_static("1"));
    answer
}

/// The layer's answer as the tool result.
fn translate(head: &http::response::Parts, body: &[u8]) -> Result<CallToolResponse, ErrorData> {
    let header = |names: &[&str]| {
        names.iter().find_map(|n| head.headers.get(*n)).and_then(|h| h.to_str().ok()).map(str::to_owned)
    };
    let settlement = header(&[PAYMENT_RESPONSE, X_PAYMENT_RESPONSE])
        .and_then(|h| tollgate_protocol::x402::header::decode::<Value>(&h).ok());
    let json = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let reason = match json["error"].as_str() {
        Some(NO_PAYMENT_HTTP) | None => NO_PAYMENT_MCP.to_owned(),
        Some(reason) => reason.to_owned(),
    };
    if head.headers.contains_key(TOOL_ANSWER) {
        if let Ok(mut result) = serde_json::from_value::<CallToolResult>(json["result"].clone()) {
            if let Some(settlement) = settlement {
                result.meta.get_or_insert_with(MetaObject::default).insert(PAYMENT_RESPONSE_META.into(), settlement);
            }
            return Ok(CallToolResponse::Complete(result));
        }
        let error = serde_json::from_value::<ErrorData>(json["error"].clone())
            .unwrap_or_else(|_| ErrorData::internal_error("the tool's answer could not be read", None));
        return match settlement {
            // Paid before the tool failed: the buyer learns both.
            Some(settlement) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(error.message.to_string())]);
                result.meta.get_or_insert_with(MetaObject::default).insert(PAYMENT_RESPONSE_META.into(), settlement);
                Ok(CallToolResponse::Complete(result))
            }
            None => Err(error),
        };
    }
    match head.status {
        StatusCode::PAYMENT_REQUIRED => {
            let mut required = header(&[PAYMENT_REQUIRED])
                .and_then(|h| tollgate_protocol::x402::header::decode::<Value>(&h).ok())
                .unwrap_or_else(|| json.clone());
            if let Some(object) = required.as_object_mut() {
                if object.get("error").and_then(Value::as_str) == Some(NO_PAYMENT_HTTP) {
                    object.insert("error".into(), Value::String(NO_PAYMENT_MCP.into()));
                }
                if let Some(settlement) = settlement {
                    object.insert(PAYMENT_RESPONSE_META.into(), settlement);
                }
            }
            let text = json!({ERROR_KEY: {"code": 402, "message": reason, "data": required}}).to_string();
            Ok(error_result(required, text))
        }
        // The facilitator did not answer in time: the payment may yet settle. The buyer calls
        // again with the same payment (the layer asks again), never with a new one.
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => {
            let retry_after = head
                .headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1);
            let pending = json!({PENDING_KEY: {
                "retryAfter": retry_after,
                "paymentId": json["paymentId"],
                "transaction": json["transaction"],
            }});
            let reason = if head.status == StatusCode::GATEWAY_TIMEOUT {
                "the payment facilitator did not answer in time: call again with the same payment".to_owned()
            } else {
                reason
            };
            Ok(error_result(pending, reason))
        }
        StatusCode::BAD_GATEWAY => Err(ErrorData::internal_error(reason, None)),
        _ => Ok(error_result(json, reason)),
    }
}

fn error_result(structured: Value, text: String) -> CallToolResponse {
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    CallToolResponse::Complete(result)
}
