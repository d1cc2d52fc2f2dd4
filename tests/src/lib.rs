//! End-to-end tests across the Tollgate crates live in `tests/tests/`.
//!
//! This library holds the helpers they share.

pub use tollgate_protocol as protocol;
