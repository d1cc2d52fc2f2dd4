//! Coverage-guided fuzz targets for every decoder a stranger's bytes reach.
//!
//! Each target is a function of arbitrary bytes that panics when a property breaks — not only
//! when the decoder itself panics: what decodes encodes back to the same thing, what is refused
//! stays refused, and what a check accepts pays the amounts and addresses the bytes say. The
//! same functions run three ways:
//!
//! * under AFL++ (`scripts/fuzz`: `cargo afl build` of `src/bin/afl.rs`, one binary for every
//!   target, chosen by its first argument);
//! * in `cargo test` (`tests/replay.rs`): every seed of [`seeds`] and every input kept in
//!   `fuzz/regressions/<target>/` (what a run once found), so a fixed finding stays fixed;
//! * by hand: `tollgate-fuzz-afl <target> < input` runs one input once (AFL++'s harness reads
//!   standard input when it is not under `afl-fuzz`).

// A target panics when a property breaks: that is how AFL++ records a finding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod amount;
pub mod batch;
pub mod evm_payload;
pub mod evm_transaction;
pub mod header;
pub mod mcp_payment;
pub mod proxy_config;
pub mod proxy_request;
pub mod seeds;
pub mod siwx;
pub mod solana_native;
pub mod solana_sponsored;
pub mod solana_token;

/// One fuzz target.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Its name: the corpus folder, the AFL++ output folder, the harness's argument.
    pub name: &'static str,
    /// Runs one input; panics when a property breaks.
    pub check: fn(&[u8]),
    /// What it feeds and what it asserts, for `scripts/fuzz --list`.
    pub about: &'static str,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "payment_header", check: header::check, about: header::ABOUT },
    Target { name: "amount", check: amount::check, about: amount::ABOUT },
    Target { name: "evm_payload", check: evm_payload::check, about: evm_payload::ABOUT },
    Target { name: "evm_transaction", check: evm_transaction::check, about: evm_transaction::ABOUT },
    Target { name: "solana_native", check: solana_native::check, about: solana_native::ABOUT },
    Target { name: "solana_sponsored", check: solana_sponsored::check, about: solana_sponsored::ABOUT },
    Target { name: "solana_token", check: solana_token::check, about: solana_token::ABOUT },
    Target { name: "siwx", check: siwx::check, about: siwx::ABOUT },
    Target { name: "batch", check: batch::check, about: batch::ABOUT },
    Target { name: "proxy_request", check: proxy_request::check, about: proxy_request::ABOUT },
    Target { name: "proxy_config", check: proxy_config::check, about: proxy_config::ABOUT },
    Target { name: "mcp_payment", check: mcp_payment::check, about: mcp_payment::ABOUT },
];

/// The target called `name`.
#[must_use]
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The digits of a non-negative integer read without the code under test: `None` unless `text`
/// is one or more ASCII digits whose value fits 128 bits.
#[must_use]
pub fn digits_value(text: &str) -> Option<u128> {
    if text.is_empty() {
        return None;
    }
    text.bytes().try_fold(0u128, |value, b| {
        let digit = b.is_ascii_digit().then(|| u128::from(b - b'0'))?;
        value.checked_mul(10)?.checked_add(digit)
    })
}

/// A JSON value's text where it is a string (the form x402 writes amounts and addresses in).
#[must_use]
pub fn text_at<'a>(value: &'a serde_json::Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |v, key| v.get(key))?.as_str()
}
