//! x402 `batch-settlement` on EVM chains, the buyer's side: the channel a requirement names
//! (this key as payer and voucher signer, salt zero, as the official client makes it), read from
//! `x402BatchSettlement`; vouchers signed in the contract's EIP-712 domain; deposits authorized
//! as an EIP-3009 `ReceiveWithAuthorization` to the ERC-3009 collector (the channel id in its
//! nonce), or a Permit2 witness transfer to the Permit2 collector (Permit2 approved once on chain
//! when it has no allowance); timed withdrawals sent from the buyer's own account.

use alloy::primitives::{Address as EvmAddress, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::sol_types::{SolCall as _, SolStruct as _};
use rand::TryRngCore as _;
use serde_json::Value;
use tollgate_encoding::batch::{
    self as wire, BATCH_SETTLEMENT, BatchSettlement, ERC3009_COLLECTOR, PERMIT2_COLLECTOR, wire_config,
};
use tollgate_protocol::x402::PaymentRequirements;
use tollgate_protocol::x402::batch::{
    ChannelConfig, DepositAuthorization, DepositWitness, Erc3009Deposit, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY,
    Permit2Deposit, Voucher,
};
use tollgate_protocol::x402::schemes::TokenPermissions;
use tollgate_protocol::{Address, AtomicAmount};

use super::{EvmWallet, MIN_VALIDITY_SECS, address, atomic, build_error, now_secs};
use crate::PayError;
use crate::{Channel, ChannelWallet, OnChain};

/// The receiver authorizer a requirement names (`extra.receiverAuthorizer`), when it names a
/// non-zero one: without it there is no channel to open.
pub(super) fn receiver_authorizer(requirement: &PaymentRequirements) -> Option<EvmAddress> {
    let named = requirement.extra.as_ref()?.get("receiverAuthorizer")?.as_str()?;
    named.parse::<EvmAddress>().ok().filter(|a| !a.is_zero())
}

/// 32 random bytes.
fn random_word() -> Result<[u8; 32], PayError> {
    let mut word = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut word).map_err(build_error)?;
    Ok(word)
}

/// `0x` and the hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy::hex::encode(bytes))
}

impl EvmWallet {
    /// The channel's configuration as the contract reads it, and its id.
    fn wire(channel: &Channel) -> Result<(wire::ChannelConfig, B256), PayError> {
        let config = wire_config(&channel.config).map_err(|e| build_error(format!("the channel's {e:?}")))?;
        let id = channel.id.parse::<B256>().map_err(|_| build_error("the channel id is not 32 bytes of hex"))?;
        Ok((config, id))
    }

    /// The channel's token (an EVM address).
    fn channel_token(channel: &Channel) -> Result<EvmAddress, PayError> {
        match channel.config.token {
            Address::Evm(token) => Ok(EvmAddress::from(token)),
            Address::Solana(_) => Err(build_error("the channel's token is not an EVM address")),
        }
    }
}

#[async_trait::async_trait]
impl ChannelWallet for EvmWallet {
    async fn channel(&self, requirement: &PaymentRequirements) -> Result<Channel, PayError> {
        let chain_id = self.network().await?.1;
        let authorizer = receiver_authorizer(requirement)
            .ok_or_else(|| build_error("the offer names no receiver authorizer (extra.receiverAuthorizer)"))?;
        let (Address::Evm(receiver), tollgate_protocol::x402::Asset::Token(Address::Evm(token))) =
            (requirement.pay_to, requirement.asset)
        else {
            return Err(build_error("a channel pays an EVM receiver in an ERC-20"));
        };
        let delay = match requirement.extra.as_ref().and_then(|e| e.get("withdrawDelay")) {
            None => MIN_WITHDRAW_DELAY,
            Some(given) => given
                .as_u64()
                .filter(|d| (MIN_WITHDRAW_DELAY..=MAX_WITHDRAW_DELAY).contains(d))
                .ok_or_else(|| build_error(format!("the offer's withdrawDelay {given} is not 900 s to 30 days")))?,
        };
        let me = self.signer.address();
        let config = ChannelConfig {
            payer: address(me),
            payer_authorizer: address(me),
            receiver: Address::Evm(receiver),
            receiver_authorizer: address(authorizer),
            token: Address::Evm(token),
            withdraw_delay: delay,
            salt: hex(B256::ZERO.as_slice()),
        };
        let wire = wire_config(&config).map_err(|e| build_error(format!("the channel's {e:?}")))?;
        Ok(Channel::new(config, format!("{:#x}", wire.id(chain_id))))
    }

    async fn on_chain(&self, channel: &Channel) -> Result<OnChain, PayError> {
        let (_, id) = Self::wire(channel)?;
        let held = self.view(BATCH_SETTLEMENT, &BatchSettlement::channelsCall { channelId: id }).await?;
        let pending = self.view(BATCH_SETTLEMENT, &BatchSettlement::pendingWithdrawalsCall { channelId: id }).await?;
        let started: u64 = pending.initiatedAt.to();
        let withdrawal = (started > 0).then(|| (AtomicAmount(pending.amount), started + channel.config.withdraw_delay));
        Ok(OnChain { balance: AtomicAmount(held.balance), claimed: AtomicAmount(held.totalClaimed), withdrawal })
    }

    async fn voucher(&self, channel: &Channel, max_claimable: AtomicAmount) -> Result<Voucher, PayError> {
        let (_, id) = Self::wire(channel)?;
        let chain_id = self.network().await?.1;
        let digest = wire::voucher_digest(chain_id, id, max_claimable.get());
        let signature = self.signer.sign_hash_sync(&digest).map_err(build_error)?;
        Ok(Voucher {
            channel_id: channel.id.clone(),
            max_claimable_amount: max_claimable,
            signature: hex(&signature.as_bytes()),
        })
    }

    async fn signed(&self, channel: &Channel, max_claimable: AtomicAmount, signature: &str) -> bool {
        let (Ok((_, id)), Ok((_, chain_id))) = (Self::wire(channel), self.network().await.cloned()) else {
            return false;
        };
        let Ok(bytes) = alloy::hex::decode(signature.trim_start_matches("0x")) else { return false };
        if !tollgate_encoding::evm::ecrecover_form(&bytes) {
            return false;
        }
        let Ok(signature) = alloy::primitives::Signature::try_from(bytes.as_slice()) else { return false };
        let digest = wire::voucher_digest(chain_id, id, max_claimable.get());
        signature.recover_address_from_prehash(&digest).is_ok_and(|signer| signer == self.signer.address())
    }

    async fn deposit(
        &self,
        requirement: &PaymentRequirements,
        channel: &Channel,
        amount: AtomicAmount,
    ) -> Result<DepositAuthorization, PayError> {
        let (_, id) = Self::wire(channel)?;
        let token = Self::channel_token(channel)?;
        let chain_id = self.network().await?.1;
        let until = now_secs() + requirement.max_timeout_seconds.max(MIN_VALIDITY_SECS);
        let method = requirement.extra.as_ref().and_then(|e| e.get("assetTransferMethod")).and_then(Value::as_str);
        match method {
            None | Some("eip3009") => {
                let facts = self.token(token).await?;
                let given = |field: &str| {
                    requirement.extra.as_ref().and_then(|e| e.get(field)).and_then(Value::as_str).map(str::to_owned)
                };
                let name =
                    given("name").or(facts.name).ok_or_else(|| build_error("the token's EIP-712 name is unknown"))?;
                let version = given("version")
                    .or(facts.version)
                    .ok_or_else(|| build_error("the token's EIP-712 version is unknown"))?;
                let salt = U256::from_be_bytes(random_word()?);
                let message = wire::ReceiveWithAuthorization {
                    from: self.signer.address(),
                    to: ERC3009_COLLECTOR,
                    value: U256::from(amount.get()),
                    validAfter: U256::ZERO,
                    validBefore: U256::from(until),
                    nonce: wire::erc3009_deposit_nonce(id, salt),
                };
                let domain = tollgate_encoding::evm::eip3009_domain(name, version, chain_id, token);
                let signature =
                    self.signer.sign_hash_sync(&message.eip712_signing_hash(&domain)).map_err(build_error)?;
                Ok(DepositAuthorization {
                    erc3009_authorization: Some(Erc3009Deposit {
                        valid_after: AtomicAmount(0),
                        valid_before: AtomicAmount(u128::from(until)),
                        salt: hex(&salt.to_be_bytes::<32>()),
                        signature: hex(&signature.as_bytes()),
                    }),
                    permit2_authorization: None,
                })
            }
            Some("permit2") => {
                let nonce = U256::from_be_bytes(random_word()?);
                let message = wire::PermitWitnessTransferFrom {
                    permitted: wire::TokenPermissions { token, amount: U256::from(amount.get()) },
                    spender: PERMIT2_COLLECTOR,
                    nonce,
                    deadline: U256::from(until),
                    witness: wire::DepositWitness { channelId: id },
                };
                let digest = message.eip712_signing_hash(&tollgate_encoding::permit2::domain(chain_id));
                let signature = self.signer.sign_hash_sync(&digest).map_err(build_error)?;
                // The collector pulls through Permit2: it needs the buyer's allowance first.
                let owner = self.signer.address();
                let allowance = tollgate_encoding::permit2::Erc20::allowanceCall {
                    owner,
                    spender: tollgate_encoding::permit2::PERMIT2,
                };
                if self.view(token, &allowance).await? < U256::from(amount.get()) {
                    self.approve_permit2(token).await?;
                }
                Ok(DepositAuthorization {
                    erc3009_authorization: None,
                    permit2_authorization: Some(Permit2Deposit {
                        from: address(owner),
                        permitted: TokenPermissions { token: address(token), amount },
                        spender: address(PERMIT2_COLLECTOR),
                        nonce: nonce.to_string(),
                        deadline: atomic(U256::from(until)),
                        witness: DepositWitness { channel_id: channel.id.clone() },
                        signature: hex(&signature.as_bytes()),
                    }),
                })
            }
            Some(other) => Err(build_error(format!("unknown assetTransferMethod {other:?} for a deposit"))),
        }
    }

    async fn start_withdrawal(&self, channel: &Channel, amount: AtomicAmount) -> Result<String, PayError> {
        let (config, _) = Self::wire(channel)?;
        let call = BatchSettlement::initiateWithdrawCall { config, amount: amount.get() };
        self.send_and_wait(BATCH_SETTLEMENT, call.abi_encode(), "the withdrawal").await
    }

    async fn finish_withdrawal(&self, channel: &Channel) -> Result<String, PayError> {
        let (config, _) = Self::wire(channel)?;
        let call = BatchSettlement::finalizeWithdrawCall { config };
        self.send_and_wait(BATCH_SETTLEMENT, call.abi_encode(), "the withdrawal's finish").await
    }
}
