//! `/.well-known/x402.json`: an origin's own list of what it sells (x402
//! `specs/extensions/well-known-discovery.md`), generated from the same layers that make its 402s
//! so that it cannot drift from them.
//!
//! A [`Storefront`] is given each paid route's layer and path ([`crate::PaymentLayerBuilder::listed`]
//! or [`Storefront::list`]); its [`StorefrontLayer`], around the whole router, answers
//! `GET /.well-known/x402.json`. The items are resolved once — each route's offers made as for a
//! request without payment, its declaration lifted — and kept until another route is listed;
//! only the origin is filled in per request (where the layers do not name theirs), so the
//! manifest is right under every host name the server answers to. A route whose offers cannot be
//! made within 5 s (its facilitator unreachable) is left out, and tried again 10 s later.

use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL, CONTENT_TYPE, VARY};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use serde_json::{Map, Value};
use tollgate_protocol::x402::bazaar::{
    Declaration, Input, Manifest, ManifestItem, ManifestResource, WELL_KNOWN_PATH, is_valid_route_template,
};
use tower::{Layer, Service};

use crate::body::{BoxError, PaymentBody};
use crate::config::{Config, ResourceUrl};
use crate::future::ResponseFuture;

/// How long a fetched manifest may be reused by the buyer (it is advisory: the live 402 decides).
const MAX_AGE: &str = "public, max-age=60";

/// The routes an origin lists in its `/.well-known/x402.json`. Cheap to clone; clones share
/// their routes.
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate::discovery::{Discovery, Storefront};
/// use tollgate::protocol::Address;
/// use tollgate::{FacilitatorClient, PaymentLayer, Price};
///
/// # fn app(seller: Address) -> Result<Router, Box<dyn std::error::Error>> {
/// let storefront = Storefront::new();
/// let weather = PaymentLayer::builder()
///     .facilitator(FacilitatorClient::new("http://127.0.0.1:8402", "key"))
///     .accept(Price::native_sol("0.001")?.pay_to(seller))
///     .discovery(Discovery::http().query_example(serde_json::json!({"day": "today"})))
///     .listed(&storefront, "/weather/{city}")
///     .build()?;
/// Ok(Router::new()
///     .route("/weather/{city}", get(|| async { "sunny" }).route_layer(weather))
///     .layer(storefront.layer()))
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Storefront {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    listings: RwLock<Vec<Listing>>,
    /// The last resolution: kept while the listings are the same, for good once every route
    /// resolved, else for [`RETRY`].
    resolved: RwLock<Option<Resolved>>,
    /// One resolution at a time: a request arriving meanwhile waits for it, then takes it.
    resolving: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// A listed route: its path (the router's spelling) as a `routeTemplate`, and its layer's settings.
#[derive(Clone)]
struct Listing {
    template: String,
    /// The method a route that declares none is called with (default `GET`).
    method: Option<Method>,
    config: Arc<Config>,
}

#[derive(Clone)]
struct Resolved {
    listings: usize,
    at: i64,
    items: Vec<Pending>,
    /// Every route resolved.
    complete: bool,
    made: tokio::time::Instant,
}

/// How long a resolution some route was missing from is served before another is tried.
const RETRY: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest a route's offers are waited for (its facilitator's `/supported`).
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An item but for its origin.
#[derive(Clone)]
struct Pending {
    /// Where the resource is: a whole URL (fixed or named by the pricing function), or a path on
    /// the origin the manifest is asked of, or on the layer's configured base.
    at: Location,
    item: ManifestItem,
}

#[derive(Clone)]
enum Location {
    Url(String),
    Base(String, String),
    Origin(String),
}

/// Why a route cannot be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "listed path {0:?}: a path starting with `/`, `{{name}}` or `:name` for a parameter (letters, digits and `_/.-~%` otherwise)"
)]
pub struct ListingError(pub String);

/// The `routeTemplate` of a router path: `{name}` and `{*name}` (axum, the proxy) become
/// `:name`, which is how x402 writes a parameter.
///
/// # Errors
/// The path is not one a route template can say.
pub fn route_template(path: &str) -> Result<String, ListingError> {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').ok_or_else(|| ListingError(path.to_owned()))? + open;
        let name = rest[open + 1..close].trim_start_matches('*');
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ListingError(path.to_owned()));
        }
        out.push(':');
        out.push_str(name);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    if out == "/" || is_valid_route_template(&out) { Ok(out) } else { Err(ListingError(path.to_owned())) }
}

impl Storefront {
    /// An empty storefront.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Lists a built layer's route at `path` (the router's path, `{name}` for a parameter).
    /// [`crate::PaymentLayerBuilder::listed`] does this when the layer is built, and also puts
    /// the route's template in its 402s' declaration.
    ///
    /// # Errors
    /// The path is not one a route template can say.
    pub fn list(&self, path: &str, layer: &crate::PaymentLayer) -> Result<(), ListingError> {
        let template = route_template(path)?;
        self.add(template, None, layer.config.clone());
        Ok(())
    }

    /// As [`Self::list`], for a route called with `method` (`POST`, say) that declares nothing:
    /// a declared route's method is its declaration's.
    ///
    /// # Errors
    /// The path is not one a route template can say.
    pub fn list_with_method(
        &self,
        method: Method,
        path: &str,
        layer: &crate::PaymentLayer,
    ) -> Result<(), ListingError> {
        let template = route_template(path)?;
        self.add(template, Some(method), layer.config.clone());
        Ok(())
    }

    /// Lists a layer whose resource is fixed ([`crate::PaymentLayerBuilder::resource`]; an MCP
    /// tool's `mcp://tool/<name>`): its item is at that URL, whatever the origin asked.
    pub fn list_fixed(&self, layer: &crate::PaymentLayer) {
        self.add("/".to_owned(), None, layer.config.clone());
    }

    pub(crate) fn add(&self, template: String, method: Option<Method>, config: Arc<Config>) {
        let mut listings = self.shared.listings.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        listings.push(Listing { template, method, config });
    }

    /// The layer answering `GET /.well-known/x402.json` (and `HEAD`) with this storefront's
    /// manifest, passing every other request on. Put it around the whole router.
    #[must_use]
    pub fn layer(&self) -> StorefrontLayer {
        StorefrontLayer { storefront: self.clone() }
    }

    /// The manifest as asked of `origin` (`https://api.example.com`): each listed route's
    /// offers, declaration and metadata. Routes whose offers cannot be made now are left out
    /// (and tried again at the next call).
    pub async fn manifest(&self, origin: &str) -> Manifest {
        let resolved = self.resolved().await;
        let origin = origin.trim_end_matches('/');
        let items = resolved
            .items
            .into_iter()
            .map(|Pending { at, mut item }| {
                item.resource.url = match at {
                    Location::Url(url) => url,
                    Location::Base(base, path) => format!("{base}{path}"),
                    Location::Origin(path) => format!("{origin}{path}"),
                };
                item
            })
            .collect();
        Manifest { x402_version: 2, last_updated: resolved.at, items }
    }

    /// Whether `request` asks for the manifest: `GET` or `HEAD` of `/.well-known/x402.json`.
    pub fn asked<B>(request: &Request<B>) -> bool {
        request.uri().path() == WELL_KNOWN_PATH && (request.method() == Method::GET || request.method() == Method::HEAD)
    }

    /// The manifest's answer for a request that [`Self::asked`] for it, from the origin its
    /// URL or headers name (`Forwarded`, `X-Forwarded-Proto` / `X-Forwarded-Host`, `Host`):
    /// 200, JSON, public for a minute, readable by any page.
    pub fn respond<B>(&self, request: &Request<B>) -> impl Future<Output = Response<PaymentBody>> + Send + 'static {
        let origin = crate::offers::request_base(request.headers(), request.uri());
        let storefront = self.clone();
        async move { storefront.answer(&origin).await }
    }

    async fn answer(&self, origin: &str) -> Response<PaymentBody> {
        let manifest = self.manifest(origin).await;
        let body = serde_json::to_vec(&manifest).unwrap_or_default();
        let mut response = Response::new(PaymentBody::full(Bytes::from(body)));
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static(MAX_AGE));
        // Its URLs follow the origin a request names (unless the layers name theirs): a shared
        // cache keeps one answer per origin.
        headers.insert(VARY, HeaderValue::from_static("host, forwarded, x-forwarded-host, x-forwarded-proto"));
        // Any page may read it: it is public, and says nothing a 402 does not.
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        response
    }

    /// The items of every listed route: kept while the routes are the same once all resolved,
    /// else for [`RETRY`]. Routes resolve at once, each within [`RESOLVE_TIMEOUT`]; one
    /// resolution runs at a time, and requests meanwhile wait for it rather than start theirs.
    async fn resolved(&self) -> Resolved {
        let listings = self.shared.listings.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let fresh = |kept: &Option<Resolved>| {
            kept.as_ref().filter(|r| r.listings == listings.len() && (r.complete || r.made.elapsed() < RETRY)).cloned()
        };
        let current = || self.shared.resolved.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(resolved) = fresh(&current()) {
            return resolved;
        }
        let _one = self.shared.resolving.lock().await;
        if let Some(resolved) = fresh(&current()) {
            return resolved;
        }
        let resolutions = futures_util::future::join_all(
            listings.iter().map(|listing| tokio::time::timeout(RESOLVE_TIMEOUT, resolve(listing))),
        )
        .await;
        let mut items = Vec::with_capacity(listings.len());
        let mut complete = true;
        for resolution in resolutions {
            match resolution {
                Ok(Resolution::Item(item)) => items.push(*item),
                Ok(Resolution::Free) => {}
                Ok(Resolution::Unavailable) | Err(_) => complete = false,
            }
        }
        let resolved = Resolved {
            listings: listings.len(),
            at: chrono::Utc::now().timestamp(),
            items,
            complete,
            made: tokio::time::Instant::now(),
        };
        *self.shared.resolved.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(resolved.clone());
        resolved
    }
}

enum Resolution {
    Item(Box<Pending>),
    /// The pricing function lets such a request through unpaid: nothing to list.
    Free,
    /// The offers could not be made now.
    Unavailable,
}

/// One route's item: its offers made as for a request without payment to its path (a pricing
/// function sees the template, its parameters unfilled), its declaration lifted.
async fn resolve(listing: &Listing) -> Resolution {
    let config = &listing.config;
    let declaration: Option<Declaration> = config
        .extensions
        .get(tollgate_protocol::x402::bazaar::EXTENSION)
        .and_then(|d| serde_json::from_value(d.clone()).ok());
    let method = match declaration.as_ref().map(|d| &d.info.input) {
        Some(Input::Http(http)) => Method::from_bytes(http.method.as_bytes()).unwrap_or(Method::GET),
        _ => listing.method.clone().unwrap_or(Method::GET),
    };
    let Ok(request) = Request::builder().method(method.clone()).uri(&listing.template).body(()) else {
        return Resolution::Unavailable;
    };
    let (parts, ()) = request.into_parts();
    let (offers, named) = match crate::service::priced(config, &parts).await {
        crate::service::Priced::Offers(offers, named) => (offers, named),
        crate::service::Priced::Free => return Resolution::Free,
        crate::service::Priced::Answer(_) => return Resolution::Unavailable,
    };
    let at = match (named, &config.resource) {
        (Some(url), _) => Location::Url(url),
        (None, ResourceUrl::Fixed(url)) => Location::Url(url.clone()),
        (None, ResourceUrl::FromRequest { base: Some(base) }) => Location::Base(base.clone(), listing.template.clone()),
        (None, ResourceUrl::FromRequest { base: None }) => Location::Origin(listing.template.clone()),
    };
    let mcp = matches!(&at, Location::Url(url) if url.starts_with("mcp://"))
        || declaration.as_ref().is_some_and(|d| matches!(d.info.input, Input::Mcp(_)));
    let mut input = declaration.as_ref().map(Declaration::lifted_input).unwrap_or_else(|| {
        let mut skeleton = Map::new();
        skeleton.insert("method".into(), Value::String(method.to_string()));
        skeleton
    });
    if listing.template.contains(':') && !mcp {
        input.entry("routeTemplate").or_insert_with(|| Value::String(listing.template.clone()));
    }
    let mut requires = Vec::new();
    if crate::pass::sold(&offers) {
        requires.push(tollgate_protocol::siwx::EXTENSION.to_owned());
    }
    if config.payment_identifier == Some(true) {
        requires.push(tollgate_protocol::x402::payment_identifier::KEY.to_owned());
    }
    let item = ManifestItem {
        resource: ManifestResource {
            url: String::new(),
            description: Some(config.description.clone()).filter(|d| !d.is_empty()),
            mime_type: Some(config.mime_type.clone()).filter(|m| !m.is_empty()),
            service: config.service.clone(),
        },
        kind: if mcp { "mcp" } else { "http" }.to_owned(),
        accepts: offers.iter().map(|(requirement, _)| requirement.clone()).collect(),
        input,
        output: declaration.and_then(|d| d.info.output),
        requires,
    };
    Resolution::Item(Box::new(Pending { at, item }))
}

/// Answers `/.well-known/x402.json` in front of a router ([`Storefront::layer`]).
#[derive(Debug, Clone)]
pub struct StorefrontLayer {
    storefront: Storefront,
}

impl<S> Layer<S> for StorefrontLayer {
    type Service = StorefrontService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StorefrontService { inner, storefront: self.storefront.clone() }
    }
}

/// The service of a [`StorefrontLayer`].
#[derive(Debug, Clone)]
pub struct StorefrontService<S> {
    inner: S,
    storefront: Storefront,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for StorefrontService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<PaymentBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if !Storefront::asked(&request) {
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            return ResponseFuture::new(Box::pin(async move {
                inner.call(request).await.map(|response| response.map(PaymentBody::stream))
            }));
        }
        let answer = self.storefront.respond(&request);
        ResponseFuture::new(Box::pin(async move { Ok(answer.await) }))
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_paths_become_route_templates() {
        assert_eq!(route_template("/report").as_deref(), Ok("/report"));
        assert_eq!(route_template("/").as_deref(), Ok("/"));
        assert_eq!(route_template("/weather/{city}").as_deref(), Ok("/weather/:city"));
        assert_eq!(route_template("/files/{*rest}").as_deref(), Ok("/files/:rest"));
        assert_eq!(route_template("/users/:id/posts").as_deref(), Ok("/users/:id/posts"));
        for bad in ["report", "/a/{", "/a/{}", "/a/{b c}", "/../etc", "/a?b", "/%2e%2e/x", "/a/{b}}"] {
            assert!(route_template(bad).is_err(), "{bad}");
        }
    }
}
