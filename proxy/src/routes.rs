//! [`Routes`]: a configuration file made ready to serve — each route's matcher, and its
//! action: forwarded free, 404, or behind its own [`PaymentLayer`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use tollgate::protocol::{Address, DecimalAmount, Network};
use tollgate::{FacilitatorClient, PaymentLayer, PaymentService, Price, SettlementOrder};
use tower::Layer as _;

use tollgate::discovery::{BodyType, Discovery, ServiceMetadata, Storefront};

use crate::config::{AcceptFile, ConfigError, DiscoveryFile, ProxyFile, RouteFile, Settle, UnmatchedAction};
use crate::forward::{Forward, Forwarder, Upstream, Usage};
use crate::identity::Identity;
use crate::route::{HostPattern, PathPattern, QueryValue};

/// The default largest answer held while it is settled.
const MAX_HELD_BYTES: usize = 16 * 1024 * 1024;
/// Proofs a route remembers at most.
const PROOFS_REMEMBERED: u64 = 100_000;
/// How long a route remembers a settled proof (to claim its repeats without verifying again).
const PROOFS_KEPT: Duration = Duration::from_secs(600);
/// How long a refused proof is refused again without asking the facilitator.
const REFUSED_FOR: Duration = Duration::from_secs(10);

/// A route's settings for its payment layer.
#[derive(Clone, Copy)]
struct Layered<'a> {
    /// The route's name: a pass bought on any of its paths opens all of them.
    route: &'a str,
    settle: Settle,
    max_held: Option<usize>,
    ticket: (Option<u32>, Option<u64>),
    description: &'a str,
    mime: Option<&'a str>,
    /// What it declares, and its path and methods (the declaration's defaults).
    /// Every paid route with a path declares itself, from `[route.discovery]` or by default.
    discovery: Option<(Option<&'a DiscoveryFile>, &'a str, &'a [String])>,
}

/// What a matched request gets.
#[derive(Clone)]
pub enum Action {
    /// Forwarded without payment.
    Free(Forwarder),
    /// 404.
    NotFound,
    /// Paid first.
    Paid(PaymentService<Forwarder>),
}

/// One route, ready.
#[derive(Clone)]
pub struct Route {
    /// Its name.
    pub name: Arc<str>,
    pub(crate) path: PathPattern,
    pub(crate) methods: Vec<Method>,
    pub(crate) host: Option<HostPattern>,
    pub(crate) query: BTreeMap<String, QueryValue>,
    /// What it does.
    pub action: Action,
    /// Its metrics.
    pub metrics: crate::telemetry::RouteMetrics,
    /// As written (a reload keeps a route's layer, and its memory of proofs, when unchanged).
    definition: RouteFile,
}

/// Everything a request is routed by.
#[derive(Clone)]
pub struct Routes {
    /// In the file's order.
    pub routes: Vec<Route>,
    /// For requests no route matches.
    pub unmatched: Route,
    /// Whether the client's `Forwarded` / `X-Forwarded-*` are believed.
    pub trust_forwarded: bool,
    /// Identity headers (their names are stripped from every request).
    pub identity: Option<Identity>,
    /// The facilitator's base URL and key, for readiness.
    pub facilitator: (String, Option<String>),
    /// Every upstream, for readiness.
    pub upstreams: Vec<Upstream>,
    /// The parts of the file every route's layer depends on: routes are kept across a reload
    /// only when these are unchanged.
    shared: ProxyFile,
    /// The channels kept in Redis, if any.
    channels: Option<SharedChannels>,
    /// The paid routes' `/.well-known/x402.json`, unless `well_known = false`.
    pub storefront: Option<Storefront>,
}

fn invalid(why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(why.into())
}

/// A secret named by an environment variable or a file (one of them), trimmed; `None` when
/// neither is given.
fn secret(env: Option<&str>, file: Option<&std::path::Path>, what: &str) -> Result<Option<String>, ConfigError> {
    let value = match (env, file) {
        (None, None) => return Ok(None),
        (Some(name), None) => std::env::var(name)
            .map_err(|_| invalid(format!("{what}_env: the environment variable {name} is not set")))?,
        (None, Some(path)) => {
            std::fs::read_to_string(path).map_err(|e| invalid(format!("{what}_file: {}: {e}", path.display())))?
        }
        (Some(_), Some(_)) => return Err(invalid(format!("give {what}_env or {what}_file, not both"))),
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(invalid(format!("{what} is empty")));
    }
    Ok(Some(value.to_owned()))
}

/// One way to pay.
fn price(accept: &AcceptFile, at: &str) -> Result<Price, ConfigError> {
    let bad = |why: String| invalid(format!("{at}: {why}"));
    let finish = |price: Price| finished(accept, at, price);
    let (amount, metered) = match (&accept.amount, &accept.max) {
        (Some(amount), None) => (amount.as_str(), false),
        (None, Some(max)) => (max.as_str(), true),
        _ => return Err(bad("give either amount (a fixed price) or max (a metered one)".into())),
    };
    let native = |price: Result<Price, tollgate::PriceError>| {
        if metered {
            return Err(bad("a metered price (max) is paid in an EVM token, not the native coin".into()));
        }
        if accept.decimals.is_some() || accept.transfer.is_some() {
            return Err(bad("decimals and transfer are for tokens".into()));
        }
        price.map_err(|e| bad(e.to_string()))
    };
    let price = match accept.asset.as_str() {
        "SOL" | "sol" => native(Price::native_sol(amount))?,
        "ETH" | "eth" => native(Price::native_eth(amount))?,
        token => {
            let token: Address = token.parse().map_err(|e| bad(format!("asset: SOL, ETH or a token address: {e}")))?;
            let decimals = accept.decimals.ok_or_else(|| bad("a token needs its decimals".into()))?;
            match accept.scheme.as_deref() {
                None | Some("exact") => {}
                Some(tollgate::batch::SCHEME) => {
                    if metered {
                        return Err(bad("a price from channels is fixed: give amount, not max".into()));
                    }
                    let price = Price::batch(token, amount, decimals).map_err(|e| bad(e.to_string()))?;
                    return finish(match accept.transfer.as_deref() {
                        None | Some("eip3009") => price,
                        Some("permit2") => price.permit2(),
                        Some(other) => return Err(bad(format!("transfer: eip3009 or permit2, not {other}"))),
                    });
                }
                Some(other) => return Err(bad(format!("scheme: exact or batch-settlement, not {other}"))),
            }
            match (metered, accept.transfer.as_deref()) {
                (true, None | Some("permit2")) => Price::upto(token, amount, decimals),
                (true, Some(other)) => {
                    return Err(bad(format!("a metered price is paid through permit2, not {other}")));
                }
                (false, None | Some("eip3009")) => Price::token(token, amount, decimals),
                (false, Some("permit2")) => Price::token(token, amount, decimals).map(Price::permit2),
                (false, Some(other)) => return Err(bad(format!("transfer: eip3009 or permit2, not {other}"))),
            }
            .map_err(|e| bad(e.to_string()))?
        }
    };
    finish(price)
}

/// The rest of one way to pay: who is paid, where, with what `extra`, for how long.
fn finished(accept: &AcceptFile, at: &str, price: Price) -> Result<Price, ConfigError> {
    let bad = |why: String| invalid(format!("{at}: {why}"));
    let pay_to: Address = accept.pay_to.parse().map_err(|e| bad(format!("pay_to: {e}")))?;
    let mut price = price.pay_to(pay_to);
    if let Some(network) = &accept.network {
        price = price.on(network.parse::<Network>().map_err(|e| bad(format!("network: {e}")))?);
    }
    if let Some(extra) = &accept.extra {
        price = price.extra(serde_json::to_value(extra).map_err(|e| bad(format!("extra: {e}")))?);
    }
    if let Some(seconds) = accept.pass_secs {
        price = price.pass(Duration::from_secs(seconds));
    }
    Ok(price)
}

/// A route's `[route.discovery]` as the layer takes it: its declaration (method by default the
/// route's first, a path with parameters its `routeTemplate`) and service metadata. Without the
/// table a route still declares how it is called, when a query method calls it (a body method's
/// declaration needs an example body: that route is listed with its method alone).
fn declaration(
    file: Option<&DiscoveryFile>,
    path: &str,
    methods: &[String],
) -> Result<Option<(Discovery, ServiceMetadata)>, String> {
    let method = file.and_then(|f| f.method.clone()).or_else(|| methods.first().cloned());
    if let Some(declared) = &method
        && !methods.is_empty()
        && !methods.iter().any(|m| m.eq_ignore_ascii_case(declared))
    {
        return Err(format!("method {declared} is not one of the route's methods"));
    }
    let query_method =
        method.as_deref().is_none_or(|m| matches!(m.to_ascii_uppercase().as_str(), "GET" | "HEAD" | "DELETE"));
    if file.is_none() && !query_method {
        return Ok(None);
    }
    let file = file.cloned().unwrap_or_default();
    let mut discovery = Discovery::http();
    if let Some(method) = &method {
        discovery = discovery.method(method);
    }
    if let Some(query) = &file.query_example {
        discovery = discovery.query_example(query.clone());
    }
    let body_type = match file.body_type.as_deref() {
        None | Some("json") => BodyType::Json,
        Some("form-data") => BodyType::FormData,
        Some("text") => BodyType::Text,
        Some(other) => return Err(format!("body_type: json, form-data or text, not {other:?}")),
    };
    match (&file.body_example, &file.body_type) {
        (Some(body), _) => discovery = discovery.body_example(body_type, body.clone()),
        (None, Some(_)) => return Err("body_type goes with body_example".into()),
        (None, None) => {}
    }
    if let Some(schema) = &file.input_schema {
        discovery = discovery.input_schema(schema.clone());
    }
    if let Some(output) = &file.output_example {
        discovery = discovery.output_example(output.clone());
    }
    let template = tollgate::discovery::route_template(path).map_err(|e| e.to_string())?;
    if template.contains(':') {
        discovery = discovery.route_template(template);
    }
    let service = ServiceMetadata {
        service_name: file.service_name.clone(),
        tags: file.tags.clone(),
        icon_url: file.icon_url.clone(),
    };
    Ok(Some((discovery, service)))
}

/// Whether the manifest lists `route` (called with `method`): never a route bound to one host
/// (the manifest answers every host), nor one an earlier route takes first (the same path, any
/// host, no query to tell them apart, and the method among its own): the manifest lists what a
/// request to its URL gets.
fn listable(route: &Route, earlier: &[Route], method: &Method) -> bool {
    route.host.is_none()
        && !earlier.iter().any(|before| {
            before.definition.path == route.definition.path
                && before.host.is_none()
                && before.query.is_empty()
                && (before.methods.is_empty() || before.methods.contains(method))
        })
}

/// What every route is built with.
struct Shared<'a> {
    file: &'a ProxyFile,
    /// Where every layer's settlements that outlive their request run (awaited at shutdown).
    tasks: &'a tollgate::TaskTracker,
    facilitator: FacilitatorClient,
    identity: Option<Identity>,
    upstream: Upstream,
    /// The channels shared with other proxies (`channels_redis_env`).
    channels: Option<&'a SharedChannels>,
}

/// Channels kept in Redis: its URL and prefix, and the store (one for every route, kept
/// across reloads while they are unchanged).
#[derive(Clone)]
pub(crate) struct SharedChannels {
    url: String,
    prefix: String,
    store: tollgate::batch::RedisChannels,
}

impl std::fmt::Debug for SharedChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("SharedChannels").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// The Redis channels `file` names, if any: `previous`'s when its URL and prefix are the same.
fn shared_channels(file: &ProxyFile, previous: Option<&Routes>) -> Result<Option<SharedChannels>, ConfigError> {
    let Some(url) = secret(file.channels_redis_env.as_deref(), None, "channels_redis")? else {
        if file.channels_redis_prefix.is_some() {
            return Err(invalid("channels_redis_prefix is for channels_redis_env"));
        }
        return Ok(None);
    };
    if file.channels_file.is_some() {
        return Err(invalid("give channels_file or channels_redis_env, not both"));
    }
    let prefix = file.channels_redis_prefix.clone().unwrap_or_else(|| "tollgate-proxy".to_owned());
    if prefix.is_empty() {
        return Err(invalid("channels_redis_prefix is empty"));
    }
    if let Some(kept) = previous.and_then(|p| p.channels.as_ref()).filter(|c| c.url == url && c.prefix == prefix) {
        return Ok(Some(kept.clone()));
    }
    let store =
        tollgate::batch::RedisChannels::open(&url, &prefix).map_err(|e| invalid(format!("channels_redis_env: {e}")))?;
    Ok(Some(SharedChannels { url, prefix, store }))
}

impl Shared<'_> {
    /// A forwarder for `route` (named `name`), reading `usage` when metered.
    fn forwarder(
        &self,
        name: &Arc<str>,
        upstream: Upstream,
        rewrite: Option<String>,
        usage: Option<Usage>,
    ) -> Forwarder {
        Forwarder(Arc::new(Forward {
            route: name.clone(),
            connect_timeout: Duration::from_millis(self.file.timeouts.connect_ms),
            upstream,
            rewrite,
            usage,
            identity: self.identity.clone(),
            response_timeout: Duration::from_millis(self.file.timeouts.response_ms),
            body_idle: Duration::from_millis(self.file.timeouts.body_idle_ms),
            metrics: crate::telemetry::RouteMetrics::new(name),
        }))
    }

    /// The payment layer around `forwarder` for these prices.
    fn paid(
        &self,
        at: &str,
        accept: &[AcceptFile],
        settings: Layered<'_>,
        forwarder: Forwarder,
    ) -> Result<PaymentService<Forwarder>, ConfigError> {
        let Layered { route, settle, max_held, ticket: (uses, secs), description, mime, discovery } = settings;
        let order = match settle {
            Settle::Before => SettlementOrder::SettleBefore,
            Settle::After => SettlementOrder::VerifyThenSettle,
        };
        let mut builder = PaymentLayer::builder()
            .facilitator(self.facilitator.clone())
            .tasks(self.tasks.clone())
            .settlement_order(order)
            .stream_upfront(true)
            .max_buffered_body(max_held.unwrap_or(MAX_HELD_BYTES))
            .ticket_uses(uses.unwrap_or(tollgate::DEFAULT_TICKET_USES))
            .ticket_secs(secs.unwrap_or(tollgate::DEFAULT_TICKET_SECS))
            .cache(PROOFS_REMEMBERED, PROOFS_KEPT, REFUSED_FOR)
            .description(description);
        if let Some(mime) = mime {
            builder = builder.mime_type(mime);
        }
        if let Some(base) = &self.file.public_url {
            // A pass opens the route, whichever of its paths it was bought on: every instance
            // behind the public URL names it alike.
            builder = builder.resource_base(base.clone()).pass_scope(format!("{base}#route={route}"));
        }
        if accept.iter().any(|a| a.pass_secs.is_some()) && self.file.public_url.is_none() {
            return Err(invalid(format!("{at}: pass_secs needs public_url, the origin its sign-ins are bound to")));
        }
        for (i, accept) in accept.iter().enumerate() {
            builder = builder.accept(price(accept, &format!("{at}, accept #{}", i + 1))?);
        }
        if accept.iter().any(|a| a.scheme.as_deref() == Some(tollgate::batch::SCHEME)) {
            builder = match (self.channels, &self.file.channels_file) {
                // One store for every route: a channel paying several routes is counted once.
                (Some(shared), _) => builder.channels(shared.store.clone()),
                (None, Some(path)) => builder.channels(
                    tollgate::batch::FileChannels::open(path)
                        .map_err(|e| invalid(format!("channels_file {}: {e}", path.display())))?,
                ),
                (None, None) => {
                    return Err(invalid(format!(
                        "{at}: a price from channels (batch-settlement) needs channels_file or channels_redis_env"
                    )));
                }
            };
        }
        if let Some((declared, path, methods)) = discovery
            && let Some((discovery, service)) =
                declaration(declared, path, methods).map_err(|why| invalid(format!("{at}: discovery: {why}")))?
        {
            builder = builder.discovery(discovery).service(service);
        }
        let layer = builder.build().map_err(|e| invalid(format!("{at}: {e}")))?;
        Ok(layer.layer(forwarder))
    }

    fn route(&self, definition: &RouteFile) -> Result<Route, ConfigError> {
        let at = format!("route {:?}", definition.name);
        let bad = |why: String| invalid(format!("{at}: {why}"));
        let name: Arc<str> = definition.name.as_str().into();
        let path: PathPattern = definition.path.parse().map_err(|e: crate::route::PatternError| bad(e.to_string()))?;
        let methods = definition
            .methods
            .iter()
            .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| bad(format!("method {m:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let host = definition.host.as_deref().map(HostPattern::parse).transpose().map_err(|e| bad(e.to_string()))?;
        let query = definition
            .query
            .iter()
            .map(|(k, v)| (k.clone(), if v == "*" { QueryValue::Any } else { QueryValue::Is(v.clone()) }))
            .collect();
        if let Some(rewrite) = &definition.rewrite {
            if !rewrite.starts_with('/') {
                return Err(bad("rewrite must start with /".into()));
            }
            let names = path.names();
            let mut rest = rewrite.as_str();
            while let Some(open) = rest.find('{') {
                let close = rest[open..].find('}').ok_or_else(|| bad("rewrite: unclosed {".into()))? + open;
                let used = rest[open + 1..close].trim_start_matches('*');
                if !names.contains(&used) {
                    return Err(bad(format!("rewrite uses {{{used}}}, which the path does not capture")));
                }
                rest = &rest[close + 1..];
            }
        }
        let upstream = match &definition.upstream {
            Some(url) => Upstream::parse(url).map_err(bad)?,
            None => self.upstream.clone(),
        };
        let action = if definition.free {
            if !definition.accept.is_empty() || definition.usage.is_some() {
                return Err(bad("a free route has no accept or usage".into()));
            }
            Action::Free(self.forwarder(&name, upstream, definition.rewrite.clone(), None))
        } else {
            if definition.accept.is_empty() {
                return Err(bad("no accept: give its prices, or free = true".into()));
            }
            let usage = self.usage(&at, definition)?;
            let forwarder = self.forwarder(&name, upstream, definition.rewrite.clone(), usage);
            let settings = Layered {
                route: &name,
                settle: definition.settle,
                max_held: definition.max_held_bytes,
                ticket: (definition.ticket_uses, definition.ticket_secs),
                description: &definition.description,
                mime: definition.mime_type.as_deref(),
                discovery: Some((definition.discovery.as_ref(), definition.path.as_str(), &definition.methods[..])),
            };
            Action::Paid(self.paid(&at, &definition.accept, settings, forwarder)?)
        };
        let metrics = crate::telemetry::RouteMetrics::new(&name);
        Ok(Route { name, path, methods, host, query, action, metrics, definition: definition.clone() })
    }

    /// A metered route's usage reading (its metered prices must share their decimals).
    fn usage(&self, at: &str, definition: &RouteFile) -> Result<Option<Usage>, ConfigError> {
        // The prices themselves are checked when the route's layer is built.
        let mut decimals: Vec<u8> =
            definition.accept.iter().filter(|a| a.max.is_some()).map(|a| a.decimals.unwrap_or_default()).collect();
        decimals.sort_unstable();
        decimals.dedup();
        match (&definition.usage, decimals.as_slice()) {
            (None, []) => Ok(None),
            (None, _) => Err(invalid(format!("{at}: a metered price (max) needs [route.usage]"))),
            (Some(_), []) => Err(invalid(format!("{at}: [route.usage] is for metered prices (max)"))),
            (Some(usage), [decimals]) => {
                let name = |n: &Option<String>, what: &str| {
                    n.as_deref()
                        .map(HeaderName::try_from)
                        .transpose()
                        .map_err(|e| invalid(format!("{at}: usage {what}: {e}")))
                };
                let (header, trailer) = (name(&usage.header, "header")?, name(&usage.trailer, "trailer")?);
                if header.is_none() && trailer.is_none() {
                    return Err(invalid(format!("{at}: usage needs a header or a trailer")));
                }
                let unit = DecimalAmount::parse(&usage.unit_price)
                    .and_then(|d| d.to_atomic(*decimals))
                    .map_err(|e| invalid(format!("{at}: usage unit_price: {e}")))?;
                if unit.get() == 0 {
                    return Err(invalid(format!("{at}: usage unit_price must be more than zero")));
                }
                Ok(Some(Usage { header, trailer, unit }))
            }
            (Some(_), _) => Err(invalid(format!("{at}: metered prices of one route must have the same decimals"))),
        }
    }
}

impl Routes {
    /// How long a request body may send nothing before it fails.
    pub(crate) fn body_idle(&self) -> Duration {
        Duration::from_millis(self.shared.timeouts.body_idle_ms)
    }

    /// Builds every route of `file`, their settlements run on `tasks`; routes unchanged since
    /// `previous` keep
    /// their layer (and the proofs it remembers).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the route and the value refused.
    pub fn build(
        file: &ProxyFile,
        tasks: &tollgate::TaskTracker,
        previous: Option<&Self>,
    ) -> Result<Self, ConfigError> {
        let f = &file.facilitator;
        let key = secret(f.api_key_env.as_deref(), f.api_key_file.as_deref(), "facilitator.api_key")?;
        let facilitator = match &key {
            Some(key) => FacilitatorClient::new(&file.facilitator.url, key),
            None => FacilitatorClient::x402(&file.facilitator.url),
        };
        let identity = file
            .identity
            .as_ref()
            .map(|i| -> Result<Identity, ConfigError> {
                let shared = secret(i.secret_env.as_deref(), i.secret_file.as_deref(), "identity.secret")?
                    .ok_or_else(|| invalid("[identity] needs secret_env or secret_file"))?;
                Identity::new(shared, i.prefix.clone())
                    .map_err(|_| invalid(format!("identity.prefix {:?} is not a header name", i.prefix)))
            })
            .transpose()?;
        if let Some(url) = &file.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(format!("public_url {url:?} must be an http(s) URL")));
        }
        let upstream = Upstream::parse(&file.upstream).map_err(invalid)?;
        let channels = shared_channels(file, previous)?;
        let shared = Shared {
            file,
            tasks,
            facilitator,
            identity: identity.clone(),
            upstream: upstream.clone(),
            channels: channels.as_ref(),
        };
        // What the layers depend on, beside each route's own definition.
        let shared_part = ProxyFile { routes: Vec::new(), unmatched: file.unmatched.clone(), ..file.clone() };
        let reusable = previous.filter(|p| p.shared == shared_part);
        let mut names = std::collections::HashSet::new();
        let mut routes = Vec::with_capacity(file.routes.len());
        for definition in &file.routes {
            if !names.insert(definition.name.as_str()) {
                return Err(invalid(format!("two routes are named {:?}", definition.name)));
            }
            let kept = reusable.and_then(|p| p.routes.iter().find(|r| &r.definition == definition));
            routes.push(match kept {
                Some(route) => route.clone(),
                None => shared.route(definition)?,
            });
        }
        let unmatched = shared.unmatched(file, reusable)?;
        let mut upstreams: Vec<Upstream> = std::iter::once(upstream)
            .chain(file.routes.iter().filter_map(|r| r.upstream.as_deref()).filter_map(|u| Upstream::parse(u).ok()))
            .collect();
        upstreams.dedup();
        let storefront = file.well_known.then(Storefront::new);
        for (i, route) in routes.iter().enumerate() {
            let (Some(storefront), Action::Paid(service)) = (&storefront, &route.action) else { continue };
            let method = route.methods.first().cloned().unwrap_or(Method::GET);
            if !listable(route, &routes[..i], &method) {
                continue;
            }
            storefront
                .list_with_method(method, &route.definition.path, &service.layer())
                .map_err(|e| invalid(format!("route {:?}: {e}", route.definition.name)))?;
        }
        Ok(Self {
            routes,
            unmatched,
            trust_forwarded: file.trust_forwarded,
            identity,
            facilitator: (file.facilitator.url.trim_end_matches('/').to_owned(), key),
            upstreams,
            shared: shared_part,
            channels,
            storefront,
        })
    }
}

impl Routes {
    /// The channels kept in Redis, if any (for readiness).
    pub(crate) fn channels(&self) -> Option<&tollgate::batch::RedisChannels> {
        self.channels.as_ref().map(|c| &c.store)
    }
}

impl Shared<'_> {
    /// The route of requests no route matches.
    fn unmatched(&self, file: &ProxyFile, previous: Option<&Routes>) -> Result<Route, ConfigError> {
        if let Some(kept) = previous.map(|p| p.unmatched.clone()) {
            return Ok(kept);
        }
        let name: Arc<str> = "(unmatched)".into();
        let u = &file.unmatched;
        if u.action != UnmatchedAction::Charge && !u.accept.is_empty() {
            return Err(invalid("unmatched.accept is for action = \"charge\""));
        }
        let forwarder = || self.forwarder(&name, self.upstream.clone(), None, None);
        let action = match u.action {
            UnmatchedAction::NotFound => Action::NotFound,
            UnmatchedAction::Pass => Action::Free(forwarder()),
            UnmatchedAction::Charge => {
                if u.accept.is_empty() {
                    return Err(invalid("unmatched: action = \"charge\" needs [[unmatched.accept]]"));
                }
                if u.accept.iter().any(|a| a.max.is_some()) {
                    return Err(invalid("unmatched: metered prices (max) need a route with [route.usage]"));
                }
                Action::Paid(self.paid(
                    "unmatched",
                    &u.accept,
                    Layered {
                        route: &name,
                        settle: Settle::Before,
                        max_held: None,
                        ticket: (None, None),
                        description: &u.description,
                        mime: None,
                        discovery: None,
                    },
                    forwarder(),
                )?)
            }
        };
        let definition = RouteFile {
            name: name.to_string(),
            path: "/{*path}".into(),
            methods: Vec::new(),
            host: None,
            query: BTreeMap::new(),
            free: false,
            accept: Vec::new(),
            settle: Settle::Before,
            max_held_bytes: None,
            ticket_uses: None,
            ticket_secs: None,
            usage: None,
            description: String::new(),
            mime_type: None,
            upstream: None,
            rewrite: None,
            discovery: None,
        };
        let path = "/{*path}".parse().map_err(|e: crate::route::PatternError| invalid(e.to_string()))?;
        let metrics = crate::telemetry::RouteMetrics::new(&name);
        Ok(Route { name, path, methods: Vec::new(), host: None, query: BTreeMap::new(), action, metrics, definition })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file selling `/quote` from channels, with `store` at its top.
    fn file(store: &str) -> ProxyFile {
        ProxyFile::parse(&format!(
            r#"listen = "127.0.0.1:8090"
upstream = "http://127.0.0.1:9000"
{store}

[facilitator]
url = "http://127.0.0.1:8402"

[[route]]
name = "quote"
path = "/quote"
[[route.accept]]
scheme = "batch-settlement"
asset = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
amount = "0.0001"
decimals = 6
pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
network = "eip155:84532"
extra = {{ name = "USDC", version = "2" }}
"#
        ))
        .unwrap()
    }

    fn refusal(store: &str) -> String {
        match Routes::build(&file(store), &tollgate::TaskTracker::new(), None) {
            Err(ConfigError::Invalid(why)) => why,
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("{store:?} was taken"),
        }
    }

    #[test]
    fn a_price_from_channels_needs_one_store_named_in_full() {
        assert!(refusal("").contains("needs channels_file or channels_redis_env"), "{}", refusal(""));
        let unset = "channels_redis_env = \"TOLLGATE_PROXY_TEST_UNSET_VARIABLE\"";
        assert!(refusal(unset).contains("TOLLGATE_PROXY_TEST_UNSET_VARIABLE is not set"), "{}", refusal(unset));
        // PATH is set in any test run; its value is no Redis URL, but the pair is refused first.
        let both = "channels_file = \"channels.jsonl\"\nchannels_redis_env = \"PATH\"";
        assert!(refusal(both).contains("not both"), "{}", refusal(both));
        let prefix_alone = "channels_redis_prefix = \"shop\"";
        assert!(refusal(prefix_alone).contains("is for channels_redis_env"), "{}", refusal(prefix_alone));
        assert!(refusal("channels_redis_env = \"PATH\"").contains("channels_redis_env:"));
    }

    #[test]
    fn routes_share_one_redis_store_across_a_reload() {
        // The URL is only parsed here: nothing connects until a channel is used.
        let name = "TOLLGATE_TEST_REDIS_URL";
        if std::env::var(name).is_err() {
            eprintln!("SKIPPED routes_share_one_redis_store_across_a_reload: {name} is not set");
            return;
        }
        let build = |prefix: &str, previous: Option<&Routes>| {
            let store = format!("channels_redis_env = \"{name}\"\nchannels_redis_prefix = \"{prefix}\"");
            Routes::build(&file(&store), &tollgate::TaskTracker::new(), previous).unwrap()
        };
        let key = |r: &Routes| tollgate::batch::ChannelStore::key(r.channels().unwrap());
        let first = build("shop", None);
        assert_eq!(key(&first), key(&build("shop", Some(&first))), "one store kept across the reload");
        assert_ne!(key(&first), key(&build("other", Some(&first))), "another prefix, another store");
        assert_ne!(key(&first), key(&build("shop", None)), "another process's store");
    }

    /// A file with one SOL route at `path` (methods `methods`), and `discovery` in it.
    fn declared(path: &str, methods: &str, discovery: &str) -> Result<Routes, ConfigError> {
        let file = ProxyFile::parse(&format!(
            r#"listen = "127.0.0.1:8090"
upstream = "http://127.0.0.1:9000"

[facilitator]
url = "http://127.0.0.1:8402"

[[route]]
name = "weather"
path = "{path}"
methods = {methods}
{discovery}
[[route.accept]]
asset = "SOL"
amount = "0.001"
pay_to = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
network = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"
"#
        ))?;
        Routes::build(&file, &tollgate::TaskTracker::new(), None)
    }

    #[tokio::test]
    async fn a_route_declares_what_its_discovery_table_says_and_is_listed_by_its_template() {
        let routes = declared(
            "/weather/{city}",
            r#"["GET"]"#,
            r#"discovery = { query_example = { units = "metric" }, service_name = "Weather", tags = ["weather"] }"#,
        )
        .unwrap();
        let manifest = routes.storefront.as_ref().unwrap().manifest("https://api.example").await;
        let [item] = manifest.items.as_slice() else { panic!("{manifest:?}") };
        assert_eq!(item.resource.url, "https://api.example/weather/:city");
        assert_eq!(item.input["method"], "GET");
        assert_eq!(item.input["queryParams"], serde_json::json!({"units": "metric"}));
        assert_eq!(item.input["routeTemplate"], "/weather/:city");
        assert_eq!(item.resource.service.service_name.as_deref(), Some("Weather"));
        assert_eq!(item.accepts.len(), 1);

        // A body method declared without a body, a bad tag, an outside reference: refused.
        for (methods, discovery, says) in [
            (r#"["POST"]"#, "discovery = { output_example = { ok = true } }", "body method"),
            (r#"["GET"]"#, r#"discovery = { tags = ["a", "a"] }"#, "tags"),
            (r#"["GET"]"#, r#"discovery = { input_schema = { "$ref" = "https://evil.example/s.json" } }"#, "discovery"),
            (r#"["GET"]"#, r#"discovery = { body_type = "xml" }"#, "body_type"),
            (r#"["GET"]"#, r#"discovery = { icon_url = "http://127.0.0.1/i.png" }"#, "icon"),
        ] {
            match declared("/weather", methods, discovery) {
                Err(ConfigError::Invalid(why)) => assert!(why.contains(says), "{discovery}: {why}"),
                Err(other) => panic!("{other}"),
                Ok(_) => panic!("{discovery} was taken"),
            }
        }
        match declared("/weather", r#"["POST"]"#, r#"discovery = { method = "GET" }"#) {
            Err(ConfigError::Invalid(why)) => assert!(why.contains("not one of the route's methods"), "{why}"),
            other => panic!("a GET declared on a POST route: {:?}", other.err()),
        }
        // No table: a POST route is listed with its method alone; `well_known = false` lists nothing.
        let routes = declared("/upload", r#"["POST"]"#, "").unwrap();
        let manifest = routes.storefront.as_ref().unwrap().manifest("http://h").await;
        assert_eq!(serde_json::Value::Object(manifest.items[0].input.clone()), serde_json::json!({"method": "POST"}));
        let mut file = ProxyFile::parse("listen = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\nwell_known = false\n[facilitator]\nurl = \"http://127.0.0.1:3\"\n").unwrap();
        file.routes.clear();
        assert!(Routes::build(&file, &tollgate::TaskTracker::new(), None).unwrap().storefront.is_none());
    }

    /// The manifest lists what a request to each URL gets: a paid route behind a free one on the
    /// same path, the second of two paid routes on one path and a route bound to one host are
    /// not listed.
    #[tokio::test]
    async fn the_manifest_leaves_out_routes_no_request_reaches_as_listed() {
        let accept = |amount: &str| {
            format!(
                "[[route.accept]]\nasset = \"SOL\"\namount = \"{amount}\"\npay_to = \"9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin\"\nnetwork = \"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1\"\n"
            )
        };
        let file = ProxyFile::parse(&format!(
            r#"listen = "127.0.0.1:8090"
upstream = "http://127.0.0.1:9000"
[facilitator]
url = "http://127.0.0.1:8402"

[[route]]
name = "cheap-free"
path = "/cheap"
free = true

[[route]]
name = "cheap-paid"
path = "/cheap"
{}
[[route]]
name = "dup-first"
path = "/dup"
{}
[[route]]
name = "dup-second"
path = "/dup"
{}
[[route]]
name = "hosted"
path = "/hb"
host = "api.shop.example"
{}
[[route]]
name = "posted"
path = "/dup"
methods = ["POST"]
discovery = {{ body_type = "text", body_example = "hi" }}
{}"#,
            accept("0.5"),
            accept("0.001"),
            accept("0.9"),
            accept("0.002"),
            accept("0.003"),
        ))
        .unwrap();
        let routes = Routes::build(&file, &tollgate::TaskTracker::new(), None).unwrap();
        let manifest = routes.storefront.as_ref().unwrap().manifest("http://h").await;
        let listed: Vec<(String, String)> =
            manifest.items.iter().map(|item| (item.resource.url.clone(), item.accepts[0].amount.to_string())).collect();
        // `posted` is on /dup too, but only for POST, which `dup-first` (any method) takes first.
        assert_eq!(listed, [("http://h/dup".to_owned(), "1000000".to_owned())]);
    }
}
