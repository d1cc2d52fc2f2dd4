//! EVM JSON-RPC with bounded calls (alloy).
//!
//! Every call has a deadline; whatever goes wrong is a [`ChainError`], never a panic or a hang.
//! Sending tells a transaction the node refused ([`SendError::Rejected`]: it will not land) from
//! one whose fate is unknown ([`SendError::Uncertain`]: it may still land, so it is watched).

use std::time::Duration;
use tollgate_protocol::redact::redact_urls;

use alloy::consensus::Transaction as _;
use alloy::eips::eip1559::Eip1559Estimation;
use alloy::network::ReceiptResponse as _;
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use tollgate_protocol::Network;

use crate::chains::{ChainError, SendError, TxOutcome};

/// An EVM node reached over JSON-RPC (cheap to clone: the connection is shared).
#[derive(Clone)]
pub struct EvmRpc {
    provider: RootProvider,
    network: Network,
    chain_id: u64,
    url: String,
    call_timeout: Duration,
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
        Ok(Self { provider, network: Network::eip155(chain_id), chain_id, url: url.to_owned(), call_timeout })
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

    /// EIP-1559 fee suggestion (max fee and tip per gas).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn fees(&self) -> Result<Eip1559Estimation, ChainError> {
        bounded(self.call_timeout, "eth_feeHistory", self.provider.estimate_eip1559_fees()).await
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
        bounded(self.call_timeout, "eth_call", self.provider.call(tx).into_future()).await
    }

    /// Runs a call without sending it: `Ok(Ok(output))` when it succeeds, `Ok(Err(why))` when the
    /// node answers that it fails (a revert, out of gas: its own words), `Err` when the node
    /// cannot be asked.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn simulate(&self, tx: TransactionRequest) -> Result<Result<Bytes, String>, ChainError> {
        bounded(self.call_timeout, "eth_call", verdict(self.provider.call(tx).into_future())).await
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

    /// Broadcasts a signed transaction (EIP-2718 bytes).
    ///
    /// # Errors
    /// [`SendError::Rejected`] when the node refused it, [`SendError::Uncertain`] when the answer
    /// was lost or late.
    pub async fn send_raw(&self, tx: &[u8]) -> Result<B256, SendError> {
        let sending = self.provider.send_raw_transaction(tx);
        match tokio::time::timeout(self.call_timeout, sending).await {
            Err(_) => {
                Err(SendError::Uncertain(format!("eth_sendRawTransaction: no answer within {:?}", self.call_timeout)))
            }
            Ok(Ok(pending)) => Ok(*pending.tx_hash()),
            Ok(Err(e)) => match e.as_error_resp() {
                // The node has it already (a retry of our own broadcast): it is in flight.
                Some(resp) if resp.message.contains("already known") => {
                    Err(SendError::Uncertain(resp.message.to_string()))
                }
                Some(resp) => Err(SendError::Rejected(resp.message.to_string())),
                None => Err(SendError::Uncertain(redact_urls(&e.to_string()))),
            },
        }
    }

    /// A transaction's receipt, `None` while it is not mined.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn receipt(&self, hash: B256) -> Result<Option<TransactionReceipt>, ChainError> {
        bounded(
            self.call_timeout,
            "eth_getTransactionReceipt",
            self.provider.get_transaction_receipt(hash).into_future(),
        )
        .await
    }

    /// A mined transaction with what its receipt says; `None` while it is not mined.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn mined(&self, hash: B256) -> Result<Option<MinedTx>, ChainError> {
        let Some(receipt) = self.receipt(hash).await? else { return Ok(None) };
        let tx = bounded(
            self.call_timeout,
            "eth_getTransactionByHash",
            self.provider.get_transaction_by_hash(hash).into_future(),
        )
        .await?
        .ok_or_else(|| ChainError(format!("the node has a receipt but no transaction for {hash}")))?;
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
            signed: tx.inner.signature_hash(),
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
