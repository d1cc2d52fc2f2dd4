//! `tollgate-facilitator`: the payment gateway and x402 facilitator daemon.
//!
//! # Layout
//!
//! Layers, top to bottom; a module uses only those below it:
//!
//! | layer | modules | what |
//! |---|---|---|
//! | HTTP | [`api`] | routes, guard, idempotency, validation; the one place errors become HTTP statuses |
//! | payment core | [`payment`] | [`payment::Payments`]: receive, verify, hand over, send, build, confirm — claims, records and settles, detached from requests |
//! | lifecycle | [`settlement`] | the state machine, applied with compare-and-set; the reconciler |
//! | chains | [`chains`] | the [`chains::Chain`] trait, terms and refusals; [`chains::solana`], [`chains::evm`] split by scheme |
//! | access | [`auth`], [`wallets`] | API keys, plans, rate limits; custodial keys sealed at rest |
//! | notification | [`webhooks`] | endpoints per account; the sender working through the outbox the store fills |
//! | storage | [`store`], [`events`] | three storage traits over SQLite / PostgreSQL; the store that publishes payment changes |
//! | base | [`config`], [`clock`], [`telemetry`], `otel` | typed configuration; time; Prometheus metrics; OpenTelemetry trace export (feature `otel`) |
//!
//! Beside them: [`admin`] (key and wallet management for the CLI and dashboard) and [`devnet`]
//! (development-chain helpers for the demo and tests).
//!
//! Entry points are testable: build an [`AppState`], take [`router`], or [`run`] it on a
//! listener with a shutdown future. The binary only parses the command line.

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod chains;
pub mod clock;
pub mod config;
pub mod devnet;
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
