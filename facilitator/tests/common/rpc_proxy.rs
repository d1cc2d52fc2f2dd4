//! A JSON-RPC proxy between the facilitator and a real chain node, for the faults a node can
//! have: an answer it forgets (a status window that has passed), one it never gives (a broadcast
//! lost on the way), one it gives late. Every other call goes through unchanged.
//!
//! The test sets a [`Rule`] per method; rules see the request's `params` and the node's answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::Value;

/// Rewrites a node's `result`, given the call's `params`.
pub type Rewriter = Arc<dyn Fn(&Value, Value) -> Value + Send + Sync>;

/// What to do with one call of a method.
#[derive(Clone)]
pub enum Rule {
    /// Forward the call and rewrite the node's `result` (the params are given too).
    Rewrite(Rewriter),
    /// Do not forward; answer as a broken gateway would (HTTP 502, no JSON-RPC body), so the
    /// caller cannot tell whether the node got it.
    Lose,
    /// Do not forward; answer as a node that does not serve the method (JSON-RPC -32601).
    Unknown,
    /// Forward, then answer with this error instead of the node's answer (a node that fails
    /// after doing the work).
    FailAfter(&'static str),
    /// Once (the rule is then cleared), do not forward; answer this JSON-RPC error (code,
    /// message): what a node says of a call it took and then lost, say a transaction it put in
    /// its pool and forgot when it restarted.
    AnswerOnce(i64, &'static str),
    /// Once (the rule is then cleared), hold the call: say so on `reached`, and forward it only
    /// when `release` is notified. A call that reaches the node after others have done their
    /// work, deterministically.
    HoldOnce {
        /// Notified when the call has arrived and is held.
        reached: Arc<tokio::sync::Notify>,
        /// Notified by the test to let it through.
        release: Arc<tokio::sync::Notify>,
    },
}

/// The running proxy.
#[derive(Clone)]
pub struct RpcProxy {
    /// Where the facilitator connects.
    pub url: String,
    rules: Arc<Mutex<HashMap<String, Rule>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    batches: Arc<Mutex<Vec<usize>>>,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    http: reqwest::Client,
    rules: Arc<Mutex<HashMap<String, Rule>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    batches: Arc<Mutex<Vec<usize>>>,
}

impl RpcProxy {
    /// Starts a proxy to `upstream` on 127.0.0.1.
    pub async fn start(upstream: &str) -> Self {
        let rules = Arc::new(Mutex::new(HashMap::new()));
        let calls = Arc::new(Mutex::new(HashMap::new()));
        let batches = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            upstream: upstream.to_owned(),
            http: reqwest::Client::new(),
            rules: rules.clone(),
            calls: calls.clone(),
            batches: batches.clone(),
        };
        let app = axum::Router::new().route("/", axum::routing::post(forward)).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, rules, calls, batches }
    }

    /// Sets the rule of `method` (replacing any earlier one).
    pub fn rule(&self, method: &str, rule: Rule) {
        self.rules.lock().unwrap().insert(method.to_owned(), rule);
    }

    /// Removes the rule of `method`.
    pub fn clear(&self, method: &str) {
        self.rules.lock().unwrap().remove(method);
    }

    /// Every call through the proxy so far, by method.
    pub fn all_calls(&self) -> HashMap<String, usize> {
        self.calls.lock().unwrap().clone()
    }

    /// The size of each batch forwarded so far, in order.
    pub fn batches(&self) -> Vec<usize> {
        self.batches.lock().unwrap().clone()
    }

    /// How many times `method` was called through the proxy.
    pub fn calls(&self, method: &str) -> usize {
        self.calls.lock().unwrap().get(method).copied().unwrap_or(0)
    }
}

async fn forward(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    // Batches (the facilitator's concurrent `eth_call`s) are counted call by call and forwarded
    // untouched: rules apply to lone calls.
    if let Some(batch) = body.as_array() {
        {
            let mut calls = s.calls.lock().unwrap();
            for method in batch.iter().filter_map(|c| c.get("method").and_then(Value::as_str)) {
                *calls.entry(method.to_owned()).or_default() += 1;
            }
        }
        s.batches.lock().unwrap().push(batch.len());
        return relay(&s, &body).await.map_or_else(|e| e, |v| Json(v).into_response());
    }
    let Some(method) = body.get("method").and_then(Value::as_str).map(str::to_owned) else {
        return relay(&s, &body).await.map_or_else(|e| e, |v| Json(v).into_response());
    };
    *s.calls.lock().unwrap().entry(method.clone()).or_default() += 1;
    let rule = {
        let mut rules = s.rules.lock().unwrap();
        match rules.get(&method).cloned() {
            once @ Some(Rule::AnswerOnce(..) | Rule::HoldOnce { .. }) => {
                rules.remove(&method);
                once
            }
            rule => rule,
        }
    };
    match rule {
        Some(Rule::Lose) => (StatusCode::BAD_GATEWAY, "lost on the way").into_response(),
        Some(Rule::Unknown) => {
            let message = format!("the method {method} does not exist/is not available");
            error_answer(&body, -32601, &message)
        }
        Some(Rule::AnswerOnce(code, message)) => error_answer(&body, code, message),
        Some(Rule::HoldOnce { reached, release }) => {
            reached.notify_one();
            release.notified().await;
            relay(&s, &body).await.map_or_else(|e| e, |v| Json(v).into_response())
        }
        Some(Rule::FailAfter(message)) => match relay(&s, &body).await {
            Ok(_) => error_answer(&body, -32000, message),
            Err(e) => e,
        },
        Some(Rule::Rewrite(f)) => match relay(&s, &body).await {
            Ok(mut answer) => {
                if let Some(result) = answer.get_mut("result") {
                    let params = body.get("params").cloned().unwrap_or(Value::Null);
                    *result = f(&params, result.take());
                }
                Json(answer).into_response()
            }
            Err(e) => e,
        },
        None => relay(&s, &body).await.map_or_else(|e| e, |v| Json(v).into_response()),
    }
}

/// A JSON-RPC error answer to `body`'s call.
fn error_answer(body: &Value, code: i64, message: &str) -> Response {
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    Json(serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})).into_response()
}

async fn relay(s: &Shared, body: &Value) -> Result<Value, Response> {
    let answer = s.http.post(&s.upstream).json(body).send().await;
    let answer = answer.map_err(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())?;
    answer.json::<Value>().await.map_err(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

/// The calls of each method made between two [`RpcProxy::all_calls`], those made at least once.
pub fn calls_since(
    before: &HashMap<String, usize>,
    after: &HashMap<String, usize>,
) -> std::collections::BTreeMap<String, usize> {
    after.iter().map(|(m, n)| (m.clone(), n - before.get(m).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
}
