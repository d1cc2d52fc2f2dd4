//! Permit2 on the test's anvil: the real Permit2 and the x402 proxies at their canonical
//! addresses, plain and EIP-2612 tokens, and buyers' signed permits.

use alloy::primitives::{Address, TxKind, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolCall as _;
use serde_json::{Value, json};
use tollgate_encoding::permit2::{self as wire, EXACT_PROXY, PERMIT2, UPTO_PROXY};
use tollgate_facilitator::devnet::{self, DevToken, TokenKind};

use super::evm::{ETH, EvmApp};

/// A token paid through Permit2, deployed on the test's anvil (after Permit2 is installed).
pub struct P2Token {
    pub token: DevToken,
    pub name: &'static str,
}

/// Installs Permit2 and the proxies, once per anvil.
pub async fn install(t: &EvmApp) {
    let deployer = PrivateKeySigner::random();
    t.fund(&deployer.address().to_string(), ETH).await;
    devnet::install_permit2(&t.backend().rpc, &deployer).await.unwrap();
}

impl P2Token {
    pub async fn deploy(t: &EvmApp, kind: TokenKind, name: &'static str) -> Self {
        let minter = PrivateKeySigner::random();
        t.fund(&minter.address().to_string(), ETH).await;
        let token = DevToken::deploy(&t.backend().rpc, minter, kind, (name, "TP2", 6)).await.unwrap();
        Self { token, name }
    }

    pub fn address(&self) -> Address {
        self.token.address
    }

    pub async fn mint(&self, t: &EvmApp, to: Address, value: u128) {
        self.token.mint(&t.backend().rpc, to, U256::from(value)).await.unwrap();
    }

    pub async fn balance(&self, t: &EvmApp, owner: Address) -> u128 {
        u128::try_from(self.token.balance_of(&t.backend().rpc, owner).await.unwrap()).unwrap()
    }

    /// `owner` lets Permit2 spend `value` of its tokens (sent by the owner, who needs ETH).
    pub async fn approve_permit2(&self, t: &EvmApp, owner: &PrivateKeySigner, value: U256) {
        t.fund(&owner.address().to_string(), ETH).await;
        let data = wire::Erc20::approveCall { spender: PERMIT2, value }.abi_encode();
        devnet::send_evm(&t.backend().rpc, owner, TxKind::Call(self.address()), data).await.unwrap();
    }

    /// An EIP-2612 permit by `owner` letting Permit2 spend `value` until `deadline`, as the
    /// `eip2612GasSponsoring` extension carries it.
    pub fn eip2612(&self, t: &EvmApp, owner: &PrivateKeySigner, spender: Address, value: u128, deadline: u64) -> Value {
        let permit = wire::Permit {
            owner: owner.address(),
            spender,
            value: U256::from(value),
            nonce: U256::ZERO,
            deadline: U256::from(deadline),
        };
        let digest = wire::eip2612_signing_hash((self.name, "1", t.anvil.chain_id()), self.address(), &permit);
        let signature = owner.sign_hash_sync(&digest).unwrap();
        json!({"eip2612GasSponsoring": {"info": {
            "description": "echoed from the seller's declaration, ignored", "version": "1",
            "from": owner.address().to_string(), "asset": self.address().to_string(),
            "spender": spender.to_string(), "amount": value.to_string(), "nonce": "0",
            "deadline": deadline.to_string(),
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes()),
        }}})
    }
}

impl P2Token {
    /// `owner`'s signed `approve(approved, value)` of this token (sent to `target`, by default
    /// the token), with the payer's next nonce (or `nonce`), as the `erc20ApprovalGasSponsoring`
    /// extension carries it naming `spender`.
    pub async fn signed_approval(&self, t: &EvmApp, owner: &PrivateKeySigner, offer: Approval<'_>) -> Value {
        let rpc = &t.backend().rpc;
        let fees = rpc.fees().await.unwrap();
        let nonce = match offer.nonce {
            Some(n) => n,
            None => rpc.pending_nonce(owner.address()).await.unwrap(),
        };
        let call = wire::Erc20::approveCall { spender: offer.approved, value: offer.value };
        let tx = alloy::consensus::TxEip1559 {
            chain_id: t.anvil.chain_id(),
            nonce,
            gas_limit: 70_000,
            max_fee_per_gas: offer.max_fee.unwrap_or(fees.max_fee_per_gas),
            max_priority_fee_per_gas: offer.max_fee.unwrap_or(fees.max_priority_fee_per_gas),
            to: TxKind::Call(offer.target.unwrap_or(self.address())),
            value: U256::ZERO,
            access_list: Default::default(),
            input: call.abi_encode().into(),
        };
        let (raw, _) = tollgate_facilitator::chains::evm::build::sign(tx, offer.signer.unwrap_or(owner)).unwrap();
        json!({"erc20ApprovalGasSponsoring": {"info": {
            "description": "echoed from the seller's declaration, ignored", "version": "1",
            "from": owner.address().to_string(), "asset": self.address().to_string(),
            "spender": offer.spender.to_string(), "amount": offer.value.to_string(),
            "signedTransaction": alloy::primitives::hex::encode_prefixed(raw),
        }}})
    }
}

/// How a signed approval is made (see [`P2Token::signed_approval`]).
pub struct Approval<'a> {
    /// The spender the extension names.
    pub spender: Address,
    /// The spender the transaction approves.
    pub approved: Address,
    pub value: U256,
    /// Another target than the token.
    pub target: Option<Address>,
    /// Another signer than the owner.
    pub signer: Option<&'a PrivateKeySigner>,
    /// Another nonce than the owner's next.
    pub nonce: Option<u64>,
    /// Another most fee per gas than the network's.
    pub max_fee: Option<u128>,
}

impl Approval<'_> {
    /// Permit2 may spend all of it.
    pub const fn of_permit2() -> Self {
        Self {
            spender: PERMIT2,
            approved: PERMIT2,
            value: U256::MAX,
            target: None,
            signer: None,
            nonce: None,
            max_fee: None,
        }
    }
}

/// What a buyer signs.
#[derive(Clone)]
pub struct Permit {
    pub token: Address,
    pub amount: u128,
    pub spender: Address,
    pub nonce: U256,
    pub deadline: u64,
    pub to: Address,
    /// `Some` for upto.
    pub facilitator: Option<Address>,
    pub valid_after: u64,
}

impl Permit {
    /// An `exact` permit of `amount` of `token` to `to`, valid for five minutes.
    pub fn exact(token: Address, amount: u128, to: Address) -> Self {
        let now = chrono::Utc::now().timestamp().unsigned_abs();
        let nonce = U256::from_be_bytes(rand::random::<[u8; 32]>());
        Self { token, amount, spender: EXACT_PROXY, nonce, deadline: now + 300, to, facilitator: None, valid_after: 0 }
    }

    /// An `upto` permit of at most `amount`, settled by `facilitator`.
    pub fn upto(token: Address, amount: u128, to: Address, facilitator: Address) -> Self {
        Self { spender: UPTO_PROXY, facilitator: Some(facilitator), ..Self::exact(token, amount, to) }
    }

    /// The payload, signed by `key` on chain `chain_id`.
    pub fn signed(&self, key: &PrivateKeySigner, chain_id: u64) -> Value {
        let digest = wire::Permit2Message {
            token: self.token,
            amount: U256::from(self.amount),
            spender: self.spender,
            nonce: self.nonce,
            deadline: U256::from(self.deadline),
            to: self.to,
            facilitator: self.facilitator,
            valid_after: U256::from(self.valid_after),
        }
        .signing_hash(chain_id);
        let signature = key.sign_hash_sync(&digest).unwrap();
        let mut witness = json!({"to": self.to.to_string(), "validAfter": self.valid_after.to_string()});
        if let Some(f) = self.facilitator {
            witness["facilitator"] = json!(f.to_string());
        }
        json!({
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes()),
            "permit2Authorization": {
                "from": key.address().to_string(),
                "permitted": {"token": self.token.to_string(), "amount": self.amount.to_string()},
                "spender": self.spender.to_string(),
                "nonce": self.nonce.to_string(),
                "deadline": self.deadline.to_string(),
                "witness": witness,
            }
        })
    }
}

/// The x402 v2 requirement of `scheme` for `amount` of `token` to `pay_to`.
pub fn requirement(t: &EvmApp, scheme: &str, token: Address, pay_to: Address, amount: u128) -> Value {
    let mut extra = json!({"assetTransferMethod": "permit2"});
    if scheme == "upto" {
        let facilitator = t.backend().signer.as_ref().unwrap().0.address();
        extra["facilitatorAddress"] = json!(facilitator.to_string());
    }
    json!({
        "scheme": scheme, "network": t.network().to_string(), "amount": amount.to_string(),
        "asset": token.to_string(), "payTo": pay_to.to_string(), "maxTimeoutSeconds": 30, "extra": extra,
    })
}

/// An x402 v2 `/verify` / `/settle` body: the payload as accepted for `accepted`, the seller's
/// `requirement` (for upto at settlement: the charge), and the payload's `extensions`.
pub fn body(accepted: &Value, requirement: &Value, payload: Value, extensions: Value) -> Value {
    json!({
        "x402Version": 2,
        "paymentPayload": {"x402Version": 2, "accepted": accepted, "payload": payload, "extensions": extensions,
                           "resource": {"url": "https://seller.example/report", "description": "", "mimeType": ""}},
        "paymentRequirements": requirement,
    })
}
