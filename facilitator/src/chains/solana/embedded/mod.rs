//! The embedded development ledger: a real SVM ([LiteSVM]: agave's program runtime with the
//! System, Token, Token-2022, Associated Token and Memo programs) behind a Solana JSON-RPC server
//! on 127.0.0.1, producing a block every [`SLOT_DURATION`]. The daemon talks to it through the
//! same [`super::rpc::SolanaRpc`] it uses for devnet or mainnet.
//!
//! [`ledger`] holds the cluster's state, [`rpc_server`] answers the JSON-RPC methods. Nothing is
//! persisted: a restarted ledger starts from its genesis again (same genesis hash, so the same
//! network id), with empty accounts.
//!
//! [LiteSVM]: https://docs.rs/litesvm

pub mod ledger;
mod rpc_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use solana_sdk::account::Account;
use solana_sdk::pubkey::Pubkey;

use crate::chains::ChainError;
use ledger::Ledger;

/// How often the ledger closes a block (a cluster's target slot time).
pub const SLOT_DURATION: Duration = Duration::from_millis(400);

/// A running ledger and its RPC server; stopped when dropped.
pub struct EmbeddedLedger {
    ledger: rpc_server::Shared,
    rpc_url: String,
    stop: Mutex<Option<(tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<()>)>>,
}

impl std::fmt::Debug for EmbeddedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedLedger").field("rpc_url", &self.rpc_url).finish_non_exhaustive()
    }
}

impl EmbeddedLedger {
    /// Starts a ledger at its genesis, its RPC on a free loopback port.
    ///
    /// The server and the block clock run on a thread of their own with a runtime of their own,
    /// so neither the caller's runtime (paused in tests, or a single thread kept busy) nor its
    /// shutdown stops the chain under the daemon.
    ///
    /// # Errors
    /// [`ChainError`] when no loopback port can be bound or the thread cannot start.
    pub async fn start() -> Result<Self, ChainError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| ChainError(format!("embedded ledger: cannot bind 127.0.0.1: {e}")))?;
        let port = listener.local_addr().map_err(|e| ChainError(format!("embedded ledger: {e}")))?.port();
        let mut ledger = Ledger::new().map_err(|e| ChainError(format!("embedded ledger: {e}")))?;
        ledger.produce_block(unix_now()); // the genesis block's clock reads 0
        let ledger: rpc_server::Shared = Arc::new(Mutex::new(ledger));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let served = ledger.clone();
        let thread = std::thread::Builder::new()
            .name("embedded-ledger".into())
            .spawn(move || serve(listener, served, stop_rx))
            .map_err(|e| ChainError(format!("embedded ledger: {e}")))?;
        Ok(Self { ledger, rpc_url: format!("http://127.0.0.1:{port}"), stop: Mutex::new(Some((stop_tx, thread))) })
    }

    /// The loopback JSON-RPC URL.
    #[must_use]
    pub fn rpc_url(&self) -> &str {
        &self.rpc_url
    }

    /// Produces `blocks` blocks at once (tests: a blockhash's expiry without waiting a minute).
    ///
    /// # Errors
    /// [`ChainError`] when the ledger has stopped after an internal failure.
    pub fn produce_blocks(&self, blocks: u64) -> Result<(), ChainError> {
        let mut ledger = self.lock()?;
        for _ in 0..blocks {
            ledger.produce_block(unix_now());
        }
        Ok(())
    }

    /// Writes an account as given (tests and development: mints, token accounts).
    ///
    /// # Errors
    /// [`ChainError`] for a sysvar or a program, or when the ledger has stopped.
    pub fn set_account(&self, address: Pubkey, account: Account) -> Result<(), ChainError> {
        self.lock()?.set_account(address, account).map_err(ChainError)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Ledger>, ChainError> {
        self.ledger.lock().map_err(|_| ChainError("the embedded ledger stopped after an internal failure".into()))
    }

    /// Stops the RPC server and the block clock now (they also stop when dropped); the port is
    /// closed when this returns.
    pub fn stop(&self) {
        let running = self.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some((stop, thread)) = running {
            let _ = stop.send(());
            if thread.join().is_err() {
                tracing::warn!("the embedded ledger's thread panicked");
            }
        }
    }
}

impl Drop for EmbeddedLedger {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The ledger's thread: the JSON-RPC server and a block every [`SLOT_DURATION`], until `stop`.
fn serve(listener: std::net::TcpListener, ledger: rpc_server::Shared, stop: tokio::sync::oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "embedded ledger: no runtime");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(e) => {
                tracing::error!(error = %e, "embedded ledger: cannot listen");
                return;
            }
        };
        let clock = ledger.clone();
        let blocks = async move {
            let mut interval = tokio::time::interval(SLOT_DURATION);
            // A slot the ledger could not close in time is not made up in a burst.
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    clock.lock().map(|mut ledger| ledger.produce_block(unix_now())).is_ok()
                }));
                if !matches!(closed, Ok(true)) {
                    tracing::error!("the embedded ledger failed and produces no more blocks");
                    std::future::pending::<()>().await;
                }
            }
        };
        let app = axum::Router::new()
            .route("/", axum::routing::post(rpc_server::handle))
            .layer(axum::extract::DefaultBodyLimit::max(rpc_server::MAX_REQUEST_BYTES))
            .with_state(ledger);
        tokio::select! {
            served = axum::serve(listener, app) => {
                if let Err(e) = served {
                    tracing::error!(error = %e, "embedded ledger: the RPC server stopped");
                }
            }
            () = blocks => {}
            _ = stop => {}
        }
    });
}

/// Lamports the embedded ledger gives the facilitator's fee payer at start-up.
pub const FEE_PAYER_FUNDING: u64 = 100 * super::LAMPORTS_PER_SOL;

/// Airdrops [`FEE_PAYER_FUNDING`] to `keypair` on the embedded ledger and waits until it lands.
///
/// # Errors
/// [`ChainError`] when the airdrop is refused or does not confirm within 30 s.
pub async fn fund(rpc: &super::rpc::SolanaRpc, keypair: &solana_sdk::signature::Keypair) -> Result<(), ChainError> {
    use solana_sdk::signer::Signer as _;
    let signature = rpc.request_airdrop(&keypair.pubkey(), FEE_PAYER_FUNDING).await?;
    match rpc.wait_for_outcome(&signature, std::time::Duration::from_secs(30)).await? {
        Some(crate::chains::TxOutcome::Confirmed { .. }) => Ok(()),
        other => Err(ChainError(format!("funding the fee payer did not confirm: {other:?}"))),
    }
}
