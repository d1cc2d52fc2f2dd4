//! x402 `batch-settlement` on EVM, the chain's side: a channel as the contract holds it
//! ([`Snapshot`], one call), the rules a buyer's payload must pass against the seller's
//! requirement and the channel ([`check`]), and the deposit it may carry, checked and simulated.
//!
//! The seller names everything that binds: the requirement's token, receiver, receiver
//! authorizer and withdrawal delay must be the channel's, and the channel id must be the hash of
//! that configuration on this chain and contract. The chain says what is escrowed and claimed;
//! a voucher's ceiling must fit in it.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::{SolCall as _, SolStruct as _};
use tollgate_encoding::batch::{
    self as wire, BATCH_SETTLEMENT, BatchSettlement as Contract, ERC3009_COLLECTOR, PERMIT2_COLLECTOR, Unbound,
};
use tollgate_protocol::x402::batch::{self as proto, BatchExtra, BatchPayload, ChannelState};
use tollgate_protocol::x402::{Asset, PaymentRequirements};

use super::{EvmBackend, address, erc20, verify};
use crate::chains::{BatchReason, ChainError, ProofError, Reason, Refusal};

fn refuse(why: BatchReason, message: impl Into<String>) -> ProofError {
    ProofError::Refused(Refusal::new(Reason::Batch(why), message))
}

/// A channel as the contract holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Its id.
    pub channel_id: B256,
    /// Escrowed.
    pub balance: u128,
    /// Claimed.
    pub total_claimed: u128,
    /// When a timed withdrawal started (unix seconds), 0 when none is pending.
    pub withdraw_requested_at: u64,
    /// The nonce the next refund must carry.
    pub refund_nonce: U256,
}

impl Snapshot {
    /// As the scheme's answers carry it.
    #[must_use]
    pub fn state(&self) -> ChannelState {
        ChannelState {
            channel_id: format!("{:#x}", self.channel_id),
            balance: tollgate_protocol::AtomicAmount(self.balance),
            total_claimed: tollgate_protocol::AtomicAmount(self.total_claimed),
            withdraw_requested_at: self.withdraw_requested_at,
            // A nonce past u128 cannot be reached by refunds one at a time.
            refund_nonce: tollgate_protocol::AtomicAmount(u128::try_from(self.refund_nonce).unwrap_or(u128::MAX)),
            charged_cumulative_amount: None,
        }
    }
}

/// Reads channel `id` in one call: its balance and claims, a pending withdrawal, its refund nonce.
///
/// # Errors
/// [`ChainError`] when the node cannot be asked or the contract answers badly (not deployed).
pub async fn read(backend: &EvmBackend, id: B256) -> Result<Snapshot, ChainError> {
    let calls = Contract::multicallCall {
        data: vec![
            Contract::channelsCall { channelId: id }.abi_encode().into(),
            Contract::pendingWithdrawalsCall { channelId: id }.abi_encode().into(),
            Contract::refundNonceCall { channelId: id }.abi_encode().into(),
        ],
    };
    let answers = erc20::view(&backend.rpc, BATCH_SETTLEMENT, &calls).await?;
    let bad = |e: alloy::sol_types::Error| ChainError(format!("the batch-settlement contract answered badly: {e}"));
    let [channel, withdrawal, nonce] = answers.as_slice() else {
        return Err(ChainError("the batch-settlement contract's multicall answered badly".into()));
    };
    let channel = Contract::channelsCall::abi_decode_returns(channel).map_err(bad)?;
    let withdrawal = Contract::pendingWithdrawalsCall::abi_decode_returns(withdrawal).map_err(bad)?;
    let refund_nonce = Contract::refundNonceCall::abi_decode_returns(nonce).map_err(bad)?;
    let pending = withdrawal.amount > 0;
    Ok(Snapshot {
        channel_id: id,
        balance: channel.balance,
        total_claimed: channel.totalClaimed,
        withdraw_requested_at: if pending { withdrawal.initiatedAt.to::<u64>() } else { 0 },
        refund_nonce,
    })
}

/// What the seller's requirement binds a channel to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// This chain's id.
    pub chain_id: u64,
    /// The token.
    pub token: Address,
    /// Who is paid.
    pub receiver: Address,
    /// Who authorizes claims and refunds.
    pub receiver_authorizer: Address,
    /// The channel's withdrawal delay.
    pub withdraw_delay: u64,
    /// The price of one request (the most a voucher may add).
    pub amount: u128,
    /// The token's EIP-712 name and version (EIP-3009 deposits).
    pub domain: (String, String),
}

impl Bound {
    /// The channel terms it binds.
    #[must_use]
    pub const fn terms(&self) -> wire::Terms {
        wire::Terms {
            chain_id: self.chain_id,
            token: self.token,
            receiver: self.receiver,
            receiver_authorizer: self.receiver_authorizer,
            withdraw_delay: self.withdraw_delay,
        }
    }

    /// The binding a `batch-settlement` requirement states.
    ///
    /// # Errors
    /// A refusal naming what the requirement lacks.
    pub fn of(requirement: &PaymentRequirements, chain_id: u64) -> Result<Self, ProofError> {
        let bad = |m: &str| ProofError::Refused(Refusal::new(Reason::InvalidPaymentRequirements, m.to_owned()));
        if requirement.scheme != proto::SCHEME {
            return Err(refuse(
                BatchReason::Scheme,
                format!("the scheme is {}, not batch-settlement", requirement.scheme),
            ));
        }
        let Asset::Token(token) = &requirement.asset else {
            return Err(bad("batch-settlement pays in a token, not the native currency"));
        };
        let token = address(token).ok_or_else(|| bad("the asset must be an EVM address"))?;
        let receiver = address(&requirement.pay_to).ok_or_else(|| bad("payTo must be an EVM address"))?;
        let extra: BatchExtra =
            requirement.extra.clone().and_then(|e| serde_json::from_value(e).ok()).ok_or_else(|| {
                refuse(
                    BatchReason::MissingEip712Domain,
                    "extra must name receiverAuthorizer, withdrawDelay, name and version",
                )
            })?;
        let receiver_authorizer = address(&extra.receiver_authorizer)
            .ok_or_else(|| bad("extra.receiverAuthorizer must be an EVM address"))?;
        if receiver_authorizer == Address::ZERO {
            return Err(bad("extra.receiverAuthorizer must not be the zero address"));
        }
        if !(proto::MIN_WITHDRAW_DELAY..=proto::MAX_WITHDRAW_DELAY).contains(&extra.withdraw_delay) {
            return Err(refuse(
                BatchReason::WithdrawDelayOutOfRange,
                "extra.withdrawDelay must be 900 to 2592000 seconds",
            ));
        }
        Ok(Self {
            chain_id,
            token,
            receiver,
            receiver_authorizer,
            withdraw_delay: extra.withdraw_delay,
            amount: requirement.amount.get(),
            domain: (extra.name, extra.version),
        })
    }
}

impl Bound {
    /// The binding of a seller's own payload (a claim, a sweep, a refund it completed) whose
    /// requirement names no channel terms in `extra`: the official server's channel manager sends
    /// `extra: {}` with them. The token and receiver are still the requirement's; the receiver
    /// authorizer and withdrawal delay are those of the (first) channel the payload names, which
    /// every other row must share ([`bind`]), and what the facilitator signs for them is checked
    /// as for any claim (its own authorizer, a receiver of the seller's). `None` for a buyer's
    /// payload, which always needs the seller's terms.
    ///
    /// # Errors
    /// A refusal naming what the requirement lacks.
    pub fn of_seller_payload(
        requirement: &PaymentRequirements,
        chain_id: u64,
        payload: &BatchPayload,
    ) -> Result<Option<Self>, ProofError> {
        let named = match payload {
            BatchPayload::Claim(p) => p.claims.first().map(|row| &row.voucher.channel),
            BatchPayload::Refund(p) if p.refund_nonce.is_some() => Some(&p.channel_config),
            BatchPayload::Settle(_) => None,
            BatchPayload::Deposit(_) | BatchPayload::Voucher(_) | BatchPayload::Refund(_) => return Ok(None),
        };
        let bad = |m: &str| ProofError::Refused(Refusal::new(Reason::InvalidPaymentRequirements, m.to_owned()));
        let Asset::Token(token) = &requirement.asset else {
            return Err(bad("batch-settlement pays in a token, not the native currency"));
        };
        let token = address(token).ok_or_else(|| bad("the asset must be an EVM address"))?;
        let receiver = address(&requirement.pay_to).ok_or_else(|| bad("payTo must be an EVM address"))?;
        let (receiver_authorizer, withdraw_delay) = match named {
            Some(config) => (
                address(&config.receiver_authorizer).ok_or_else(|| bad("the channel's receiverAuthorizer"))?,
                config.withdraw_delay,
            ),
            // A sweep names no channel: it moves what the receiver has claimed in the token.
            None => (Address::ZERO, proto::MIN_WITHDRAW_DELAY),
        };
        Ok(Some(Self {
            chain_id,
            token,
            receiver,
            receiver_authorizer,
            withdraw_delay,
            amount: requirement.amount.get(),
            domain: (String::new(), String::new()),
        }))
    }
}

/// A buyer's payload that passed: its channel (whose payer it is) and the channel as the chain
/// holds it.
#[derive(Debug, Clone)]
pub struct Passed {
    /// The channel's configuration.
    pub config: wire::ChannelConfig,
    /// The channel, read once for this check (before any deposit it carries).
    pub snapshot: Snapshot,
    /// A deposit's `deposit(...)` call: simulated from `sender` for a verdict; to settle, left to
    /// [`prepare`], whose gas estimate simulates it.
    pub deposit_call: Option<Vec<u8>>,
}

fn parse_b256(text: &str, what: &str, why: BatchReason) -> Result<B256, ProofError> {
    text.parse().map_err(|_| refuse(why, format!("{what} must be 32 bytes of 0x-hex")))
}

fn parse_bytes(text: &str, what: &str, why: BatchReason) -> Result<Vec<u8>, ProofError> {
    text.strip_prefix("0x")
        .and_then(|h| alloy::primitives::hex::decode(h).ok())
        .ok_or_else(|| refuse(why, format!("{what} must be 0x-hex")))
}

/// The channel configuration a payload states, bound to the requirement (rules 1-5): the
/// token, receiver, receiver authorizer and delay the seller named, and an id that is the
/// configuration's hash on this chain.
///
/// # Errors
/// The scheme's refusal for the first rule broken.
pub fn bind(
    bound: &Bound,
    config: &proto::ChannelConfig,
    channel_id: &str,
    why: BatchReason,
) -> Result<(wire::ChannelConfig, B256), ProofError> {
    let (token, receiver, authorizer, delay) =
        (bound.token, bound.receiver, bound.receiver_authorizer, bound.withdraw_delay);
    bound.terms().bind(config, channel_id).map_err(|unbound| match unbound {
        Unbound::Malformed(what) => malformed(what, why),
        Unbound::ChannelId => refuse(
            BatchReason::ChannelIdMismatch,
            "the channel id is not the hash of the channel's configuration on this chain",
        ),
        Unbound::Token => {
            refuse(BatchReason::TokenMismatch, format!("the channel is in {}, not the asked {token:#x}", config.token))
        }
        Unbound::Receiver => {
            refuse(BatchReason::ReceiverMismatch, format!("the channel pays {}, not {receiver:#x}", config.receiver))
        }
        Unbound::ReceiverAuthorizer => refuse(
            BatchReason::ReceiverAuthorizerMismatch,
            format!("the channel's receiver authorizer is {}, not {authorizer:#x}", config.receiver_authorizer),
        ),
        Unbound::WithdrawDelay => refuse(
            BatchReason::WithdrawDelayMismatch,
            format!("the channel's withdrawal delay is {} s, not {delay} s", config.withdraw_delay),
        ),
        Unbound::ZeroPayer => refuse(why, "channelConfig.payer must not be the zero address"),
    })
}

/// A field of a channel configuration that cannot be read.
fn malformed(what: &str, why: BatchReason) -> ProofError {
    refuse(why, format!("{what} must be an EVM address (a salt or an id: 32 bytes of 0x-hex)"))
}

/// A channel configuration as the contract reads it.
fn config_of(config: &proto::ChannelConfig, why: BatchReason) -> Result<wire::ChannelConfig, ProofError> {
    wire::wire_config(config).map_err(|unbound| match unbound {
        Unbound::Malformed(what) => malformed(what, why),
        _ => refuse(why, "the channel configuration cannot be read"),
    })
}

/// Whether `signer` signed `digest`: ECDSA, or EIP-1271 when `contracts` allows and it has code.
async fn signed_by(
    backend: &EvmBackend,
    signer: Address,
    digest: B256,
    signature: &[u8],
    contracts: bool,
) -> Result<bool, ChainError> {
    if verify::recover_signer(&digest, signature) == Some(signer) {
        return Ok(true);
    }
    // A contract wallet answers for itself (EIP-1271); a key's wrong signature is just wrong.
    if !contracts || backend.rpc.code(signer).await?.is_empty() {
        return Ok(false);
    }
    erc20::wallet_accepts(&backend.rpc, signer, digest, signature).await
}

/// Checks a buyer's payload (`deposit`, `voucher` or `refund`) against the seller's `bound`
/// and the channel: rules 1-10 of the scheme, and a deposit's authorization and simulation.
/// `sender` is the account a deposit would be sent from; `now` is unix seconds.
///
/// # Errors
/// The scheme's refusal, or [`ChainError`] when the chain cannot be asked.
pub async fn check(
    backend: &EvmBackend,
    bound: &Bound,
    payload: &BatchPayload,
    (sender, intent): (Address, crate::chains::Intent),
    now: u64,
) -> Result<Passed, ProofError> {
    let why = match payload {
        BatchPayload::Deposit(_) => BatchReason::DepositPayload,
        BatchPayload::Voucher(_) => BatchReason::VoucherPayload,
        BatchPayload::Refund(_) => BatchReason::RefundPayload,
        BatchPayload::Claim(_) | BatchPayload::Settle(_) => {
            return Err(refuse(
                BatchReason::PayloadType,
                format!("a {} payload is the seller's, not a buyer's", payload.kind()),
            ));
        }
    };
    let Some((config, voucher)) = payload.channel() else {
        return Err(refuse(BatchReason::PayloadType, "the payload names no channel"));
    };
    let (config, id) = bind(bound, config, &voucher.channel_id, why)?;
    let max = voucher.max_claimable_amount.get();

    // Rule 6: the voucher is the payer's (its authorizer's key, ECDSA only; else the payer's,
    // EIP-1271 allowed).
    let signature = parse_bytes(&voucher.signature, "voucher.signature", why)?;
    let digest = wire::voucher_digest(bound.chain_id, id, max);
    let (signer, contracts) =
        if config.payerAuthorizer == Address::ZERO { (config.payer, true) } else { (config.payerAuthorizer, false) };
    if !signed_by(backend, signer, digest, &signature, contracts).await? {
        return Err(refuse(BatchReason::VoucherSignature, format!("the voucher is not signed by {signer:#x}")));
    }

    let snapshot = read(backend, id).await?;
    let deposit = match payload {
        BatchPayload::Deposit(p) => Some(&p.deposit),
        _ => None,
    };
    let added = deposit.map_or(0, |d| d.amount.get());
    // Rule 7: a channel to pay from (a deposit brings its own).
    if deposit.is_none() && snapshot.balance == 0 {
        return Err(refuse(BatchReason::ChannelNotFound, "the channel holds nothing: deposit first"));
    }
    // Rule 9: the voucher fits in what is (or will be) escrowed.
    let effective = snapshot.balance.saturating_add(added);
    if max > effective {
        return Err(refuse(
            BatchReason::CumulativeExceedsBalance,
            format!("the voucher's {max} exceeds the channel's {effective}"),
        ));
    }
    // Rule 10: a voucher adds to what is claimed (a refund's or a deposit's may equal it).
    let at_least = matches!(payload, BatchPayload::Voucher(_));
    if max < snapshot.total_claimed || (at_least && max == snapshot.total_claimed) {
        return Err(refuse(
            BatchReason::CumulativeBelowClaimed,
            format!("the voucher's {max} is not above the {} claimed", snapshot.total_claimed),
        ));
    }
    let deposit_call = match payload {
        BatchPayload::Deposit(p) => {
            Some(check_deposit(backend, bound, (&config, id), &p.deposit, (sender, intent, now)).await?)
        }
        _ => None,
    };
    Ok(Passed { config, snapshot, deposit_call })
}

/// A deposit's authorization, checked as its collector will use it, then the whole `deposit`
/// call simulated from `sender`. Answers the call.
async fn check_deposit(
    backend: &EvmBackend,
    bound: &Bound,
    (config, id): (&wire::ChannelConfig, B256),
    deposit: &proto::Deposit,
    (sender, intent, now): (Address, crate::chains::Intent, u64),
) -> Result<Vec<u8>, ProofError> {
    let why = BatchReason::DepositPayload;
    let amount = deposit.amount.get();
    let payer = config.payer;
    let balance = erc20::balance_of(&backend.rpc, bound.token, payer).await?;
    if balance < U256::from(amount) {
        return Err(refuse(
            BatchReason::InsufficientBalance,
            format!("{payer:#x} holds {balance}, less than the {amount} deposited"),
        ));
    }
    let (collector, data) =
        match (&deposit.authorization.erc3009_authorization, &deposit.authorization.permit2_authorization) {
            (Some(a), None) => {
                let (name, version) = &bound.domain;
                if name.is_empty() || version.is_empty() {
                    return Err(refuse(
                        BatchReason::MissingEip712Domain,
                        "extra must name the token's EIP-712 name and version",
                    ));
                }
                let (after, before) = (a.valid_after.get(), a.valid_before.get());
                if u128::from(now) <= after {
                    return Err(refuse(BatchReason::ValidAfter, "the deposit's authorization is not valid yet"));
                }
                if u128::from(now.saturating_add(backend.valid_before_margin_secs)) >= before {
                    return Err(refuse(BatchReason::ValidBefore, "the deposit's authorization expires too soon"));
                }
                let salt: U256 =
                    a.salt.parse().map_err(|_| refuse(why, "erc3009Authorization.salt must be a uint256"))?;
                let signature = parse_bytes(&a.signature, "erc3009Authorization.signature", why)?;
                let message = wire::ReceiveWithAuthorization {
                    from: payer,
                    to: ERC3009_COLLECTOR,
                    value: U256::from(amount),
                    validAfter: U256::from(after),
                    validBefore: U256::from(before),
                    nonce: wire::erc3009_deposit_nonce(id, salt),
                };
                let domain =
                    tollgate_encoding::evm::eip3009_domain(name.clone(), version.clone(), bound.chain_id, bound.token);
                if !signed_by(backend, payer, message.eip712_signing_hash(&domain), &signature, true).await? {
                    return Err(refuse(
                        BatchReason::ReceiveAuthorizationSignature,
                        "the deposit's authorization is not the payer's",
                    ));
                }
                let data = wire::erc3009_collector_data(U256::from(after), U256::from(before), salt, &signature);
                (ERC3009_COLLECTOR, data)
            }
            (None, Some(p)) => {
                let spender = address(&p.spender);
                if spender != Some(PERMIT2_COLLECTOR) {
                    return Err(refuse(
                        BatchReason::Permit2InvalidSpender,
                        "the permit's spender must be the Permit2 deposit collector",
                    ));
                }
                if address(&p.from) != Some(payer) || address(&p.permitted.token) != Some(bound.token) {
                    return Err(refuse(
                        BatchReason::Permit2InvalidSignature,
                        "the permit is not the payer's, in the channel's token",
                    ));
                }
                if p.permitted.amount.get() != amount {
                    return Err(refuse(BatchReason::Permit2AmountMismatch, "the permit's amount is not the deposit's"));
                }
                if parse_b256(&p.witness.channel_id, "permit2Authorization.witness.channelId", why)? != id {
                    return Err(refuse(BatchReason::ChannelIdMismatch, "the permit's witness names another channel"));
                }
                let deadline = p.deadline.get();
                if u128::from(now.saturating_add(backend.valid_before_margin_secs)) >= deadline {
                    return Err(refuse(BatchReason::Permit2DeadlineExpired, "the permit expires too soon"));
                }
                let nonce = super::permit2::parse_uint256(&p.nonce)
                    .ok_or_else(|| refuse(why, "permit2Authorization.nonce must be a uint256"))?;
                let signature = parse_bytes(&p.signature, "permit2Authorization.signature", why)?;
                let message = wire::PermitWitnessTransferFrom {
                    permitted: wire::TokenPermissions { token: bound.token, amount: U256::from(amount) },
                    spender: PERMIT2_COLLECTOR,
                    nonce,
                    deadline: U256::from(deadline),
                    witness: wire::DepositWitness { channelId: id },
                };
                let digest = message.eip712_signing_hash(&tollgate_encoding::permit2::domain(bound.chain_id));
                if !signed_by(backend, payer, digest, &signature, true).await? {
                    return Err(refuse(BatchReason::Permit2InvalidSignature, "the permit is not signed by the payer"));
                }
                let allowance = tollgate_encoding::permit2::Erc20::allowanceCall {
                    owner: payer,
                    spender: tollgate_encoding::permit2::PERMIT2,
                };
                if erc20::view(&backend.rpc, bound.token, &allowance).await? < U256::from(amount) {
                    return Err(refuse(
                        BatchReason::Permit2AllowanceRequired,
                        format!("{payer:#x} has not let Permit2 spend the deposit"),
                    ));
                }
                (PERMIT2_COLLECTOR, wire::permit2_collector_data(nonce, U256::from(deadline), &signature, &[]))
            }
            (None, None) => {
                return Err(refuse(BatchReason::Erc3009AuthorizationRequired, "the deposit carries no authorization"));
            }
            (Some(_), Some(_)) => return Err(refuse(why, "the deposit carries two authorizations")),
        };
    let call =
        Contract::depositCall { config: config.clone(), amount, collector, collectorData: data.into() }.abi_encode();
    // Settling, [`prepare`]'s gas estimate simulates it: once is enough.
    if intent == crate::chains::Intent::Verify {
        let request = TransactionRequest::default()
            .from(sender)
            .to(BATCH_SETTLEMENT)
            .input(Bytes::from(call.clone()).into())
            .gas_limit(backend.max_gas);
        if let Err(failure) = backend.rpc.simulate(request).await? {
            return Err(refuse(BatchReason::DepositSimulationFailed, format!("the deposit would fail: {failure}")));
        }
    }
    Ok(call)
}

/// A call to the settlement contract (a checked deposit, a claim, a sweep), simulated again and
/// priced as it will be sent from the facilitator's account `sender`: what signs it on each
/// attempt, and the most its gas can cost. `fails` is the reason when the node says it fails.
///
/// # Errors
/// [`ProofError`] when it does not pass, or the chain cannot be asked.
pub async fn prepare(
    backend: &EvmBackend,
    sender: Address,
    call: Vec<u8>,
    fails: BatchReason,
) -> Result<(Box<dyn crate::chains::Signable>, Option<u128>), ProofError> {
    use crate::chains::{Intent, Settle, Settler};
    match super::call::prepare(backend, (sender, BATCH_SETTLEMENT, call), (Settler::Facilitator, Intent::Settle))
        .await?
    {
        super::call::Prepared::Passes(Settle::Sign(signable), fee) => Ok((signable, fee)),
        super::call::Prepared::Passes(..) => {
            Err(ProofError::Chain(ChainError("the call was not prepared to sign".into())))
        }
        super::call::Prepared::Fails(failure) => Err(refuse(fails, format!("the transaction would fail: {failure}"))),
    }
}

/// One row of a seller's claim, checked: the channel is the requirement's, the voucher its
/// payer's, the claimed total within the voucher and the escrow.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The channel's configuration.
    pub config: wire::ChannelConfig,
    /// Its id.
    pub channel_id: B256,
    /// The voucher's ceiling.
    pub ceiling: u128,
    /// The total claimed after this row.
    pub total: u128,
    /// The payer's voucher signature.
    pub signature: Vec<u8>,
}

/// Checks a seller's claim rows against `bound` and the chain.
///
/// # Errors
/// The scheme's refusal for the first row that does not pass, or [`ChainError`].
pub async fn check_claims(
    backend: &EvmBackend,
    bound: &Bound,
    rows: &[proto::ClaimRow],
) -> Result<Vec<Claim>, ProofError> {
    let why = BatchReason::ClaimPayload;
    let mut claims = Vec::with_capacity(rows.len());
    for row in rows {
        let c = &row.voucher.channel;
        let unbound = config_of(c, why)?;
        let (config, id) = bind(bound, c, &format!("{:#x}", unbound.id(bound.chain_id)), why)?;
        let (ceiling, total) = (row.voucher.max_claimable_amount.get(), row.total_claimed.get());
        let signature = parse_bytes(&row.signature, "claims[].signature", why)?;
        let digest = wire::voucher_digest(bound.chain_id, id, ceiling);
        let (signer, contracts) = if config.payerAuthorizer == Address::ZERO {
            (config.payer, true)
        } else {
            (config.payerAuthorizer, false)
        };
        if !signed_by(backend, signer, digest, &signature, contracts).await? {
            return Err(refuse(
                BatchReason::VoucherSignature,
                format!("a claimed voucher of {id:#x} is not its payer's"),
            ));
        }
        let snapshot = read(backend, id).await?;
        if total > snapshot.balance {
            return Err(refuse(
                BatchReason::CumulativeExceedsBalance,
                format!("the claim of {total} on {id:#x} exceeds its escrow of {}", snapshot.balance),
            ));
        }
        claims.push(Claim { config, channel_id: id, ceiling, total, signature });
    }
    Ok(claims)
}

/// What the receiver authorizer signs to let anyone send `claims`.
#[must_use]
pub fn claim_digest(chain_id: u64, claims: &[Claim]) -> B256 {
    let rows: Vec<_> = claims.iter().map(|c| (c.channel_id, c.ceiling, c.total)).collect();
    wire::claim_batch_digest(chain_id, &rows)
}

/// The `claimWithSignature` call of `claims` under the receiver authorizer's `signature`.
#[must_use]
pub fn claim_call(claims: &[Claim], signature: &[u8]) -> Vec<u8> {
    let rows = claims
        .iter()
        .map(|c| Contract::VoucherClaim {
            voucher: Contract::VoucherBody { channel: c.config.clone(), maxClaimableAmount: c.ceiling },
            signature: c.signature.clone().into(),
            totalClaimed: c.total,
        })
        .collect();
    Contract::claimWithSignatureCall { voucherClaims: rows, authorizerSignature: signature.to_vec().into() }
        .abi_encode()
}

/// Whether `signature` over `digest` is `authorizer`'s (ECDSA, or EIP-1271 for a contract).
///
/// # Errors
/// [`ChainError`] when a contract authorizer cannot be asked.
pub async fn authorized(
    backend: &EvmBackend,
    authorizer: Address,
    digest: B256,
    signature: &[u8],
) -> Result<bool, ChainError> {
    signed_by(backend, authorizer, digest, signature, true).await
}

/// What a receiver has claimed in `token` in all, and what of it it has not been sent yet.
///
/// # Errors
/// [`ChainError`] when the contract cannot be read.
pub async fn unsettled(backend: &EvmBackend, receiver: Address, token: Address) -> Result<(u128, u128), ChainError> {
    let account = erc20::view(&backend.rpc, BATCH_SETTLEMENT, &Contract::receiversCall { receiver, token }).await?;
    Ok((account.totalClaimed, account.totalClaimed.saturating_sub(account.totalSettled)))
}

/// The `refundWithSignature` call returning up to `amount` of `config`'s unclaimed escrow at
/// refund nonce `nonce`, under the receiver authorizer's `signature`.
#[must_use]
pub fn refund_call(config: &wire::ChannelConfig, amount: u128, nonce: U256, signature: &[u8]) -> Vec<u8> {
    Contract::refundWithSignatureCall {
        config: config.clone(),
        amount,
        nonce,
        receiverAuthorizerSignature: signature.to_vec().into(),
    }
    .abi_encode()
}

/// Several calls to the settlement contract in one transaction (a claim, then a refund).
#[must_use]
pub fn multicall(calls: Vec<Vec<u8>>) -> Vec<u8> {
    Contract::multicallCall { data: calls.into_iter().map(Into::into).collect() }.abi_encode()
}

/// The `settle(receiver, token)` sweep call.
#[must_use]
pub fn sweep_call(receiver: Address, token: Address) -> Vec<u8> {
    Contract::settleCall { receiver, token }.abi_encode()
}

/// Sends a prepared call from the facilitator's account and waits up to `wait` for it to be
/// mined: its hash, and whether it succeeded (`None`: not mined within the wait).
///
/// # Errors
/// [`ChainError`] when it cannot be signed or the node refuses it.
pub async fn send(
    backend: &EvmBackend,
    signable: &dyn crate::chains::Signable,
    wait: std::time::Duration,
) -> Result<(B256, Option<bool>), ChainError> {
    use crate::chains::{SendError, Sent, TxOutcome};
    let mut outgoing = signable.sign().await?;
    let hash: B256 =
        outgoing.tx_id.parse().map_err(|_| ChainError(format!("not a transaction hash: {}", outgoing.tx_id)))?;
    match backend.rpc.send_raw(&outgoing.raw).await {
        Ok(_) => outgoing.release(Sent::Accepted).await,
        Err(SendError::Uncertain(_)) => outgoing.release(Sent::Unknown).await,
        Err(SendError::Rejected(reason)) => {
            outgoing.release(Sent::Unknown).await;
            return Err(ChainError(format!("the node refused the transaction: {reason}")));
        }
    }
    Ok(match backend.rpc.wait_for_outcome(hash, wait).await? {
        Some(TxOutcome::Confirmed { .. }) => (hash, Some(true)),
        Some(TxOutcome::Failed { .. }) => (hash, Some(false)),
        None => (hash, None),
    })
}

/// The identity a deposit's authorization is claimed under: the same as the token authorization
/// or Permit2 nonce it spends in any other scheme, so one signature moves money once.
///
/// # Errors
/// A refusal when the payload's nonce cannot be read.
pub fn deposit_identity(
    network: &tollgate_protocol::Network,
    (config, id): (&wire::ChannelConfig, B256),
    deposit: &proto::Deposit,
) -> Result<String, ProofError> {
    let why = BatchReason::DepositPayload;
    match (&deposit.authorization.erc3009_authorization, &deposit.authorization.permit2_authorization) {
        (Some(a), _) => {
            let salt: U256 = a.salt.parse().map_err(|_| refuse(why, "erc3009Authorization.salt must be a uint256"))?;
            let nonce = wire::erc3009_deposit_nonce(id, salt);
            Ok(format!("{network}:{:#x}:{:#x}:{nonce:#x}", config.token, config.payer))
        }
        (None, Some(p)) => {
            let nonce = super::permit2::parse_uint256(&p.nonce)
                .ok_or_else(|| refuse(why, "permit2Authorization.nonce must be a uint256"))?;
            Ok(format!("{network}:permit2:{:#x}:{nonce:#x}", config.payer))
        }
        (None, None) => Err(refuse(BatchReason::Erc3009AuthorizationRequired, "the deposit carries no authorization")),
    }
}

/// The token's decimals (read once: remembered).
///
/// # Errors
/// A refusal when it does not answer as an ERC-20 token.
pub async fn decimals(backend: &EvmBackend, token: Address) -> Result<u8, ProofError> {
    super::permit2::decimals(backend, token).await
}
