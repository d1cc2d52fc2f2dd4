//! OpenTelemetry trace export (feature `otel`), from the real daemon to a stand-in OTLP/HTTP
//! collector on 127.0.0.1 that decodes what it receives: request spans named by route,
//! continuing the caller's `traceparent`, with their status; chain RPC calls as child spans;
//! no secret and no id in what is exported; the last spans sent at shutdown.
//!
//! Run with `cargo test -p tollgate-facilitator --features otel --test facilitator otel::` (scripts/test does).

#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{Span, status};
use prost::Message as _;

use common::process::{Daemon, cli_with};

/// What the collector received: each span with its resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

async fn collect(State(received): State<Received>, body: Bytes) -> &'static [u8] {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans.resource.map(|r| text(&r.attributes, "service.name")).unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.lock().unwrap().push((service.clone(), span));
            }
        }
    }
    // An empty ExportTraceServiceResponse.
    b""
}

fn text(attributes: &[KeyValue], key: &str) -> String {
    attributes.iter().find(|a| a.key == key).and_then(|a| a.value.as_ref()).map(value_text).unwrap_or_default()
}

fn value_text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// The spans received, once those named in `names` all are (or after 20 s).
fn spans_named(received: &Received, names: &[&str]) -> Vec<(String, Span)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let spans = received.lock().unwrap().clone();
        if names.iter().all(|n| spans.iter().any(|(_, s)| s.name == *n)) || Instant::now() > deadline {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_the_collector_named_by_route_with_rpc_children_and_no_secrets() {
    let (received, collector) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let created: serde_json::Value =
        serde_json::from_str(&cli_with(dir.path(), &DEV, &["keys", "create", "--plan", "enterprise", "--json"]))
            .unwrap();
    let key = created["key"].as_str().unwrap().to_owned();
    let daemon = Daemon::spawn(exporting(dir.path(), &collector, "50"));
    let http = reqwest::Client::new();

    // A caller's trace, continued.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let health = http
        .get(format!("{}/healthz", daemon.base))
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // A request that asks the chain (the embedded ledger): an RPC span inside it.
    let mint = "So11111111111111111111111111111111111111112";
    let info = http.get(format!("{}/token/info/{mint}", daemon.base)).bearer_auth(&key).send().await.unwrap();
    assert!(info.status().is_success() || info.status() == 404, "{}", info.status());
    // A wrong key, an id in the path, a key in the query string: none of it becomes a name or
    // an attribute.
    let wrong_key = "tg_live_this_secret_must_not_be_exported";
    let status = http
        .get(format!("{}/payment/status/pay_01SECRETPATHID?api-key={wrong_key}", daemon.base))
        .bearer_auth(wrong_key)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 401);

    let spans =
        spans_named(&received, &["GET /healthz", "GET /token/info/{mint_address}", "GET /payment/status/{payment_id}"]);
    let named =
        |name: &str| {
            spans.iter().map(|(_, s)| s).find(|s| s.name == name).unwrap_or_else(|| {
                panic!("no span {name}: {:?}", spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>())
            })
        };
    assert!(spans.iter().all(|(service, _)| service == "tollgate-facilitator"), "service.name");

    let health = named("GET /healthz");
    assert_eq!(health.kind, SpanKind::Server as i32);
    assert_eq!(hex(&health.trace_id), trace_id, "the caller's trace continues");
    assert_eq!(hex(&health.parent_span_id), parent_id, "under the caller's span");
    assert_eq!(text(&health.attributes, "http.response.status_code"), "200");
    assert_eq!(text(&health.attributes, "http.route"), "/healthz");

    let info = named("GET /token/info/{mint_address}");
    assert_ne!(hex(&info.trace_id), trace_id, "a request without traceparent starts a trace of its own");
    let rpc: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.parent_span_id == info.span_id && s.trace_id == info.trace_id)
        .collect();
    assert!(!rpc.is_empty(), "the chain RPC calls are children of the request's span");
    for call in &rpc {
        assert_eq!(call.kind, SpanKind::Client as i32, "{}", call.name);
        assert!(call.name.starts_with("get"), "named by the RPC method: {}", call.name);
        assert_eq!(text(&call.attributes, "method"), call.name);
    }

    let refused = named("GET /payment/status/{payment_id}");
    assert_eq!(text(&refused.attributes, "http.response.status_code"), "401");
    assert_ne!(
        refused.status.as_ref().map(|s| s.code),
        Some(status::StatusCode::Error as i32),
        "a 4xx is not an error"
    );
    for (_, span) in &spans {
        let everything = format!("{} {:?} {:?}", span.name, span.attributes, span.events);
        assert!(!everything.contains("this_secret"), "a key was exported: {everything}");
        assert!(!span.name.contains("SECRETPATHID"), "an id in a span name: {}", span.name);
    }
    assert!(daemon.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_buffered_are_sent_when_the_daemon_stops() {
    let (received, collector) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    // Batches every ten minutes: only the shutdown can send this one in time.
    let daemon = Daemon::spawn(exporting(dir.path(), &collector, "600000"));
    let answer = reqwest::get(format!("{}/healthz", daemon.base)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(received.lock().unwrap().is_empty(), "nothing is sent before the batch is due");
    let exit = daemon.terminate();
    assert!(exit.success(), "{exit:?}");
    let spans = spans_named(&received, &["GET /healthz"]);
    assert!(spans.iter().any(|(_, s)| s.name == "GET /healthz"), "the buffered span was sent at shutdown");
}

/// A collector on a free port: what it receives, and its address.
async fn collector() -> (Received, String) {
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().route("/v1/traces", post(collect)).with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (received, address)
}

/// The daemon in development mode in `dir`, exporting to `collector` in batches every `delay_ms`.
fn exporting(dir: &std::path::Path, collector: &str, delay_ms: &str) -> std::process::Command {
    let mut command = common::process::command_with(dir, &DEV);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env("OTEL_BSP_SCHEDULE_DELAY", delay_ms)
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_TRACES_SAMPLER");
    command
}

const DEV: [(&str, &str); 1] = [("TOLLGATE_DEV", "1")];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
