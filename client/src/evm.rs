//! Paying on EVM chains: `exact-native` ETH (an EIP-1559 transfer the buyer signs; the
//! facilitator broadcasts it), x402 `exact` tokens (an EIP-3009 `transferWithAuthorization`
//! the buyer signs off chain; the facilitator submits it and pays the gas), and any ERC-20
//! through Permit2: `exact` with `assetTransferMethod: "permit2"` and `upto` (a permit for at
//! most the price, which the seller settles for what the request used).
//!
//! Permit2 moves only what its owner let it: without an allowance, the buyer offers a signed
//! EIP-2612 permit when the token has one and the seller declared `eip2612GasSponsoring` (the
//! facilitator pays its gas), else approves Permit2 once on chain, paying that gas in ETH.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::time::Duration;

use alloy::consensus::{SignableTransaction as _, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Encodable2718 as _;
use alloy::network::TxSignerSync as _;
use alloy::primitives::{Address as EvmAddress, B256, Bytes, TxKind, U256};
use alloy::providers::{Provider as _, RootProvider};
use alloy::rpc::types::TransactionRequest;
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct as _;
use rand::TryRngCore as _;
use serde_json::{Value, json};
use tokio::sync::{Mutex, OnceCell};
use tollgate_encoding::evm::{Erc3009 as Token, TransferWithAuthorization, eip3009_domain};
use tollgate_encoding::permit2::{self as wire, EXACT_PROXY, PERMIT2, Permit2Message, UPTO_PROXY};
use tollgate_protocol::x402::schemes::{
    EIP2612_GAS_SPONSORING, Eip2612Sponsoring, ExactNativePayload, Permit2Authorization, Permit2Payload,
    Permit2Witness, TokenPermissions,
};
use tollgate_protocol::x402::{Asset, PaymentRequirements, SCHEME_EXACT, SCHEME_EXACT_NATIVE, SCHEME_UPTO};
use tollgate_protocol::{Address, AtomicAmount, ChainFamily, Network};

use crate::{PayError, Proof};

mod channels;

/// Gas of a plain transfer to an account without code.
const TRANSFER_GAS: u64 = 21_000;
/// Deadline of one RPC call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How far back an authorization's `validAfter` is set, against clocks a little apart.
const VALID_AFTER_SLACK_SECS: u64 = 60;
/// Shortest validity window asked for, whatever the offer's `maxTimeoutSeconds`.
const MIN_VALIDITY_SECS: u64 = 60;
/// How long the buyer waits for its own transactions (a Permit2 approval, a withdrawal) to be mined.
const APPROVAL_WAIT: Duration = Duration::from_secs(30);

/// A token's EIP-712 domain fields and decimals.
#[derive(Debug, Clone)]
struct TokenFacts {
    name: Option<String>,
    symbol: Option<String>,
    version: Option<String>,
    decimals: u8,
}

/// An EVM key and the node it reads chain id, nonces, fees and tokens from.
pub struct EvmWallet {
    signer: PrivateKeySigner,
    provider: RootProvider,
    network: OnceCell<(Network, u64)>,
    /// The next nonce this process will use, so that payments in quick succession do not collide
    /// while the earlier ones are still pending.
    next_nonce: Mutex<Option<u64>>,
    tokens: Mutex<HashMap<EvmAddress, TokenFacts>>,
}

impl std::fmt::Debug for EvmWallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmWallet").field("address", &self.signer.address()).finish_non_exhaustive()
    }
}

/// RPC clients quote the endpoint in their errors, and providers put their key in it.
fn build_error(e: impl std::fmt::Display) -> PayError {
    PayError::Build(tollgate_protocol::redact::redact_urls(&e.to_string()))
}

/// Awaits an RPC call under [`CALL_TIMEOUT`].
async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, PayError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(build_error(format!("{what}: {e}"))),
        Err(_) => Err(build_error(format!("{what}: no answer within {} s", CALL_TIMEOUT.as_secs()))),
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl EvmWallet {
    /// Pays with `signer`, reading the chain id, nonces, fees and tokens from `rpc_url`; only
    /// offers on that node's chain are paid.
    ///
    /// # Errors
    /// [`PayError::Build`] when `rpc_url` is not a URL.
    pub fn new(signer: PrivateKeySigner, rpc_url: &str) -> Result<Self, PayError> {
        let url = rpc_url.parse().map_err(|e| {
            build_error(format!("the EVM RPC URL {} is not a URL: {e}", tollgate_protocol::redact::redact_url(rpc_url)))
        })?;
        Ok(Self {
            signer,
            provider: RootProvider::new_http(url),
            network: OnceCell::new(),
            next_nonce: Mutex::new(None),
            tokens: Mutex::new(HashMap::new()),
        })
    }

    fn own_address(&self) -> String {
        self.signer.address().to_checksum(None)
    }

    /// The chain the node serves (asked once).
    async fn network(&self) -> Result<&(Network, u64), PayError> {
        self.network
            .get_or_try_init(|| async {
                let id = bounded("eth_chainId", self.provider.get_chain_id().into_future()).await?;
                Ok((Network::eip155(id), id))
            })
            .await
    }

    /// The decimals of what `requirement` asks for when this wallet can pay it, `None` when it
    /// cannot (another chain, another scheme).
    async fn read_decimals(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError> {
        if requirement.network.family() != ChainFamily::Evm
            || !matches!(requirement.pay_to, Address::Evm(_))
            || requirement.network != self.network().await?.0
        {
            return Ok(None);
        }
        match (requirement.scheme.as_str(), requirement.asset) {
            (SCHEME_EXACT_NATIVE, Asset::Native) => Ok(Some(ChainFamily::Evm.native_decimals())),
            (SCHEME_EXACT | SCHEME_UPTO, Asset::Token(Address::Evm(token))) => {
                Ok(Some(self.token(EvmAddress::from(token)).await?.decimals))
            }
            // A channel needs the seller's receiver authorizer to be named.
            (tollgate_protocol::x402::batch::SCHEME, Asset::Token(Address::Evm(token)))
                if channels::receiver_authorizer(requirement).is_some() =>
            {
                Ok(Some(self.token(EvmAddress::from(token)).await?.decimals))
            }
            _ => Ok(None),
        }
    }

    async fn view<C: alloy::sol_types::SolCall>(&self, token: EvmAddress, call: &C) -> Result<C::Return, PayError> {
        let request = TransactionRequest::default().to(token).input(Bytes::from(call.abi_encode()).into());
        let answer = bounded(C::SIGNATURE, self.provider.call(request).into_future()).await?;
        C::abi_decode_returns(&answer).map_err(|e| build_error(format!("{token} answered {} badly: {e}", C::SIGNATURE)))
    }

    /// What this client needs of a token: decimals (for the cap) and, when it publishes them,
    /// the name and version of its EIP-712 domain.
    async fn token(&self, token: EvmAddress) -> Result<TokenFacts, PayError> {
        if let Some(known) = self.tokens.lock().await.get(&token) {
            return Ok(known.clone());
        }
        let decimals = self.view(token, &Token::decimalsCall {}).await?;
        let facts = TokenFacts {
            name: self.view(token, &Token::nameCall {}).await.ok(),
            symbol: self.view(token, &Token::symbolCall {}).await.ok(),
            version: self.view(token, &Token::versionCall {}).await.ok(),
            decimals,
        };
        self.tokens.lock().await.insert(token, facts.clone());
        Ok(facts)
    }

    /// Builds and signs the proof for `requirement` (which [`Self::decimals`] accepted), with
    /// what the seller declared in `declared` (its 402's extensions).
    pub(crate) async fn pay(
        &self,
        requirement: &PaymentRequirements,
        declared: &serde_json::Map<String, Value>,
    ) -> Result<Proof, PayError> {
        let Address::Evm(to) = requirement.pay_to else {
            return Err(build_error("payTo is not an EVM address"));
        };
        let to = EvmAddress::from(to);
        let value = U256::from(requirement.amount.get());
        match requirement.asset {
            Asset::Token(Address::Evm(token)) if requirement.through_permit2() => {
                self.permit2(requirement, EvmAddress::from(token), to, declared).await
            }
            Asset::Token(Address::Evm(token)) => {
                Ok(Proof::of(self.authorize(requirement, EvmAddress::from(token), to, value).await?))
            }
            _ => Ok(Proof::of(self.transfer(to, value).await?)),
        }
    }

    /// A Permit2 permit for `requirement` (`exact` through Permit2: the price, spent by the
    /// exact proxy; `upto`: at most the price, settled by the facilitator the offer names),
    /// with Permit2's allowance made first when missing (see the module's docs).
    async fn permit2(
        &self,
        requirement: &PaymentRequirements,
        token: EvmAddress,
        to: EvmAddress,
        declared: &serde_json::Map<String, Value>,
    ) -> Result<Proof, PayError> {
        let chain_id = self.network().await?.1;
        let amount = U256::from(requirement.amount.get());
        let facilitator = if requirement.scheme == SCHEME_UPTO {
            let named = requirement.extra.as_ref().and_then(|e| e.get("facilitatorAddress")).and_then(Value::as_str);
            let named = named.ok_or_else(|| build_error("the upto offer names no facilitatorAddress to settle it"))?;
            Some(named.parse::<EvmAddress>().map_err(|e| build_error(format!("facilitatorAddress {named}: {e}")))?)
        } else {
            None
        };
        let mut nonce = [0u8; 32];
        rand::rngs::OsRng.try_fill_bytes(&mut nonce).map_err(build_error)?;
        let now = now_secs();
        let message = Permit2Message {
            token,
            amount,
            spender: if facilitator.is_some() { UPTO_PROXY } else { EXACT_PROXY },
            nonce: U256::from_be_bytes(nonce),
            deadline: U256::from(now + requirement.max_timeout_seconds.max(MIN_VALIDITY_SECS)),
            to,
            facilitator,
            valid_after: U256::from(now.saturating_sub(VALID_AFTER_SLACK_SECS)),
        };
        let signature = self.signer.sign_hash_sync(&message.signing_hash(chain_id)).map_err(build_error)?;
        let payload = Permit2Payload {
            signature: format!("0x{}", alloy::hex::encode(signature.as_bytes())),
            permit2_authorization: Permit2Authorization {
                from: address(self.signer.address()),
                permitted: TokenPermissions { token: address(token), amount: requirement.amount },
                spender: address(message.spender),
                nonce: message.nonce.to_string(),
                deadline: atomic(message.deadline),
                witness: Permit2Witness {
                    to: address(to),
                    facilitator: facilitator.map(address),
                    valid_after: atomic(message.valid_after),
                },
            },
        };
        let payload = serde_json::to_value(&payload).map_err(build_error)?;
        let mut proof = Proof::of((payload, None));
        let allowance =
            self.view(token, &wire::Erc20::allowanceCall { owner: self.signer.address(), spender: PERMIT2 }).await?;
        if allowance >= amount {
            return Ok(proof);
        }
        let offered = if declared.contains_key(EIP2612_GAS_SPONSORING) {
            self.eip2612(requirement, token, amount, message.deadline).await?
        } else {
            None
        };
        match offered {
            Some(permit) => {
                let info = serde_json::to_value(&permit).map_err(build_error)?;
                proof.extensions.insert(EIP2612_GAS_SPONSORING.into(), json!({ "info": info }));
            }
            None => proof.approval = Some(self.approve_permit2(token).await?),
        }
        Ok(proof)
    }

    /// A signed EIP-2612 permit letting Permit2 spend `amount` of `token` until `deadline`, when
    /// the token has EIP-2612 (an owner nonce) and its domain is known (the offer's `extra`, or
    /// the token's `name()` and `version()`); `None` otherwise.
    async fn eip2612(
        &self,
        requirement: &PaymentRequirements,
        token: EvmAddress,
        amount: U256,
        deadline: U256,
    ) -> Result<Option<Eip2612Sponsoring>, PayError> {
        let owner = self.signer.address();
        let Ok(nonce) = self.view(token, &wire::Erc20::noncesCall { owner }).await else { return Ok(None) };
        let facts = self.token(token).await?;
        let given = |field: &str| {
            requirement.extra.as_ref().and_then(|e| e.get(field)).and_then(Value::as_str).map(str::to_owned)
        };
        let (Some(name), Some(version)) = (given("name").or(facts.name), given("version").or(facts.version)) else {
            return Ok(None);
        };
        let permit = wire::Permit { owner, spender: PERMIT2, value: amount, nonce, deadline };
        let digest = wire::eip2612_signing_hash((&name, &version, self.network().await?.1), token, &permit);
        let signature = self.signer.sign_hash_sync(&digest).map_err(build_error)?;
        Ok(Some(Eip2612Sponsoring {
            from: address(owner),
            asset: address(token),
            spender: address(PERMIT2),
            amount: atomic(amount),
            nonce: atomic(nonce),
            deadline: atomic(deadline),
            signature: format!("0x{}", alloy::hex::encode(signature.as_bytes())),
            version: "1".into(),
        }))
    }

    /// Lets Permit2 spend this buyer's `token` (all of it, once: Permit2's own permits then
    /// bound each payment), sent from the buyer's account and waited for: the transaction hash.
    async fn approve_permit2(&self, token: EvmAddress) -> Result<String, PayError> {
        let call = wire::Erc20::approveCall { spender: PERMIT2, value: U256::MAX };
        self.send_and_wait(token, alloy::sol_types::SolCall::abi_encode(&call), "the Permit2 approval").await
    }

    /// Sends `input` to `to` from the buyer's account (gas estimated, a fifth more) and waits
    /// for it to be mined: the transaction hash, or why it failed (`what` names it).
    async fn send_and_wait(&self, to: EvmAddress, input: Vec<u8>, what: &str) -> Result<String, PayError> {
        let input = Bytes::from(input);
        let request = TransactionRequest::default().from(self.signer.address()).to(to).input(input.clone().into());
        let gas = bounded("eth_estimateGas", self.provider.estimate_gas(request).into_future()).await?;
        let (raw, hash) = self.sign_call(TxKind::Call(to), U256::ZERO, input, gas + gas / 5).await?;
        let sent = bounded("eth_sendRawTransaction", self.provider.send_raw_transaction(&raw).into_future()).await?;
        let hash_bytes = *sent.tx_hash();
        let waited = tokio::time::timeout(APPROVAL_WAIT, async {
            loop {
                match self.provider.get_transaction_receipt(hash_bytes).await {
                    Ok(Some(receipt)) => return Ok(receipt.status()),
                    Ok(None) => tokio::time::sleep(Duration::from_millis(200)).await,
                    Err(e) => return Err(build_error(format!("eth_getTransactionReceipt: {e}"))),
                }
            }
        })
        .await;
        match waited {
            Ok(Ok(true)) => Ok(hash),
            Ok(Ok(false)) => {
                self.forget_nonce().await;
                Err(build_error(format!("{what} {hash} reverted")))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(build_error(format!("{what} {hash} was not mined within {} s", APPROVAL_WAIT.as_secs()))),
        }
    }

    /// Forgets the nonce this process would use next, so the next transfer asks the node again:
    /// called when a signed transfer was refused (it will never be mined, and a gap would leave
    /// every later transfer stuck).
    pub(crate) async fn forget_nonce(&self) {
        *self.next_nonce.lock().await = None;
    }

    /// A signed EIP-1559 transfer of `value` wei to `to`.
    async fn transfer(&self, to: EvmAddress, value: U256) -> Result<(Value, Option<String>), PayError> {
        let (raw, hash) = self.sign_call(TxKind::Call(to), value, Bytes::new(), TRANSFER_GAS).await?;
        let raw = format!("0x{}", alloy::hex::encode(raw));
        Ok((ExactNativePayload::Transaction(raw).to_value(), Some(hash)))
    }

    /// A signed EIP-1559 transaction from this buyer (its next nonce, the node's fees): its
    /// bytes and its hash.
    async fn sign_call(
        &self,
        to: TxKind,
        value: U256,
        input: Bytes,
        gas_limit: u64,
    ) -> Result<(Vec<u8>, String), PayError> {
        let chain_id = self.network().await?.1;
        let fees = bounded("eth_feeHistory", self.provider.estimate_eip1559_fees()).await?;
        let mut next = self.next_nonce.lock().await;
        let pending = bounded(
            "eth_getTransactionCount",
            self.provider.get_transaction_count(self.signer.address()).pending().into_future(),
        )
        .await?;
        let nonce = next.map_or(pending, |n| n.max(pending));
        let mut tx = TxEip1559 {
            chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to,
            value,
            access_list: Default::default(),
            input,
        };
        let signature = self.signer.sign_transaction_sync(&mut tx).map_err(build_error)?;
        let envelope = TxEnvelope::from(tx.into_signed(signature));
        *next = Some(nonce + 1);
        Ok((envelope.encoded_2718(), format!("{:#x}", envelope.tx_hash())))
    }

    /// A signed EIP-3009 authorization for `value` of `token` to `to`, valid from a minute ago
    /// for the offer's `maxTimeoutSeconds` (at least a minute).
    async fn authorize(
        &self,
        requirement: &PaymentRequirements,
        token: EvmAddress,
        to: EvmAddress,
        value: U256,
    ) -> Result<(Value, Option<String>), PayError> {
        let facts = self.token(token).await?;
        let given = |field: &str| {
            requirement.extra.as_ref().and_then(|e| e.get(field)).and_then(Value::as_str).map(str::to_owned)
        };
        let name = given("name").or(facts.name).ok_or_else(|| build_error("the token's EIP-712 name is unknown"))?;
        let version =
            given("version").or(facts.version).ok_or_else(|| build_error("the token's EIP-712 version is unknown"))?;
        let domain = eip3009_domain(name, version, self.network().await?.1, token);
        let mut nonce = [0u8; 32];
        rand::rngs::OsRng.try_fill_bytes(&mut nonce).map_err(build_error)?;
        let now = now_secs();
        let message = TransferWithAuthorization {
            from: self.signer.address(),
            to,
            value,
            validAfter: U256::from(now.saturating_sub(VALID_AFTER_SLACK_SECS)),
            validBefore: U256::from(now + requirement.max_timeout_seconds.max(MIN_VALIDITY_SECS)),
            nonce: B256::from(nonce),
        };
        let digest = message.eip712_signing_hash(&domain);
        let signature = self.signer.sign_hash_sync(&digest).map_err(build_error)?;
        Ok((
            json!({
                "signature": format!("0x{}", alloy::hex::encode(signature.as_bytes())),
                "authorization": {
                    "from": message.from.to_checksum(None),
                    "to": message.to.to_checksum(None),
                    "value": message.value.to_string(),
                    "validAfter": message.validAfter.to_string(),
                    "validBefore": message.validBefore.to_string(),
                    "nonce": format!("{:#x}", message.nonce),
                },
            }),
            None,
        ))
    }
}

/// An EVM address as the protocol writes it.
fn address(a: EvmAddress) -> Address {
    Address::Evm(a.into_array())
}

/// A uint256 far below 2^128 in practice (a deadline, a nonce, an amount), as the protocol
/// writes it.
fn atomic(v: U256) -> AtomicAmount {
    AtomicAmount(u128::try_from(v).unwrap_or(u128::MAX))
}

#[async_trait::async_trait]
impl crate::Wallet for EvmWallet {
    fn family(&self) -> tollgate_protocol::ChainFamily {
        tollgate_protocol::ChainFamily::Evm
    }

    fn address(&self) -> String {
        self.own_address()
    }

    async fn decimals(&self, requirement: &PaymentRequirements) -> Result<Option<u8>, PayError> {
        self.read_decimals(requirement).await
    }

    async fn prove(
        &self,
        requirement: &PaymentRequirements,
        declared: &serde_json::Map<String, Value>,
    ) -> Result<Proof, PayError> {
        self.pay(requirement, declared).await
    }

    /// EIP-191 (`personal_sign`), `0x` and 65 bytes of hex.
    async fn sign_message(&self, message: &str) -> Result<String, PayError> {
        use alloy::signers::SignerSync as _;
        let signature = self.signer.sign_message_sync(message.as_bytes()).map_err(build_error)?;
        Ok(format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())))
    }

    /// A token's own `symbol()` (ETH for the native currency).
    async fn symbol(&self, requirement: &PaymentRequirements) -> Option<String> {
        match requirement.asset {
            Asset::Native => Some(tollgate_protocol::ChainFamily::Evm.native_symbol().to_owned()),
            Asset::Token(Address::Evm(token)) => self.token(EvmAddress::from(token)).await.ok()?.symbol,
            Asset::Token(_) => None,
        }
    }

    fn channels(&self) -> Option<&dyn crate::ChannelWallet> {
        Some(self)
    }

    /// A signed transfer that was not settled may never be mined: the next one asks the node
    /// for its nonce again.
    async fn unsettled(&self, requirement: &PaymentRequirements) {
        if requirement.scheme == tollgate_protocol::x402::SCHEME_EXACT_NATIVE {
            self.forget_nonce().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_rpc_is_reported_without_its_key() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(1, |a| a.port());
        let wallet = EvmWallet::new(PrivateKeySigner::random(), &format!("http://127.0.0.1:{port}/v2/SECRETKEY"))
            .unwrap_or_else(|e| panic!("{e}"));
        let Err(PayError::Build(message)) = wallet.network().await else { panic!("a closed port cannot answer") };
        assert!(!message.contains("SECRETKEY"), "{message}");
        assert!(!format!("{wallet:?}").contains("SECRETKEY"));
        let Err(PayError::Build(message)) = EvmWallet::new(PrivateKeySigner::random(), "not a url SECRETKEY") else {
            panic!("not a URL")
        };
        assert!(!message.contains("SECRETKEY"), "{message}");
    }
}
