//! [`Forwarder`]: sends a request on to the upstream and its answer back, both bodies streamed.
//!
//! On the way up: hop-by-hop headers (RFC 9110 §7.6.1: `Connection` and the fields it names,
//! `Keep-Alive`, `Proxy-*`, `TE` except `trailers`, `Transfer-Encoding`, `Upgrade`), `Expect`,
//! the payment and sign-in (`SIGN-IN-WITH-X`) headers and any client-sent identity headers are
//! removed; `Content-Length` is dropped when the client framed its body with `Transfer-Encoding`
//! (one framing reaches the upstream, the one hyper writes); `Forwarded` and `X-Forwarded-For/-Host/-Proto` are added;
//! `Host` names the upstream; a paid request gets its signed identity headers.
//!
//! On the way down: hop-by-hop headers and any payment headers of the upstream's own are
//! removed, a metered route's usage header is read into a [`Charge`] and removed. An upstream
//! that cannot be reached answers 502, one that does not answer in time 504: answers the layer
//! does not settle where it settles after the upstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tollgate::body::RequestBody;
use tollgate::protocol::AtomicAmount;
use tollgate::protocol::siwx::HEADER as SIGN_IN_WITH_X;
use tollgate::protocol::x402::header::{PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE};
use tollgate::{Charge, DeferredCharge, Payment};

use crate::identity::Identity;
use crate::route::{Captures, PathPattern};

/// Errors of bodies the proxy passes on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer the proxy gives.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
/// The pooled client every route shares.
pub type UpstreamClient = Client<HttpConnector, RequestBody>;

/// A client's request body, failing when none of it arrives for `idle` (a client stalling
/// mid-upload would hold an upstream connection and its worker for ever, or the layer reading a
/// paid request's body to tell a repeat of it). Every request's body is wrapped in it first.
#[derive(Debug)]
pub struct IdleBody {
    inner: Incoming,
    idle: Duration,
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl IdleBody {
    /// `inner`, failing after `idle` without data, as the body the layer and forwarder take.
    pub fn wrap(inner: Incoming, idle: Duration) -> RequestBody {
        RequestBody::new(Self { inner, idle, timer: None })
    }
}

impl hyper::body::Body for IdleBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        use std::future::Future as _;
        if let std::task::Poll::Ready(frame) = std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            self.timer = None;
            return std::task::Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let idle = self.idle;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        match timer.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Some(Err("the request body stalled".into()))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A pooled client to upstreams, connecting within `connect`.
#[must_use]
pub fn client(connect: Duration) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect));
    connector.set_nodelay(true);
    Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector)
}

thread_local! {
    /// This thread's pooled client, and the connect timeout it was made with. The proxy runs one
    /// single-threaded runtime per thread ([`crate::server::serve_threads`]): a request, the
    /// upstream connection it is sent on and that connection's task then stay on one thread,
    /// with no wake-up crossing to another (the cost `scripts/bench-proxy` measured).
    static CLIENT: std::cell::RefCell<Option<(Duration, UpstreamClient)>> = const { std::cell::RefCell::new(None) };
}

/// Sends `request` on this thread's pooled client (made anew when `connect` changed on reload).
fn send_upstream(connect: Duration, request: Request<RequestBody>) -> hyper_util::client::legacy::ResponseFuture {
    CLIENT.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref() {
            Some((made_with, pooled)) if *made_with == connect => pooled.request(request),
            _ => {
                let pooled = client(connect);
                let sent = pooled.request(request);
                *slot = Some((connect, pooled));
                sent
            }
        }
    })
}

/// A body held in memory.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    http_body_util::Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// The proxy's own answer: `{"error": message}`, not to be stored by caches.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An upstream: scheme, authority and a base path prepended to every forwarded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    authority: http::uri::Authority,
    base_path: String,
}

impl Upstream {
    /// Reads `http://host:port[/base]`.
    ///
    /// # Errors
    /// A sentence saying why it cannot be used.
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("upstream {url:?}: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(format!("upstream {url:?}: https upstreams are not supported; use http")),
            _ => return Err(format!("upstream {url:?}: an absolute http:// URL is needed")),
        }
        if uri.query().is_some() {
            return Err(format!("upstream {url:?}: no query"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| format!("upstream {url:?}: no host"))?;
        Ok(Self { authority, base_path: uri.path().trim_end_matches('/').to_owned() })
    }

    /// `host:port`, for reachability checks.
    #[must_use]
    pub fn authority(&self) -> &str {
        self.authority.as_str()
    }
}

/// What the listener knew of a request before routing: put in its extensions.
#[derive(Debug, Clone)]
pub struct Inbound {
    /// The client's address.
    pub client: std::net::SocketAddr,
    /// `http` or `https`, as the client reached the proxy.
    pub scheme: &'static str,
    /// The host (and port) the client named.
    pub host: String,
    /// What the route's pattern captured.
    pub captures: Captures,
}

/// How a metered route reads usage.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The response header with the units used.
    pub header: Option<HeaderName>,
    /// The trailer with the units used, at the end of a streamed answer.
    pub trailer: Option<HeaderName>,
    /// Atomic units of the asset per unit.
    pub unit: AtomicAmount,
}

/// One route's way to the upstream.
#[derive(Debug)]
pub struct Forward {
    /// The route's name (metrics).
    pub route: Arc<str>,
    /// The longest wait for a new upstream connection.
    pub connect_timeout: Duration,
    /// Where to.
    pub upstream: Upstream,
    /// The path template (`/v1/{id}`), or the request's path.
    pub rewrite: Option<String>,
    /// A metered route's usage header.
    pub usage: Option<Usage>,
    /// Identity headers for paid requests.
    pub identity: Option<Identity>,
    /// The longest wait for the upstream's answer head.
    pub response_timeout: Duration,
    /// The longest a client's request body may stall.
    pub body_idle: Duration,
    /// The route's metrics.
    pub metrics: crate::telemetry::RouteMetrics,
}

/// The service that forwards (cheap to clone).
#[derive(Debug, Clone)]
pub struct Forwarder(pub Arc<Forward>);

impl tower::Service<Request<RequestBody>> for Forwarder {
    type Response = Response<ProxyBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        let forward = self.0.clone();
        Box::pin(async move { Ok(forward.send(request).await) })
    }
}

/// Hop-by-hop fields (RFC 9110 §7.6.1, and `Proxy-Connection` of old clients).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop fields, and those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::TRAILER);
}

/// Appends `, value` to a field, or sets it.
fn append(headers: &mut HeaderMap, name: &'static str, value: &str) {
    let joined = match headers.get(name).and_then(|v| v.to_str().ok()) {
        Some(had) if !had.is_empty() => format!("{had}, {value}"),
        _ => value.to_owned(),
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

impl Forward {
    /// The path and query the upstream receives.
    fn target(&self, uri: &Uri, captures: &Captures) -> String {
        let path = self.rewrite.as_deref().map_or_else(|| uri.path().to_owned(), |t| PathPattern::fill(t, captures));
        let mut target = format!("{}{path}", self.upstream.base_path);
        if let Some(query) = uri.query() {
            target.push('?');
            target.push_str(query);
        }
        target
    }

    /// The request as the upstream gets it.
    fn upstream_request(&self, request: Request<RequestBody>) -> Result<Request<RequestBody>, String> {
        let (mut parts, body) = request.into_parts();
        // Taken, not copied: nothing after the upstream needs it.
        let inbound = parts.extensions.remove::<Inbound>();
        let target = match &inbound {
            Some(inbound) => self.target(&parts.uri, &inbound.captures),
            None => self.target(&parts.uri, &Captures::new()),
        };
        parts.uri = Uri::builder()
            .scheme("http")
            .authority(self.upstream.authority.clone())
            .path_and_query(target.as_str())
            .build()
            .map_err(|e| format!("the upstream URL cannot be made: {e}"))?;
        let headers = &mut parts.headers;
        let wants_trailers = headers
            .get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers")));
        let chunked = headers.contains_key(header::TRANSFER_ENCODING);
        strip_hop_by_hop(headers);
        if chunked {
            // The body's framing is hyper's to write: never a second, conflicting length.
            headers.remove(header::CONTENT_LENGTH);
        }
        headers.remove(header::EXPECT);
        if !hyper::body::Body::is_end_stream(&body) {
            // An upstream that answers without reading a body would read what is left of it as
            // its next request on a kept connection: the connection of a request with a body
            // is not reused.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        for name in [PAYMENT_SIGNATURE, X_PAYMENT, SIGN_IN_WITH_X] {
            headers.remove(name);
        }
        if let Some(identity) = &self.identity {
            identity.strip(headers);
        }
        if wants_trailers || self.usage.as_ref().is_some_and(|u| u.trailer.is_some()) {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        if let Some(inbound) = &inbound {
            let ip = inbound.client.ip();
            let address = ip.to_string();
            append(headers, "x-forwarded-for", &address);
            if !headers.contains_key("x-forwarded-host") {
                append(headers, "x-forwarded-host", &inbound.host);
            }
            if !headers.contains_key("x-forwarded-proto") {
                append(headers, "x-forwarded-proto", inbound.scheme);
            }
            let node = if ip.is_ipv6() { format!("\"[{ip}]\"") } else { address };
            let host =
                if inbound.host.contains([':', '[']) { format!("\"{}\"", inbound.host) } else { inbound.host.clone() };
            append(headers, "forwarded", &format!("for={node};host={host};proto={}", inbound.scheme));
        }
        if let Ok(host) = HeaderValue::from_str(self.upstream.authority.as_str()) {
            headers.insert(header::HOST, host);
        }
        if let (Some(identity), Some(payment)) = (&self.identity, parts.extensions.get::<Payment>()) {
            let now = chrono_now();
            identity.add(headers, parts.method.as_str(), &target, payment, now);
        }
        Ok(Request::from_parts(parts, body))
    }

    /// Forwards `request`, and gives the upstream's answer (or the proxy's 502/504).
    pub async fn send(&self, request: Request<RequestBody>) -> Response<ProxyBody> {
        let metered = request.extensions().get::<Payment>().is_some_and(|p| p.maximum.is_some());
        let request = match self.upstream_request(request) {
            Ok(r) => r,
            Err(why) => return error(StatusCode::BAD_GATEWAY, &why),
        };
        let started = Instant::now();
        let answer = tokio::time::timeout(self.response_timeout, send_upstream(self.connect_timeout, request)).await;
        self.metrics.upstream_seconds.record(started.elapsed().as_secs_f64());
        let response = match answer {
            Ok(Ok(response)) => response,
            Ok(Err(e)) if body_failed(&e) => {
                tracing::info!(route = %self.route, error = %e, "the request's body could not be read");
                return error(StatusCode::BAD_REQUEST, "the request's body could not be read");
            }
            Ok(Err(e)) => {
                tracing::warn!(route = %self.route, error = %e, "the upstream could not be reached");
                self.metrics.upstream_errors.increment(1);
                return error(StatusCode::BAD_GATEWAY, "the upstream could not be reached");
            }
            Err(_) => {
                tracing::warn!(route = %self.route, "the upstream did not answer in time");
                self.metrics.upstream_errors.increment(1);
                return error(StatusCode::GATEWAY_TIMEOUT, "the upstream did not answer in time");
            }
        };
        let (mut head, body) = response.into_parts();
        strip_hop_by_hop(&mut head.headers);
        for name in [PAYMENT_RESPONSE, X_PAYMENT_RESPONSE] {
            head.headers.remove(name);
        }
        let Some(usage) = &self.usage else {
            return Response::from_parts(head, body.map_err(Into::into).boxed_unsync());
        };
        let reported = usage.header.as_ref().and_then(|name| head.headers.remove(name));
        if let Some(trailer) = &usage.trailer {
            head.headers.remove(trailer);
        }
        if !metered || head.status.as_u16() >= 400 {
            let body = UsageTrailer { inner: body, usage: usage.clone(), deferred: None };
            return Response::from_parts(head, body.boxed_unsync());
        }
        match (reported.as_ref().map(units), &usage.trailer) {
            (Some(Some(units)), _) => {
                head.extensions.insert(Charge::per_unit(units, usage.unit));
                Response::from_parts(head, body.map_err(Into::into).boxed_unsync())
            }
            (None, Some(_)) => {
                // Reported at the end: the layer streams the answer and settles then.
                let deferred = DeferredCharge::new();
                head.extensions.insert(deferred.clone());
                let body = UsageTrailer { inner: body, usage: usage.clone(), deferred: Some(deferred) };
                Response::from_parts(head, body.boxed_unsync())
            }
            (Some(None), _) | (None, None) => {
                // Neither the most nor nothing: the answer is not served, nothing is settled.
                tracing::error!(
                    route = %self.route, reported = ?reported,
                    "the upstream reported no usable usage; the answer is refused and nothing is charged"
                );
                error(StatusCode::BAD_GATEWAY, "the upstream did not report its usage; nothing was charged")
            }
        }
    }
}

/// Whether a failed forward failed on the client's request body (a malformed chunk, a client
/// that hung up), not on the upstream.
fn body_failed(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if cause.downcast_ref::<hyper::Error>().is_some_and(|h| h.is_user() || h.is_body_write_aborted()) {
            return true;
        }
        source = cause.source();
    }
    false
}

/// An upstream answer's body, its usage trailer removed (and, for a metered request answered
/// in full, read into the [`DeferredCharge`] the layer settles).
struct UsageTrailer {
    inner: Incoming,
    usage: Usage,
    deferred: Option<DeferredCharge>,
}

impl hyper::body::Body for UsageTrailer {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let polled = std::task::ready!(std::pin::Pin::new(&mut self.inner).poll_frame(cx));
        let frame = match polled {
            None => {
                if let Some(deferred) = &self.deferred {
                    deferred.fail("the answer ended without its usage trailer");
                }
                return std::task::Poll::Ready(None);
            }
            Some(Err(e)) => return std::task::Poll::Ready(Some(Err(e.into()))),
            Some(Ok(frame)) => frame,
        };
        let mut trailers = match frame.into_trailers() {
            Ok(trailers) => trailers,
            Err(data) => return std::task::Poll::Ready(Some(Ok(data))),
        };
        let reported = self.usage.trailer.as_ref().and_then(|name| trailers.remove(name));
        if let Some(deferred) = &self.deferred {
            match reported.as_ref().and_then(units) {
                Some(units) => deferred.report(Charge::per_unit(units, self.usage.unit)),
                None => deferred.fail(format!("usage trailer {reported:?}")),
            }
        }
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A usage header's units: a whole number in ASCII digits, nothing else.
fn units(value: &HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hop_by_hop_fields_and_those_named_go() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("close, X-Secret , payment-signature"));
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("payment-signature", HeaderValue::from_static("proof"));
        headers.insert("keep-alive", HeaderValue::from_static("5"));
        headers.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.keys().map(HeaderName::as_str).collect::<Vec<_>>(), ["x-kept"]);
    }

    #[test]
    fn usage_is_a_whole_number_only() {
        for (text, units_read) in [("1532", Some(1532)), (" 7 ", Some(7)), ("0", Some(0))] {
            assert_eq!(units(&HeaderValue::from_static(text)), units_read, "{text}");
        }
        for bad in ["", "-1", "1.5", "1e3", "0x10", "12 tokens", "99999999999999999999999"] {
            assert_eq!(units(&HeaderValue::from_str(bad).unwrap()), None, "{bad}");
        }
    }

    #[test]
    fn upstreams_are_plain_http_urls() {
        let u = Upstream::parse("http://127.0.0.1:9000/api/").unwrap();
        assert_eq!((u.authority(), u.base_path.as_str()), ("127.0.0.1:9000", "/api"));
        for bad in ["https://x", "127.0.0.1:9000", "http://x/?a=1", "ftp://x"] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }
}
