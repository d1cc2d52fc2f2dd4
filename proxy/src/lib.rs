//! `tollgate-proxy`: sell any HTTP service per request, configured in one TOML file.
//!
//! The proxy listens, matches each request against the file's routes (host, method, path
//! pattern with captures, query), answers 402 with a route's prices, has the facilitator verify
//! and settle exactly as the `tollgate` layer does (each paid route *is* a
//! [`tollgate::PaymentLayer`] around the forwarder: there is no second payment implementation),
//! and forwards paid requests to the upstream, bodies streamed both ways.
//!
//! | module | what |
//! |---|---|
//! | [`config`] | the file, read and checked |
//! | [`route`] | canonical paths and hosts (crafted paths refused), patterns, query conditions |
//! | [`routes`] | a file made ready: each route's matcher and action (free, 404, paid layer) |
//! | [`forward`] | the request on to the upstream and its answer back; usage of metered routes |
//! | [`identity`] | the signed headers that tell the upstream who paid |
//! | [`proxy`] | routing, `/healthz`, `/readyz`, `/metrics`, reload |
//! | [`server`] | connections (plain or TLS), graceful shutdown, reload on `SIGHUP` or file change |
//! | [`tls`] | TLS termination with rustls |
//! | [`telemetry`] | Prometheus metrics |

pub mod config;
pub mod forward;
pub mod identity;
pub mod proxy;
pub mod route;
pub mod routes;
pub mod server;
pub mod telemetry;

pub mod tls;

pub use config::ProxyFile;
pub use identity::{Identity, PaidBy};
pub use proxy::Proxy;
