//! `tollgate-client`: the buyer side.
//!
//! A reqwest-based client that meets a 402, builds and signs a payment proof with a local key and
//! retries. It lands with its own issue; until then this crate only re-exports the wire types.

pub use tollgate_protocol as protocol;
