//! `tollgate-facilitator`: the payment gateway and x402 facilitator daemon.
//!
//! # Layout
//!
//! Layers, top to bottom; a module uses only those of its own layer and below
//! (`tests/tests/structure.rs` holds the code to this table, and to no import cycles):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | running | [`runtime`] | [`run`]: the router served beside the background loops (reconciler, purges, webhook sender, the PostgreSQL announcement follower) until shutdown |
//! | entry points | [`api`], [`seller`] | HTTP: routes, guard, idempotency, validation, the OpenAPI document, and the one place errors become HTTP statuses; in process: the core as a seller layer's facilitator |
//! | operations | [`admin`], [`devnet`] | key, wallet and webhook management for the CLI and dashboard; development-chain helpers for the demo and tests |
//! | application | [`app`] | [`AppState`]: what a handler reaches, assembled over a store and chains or from configuration |
//! | payment core | [`payment`], [`channels`] | [`payment::Payments`]: receive, verify, hand over, send, build, confirm — claims, records and settles, detached from requests; [`channels::Channels`]: x402 `batch-settlement` checked against its channels |
//! | catalog | [`discovery`] | the x402 `bazaar` catalog: what confirmed settlements declare, checked against its schema and sanitized, written in the background |
//! | lifecycle | [`settlement`] | the state machine, applied with compare-and-set; the reconciler |
//! | chains | [`chains`] | the [`chains::Chain`] trait (a proof decoded once, checked, settled, read back whole), terms and refusals; [`chains::solana`], [`chains::evm`] split by scheme |
//! | access | [`auth`] | API keys, rate limits, dashboard sessions and CSRF |
//! | notification | [`webhooks`] | endpoints per account; the sender working through the outbox the store fills |
//! | sealing | [`wallets`] | custodial keys and webhook secrets sealed at rest under the master key |
//! | events | [`events`] | the bus behind the WebSocket feed (payment changes, revocations, gaps) |
//! | storage | [`store`] | three storage traits over SQLite / PostgreSQL; hooks told of each committed payment change |
//! | base | [`config`], [`plans`], [`clock`], [`telemetry`], `otel` | typed configuration; plans and their limits; time; Prometheus metrics (by label); OpenTelemetry trace export (feature `otel`) |
//!
//! Entry points are testable: build an [`AppState`], take [`router`], or [`run`] it on a
//! listener with a shutdown future; or hand [`seller::InProcess`] to a `tollgate` layer. The
//! binary only parses the command line.

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod chains;
pub mod channels;
pub mod clock;
pub mod config;
pub mod devnet;
pub mod discovery;
pub mod events;
#[cfg(feature = "otel")]
pub mod otel;
pub mod payment;
pub mod plans;
pub mod runtime;
pub mod seller;
pub mod settlement;
pub mod store;
pub mod telemetry;
pub mod wallets;
pub mod webhooks;

pub use api::router;
pub use app::{AppState, ReadinessProbe};
pub use runtime::{RECONCILE_EVERY, run, shutdown_signal};
