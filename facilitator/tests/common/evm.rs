//! The EVM side of the chain tests: a facilitator on a real anvil (installed by `scripts/test`
//! from the npm registry into `.tools/`, or named by `TOLLGATE_ANVIL`), started per test on
//! 127.0.0.1 with a free port; customers with custodial wallets; the EIP-3009 test token.

use std::sync::Arc;

use alloy::node_bindings::{Anvil, AnvilInstance};
use alloy::primitives::{Address, U256};
use alloy::providers::Provider as _;
use alloy::signers::local::PrivateKeySigner;
use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};
use tollgate_facilitator::admin::{self, NewKey};
use tollgate_facilitator::auth::keys::KeyEnv;
use tollgate_facilitator::chains::Chains;
use tollgate_facilitator::chains::evm::EvmBackend;
use tollgate_facilitator::chains::evm::build::{Transfer, sign};
use tollgate_facilitator::chains::evm::rpc::{DEFAULT_CALL_TIMEOUT, EvmRpc};
use tollgate_facilitator::clock::SystemClock;
use tollgate_facilitator::config::{Config, DatabaseUrl};
use tollgate_facilitator::devnet::{self, DevToken, TokenKind};
use tollgate_facilitator::plans::Plan;
use tollgate_facilitator::store::SqlStore;
use tollgate_facilitator::wallets::MasterKey;
use tollgate_facilitator::{AppState, router};
use tollgate_protocol::ChainFamily;

/// One ETH in wei.
pub const ETH: u128 = 1_000_000_000_000_000_000;

pub struct EvmApp {
    pub app: Router,
    pub state: AppState,
    pub store: Arc<SqlStore>,
    pub anvil: AnvilInstance,
    pub dir: tempfile::TempDir,
    /// Between the facilitator and anvil, when started with [`Self::start_behind_proxy`].
    pub proxy: Option<super::rpc_proxy::RpcProxy>,
}

impl EvmApp {
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// A facilitator that reaches anvil through an [`RpcProxy`](super::rpc_proxy::RpcProxy).
    pub async fn start_behind_proxy() -> Self {
        Self::start_with(true).await
    }

    /// The SQLite file behind the store.
    pub fn db_path(&self) -> std::path::PathBuf {
        self.dir.path().join("evm.db")
    }

    /// anvil itself, not through the proxy.
    pub async fn direct_rpc(&self) -> EvmRpc {
        EvmRpc::connect(&self.anvil.endpoint(), DEFAULT_CALL_TIMEOUT).await.unwrap()
    }

    async fn start_with(proxied: bool) -> Self {
        let anvil = Anvil::at(devnet::anvil_binary().unwrap()).host("127.0.0.1").try_spawn().expect("anvil starts");
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            database_url: DatabaseUrl::parse(dir.path().join("evm.db").to_str().unwrap()).unwrap(),
            ..Config::default()
        };
        if proxied {
            // Fault tests: a send whose broadcast went astray answers `pending` after a second.
            config.limits.send_wait_secs = 1;
        }
        let store = Arc::new(SqlStore::connect(&config.database_url).await.unwrap());
        let proxy = if proxied { Some(super::rpc_proxy::RpcProxy::start(&anvil.endpoint()).await) } else { None };
        let url = proxy.as_ref().map_or_else(|| anvil.endpoint(), |p| p.url.clone());
        let rpc = EvmRpc::connect(&url, DEFAULT_CALL_TIMEOUT).await.unwrap();
        // The facilitator's own account (x402 exact settlements), funded below.
        let signer = PrivateKeySigner::random();
        let signer_address = signer.address();
        let chains = Chains::none().with_evm(EvmBackend::new(rpc).with_signer(signer));
        let state = AppState::new(config, store.clone(), Arc::new(SystemClock))
            .with_chains(chains)
            .with_master_key(MasterKey::generate().unwrap());
        let app = Self { app: router(state.clone()), state, store, anvil, dir, proxy };
        app.fund(&signer_address.to_string(), 10 * ETH).await;
        app
    }

    pub fn backend(&self) -> Arc<EvmBackend> {
        self.state.chains.evm(&self.network()).unwrap()
    }

    pub fn network(&self) -> tollgate_protocol::Network {
        tollgate_protocol::Network::eip155(self.anvil.chain_id())
    }

    /// A key with a custodial EVM wallet: (key, wallet address).
    pub async fn customer(&self) -> (String, String) {
        let (key, wallet, _) = self.customer_account().await;
        (key, wallet)
    }

    /// A key with a custodial EVM wallet: (key, wallet address, its account's id).
    pub async fn customer_account(&self) -> (String, String, String) {
        let new = NewKey { plan: Plan::Premium, rpm: None, label: None, account: None, env: KeyEnv::Test };
        let created = admin::create_key(&*self.store, new, chrono::Utc::now()).await.unwrap();
        let master = self.state.master_key.as_ref().unwrap();
        let wallet =
            admin::create_wallet(&*self.store, master, &created.record.id, ChainFamily::Evm, chrono::Utc::now())
                .await
                .unwrap();
        (created.secret.expose().to_owned(), wallet, created.record.account_id.clone())
    }

    /// Sets an account's balance (anvil's own method).
    pub async fn fund(&self, address: &str, wei: u128) {
        let address: Address = address.parse().unwrap();
        let _: Value = self
            .backend()
            .rpc
            .provider()
            .raw_request("anvil_setBalance".into(), (address, U256::from(wei)))
            .await
            .unwrap();
    }

    pub async fn balance(&self, address: &str) -> u128 {
        u128::try_from(self.backend().rpc.balance(address.parse().unwrap()).await.unwrap()).unwrap()
    }

    pub async fn call(&self, method: &str, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
        super::call(&self.app, method, path, key, body).await
    }

    /// A signed EIP-1559 transfer by `signer`, as an `exact-native` X-PAYMENT value.
    pub async fn signed_proof(&self, signer: &PrivateKeySigner, to: Address, wei: u128, chain_id: u64) -> String {
        let rpc = &self.backend().rpc;
        let nonce = rpc.pending_nonce(signer.address()).await.unwrap();
        let fees = rpc.fees().await.unwrap();
        let transfer = Transfer {
            chain_id,
            nonce,
            to,
            value: U256::from(wei),
            gas_limit: 21_000,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        };
        let (raw, _) = sign(transfer.tx(), signer).unwrap();
        tollgate_protocol::x402::header::encode(&json!({
            "x402Version": 1, "scheme": "exact-native", "network": self.network().to_string(),
            "payload": {"transaction": format!("0x{}", alloy::primitives::hex::encode(raw))}
        }))
        .unwrap()
    }
}

alloy::sol! {
    /// The test token's own functions (beyond what the facilitator calls).
    interface TestToken {
        function mint(address to, uint256 value) external;
        function balanceOf(address owner) external view returns (uint256);
        function transferWithAuthorization(
            address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature
        ) external;
    }
}

/// The EIP-3009 token of `contracts/TollgateTestToken.sol`, deployed on the test's anvil.
pub struct Token {
    pub address: Address,
    pub minter: PrivateKeySigner,
}

impl Token {
    pub const NAME: &str = "Tollgate USD";
    pub const DECIMALS: u8 = 6;

    pub async fn deploy(t: &EvmApp) -> Self {
        let minter = PrivateKeySigner::random();
        t.fund(&minter.address().to_string(), ETH).await;
        let token = DevToken::deploy(
            &t.backend().rpc,
            minter.clone(),
            TokenKind::Eip3009,
            (Self::NAME, "TUSD", Self::DECIMALS),
        )
        .await
        .unwrap();
        Self { address: token.address, minter }
    }

    pub async fn send(
        t: &EvmApp,
        from: &PrivateKeySigner,
        to: alloy::primitives::TxKind,
        input: Vec<u8>,
    ) -> Option<Address> {
        devnet::send_evm(&t.backend().rpc, from, to, input).await.unwrap()
    }

    pub async fn mint(&self, t: &EvmApp, to: Address, value: u128) {
        use alloy::sol_types::SolCall as _;
        let data = TestToken::mintCall { to, value: U256::from(value) }.abi_encode();
        Self::send(t, &self.minter, alloy::primitives::TxKind::Call(self.address), data).await;
    }

    pub async fn balance(&self, t: &EvmApp, owner: Address) -> u128 {
        let rpc = &t.backend().rpc;
        u128::try_from(tollgate_facilitator::chains::evm::erc20::balance_of(rpc, self.address, owner).await.unwrap())
            .unwrap()
    }

    /// An EIP-3009 authorization from `payer`'s account, signed by `payer`.
    pub fn authorize(
        &self,
        t: &EvmApp,
        payer: &PrivateKeySigner,
        to: Address,
        value: u128,
        window: (u64, u64),
        nonce: alloy::primitives::B256,
    ) -> Value {
        self.authorize_as(t, (payer.address(), payer), to, value, window, nonce)
    }

    /// An EIP-3009 authorization from account `from`, signed by `key` (a contract wallet's owner).
    pub fn authorize_as(
        &self,
        t: &EvmApp,
        (from, key): (Address, &PrivateKeySigner),
        to: Address,
        value: u128,
        (valid_after, valid_before): (u64, u64),
        nonce: alloy::primitives::B256,
    ) -> Value {
        use alloy::signers::SignerSync as _;
        use alloy::sol_types::SolStruct as _;
        use tollgate_facilitator::chains::evm::erc20::TransferWithAuthorization;
        let domain = alloy::sol_types::eip712_domain! {
            name: Self::NAME,
            version: "2",
            chain_id: t.anvil.chain_id(),
            verifying_contract: self.address,
        };
        let message = TransferWithAuthorization {
            from,
            to,
            value: U256::from(value),
            validAfter: U256::from(valid_after),
            validBefore: U256::from(valid_before),
            nonce,
        };
        let signature = key.sign_hash_sync(&message.eip712_signing_hash(&domain)).unwrap();
        json!({
            "signature": format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
            "authorization": {
                "from": from.to_string(), "to": to.to_string(), "value": value.to_string(),
                "validAfter": valid_after.to_string(), "validBefore": valid_before.to_string(),
                "nonce": format!("{nonce:#x}"),
            }
        })
    }

    /// The x402 v2 requirement for `amount` base units to `pay_to`.
    pub fn requirement(&self, t: &EvmApp, pay_to: Address, amount: u128) -> Value {
        json!({
            "scheme": "exact", "network": t.network().to_string(), "amount": amount.to_string(),
            "asset": self.address.to_string(), "payTo": pay_to.to_string(), "maxTimeoutSeconds": 30,
            "extra": {"name": Self::NAME, "version": "2"}
        })
    }
}

/// An x402 v2 `/verify` / `/settle` body.
pub fn x402_v2(requirement: &Value, payload: Value) -> Value {
    json!({
        "x402Version": 2,
        "paymentPayload": {"x402Version": 2, "accepted": requirement, "payload": payload,
                           "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}},
        "paymentRequirements": requirement,
    })
}
