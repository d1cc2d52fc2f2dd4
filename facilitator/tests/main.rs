//! The facilitator's integration tests, one module per subject, in one test binary: the shared
//! helpers (`common/`) compile once and the tests link once, where a binary per file compiled and
//! linked them 24 times (docs/src/contributing.md, "Build times"). The tests of every module run
//! side by side as the tests of one file always did (`cargo test` runs one binary at a time, its
//! tests on as many threads as the machine has cores).
//!
//! One module's tests: `cargo test -p tollgate-facilitator --test facilitator evm_nonces::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod common;

mod answers;
mod api;
mod attacks;
mod batch;
mod batch_contracts;
mod batch_killed;
mod batch_seller;
mod cancel;
mod daemon;
mod dashboard;
mod evm;
mod evm_nonces;
mod logs;
mod modes;
#[cfg(feature = "otel")]
mod otel;
mod passes;
mod permit2;
mod reconcile;
mod reference;
mod scale_out;
mod seller;
mod solana;
mod webhooks;
mod ws;
