//! The layer's settings ([`Config`], shared by every clone of the layer and its services), and
//! the choices a seller makes about them: [`SettlementOrder`], [`PriceFn`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::cache::{Decoded, ProofCache};
use crate::challenge::Buffered;
use crate::facilitator::Facilitator;
use crate::price::{Offer, Price, Quote};

/// Prices chosen per request: `None` lets the request through unpaid.
pub type PriceFn =
    Arc<dyn Fn(&http::request::Parts) -> Pin<Box<dyn Future<Output = Option<Quote>> + Send>> + Send + Sync>;

/// When the facilitator settles relative to the handler, for prices that name no x402
/// `paymentFlow` of their own. Requirements say it to buyers: `extra.paymentFlow: "upfront"`
/// for settle-before (no key for the default `authorization`). Metered prices
/// ([`crate::Price::upto`]) are always verified, served, then settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SettlementOrder {
    /// Settle, then run the handler (one gateway call): x402's `upfront` flow. The default.
    #[default]
    SettleBefore,
    /// Verify, run the handler, and settle only if it answered below 400 (x402's
    /// `authorization` flow); the response is held until settlement succeeds.
    VerifyThenSettle,
}

/// How the resource URL in requirements is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResourceUrl {
    /// This URL.
    Fixed(String),
    /// From the request: `base` (or the scheme and host the request names: `Forwarded`,
    /// `X-Forwarded-Proto` / `X-Forwarded-Host`, `Host`) plus its path and query.
    FromRequest { base: Option<String> },
}

/// The layer's settings, shared by every clone.
pub(crate) struct Config {
    pub facilitator: Arc<dyn Facilitator>,
    pub prices: Vec<Price>,
    pub pricing: Option<PriceFn>,
    pub description: String,
    pub mime_type: String,
    /// Who sells the route (x402 `bazaar` service metadata), in every 402's `resource`.
    pub service: tollgate_protocol::x402::bazaar::ServiceMetadata,
    pub resource: ResourceUrl,
    pub order: SettlementOrder,
    pub max_timeout_seconds: u64,
    pub max_buffered_body: usize,
    pub retry_after_secs: u64,
    /// What one payment buys: how many answers, for how long after the first.
    pub answers: crate::answer::Terms,
    /// The largest request body read to tell a repeat of the request from another.
    pub request_digest_limit: usize,
    /// What a pass sold here opens (default: each resource without its query).
    pub pass_scope: Option<String>,
    /// The seller's public origin, which sign-in messages are bound to (passes).
    pub sign_in_origin: Option<tollgate_protocol::siwx::Origin>,
    pub cache: Arc<ProofCache>,
    /// The requirements when they are the same for every request (fixed prices on named
    /// networks, nothing asked of `/supported`): built once.
    pub static_offers: Option<Arc<Vec<Offer>>>,
    /// 402 answers to requests without payment, per (resource, HTML or not), when offers are
    /// static.
    pub challenges: moka::sync::Cache<(String, bool), Arc<Buffered>>,
    /// Payment headers already decoded and matched, when offers are static; bounded in bytes.
    pub decoded: moka::sync::Cache<String, Arc<Decoded>>,
    /// x402 v2 extensions declared in the 402 answer (e.g. `bazaar` discovery info).
    pub extensions: serde_json::Map<String, serde_json::Value>,
    /// The `payment-identifier` extension, when declared: whether an id is required.
    pub payment_identifier: Option<bool>,
    /// Answers settled before the handler are streamed, not held.
    pub stream_upfront: bool,
    /// Ids claimed by payments, with their paid answers.
    pub identifiers: crate::identifiers::Identifiers,
    /// Settlements that outlive their request.
    pub tasks: tokio_util::task::TaskTracker,
    /// Payment channels (batch-settlement prices), when the layer sells any.
    pub channels: Option<Arc<crate::batch::Channels>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("facilitator", &self.facilitator)
            .field("prices", &self.prices)
            .field("dynamic_pricing", &self.pricing.is_some())
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The route's `bazaar` declaration, for the facilitator's catalog: only where the seller
    /// names the resource's origin ([`crate::PaymentLayerBuilder::resource_base`], a fixed
    /// resource, or one its pricing function names, `named_by_seller`). A URL made from the
    /// request's `Host` is the buyer's to choose, and a catalog must not list it.
    pub(crate) fn declaration_for_catalogs(&self, named_by_seller: bool) -> Option<&serde_json::Value> {
        let seller_named = named_by_seller || !matches!(self.resource, ResourceUrl::FromRequest { base: None });
        seller_named.then(|| self.extensions.get(tollgate_protocol::x402::bazaar::EXTENSION)).flatten()
    }
}
