//! Solana JSON-RPC with bounded calls.
//!
//! Every call has a deadline; whatever goes wrong on the way is a [`ChainError`], never a panic
//! or a hang. Sending distinguishes a transaction the node refused before broadcasting
//! ([`SendError::Rejected`]: nothing will land) from one whose fate is unknown
//! ([`SendError::Uncertain`]: it may still land, so it is watched, not failed).

use std::time::Duration;
use tollgate_protocol::redact::redact_urls;

use solana_commitment_config::CommitmentConfig;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client::rpc_client::{SerializableMessage, SerializableTransaction};
use solana_rpc_client_api::config::RpcTransactionConfig;
use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::{Transaction, VersionedTransaction};
use solana_transaction_status_client_types::option_serializer::OptionSerializer;
use solana_transaction_status_client_types::{UiTransactionEncoding, UiTransactionTokenBalance};
use tollgate_protocol::Network;

use crate::chains::{ChainError, SendError, TxOutcome};

/// A Solana node reached over JSON-RPC.
pub struct SolanaRpc {
    client: RpcClient,
    network: Network,
    url: String,
    call_timeout: Duration,
    /// How deep a transaction must be for a verdict ([`Self::outcome`],
    /// [`Self::confirmed_transaction`]).
    verdict: CommitmentConfig,
}

impl std::fmt::Debug for SolanaRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolanaRpc").field("network", &self.network).field("url", &self.url).finish_non_exhaustive()
    }
}

/// Default deadline of one RPC call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl SolanaRpc {
    /// Connects and learns the cluster's CAIP-2 id from its genesis hash.
    ///
    /// # Errors
    /// [`ChainError`] when the node does not answer in time.
    pub async fn connect(url: &str, call_timeout: Duration) -> Result<Self, ChainError> {
        let client =
            RpcClient::new_with_timeout_and_commitment(url.to_owned(), call_timeout, CommitmentConfig::confirmed());
        let genesis = bounded(call_timeout, "getGenesisHash", client.get_genesis_hash()).await?;
        let network = Network::solana_from_genesis(&genesis.to_string());
        Ok(Self { client, network, url: url.to_owned(), call_timeout, verdict: CommitmentConfig::confirmed() })
    }

    /// The same RPC, giving verdicts only at `commitment` (`finalized` to wait for rooted blocks).
    #[must_use]
    pub fn with_verdict_commitment(mut self, commitment: CommitmentConfig) -> Self {
        self.verdict = commitment;
        self
    }

    /// The cluster's CAIP-2 id.
    #[must_use]
    pub const fn network(&self) -> &Network {
        &self.network
    }

    /// Lamports held by `account`.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn balance(&self, account: &Pubkey) -> Result<u64, ChainError> {
        bounded(self.call_timeout, "getBalance", self.client.get_balance(account)).await
    }

    /// The latest blockhash and the last block height at which a transaction using it is valid.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn latest_blockhash(&self) -> Result<(Hash, u64), ChainError> {
        bounded(
            self.call_timeout,
            "getLatestBlockhash",
            self.client.get_latest_blockhash_with_commitment(CommitmentConfig::confirmed()),
        )
        .await
    }

    /// The current block height.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn block_height(&self) -> Result<u64, ChainError> {
        bounded(self.call_timeout, "getBlockHeight", self.client.get_block_height()).await
    }

    /// The fee the cluster charges for `message`, lamports.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn fee_for(&self, message: &impl SerializableMessage) -> Result<u64, ChainError> {
        bounded(self.call_timeout, "getFeeForMessage", self.client.get_fee_for_message(message)).await
    }

    /// Lamports an account without data needs to stay rent-exempt.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn rent_exempt_minimum(&self) -> Result<u64, ChainError> {
        bounded(
            self.call_timeout,
            "getMinimumBalanceForRentExemption",
            self.client.get_minimum_balance_for_rent_exemption(0),
        )
        .await
    }

    /// Whether transactions signed against `blockhash` can still land.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn blockhash_valid(&self, blockhash: &Hash) -> Result<bool, ChainError> {
        bounded(
            self.call_timeout,
            "isBlockhashValid",
            self.client.is_blockhash_valid(blockhash, CommitmentConfig::processed()),
        )
        .await
    }

    /// A transaction the cluster has confirmed: the transaction, its error if it failed, and its
    /// fee. `None` when the cluster does not know it (yet).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn confirmed_transaction(&self, signature: &Signature) -> Result<Option<ConfirmedTx>, ChainError> {
        let config = RpcTransactionConfig {
            encoding: Some(UiTransactionEncoding::Base64),
            commitment: Some(self.verdict),
            max_supported_transaction_version: Some(0),
        };
        let fetched =
            tokio::time::timeout(self.call_timeout, self.client.get_transaction_with_config(signature, config)).await;
        let tx = match fetched {
            Err(_) => {
                return Err(ChainError(format!("Solana RPC getTransaction: no answer within {:?}", self.call_timeout)));
            }
            Ok(Ok(tx)) => tx,
            // An unknown signature comes back as a null result, which the client reports as an
            // error while decoding it.
            Ok(Err(e)) if e.to_string().contains("invalid type: null") => return Ok(None),
            Ok(Err(e)) => return Err(ChainError(format!("Solana RPC getTransaction failed: {e}"))),
        };
        let transaction = tx
            .transaction
            .transaction
            .decode()
            .ok_or_else(|| ChainError("getTransaction returned an undecodable transaction".into()))?;
        let Some(meta) = tx.transaction.meta else {
            return Ok(Some(ConfirmedTx { transaction, error: None, fee: None, balances: None }));
        };
        let error = meta.err.map(|e| format!("{e:?}"));
        // Account keys in the order the balances list them: the message's own, then those loaded
        // from lookup tables (writable first).
        let mut keys: Vec<Pubkey> = transaction.message.static_account_keys().to_vec();
        if let Some(loaded) = meta.loaded_addresses.as_ref().map(|l| (l.writable.clone(), l.readonly.clone())) {
            for key in loaded.0.iter().chain(&loaded.1) {
                keys.push(
                    key.parse().map_err(|_| ChainError("getTransaction named an invalid loaded address".into()))?,
                );
            }
        }
        let tokens = |list: OptionSerializer<Vec<UiTransactionTokenBalance>>| -> Vec<TokenBalance> {
            Option::<Vec<_>>::from(list)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|b| {
                    Some(TokenBalance {
                        owner: Option::<String>::from(b.owner)?.parse().ok()?,
                        mint: b.mint.parse().ok()?,
                        amount: b.ui_token_amount.amount.parse().ok()?,
                    })
                })
                .collect()
        };
        let balances = Balances {
            lamports: keys.into_iter().zip(meta.pre_balances.into_iter().zip(meta.post_balances)).collect(),
            tokens: (tokens(meta.pre_token_balances), tokens(meta.post_token_balances)),
        };
        Ok(Some(ConfirmedTx { transaction, error, fee: Some(meta.fee), balances: Some(balances) }))
    }

    /// An account's owner and data, `None` when it does not exist.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn account(&self, address: &Pubkey) -> Result<Option<(Pubkey, Vec<u8>)>, ChainError> {
        let response = bounded(
            self.call_timeout,
            "getAccountInfo",
            self.client.get_account_with_commitment(address, CommitmentConfig::confirmed()),
        )
        .await?;
        Ok(response.value.map(|a| (a.owner, a.data)))
    }

    /// What a payment to `address` lands in: its lamports, and whether it is a program or a
    /// sysvar (which the runtime never lets a transfer credit). `None` when it does not exist.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn payee(&self, address: &Pubkey) -> Result<Option<Payee>, ChainError> {
        let response = bounded(
            self.call_timeout,
            "getAccountInfo",
            self.client.get_account_with_commitment(address, CommitmentConfig::confirmed()),
        )
        .await?;
        Ok(response
            .value
            .map(|a| Payee { lamports: a.lamports, unpayable: a.executable || a.owner == solana_sdk::sysvar::id() }))
    }

    /// Simulates a transaction against the current state without landing it: `None` when it
    /// would succeed, else the error and the last program log lines. `sig_verify` is off for a
    /// transaction that still lacks a signature (a seller signs it later).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn simulate(&self, tx: &VersionedTransaction, sig_verify: bool) -> Result<Option<String>, ChainError> {
        let config = solana_rpc_client_api::config::RpcSimulateTransactionConfig {
            sig_verify,
            replace_recent_blockhash: false,
            commitment: Some(CommitmentConfig::confirmed()),
            ..Default::default()
        };
        let answer =
            bounded(self.call_timeout, "simulateTransaction", self.client.simulate_transaction_with_config(tx, config))
                .await?;
        Ok(answer.value.err.map(|err| {
            let logs = answer.value.logs.unwrap_or_default();
            let tail = logs.iter().rev().take(3).rev().cloned().collect::<Vec<_>>().join(" | ");
            if tail.is_empty() { err.to_string() } else { format!("{err} ({tail})") }
        }))
    }

    /// Asks the node for an airdrop (development clusters only).
    ///
    /// # Errors
    /// [`ChainError`] when the node refuses, fails or times out.
    pub async fn request_airdrop(&self, account: &Pubkey, lamports: u64) -> Result<Signature, ChainError> {
        bounded(self.call_timeout, "requestAirdrop", self.client.request_airdrop(account, lamports)).await
    }

    /// Submits a signed transaction (the node simulates it first).
    ///
    /// # Errors
    /// [`SendError::Rejected`] when the node refused it, [`SendError::Uncertain`] when the answer
    /// was lost or late (the transaction may still land).
    pub async fn send(&self, tx: &(impl SerializableTransaction + serde::Serialize)) -> Result<Signature, SendError> {
        let raw = bincode::serialize(tx).map_err(|e| SendError::Rejected(format!("cannot encode it: {e}")))?;
        self.send_raw(&raw).await
    }

    /// Submits a signed transaction given as the bytes it is broadcast as, without decoding
    /// them (the node simulates it first).
    ///
    /// # Errors
    /// As [`Self::send`].
    pub async fn send_raw(&self, raw: &[u8]) -> Result<Signature, SendError> {
        use base64::Engine as _;
        let params = serde_json::json!([
            base64::engine::general_purpose::STANDARD.encode(raw),
            { "encoding": "base64", "preflightCommitment": self.client.commitment().commitment },
        ]);
        let sending = self.client.send::<String>(solana_rpc_client_api::request::RpcRequest::SendTransaction, params);
        match tokio::time::timeout(self.call_timeout, sending).await {
            Err(_) => Err(SendError::Uncertain(format!("sendTransaction: no answer within {:?}", self.call_timeout))),
            Ok(Ok(sig)) => sig
                .parse()
                .map_err(|_| SendError::Uncertain(format!("sendTransaction answered {sig}, not a signature"))),
            Ok(Err(e)) => {
                // A JSON-RPC error response means the node evaluated and refused the transaction;
                // an I/O error means we do not know whether it reached the cluster.
                match e.kind() {
                    solana_rpc_client_api::client_error::ErrorKind::RpcError(_)
                    | solana_rpc_client_api::client_error::ErrorKind::TransactionError(_) => {
                        Err(SendError::Rejected(e.to_string()))
                    }
                    _ => Err(SendError::Uncertain(redact_urls(&e.to_string()))),
                }
            }
        }
    }

    /// What the cluster knows of a transaction: `None` while it is not seen (confirmed level).
    /// A node keeps recent statuses for about two minutes; `search_history` asks it to look
    /// further back (slower), as a check made after that window must.
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn outcome(&self, signature: &Signature, search_history: bool) -> Result<Option<TxOutcome>, ChainError> {
        let signatures = std::slice::from_ref(signature);
        let statuses = if search_history {
            bounded(
                self.call_timeout,
                "getSignatureStatuses",
                self.client.get_signature_statuses_with_history(signatures),
            )
            .await?
        } else {
            bounded(self.call_timeout, "getSignatureStatuses", self.client.get_signature_statuses(signatures)).await?
        };
        let Some(Some(status)) = statuses.value.into_iter().next() else {
            return Ok(None);
        };
        if !status.satisfies_commitment(self.verdict) {
            return Ok(None);
        }
        Ok(Some(match status.err {
            None => TxOutcome::Confirmed { fee: None },
            Some(err) => TxOutcome::Failed { reason: err.to_string() },
        }))
    }
}

impl SolanaRpc {
    /// Polls a transaction's outcome until the chain has a verdict or `budget` runs out
    /// (`None` then).
    ///
    /// # Errors
    /// [`ChainError`] when the node fails or times out.
    pub async fn wait_for_outcome(
        &self,
        signature: &Signature,
        budget: Duration,
    ) -> Result<Option<TxOutcome>, ChainError> {
        let deadline = tokio::time::Instant::now() + budget;
        for attempt in 0.. {
            if let Some(outcome) = self.outcome(signature, false).await? {
                return Ok(Some(outcome));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(crate::chains::poll_delay(attempt, Duration::from_millis(50))).await;
        }
        Ok(None)
    }
}

/// A confirmed transaction as read from the chain.
#[derive(Debug, Clone)]
pub struct ConfirmedTx {
    /// The transaction.
    pub transaction: solana_sdk::transaction::VersionedTransaction,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Fee paid, lamports.
    pub fee: Option<u64>,
    /// Balances before and after it, when the node reports them.
    pub balances: Option<Balances>,
}

/// An SPL token account's balance as a transaction's metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBalance {
    /// The token account's owner.
    pub owner: Pubkey,
    /// Its mint.
    pub mint: Pubkey,
    /// Base units.
    pub amount: u128,
}

/// What a transaction's metadata says of balances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Balances {
    /// Every account's lamports before and after.
    pub lamports: Vec<(Pubkey, (u64, u64))>,
    /// Token accounts' balances before and after (an account created by the transaction is
    /// listed after only).
    pub tokens: (Vec<TokenBalance>, Vec<TokenBalance>),
}

impl ConfirmedTx {
    /// What arrived at `to` in `mint`'s token (`None`: lamports): the rise of its balance (of
    /// all its token accounts of that mint), with the fee added back when `to` paid it. Zero
    /// without balances, or for a transaction that failed.
    #[must_use]
    pub fn arrived(&self, to: &Pubkey, mint: Option<&Pubkey>) -> u128 {
        let Some(balances) = self.balances.as_ref().filter(|_| self.error.is_none()) else { return 0 };
        match mint {
            None => {
                let fee_payer = self.transaction.message.static_account_keys().first();
                let fee = if fee_payer == Some(to) { self.fee.unwrap_or_default() } else { 0 };
                balances.lamports.iter().find(|(key, _)| key == to).map_or(0, |(_, (pre, post))| {
                    (u128::from(*post) + u128::from(fee)).saturating_sub(u128::from(*pre))
                })
            }
            Some(mint) => {
                let held = |list: &[TokenBalance]| -> u128 {
                    list.iter().filter(|b| b.owner == *to && b.mint == *mint).map(|b| b.amount).sum()
                };
                held(&balances.tokens.1).saturating_sub(held(&balances.tokens.0))
            }
        }
    }
}

/// Runs an RPC call with a deadline, mapping every failure to [`ChainError`].
async fn bounded<T, E: std::fmt::Display>(
    limit: Duration,
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ChainError> {
    crate::chains::bounded("Solana", limit, what, call).await
}

/// The id of a signed transaction: its first signature, base58.
#[must_use]
pub fn tx_id(tx: &Transaction) -> String {
    tx.get_signature().to_string()
}

/// An existing account as a payee (see [`SolanaRpc::payee`]).
#[derive(Debug, Clone, Copy)]
pub struct Payee {
    /// What it holds.
    pub lamports: u64,
    /// A program or a sysvar: a transfer to it fails on chain.
    pub unpayable: bool,
}

#[cfg(test)]
mod tests {
    use solana_sdk::message::Message;
    use solana_sdk::signature::Keypair;
    use solana_sdk::signer::Signer as _;

    use super::*;

    /// A transaction paid for by `fee_payer` with the given balances.
    fn confirmed(fee_payer: &Keypair, balances: Balances, error: Option<&str>) -> ConfirmedTx {
        let message = Message::new_with_blockhash(&[], Some(&fee_payer.pubkey()), &Hash::new_unique());
        let transaction = VersionedTransaction::from(Transaction::new_unsigned(message));
        ConfirmedTx { transaction, error: error.map(str::to_owned), fee: Some(5_000), balances: Some(balances) }
    }

    #[test]
    fn what_arrived_is_the_payees_rise_with_the_fee_it_paid_added_back() {
        let (payer, payee) = (Keypair::new(), Keypair::new());
        let (mint, other_mint) = (Pubkey::new_unique(), Pubkey::new_unique());
        let token = |owner: &Keypair, mint: Pubkey, amount: u128| TokenBalance { owner: owner.pubkey(), mint, amount };
        let balances = Balances {
            lamports: vec![(payer.pubkey(), (100_000, 85_000)), (payee.pubkey(), (1_000, 11_000))],
            tokens: (
                vec![token(&payer, mint, 500), token(&payee, other_mint, 7)],
                vec![token(&payer, mint, 100), token(&payee, mint, 396), token(&payee, other_mint, 7)],
            ),
        };
        let tx = confirmed(&payer, balances.clone(), None);
        assert_eq!(tx.arrived(&payee.pubkey(), None), 10_000);
        assert_eq!(tx.arrived(&payee.pubkey(), Some(&mint)), 396, "an account made by the transaction counts from 0");
        assert_eq!(tx.arrived(&payee.pubkey(), Some(&other_mint)), 0);
        assert_eq!(tx.arrived(&Pubkey::new_unique(), None), 0);
        // The payee paid the fee (a seller settling as fee payer): 10,000 arrived, 5,000 paid.
        let paid_by_payee = Balances { lamports: vec![(payee.pubkey(), (1_000, 6_000))], ..balances.clone() };
        assert_eq!(confirmed(&payee, paid_by_payee, None).arrived(&payee.pubkey(), None), 10_000);
        assert_eq!(confirmed(&payer, balances, Some("InstructionError")).arrived(&payee.pubkey(), None), 0);
    }
}
