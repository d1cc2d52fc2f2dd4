//! EVM JSON-RPC with bounded calls (alloy).
//!
//! Every call has a deadline; whatever goes wrong is a [`ChainError`], never a panic or a hang.
//! Sending tells a transaction the node refused ([`SendError::Rejected`]: it will not land) from
//! one whose fate is unknown ([`SendError::Uncertain`]: it may still land, so it is watched).
//!
//! Fees are not read for every transaction: the node's suggestion (`eth_feeHistory`) is kept, and
//! the receipt of each transaction this connection sent keeps its base fee current (the price it
//! paid less the tip it offered), so a settlement signs with what is known while a newer reading
//! is fetched in the background when one is due; only a suggestion older than [`FEES_MAX_AGE`]
//! (or none yet) is waited for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate_protocol::redact::redact_urls;

use alloy::consensus::Transaction as _;
use alloy::eips::eip1559::Eip1559Estimation;
use alloy::eips::eip2718::Decodable2718 as _;
use alloy::network::ReceiptResponse as _;
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use tollgate_protocol::Network;

use super::coalesce::Coalescer;
use crate::chains::{ChainError, SendError, TxOutcome};

/// An EVM node reached over JSON-RPC (cheap to clone: the connection is shared).
#[derive(Clone)]
pub struct EvmRpc {
    provider: RootProvider,
    network: Network,
    chain_id: u64,
    url: String,
    call_timeout: Duration,
    fees: Arc<FeeCache>,
    sends: Arc<SyncSends>,
    calls: Arc<Coalescer>,
}

/// A send waited for longer than this tells that blocks are not instant on this chain: it is
/// sent without waiting from then on (waiting would hold the sending account's next nonce for
/// as long as a block takes).
pub const SYNC_SEND_SLOW: Duration = Duration::from_millis(250);
/// Receipts handed back by sends and not read yet, at most (the pipeline reads each at once).
const LANDED_KEPT: usize = 256;

/// Whether this node takes `eth_sendRawTransactionSync` (EIP-7966), which answers a send with the
/// transaction's receipt once it is mined: on a chain whose blocks are instant (anvil's automine,
/// a sequencer's preconfirmations) a settlement is then sent and read in one call. Tried on the
/// first send; given up for good when the node does not know the method or a send waits longer
/// than [`SYNC_SEND_SLOW`].
#[derive(Default)]
struct SyncSends {
    /// 0: not tried yet; 1: in use; 2: given up.
    state: std::sync::atomic::AtomicU8,
    /// Receipts the sends answered with, until read.
    landed: Mutex<HashMap<B256, TransactionReceipt>>,
}

const SYNC_IN_USE: u8 = 1;
const SYNC_GIVEN_UP: u8 = 2;

impl SyncSends {
    fn state(&self) -> u8 {
        self.state.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set(&self, to: u8) {
        // Never back from given up.
        let _ = self.state.fetch_max(to, std::sync::atomic::Ordering::AcqRel);
    }

    fn landed(&self) -> std::sync::MutexGuard<'_, HashMap<B256, TransactionReceipt>> {
        self.landed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, receipt: TransactionReceipt) {
        let mut landed = self.landed();
        if landed.len() >= LANDED_KEPT {
            landed.clear(); // never read: the node has them all the same
        }
        landed.insert(receipt.transaction_hash, receipt);
    }
}

/// Whether a node's error answer to `eth_sendRawTransactionSync` says it does not serve the method.
fn unknown_method(code: i64, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    code == -32601
        || (message.contains("method")
            && ["not found", "not supported", "unsupported", "does not exist", "not available", "unknown"]
                .iter()
                .any(|words| message.contains(words)))
}

/// Whether it says the transaction was taken into the pool but not mined in the time it waited
/// (EIP-7966's code 4; anvil's words). Nothing looser: a send believed taken that was not would
/// leave a gap in the account's nonces.
fn not_mined_in_time(code: i64, message: &str) -> bool {
    code == 4 || message == "Transaction confirmation timeout"
}

/// Whether a node's error answer to a plain send says it checked the transaction and refused
/// it for good (EIP-1474's -32003 "transaction rejected", or the refusals every node words
/// alike: a nonce or fee too low, funds short, a bad signature or chain id, a limit exceeded).
/// Anything else — an internal error, a gateway's, a timeout — may come after the node took the
/// transaction or passed it on: it may still land, so it is watched until it does or its nonce
/// is taken, never failed on the node's word.
fn refused_for_good(code: i64, message: &str) -> bool {
    const REFUSALS: [&str; 13] = [
        "nonce too low",
        "nonce too high",
        "insufficient funds",
        "underpriced",
        "intrinsic gas too low",
        "gas limit",
        "fee cap",
        "less than block base fee",
        "invalid sender",
        "invalid signature",
        "chain id",
        "type not supported",
        "exceeds",
    ];
    let message = message.to_ascii_lowercase();
    code == -32003 || REFUSALS.iter().any(|words| message.contains(words))
}

/// How long a base fee (read, or learnt from a receipt) is used as it is.
pub const FEES_FRESH: Duration = Duration::from_secs(3);
/// How long the node's suggested tip is used before it is read again (in the background).
pub const TIP_FRESH: Duration = Duration::from_secs(60);
/// How long a base fee is still signed with while a newer one is read (one L1 block): the
/// `maxFeePerGas` it gives allows for the base fee doubling, which takes six full blocks.
pub const FEES_MAX_AGE: Duration = Duration::from_secs(12);

/// The fees known, and when the node suggested them and when their base fee was last seen.
#[derive(Debug, Clone, Copy)]
struct KnownFees {
    fees: Eip1559Estimation,
    /// The max fee the node suggested: what receipts tell only raises it.
    suggested: u128,
    /// The newest block a receipt told the base fee of.
    block: u64,
    read: tokio::time::Instant,
    seen: tokio::time::Instant,
}

/// The fees known, and whether a newer suggestion is being read.
#[derive(Default)]
struct FeeCache {
    known: Mutex<Option<KnownFees>>,
    refreshing: std::sync::atomic::AtomicBool,
}

/// What the fees known are good for, by their age.
#[derive(Debug, PartialEq, Eq)]
enum FeeAge {
    /// Sign with them.
    Fresh(Eip1559Estimation),
    /// Sign with them, and read newer ones in the background.
    Aging(Eip1559Estimation),
    /// Read new ones first.
    Stale,
}

impl FeeCache {
    fn known(&self) -> std::sync::MutexGuard<'_, Option<KnownFees>> {
        self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn look(&self, now: tokio::time::Instant) -> FeeAge {
        let Some(k) = *self.known() else { return FeeAge::Stale };
        let seen = now.saturating_duration_since(k.seen);
        if seen < FEES_FRESH && now.saturating_duration_since(k.read) < TIP_FRESH {
            FeeAge::Fresh(k.fees)
        } else if seen < FEES_MAX_AGE {
            FeeAge::Aging(k.fees)
        } else {
            FeeAge::Stale
        }
    }

    fn read(&self, fees: Eip1559Estimation, at: tokio::time::Instant) {
        let mut known = self.known();
        let block = known.map_or(0, |k| k.block);
        *known = Some(KnownFees { fees, suggested: fees.max_fee_per_gas, block, read: at, seen: at });
    }

    /// A transaction offering `tip` (at most `max_fee`) per gas was mined in `block` at `paid`
    /// per gas: when it paid less than its cap, the block's base fee was `paid - tip`, and the
    /// fees known follow it (twice the base fee, plus the suggested tip, as the node's suggestion
    /// is made) — upwards only from the node's suggestion (a chain whose receipts show less than
    /// was paid lowers nothing), and only from a block newer than any told before (a receipt read
    /// again, or an old one, tells nothing new).
    fn mined(&self, (max_fee, tip): (u128, u128), paid: u128, block: u64, at: tokio::time::Instant) {
        let Some(base) = paid.checked_sub(tip).filter(|_| paid < max_fee) else { return };
        if let Some(k) = self.known().as_mut()
            && block > k.block
        {
            let tip = k.fees.max_priority_fee_per_gas;
            k.fees.max_fee_per_gas = base.saturating_mul(2).saturating_add(tip).max(k.suggested);
            k.block = block;
            k.seen = at;
        }
    }
}

impl std::fmt::Debug for EvmRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmRpc").field("network", &self.network).field("url", &self.url).finish_non_exhaustive()
    }
}

/// Default deadline of one RPC call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A transaction as the chain holds it, with its receipt when mined.
#[derive(Debug, Clone)]
pub struct MinedTx {
    /// Sender.
    pub from: Address,
    /// Recipient (`None` for contract creation).
    pub to: Option<Address>,
    /// Wei moved.
    pub value: U256,
    /// Call data.
    pub input: Bytes,
    /// Chain id it was signed for.
    pub chain_id: Option<u64>,
    /// Whether it succeeded.
    pub success: bool,
    /// Fee paid, wei.
    pub fee: u128,
    /// Block it was mined in.
    pub block: u64,
    /// ERC-20 `Transfer` events it emitted: (token, from, to, value).
    pub token_transfers: Vec<(Address, Address, Address, U256)>,
    /// x402 `batch-settlement` deposits it made: the settlement contract's `Deposited` events
    /// (payer, amount).
    pub deposits: Vec<(Address, u128)>,
    /// What its sender signed (its signing hash).
    pub signed: B256,
    /// Its sender's nonce it used.
    pub nonce: u64,
    /// EIP-1559: its max fee and tip per gas, and what it paid per gas.
    pub priced: Option<((u128, u128), u128)>,
}

/// `keccak256("Transfer(address,address,uint256)")`, the ERC-20 transfer event's topic.
const TRANSFER_TOPIC: B256 =
    alloy::primitives::b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// The ERC-20 `Transfer` events among a receipt's logs.
fn token_transfers(receipt: &TransactionReceipt) -> Vec<(Address, Address, Address, U256)> {
    receipt
        .inner
        .logs()
        .iter()
        .filter_map(|log| {
            let topics = log.topics();
            let [topic, from, to] = topics else { return None };
            let value: [u8; 32] = log.data().data.as_ref().try_into().ok()?;
            (*topic == TRANSFER_TOPIC).then(|| {
                (log.address(), Address::from_word(*from), Address::from_word(*to), U256::from_be_bytes(value))
            })
        })
        .collect()
}

/// The x402 `batch-settlement` deposits among a receipt's logs: `Deposited` events emitted by
/// the settlement contract itself (payer, amount).
fn batch_deposits(receipt: &TransactionReceipt) -> Vec<(Address, u128)> {
    use alloy::sol_types::SolEvent as _;
    use tollgate_encoding::batch::{BATCH_SETTLEMENT, BatchSettlement::Deposited};
    receipt
        .inner
        .logs()
        .iter()
        .filter(|log| log.address() == BATCH_SETTLEMENT)
        .filter_map(|log| Deposited::decode_log(&log.inner).ok())
        .map(|event| (event.payer, event.amount))
        .collect()
}

impl EvmRpc {
    /// Connects and asks the node for its chain id.
    ///
    /// # Errors
    /// [`ChainError`] for a malformed URL or a node that does not answer in time.
    pub async fn connect(url: &str, call_timeout: Duration) -> Result<Self, ChainError> {
        let parsed = url.parse().map_err(|_| ChainError(format!("not an RPC URL: {url}")))?;
        let provider = RootProvider::new_http(parsed);
        let chain_id = bounded(call_timeout, "eth_chainId", provider.get_chain_id()).await?;
        Ok(Self {
            provider,
            network: Network::eip155(chain_id),
            chain_id,
            url: url.to_owned(),
            call_timeout,
            fees: Arc::default(),
            sends: Arc::default(),
            calls: Arc::new(Coalescer::new(call_timeout)),
        })
    }

    /// The chain's CAIP-2 id (`eip155:<chainId>`).
    #[must_use]
    pub const fn network(&self) -> &Network {
        &self.network
    }

    /// The chain id.
    #[must_use]
    pub const fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The underlying provider (tests drive anvil's own methods through it).
    #[must_use]
    pub const fn provider(&self) -> &RootProvider {
        &self.provider
    }

    /// Wei held by `account`.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn balance(&self, account: Address) -> Result<U256, ChainError> {
        bounded(self.call_timeout, "eth_getBalance", self.provider.get_balance(account).into_future()).await
    }

    /// The next nonce of `account`, counting transactions still in the node's pool.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn pending_nonce(&self, account: Address) -> Result<u64, ChainError> {
        bounded(
            self.call_timeout,
            "eth_getTransactionCount",
            self.provider.get_transaction_count(account).pending().into_future(),
        )
        .await
    }

    /// The nonce of `account` in the latest block (transactions mined).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn mined_nonce(&self, account: Address) -> Result<u64, ChainError> {
        bounded(
            self.call_timeout,
            "eth_getTransactionCount",
            self.provider.get_transaction_count(account).latest().into_future(),
        )
        .await
    }

    /// EIP-1559 fees (max fee and tip per gas) as known (see the module's notes): fresh, or while
    /// newer ones are read in the background; read first when older than [`FEES_MAX_AGE`].
    ///
    /// # Errors
    /// [`ChainError`] when they must be read and the node fails or times out.
    pub async fn fees(&self) -> Result<Eip1559Estimation, ChainError> {
        match self.fees.look(tokio::time::Instant::now()) {
            FeeAge::Fresh(fees) => Ok(fees),
            FeeAge::Aging(fees) => {
                self.refresh_fees();
                Ok(fees)
            }
            FeeAge::Stale => self.read_fees().await,
        }
    }

    /// Reads the fees now unless fresh ones are known or a reading is under way (a verify does
    /// this, beside its own call, for the settlement that usually follows it).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn warm_fees(&self) -> Result<(), ChainError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Lowers the flag however the reading ends (a caller that hangs up drops it midway).
        struct Reading<'a>(&'a AtomicBool);
        impl Drop for Reading<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        if matches!(self.fees.look(tokio::time::Instant::now()), FeeAge::Fresh(_))
            || self.fees.refreshing.swap(true, Ordering::AcqRel)
        {
            return Ok(());
        }
        let _reading = Reading(&self.fees.refreshing);
        self.read_fees().await.map(|_| ())
    }

    /// The facilitator's own transaction `tx` was mined: its receipt tells the base fee of its
    /// block (see [`FeeCache::mined`]).
    pub fn learn_fees(&self, tx: &MinedTx) {
        if let Some((cap, paid)) = tx.priced {
            self.fees.mined(cap, paid, tx.block, tokio::time::Instant::now());
        }
    }

    /// Starts one background reading of the fees (none when one is under way).
    fn refresh_fees(&self) {
        // Most settlements while the fees age find a reading under way: no task, no clone.
        if self.fees.refreshing.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let rpc = self.clone();
        tokio::spawn(async move {
            if let Err(e) = rpc.warm_fees().await {
                tracing::debug!(error = %e, "could not read the fees; the last reading stands");
            }
        });
    }

    /// Reads the node's fee suggestion now and keeps it.
    async fn read_fees(&self) -> Result<Eip1559Estimation, ChainError> {
        let fees = bounded(self.call_timeout, "eth_feeHistory", self.provider.estimate_eip1559_fees()).await?;
        self.fees.read(fees, tokio::time::Instant::now());
        Ok(fees)
    }

    /// The latest block number.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn block_number(&self) -> Result<u64, ChainError> {
        bounded(self.call_timeout, "eth_blockNumber", self.provider.get_block_number().into_future()).await
    }

    /// Gas a call would use.
    ///
    /// # Errors
    /// [`ChainError`] when it would revert, or the node fails or times out.
    pub async fn estimate_gas(&self, tx: TransactionRequest) -> Result<u64, ChainError> {
        bounded(self.call_timeout, "eth_estimateGas", self.provider.estimate_gas(tx).into_future()).await
    }

    /// The result of a read-only call.
    ///
    /// # Errors
    /// [`ChainError`] when it reverts, or the node fails or times out.
    pub async fn call(&self, tx: TransactionRequest) -> Result<Bytes, ChainError> {
        bounded(self.call_timeout, "eth_call", self.calls.call(&self.provider, tx)).await
    }

    /// Runs a call without sending it: `Ok(Ok(output))` when it succeeds, `Ok(Err(why))` when the
    /// node answers that it fails (a revert, out of gas: its own words), `Err` when the node
    /// cannot be asked.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn simulate(&self, tx: TransactionRequest) -> Result<Result<Bytes, String>, ChainError> {
        bounded(self.call_timeout, "eth_call", verdict(self.calls.call(&self.provider, tx))).await
    }

    /// Gas a call would use, as [`Self::simulate`] answers: `Ok(Err(why))` when it would fail.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn estimate(&self, tx: TransactionRequest) -> Result<Result<u64, String>, ChainError> {
        bounded(self.call_timeout, "eth_estimateGas", verdict(self.provider.estimate_gas(tx).into_future())).await
    }

    /// Code deployed at `address` (empty for an account without code).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn code(&self, address: Address) -> Result<Bytes, ChainError> {
        bounded(self.call_timeout, "eth_getCode", self.provider.get_code_at(address).into_future()).await
    }

    /// Broadcasts a signed transaction (EIP-2718 bytes): with `eth_sendRawTransactionSync` where
    /// the node serves it and mines at once (its receipt is then kept for [`Self::receipt`]), else
    /// `eth_sendRawTransaction`.
    ///
    /// # Errors
    /// [`SendError::Rejected`] when the node refused it, [`SendError::Uncertain`] when the answer
    /// was lost or late.
    pub async fn send_raw(&self, tx: &[u8]) -> Result<B256, SendError> {
        if self.sends.state() == SYNC_GIVEN_UP {
            return self.send_raw_async(tx).await;
        }
        let started = tokio::time::Instant::now();
        let answer = tokio::time::timeout(self.call_timeout, self.provider.send_raw_transaction_sync(tx)).await;
        if started.elapsed() > SYNC_SEND_SLOW {
            self.sends.set(SYNC_GIVEN_UP);
            tracing::info!(network = %self.network, "blocks are not instant here: transactions are sent without waiting");
        }
        let error = match answer {
            Err(_) => {
                return Err(SendError::Uncertain(format!(
                    "eth_sendRawTransactionSync: no answer within {:?}",
                    self.call_timeout
                )));
            }
            Ok(Ok(receipt)) if receipt.transaction_hash == alloy::primitives::keccak256(tx) => {
                self.sends.set(SYNC_IN_USE);
                let hash = receipt.transaction_hash;
                self.sends.keep(receipt);
                return Ok(hash);
            }
            // A receipt of another transaction: the node's word on this one is unknown.
            Ok(Ok(other)) => {
                return Err(SendError::Uncertain(format!(
                    "eth_sendRawTransactionSync answered with the receipt of {}",
                    other.transaction_hash
                )));
            }
            Ok(Err(e)) => e,
        };
        match error.as_error_resp() {
            // Not served here: sent the plain way, now and from now on.
            Some(resp) if unknown_method(resp.code, &resp.message) => {
                self.sends.set(SYNC_GIVEN_UP);
                self.send_raw_async(tx).await
            }
            // In the pool, not mined yet: sent, and watched as any other.
            Some(resp) if not_mined_in_time(resp.code, &resp.message) => Ok(alloy::primitives::keccak256(tx)),
            // Anything else, taken or not (a node may fail after taking it, waiting for its
            // receipt): the plain send says which ("already known" when it was taken).
            Some(_) => self.send_raw_async(tx).await,
            None => Err(SendError::Uncertain(redact_urls(&error.to_string()))),
        }
    }

    /// Broadcasts a signed transaction without waiting for it to be mined.
    async fn send_raw_async(&self, tx: &[u8]) -> Result<B256, SendError> {
        let sending = self.provider.send_raw_transaction(tx);
        match tokio::time::timeout(self.call_timeout, sending).await {
            Err(_) => {
                Err(SendError::Uncertain(format!("eth_sendRawTransaction: no answer within {:?}", self.call_timeout)))
            }
            Ok(Ok(pending)) => Ok(*pending.tx_hash()),
            Ok(Err(e)) => match e.as_error_resp() {
                // The node has it already (a retry of our own broadcast): it is in flight.
                Some(resp) if resp.message.contains("already known") || resp.message.contains("already imported") => {
                    Err(SendError::Uncertain(resp.message.to_string()))
                }
                Some(resp) if refused_for_good(resp.code, &resp.message) => {
                    Err(SendError::Rejected(resp.message.to_string()))
                }
                Some(resp) => Err(SendError::Uncertain(resp.message.to_string())),
                None => Err(SendError::Uncertain(redact_urls(&e.to_string()))),
            },
        }
    }

    /// A transaction's receipt, `None` while it is not mined.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn receipt(&self, hash: B256) -> Result<Option<TransactionReceipt>, ChainError> {
        if let Some(receipt) = self.sends.landed().remove(&hash) {
            return Ok(Some(receipt));
        }
        bounded(
            self.call_timeout,
            "eth_getTransactionReceipt",
            self.provider.get_transaction_receipt(hash).into_future(),
        )
        .await
    }

    /// A mined transaction with what its receipt says; `None` while it is not mined. `sent`: the
    /// signed bytes the caller broadcast, when it has them; if they hash to `hash` the transaction
    /// is read from them (one call, the receipt), else asked of the node as well.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn mined(&self, hash: B256, sent: Option<&[u8]>) -> Result<Option<MinedTx>, ChainError> {
        let Some(receipt) = self.receipt(hash).await? else { return Ok(None) };
        let ours = sent.and_then(|raw| alloy::consensus::TxEnvelope::decode_2718_exact(raw).ok());
        let tx = match ours {
            Some(envelope) if *envelope.tx_hash() == hash => envelope,
            _ => bounded(
                self.call_timeout,
                "eth_getTransactionByHash",
                self.provider.get_transaction_by_hash(hash).into_future(),
            )
            .await?
            .ok_or_else(|| ChainError(format!("the node has a receipt but no transaction for {hash}")))?
            .inner
            .into_inner(),
        };
        Ok(Some(MinedTx {
            from: receipt.from,
            to: tx.to(),
            value: tx.value(),
            input: tx.input().clone(),
            chain_id: tx.chain_id(),
            success: receipt.status(),
            fee: receipt.cost(),
            block: receipt.block_number.unwrap_or_default(),
            token_transfers: token_transfers(&receipt),
            deposits: batch_deposits(&receipt),
            signed: tx.signature_hash(),
            nonce: tx.nonce(),
            priced: tx.max_priority_fee_per_gas().map(|tip| ((tx.max_fee_per_gas(), tip), receipt.effective_gas_price)),
        }))
    }

    /// Polls a transaction until it is mined or `budget` runs out (`None` then).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn wait_for_outcome(&self, hash: B256, budget: Duration) -> Result<Option<TxOutcome>, ChainError> {
        let deadline = tokio::time::Instant::now() + budget;
        for attempt in 0.. {
            if let Some(outcome) = self.outcome(hash).await? {
                return Ok(Some(outcome));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(crate::chains::poll_delay(attempt, Duration::from_millis(50))).await;
        }
        Ok(None)
    }

    /// The verdict of a mined transaction (from its receipt), `None` while it is not mined.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn outcome(&self, hash: B256) -> Result<Option<TxOutcome>, ChainError> {
        Ok(self.receipt(hash).await?.map(|r| {
            if r.status() {
                TxOutcome::Confirmed { fee: Some(tollgate_protocol::AtomicAmount(r.cost())) }
            } else {
                TxOutcome::Failed { reason: "the transaction reverted".into() }
            }
        }))
    }
}

/// A call's answer with the node's refusal (a JSON-RPC error response: it ran the call and says
/// it fails) told apart from a failure to ask it.
async fn verdict<T>(
    call: impl std::future::Future<Output = alloy::transports::TransportResult<T>>,
) -> alloy::transports::TransportResult<Result<T, String>> {
    match call.await {
        Ok(answer) => Ok(Ok(answer)),
        Err(e) => match e.as_error_resp() {
            Some(resp) => Ok(Err(resp.message.to_string())),
            None => Err(e),
        },
    }
}

/// Runs an RPC call with a deadline, mapping every failure to [`ChainError`].
async fn bounded<T, E: std::fmt::Display>(
    limit: Duration,
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ChainError> {
    crate::chains::bounded("EVM", limit, what, call).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const GWEI: u128 = 1_000_000_000;

    fn suggested(base: u128, tip: u128) -> Eip1559Estimation {
        Eip1559Estimation { max_fee_per_gas: 2 * base + tip, max_priority_fee_per_gas: tip }
    }

    #[test]
    fn fees_are_used_while_fresh_refreshed_while_aging_and_read_when_stale() {
        let cache = FeeCache::default();
        let t0 = tokio::time::Instant::now();
        assert_eq!(cache.look(t0), FeeAge::Stale, "none read yet");
        let fees = suggested(10 * GWEI, GWEI);
        cache.read(fees, t0);
        assert_eq!(cache.look(t0 + FEES_FRESH - Duration::from_millis(1)), FeeAge::Fresh(fees));
        assert_eq!(cache.look(t0 + FEES_FRESH), FeeAge::Aging(fees));
        assert_eq!(cache.look(t0 + FEES_MAX_AGE - Duration::from_millis(1)), FeeAge::Aging(fees));
        assert_eq!(cache.look(t0 + FEES_MAX_AGE), FeeAge::Stale);
    }

    #[test]
    fn a_mined_transaction_tells_the_base_fee_and_keeps_the_suggested_tip() {
        let cache = FeeCache::default();
        let t0 = tokio::time::Instant::now();
        cache.read(suggested(10 * GWEI, GWEI), t0);
        // Signed at a 21 gwei cap with a 1 gwei tip, mined paying 13 gwei: the base fee was 12.
        let later = t0 + FEES_FRESH + Duration::from_secs(1);
        cache.mined((21 * GWEI, GWEI), 13 * GWEI, 7, later);
        assert_eq!(cache.look(later), FeeAge::Fresh(suggested(12 * GWEI, GWEI)), "fresh again, following the base fee");
        // The same receipt read again, or an older one, tells nothing new.
        let again = later + FEES_FRESH;
        cache.mined((21 * GWEI, GWEI), 15 * GWEI, 7, again);
        cache.mined((21 * GWEI, GWEI), 15 * GWEI, 6, again);
        assert_eq!(cache.look(again), FeeAge::Aging(suggested(12 * GWEI, GWEI)));
        // A transaction with a tip of its own tells the base fee as well; a lower one than the
        // node suggested lowers nothing.
        cache.mined((50 * GWEI, 5 * GWEI), 14 * GWEI, 8, again);
        assert_eq!(cache.look(again), FeeAge::Fresh(suggested(10 * GWEI, GWEI)), "the node's 21 gwei cap stands");
        // One that paid its whole cap hides the base fee (at least cap - tip): nothing learnt.
        cache.mined((21 * GWEI, GWEI), 21 * GWEI, 9, again + FEES_FRESH);
        assert_eq!(cache.look(again + FEES_FRESH), FeeAge::Aging(suggested(10 * GWEI, GWEI)));
        // The tip is the node's to suggest: past TIP_FRESH the fees are aging whatever the
        // receipts say, so that it is read again.
        let old = t0 + TIP_FRESH;
        cache.mined((31 * GWEI, GWEI), 16 * GWEI, 10, old);
        assert_eq!(cache.look(old), FeeAge::Aging(suggested(15 * GWEI, GWEI)));
    }

    #[test]
    fn a_node_that_does_not_serve_sync_sends_is_told_from_one_refusing_the_transaction() {
        assert!(unknown_method(-32601, "the method eth_sendRawTransactionSync does not exist/is not available"));
        assert!(unknown_method(-32000, "Method not found"));
        assert!(unknown_method(-32600, "unsupported method: eth_sendRawTransactionSync"));
        assert!(!unknown_method(-32000, "transaction type not supported"), "a refusal of the transaction");
        assert!(!unknown_method(-32000, "nonce too low"));
        assert!(!unknown_method(-32003, "transaction already imported"));
        assert!(not_mined_in_time(4, "The transaction was added to the mempool but wasn't processed in 2s"));
        assert!(not_mined_in_time(-32603, "Transaction confirmation timeout"));
        assert!(!not_mined_in_time(-32000, "insufficient funds for gas * price + value"));
        assert!(!not_mined_in_time(-32000, "upstream request timeout"), "a gateway's words: not known to be taken");
    }

    #[test]
    fn only_a_node_that_checked_a_transaction_refuses_it_for_good() {
        // anvil's, geth's and EIP-1474's refusals.
        for (code, message) in [
            (-32003, "Insufficient funds for gas * price + value"),
            (-32003, "nonce too low"),
            (-32000, "nonce too low: next nonce 5, tx nonce 3"),
            (-32000, "replacement transaction underpriced"),
            (-32000, "max fee per gas less than block base fee"),
            (-32000, "intrinsic gas too low"),
            (-32000, "exceeds block gas limit"),
            (-32000, "invalid sender"),
            (-32602, "transaction type not supported"),
        ] {
            assert!(refused_for_good(code, message), "{code} {message}");
        }
        // Words that may come after the node took it: watched, not failed.
        for (code, message) in [
            (-32603, "Transaction confirmation timeout"),
            (-32603, "internal error"),
            (-32000, "receipts subscription was closed"),
            (-32000, "upstream request timeout"),
            (-32005, "request rate limited"),
            (-32000, "already known"),
        ] {
            assert!(!refused_for_good(code, message), "{code} {message}");
        }
    }

    #[test]
    fn nothing_is_learnt_before_the_node_suggested_fees() {
        let cache = FeeCache::default();
        let t0 = tokio::time::Instant::now();
        cache.mined((21 * GWEI, GWEI), 13 * GWEI, 1, t0);
        assert_eq!(cache.look(t0), FeeAge::Stale);
    }
}
