//! The application assembled: [`AppState`], everything a request handler can reach, built over
//! a store and chains ([`AppState::new`]) or from configuration ([`AppState::from_config`]:
//! storage opened and checked, chains connected, rate limits shared when Redis is configured).

use std::sync::Arc;
use std::time::Duration;

use crate::auth::Authenticator;
use crate::auth::rate_limit::InMemoryRateLimiter;
use crate::chains::{self, Chains};
use crate::clock::{SharedClock, SystemClock};
use crate::config::{self, Config};
use crate::store::{AccountStore as _, SqlStore, Store, WebhookStore as _};
use crate::wallets::{self, MasterKey};
use crate::{auth, events, payment, telemetry};

/// Everything a request handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Configuration.
    pub config: Arc<Config>,
    /// Storage.
    pub store: Arc<dyn Store>,
    /// Authentication, plans, rate limits.
    pub auth: Arc<Authenticator>,
    /// Time.
    pub clock: SharedClock,
    /// Chain backends.
    pub chains: Arc<Chains>,
    /// Seals custodial wallet keys; `None` disables custodial wallets.
    pub master_key: Option<Arc<MasterKey>>,
    /// This instance's payment changes, for the WebSocket feed.
    pub events: events::EventBus,
    /// The last probe of the chains' RPCs for `/readyz`: when, each chain's entry, all answered.
    pub readiness: Arc<tokio::sync::Mutex<Option<ReadinessProbe>>>,
    /// The discovery catalog's writer.
    pub catalog: Arc<crate::discovery::Catalog>,
}

/// A probe of the chains' RPCs: when, each network's entry, whether all answered.
pub type ReadinessProbe = (std::time::Instant, serde_json::Map<String, serde_json::Value>, bool);

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("config", &self.config).field("auth", &self.auth).finish_non_exhaustive()
    }
}

impl AppState {
    /// A state over an existing store, with the given clock and no chain backend.
    #[must_use]
    pub fn new(config: Config, store: Arc<dyn Store>, clock: SharedClock) -> Self {
        // Counters count from the start (the recorder is the process's, installed once).
        let _ = telemetry::install();
        // Every payment change made through this state is published to its WebSocket listeners.
        let events = events::EventBus::default();
        // On PostgreSQL every instance hears every change from the database instead
        // (crate::runtime::follow_announcements).
        if !store.announces_changes() {
            let bus = events.clone();
            store.on_change(Arc::new(move |stored| bus.publish(stored)));
        }
        let auth = Authenticator::new(
            store.clone(),
            config.plans.clone(),
            Arc::new(InMemoryRateLimiter::new()),
            clock.clone(),
            Duration::from_secs(config.limits.key_cache_ttl_secs),
        );
        Self {
            config: Arc::new(config),
            catalog: Arc::new(crate::discovery::Catalog::new(store.clone())),
            store,
            auth: Arc::new(auth),
            clock,
            chains: Arc::new(Chains::none()),
            master_key: None,
            events,
            readiness: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// The same state counting rate limits with `limiter` (e.g. shared through Redis).
    #[must_use]
    pub fn with_rate_limiter(mut self, limiter: Arc<dyn auth::rate_limit::RateLimiter>) -> Self {
        self.auth = Arc::new(Authenticator::new(
            self.store.clone(),
            self.config.plans.clone(),
            limiter,
            self.clock.clone(),
            Duration::from_secs(self.config.limits.key_cache_ttl_secs),
        ));
        self
    }

    /// The same state serving these chains.
    #[must_use]
    pub fn with_chains(mut self, chains: Chains) -> Self {
        self.chains = Arc::new(chains);
        self
    }

    /// The payment service over this state's store, chains and master key.
    #[must_use]
    pub fn payments(&self) -> payment::Payments {
        payment::Payments::new(self.store.clone(), self.clock.clone(), self.chains.clone(), self.master_key.clone())
    }

    /// The `batch-settlement` service over this state's chains.
    #[must_use]
    pub fn channels(&self) -> crate::channels::Channels {
        crate::channels::Channels::new(self.chains.clone(), self.clock.clone(), self.payments(), self.store.clone())
    }

    /// The same state with custodial wallets sealed under `key`.
    #[must_use]
    pub fn with_master_key(mut self, key: MasterKey) -> Self {
        self.master_key = Some(Arc::new(key));
        self
    }

    /// Connects storage (running migrations) and builds the state with the system clock.
    ///
    /// # Errors
    /// When the database cannot be opened or migrated.
    pub async fn from_config(config: Config) -> anyhow::Result<Self> {
        config.check_serve()?;
        let limits = &config.limits;
        let store = SqlStore::connect_with(
            &config.database_url,
            limits.database_max_connections,
            limits.nonce_lease_connections,
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", config.database_url))?;
        let master_key = wallets::resolve_master_key(&config)?;
        check_sealed_rows(&store, master_key.as_ref(), &config).await?;
        let mut chains = Chains::none();
        if let Some(solana) = solana_backend(&config).await? {
            chains = chains.with_solana(solana);
        }
        // Several instances on one PostgreSQL take turns with each sending account's nonce.
        let shared_nonces = config.database_url.is_postgres().then(|| Arc::new(store.clone()));
        for mut backend in evm_backends(&config).await? {
            if let Some(store) = &shared_nonces {
                backend = backend.with_shared_nonces(store.clone());
            }
            // The first settlement need not read the fees and the nonce itself.
            backend.warm_for_settlement().await;
            chains = chains.with_evm(backend);
        }
        let limiter: Option<Arc<dyn auth::rate_limit::RateLimiter>> = match &config.redis_url {
            Some(url) => Some(Arc::new(
                auth::rate_limit::RedisRateLimiter::connect(url.expose()).await.map_err(|e| anyhow::anyhow!(e))?,
            )),
            None => None,
        };
        let mut state = Self::new(config, Arc::new(store), Arc::new(SystemClock)).with_chains(chains);
        if let Some(limiter) = limiter {
            state = state.with_rate_limiter(limiter);
        }
        state.master_key = master_key.map(Arc::new);
        Ok(state)
    }
}

/// Refuses to start when what the database holds sealed (custodial wallets, webhook signing
/// secrets) could not be opened: no master key at all, or one that is not the key they were
/// sealed with (another instance's, or development mode's freshly generated one). Every send
/// from those wallets and every webhook delivery would fail. The oldest row of each is tried.
async fn check_sealed_rows(store: &SqlStore, key: Option<&MasterKey>, config: &Config) -> anyhow::Result<()> {
    let wallet = store.first_wallet().await?;
    let endpoint = store.first_webhook_endpoint().await?;
    let Some(key) = key else {
        if wallet.is_some() || endpoint.is_some() {
            anyhow::bail!(
                "the database holds {} custodial wallet(s) and webhook endpoints sealed with a master key: set \
                 TOLLGATE_MASTER_KEY to that key (development mode kept it in {})",
                store.count_wallets().await?,
                config.dev_master_key_path().display()
            );
        }
        tracing::warn!("no TOLLGATE_MASTER_KEY: custodial wallets (hosted /payment/send) and webhooks are disabled");
        return Ok(());
    };
    let opens = wallet.as_ref().is_none_or(|w| key.open(&w.address, &w.sealed_secret).is_ok())
        && endpoint.as_ref().is_none_or(|e| key.open(&e.id, &e.sealed_secret).is_ok());
    if !opens {
        anyhow::bail!(
            "TOLLGATE_MASTER_KEY does not open the custodial wallets and webhook secrets sealed in this database: \
             set the key they were sealed with (every instance uses the same one)"
        );
    }
    Ok(())
}

/// The configured Solana RPC with the configured fee payer; in development mode the embedded
/// ledger, with a funded fee payer of its own unless one is configured; otherwise none.
async fn solana_backend(config: &Config) -> anyhow::Result<Option<chains::SolanaBackend>> {
    use chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
    let policy = chains::solana::spl::SponsorPolicy {
        max_compute_units: config.limits.sponsor_max_compute_units,
        max_compute_unit_price: config.limits.sponsor_max_compute_unit_price,
    };
    let configured_sponsor = match &config.solana_fee_payer {
        Some(path) => Some(chains::Sponsor::new(wallets::read_solana_keypair(path)?, policy)),
        None => None,
    };
    let depth = match config.solana_commitment {
        config::SolanaCommitment::Confirmed => solana_commitment_config::CommitmentConfig::confirmed(),
        config::SolanaCommitment::Finalized => solana_commitment_config::CommitmentConfig::finalized(),
    };
    if let Some(url) = &config.solana_rpc_url {
        let rpc = SolanaRpc::connect(url.expose(), DEFAULT_CALL_TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the Solana RPC {url}: {e}"))?
            .with_verdict_commitment(depth);
        tracing::info!(network = %rpc.network(), rpc = %url, "Solana RPC connected");
        let backend = chains::SolanaBackend::new(rpc);
        return Ok(Some(match configured_sponsor {
            Some(sponsor) => backend.with_sponsor(sponsor),
            None => {
                tracing::warn!("no TOLLGATE_SOLANA_FEE_PAYER: x402 `exact` (SPL) payments are disabled on Solana");
                backend
            }
        }));
    }
    if !config.dev {
        return Ok(None);
    }
    #[cfg(feature = "embedded-ledger")]
    {
        let ledger = chains::solana::embedded::EmbeddedLedger::start().await?;
        let rpc = SolanaRpc::connect(ledger.rpc_url(), DEFAULT_CALL_TIMEOUT).await?.with_verdict_commitment(depth);
        tracing::warn!(network = %rpc.network(), rpc = ledger.rpc_url(), "development mode: embedded Solana ledger started (offline; nothing on it is real money)");
        let sponsor = match configured_sponsor {
            Some(s) => s,
            None => chains::Sponsor::new(solana_sdk::signature::Keypair::new(), policy),
        };
        chains::solana::embedded::fund(&rpc, &sponsor.keypair).await?;
        Ok(Some(chains::SolanaBackend::new(rpc).with_embedded(ledger).with_sponsor(sponsor)))
    }
    #[cfg(not(feature = "embedded-ledger"))]
    anyhow::bail!("development mode needs the embedded ledger, which this build leaves out")
}

/// The configured EVM chains: `TOLLGATE_EVM_RPC_URL` (its chain id asked from the node) and each
/// `[[evm]]` entry, whose node must report the configured chain id.
async fn evm_backends(config: &Config) -> anyhow::Result<Vec<chains::evm::EvmBackend>> {
    use chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
    let mut backends = Vec::new();
    let configured = config.evm.iter().map(|c| (Some(&c.network), &c.rpc_url));
    for (expected, url) in config.evm_rpc_url.iter().map(|u| (None, u)).chain(configured) {
        let rpc = EvmRpc::connect(url.expose(), DEFAULT_CALL_TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the EVM RPC {url}: {e}"))?;
        if let Some(expected) = expected
            && expected != rpc.network()
        {
            anyhow::bail!("the EVM RPC {url} serves {}, not the configured {expected}", rpc.network());
        }
        tracing::info!(network = %rpc.network(), rpc = %url, "EVM RPC connected");
        let mut backend = chains::evm::EvmBackend::new(rpc);
        backend.confirmations = config.limits.evm_confirmations;
        backend.max_gas = config.limits.evm_max_gas;
        backend.max_fee_per_gas = config.limits.evm_max_fee_per_gas;
        backend.valid_before_margin_secs = config.limits.evm_valid_before_margin_secs;
        let gap = i64::try_from(config.limits.evm_nonce_gap_secs).ok().and_then(chrono::Duration::try_seconds);
        backend = backend.with_nonce_gap(gap.unwrap_or(chrono::Duration::MAX));
        if let Some(key) = &config.evm_signer_key {
            let signer: alloy::signers::local::PrivateKeySigner = key
                .expose()
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("TOLLGATE_EVM_SIGNER_KEY is not a hex secp256k1 private key"))?;
            tracing::info!(network = %backend.rpc.network(), signer = %signer.address(), "x402 exact (EIP-3009) settles from this account");
            backend = backend.with_signer(signer);
        } else {
            tracing::warn!(network = %backend.rpc.network(), "no TOLLGATE_EVM_SIGNER_KEY: x402 exact (EIP-3009) is disabled on this chain");
        }
        backends.push(backend);
    }
    Ok(backends)
}
