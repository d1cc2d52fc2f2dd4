//! [`PaymentLayer`] and its builder.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::cache::ProofCache;
use crate::config::{Config, ResourceUrl};
pub use crate::config::{PriceFn, SettlementOrder};
use crate::facilitator::Facilitator;
use crate::price::{Price, Quote};
use crate::service::PaymentService;

/// The most memory the decoded payment headers of a layer take (headers of strangers included).
const DECODED_BYTES: u64 = 8 * 1024 * 1024;

/// Why a layer cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No facilitator was given.
    #[error("a facilitator is required (PaymentLayerBuilder::facilitator)")]
    NoFacilitator,
    /// Neither prices nor a pricing function was given.
    #[error("at least one price (accept) or a pricing function is required")]
    NoPrice,
    /// A price has no recipient.
    #[error("price {0} has no pay_to address")]
    NoRecipient(usize),
    /// A price's recipient is of another chain family than its asset.
    #[error("price {0} pays a {1} address for an asset of another chain")]
    WrongRecipient(usize, tollgate_protocol::ChainFamily),
    /// A price names a network of another family than its asset.
    #[error("price {0} names a network of another chain family")]
    WrongNetwork(usize),
    /// A price names a payment flow its scheme is not paid in (`upto` is paid by
    /// authorization only; no scheme here has `escrow`).
    #[error("price {0}: {1}")]
    PaymentFlow(usize, String),
    /// A bound is zero.
    #[error("{0} must be more than zero")]
    Zero(&'static str),
    /// The resource URL is not an absolute `http(s)://` URL (or `mcp://` for a paid MCP tool).
    #[error("the resource URL must be an absolute http(s) URL (or mcp:// for a paid MCP tool): {0}")]
    ResourceUrl(String),
    /// Two settings that cannot go together.
    #[error("{0}")]
    Incompatible(&'static str),
    /// The sign-in origin is not `http(s)://host[:port]`.
    #[error("sign_in_origin: {0}")]
    Origin(String),
    /// Layers sharing a channel store name different claim policies.
    #[error("claim_policy: {0}")]
    ClaimPolicy(String),
    /// The route's `bazaar` declaration breaks a rule of the extension.
    #[error("discovery: {0}")]
    Discovery(#[from] crate::discovery::DeclarationError),
    /// Service metadata the `bazaar` rules would drop (a name or tag not printable ASCII of at
    /// most 32 characters, more than 5 tags or one twice, an icon not on a public http(s) host).
    #[error("service metadata: {0}")]
    Service(&'static str),
    /// The path given to [`PaymentLayerBuilder::listed`] is not one a route template can say.
    #[error(transparent)]
    Listing(#[from] crate::discovery::ListingError),
}

/// Makes the routes it wraps payable (see the crate docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct PaymentLayer {
    pub(crate) config: Arc<Config>,
}

impl PaymentLayer {
    /// Starts a builder.
    pub fn builder() -> PaymentLayerBuilder {
        PaymentLayerBuilder::default()
    }

    /// Where this layer's settlements that outlive their request run
    /// ([`PaymentLayerBuilder::tasks`]): at shutdown, close it and await it.
    pub fn tasks(&self) -> &TaskTracker {
        &self.config.tasks
    }
}

impl<S> Layer<S> for PaymentLayer {
    type Service = PaymentService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PaymentService::new(inner, self.config.clone())
    }
}

/// Builds a [`PaymentLayer`]; invalid settings fail at [`PaymentLayerBuilder::build`].
#[must_use]
pub struct PaymentLayerBuilder {
    facilitator: Option<Arc<dyn Facilitator>>,
    prices: Vec<Price>,
    pricing: Option<PriceFn>,
    description: String,
    mime_type: String,
    resource: ResourceUrl,
    order: SettlementOrder,
    max_timeout_seconds: u64,
    max_buffered_body: usize,
    retry_after_secs: u64,
    cache_capacity: u64,
    accepted_ttl: Duration,
    refused_ttl: Duration,
    extensions: serde_json::Map<String, serde_json::Value>,
    payment_identifier: Option<bool>,
    stream_upfront: bool,
    ticket_uses: u32,
    ticket_secs: u64,
    request_digest_limit: usize,
    pass_scope: Option<String>,
    sign_in_origin: Option<String>,
    tasks: Option<TaskTracker>,
    channels: Option<Arc<dyn crate::batch::ChannelStore>>,
    claim_policy: crate::batch::ClaimPolicy,
    discovery: Option<crate::discovery::Discovery>,
    service: crate::discovery::ServiceMetadata,
    listed: Option<(crate::discovery::Storefront, String)>,
}

/// What one payment buys by default: its answer, and one retry of it when it was lost.
pub const DEFAULT_TICKET_USES: u32 = 2;
/// How long after its first answer a payment serves a retry by default, in seconds.
pub const DEFAULT_TICKET_SECS: u64 = 60;
/// The largest request body read by default to tell a repeat of a paid request (1 MiB).
pub const DEFAULT_REQUEST_DIGEST_LIMIT: usize = 1024 * 1024;

impl Default for PaymentLayerBuilder {
    fn default() -> Self {
        Self {
            facilitator: None,
            prices: Vec::new(),
            pricing: None,
            description: String::new(),
            mime_type: "application/json".into(),
            resource: ResourceUrl::FromRequest { base: None },
            order: SettlementOrder::SettleBefore,
            max_timeout_seconds: 60,
            max_buffered_body: 16 * 1024 * 1024,
            retry_after_secs: 2,
            cache_capacity: 100_000,
            accepted_ttl: Duration::from_secs(600),
            refused_ttl: Duration::from_secs(10),
            extensions: serde_json::Map::new(),
            payment_identifier: None,
            stream_upfront: false,
            ticket_uses: DEFAULT_TICKET_USES,
            ticket_secs: DEFAULT_TICKET_SECS,
            request_digest_limit: DEFAULT_REQUEST_DIGEST_LIMIT,
            pass_scope: None,
            sign_in_origin: None,
            tasks: None,
            channels: None,
            claim_policy: crate::batch::ClaimPolicy::default(),
            discovery: None,
            service: crate::discovery::ServiceMetadata::default(),
            listed: None,
        }
    }
}

impl std::fmt::Debug for PaymentLayerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentLayerBuilder").field("prices", &self.prices).finish_non_exhaustive()
    }
}

impl PaymentLayerBuilder {
    /// The facilitator that verifies and settles (required): a [`crate::FacilitatorClient`] over
    /// HTTP, or any other [`Facilitator`] (such as `tollgate-facilitator`'s core in process).
    pub fn facilitator(mut self, facilitator: impl Facilitator + 'static) -> Self {
        self.facilitator = Some(Arc::new(facilitator));
        self
    }

    /// One accepted way to pay; call again for more.
    pub fn accept(mut self, price: Price) -> Self {
        self.prices.push(price);
        self
    }

    /// Prices per request, computed by an async function of the request head: a
    /// `Vec<Price>`, or a [`Quote`] that also names the resource paid for; `None` serves the
    /// request without payment. Replaces the prices given with [`Self::accept`].
    pub fn pricing<F, Fut, Q>(mut self, f: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Q>> + Send + 'static,
        Q: Into<Quote>,
    {
        let f = Arc::new(f);
        self.pricing = Some(Arc::new(move |parts| {
            let quote = f(parts);
            Box::pin(async move { quote.await.map(Into::into) })
        }));
        self
    }

    /// Declares an x402 v2 extension in the 402 answer (`extensions.<name>`), e.g. `bazaar`
    /// discovery info; buyers echo it in their payment, and the facilitator receives it.
    pub fn extension(mut self, name: impl Into<String>, info: serde_json::Value) -> Self {
        self.extensions.insert(name.into(), info);
        self
    }

    /// Declares the x402 `payment-identifier` extension: a buyer's idempotency key. A repeat of
    /// an id with the same proof gets the paid answer given before (the handler does not run
    /// again: a paid `POST` is not done twice); the same id with another proof, or for another
    /// resource or method, is answered 409 Conflict. With `required`, a payment without an id
    /// is refused with 400. Answers are kept `accepted_ttl` ([`Self::cache`]), each repeat
    /// counted as an answer of the payment ([`Self::ticket_uses`]).
    pub fn payment_identifier(mut self, required: bool) -> Self {
        use tollgate_protocol::x402::payment_identifier;
        self.extensions.insert(payment_identifier::KEY.into(), payment_identifier::declaration(required));
        self.payment_identifier = Some(required);
        self
    }

    /// Declares how to call the route and what it answers (x402 `bazaar`), for agents and
    /// facilitators' catalogs: put in every 402 as `extensions["bazaar"]`. Checked when the
    /// layer is built ([`BuildError::Discovery`]).
    pub fn discovery(mut self, discovery: crate::discovery::Discovery) -> Self {
        self.discovery = Some(discovery);
        self
    }

    /// Who sells the route: a service name, up to 5 topical tags and an icon URL, shown in the
    /// 402's `resource` and in catalogs. Checked when the layer is built
    /// ([`BuildError::Service`]).
    pub fn service(mut self, service: crate::discovery::ServiceMetadata) -> Self {
        self.service = service;
        self
    }

    /// What the buyer gets (shown in the 402).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// MIME type of the paid response (default `application/json`).
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = mime_type.into();
        self
    }

    /// Lists the route in `storefront`'s `/.well-known/x402.json` at `path`, the router's path
    /// (`/weather/{city}`; a parameter also `:city`). A path with parameters becomes the
    /// declaration's `routeTemplate` (`/weather/:city`) unless [`crate::discovery::Discovery`]
    /// names one, so that catalogs list the route once, not once per city.
    pub fn listed(mut self, storefront: &crate::discovery::Storefront, path: impl Into<String>) -> Self {
        self.listed = Some((storefront.clone(), path.into()));
        self
    }

    /// The resource URL in requirements, the same for every request. By default it is each
    /// request's own URL (scheme and host as the request or its proxy names them, path and
    /// query), and a proof serves only the resource it paid for.
    pub fn resource(mut self, url: impl Into<String>) -> Self {
        self.resource = ResourceUrl::Fixed(url.into());
        self
    }

    /// The base URL (scheme and authority, e.g. behind a proxy) that request paths and queries
    /// are appended to for the resource URL; without it the request's `Forwarded`,
    /// `X-Forwarded-Proto` / `X-Forwarded-Host` or `Host` headers name them.
    pub fn resource_base(mut self, base: impl Into<String>) -> Self {
        self.resource = ResourceUrl::FromRequest { base: Some(base.into().trim_end_matches('/').to_owned()) };
        self
    }

    /// When to settle (default [`SettlementOrder::SettleBefore`]).
    pub fn settlement_order(mut self, order: SettlementOrder) -> Self {
        self.order = order;
        self
    }

    /// How long a proof may take to settle (`maxTimeoutSeconds`, default 60).
    pub fn max_timeout_seconds(mut self, seconds: u64) -> Self {
        self.max_timeout_seconds = seconds;
        self
    }

    /// Seconds a buyer is told to wait before retrying a pending payment (default 2).
    pub fn retry_after_secs(mut self, seconds: u64) -> Self {
        self.retry_after_secs = seconds;
        self
    }

    /// Largest paid response held in memory (default 16 MiB); paid responses are buffered so
    /// concurrent requests with one new proof share one settlement.
    pub fn max_buffered_body(mut self, bytes: usize) -> Self {
        self.max_buffered_body = bytes;
        self
    }

    /// Streams the answers of prices settled before the handler (x402 `upfront`) instead of
    /// holding them in memory: large downloads and server-sent events pass through as the
    /// handler writes them, and [`Self::max_buffered_body`] does not bound them.
    ///
    /// Requests presenting one new proof at once then share its one settlement, and each is
    /// served by the handler once it is settled (as a retry of the proof is), instead of sharing
    /// one handler run. Answers settled after the handler (metered prices, `authorization`) are
    /// still held until settled: a settlement that fails must not have served them. Not with
    /// [`Self::payment_identifier`], whose repeats are answered from a held answer.
    pub fn stream_upfront(mut self, stream: bool) -> Self {
        self.stream_upfront = stream;
        self
    }

    /// What one payment buys: at most `uses` answers (the first included) to its request — the
    /// same resource, method and body — within [`Self::ticket_secs`] of its first answer.
    /// Default [`DEFAULT_TICKET_USES`] (2): the answer and one retry of a buyer whose answer was
    /// lost. Later repeats are answered 402 ("pay again"). Tollgate's facilitator counts them in
    /// its database, so every instance, process and restart of the seller shares one count; an
    /// answer that reached no buyer (the handler failed, or the buyer hung up before the first
    /// byte) is given back. With another x402 facilitator, which settles a proof once and
    /// refuses it afterwards, the layer that settled it counts alone.
    ///
    /// Selling access for a period to whoever paid is a pass, not more uses of one payment.
    pub fn ticket_uses(mut self, uses: u32) -> Self {
        self.ticket_uses = uses;
        self
    }

    /// How long after its first answer a payment serves a repeat of its request (default
    /// [`DEFAULT_TICKET_SECS`]: a retry of an answer that was lost comes soon).
    pub fn ticket_secs(mut self, seconds: u64) -> Self {
        self.ticket_secs = seconds;
        self
    }

    /// The largest request body (default [`DEFAULT_REQUEST_DIGEST_LIMIT`]) the layer reads, when
    /// its size is known, to tell a repeat of a paid request from another: a repeat is served
    /// only for the same method, resource and body. A larger or unsized body is passed on unread,
    /// and its payment serves that request once.
    pub fn request_digest_limit(mut self, bytes: usize) -> Self {
        self.request_digest_limit = bytes;
        self
    }

    /// What a pass sold by this layer ([`Price::pass`]) opens: one name for every route the
    /// layer guards (e.g. `"https://shop.example/api"`). By default each resource (its URL
    /// without the query) is a scope of its own.
    pub fn pass_scope(mut self, scope: impl Into<String>) -> Self {
        self.pass_scope = Some(scope.into());
        self
    }

    /// The seller's public origin (`https://host[:port]`) that a pass's sign-in messages are
    /// bound to (x402 `sign-in-with-x`: a message signed for another site is refused). By
    /// default the origin of [`Self::resource_base`] or of a fixed [`Self::resource`], never
    /// a request's `Host`.
    pub fn sign_in_origin(mut self, origin: impl Into<String>) -> Self {
        self.sign_in_origin = Some(origin.into());
        self
    }

    /// Where settlements that outlive their request run: a settlement after the handler
    /// served, one whose buyer hung up, the rest of a metered answer read for its usage. A
    /// server shutting down calls [`TaskTracker::close`] then awaits [`TaskTracker::wait`]
    /// (bounded by its drain time) so that the money that moved is recorded and what was served
    /// is settled; without it, stopping the runtime cancels them. Several layers may share one.
    /// Each layer has its own by default ([`PaymentLayer::tasks`]).
    pub fn tasks(mut self, tracker: TaskTracker) -> Self {
        self.tasks = Some(tracker);
        self
    }

    /// Where the payment channels of batch-settlement prices ([`Price::batch`]) are kept: what
    /// each has charged and the last voucher signed. A [`crate::batch::FileChannels`] journal
    /// keeps them across restarts (a charge is on disk before its answer is released); several
    /// instances of one seller share a store whose writes are compare-and-set. Layers of one
    /// process keeping channels in one store (clones of it, or one journal path) share them, so
    /// a channel paying several routes is counted once. By default they are kept in the
    /// process's memory, shared by every layer that names no store: a restart forgets what was
    /// charged and not claimed yet. A store's channels are claimed through the facilitator of
    /// the first layer that served one of them: layers paid through other facilitators keep
    /// theirs in another store.
    pub fn channels(mut self, store: impl crate::batch::ChannelStore + 'static) -> Self {
        self.channels = Some(Arc::new(store));
        self
    }

    /// When what channels have charged is claimed and swept ([`crate::batch::ClaimPolicy`]).
    pub fn claim_policy(mut self, policy: crate::batch::ClaimPolicy) -> Self {
        self.claim_policy = policy;
        self
    }

    /// Proof cache: at most `capacity` proofs; accepted ones kept `accepted_ttl` (default 10
    /// min), refused ones `refused_ttl` (default 10 s). What is remembered only saves work (a
    /// repeat is claimed without verifying the proof again, a refusal is not asked again): how
    /// many answers a payment serves is counted by the facilitator ([`Self::ticket_uses`]), so
    /// a small cache, or none kept across a restart, never adds any. `payment-identifier`
    /// answers are kept `accepted_ttl` too.
    pub fn cache(mut self, capacity: u64, accepted_ttl: Duration, refused_ttl: Duration) -> Self {
        self.cache_capacity = capacity;
        self.accepted_ttl = accepted_ttl;
        self.refused_ttl = refused_ttl;
        self
    }

    /// The origin sign-ins are bound to: the one given, else the resource's when it is a web URL.
    fn origin_signed_for(&self) -> Result<Option<tollgate_protocol::siwx::Origin>, BuildError> {
        use tollgate_protocol::siwx::Origin;
        match (&self.sign_in_origin, &self.resource) {
            (Some(given), _) => Origin::parse(given).map(Some).map_err(BuildError::Origin),
            (None, ResourceUrl::Fixed(url) | ResourceUrl::FromRequest { base: Some(url) }) => Ok(Origin::of_url(url)),
            (None, ResourceUrl::FromRequest { base: None }) => Ok(None),
        }
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    /// [`BuildError`] for missing or inconsistent settings.
    pub fn build(mut self) -> Result<PaymentLayer, BuildError> {
        let sign_in_origin = self.origin_signed_for()?;
        let facilitator = self.facilitator.ok_or(BuildError::NoFacilitator)?;
        if self.ticket_uses == 0 {
            return Err(BuildError::Zero("ticket_uses"));
        }
        if self.ticket_uses > tollgate_protocol::ticket::MAX_USES
            || self.ticket_secs > tollgate_protocol::ticket::MAX_SECONDS
        {
            return Err(BuildError::Incompatible(
                "ticket_uses is at most 10,000 and ticket_secs at most 30 days (sell longer access as a pass)",
            ));
        }
        if self.stream_upfront && self.payment_identifier.is_some() {
            return Err(BuildError::Incompatible(
                "stream_upfront cannot go with payment_identifier (its repeats are answered from a held answer)",
            ));
        }
        if self.prices.is_empty() && self.pricing.is_none() {
            return Err(BuildError::NoPrice);
        }
        for (i, price) in self.prices.iter().enumerate() {
            match price.pass_seconds() {
                Some(seconds) if !(1..=tollgate_protocol::ticket::MAX_PASS_SECONDS).contains(&seconds) => {
                    return Err(BuildError::PaymentFlow(i, "a pass lasts 1 second to a year".into()));
                }
                Some(_) if sign_in_origin.is_none() => {
                    return Err(BuildError::Incompatible(
                        "a pass needs the seller's public origin its sign-ins are bound to: sign_in_origin (or resource_base)",
                    ));
                }
                _ => {}
            }
        }
        for (i, price) in self.prices.iter().enumerate() {
            let pay_to = price.pay_to.ok_or(BuildError::NoRecipient(i))?;
            if pay_to.family() != price.family {
                return Err(BuildError::WrongRecipient(i, pay_to.family()));
            }
            if price.network.as_ref().is_some_and(|n| n.family() != price.family) {
                return Err(BuildError::WrongNetwork(i));
            }
            crate::offers::flow(price, self.order).map_err(|why| BuildError::PaymentFlow(i, why))?;
        }
        if let ResourceUrl::Fixed(url) | ResourceUrl::FromRequest { base: Some(url) } = &self.resource
            && !(url.starts_with("http://") || url.starts_with("https://") || url.starts_with("mcp://"))
        {
            return Err(BuildError::ResourceUrl(url.clone()));
        }
        for (value, name) in [
            (self.max_timeout_seconds, "max_timeout_seconds"),
            (self.cache_capacity, "cache capacity"),
            (u64::try_from(self.max_buffered_body).unwrap_or(u64::MAX), "max_buffered_body"),
        ] {
            if value == 0 {
                return Err(BuildError::Zero(name));
            }
        }
        let sells_batch = self.pricing.is_some() || self.prices.iter().any(|p| crate::batch::is_batch(p.scheme));
        if self.claim_policy.every.is_zero() || self.claim_policy.state_ttl.is_zero() {
            return Err(BuildError::Zero("claim policy period"));
        }
        for (i, price) in self.prices.iter().enumerate().filter(|(_, p)| crate::batch::is_batch(p.scheme)) {
            let delay = price.delay_secs().unwrap_or_default();
            if !(tollgate_protocol::x402::batch::MIN_WITHDRAW_DELAY
                ..=tollgate_protocol::x402::batch::MAX_WITHDRAW_DELAY)
                .contains(&delay)
            {
                return Err(BuildError::PaymentFlow(
                    i,
                    format!("a withdrawal delay is 900 s to 30 days, not {delay} s"),
                ));
            }
            if self.claim_policy.every.as_secs().saturating_mul(3) > delay {
                return Err(BuildError::PaymentFlow(
                    i,
                    format!(
                        "channels are claimed every {} s: at most a third of the withdrawal delay ({delay} s)",
                        self.claim_policy.every.as_secs()
                    ),
                ));
            }
        }
        let channels = if sells_batch {
            Some(crate::batch::Channels::shared(self.channels, self.claim_policy).map_err(BuildError::ClaimPolicy)?)
        } else {
            None
        };
        let listed = match self.listed.take() {
            Some((storefront, path)) => Some((storefront, crate::discovery::route_template(&path)?)),
            None => None,
        };
        if let Some(discovery) = &self.discovery {
            let mut declaration = discovery.declaration()?;
            if let Some((_, template)) = listed.as_ref().filter(|(_, t)| t.contains(':'))
                && declaration.route_template.is_none()
            {
                declaration.route_template = Some(template.clone());
            }
            self.extensions.insert(
                tollgate_protocol::x402::bazaar::EXTENSION.to_owned(),
                crate::discovery::extension(&declaration),
            );
        }
        check_service(&self.service)?;
        let cache = Arc::new(ProofCache::new(self.cache_capacity, self.accepted_ttl, self.refused_ttl));
        let fixed = self.pricing.is_none() && !self.prices.iter().any(crate::offers::needs_supported);
        let static_offers = fixed.then(|| {
            Arc::new(
                self.prices
                    .iter()
                    .filter_map(|p| {
                        let network = p.network.clone()?;
                        let flow = crate::offers::flow(p, self.order).ok()?;
                        let extra = crate::offers::extra(p, flow, &network, &[])?;
                        p.offer(network, extra, self.max_timeout_seconds)
                    })
                    .collect(),
            )
        });
        let layer = PaymentLayer {
            config: Arc::new(Config {
                facilitator,
                prices: self.prices,
                pricing: self.pricing,
                description: self.description,
                mime_type: self.mime_type,
                service: self.service,
                resource: self.resource,
                order: self.order,
                max_timeout_seconds: self.max_timeout_seconds,
                max_buffered_body: self.max_buffered_body,
                retry_after_secs: self.retry_after_secs,
                answers: crate::answer::Terms { uses: self.ticket_uses, window: Duration::from_secs(self.ticket_secs) },
                request_digest_limit: self.request_digest_limit,
                pass_scope: self.pass_scope,
                sign_in_origin,
                cache,
                static_offers,
                challenges: moka::sync::Cache::new(1_000),
                decoded: moka::sync::Cache::builder()
                    .weigher(|header: &String, _| u32::try_from(header.len().saturating_mul(3)).unwrap_or(u32::MAX))
                    .max_capacity(DECODED_BYTES)
                    .time_to_live(self.accepted_ttl)
                    .build(),
                extensions: self.extensions,
                payment_identifier: self.payment_identifier,
                stream_upfront: self.stream_upfront,
                identifiers: crate::identifiers::Identifiers::new(self.accepted_ttl),
                tasks: self.tasks.unwrap_or_default(),
                channels,
            }),
        };
        if let Some((storefront, template)) = listed {
            storefront.add(template, None, layer.config.clone());
        }
        Ok(layer)
    }
}

/// Service metadata as the `bazaar` rules keep it, or which rule it breaks.
fn check_service(service: &crate::discovery::ServiceMetadata) -> Result<(), BuildError> {
    use tollgate_protocol::x402::bazaar::{MAX_TAGS, is_valid_icon_url, is_valid_service_name, sanitize_tags};
    if service.service_name.as_deref().is_some_and(|name| !is_valid_service_name(name)) {
        return Err(BuildError::Service("the service name is 1 to 32 printable ASCII characters"));
    }
    if service.tags.len() > MAX_TAGS || sanitize_tags(service.tags.clone()) != service.tags {
        return Err(BuildError::Service("at most 5 tags, each 1 to 32 printable ASCII characters, none twice"));
    }
    if service.icon_url.as_deref().is_some_and(|url| !is_valid_icon_url(url)) {
        return Err(BuildError::Service("the icon URL is an absolute http(s) URL on a public host name"));
    }
    Ok(())
}
