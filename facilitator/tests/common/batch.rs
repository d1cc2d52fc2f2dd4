//! `batch-settlement` on the test's anvil: the contracts at their canonical addresses, an
//! EIP-3009 token, a relayer, and what buyers and receiver authorizers sign.

use alloy::primitives::{Address, B256, Bytes, TxKind, U256, Uint};
use alloy::providers::Provider as _;
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolStruct as _, SolValue as _};
use serde_json::{Value, json};
use tollgate_encoding::batch::{
    self as wire, BATCH_SETTLEMENT, BatchSettlement as Contract, ChannelConfig, ERC3009_COLLECTOR,
};
use tollgate_facilitator::chains::evm::erc20::view;
use tollgate_facilitator::devnet;

use super::evm::{ETH, EvmApp, Token};
use super::permit2::install;

alloy::sol! {
    /// A deposit collector's entry point, called here by a stranger.
    interface Collector {
        function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes collectorData) external;
    }
}

/// An anvil with Permit2 and the batch-settlement contracts, an EIP-3009 token, and a relayer
/// holding ETH (what a facilitator is to these contracts: anyone who sends).
pub struct World {
    pub t: EvmApp,
    pub token: Token,
    pub relayer: PrivateKeySigner,
}

impl World {
    pub async fn start() -> Self {
        Self::on(EvmApp::start().await).await
    }

    /// The same, the facilitator reaching anvil through a counting proxy.
    pub async fn start_behind_proxy() -> Self {
        Self::on(EvmApp::start_behind_proxy().await).await
    }

    async fn on(t: EvmApp) -> Self {
        install(&t).await;
        let deployer = PrivateKeySigner::random();
        t.fund(&deployer.address().to_string(), 10 * ETH).await;
        devnet::install_batch_settlement(&t.backend().rpc, &deployer).await.unwrap();
        let token = Token::deploy(&t).await;
        let relayer = PrivateKeySigner::random();
        t.fund(&relayer.address().to_string(), ETH).await;
        Self { t, token, relayer }
    }

    pub fn chain(&self) -> u64 {
        self.t.anvil.chain_id()
    }

    /// Sends `call` to the settlement contract from `from`: whether it was mined without revert.
    pub async fn send(&self, from: &PrivateKeySigner, call: &impl SolCall) -> bool {
        self.send_to(from, BATCH_SETTLEMENT, call.abi_encode()).await
    }

    pub async fn send_to(&self, from: &PrivateKeySigner, to: Address, data: Vec<u8>) -> bool {
        self.t.fund(&from.address().to_string(), ETH).await;
        devnet::send_evm(&self.t.backend().rpc, from, TxKind::Call(to), data).await.is_ok()
    }

    pub async fn read<C: SolCall>(&self, call: &C) -> C::Return {
        view(&self.t.backend().rpc, BATCH_SETTLEMENT, call).await.unwrap()
    }

    /// (balance, totalClaimed) of a channel.
    pub async fn channel(&self, id: B256) -> (u128, u128) {
        let c = self.read(&Contract::channelsCall { channelId: id }).await;
        (c.balance, c.totalClaimed)
    }

    pub async fn balance(&self, owner: Address) -> u128 {
        self.token.balance(&self.t, owner).await
    }

    /// The latest block's timestamp.
    pub async fn now(&self) -> u64 {
        let provider = self.t.backend().rpc.provider().clone();
        let block: Value = provider.raw_request("eth_getBlockByNumber".into(), ("latest", false)).await.unwrap();
        u64::from_str_radix(block["timestamp"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    /// The next block is mined at `timestamp`, whatever the wall clock says.
    pub async fn next_block_at(&self, timestamp: u64) {
        let provider = self.t.backend().rpc.provider().clone();
        let _: Value = provider.raw_request("evm_setNextBlockTimestamp".into(), (timestamp,)).await.unwrap();
    }

    /// Moves the chain's clock `secs` forward and mines a block.
    pub async fn wait(&self, secs: u64) {
        let provider = self.t.backend().rpc.provider().clone();
        let _: Value = provider.raw_request("evm_increaseTime".into(), (secs,)).await.unwrap();
        let _: Value = provider.raw_request("evm_mine".into(), ()).await.unwrap();
    }

    /// The deposit call of `amount` into `config`'s channel, signed by `payer` as an EIP-3009
    /// `ReceiveWithAuthorization` to the ERC-3009 collector (its nonce derived from `for_channel`).
    pub fn deposit_3009(
        &self,
        config: &ChannelConfig,
        payer: &PrivateKeySigner,
        amount: u128,
        for_channel: B256,
        salt: u64,
    ) -> Contract::depositCall {
        let salt = U256::from(salt);
        let valid_before = U256::from(chrono::Utc::now().timestamp().unsigned_abs() + 3600);
        let message = wire::ReceiveWithAuthorization {
            from: payer.address(),
            to: ERC3009_COLLECTOR,
            value: U256::from(amount),
            validAfter: U256::ZERO,
            validBefore: valid_before,
            nonce: wire::erc3009_deposit_nonce(for_channel, salt),
        };
        let domain =
            tollgate_encoding::evm::eip3009_domain(Token::NAME.into(), "2".into(), self.chain(), self.token.address);
        let signature = payer.sign_hash_sync(&message.eip712_signing_hash(&domain)).unwrap();
        Contract::depositCall {
            config: config.clone(),
            amount,
            collector: ERC3009_COLLECTOR,
            collectorData: wire::erc3009_collector_data(U256::ZERO, valid_before, salt, &signature.as_bytes()).into(),
        }
    }

    /// A config for `payer` paying `receiver`, vouchers signed by `payer_authorizer` (zero: the
    /// payer itself), claims and refunds authorized by `receiver_authorizer`.
    pub fn config(
        &self,
        payer: Address,
        payer_authorizer: Address,
        receiver: Address,
        receiver_authorizer: Address,
        salt: u8,
    ) -> ChannelConfig {
        ChannelConfig {
            payer,
            payerAuthorizer: payer_authorizer,
            receiver,
            receiverAuthorizer: receiver_authorizer,
            token: self.token.address,
            withdrawDelay: Uint::from(900u64),
            salt: B256::repeat_byte(salt),
        }
    }
}

/// A voucher signature by `key` for `max` in all on channel `id`.
pub fn voucher(w: &World, key: &PrivateKeySigner, id: B256, max: u128) -> Bytes {
    key.sign_hash_sync(&wire::voucher_digest(w.chain(), id, max)).unwrap().as_bytes().to_vec().into()
}

pub fn row(config: &ChannelConfig, max: u128, signature: Bytes, total: u128) -> Contract::VoucherClaim {
    Contract::VoucherClaim {
        voucher: Contract::VoucherBody { channel: config.clone(), maxClaimableAmount: max },
        signature,
        totalClaimed: total,
    }
}

/// `claimWithSignature` of `rows`, the batch signed by `authorizer`.
pub fn signed_claim(
    w: &World,
    rows: Vec<Contract::VoucherClaim>,
    authorizer: &PrivateKeySigner,
) -> Contract::claimWithSignatureCall {
    let entries: Vec<_> =
        rows.iter().map(|r| (r.voucher.channel.id(w.chain()), r.voucher.maxClaimableAmount, r.totalClaimed)).collect();
    let signature = authorizer.sign_hash_sync(&wire::claim_batch_digest(w.chain(), &entries)).unwrap();
    Contract::claimWithSignatureCall { voucherClaims: rows, authorizerSignature: signature.as_bytes().to_vec().into() }
}

pub fn signed_refund(
    w: &World,
    config: &ChannelConfig,
    amount: u128,
    nonce: u64,
    authorizer: &PrivateKeySigner,
) -> Contract::refundWithSignatureCall {
    let digest = wire::refund_digest(w.chain(), config.id(w.chain()), U256::from(nonce), amount);
    let signature = authorizer.sign_hash_sync(&digest).unwrap();
    Contract::refundWithSignatureCall {
        config: config.clone(),
        amount,
        nonce: U256::from(nonce),
        receiverAuthorizerSignature: signature.as_bytes().to_vec().into(),
    }
}

impl World {
    /// The seller's `batch-settlement` requirement: `amount` per request to `receiver`, claims
    /// authorized by `authorizer`, a 900 s withdrawal delay.
    pub fn requirement(&self, receiver: Address, authorizer: Address, amount: u128) -> Value {
        json!({
            "scheme": "batch-settlement", "network": self.t.network().to_string(), "amount": amount.to_string(),
            "asset": self.token.address.to_string(), "payTo": receiver.to_string(), "maxTimeoutSeconds": 3600,
            "extra": {"receiverAuthorizer": authorizer.to_string(), "withdrawDelay": 900, "name": Token::NAME, "version": "2"},
        })
    }

    /// A `voucher` payload for `max` in all on `config`'s channel, signed by `key`.
    pub fn voucher_payload(&self, config: &ChannelConfig, key: &PrivateKeySigner, max: u128) -> Value {
        let id = config.id(self.chain());
        json!({"type": "voucher", "channelConfig": config_json(config), "voucher": voucher_json(self, key, id, max)})
    }

    /// A `deposit` payload of `amount` (signed by `payer`) with a voucher for `max` signed by `key`.
    pub fn deposit_payload(
        &self,
        config: &ChannelConfig,
        payer: &PrivateKeySigner,
        key: &PrivateKeySigner,
        (amount, max): (u128, u128),
        salt: u64,
    ) -> Value {
        let id = config.id(self.chain());
        let call = self.deposit_3009(config, payer, amount, id, salt);
        let (after, before, salt, signature) =
            <(U256, U256, U256, Bytes)>::abi_decode_params(&call.collectorData).unwrap();
        json!({
            "type": "deposit", "channelConfig": config_json(config), "voucher": voucher_json(self, key, id, max),
            "deposit": {"amount": amount.to_string(), "authorization": {"erc3009Authorization": {
                "validAfter": after.to_string(), "validBefore": before.to_string(),
                "salt": B256::from(salt).to_string(), "signature": signature.to_string(),
            }}},
        })
    }
}

/// A channel configuration as the scheme's JSON writes it.
pub fn config_json(c: &ChannelConfig) -> Value {
    json!({
        "payer": c.payer.to_string(), "payerAuthorizer": c.payerAuthorizer.to_string(),
        "receiver": c.receiver.to_string(), "receiverAuthorizer": c.receiverAuthorizer.to_string(),
        "token": c.token.to_string(), "withdrawDelay": c.withdrawDelay.to::<u64>(), "salt": c.salt.to_string(),
    })
}

fn voucher_json(w: &World, key: &PrivateKeySigner, id: B256, max: u128) -> Value {
    json!({"channelId": id.to_string(), "maxClaimableAmount": max.to_string(), "signature": voucher(w, key, id, max).to_string()})
}
