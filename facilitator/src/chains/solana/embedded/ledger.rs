//! The ledger's state: LiteSVM (agave's program runtime with the SPL programs) plus what a
//! cluster adds around it — blocks, a window of recent blockhashes, and the record of each
//! landed transaction with the balances before and after it, as `getTransaction` reports them.
//!
//! Synchronous and single-owner: [`super::EmbeddedLedger`] keeps it behind a mutex, so a
//! transaction, its preflight and the balances read around it see one state.
//!
//! Blocks and blockhashes: the clock closes a block every slot (the block height is the slot:
//! no slot is skipped), and a blockhash is usable until `MAX_PROCESSING_AGE` blocks after the
//! one it was issued in, as on a cluster. A landed transaction also rotates the blockhash within
//! its block, so the same transfer built again after it landed is a new transaction (on a
//! cluster, the next slot's blockhash does that within 400 ms). Blockhashes and the genesis
//! hash chain from a secret drawn at start: none can be predicted, and a transaction signed for
//! an earlier run of the ledger is unknown to this one.

use std::collections::{HashMap, VecDeque};

use litesvm::LiteSVM;
use litesvm::types::{FailedTransactionMetadata, TransactionMetadata};
use solana_address_lookup_table_interface::state::AddressLookupTable;
use solana_sdk::account::Account;
use solana_sdk::hash::Hash;
use solana_sdk::message::VersionedMessage;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signature};
use solana_sdk::signer::Signer as _;
use solana_sdk::transaction::{TransactionError, VersionedTransaction};

use tollgate_encoding::solana::{mint_decimals, token_account};

/// How many blocks a blockhash stays usable after its own (agave's `MAX_PROCESSING_AGE`).
pub const MAX_PROCESSING_AGE: u64 = 150;
/// How many landed transactions `getTransaction` and `getSignatureStatuses` remember at least;
/// older ones are forgotten once their blockhash has expired (a node prunes its history too).
const KEPT_TRANSACTIONS: usize = 200_000;
/// Lamports the faucet behind `requestAirdrop` starts with.
const FAUCET_LAMPORTS: u64 = u64::MAX / 4;
/// Most lamports one airdrop gives (1,000,000 SOL): the faucet cannot be drained in one call.
pub const MAX_AIRDROP: u64 = 1_000_000 * 1_000_000_000;

/// The embedded cluster.
pub struct Ledger {
    svm: LiteSVM,
    /// Drawn at start; every blockhash chains from it.
    secret: [u8; 32],
    genesis: Hash,
    /// Blocks produced; every slot has a block here, so it is also the slot.
    height: u64,
    /// The current block's clock, Unix seconds.
    unix_timestamp: i64,
    /// The latest blockhash.
    latest: Hash,
    /// Usable blockhashes and the height each was issued at, oldest first.
    recent: VecDeque<(Hash, u64)>,
    usable: HashMap<Hash, u64>,
    landed: HashMap<Signature, Landed>,
    /// The message of every remembered transaction: a message lands once, whoever signs it
    /// (a cluster's status cache is keyed by message hash too).
    messages: HashMap<Hash, Signature>,
    landed_order: VecDeque<Signature>,
    faucet: Keypair,
}

/// A transaction the ledger landed, with its effects.
#[derive(Debug, Clone)]
pub struct Landed {
    /// The slot of its block.
    pub slot: u64,
    /// Its message's hash (what makes a repeat of it a repeat).
    pub message_hash: Hash,
    /// Its block's time, Unix seconds.
    pub block_time: i64,
    /// The transaction as sent.
    pub transaction: VersionedTransaction,
    /// Why it failed (it landed anyway and paid its fee), `None` when it succeeded.
    pub err: Option<TransactionError>,
    /// Lamports charged to the fee payer.
    pub fee: u64,
    /// Program logs.
    pub logs: Vec<String>,
    /// Compute units it used.
    pub units: u64,
    /// Addresses it loaded from lookup tables: (writable, read-only).
    pub loaded: (Vec<Pubkey>, Vec<Pubkey>),
    /// Lamports of every account it names (static keys, then loaded ones), before and after.
    pub lamports: (Vec<u64>, Vec<u64>),
    /// Token accounts among them, before and after.
    pub tokens: (Vec<Holding>, Vec<Holding>),
}

/// A token account's balance at one point, as a transaction's metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Its position in the transaction's account keys.
    pub index: u8,
    /// The mint.
    pub mint: Pubkey,
    /// The account's owner.
    pub owner: Pubkey,
    /// The token program that owns the account.
    pub program: Pubkey,
    /// Base units.
    pub amount: u64,
    /// The mint's decimals (0 when the mint cannot be read).
    pub decimals: u8,
}

/// What executing a transaction did or would do.
#[derive(Debug, Clone)]
pub struct Execution {
    /// Why it fails, `None` when it succeeds.
    pub err: Option<TransactionError>,
    /// Program logs.
    pub logs: Vec<String>,
    /// Compute units used.
    pub units: u64,
    /// The fee it is charged.
    pub fee: u64,
}

impl Execution {
    fn new(meta: TransactionMetadata, err: Option<TransactionError>) -> Self {
        Self { err, logs: meta.logs, units: meta.compute_units_consumed, fee: meta.fee }
    }

    fn refused(err: TransactionError) -> Self {
        Self { err: Some(err), logs: Vec::new(), units: 0, fee: 0 }
    }
}

/// How `send` treats a transaction that would fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preflight {
    /// Simulate first and refuse it without landing it (what a node does by default).
    Check,
    /// Land it anyway: it fails on chain and its fee is charged (`skipPreflight`).
    Skip,
}

impl Ledger {
    /// A fresh cluster at block 0 with the SPL programs deployed and a funded faucet.
    ///
    /// # Errors
    /// When the runtime refuses the faucet's account (it never should).
    pub fn new() -> Result<Self, String> {
        // Blockhashes are checked here against the window of recent blocks, and repeats against
        // the landed transactions, so LiteSVM's own checks (the latest blockhash only, a
        // signature history of its own) are off. Signatures are verified by LiteSVM.
        let mut svm = LiteSVM::new().with_blockhash_check(false).with_transaction_history(0);
        let faucet = Keypair::new();
        svm.set_account(
            faucet.pubkey(),
            Account { lamports: FAUCET_LAMPORTS, owner: solana_sdk_ids::system_program::ID, ..Account::default() },
        )
        .map_err(|e| format!("the faucet's account: {e:?}"))?;
        let secret: [u8; 32] = rand::random();
        let genesis = solana_sdk::hash::hashv(&[b"tollgate embedded ledger genesis", &secret]);
        let mut ledger = Self {
            svm,
            secret,
            genesis,
            height: 0,
            unix_timestamp: 0,
            latest: genesis,
            recent: VecDeque::new(),
            usable: HashMap::new(),
            landed: HashMap::new(),
            messages: HashMap::new(),
            landed_order: VecDeque::new(),
            faucet,
        };
        ledger.rotate_blockhash();
        Ok(ledger)
    }

    /// The genesis hash (the cluster's identity: its CAIP-2 id derives from it).
    #[must_use]
    pub const fn genesis(&self) -> Hash {
        self.genesis
    }

    /// The current block height (also the slot).
    #[must_use]
    pub const fn height(&self) -> u64 {
        self.height
    }

    /// The latest blockhash and the last block height at which it is usable.
    #[must_use]
    pub fn latest_blockhash(&self) -> (Hash, u64) {
        (self.latest, self.height + MAX_PROCESSING_AGE)
    }

    /// Whether a transaction signed against `blockhash` can still land.
    #[must_use]
    pub fn blockhash_valid(&self, blockhash: &Hash) -> bool {
        self.usable.get(blockhash).is_some_and(|issued| issued + MAX_PROCESSING_AGE >= self.height)
    }

    /// Closes the current block and opens the next, whose clock reads `unix_timestamp`.
    pub fn produce_block(&mut self, unix_timestamp: i64) {
        self.height += 1;
        self.unix_timestamp = unix_timestamp;
        let clock = solana_sdk::clock::Clock { slot: self.height, unix_timestamp, ..Default::default() };
        self.svm.set_sysvar(&clock);
        self.rotate_blockhash();
    }

    /// A new latest blockhash, issued at the current height; those past their age forgotten.
    fn rotate_blockhash(&mut self) {
        self.latest = solana_sdk::hash::hashv(&[self.latest.as_ref(), &self.secret]);
        self.recent.push_back((self.latest, self.height));
        self.usable.insert(self.latest, self.height);
        while let Some(&(hash, issued)) = self.recent.front()
            && issued + MAX_PROCESSING_AGE < self.height
        {
            self.recent.pop_front();
            self.usable.remove(&hash);
        }
    }

    /// An account, `None` when it does not exist.
    #[must_use]
    pub fn account(&self, address: &Pubkey) -> Option<Account> {
        self.svm.get_account(address).filter(|a| a.lamports > 0 || !a.data.is_empty())
    }

    /// Writes an account as given (development and tests: mints, token accounts, lookup tables).
    ///
    /// # Errors
    /// For a sysvar or a program (the runtime's own accounts), existing or as written.
    pub fn set_account(&mut self, address: Pubkey, account: Account) -> Result<(), String> {
        let runtime_owned = |a: &Account| a.executable || RUNTIME_OWNERS.contains(&a.owner);
        if crate::chains::solana::send::is_reserved(&address)
            || runtime_owned(&account)
            || self.svm.get_account(&address).is_some_and(|a| runtime_owned(&a))
        {
            return Err(format!("{address} is a sysvar or a program: the ledger's runtime keeps it"));
        }
        self.svm.set_account(address, account).map_err(|e| format!("{e:?}"))
    }

    /// Lamports an account of `data_len` bytes needs to be rent-exempt.
    #[must_use]
    pub fn rent_exempt_minimum(&self, data_len: usize) -> u64 {
        self.svm.minimum_balance_for_rent_exemption(data_len)
    }

    /// A landed transaction, `None` when unknown (or forgotten).
    #[must_use]
    pub fn landed(&self, signature: &Signature) -> Option<&Landed> {
        self.landed.get(signature)
    }

    /// The fee the cluster charges for `message`, `None` when its blockhash is not usable (or
    /// its compute-budget instructions are invalid).
    #[must_use]
    pub fn fee_for(&mut self, message: VersionedMessage) -> Option<u64> {
        if !self.blockhash_valid(message.recent_blockhash()) {
            return None;
        }
        let signatures = vec![Signature::default(); usize::from(message.header().num_required_signatures)];
        let execution = self.execute_readonly(VersionedTransaction { signatures, message }, false);
        // Every transaction pays for at least one signature: a zero fee means the fee could not
        // be computed (LiteSVM reports 0 when the compute budget does not parse).
        Some(execution.fee).filter(|fee| *fee > 0)
    }

    /// What `tx` would do now, without landing it. `sig_verify` off accepts missing
    /// signatures; `replace_blockhash` signs it against the latest blockhash instead of its
    /// own (a node only allows that without signature checks).
    #[must_use]
    pub fn simulate(&mut self, mut tx: VersionedTransaction, sig_verify: bool, replace_blockhash: bool) -> Execution {
        if replace_blockhash {
            tx.message.set_recent_blockhash(self.latest_blockhash().0);
        } else if !self.blockhash_valid(tx.message.recent_blockhash()) {
            return Execution::refused(TransactionError::BlockhashNotFound);
        }
        if sig_verify && self.already_landed(&tx) {
            return Execution::refused(TransactionError::AlreadyProcessed);
        }
        self.execute_readonly(tx, sig_verify)
    }

    /// Whether `tx` landed already: its signature, or its message under another signature.
    fn already_landed(&self, tx: &VersionedTransaction) -> bool {
        tx.signatures.first().is_some_and(|s| self.landed.contains_key(s))
            || self.messages.contains_key(&message_hash(&tx.message))
    }

    /// Lands `tx` in the current block, then rotates the blockhash (see the module's notes).
    /// With [`Preflight::Check`] a transaction that would fail is refused and nothing changes;
    /// one that cannot be processed at all (bad signature, unknown blockhash, a fee payer that
    /// cannot pay, a repeat) is always refused.
    ///
    /// # Errors
    /// The refusal, with what the preflight saw.
    pub fn send(&mut self, tx: VersionedTransaction, preflight: Preflight) -> Result<Signature, Execution> {
        let Some(&signature) = tx.signatures.first() else {
            return Err(Execution::refused(TransactionError::SanitizeFailure));
        };
        if self.already_landed(&tx) {
            return Err(Execution::refused(TransactionError::AlreadyProcessed));
        }
        if !self.blockhash_valid(tx.message.recent_blockhash()) {
            return Err(Execution::refused(TransactionError::BlockhashNotFound));
        }
        if preflight == Preflight::Check {
            let preflight = self.execute_readonly(tx.clone(), true);
            if preflight.err.is_some() {
                return Err(preflight);
            }
        }
        let (keys, loaded) = self.account_keys(&tx.message);
        let before = (self.lamports(&keys), self.holdings(&keys));
        let execution = match self.svm.send_transaction(tx.clone()) {
            Ok(meta) => Execution::new(meta, None),
            Err(FailedTransactionMetadata { err, meta }) => {
                let execution = Execution::new(meta, Some(err));
                // Not processed at all: nothing was charged, nothing landed.
                if self.lamports(&keys) == before.0 {
                    return Err(execution);
                }
                execution
            }
        };
        let after = (self.lamports(&keys), self.holdings(&keys));
        self.record(Landed {
            slot: self.height,
            message_hash: message_hash(&tx.message),
            block_time: self.unix_timestamp,
            transaction: tx,
            err: execution.err,
            fee: execution.fee,
            logs: execution.logs,
            units: execution.units,
            loaded,
            lamports: (before.0, after.0),
            tokens: (before.1, after.1),
        });
        self.rotate_blockhash();
        Ok(signature)
    }

    /// Sends `lamports` from the faucet to `to`.
    ///
    /// # Errors
    /// The refusal: more than [`MAX_AIRDROP`], or an address that cannot hold lamports (a
    /// program's).
    pub fn airdrop(&mut self, to: &Pubkey, lamports: u64) -> Result<Signature, Execution> {
        if lamports > MAX_AIRDROP {
            return Err(Execution::refused(TransactionError::InsufficientFundsForFee));
        }
        let transfer = solana_system_interface::instruction::transfer(&self.faucet.pubkey(), to, lamports);
        let message = solana_sdk::message::Message::new_with_blockhash(
            &[transfer],
            Some(&self.faucet.pubkey()),
            &self.latest_blockhash().0,
        );
        let tx = solana_sdk::transaction::Transaction::new(&[&self.faucet], message, self.latest_blockhash().0);
        self.send(tx.into(), Preflight::Check)
    }

    fn execute_readonly(&mut self, tx: VersionedTransaction, sig_verify: bool) -> Execution {
        self.svm.set_sigverify(sig_verify);
        let result = self.svm.simulate_transaction(tx);
        self.svm.set_sigverify(true);
        match result {
            Ok(info) => Execution::new(info.meta, None),
            Err(FailedTransactionMetadata { err, meta }) => Execution::new(meta, Some(err)),
        }
    }

    /// Remembers a landed transaction; past [`KEPT_TRANSACTIONS`], forgets the oldest whose
    /// blockhash has expired (one that could still land again is never forgotten).
    fn record(&mut self, landed: Landed) {
        let Some(&signature) = landed.transaction.signatures.first() else { return };
        self.messages.insert(landed.message_hash, signature);
        self.landed.insert(signature, landed);
        self.landed_order.push_back(signature);
        while self.landed_order.len() > KEPT_TRANSACTIONS
            && let Some(oldest) = self.landed_order.front().and_then(|s| self.landed.get(s))
            && !self.blockhash_valid(oldest.transaction.message.recent_blockhash())
        {
            if let Some(forgotten) = self.landed_order.pop_front().and_then(|old| self.landed.remove(&old)) {
                self.messages.remove(&forgotten.message_hash);
            }
        }
    }

    /// The accounts `message` names, in the order its balances list them (static keys, then
    /// the writable and the read-only addresses of its lookup tables), and the loaded ones.
    /// A lookup that does not resolve adds nothing: the runtime refuses the transaction.
    fn account_keys(&self, message: &VersionedMessage) -> (Vec<Pubkey>, (Vec<Pubkey>, Vec<Pubkey>)) {
        let mut loaded = (Vec::new(), Vec::new());
        for lookup in message.address_table_lookups().unwrap_or_default() {
            let Some(table) = self.svm.get_account(&lookup.account_key) else { continue };
            if table.owner != solana_sdk_ids::address_lookup_table::ID {
                continue;
            }
            let Ok(table) = AddressLookupTable::deserialize(&table.data) else { continue };
            let pick = |indexes: &[u8]| -> Vec<Pubkey> {
                indexes.iter().filter_map(|i| table.addresses.get(usize::from(*i)).copied()).collect()
            };
            loaded.0.extend(pick(&lookup.writable_indexes));
            loaded.1.extend(pick(&lookup.readonly_indexes));
        }
        let keys = message.static_account_keys().iter().chain(&loaded.0).chain(&loaded.1).copied().collect();
        (keys, loaded)
    }

    fn lamports(&self, keys: &[Pubkey]) -> Vec<u64> {
        keys.iter().map(|k| self.svm.get_balance(k).unwrap_or(0)).collect()
    }

    fn holdings(&self, keys: &[Pubkey]) -> Vec<Holding> {
        keys.iter()
            .enumerate()
            .filter_map(|(index, key)| {
                let account = self.svm.get_account(key)?;
                let (mint, owner, amount, _frozen) = token_account(&account.owner, &account.data)?;
                let decimals = self.svm.get_account(&mint).and_then(|m| mint_decimals(&m.owner, &m.data)).unwrap_or(0);
                Some(Holding {
                    index: u8::try_from(index).ok()?,
                    mint,
                    owner,
                    program: account.owner,
                    amount,
                    decimals,
                })
            })
            .collect()
    }
}

/// Owners of the runtime's own accounts: sysvars and the program loaders.
const RUNTIME_OWNERS: [Pubkey; 6] = [
    solana_sdk_ids::sysvar::ID,
    solana_sdk_ids::native_loader::ID,
    solana_sdk_ids::bpf_loader::ID,
    solana_sdk_ids::bpf_loader_deprecated::ID,
    solana_sdk_ids::bpf_loader_upgradeable::ID,
    solana_sdk_ids::loader_v4::ID,
];

/// What identifies a message: the hash of its wire bytes.
fn message_hash(message: &VersionedMessage) -> Hash {
    // A message that came in a transaction always serializes again.
    bincode::serialize(message).map_or_else(|_| Hash::default(), |bytes| solana_sdk::hash::hashv(&[&bytes]))
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
