//! `tollgate`: the seller layer. A tower layer that makes the routes it wraps payable with
//! HTTP 402, in the x402 protocol (v1 and v2).
//!
//! * A request without payment gets **402**: an x402 v1 JSON body (`x402Version`, `error`,
//!   `accepts`), the v2 `PAYMENT-REQUIRED` header, and a small HTML page for browsers.
//! * A request with `X-PAYMENT` (v1) or `PAYMENT-SIGNATURE` (v2) is matched against what was
//!   offered, then verified and settled by the facilitator ([`FacilitatorClient`]: Tollgate's
//!   gateway, or any x402 facilitator). Only a definite success runs the handler, which finds a
//!   [`Payment`] in its request extensions; the answer carries `X-PAYMENT-RESPONSE` /
//!   `PAYMENT-RESPONSE`.
//! * A **metered** price ([`Price::upto`]: x402 `upto`, any ERC-20 through Permit2) is verified
//!   for its maximum, served, then settled for what the handler reports it used (a [`Charge`]
//!   in the response's extensions), never more than the maximum; nothing for zero or for a
//!   failed handler. Other prices follow the layer's [`SettlementOrder`], written on each
//!   requirement as x402's `paymentFlow` (`upfront` when settled before the handler).
//! * A buyer without a Permit2 allowance is answered **412** (`permit2_allowance_required`); a
//!   `payment-identifier` ([`PaymentLayerBuilder::payment_identifier`]) repeated with the same
//!   proof gets the answer given before, with another proof **409**. The layer's own answers
//!   carry `Cache-Control: no-store`, paid ones `private`.
//! * A payment broadcast but not yet confirmed answers **503** with `Retry-After`: the buyer
//!   retries with the same proof and is not asked to pay again. A facilitator that cannot be
//!   reached answers **502** (or **504**), and the handler does not run.
//! * **One payment buys one answer and one retry of it** (when it was lost), for the same
//!   request — method, resource and body ([`PaymentLayerBuilder::ticket_uses`],
//!   [`PaymentLayerBuilder::ticket_secs`]). Tollgate's facilitator counts the answers in its
//!   database, so instances, restarts and stdio processes never add any; an answer that reached no
//!   buyer (a failed handler, a buyer who hung up before the first byte) is given back.
//! * A **batch-settlement** price ([`Price::batch`], x402 `batch-settlement` on EVM) is paid from
//!   a payment channel: one deposit, then a signed cumulative voucher per request, checked in
//!   process (no facilitator call, no RPC while the channel's chain state is fresh), served, and
//!   charged once the handler answered below 400; claims and sweeps settle many requests at once
//!   in the background ([`batch`]).
//! * A **pass** ([`Price::pass`]) sells a period to the wallet that pays: its 402 declares an
//!   x402 `sign-in-with-x` challenge on the seller's public origin
//!   ([`PaymentLayerBuilder::sign_in_origin`]), and that wallet's signed message
//!   (`SIGN-IN-WITH-X`) is served during the pass without paying again; a copied header, another
//!   wallet, a replayed message or another origin is refused.
//! * Verdicts are cached by proof (moka, bounded, with TTLs), only to save work: a settled
//!   proof's repeat is claimed without verifying it again; a proof for another resource is
//!   refused; a refused proof is refused again without asking. Concurrent requests with one new
//!   proof make one settlement.
//! * A server whose request body cannot be made from bytes (hyper's `Incoming`) wraps it in
//!   [`body::RequestBody`]: the layer reads a small paid body to tell a repeat of the request.
//!
//! The layer never returns an error of its own: every refusal is a response.
//!
//! ```no_run
//! use axum::{Extension, Router, routing::get};
//! use tollgate::{FacilitatorClient, Payment, PaymentLayer, Price};
//!
//! async fn report(Extension(payment): Extension<Payment>) -> String {
//!     format!("paid by {:?} in {}", payment.payer, payment.transaction.unwrap_or_default())
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let seller = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin".parse()?;
//! let paywall = PaymentLayer::builder()
//!     .facilitator(FacilitatorClient::new("http://127.0.0.1:8402", "tg_live_..."))
//!     .accept(Price::native_sol("0.01")?.pay_to(seller))
//!     .description("Daily report")
//!     .build()?;
//! let app: Router = Router::new().route("/report", get(report)).route_layer(paywall);
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! | module | what |
//! |---|---|
//! | [`layer`] | [`PaymentLayer`] and its builder |
//! | [`service`] | the per-request flow, in steps: offers → resource → the payment read → known or in flight → settled in the layer's order |
//! | `config` | the settings every clone shares, [`SettlementOrder`], the pricing function |
//! | `offers` | what a request is offered, its resource, and which offer a payment pays |
//! | [`facilitator`] | the [`Facilitator`] trait the layer asks ([`Claim`] in, [`Verdict`] out) and [`FacilitatorClient`], its HTTP implementation |
//! | `cache`, `challenge`, `offline` | verdicts remembered per proof and the proofs in flight; the answers the layer writes itself; refusals decided without the facilitator |
//! | `answer` | what one payment buys: the ticket terms, the answers counted here when the facilitator does not, an answer given back when it reaches no buyer |
//! | [`price`], [`Charge`], [`future`], [`body`] | prices and quotes; what a metered request used; the service's future; its response body, and a request body it can read and hand on |
//! | `identifiers` | the `payment-identifier` extension: ids claimed by proofs, and their paid answers |
//! | `pass` | passes: the terms a pass payment sends, the sign-in challenge a 402 declares, a holder's sign-in |
//! | [`batch`] | batch-settlement: channels checked and charged per request, their store, the claimer |
//! | [`discovery`] | the `bazaar` extension: how to call the route and what it answers, and who sells it |
//! | `metered` | the facilitator calls that may claim an answer, each on a task of its own (`Settlement`); a metered answer's body settled at its end |

mod answer;
pub mod batch;
pub mod body;
mod cache;
mod challenge;
mod charge;
mod config;
pub mod discovery;
pub mod facilitator;
pub mod future;
mod handler;
mod identifiers;
pub mod layer;
mod metered;
mod offers;
mod offline;
mod paid_channel;
mod pass;
pub mod price;
pub mod service;
mod storefront;

pub use charge::{Charge, DeferredCharge};
pub use facilitator::{BatchAnswer, BatchCall, Claim, Facilitator, FacilitatorClient, Payment, SignInClaim, Verdict};
pub use layer::{
    BuildError, DEFAULT_REQUEST_DIGEST_LIMIT, DEFAULT_TICKET_SECS, DEFAULT_TICKET_USES, PaymentLayer,
    PaymentLayerBuilder, SettlementOrder,
};
pub use price::{Price, PriceError, Quote};
pub use service::PaymentService;
/// Where settlements that outlive their request run ([`PaymentLayerBuilder::tasks`]).
pub use tokio_util::task::TaskTracker;
pub use tollgate_protocol as protocol;
/// Checking the signature of Tollgate's webhook deliveries (`Tollgate-Signature`).
pub use tollgate_protocol::webhook;

/// The README's Rust code, compiled as doctests so that it keeps compiling.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
