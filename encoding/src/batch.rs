//! EVM `batch-settlement`: what x402's payment channels are made of — the channel configuration
//! whose EIP-712 hash is the channel's id, the cumulative voucher a payer signs per request,
//! the receiver authorizer's claim-batch and refund signatures, the deposit collectors' data and
//! the `x402BatchSettlement` ABI.
//!
//! A payer deposits once into a channel (through the ERC-3009 collector, its
//! `ReceiveWithAuthorization` nonce derived from the channel id, or the Permit2 collector, the
//! channel id as the permit's witness), then signs per request a voucher whose
//! `maxClaimableAmount` is the running total it agrees to pay. The receiver side claims the
//! latest voucher (accounting only) and `settle` sweeps what it claimed in one transfer.

use alloy::primitives::{Address, B256, U256, address, keccak256};
use alloy::sol_types::{Eip712Domain, SolStruct as _, SolValue as _};

/// `x402BatchSettlement`, at the same address on every chain.
pub const BATCH_SETTLEMENT: Address = address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");
/// The deposit collector taking EIP-3009 `ReceiveWithAuthorization`s.
pub const ERC3009_COLLECTOR: Address = address!("4020806089470a89826cB9fB1f4059150b550004");
/// The deposit collector taking Permit2 witness transfers.
pub const PERMIT2_COLLECTOR: Address = address!("4020425FAf3B746C082C2f942b4E5159887B0005");
/// The scheme's name in x402 requirements.
pub const SCHEME: &str = "batch-settlement";
/// The shortest withdrawal delay a channel may have: 15 minutes.
pub const MIN_WITHDRAW_DELAY: u64 = 900;
/// The longest withdrawal delay a channel may have: 30 days.
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

/// The EIP-712 domain of the settlement contract on chain `chain_id`: channel ids, vouchers,
/// refunds and claim batches are all signed in it.
#[must_use]
pub fn domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some("x402 Batch Settlement".into()),
        Some("1".into()),
        Some(U256::from(chain_id)),
        Some(BATCH_SETTLEMENT),
        None,
    )
}

alloy::sol! {
    /// A channel's immutable configuration; its EIP-712 hash is the channel's id.
    #[derive(Debug, PartialEq, Eq)]
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    /// The payer's cumulative promise: at most `maxClaimableAmount` in all from this channel.
    struct Voucher {
        bytes32 channelId;
        uint128 maxClaimableAmount;
    }

    /// The receiver authorizer's permission to return `amount` at the channel's refund nonce.
    struct Refund {
        bytes32 channelId;
        uint256 nonce;
        uint128 amount;
    }

    /// One row of a claim batch as the receiver authorizer signs it.
    struct ClaimEntry {
        bytes32 channelId;
        uint128 maxClaimableAmount;
        uint128 totalClaimed;
    }

    /// The receiver authorizer's permission for a batch of claims, sent by anyone.
    struct ClaimBatch {
        ClaimEntry[] claims;
    }

    /// The witness a Permit2 deposit binds: the channel it goes to.
    struct DepositWitness {
        bytes32 channelId;
    }

    /// The signed permit's token and amount.
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    /// The EIP-712 message a Permit2 deposit is signed as (spender: [`PERMIT2_COLLECTOR`]).
    struct PermitWitnessTransferFrom {
        TokenPermissions permitted;
        address spender;
        uint256 nonce;
        uint256 deadline;
        DepositWitness witness;
    }

    /// EIP-3009's receive form, signed for [`ERC3009_COLLECTOR`] as `to`.
    struct ReceiveWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// `x402BatchSettlement`'s calls and reads.
    interface BatchSettlement {
        struct VoucherBody {
            ChannelConfig channel;
            uint128 maxClaimableAmount;
        }

        struct VoucherClaim {
            VoucherBody voucher;
            bytes signature;
            uint128 totalClaimed;
        }

        function multicall(bytes[] data) external returns (bytes[] results);
        function deposit(ChannelConfig config, uint128 amount, address collector, bytes collectorData) external;
        function claim(VoucherClaim[] voucherClaims) external;
        function claimWithSignature(VoucherClaim[] voucherClaims, bytes authorizerSignature) external;
        function settle(address receiver, address token) external;
        function initiateWithdraw(ChannelConfig config, uint128 amount) external;
        function finalizeWithdraw(ChannelConfig config) external;
        function refund(ChannelConfig config, uint128 amount) external;
        function refundWithSignature(ChannelConfig config, uint128 amount, uint256 nonce, bytes receiverAuthorizerSignature) external;
        function getChannelId(ChannelConfig config) external view returns (bytes32);
        function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
        function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
        function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
        function refundNonce(bytes32 channelId) external view returns (uint256);
        function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) external view returns (bytes32);
        function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) external view returns (bytes32);
        function getClaimBatchDigest(VoucherClaim[] voucherClaims) external view returns (bytes32);

        event Deposited(bytes32 indexed channelId, address indexed payer, address indexed sender, uint128 amount, uint128 balance);
        event Claimed(bytes32 indexed channelId, address indexed receiver, address indexed sender, uint128 amount, uint128 totalClaimed);
        event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
        event Refunded(bytes32 indexed channelId, address indexed payer, uint256 nonce, uint128 amount);
        event WithdrawInitiated(bytes32 indexed channelId, address indexed payer, uint128 amount, uint40 finalizableAt);
        event WithdrawFinalized(bytes32 indexed channelId, address indexed payer, uint128 amount);
    }
}

impl ChannelConfig {
    /// The channel's id on chain `chain_id`: its configuration's EIP-712 hash in [`domain`].
    #[must_use]
    pub fn id(&self, chain_id: u64) -> B256 {
        static TYPE_HASH: std::sync::LazyLock<B256> = std::sync::LazyLock::new(config_type_hash);
        signing_hash(chain_id, *TYPE_HASH, &self.eip712_encode_data())
    }
}

fn config_type_hash() -> B256 {
    let any = ChannelConfig {
        payer: Address::ZERO,
        payerAuthorizer: Address::ZERO,
        receiver: Address::ZERO,
        receiverAuthorizer: Address::ZERO,
        token: Address::ZERO,
        withdrawDelay: alloy::primitives::Uint::ZERO,
        salt: B256::ZERO,
    };
    any.eip712_type_hash()
}

/// [`domain`]'s separator on chain `chain_id`, hashed once for the chain a process works on
/// (every channel id and voucher a seller checks is hashed in it).
fn separator(chain_id: u64) -> B256 {
    static FIRST: std::sync::OnceLock<(u64, B256)> = std::sync::OnceLock::new();
    let &(chain, hashed) = FIRST.get_or_init(|| (chain_id, domain(chain_id).hash_struct()));
    if chain == chain_id { hashed } else { domain(chain_id).hash_struct() }
}

/// The EIP-712 signing hash, in [`domain`] on `chain_id`, of a struct of type hash `type_hash`
/// whose fields encode as `data` (`keccak256(0x1901 ‖ separator ‖ keccak256(type_hash ‖ data))`):
/// what `eip712_signing_hash` computes, with the separator and the type hash hashed once.
fn signing_hash(chain_id: u64, type_hash: B256, data: &[u8]) -> B256 {
    let mut fields = Vec::with_capacity(32 + data.len());
    fields.extend_from_slice(type_hash.as_slice());
    fields.extend_from_slice(data);
    let mut message = [0u8; 66];
    message[..2].copy_from_slice(&[0x19, 0x01]);
    message[2..34].copy_from_slice(separator(chain_id).as_slice());
    message[34..].copy_from_slice(keccak256(&fields).as_slice());
    keccak256(message)
}

/// What a seller's requirement binds a channel to (the spec's verification rules 1–5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The chain's id.
    pub chain_id: u64,
    /// The token.
    pub token: Address,
    /// Who is paid.
    pub receiver: Address,
    /// Who authorizes claims and refunds.
    pub receiver_authorizer: Address,
    /// The channel's withdrawal delay, in seconds.
    pub withdraw_delay: u64,
}

/// Why a channel is not one of a seller's [`Terms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unbound {
    /// A field of the configuration (named) cannot be read: not an EVM address, not 32 bytes.
    Malformed(&'static str),
    /// The channel id named is not the configuration's hash on this chain.
    ChannelId,
    /// Another token.
    Token,
    /// Another receiver.
    Receiver,
    /// Another receiver authorizer.
    ReceiverAuthorizer,
    /// Another withdrawal delay.
    WithdrawDelay,
    /// A zero payer.
    ZeroPayer,
}

/// A channel configuration as the contract reads it.
///
/// # Errors
/// [`Unbound::Malformed`] naming the first field that cannot be read.
pub fn wire_config(c: &tollgate_protocol::x402::batch::ChannelConfig) -> Result<ChannelConfig, Unbound> {
    let evm = |a, what| crate::evm::address(a).ok_or(Unbound::Malformed(what));
    Ok(ChannelConfig {
        payer: evm(&c.payer, "channelConfig.payer")?,
        payerAuthorizer: evm(&c.payer_authorizer, "channelConfig.payerAuthorizer")?,
        receiver: evm(&c.receiver, "channelConfig.receiver")?,
        receiverAuthorizer: evm(&c.receiver_authorizer, "channelConfig.receiverAuthorizer")?,
        token: evm(&c.token, "channelConfig.token")?,
        withdrawDelay: alloy::primitives::Uint::from(c.withdraw_delay),
        salt: c.salt.parse().map_err(|_| Unbound::Malformed("channelConfig.salt"))?,
    })
}

impl Terms {
    /// The configuration and id of the channel `config` states, when it is a channel of these
    /// terms and `channel_id` is its id; else the first rule broken (the id, then token,
    /// receiver, receiver authorizer, withdrawal delay, and a payer).
    ///
    /// # Errors
    /// [`Unbound`].
    pub fn bind(
        &self,
        config: &tollgate_protocol::x402::batch::ChannelConfig,
        channel_id: &str,
    ) -> Result<(ChannelConfig, B256), Unbound> {
        let c = wire_config(config)?;
        let id: B256 = channel_id.parse().map_err(|_| Unbound::Malformed("voucher.channelId"))?;
        let broken = [
            (c.id(self.chain_id) != id, Unbound::ChannelId),
            (c.token != self.token, Unbound::Token),
            (c.receiver != self.receiver, Unbound::Receiver),
            (c.receiverAuthorizer != self.receiver_authorizer, Unbound::ReceiverAuthorizer),
            (config.withdraw_delay != self.withdraw_delay, Unbound::WithdrawDelay),
            (c.payer == Address::ZERO, Unbound::ZeroPayer),
        ];
        match broken.into_iter().find(|(broken, _)| *broken) {
            Some((_, why)) => Err(why),
            None => Ok((c, id)),
        }
    }
}

/// The digest a payer signs for a voucher of `max_claimable` in all on `channel_id`.
#[must_use]
pub fn voucher_digest(chain_id: u64, channel_id: B256, max_claimable: u128) -> B256 {
    static TYPE_HASH: std::sync::LazyLock<B256> =
        std::sync::LazyLock::new(|| Voucher { channelId: B256::ZERO, maxClaimableAmount: 0 }.eip712_type_hash());
    let voucher = Voucher { channelId: channel_id, maxClaimableAmount: max_claimable };
    signing_hash(chain_id, *TYPE_HASH, &voucher.eip712_encode_data())
}

/// The digest the receiver authorizer signs to refund `amount` at refund nonce `nonce`.
#[must_use]
pub fn refund_digest(chain_id: u64, channel_id: B256, nonce: U256, amount: u128) -> B256 {
    Refund { channelId: channel_id, nonce, amount }.eip712_signing_hash(&domain(chain_id))
}

/// The digest the receiver authorizer signs for a batch of claims (each row: channel id, the
/// voucher's ceiling, the cumulative total claimed).
#[must_use]
pub fn claim_batch_digest(chain_id: u64, rows: &[(B256, u128, u128)]) -> B256 {
    let claims = rows
        .iter()
        .map(|&(channel_id, ceiling, total)| ClaimEntry {
            channelId: channel_id,
            maxClaimableAmount: ceiling,
            totalClaimed: total,
        })
        .collect();
    ClaimBatch { claims }.eip712_signing_hash(&domain(chain_id))
}

/// The EIP-3009 nonce of a deposit into `channel_id`: `keccak256(abi.encode(channelId, salt))`,
/// so a signed deposit can fund that channel only.
#[must_use]
pub fn erc3009_deposit_nonce(channel_id: B256, salt: U256) -> B256 {
    keccak256((channel_id, salt).abi_encode_params())
}

/// The ERC-3009 collector's data: `abi.encode(validAfter, validBefore, salt, signature)`.
#[must_use]
pub fn erc3009_collector_data(valid_after: U256, valid_before: U256, salt: U256, signature: &[u8]) -> Vec<u8> {
    (valid_after, valid_before, salt, alloy::primitives::Bytes::copy_from_slice(signature)).abi_encode_params()
}

/// The Permit2 collector's data: `abi.encode(nonce, deadline, signature, eip2612Permit)`, the
/// last empty or an EIP-2612 permit for Permit2 (`abi.encode(value, deadline, v, r, s)`).
#[must_use]
pub fn permit2_collector_data(nonce: U256, deadline: U256, signature: &[u8], eip2612_permit: &[u8]) -> Vec<u8> {
    (
        nonce,
        deadline,
        alloy::primitives::Bytes::copy_from_slice(signature),
        alloy::primitives::Bytes::copy_from_slice(eip2612_permit),
    )
        .abi_encode_params()
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolCall as _;

    use super::*;

    #[test]
    fn ids_and_voucher_digests_hashed_once_per_chain_are_eip_712s() {
        // The first chain asked is the cached one; the others are hashed each time.
        for chain_id in [8453u64, 84532, 1, 8453] {
            for n in 0..16u8 {
                let config = ChannelConfig {
                    payer: Address::repeat_byte(n),
                    payerAuthorizer: Address::repeat_byte(n ^ 1),
                    receiver: Address::repeat_byte(n ^ 2),
                    receiverAuthorizer: Address::repeat_byte(n ^ 3),
                    token: Address::repeat_byte(n ^ 4),
                    withdrawDelay: alloy::primitives::Uint::from(900 + u64::from(n)),
                    salt: B256::repeat_byte(n ^ 5),
                };
                let id = config.id(chain_id);
                assert_eq!(id, config.eip712_signing_hash(&domain(chain_id)));
                let max = u128::from(n) << 100 | 7;
                assert_eq!(
                    voucher_digest(chain_id, id, max),
                    Voucher { channelId: id, maxClaimableAmount: max }.eip712_signing_hash(&domain(chain_id))
                );
            }
        }
    }

    #[test]
    fn type_hashes_and_selectors_are_the_published_ones() {
        let config = ChannelConfig {
            payer: Address::ZERO,
            payerAuthorizer: Address::ZERO,
            receiver: Address::ZERO,
            receiverAuthorizer: Address::ZERO,
            token: Address::ZERO,
            withdrawDelay: alloy::primitives::Uint::from(900u64),
            salt: B256::ZERO,
        };
        assert_eq!(
            config.eip712_type_hash(),
            keccak256(
                "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
            )
        );
        let batch = ClaimBatch { claims: vec![] };
        assert_eq!(
            batch.eip712_type_hash(),
            keccak256(
                "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
            )
        );
        let witness = PermitWitnessTransferFrom {
            permitted: TokenPermissions { token: Address::ZERO, amount: U256::ZERO },
            spender: PERMIT2_COLLECTOR,
            nonce: U256::ZERO,
            deadline: U256::ZERO,
            witness: DepositWitness { channelId: B256::ZERO },
        };
        // Permit2 builds this type string from the collector's witness type string.
        assert_eq!(
            witness.eip712_type_hash(),
            keccak256(
                "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)"
            )
        );
        // The ABI the official client and facilitator call (@x402/evm 2.27's batchSettlementABI).
        assert_eq!(
            BatchSettlement::depositCall::SIGNATURE,
            "deposit((address,address,address,address,address,uint40,bytes32),uint128,address,bytes)"
        );
        assert_eq!(
            BatchSettlement::claimWithSignatureCall::SIGNATURE,
            "claimWithSignature((((address,address,address,address,address,uint40,bytes32),uint128),bytes,uint128)[],bytes)"
        );
    }

    #[test]
    fn a_channel_id_binds_every_field_the_chain_and_the_contract() {
        let config = ChannelConfig {
            payer: Address::repeat_byte(1),
            payerAuthorizer: Address::repeat_byte(2),
            receiver: Address::repeat_byte(3),
            receiverAuthorizer: Address::repeat_byte(4),
            token: Address::repeat_byte(5),
            withdrawDelay: alloy::primitives::Uint::from(900u64),
            salt: B256::ZERO,
        };
        let id = config.id(8453);
        assert_ne!(id, config.id(84532), "another chain, another channel");
        let mut other = config.clone();
        other.salt = B256::repeat_byte(1);
        assert_ne!(id, other.id(8453));
        assert_ne!(voucher_digest(8453, id, 1000), voucher_digest(8453, id, 1001));
        assert_ne!(voucher_digest(8453, id, 1000), refund_digest(8453, id, U256::ZERO, 1000));
        assert_ne!(claim_batch_digest(8453, &[(id, 10, 5)]), claim_batch_digest(8453, &[(id, 10, 6)]));
    }
}
