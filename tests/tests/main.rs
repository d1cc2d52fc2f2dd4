//! The end-to-end tests, one module per subject, in one test binary: the crate and its dependencies link
//! once, where a binary per file linked them 7 times (docs/src/contributing.md, "Build
//! times"). `cargo test -p tollgate-e2e --test e2e <module>::` runs one module's tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod book;
mod channel_sellers;
mod demo;
mod junk;
mod layer;
mod official_client;
mod structure;
