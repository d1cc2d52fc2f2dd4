//! `tollgate`: the seller layer.
//!
//! A tower layer that answers HTTP 402 with x402 payment requirements on protected routes and
//! serves the handler only once a facilitator has settled the buyer's proof. The layer itself
//! lands with its own issue; until then this crate only re-exports the shared wire types so that
//! sellers can already depend on one crate name.

pub use tollgate_protocol as protocol;
