//! OpenTelemetry trace export (cargo feature `otel`).
//!
//! Off unless the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set. Then the spans at INFO and above are exported over OTLP/HTTP (protobuf), in batches
//! from a thread of their own: one per HTTP request (named by method and route, never by path:
//! ids stay out of span names), one per chain RPC call inside it. The other standard variables
//! apply as the OpenTelemetry SDK reads them: `OTEL_SERVICE_NAME` (default
//! `tollgate-facilitator`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS` (the
//! collector's credentials), `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_*`.
//! A request carrying a W3C `traceparent` header continues the caller's trace.
//!
//! Export is plain HTTP: a collector beside the daemon (an agent or sidecar) forwards to where
//! traces are kept.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan;

/// The variables that switch export on.
const ENDPOINT_VARIABLES: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// The running export, to be shut down (which sends what is buffered) when the daemon stops.
pub struct Exporting(SdkTracerProvider);

impl Exporting {
    /// Sends the spans still buffered and stops the export thread. Call it outside the async
    /// runtime (the exporter's HTTP client blocks).
    pub fn shutdown(self) {
        if let Err(e) = self.0.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: OpenTelemetry export did not shut down cleanly: {e}");
        }
    }
}

/// Where traces go, when export is configured: the endpoint with any credentials hidden.
#[must_use]
pub fn configured_endpoint() -> Option<String> {
    ENDPOINT_VARIABLES
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .map(|url| tollgate_protocol::redact::redact_url(&url))
}

/// The layer exporting spans, and its handle; `None` when no endpoint is configured.
///
/// # Errors
/// When the exporter cannot be built from the configuration (a malformed endpoint, say).
pub fn layer<S>() -> anyhow::Result<Option<(tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>, Exporting)>>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    if configured_endpoint().is_none() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot set up OpenTelemetry export: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(env!("CARGO_PKG_NAME"));
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let tracer = provider.tracer(env!("CARGO_PKG_NAME"));
    Ok(Some((tracing_opentelemetry::layer().with_tracer(tracer), Exporting(provider))))
}

/// The SDK's tracer, as the layer holds it.
pub type Tracer = opentelemetry_sdk::trace::Tracer;

/// The span of one HTTP request: what the log lines carry, plus the OpenTelemetry name
/// (`POST /verify`, the route pattern), kind and, recorded by [`record_status`], the status.
/// Continues the trace of a `traceparent` header.
pub fn request_span(
    method: &http::Method,
    path: &str,
    route: Option<&str>,
    request_id: &str,
    headers: &http::HeaderMap,
) -> Span {
    let name = format!("{method} {}", route.unwrap_or("unmatched"));
    let span = tracing::info_span!(
        "request",
        method = %method,
        path = %path,
        request_id = %request_id,
        "otel.name" = %name,
        "otel.kind" = "server",
        "http.route" = route.unwrap_or_default(),
        "http.response.status_code" = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    // A span that no layer records (export off, filtered out) has nothing to attach to.
    let _ = span.set_parent(parent);
    span
}

/// Records the answer's status on the request's span; a 5xx marks it as an error.
pub fn record_status(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// Request headers as the trace-context propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
