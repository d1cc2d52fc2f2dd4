//! The embedded development ledger: surfpool's in-process Surfnet, a real SVM behind a real
//! Solana JSON-RPC server on 127.0.0.1, started offline. The daemon talks to it through the same
//! [`super::rpc::SolanaRpc`] it uses for devnet or mainnet.

use std::sync::Mutex;

use surfpool_sdk::Surfnet;

use crate::chains::ChainError;

/// A running Surfnet; stopped when dropped.
pub struct EmbeddedLedger {
    surfnet: Mutex<Surfnet>,
    rpc_url: String,
}

impl std::fmt::Debug for EmbeddedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedLedger").field("rpc_url", &self.rpc_url).finish_non_exhaustive()
    }
}

impl EmbeddedLedger {
    /// Starts an offline Surfnet on free loopback ports.
    ///
    /// Surfnet's start-up waits with a blocking RPC client (which needs a multi-threaded
    /// runtime), so it runs on a thread of its own with a small runtime of its own, away from
    /// the caller's.
    ///
    /// # Errors
    /// [`ChainError`] when the ledger cannot start.
    pub async fn start() -> Result<Self, ChainError> {
        // Surfnet picks free ports, then binds them: another process (or a parallel test) can
        // take a port in between. Such a start fails with "address in use" and is retried.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once().await {
                Err(ChainError(e))
                    if attempt < 5 && (e.contains("AddrInUse") || e.contains("Address already in use")) =>
                {
                    tracing::debug!(attempt, error = %e, "embedded ledger ports were taken; starting again");
                }
                other => return other,
            }
        }
    }

    async fn start_once() -> Result<Self, ChainError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("embedded-ledger-start".into())
            .spawn(move || {
                let started = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .map_err(|e| ChainError(format!("embedded ledger: {e}")))
                    .and_then(|rt| {
                        rt.block_on(Surfnet::builder().offline(true).start())
                            .map_err(|e| ChainError(format!("embedded ledger failed to start: {e}")))
                    });
                let _ = tx.send(started);
            })
            .map_err(|e| ChainError(format!("embedded ledger: {e}")))?;
        let surfnet = rx.await.map_err(|_| ChainError("embedded ledger start-up thread died".into()))??;
        let rpc_url = surfnet.rpc_url().to_owned();
        Ok(Self { surfnet: Mutex::new(surfnet), rpc_url })
    }

    /// The loopback JSON-RPC URL.
    #[must_use]
    pub fn rpc_url(&self) -> &str {
        &self.rpc_url
    }

    /// Stops the ledger now (it also stops when dropped).
    pub fn stop(&self) {
        if let Ok(mut s) = self.surfnet.lock()
            && let Err(e) = s.stop()
        {
            tracing::warn!(error = %e, "embedded ledger did not confirm shutdown");
        }
    }
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
