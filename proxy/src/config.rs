//! The configuration file (TOML), read and checked before anything uses it.
//!
//! ```toml
//! listen = "127.0.0.1:8090"
//! upstream = "http://127.0.0.1:9000"       # the service sold
//!
//! [facilitator]
//! url = "http://127.0.0.1:8402"
//! api_key_env = "TOLLGATE_API_KEY"         # a Tollgate gateway key; without it: an x402 facilitator
//!
//! [[route]]
//! name = "report"
//! path = "/reports/{id}"
//! methods = ["GET"]
//! [[route.accept]]
//! asset = "SOL"
//! amount = "0.001"
//! pay_to = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
//! ```
//!
//! Every key is documented on its field below; the book's "Sell any HTTP service"
//! (`docs/src/sell/proxy.md`) shows a whole file. Unknown keys are refused (a typo is an error,
//! not a free route).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyFile {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// The most client connections served at once (default 10,000, at most 2^61 - 1). Past it,
    /// each serving thread accepts one more and holds it until a connection closes; the rest
    /// wait in the listening socket's queue.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Where `/healthz`, `/readyz` and `/metrics` are served; by default on `listen`, before
    /// any route.
    #[serde(default)]
    pub ops_listen: Option<SocketAddr>,
    /// The upstream every route forwards to unless it names its own: `http://host:port`, with
    /// an optional base path prepended to every forwarded path.
    pub upstream: String,
    /// The public base URL buyers reach the proxy at (`https://api.example.com`): the resource
    /// URLs of payment requirements. By default from each request's `Host`.
    #[serde(default)]
    pub public_url: Option<String>,
    /// Whether the client's `Forwarded` / `X-Forwarded-*` headers are believed (the proxy runs
    /// behind a load balancer that sets them). By default they are removed and written anew.
    #[serde(default)]
    pub trust_forwarded: bool,
    /// Terminate TLS here (HTTPS); without it the proxy speaks plain HTTP (behind a load
    /// balancer that terminates TLS, set `trust_forwarded`).
    #[serde(default)]
    pub tls: Option<TlsFile>,
    /// The facilitator that verifies and settles.
    pub facilitator: FacilitatorFile,
    /// Upstream timeouts.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Signed headers telling the upstream who paid.
    #[serde(default)]
    pub identity: Option<IdentityFile>,
    /// What happens to requests no route matches.
    #[serde(default)]
    pub unmatched: Unmatched,
    /// Where routes priced in `batch-settlement` keep their channels (a JSON-lines journal,
    /// written before each answer is released; what the buyers were charged and not yet claimed
    /// lives here across restarts). Required by such routes.
    #[serde(default)]
    pub channels_file: Option<PathBuf>,
    /// Instead of `channels_file`: the environment variable holding the URL of a Redis
    /// (`redis://[:password@]host:port[/db]`) where several proxies selling one service keep
    /// their channels together. Each charge is a compare-and-set there, so two proxies never
    /// serve twice on one voucher; run Redis with `appendfsync always` for a charge to be on
    /// disk before its answer is released.
    #[serde(default)]
    pub channels_redis_env: Option<String>,
    /// The prefix of the proxy's keys in that Redis (default `tollgate-proxy`): proxies of one
    /// seller share one, other sellers use others.
    #[serde(default)]
    pub channels_redis_prefix: Option<String>,
    /// Whether `/.well-known/x402.json` lists the paid routes (x402 well-known discovery:
    /// each route's offers, as its 402 makes them, and its `[route.discovery]`). Default on; it
    /// answers before any route.
    #[serde(default = "yes")]
    pub well_known: bool,
    /// The routes, tried in order: the first that matches takes the request.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteFile>,
}

const fn yes() -> bool {
    true
}

/// `[facilitator]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorFile {
    /// Its base URL.
    pub url: String,
    /// The environment variable holding a Tollgate gateway API key. Without a key, the
    /// facilitator is any x402 facilitator (`/verify`, `/settle`, `/supported`).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Instead of `api_key_env`: a file holding the key (a mounted secret).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
}

/// `[tls]`: PEM files, read again at each reload.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// `[timeouts]`, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Connecting to the upstream (502 when over).
    pub connect_ms: u64,
    /// The upstream's answer head (504 when over). Bodies stream for as long as they last.
    pub response_ms: u64,
    /// A client's request body arriving nothing for this long is cut off (400).
    pub body_idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { connect_ms: 5_000, response_ms: 60_000, body_idle_ms: 30_000 }
    }
}

/// `[identity]`: see [`crate::identity`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityFile {
    /// The environment variable holding the secret shared with the upstream.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Instead of `secret_env`: a file holding it (a mounted secret).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// The headers' prefix (default `X-Tollgate-`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

fn default_max_connections() -> usize {
    10_000
}

fn default_prefix() -> String {
    "X-Tollgate-".into()
}

/// `[unmatched]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unmatched {
    /// `not-found` (404, the default), `pass` (forwarded, free), or `charge` (priced by
    /// `accept`, like a route).
    #[serde(default)]
    pub action: UnmatchedAction,
    /// The prices, for `charge`.
    #[serde(default)]
    pub accept: Vec<AcceptFile>,
    /// What the buyer gets, for `charge`.
    #[serde(default)]
    pub description: String,
}

/// What happens to requests no route matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnmatchedAction {
    /// 404.
    #[default]
    NotFound,
    /// Forwarded without payment.
    Pass,
    /// Priced by `[[unmatched.accept]]`.
    Charge,
}

/// One `[[route]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteFile {
    /// Its name (metrics, logs).
    pub name: String,
    /// Path pattern: literal segments, `{name}` for one segment, `{*name}` for the rest.
    pub path: String,
    /// Methods it takes (any when empty).
    #[serde(default)]
    pub methods: Vec<String>,
    /// The host it is for (`api.example.com` or `*.example.com`); any when absent.
    #[serde(default)]
    pub host: Option<String>,
    /// Query parameters it needs: a value, or `"*"` for any.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Forwarded without payment.
    #[serde(default)]
    pub free: bool,
    /// The prices (one per way to pay); required unless `free`.
    #[serde(default)]
    pub accept: Vec<AcceptFile>,
    /// When to settle: `before` (settle, then forward: the answer streams) or `after`
    /// (verify, forward, settle only an answer under 400: the answer is held until settled, up
    /// to `max_held_bytes`). Default `before`. Metered prices always settle after.
    #[serde(default)]
    pub settle: Settle,
    /// The largest answer held in memory while a settlement after it runs (default 16 MiB;
    /// larger answers are refused with 502 and nothing is settled).
    #[serde(default)]
    pub max_held_bytes: Option<usize>,
    /// How many answers one payment buys (the first included), for the same URL, method and
    /// body: default 2, the answer and one retry of a buyer whose answer was lost. Later repeats
    /// are answered 402. The facilitator counts them, so every proxy instance shares one count.
    #[serde(default)]
    pub ticket_uses: Option<u32>,
    /// For how long after its first answer (seconds, default 60) a payment's repeats are served.
    #[serde(default)]
    pub ticket_secs: Option<u64>,
    /// For metered prices (`max`): where the upstream reports what the request used.
    #[serde(default)]
    pub usage: Option<UsageFile>,
    /// What the buyer gets (shown in the 402).
    #[serde(default)]
    pub description: String,
    /// The MIME type of the answer (shown in the 402).
    #[serde(default)]
    pub mime_type: Option<String>,
    /// This route's upstream, instead of the file's.
    #[serde(default)]
    pub upstream: Option<String>,
    /// The path forwarded, with the pattern's captures: `/v1/reports/{id}`. By default the
    /// request's (canonical) path.
    #[serde(default)]
    pub rewrite: Option<String>,
    /// How agents learn to call the route and who sells it (x402 `bazaar`), in its 402s and in
    /// `/.well-known/x402.json`.
    #[serde(default)]
    pub discovery: Option<DiscoveryFile>,
}

/// `[route.discovery]`: what a paid route declares. Examples and schemas are TOML tables
/// (written as JSON would be; a schema's `$ref` key is quoted: `"$ref" = "#/$defs/city"`).
/// Checked when the file is read: a declaration the `bazaar` rules refuse is an error.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryFile {
    /// The method declared; default the route's first method, else `GET`.
    #[serde(default)]
    pub method: Option<String>,
    /// Example query parameters.
    #[serde(default)]
    pub query_example: Option<serde_json::Value>,
    /// The body's type: `json` (default), `form-data` or `text`.
    #[serde(default)]
    pub body_type: Option<String>,
    /// An example body: a table, or a string for `text`.
    #[serde(default)]
    pub body_example: Option<serde_json::Value>,
    /// A JSON Schema of the query parameters (query methods) or of the body (body methods);
    /// references inside the schema only.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
    /// An example JSON answer.
    #[serde(default)]
    pub output_example: Option<serde_json::Value>,
    /// The service's name (1 to 32 printable ASCII characters).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Up to 5 tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The service's icon: an https URL on a public host.
    #[serde(default)]
    pub icon_url: Option<String>,
}

/// When a route settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Settle {
    /// Settle, then forward (x402 `upfront`).
    #[default]
    Before,
    /// Verify, forward, settle only a success (x402 `authorization`).
    After,
}

/// One `[[route.accept]]`: a way to pay.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptFile {
    /// `SOL`, `ETH`, or a token's address (SPL mint or ERC-20 contract).
    pub asset: String,
    /// The price, in whole units (`"0.01"`).
    #[serde(default)]
    pub amount: Option<String>,
    /// Instead of `amount`, a metered price's most (x402 `upto`, EVM tokens): the request is
    /// charged what `[route.usage]` reports, at most this.
    #[serde(default)]
    pub max: Option<String>,
    /// A token's decimals.
    #[serde(default)]
    pub decimals: Option<u8>,
    /// Who is paid.
    pub pay_to: String,
    /// The CAIP-2 network (`eip155:8453`, `solana:…`); by default the facilitator's for the
    /// asset's chain.
    #[serde(default)]
    pub network: Option<String>,
    /// EVM tokens paid with `amount`: `eip3009` (default) or `permit2` (any ERC-20); for a
    /// price from channels, how the deposit is moved.
    #[serde(default)]
    pub transfer: Option<String>,
    /// `exact` (the default: one payment per request) or `batch-settlement` (an EVM token:
    /// the buyer deposits once into a payment channel and signs a voucher per request, checked
    /// by the proxy; needs `channels_file` or `channels_redis_env`).
    #[serde(default)]
    pub scheme: Option<String>,
    /// Scheme details (`extra`), e.g. an EVM token's EIP-712 `name` and `version`.
    #[serde(default)]
    pub extra: Option<toml::Table>,
    /// This price buys a pass: for this many seconds (at most a year), the wallet that paid
    /// signs in (x402 `sign-in-with-x`) instead of paying again, on every path of the route.
    /// Needs `public_url`, which its sign-ins are bound to.
    #[serde(default)]
    pub pass_secs: Option<u64>,
}

/// `[route.usage]`: how a metered route learns what a request used (a header, a trailer, or
/// both: the header when the answer has it, else the trailer).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageFile {
    /// The response header carrying the units used (`X-Usage-Tokens: 1532`), a whole number;
    /// removed from the buyer's answer. The answer is held until settled.
    #[serde(default)]
    pub header: Option<String>,
    /// The HTTP trailer carrying them at the end of a streamed answer (server-sent events, a
    /// long generation): the answer streams, and is settled when it ends. Removed too.
    #[serde(default)]
    pub trailer: Option<String>,
    /// The price of one unit, in whole units of the asset (`"0.00001"`).
    pub unit_price: String,
}

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// It cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid TOML for this schema.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A value is refused.
    #[error("{0}")]
    Invalid(String),
}

impl ProxyFile {
    /// Reads and parses `path` (values are checked when routes are built).
    ///
    /// # Errors
    /// [`ConfigError`] when it cannot be read or parsed.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text)
    }

    /// Parses a file's text.
    ///
    /// # Errors
    /// [`ConfigError::Toml`].
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }
}
