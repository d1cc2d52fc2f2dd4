//! `tollgate-demo`: the whole flow in one command (seller, facilitator, embedded ledger).
//!
//! Lands with the demo issue. Until then, run the facilitator itself (see the README).

pub use tollgate_protocol as protocol;
