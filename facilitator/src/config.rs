//! Typed configuration: defaults → TOML file → environment → command-line flags.
//!
//! Each layer only overrides what it sets. Secrets (`TOLLGATE_MASTER_KEY`, `TOLLGATE_ADMIN_TOKEN`)
//! come from the environment only, and print as `[REDACTED]` in `Debug` output, as does the
//! password of a database URL.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tollgate_protocol::{ChainFamily, Network};

use crate::plans::{EndpointGroup, Plan, PlanConfig, Plans};

/// A secret string: usable through [`Secret::expose`], never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// A database URL whose password never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// Accepts `sqlite://…`, `postgres://…` / `postgresql://…`, or a bare file path (SQLite).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for another scheme.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") || text.starts_with("sqlite:") {
            Ok(Self(text.to_owned()))
        } else if text.contains("://") {
            Err(ConfigError::Invalid(format!(
                "database URL must start with sqlite:// or postgres:// (got {})",
                redact_url(text)
            )))
        } else {
            Ok(Self(format!("sqlite://{text}")))
        }
    }

    /// The URL, for the connection only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SQLite file, when this is SQLite on a file.
    #[must_use]
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        let rest = self.0.strip_prefix("sqlite://").or_else(|| self.0.strip_prefix("sqlite:"))?;
        let path = rest.split('?').next().unwrap_or(rest);
        (!path.is_empty() && !path.contains(":memory:")).then(|| PathBuf::from(path))
    }

    /// True for PostgreSQL.
    #[must_use]
    pub fn is_postgres(&self) -> bool {
        self.0.starts_with("postgres")
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// `scheme://user:password@host/…` → `scheme://user:[REDACTED]@host/…`; also hides `password=` query values.
fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..].find('/').map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "[REDACTED]");
            }
        }
    }
    if let Some(i) = out.find("password=") {
        let end = out[i..].find('&').map_or(out.len(), |j| i + j);
        out.replace_range(i + "password=".len()..end, "[REDACTED]");
    }
    out
}

/// A JSON-RPC endpoint. Providers put their API key in the path, the query or the user info
/// (`…/v2/KEY`, `?api-key=KEY`), so only the scheme, host and port are ever printed.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct RpcUrl(String);

impl RpcUrl {
    /// Wraps an endpoint URL.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL, for the connection only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `scheme://host:port`, and `/…` when anything follows: safe to log.
    #[must_use]
    pub fn redacted(&self) -> String {
        tollgate_protocol::redact::redact_url(&self.0)
    }
}

impl fmt::Debug for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for RpcUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// One EVM chain the daemon settles on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvmChainConfig {
    /// CAIP-2 id (`eip155:8453`).
    pub network: Network,
    /// JSON-RPC endpoint.
    pub rpc_url: RpcUrl,
}

/// How deep a Solana transaction must be before its verdict is recorded (every path: settlements,
/// receipts, the reconciler, local confirm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SolanaCommitment {
    /// Voted on by a supermajority (about a second).
    #[default]
    Confirmed,
    /// Rooted (about 13 s more): cannot be rolled back.
    Finalized,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Size and time limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// How long an `Idempotency-Key` is remembered, seconds (at least 24 h by contract).
    pub idempotency_ttl_secs: u64,
    /// How long a verified API key is trusted without a database read, seconds. Keys deleted
    /// by another process (the CLI) stop working after at most this long on SQLite; on PostgreSQL
    /// the database announces deletions and every instance drops its cache at once.
    pub key_cache_ttl_secs: u64,
    /// How long `/payment/send` waits for confirmation before answering `pending`, seconds.
    pub send_wait_secs: u64,
    /// Most compute units a sponsored (x402 `exact` Solana) transaction may ask for.
    pub sponsor_max_compute_units: u32,
    /// Highest compute-unit price a sponsored transaction may set, micro-lamports per unit.
    pub sponsor_max_compute_unit_price: u64,
    /// Blocks an EVM receipt's transaction must be buried under (1 = mined).
    pub evm_confirmations: u64,
    /// Most gas an EVM transaction built or accepted here may use.
    pub evm_max_gas: u64,
    /// Highest max fee per gas of the facilitator's own EVM transactions, wei.
    pub evm_max_fee_per_gas: u128,
    /// Seconds an EIP-3009 authorization must stay valid after it is checked: at least the
    /// time a settlement takes to land (blocks of 12 s, the confirmations asked), or it reverts
    /// after its expiry at the facilitator's cost.
    pub evm_valid_before_margin_secs: u64,
    /// Seconds the facilitator's own EVM nonces may stay handed out and unknown to the node
    /// before those transactions are taken as lost and their nonces used again (a node that
    /// restarted, a load balancer that sent them to a node that dropped them).
    pub evm_nonce_gap_secs: u64,
    /// Most wallets and payments one WebSocket connection may follow.
    pub ws_max_subscriptions: usize,
    /// Largest WebSocket message accepted from a client, bytes.
    pub ws_max_message_bytes: usize,
    /// How often the server pings a WebSocket client, seconds; one that stays silent for three
    /// of these is disconnected.
    pub ws_ping_secs: u64,
    /// Most PostgreSQL connections this instance opens for its work (besides one that listens
    /// for announcements and the nonce leases'). Several instances share the server's
    /// `max_connections` (100 by default): size them so the sum fits. SQLite uses 8.
    pub database_max_connections: u32,
    /// Most PostgreSQL connections holding EVM nonce leases at once: how many accounts this
    /// instance can be sending from at the same moment (more wait, up to 60 s). Opened only
    /// while EVM sends run.
    pub nonce_lease_connections: u32,
}

/// Most compute units a sponsored Solana transaction may ask for, by default.
pub const SPONSOR_MAX_COMPUTE_UNITS: u32 = 200_000;
/// Highest compute-unit price (micro-lamports) a sponsored Solana transaction may pay, by
/// default: with [`SPONSOR_MAX_COMPUTE_UNITS`], at most 0.001 SOL of priority fee.
pub const SPONSOR_MAX_COMPUTE_UNIT_PRICE: u64 = 5_000_000;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 * 1024,
            idempotency_ttl_secs: 24 * 3600,
            key_cache_ttl_secs: 10,
            send_wait_secs: 30,
            sponsor_max_compute_units: SPONSOR_MAX_COMPUTE_UNITS,
            sponsor_max_compute_unit_price: SPONSOR_MAX_COMPUTE_UNIT_PRICE,
            evm_confirmations: 1,
            evm_max_gas: 500_000,
            evm_max_fee_per_gas: 500_000_000_000,
            evm_valid_before_margin_secs: 30,
            evm_nonce_gap_secs: 30,
            ws_max_subscriptions: 100,
            ws_max_message_bytes: 16 * 1024,
            ws_ping_secs: 30,
            database_max_connections: 16,
            nonce_lease_connections: 8,
        }
    }
}

/// Webhook delivery settings (`[webhooks]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Let endpoints be loopback, private, link-local or other non-public addresses (default
    /// off: a registered URL must not reach into the facilitator's own network).
    pub allow_private_targets: bool,
    /// Refuse `http://` endpoints (default on).
    pub require_https: bool,
    /// The first retry waits this long, seconds; each next one twice as long, up to an hour.
    pub retry_base_secs: u64,
    /// Retries stop this long after the event, seconds (default a day); the delivery is then
    /// `failed`.
    pub retry_for_secs: u64,
    /// How long one attempt may take, seconds.
    pub timeout_secs: u64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allow_private_targets: false,
            require_https: true,
            retry_base_secs: 10,
            retry_for_secs: 24 * 3600,
            timeout_secs: 10,
        }
    }
}

/// The discovery catalog (`[discovery]`, x402 `bazaar`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// Catalog what sellers declare when their payments settle (default on).
    pub catalog: bool,
    /// Serve `GET /discovery/resources` and `/discovery/search` without an API key (default on,
    /// like `/supported`); `false` puts them behind a key, its plan and limits.
    pub public: bool,
    /// Entries not settled for this many days leave the lists, then the catalog (default 30).
    pub max_age_days: u32,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self { catalog: true, public: true, max_age_days: 30 }
    }
}

/// The daemon's whole configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Storage.
    pub database_url: DatabaseUrl,
    /// Redis shared by every instance for rate limits (`redis://…`); `None` counts them in
    /// this process. Kept secret: it may carry a password.
    pub redis_url: Option<Secret>,
    /// Solana JSON-RPC; `None` serves no Solana chain, except in development mode, which starts
    /// the embedded ledger.
    pub solana_rpc_url: Option<RpcUrl>,
    /// Keypair file (Solana CLI JSON) of the fee payer for x402 `exact` Solana payments. The
    /// embedded ledger makes and funds one of its own when none is given.
    pub solana_fee_payer: Option<PathBuf>,
    /// How deep a Solana transaction's verdict must be.
    pub solana_commitment: SolanaCommitment,
    /// EVM chains.
    pub evm: Vec<EvmChainConfig>,
    /// A single EVM RPC URL given by environment (its chain id is asked from the node).
    pub evm_rpc_url: Option<RpcUrl>,
    /// Key encrypting custodial wallets at rest.
    pub master_key: Option<Secret>,
    /// The facilitator's EVM account (hex private key) that sends x402 `exact` (EIP-3009)
    /// settlements and pays their gas; `None` disables `exact` on EVM.
    pub evm_signer_key: Option<Secret>,
    /// Token guarding the dashboard.
    pub admin_token: Option<Secret>,
    /// Serve `GET /supported` without an API key (the default, as x402 facilitators do: sellers'
    /// middlewares ask it before any payment). `false` puts it behind a key, its plan and limits.
    pub public_supported: bool,
    /// x402 facilitators that `facilitatorUrl` may name.
    pub facilitator_allow_list: Vec<String>,
    /// Plans: rate limits and endpoint access.
    pub plans: Plans,
    /// Limits.
    pub limits: Limits,
    /// Webhook delivery.
    pub webhooks: WebhookSettings,
    /// The discovery catalog.
    pub discovery: DiscoverySettings,
    /// Log format.
    pub log_format: LogFormat,
    /// Development mode (`serve --dev`, `TOLLGATE_DEV=1`): the embedded Solana ledger, a master
    /// key generated into a file, and `/dev/*`. Never implied: without it the daemon serves
    /// exactly the chains configured.
    pub dev: bool,
}

/// Accepts `redis://…` (never echoing the URL, which may hold a password). This build has no TLS
/// for Redis: `rediss://` is refused rather than silently sent in clear.
fn parse_redis_url(text: &str) -> Result<Secret, ConfigError> {
    if text.starts_with("redis://") {
        Ok(Secret::new(text))
    } else {
        Err(ConfigError::Invalid("the Redis URL must start with redis:// (TLS to Redis is not supported)".into()))
    }
}

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8402";
/// Default database: a SQLite file in the working directory.
pub const DEFAULT_DATABASE: &str = "sqlite://tollgate.db";

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8402)),
            database_url: DatabaseUrl(DEFAULT_DATABASE.to_owned()),
            redis_url: None,
            solana_rpc_url: None,
            solana_commitment: SolanaCommitment::Confirmed,
            solana_fee_payer: None,
            evm: Vec::new(),
            evm_rpc_url: None,
            master_key: None,
            evm_signer_key: None,
            admin_token: None,
            public_supported: true,
            facilitator_allow_list: Vec::new(),
            plans: Plans::default(),
            limits: Limits::default(),
            webhooks: WebhookSettings::default(),
            discovery: DiscoverySettings::default(),
            log_format: LogFormat::Text,
            dev: false,
        }
    }
}

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The TOML file: every field optional, unknown fields refused (a typo must not pass silently).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    database_url: Option<String>,
    redis_url: Option<String>,
    solana_rpc_url: Option<RpcUrl>,
    solana_fee_payer: Option<PathBuf>,
    solana_commitment: Option<SolanaCommitment>,
    #[serde(default)]
    evm: Vec<EvmChainConfig>,
    public_supported: Option<bool>,
    facilitator_allow_list: Option<Vec<String>>,
    log_format: Option<LogFormat>,
    limits: Option<FileLimits>,
    plans: Option<FilePlans>,
    webhooks: Option<FileWebhooks>,
    discovery: Option<FileDiscovery>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDiscovery {
    catalog: Option<bool>,
    public: Option<bool>,
    max_age_days: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebhooks {
    allow_private_targets: Option<bool>,
    require_https: Option<bool>,
    retry_base_secs: Option<u64>,
    retry_for_secs: Option<u64>,
    timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_body_bytes: Option<usize>,
    idempotency_ttl_secs: Option<u64>,
    key_cache_ttl_secs: Option<u64>,
    send_wait_secs: Option<u64>,
    sponsor_max_compute_units: Option<u32>,
    sponsor_max_compute_unit_price: Option<u64>,
    evm_confirmations: Option<u64>,
    evm_max_gas: Option<u64>,
    evm_max_fee_per_gas: Option<u128>,
    evm_valid_before_margin_secs: Option<u64>,
    evm_nonce_gap_secs: Option<u64>,
    ws_max_subscriptions: Option<usize>,
    ws_max_message_bytes: Option<usize>,
    ws_ping_secs: Option<u64>,
    database_max_connections: Option<u32>,
    nonce_lease_connections: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePlans {
    standard: Option<FilePlan>,
    premium: Option<FilePlan>,
    enterprise: Option<FilePlan>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePlan {
    rpm: Option<u32>,
    endpoints: Option<Vec<EndpointGroup>>,
    /// Whole SOL a day, as decimal text (`"0.01"`).
    sponsor_sol_per_day: Option<String>,
    /// Whole ETH a day, as decimal text (`"0.005"`).
    sponsor_eth_per_day: Option<String>,
}

impl Limits {
    /// The limits a configuration file sets, over these.
    fn apply(&mut self, l: FileLimits) {
        self.max_body_bytes = l.max_body_bytes.unwrap_or(self.max_body_bytes);
        self.idempotency_ttl_secs = l.idempotency_ttl_secs.unwrap_or(self.idempotency_ttl_secs);
        self.key_cache_ttl_secs = l.key_cache_ttl_secs.unwrap_or(self.key_cache_ttl_secs);
        self.send_wait_secs = l.send_wait_secs.unwrap_or(self.send_wait_secs);
        self.sponsor_max_compute_units = l.sponsor_max_compute_units.unwrap_or(self.sponsor_max_compute_units);
        self.sponsor_max_compute_unit_price =
            l.sponsor_max_compute_unit_price.unwrap_or(self.sponsor_max_compute_unit_price);
        self.evm_confirmations = l.evm_confirmations.unwrap_or(self.evm_confirmations).max(1);
        self.evm_max_gas = l.evm_max_gas.unwrap_or(self.evm_max_gas);
        self.evm_max_fee_per_gas = l.evm_max_fee_per_gas.unwrap_or(self.evm_max_fee_per_gas);
        self.evm_valid_before_margin_secs =
            l.evm_valid_before_margin_secs.unwrap_or(self.evm_valid_before_margin_secs).max(6);
        self.evm_nonce_gap_secs = l.evm_nonce_gap_secs.unwrap_or(self.evm_nonce_gap_secs).max(1);
        self.ws_max_subscriptions = l.ws_max_subscriptions.unwrap_or(self.ws_max_subscriptions);
        self.ws_max_message_bytes = l.ws_max_message_bytes.unwrap_or(self.ws_max_message_bytes);
        self.ws_ping_secs = l.ws_ping_secs.unwrap_or(self.ws_ping_secs).max(1);
        self.database_max_connections = l.database_max_connections.unwrap_or(self.database_max_connections).max(2);
        self.nonce_lease_connections = l.nonce_lease_connections.unwrap_or(self.nonce_lease_connections).max(1);
    }
}

impl WebhookSettings {
    /// The webhook settings a configuration file sets, over these.
    fn apply(&mut self, w: FileWebhooks) {
        let d = self;
        d.allow_private_targets = w.allow_private_targets.unwrap_or(d.allow_private_targets);
        d.require_https = w.require_https.unwrap_or(d.require_https);
        d.retry_base_secs = w.retry_base_secs.unwrap_or(d.retry_base_secs).max(1);
        d.retry_for_secs = w.retry_for_secs.unwrap_or(d.retry_for_secs);
        d.timeout_secs = w.timeout_secs.unwrap_or(d.timeout_secs).clamp(1, 60);
    }
}

/// The plans a configuration file sets (rpm, endpoints, daily sponsorship budgets), over
/// `plans`.
fn apply_plans(plans: &mut Plans, p: FilePlans) -> Result<(), ConfigError> {
    for (plan, given) in [(Plan::Standard, p.standard), (Plan::Premium, p.premium), (Plan::Enterprise, p.enterprise)] {
        if let Some(given) = given {
            let target: &mut PlanConfig = plans.get_mut(plan);
            target.rpm = given.rpm.unwrap_or(target.rpm);
            if let Some(endpoints) = given.endpoints {
                target.endpoints = endpoints;
            }
            let budget = |text: Option<String>, family: ChainFamily, key: &str, now: u64| match text {
                None => Ok(now),
                Some(text) => tollgate_protocol::DecimalAmount::parse(&text)
                    .and_then(|a| a.to_atomic(family.native_decimals()))
                    .ok()
                    .and_then(|a| u64::try_from(a.get()).ok())
                    .filter(|a| i64::try_from(*a).is_ok())
                    .ok_or_else(|| {
                        let most = tollgate_protocol::DecimalAmount::from_atomic(
                            tollgate_protocol::AtomicAmount(i64::MAX.unsigned_abs().into()),
                            family.native_decimals(),
                        );
                        ConfigError::Invalid(format!(
                            "plans.{}.{key} must be an amount of whole {} as text (\"0.01\"), at most {most}",
                            plan.as_str(),
                            family.native_symbol()
                        ))
                    }),
            };
            let now = target.sponsorship;
            target.sponsorship.lamports_per_day =
                budget(given.sponsor_sol_per_day, ChainFamily::Solana, "sponsor_sol_per_day", now.lamports_per_day)?;
            target.sponsorship.wei_per_day =
                budget(given.sponsor_eth_per_day, ChainFamily::Evm, "sponsor_eth_per_day", now.wei_per_day)?;
        }
    }
    Ok(())
}

/// Values given on the command line (highest precedence).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--database`.
    pub database_url: Option<String>,
    /// `--dev`.
    pub dev: bool,
}

impl Config {
    /// Where development mode keeps its generated master key: beside the SQLite file, or in the
    /// working directory.
    #[must_use]
    pub fn dev_master_key_path(&self) -> PathBuf {
        let dir = self
            .database_url
            .sqlite_path()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .filter(|d| !d.as_os_str().is_empty());
        dir.unwrap_or_default().join("tollgate-master.key")
    }

    /// Loads the configuration: defaults, then `file` (if any), then `env`, then `flags`.
    ///
    /// `env` looks a variable up; pass `|k| std::env::var(k).ok()` for the process environment.
    ///
    /// # Errors
    /// [`ConfigError`] for an unreadable or invalid file or an invalid value.
    pub fn load(file: Option<&Path>, env: impl Fn(&str) -> Option<String>, flags: &Flags) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(path) = file {
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
            let parsed: FileConfig = toml::from_str(&text)
                .map_err(|e| ConfigError::Parse { path: path.to_owned(), message: e.to_string() })?;
            config.apply_file(parsed)?;
        }
        config.apply_env(&env)?;
        if let Some(listen) = flags.listen {
            config.listen = listen;
        }
        if let Some(url) = &flags.database_url {
            config.database_url = DatabaseUrl::parse(url)?;
        }
        config.dev |= flags.dev;
        config.validate()?;
        Ok(config)
    }

    fn apply_file(&mut self, file: FileConfig) -> Result<(), ConfigError> {
        if let Some(v) = file.listen {
            self.listen = v;
        }
        if let Some(v) = file.redis_url {
            self.redis_url = Some(parse_redis_url(&v)?);
        }
        if let Some(v) = file.database_url {
            self.database_url = DatabaseUrl::parse(&v)?;
        }
        if let Some(v) = file.solana_commitment {
            self.solana_commitment = v;
        }
        if file.solana_rpc_url.is_some() {
            self.solana_rpc_url = file.solana_rpc_url;
        }
        if file.solana_fee_payer.is_some() {
            self.solana_fee_payer = file.solana_fee_payer;
        }
        if !file.evm.is_empty() {
            self.evm = file.evm;
        }
        if let Some(v) = file.public_supported {
            self.public_supported = v;
        }
        if let Some(v) = file.facilitator_allow_list {
            self.facilitator_allow_list = v;
        }
        if let Some(v) = file.log_format {
            self.log_format = v;
        }
        if let Some(l) = file.limits {
            self.limits.apply(l);
        }
        if let Some(w) = file.webhooks {
            self.webhooks.apply(w);
        }
        if let Some(d) = file.discovery {
            let settings = &mut self.discovery;
            settings.catalog = d.catalog.unwrap_or(settings.catalog);
            settings.public = d.public.unwrap_or(settings.public);
            settings.max_age_days = d.max_age_days.unwrap_or(settings.max_age_days).clamp(1, 3650);
        }
        if let Some(p) = file.plans {
            apply_plans(&mut self.plans, p)?;
        }
        Ok(())
    }

    fn apply_env(&mut self, env: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let non_empty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if let Some(v) = non_empty("TOLLGATE_LISTEN") {
            self.listen =
                v.parse().map_err(|_| ConfigError::Invalid(format!("TOLLGATE_LISTEN is not host:port: {v}")))?;
        }
        if let Some(v) = non_empty("TOLLGATE_DATABASE_URL") {
            self.database_url = DatabaseUrl::parse(&v)?;
        }
        if let Some(v) = non_empty("TOLLGATE_REDIS_URL") {
            self.redis_url = Some(parse_redis_url(&v)?);
        }
        if let Some(v) = non_empty("TOLLGATE_SOLANA_RPC_URL") {
            self.solana_rpc_url = Some(RpcUrl::new(v));
        }
        if let Some(v) = non_empty("TOLLGATE_SOLANA_FEE_PAYER") {
            self.solana_fee_payer = Some(PathBuf::from(v));
        }
        if let Some(v) = non_empty("TOLLGATE_EVM_RPC_URL") {
            self.evm_rpc_url = Some(RpcUrl::new(v));
        }
        if let Some(v) = non_empty("TOLLGATE_MASTER_KEY") {
            self.master_key = Some(Secret::new(v));
        }
        if let Some(v) = non_empty("TOLLGATE_EVM_SIGNER_KEY") {
            self.evm_signer_key = Some(Secret::new(v));
        }
        if let Some(v) = non_empty("TOLLGATE_ADMIN_TOKEN") {
            self.admin_token = Some(Secret::new(v));
        }
        if let Some(v) = non_empty("TOLLGATE_DEV") {
            self.dev = parse_bool("TOLLGATE_DEV", &v)?;
        }
        if let Some(v) = non_empty("TOLLGATE_PUBLIC_SUPPORTED") {
            self.public_supported = parse_bool("TOLLGATE_PUBLIC_SUPPORTED", &v)?;
        }
        if let Some(v) = non_empty("TOLLGATE_SOLANA_COMMITMENT") {
            self.solana_commitment = match v.as_str() {
                "confirmed" => SolanaCommitment::Confirmed,
                "finalized" => SolanaCommitment::Finalized,
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "TOLLGATE_SOLANA_COMMITMENT must be confirmed or finalized, got {v}"
                    )));
                }
            };
        }
        if let Some(v) = non_empty("TOLLGATE_LOG_FORMAT") {
            self.log_format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => {
                    return Err(ConfigError::Invalid(format!("TOLLGATE_LOG_FORMAT must be text or json, got {v}")));
                }
            };
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for plan in Plan::ALL {
            if self.plans.get(plan).rpm == 0 {
                return Err(ConfigError::Invalid(format!("plans.{}.rpm must be at least 1", plan.as_str())));
            }
        }
        if self.limits.max_body_bytes < 1024 {
            return Err(ConfigError::Invalid("limits.max_body_bytes must be at least 1024".into()));
        }
        if self.limits.idempotency_ttl_secs < 24 * 3600 {
            return Err(ConfigError::Invalid("limits.idempotency_ttl_secs must be at least 86400 (24 h)".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for chain in &self.evm {
            if chain.network.family() != tollgate_protocol::ChainFamily::Evm {
                return Err(ConfigError::Invalid(format!(
                    "[[evm]] network must be eip155:<id>, got {}",
                    chain.network
                )));
            }
            if !seen.insert(&chain.network) {
                return Err(ConfigError::Invalid(format!("[[evm]] lists {} twice", chain.network)));
            }
        }
        Ok(())
    }
}

/// What `serve` would run: checked before anything starts, so a daemon short of a setting
/// refuses with the setting's name instead of running half-configured.
impl Config {
    /// The chains this configuration serves, or why it cannot serve.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`], naming the setting to add or remove: no chain outside
    /// development mode; development mode beside a configured Solana RPC; development mode in a
    /// build without the embedded ledger.
    pub fn check_serve(&self) -> Result<(), ConfigError> {
        if self.dev {
            if !cfg!(feature = "embedded-ledger") {
                return Err(ConfigError::Invalid(
                    "development mode (--dev, TOLLGATE_DEV) needs the embedded Solana ledger, which this build leaves \
                     out: build with `--features embedded-ledger`, or configure your chains and drop --dev"
                        .into(),
                ));
            }
            if self.solana_rpc_url.is_some() {
                return Err(ConfigError::Invalid(
                    "development mode runs its own embedded Solana ledger: unset TOLLGATE_SOLANA_RPC_URL \
                     (solana_rpc_url), or drop --dev / TOLLGATE_DEV to use that RPC"
                        .into(),
                ));
            }
            return Ok(());
        }
        if self.solana_rpc_url.is_none() && self.evm_rpc_url.is_none() && self.evm.is_empty() {
            return Err(ConfigError::Invalid(
                "no chain configured: set TOLLGATE_SOLANA_RPC_URL (solana_rpc_url) and/or TOLLGATE_EVM_RPC_URL \
                 ([[evm]] in the config file), or run `serve --dev` (TOLLGATE_DEV=1) for the embedded development \
                 ledger"
                    .into(),
            ));
        }
        Ok(())
    }
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Invalid(format!("{name} must be true or false, got {v}"))),
    }
}

#[cfg(test)]
mod tests;
