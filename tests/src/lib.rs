//! End-to-end tests across the Tollgate crates live in `tests/tests/`.
//!
//! This library holds the helpers they share.

pub use tollgate_protocol as protocol;

/// Where cargo put the workspace's binaries beside the running test (`target/debug/<binary>`):
/// built by `cargo test --workspace`.
///
/// # Panics
/// When the binary is not built (saying how to build it).
#[must_use]
pub fn built(binary: &str) -> std::path::PathBuf {
    // Tests run from target/<profile>/deps; the binaries are in target/<profile>.
    let exe = std::env::current_exe().unwrap_or_default();
    let folder = exe.parent().and_then(std::path::Path::parent).unwrap_or_else(|| std::path::Path::new("."));
    let path = folder.join(binary);
    assert!(path.exists(), "{} is not built: run the tests with `cargo test --workspace`", path.display());
    path
}

/// The book's Rust code (`docs/src/`), compiled as doctests of this crate so that it keeps
/// compiling (`tests/book.rs` checks that every chapter showing Rust is here).
#[cfg(doctest)]
pub mod book {
    #[doc = include_str!("../../docs/src/introduction.md")]
    pub struct Introduction;
    #[doc = include_str!("../../docs/src/getting-started.md")]
    pub struct GettingStarted;
    #[doc = include_str!("../../docs/src/sell/route.md")]
    pub struct SellARoute;
    #[doc = include_str!("../../docs/src/sell/proxy.md")]
    pub struct SellAnyService;
    #[doc = include_str!("../../docs/src/sell/be-found.md")]
    pub struct BeFound;
    #[doc = include_str!("../../docs/src/pay/index.md")]
    pub struct Pay;
    #[doc = include_str!("../../docs/src/pay/agents.md")]
    pub struct Agents;
    #[doc = include_str!("../../docs/src/facilitator/run.md")]
    pub struct RunTheFacilitator;
    #[doc = include_str!("../../docs/src/facilitator/chains.md")]
    pub struct Chains;
    #[doc = include_str!("../../docs/src/facilitator/webhooks-metrics.md")]
    pub struct WebhooksAndMetrics;
    #[doc = include_str!("../../docs/src/facilitator/instances.md")]
    pub struct SeveralInstances;
    #[doc = include_str!("../../docs/src/facilitator/deploy.md")]
    pub struct Deploy;
    #[doc = include_str!("../../docs/src/reference/http-api.md")]
    pub struct HttpApi;
    #[doc = include_str!("../../docs/src/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../../docs/src/contributing.md")]
    pub struct Contributing;
}
