//! [`Proxy`]: routes each request (or answers it itself: `/healthz`, `/readyz`, `/metrics`),
//! counts what happened, and swaps its routes on reload.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tollgate::body::RequestBody;
use tollgate::protocol::x402::header::{PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT, X_PAYMENT_RESPONSE};
use tower::ServiceExt as _;

use crate::config::{ConfigError, ProxyFile};
use crate::forward::{IdleBody, Inbound, ProxyBody, error, full};
use crate::route::{RequestError, canonical_host, canonical_path, query_matches, query_pairs};
use crate::routes::{Action, Route, Routes};

/// Requests' `Forwarded` fields the proxy writes itself unless told to trust the client's.
const FORWARDED: [&str; 4] = ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto"];

/// The proxy: its routes (swapped whole on reload) and what it serves itself.
pub struct Proxy {
    routes: RwLock<Arc<Routes>>,
    /// Settlements that outlive their request, of every route: awaited at shutdown.
    pub(crate) tasks: tollgate::TaskTracker,
    /// Whether `/healthz`, `/readyz`, `/metrics` are answered on the main listener.
    ops_here: bool,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    http: reqwest::Client,
    /// TLS, when `[tls]` is set (its certificate swapped at each reload).
    tls: Option<RwLock<tokio_rustls::TlsAcceptor>>,
    /// Client connections open at once: `max_connections` permits, shared by every thread
    /// that accepts.
    pub(crate) connections: Arc<tokio::sync::Semaphore>,
    /// The last readiness asked, and when.
    readiness: tokio::sync::Mutex<Option<(std::time::Instant, Readiness)>>,
}

/// The facilitator's reachability, and each upstream's.
/// The facilitator's, each upstream's, and the shared channel store's (when there is one).
type Readiness = (Result<(), String>, Vec<(String, Result<(), String>)>, Option<Result<(), String>>);

/// How long a readiness answer is reused.
const READINESS_FOR: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("ops_here", &self.ops_here).finish_non_exhaustive()
    }
}

impl Proxy {
    /// A proxy for `file`; `metrics` renders `/metrics` (none: 404).
    ///
    /// # Errors
    /// [`ConfigError`] for a file whose routes cannot be built.
    pub fn new(
        file: &ProxyFile,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> Result<Self, ConfigError> {
        if file.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ConfigError::Invalid(format!(
                "max_connections {} is more than {} (a count of connections, not a size)",
                file.max_connections,
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        let tasks = tollgate::TaskTracker::new();
        let routes = Routes::build(file, &tasks, None)?;
        let tls = file.tls.as_ref().map(crate::tls::acceptor).transpose()?.map(RwLock::new);
        Ok(Self {
            tls,
            readiness: tokio::sync::Mutex::new(None),
            tasks,
            connections: Arc::new(tokio::sync::Semaphore::new(file.max_connections.max(1))),
            routes: RwLock::new(Arc::new(routes)),
            ops_here: file.ops_listen.is_none(),
            metrics,
            http: reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap_or_default(),
        })
    }

    /// Replaces the routes with `file`'s; on error the routes in force stay. Requests already
    /// routed finish on the routes they were given. The TLS certificate is read again; `listen`,
    /// `ops_listen`, `max_connections` and turning TLS on or off need a restart.
    ///
    /// # Errors
    /// [`ConfigError`] for a file whose routes or certificate cannot be used.
    pub fn reload(&self, file: &ProxyFile) -> Result<(), ConfigError> {
        let current = self.current();
        let routes = Routes::build(file, &self.tasks, Some(&current))?;
        let acceptor = match (&self.tls, &file.tls) {
            (Some(_), Some(tls)) => Some(crate::tls::acceptor(tls)?),
            (None, None) => None,
            _ => return Err(ConfigError::Invalid("turning [tls] on or off needs a restart".into())),
        };
        if let (Some(held), Some(acceptor)) = (&self.tls, acceptor) {
            *held.write().unwrap_or_else(PoisonError::into_inner) = acceptor;
        }
        *self.routes.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(routes);
        Ok(())
    }

    /// The TLS acceptor in force, when the proxy terminates TLS.
    pub fn tls(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.tls.as_ref().map(|held| held.read().unwrap_or_else(PoisonError::into_inner).clone())
    }

    fn current(&self) -> Arc<Routes> {
        self.routes.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Answers one request from `client`, reached over `scheme`.
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
        scheme: &'static str,
    ) -> Response<ProxyBody> {
        if self.ops_here
            && let Some(answer) = self.ops(request.uri().path(), false).await
        {
            return answer;
        }
        let routes = self.current();
        let paying = request.headers().contains_key(PAYMENT_SIGNATURE) || request.headers().contains_key(X_PAYMENT);
        let (route, request) = match route(&routes, request, client, scheme) {
            Ok(routed) => routed,
            Err(why) => {
                routes.unmatched.metrics.count("bad_request");
                let status = match why {
                    RequestError::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
                    _ => StatusCode::BAD_REQUEST,
                };
                return error(status, &why.to_string());
            }
        };
        // The manifest answers before any route (a catch-all route would otherwise take it).
        if let Some(storefront) = &routes.storefront
            && tollgate::discovery::Storefront::asked(&request)
        {
            return storefront.respond(&request).await.map(|b| b.boxed_unsync());
        }
        let response = match &route.action {
            Action::NotFound => error(StatusCode::NOT_FOUND, "no such route"),
            Action::Free(forwarder) => forwarder.clone().oneshot(request).await.unwrap_or_else(|never| match never {}),
            Action::Paid(service) => match service.clone().oneshot(request).await {
                Ok(response) => response.map(|b| b.boxed_unsync()),
                Err(never) => match never {},
            },
        };
        let outcome = outcome(&route.action, paying, &response);
        route.metrics.count(outcome);
        response
    }

    /// `/healthz`, `/readyz`, `/metrics`; `None` for any other path.
    /// `/readyz` says what is unreachable only when `detailed` (on `ops_listen`): the public
    /// listener does not name the upstreams.
    pub async fn ops(&self, path: &str, detailed: bool) -> Option<Response<ProxyBody>> {
        let json = |status: StatusCode, value: serde_json::Value| {
            let mut response = Response::new(full(value.to_string()));
            *response.status_mut() = status;
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        };
        match path {
            "/healthz" => Some(json(StatusCode::OK, serde_json::json!({"status": "ok"}))),
            "/readyz" => {
                let (facilitator, upstreams, channels) = self.readiness().await;
                let ready = facilitator.is_ok()
                    && upstreams.iter().all(|(_, r)| r.is_ok())
                    && channels.as_ref().is_none_or(Result::is_ok);
                let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                let said_of = |r: &Result<(), String>| r.clone().err().unwrap_or_else(|| "ok".into());
                let upstreams: serde_json::Map<String, serde_json::Value> =
                    upstreams.iter().map(|(a, r)| (a.clone(), said_of(r).into())).collect();
                let said = if ready { "ready" } else { "unready" };
                Some(json(
                    status,
                    if detailed {
                        let mut detail = serde_json::json!({ "status": said, "facilitator": said_of(&facilitator), "upstreams": upstreams });
                        if let Some(channels) = &channels {
                            detail["channels"] = said_of(channels).into();
                        }
                        detail
                    } else {
                        serde_json::json!({ "status": said })
                    },
                ))
            }
            "/metrics" => Some(match &self.metrics {
                Some(handle) => {
                    let mut response = Response::new(full(handle.render()));
                    response
                        .headers_mut()
                        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
                    response
                }
                None => error(StatusCode::NOT_FOUND, "metrics are not recorded"),
            }),
            _ => None,
        }
    }

    /// Whether the facilitator answers its `/supported`, each upstream takes a connection and
    /// the channels' Redis (`channels_redis_env`) answers;
    /// asked at most once a second (a flood of `/readyz` is not a flood on them).
    async fn readiness(&self) -> Readiness {
        let mut last = self.readiness.lock().await;
        if let Some((at, said)) = last.as_ref()
            && at.elapsed() < READINESS_FOR
        {
            return said.clone();
        }
        let said = self.ask_readiness().await;
        *last = Some((std::time::Instant::now(), said.clone()));
        said
    }

    async fn ask_readiness(&self) -> Readiness {
        let routes = self.current();
        let (url, key) = &routes.facilitator;
        let mut ask = self.http.get(format!("{url}/supported"));
        if let Some(key) = key {
            ask = ask.bearer_auth(key);
        }
        let facilitator = match ask.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("/supported answered {}", r.status())),
            Err(e) => Err(format!("unreachable: {}", e.without_url())),
        };
        let mut upstreams = Vec::new();
        for upstream in &routes.upstreams {
            let authority = upstream.authority().to_owned();
            let connected =
                tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(authority.as_str())).await;
            let said = match connected {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("unreachable: {e}")),
                Err(_) => Err("no connection within 2 s".into()),
            };
            upstreams.push((authority, said));
        }
        let channels = match routes.channels() {
            Some(store) => Some(match tokio::time::timeout(Duration::from_secs(2), store.ping()).await {
                Ok(answered) => answered.map_err(|e| e.to_string()),
                Err(_) => Err("no answer within 2 s".into()),
            }),
            None => None,
        };
        (facilitator, upstreams, channels)
    }
}

/// The route a request takes, and the request as it goes on: its path canonical (what is
/// matched is what the upstream gets), `Host` the authority it named, forwarding headers
/// removed unless trusted, client-sent identity headers removed, [`Inbound`] in its extensions.
fn route<'r>(
    routes: &'r Routes,
    request: Request<Incoming>,
    client: SocketAddr,
    scheme: &'static str,
) -> Result<(&'r Route, Request<RequestBody>), RequestError> {
    let (mut parts, body) = request.into_parts();
    let authority = match parts.uri.authority() {
        Some(a) => a.as_str().to_owned(),
        None => parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .ok_or(RequestError::Host("no Host"))?,
    };
    let host = canonical_host(&authority)?;
    let path = canonical_path(parts.uri.path())?;
    if matches!(parts.method, Method::GET | Method::HEAD | Method::TRACE) && !hyper::body::Body::is_end_stream(&body) {
        // No meaning, and the classic way to hide a second request from a proxy.
        return Err(RequestError::Body(parts.method.to_string()));
    }
    let query = parts.uri.query().map(str::to_owned);
    let pairs = query.as_deref().map(query_pairs).unwrap_or_default();
    let mut chosen = None;
    let mut other_methods = false;
    for route in &routes.routes {
        if route.host.as_ref().is_some_and(|h| !h.matches(&host)) {
            continue;
        }
        let Some(captures) = route.path.matches(&path) else { continue };
        if !query_matches(&route.query, &pairs, query.as_deref())? {
            continue;
        }
        if !route.methods.is_empty() && !route.methods.contains(&parts.method) {
            other_methods = true;
            continue;
        }
        chosen = Some((route, captures));
        break;
    }
    let (route, captures) = match chosen {
        Some(found) => found,
        // A path a route names is that route's: another method is not the unmatched action's.
        None if other_methods => return Err(RequestError::Method(parts.method.to_string())),
        None => (&routes.unmatched, crate::route::Captures::new()),
    };
    // Absolute: the layer names the resource by the scheme and host the client used.
    let target = match &query {
        Some(q) => format!("{scheme}://{authority}{path}?{q}"),
        None => format!("{scheme}://{authority}{path}"),
    };
    parts.uri = Uri::try_from(target).map_err(|_| RequestError::Path("cannot be rebuilt"))?;
    if let Ok(value) = HeaderValue::from_str(&authority) {
        parts.headers.insert(header::HOST, value);
    }
    if !routes.trust_forwarded {
        for name in FORWARDED {
            parts.headers.remove(name);
        }
    }
    if let Some(identity) = &routes.identity {
        identity.strip(&mut parts.headers);
    }
    parts.extensions.insert(Inbound { client, scheme, host: authority, captures });
    Ok((route, Request::from_parts(parts, IdleBody::wrap(body, routes.body_idle()))))
}

/// What happened to a request, for `tollgate_proxy_requests_total`.
fn outcome(action: &Action, paying: bool, response: &Response<ProxyBody>) -> &'static str {
    let status = response.status();
    match action {
        Action::NotFound => "not_found",
        Action::Free(_) if status.is_server_error() => "upstream_error",
        Action::Free(_) => "free",
        Action::Paid(_) => {
            let settled = response.headers().contains_key(PAYMENT_RESPONSE)
                || response.headers().contains_key(X_PAYMENT_RESPONSE);
            match status.as_u16() {
                402 if !paying => "challenged",
                400 | 402 | 409 | 412 => "refused",
                503 => "pending",
                s if s < 400 && settled => "paid",
                s if s >= 500 => "upstream_error",
                _ => "unpaid",
            }
        }
    }
}
