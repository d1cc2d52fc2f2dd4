//! The Solana side of the chain tests: a facilitator on the embedded ledger (LiteSVM behind its
//! own JSON-RPC on 127.0.0.1), customers with custodial wallets, signed transfers and SPL tokens made with
//! the real Token and Associated Token programs.

use std::sync::Arc;

use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::solana::embedded::{self, EmbeddedLedger};
use tollgate_facilitator::chains::solana::rpc::{DEFAULT_CALL_TIMEOUT, SolanaRpc};
use tollgate_facilitator::chains::solana::spl::SponsorPolicy;
use tollgate_facilitator::chains::{Chains, SolanaBackend, Sponsor};
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::wallets::MasterKey;
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::ChainFamily;

pub struct SolanaApp {
    pub app: Router,
    pub state: AppState,
    pub store: Arc<SqlStore>,
    pub dir: tempfile::TempDir,
    /// Between the facilitator and the ledger, when started with [`Self::start_behind_proxy`].
    pub proxy: Option<super::rpc_proxy::RpcProxy>,
}

impl SolanaApp {
    pub async fn start() -> Self {
        Self::start_with(false, Arc::new(SystemClock)).await
    }

    /// A facilitator whose configuration `configure` changes first.
    pub async fn start_configured(configure: impl FnOnce(&mut Config)) -> Self {
        Self::start_full(false, Arc::new(SystemClock), configure).await
    }

    /// A facilitator that reaches the ledger through an [`RpcProxy`](super::rpc_proxy::RpcProxy).
    pub async fn start_behind_proxy() -> Self {
        Self::start_with(true, Arc::new(SystemClock)).await
    }

    /// A facilitator whose time is `clock`'s.
    pub async fn start_at(clock: tollgate_facilitator::clock::SharedClock) -> Self {
        Self::start_with(false, clock).await
    }

    /// The SQLite file behind the store.
    pub fn db_path(&self) -> std::path::PathBuf {
        self.dir.path().join("sol.db")
    }

    async fn start_with(proxied: bool, clock: tollgate_facilitator::clock::SharedClock) -> Self {
        Self::start_full(proxied, clock, |_| {}).await
    }

    pub async fn start_full(
        proxied: bool,
        clock: tollgate_facilitator::clock::SharedClock,
        configure: impl FnOnce(&mut Config),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("sol.db").to_str().unwrap()).unwrap(),
            ..Config::default()
        };
        configure(&mut config);
        let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
        let ledger = EmbeddedLedger::start().await.unwrap();
        let proxy = if proxied { Some(super::rpc_proxy::RpcProxy::start(ledger.rpc_url()).await) } else { None };
        let url = proxy.as_ref().map_or(ledger.rpc_url(), |p| p.url.as_str());
        let depth = match config.solana_commitment {
            tollgate_facilitator::config::SolanaCommitment::Confirmed => {
                solana_commitment_config::CommitmentConfig::confirmed()
            }
            tollgate_facilitator::config::SolanaCommitment::Finalized => {
                solana_commitment_config::CommitmentConfig::finalized()
            }
        };
        let rpc = SolanaRpc::connect(url, DEFAULT_CALL_TIMEOUT).await.unwrap().with_verdict_commitment(depth);
        let sponsor = Sponsor::new(Keypair::new(), SponsorPolicy::default());
        embedded::fund(&rpc, &sponsor.keypair).await.unwrap();
        let chains = Chains::none().with_solana(SolanaBackend::new(rpc).with_embedded(ledger).with_sponsor(sponsor));
        let state = AppState::new(config, store.clone(), clock)
            .with_chains(chains)
            .with_master_key(MasterKey::generate().unwrap());
        Self { app: router(state.clone()), state, store, dir, proxy }
    }

    /// A key with a custodial wallet: (key, key id, wallet address).
    pub async fn customer(&self) -> (String, String, String) {
        let new = NewKey { plan: Plan::Premium, rpm: None, label: None, account: None, env: KeyEnv::Test };
        let created = admin::create_key(&*self.store, new, chrono::Utc::now()).await.unwrap();
        let master = self.state.master_key.as_ref().unwrap();
        let wallet =
            admin::create_wallet(&*self.store, master, &created.record.id, ChainFamily::Solana, chrono::Utc::now())
                .await
                .unwrap();
        (created.secret.expose().to_owned(), created.record.id, wallet)
    }

    pub async fn call(&self, method: &str, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
        super::call(&self.app, method, path, key, body).await
    }

    pub async fn lamports(&self, address: &str) -> u64 {
        let backend = self.state.chains.embedded_solana().unwrap();
        backend.rpc.balance(&address.parse::<Pubkey>().unwrap()).await.unwrap()
    }
}

/// A signed native transfer, base64 as `exact-native` carries it.
pub fn signed_transfer(
    payer: &solana_sdk::signature::Keypair,
    to: &Pubkey,
    lamports: u64,
    blockhash: solana_sdk::hash::Hash,
) -> String {
    use solana_sdk::signer::Signer as _;
    use tollgate_facilitator::chains::solana::build::Transfer;
    let message = Transfer { from: payer.pubkey(), to: *to, lamports, priority_fee: None }.message(&blockhash);
    signed_message(payer, message)
}

/// `message` signed by `payer` against its own blockhash, base64 as `exact-native` carries it.
pub fn signed_message(payer: &solana_sdk::signature::Keypair, message: solana_sdk::message::Message) -> String {
    use base64::Engine as _;
    let blockhash = message.recent_blockhash;
    let tx = solana_sdk::transaction::Transaction::new(&[payer], message, blockhash);
    base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap())
}

pub fn signed_proof(
    network: &str,
    payer: &solana_sdk::signature::Keypair,
    to: &Pubkey,
    lamports: u64,
    blockhash: solana_sdk::hash::Hash,
) -> String {
    let encoded = signed_transfer(payer, to, lamports, blockhash);
    tollgate_protocol::x402::header::encode(&json!({
        "x402Version": 1, "scheme": "exact-native", "network": network, "payload": {"transaction": encoded}
    }))
    .unwrap()
}

/// x402 v1 `/verify` + `/settle` body for an `exact` payment.
pub fn x402_exact(network: &str, tx: &str, pay_to: &str, mint: &str, amount: u64, fee_payer: &str) -> Value {
    json!({
        "x402Version": 1,
        "paymentPayload": {"x402Version": 1, "scheme": "exact", "network": network, "payload": {"transaction": tx}},
        "paymentRequirements": {
            "scheme": "exact", "network": network, "maxAmountRequired": amount.to_string(),
            "resource": "https://seller.example/report", "description": "", "mimeType": "application/json",
            "payTo": pay_to, "maxTimeoutSeconds": 30, "asset": mint, "extra": {"feePayer": fee_payer}
        }
    })
}

/// An SPL `TransferChecked` of `amount` base units of `mint` (`decimals`) from the token
/// account `source` to `destination`, signed by `authority`, for the token `program`.
pub fn transfer_checked(
    program: Pubkey,
    (source, mint, destination): (Pubkey, Pubkey, Pubkey),
    authority: Pubkey,
    (amount, decimals): (u64, u8),
) -> solana_sdk::instruction::Instruction {
    tollgate_encoding::solana::transfer_checked(
        &program,
        (&source, &mint, &destination),
        &authority,
        (amount, decimals),
    )
}

/// SPL tokens on the embedded ledger, made with the real Token and Associated Token programs.
pub mod spl_fixture {
    use solana_sdk::instruction::Instruction;
    use solana_sdk::pubkey::Pubkey;
    use solana_sdk::signature::Keypair;
    use solana_sdk::signer::Signer as _;
    use solana_sdk::transaction::Transaction;
    use tollgate_facilitator::chains::solana::rpc::SolanaRpc;
    use tollgate_facilitator::chains::solana::spl::associated_token_address;
    use tollgate_facilitator::chains::solana::token::TOKEN_PROGRAM;
    use tollgate_facilitator::devnet::SplDevToken;

    pub const DECIMALS: u8 = 6;

    /// A funded key that creates the mint and accounts and holds the mint authority.
    pub struct Fixture {
        pub funder: Keypair,
        pub mint: Pubkey,
        token: SplDevToken,
    }

    impl Fixture {
        pub async fn new(rpc: &SolanaRpc) -> Self {
            let funder = Keypair::new();
            let sig = rpc.request_airdrop(&funder.pubkey(), 10_000_000_000).await.unwrap();
            rpc.wait_for_outcome(&sig, std::time::Duration::from_secs(30)).await.unwrap();
            let token = SplDevToken::create(rpc, funder.insecure_clone(), DECIMALS).await.unwrap();
            Self { funder, mint: token.mint, token }
        }

        /// Creates `owner`'s associated token account (idempotent) and mints `amount` into it.
        pub async fn account(&self, rpc: &SolanaRpc, owner: &Pubkey, amount: u64) -> Pubkey {
            self.token.fund(rpc, owner, amount).await.unwrap()
        }

        /// Base units held by a token account.
        pub async fn balance(&self, rpc: &SolanaRpc, account: &Pubkey) -> u64 {
            let (_, data) = rpc.account(account).await.unwrap().unwrap();
            u64::from_le_bytes(data[64..72].try_into().unwrap())
        }

        /// An x402 `exact` payment: `buyer` signs a TransferChecked of `amount` to `to` (a token
        /// account), with `fee_payer` as fee payer whose signature is left empty.
        pub async fn exact_tx(
            &self,
            rpc: &SolanaRpc,
            fee_payer: &Pubkey,
            buyer: &Keypair,
            to: &Pubkey,
            amount: u64,
            unit_price: u64,
        ) -> String {
            self.exact_tx_with(rpc, fee_payer, buyer, (to, amount, unit_price), &[]).await
        }

        /// [`Self::exact_tx`] with `extra` instructions appended (hostile shapes).
        pub async fn exact_tx_with(
            &self,
            rpc: &SolanaRpc,
            fee_payer: &Pubkey,
            buyer: &Keypair,
            (to, amount, unit_price): (&Pubkey, u64, u64),
            extra: &[Instruction],
        ) -> String {
            use base64::Engine as _;
            let source = associated_token_address(&buyer.pubkey(), &self.mint, &TOKEN_PROGRAM);
            let accounts = (source, self.mint, *to);
            let transfer = super::transfer_checked(TOKEN_PROGRAM, accounts, buyer.pubkey(), (amount, DECIMALS));
            let mut ixs = vec![
                solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_limit(20_000),
                solana_compute_budget_interface::ComputeBudgetInstruction::set_compute_unit_price(unit_price),
                transfer,
            ];
            ixs.extend_from_slice(extra);
            let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
            let message = solana_sdk::message::Message::new_with_blockhash(&ixs, Some(fee_payer), &blockhash);
            let mut tx = Transaction::new_unsigned(message);
            tx.partial_sign(&[buyer], blockhash);
            base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap())
        }
    }
}

/// Writes an account on the embedded ledger (its `tollgate_setAccount` development method).
pub async fn set_account(rpc_url: &str, address: &Pubkey, owner: &Pubkey, data: &[u8]) {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tollgate_setAccount",
        "params": [address.to_string(), {"lamports": 10_000_000, "data": data, "owner": owner.to_string()}]});
    let answer: Value = reqwest::Client::new().post(rpc_url).json(&body).send().await.unwrap().json().await.unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
}

/// Token-2022 mint data: the 82-byte mint (`authority` mints, 6 decimals), then `extensions`
/// as (type, value) TLV entries.
pub fn mint_2022(authority: &Pubkey, extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut d = vec![1, 0, 0, 0];
    d.extend_from_slice(authority.as_ref());
    d.extend_from_slice(&0u64.to_le_bytes());
    d.push(6);
    d.push(1);
    d.extend_from_slice(&[0; 36]);
    d.resize(165, 0);
    d.push(1);
    for (kind, value) in extensions {
        d.extend_from_slice(&kind.to_le_bytes());
        d.extend_from_slice(&u16::try_from(value.len()).unwrap().to_le_bytes());
        d.extend_from_slice(value);
    }
    d
}
