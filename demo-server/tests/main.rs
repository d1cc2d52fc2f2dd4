//! The demo's tests, one module per subject, in one test binary: the crate and its dependencies link
//! once, where a binary per file linked them 4 times (docs/src/contributing.md, "Build
//! times"). `cargo test -p tollgate-demo --test demo <module>::` runs one module's tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

mod demo;
mod mcp;
mod page;
mod stop;
