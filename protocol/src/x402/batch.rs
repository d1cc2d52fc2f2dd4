//! x402 `batch-settlement` on EVM, as it travels: the payloads a buyer sends (`deposit`,
//! `voucher`, `refund`), the ones a seller sends its facilitator (`claim`, `settle`, a completed
//! `refund`), the requirement's `extra`, and the channel snapshot every answer carries.
//!
//! Amounts are atomic units in decimal strings, as the scheme writes them; `withdrawDelay` and
//! `withdrawRequestedAt` are JSON numbers. Hex values are checked for shape here; what they sign
//! and hash is `tollgate-encoding`'s business.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schemes::PayloadError;
use crate::address::Address;
use crate::amount::AtomicAmount;

/// The scheme's name.
pub const SCHEME: &str = "batch-settlement";
/// The shortest withdrawal delay a channel may have: 15 minutes.
pub const MIN_WITHDRAW_DELAY: u64 = 900;
/// The longest: 30 days.
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

const WHAT: &str = "batch-settlement";

/// Most rows one claim carries (each is read from the chain before it is signed).
pub const MAX_CLAIMS: usize = 64;

/// The x402 reason codes of a seller's refusals (the official seller's), which buyers act on.
pub mod reason {
    /// The voucher is not exactly what was charged plus this price (corrective 402).
    pub const CUMULATIVE_MISMATCH: &str = "invalid_batch_settlement_evm_cumulative_amount_mismatch";
    /// Another request (or instance) moved the channel first.
    pub const CHANNEL_BUSY: &str = "invalid_batch_settlement_evm_channel_busy";
    /// The channel could not be read or written.
    pub const STATE_UNAVAILABLE: &str = "invalid_batch_settlement_evm_verification_state_unavailable";
    /// A refund for a channel this seller has no record of.
    pub const MISSING_CHANNEL: &str = "invalid_batch_settlement_evm_missing_channel";
    /// Nothing left to refund.
    pub const REFUND_NO_BALANCE: &str = "invalid_batch_settlement_evm_refund_no_balance";
    /// A refund of zero or more than is left.
    pub const REFUND_AMOUNT_INVALID: &str = "invalid_batch_settlement_evm_refund_amount_invalid";
    /// A payload this layer does not take from buyers (claims and sweeps are the seller's).
    pub const PAYLOAD_TYPE: &str = "invalid_batch_settlement_evm_payload_type";
    /// The voucher is not signed by the channel's payer authorizer.
    pub const VOUCHER_SIGNATURE: &str = "invalid_batch_settlement_evm_voucher_signature";
    /// The voucher asks for more than the channel holds.
    pub const EXCEEDS_BALANCE: &str = "invalid_batch_settlement_evm_cumulative_exceeds_balance";
    /// The voucher is not above what is claimed on chain.
    pub const BELOW_CLAIMED: &str = "invalid_batch_settlement_evm_cumulative_below_claimed";
    /// The channel's id is not its configuration's hash.
    pub const CHANNEL_ID_MISMATCH: &str = "invalid_batch_settlement_evm_channel_id_mismatch";
    /// The channel pays someone else.
    pub const RECEIVER_MISMATCH: &str = "invalid_batch_settlement_evm_receiver_mismatch";
    /// The channel holds another token.
    pub const TOKEN_MISMATCH: &str = "invalid_batch_settlement_evm_token_mismatch";
    /// The channel names another receiver authorizer.
    pub const AUTHORIZER_MISMATCH: &str = "invalid_batch_settlement_evm_receiver_authorizer_mismatch";
    /// The channel has another withdrawal delay.
    pub const DELAY_MISMATCH: &str = "invalid_batch_settlement_evm_withdraw_delay_mismatch";
    /// The facilitator's transaction was sent and not mined within its wait: it may yet be
    /// (settle again to follow it).
    pub const WAIT_FOR_RECEIPT: &str = "invalid_batch_settlement_evm_wait_for_receipt_failed";
}

/// A channel's immutable configuration (its EIP-712 hash is the channel id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelConfig {
    /// Whose tokens are escrowed.
    pub payer: Address,
    /// Who signs vouchers (an EOA), or the zero address: the payer itself (EIP-1271 allowed).
    pub payer_authorizer: Address,
    /// Who is paid (the requirement's `payTo`).
    pub receiver: Address,
    /// Who authorizes claims and refunds (the requirement's `extra.receiverAuthorizer`).
    pub receiver_authorizer: Address,
    /// The ERC-20 (the requirement's `asset`).
    pub token: Address,
    /// Seconds a timed withdrawal waits (the requirement's `extra.withdrawDelay`).
    pub withdraw_delay: u64,
    /// 32 bytes, `0x`-hex: tells apart channels that are otherwise the same.
    pub salt: String,
}

/// A payer's signed cumulative voucher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Voucher {
    /// The channel, `0x` + 64 hex digits.
    pub channel_id: String,
    /// The most the receiver may claim from the channel in all.
    pub max_claimable_amount: AtomicAmount,
    /// EIP-712 signature of `Voucher(channelId, maxClaimableAmount)`.
    pub signature: String,
}

/// A deposit signed as an EIP-3009 `ReceiveWithAuthorization` to the ERC-3009 collector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Erc3009Deposit {
    /// Unix seconds after which it is valid (decimal string).
    pub valid_after: AtomicAmount,
    /// Unix seconds before which it is valid (decimal string).
    pub valid_before: AtomicAmount,
    /// The authorization's salt (its nonce is `keccak256(abi.encode(channelId, salt))`), `0x`-hex.
    pub salt: String,
    /// The payer's signature.
    pub signature: String,
}

/// The channel a Permit2 deposit's witness names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DepositWitness {
    /// The channel id.
    pub channel_id: String,
}

/// A deposit signed as a Permit2 witness transfer to the Permit2 collector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permit2Deposit {
    /// The payer.
    pub from: Address,
    /// Token and amount.
    pub permitted: super::schemes::TokenPermissions,
    /// The Permit2 collector.
    pub spender: Address,
    /// Permit2 nonce (uint256, decimal or `0x`-hex).
    pub nonce: String,
    /// Unix seconds until which it is valid.
    pub deadline: AtomicAmount,
    /// The channel it funds.
    pub witness: DepositWitness,
    /// The payer's signature.
    pub signature: String,
}

/// How a deposit's tokens are authorized: exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DepositAuthorization {
    /// EIP-3009.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc3009_authorization: Option<Erc3009Deposit>,
    /// Permit2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit2_authorization: Option<Permit2Deposit>,
}

/// Tokens moved into the channel with the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deposit {
    /// Atomic units deposited.
    pub amount: AtomicAmount,
    /// The payer's authorization.
    pub authorization: DepositAuthorization,
}

/// A voucher as a claim carries it: the whole channel configuration and the ceiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimVoucher {
    /// The channel.
    pub channel: ChannelConfig,
    /// The signed ceiling.
    pub max_claimable_amount: AtomicAmount,
}

/// One row of a claim: a voucher, its signature, and the cumulative total claimed under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimRow {
    /// The voucher.
    pub voucher: ClaimVoucher,
    /// The payer's signature of it.
    pub signature: String,
    /// The channel's claimed total after this row (at most the ceiling).
    pub total_claimed: AtomicAmount,
}

/// A buyer's request: pay for this request, topping the channel up first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DepositPayload {
    /// Always `deposit`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The channel.
    pub channel_config: ChannelConfig,
    /// The voucher for this request.
    pub voucher: Voucher,
    /// What is deposited.
    pub deposit: Deposit,
}

/// A buyer's request: pay for this request from the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VoucherPayload {
    /// Always `voucher`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The channel.
    pub channel_config: ChannelConfig,
    /// The voucher for this request.
    pub voucher: Voucher,
}

/// A cooperative refund: the buyer's zero-charge voucher (and amount), completed by the
/// seller with the nonce, the claims and the receiver authorizer's signatures when it holds
/// that key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefundPayload {
    /// Always `refund`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The channel.
    pub channel_config: ChannelConfig,
    /// A voucher for exactly what was charged so far.
    pub voucher: Voucher,
    /// How much to return; absent: all that is unclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<AtomicAmount>,
    /// The channel's refund nonce (seller-completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_nonce: Option<AtomicAmount>,
    /// Claims to make first (seller-completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<ClaimRow>>,
    /// The receiver authorizer's refund signature, when the seller holds that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_authorizer_signature: Option<String>,
    /// The receiver authorizer's claim signature, when the seller holds that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_authorizer_signature: Option<String>,
}

/// A seller's batch of claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimPayload {
    /// Always `claim`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The rows.
    pub claims: Vec<ClaimRow>,
    /// The receiver authorizer's signature, when the seller holds that key (else the
    /// facilitator signs as the delegated authorizer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_authorizer_signature: Option<String>,
}

/// A seller's sweep of what it claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettlePayload {
    /// Always `settle`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Who is paid.
    pub receiver: Address,
    /// In what.
    pub token: Address,
}

/// A `batch-settlement` payload, by its `type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchPayload {
    /// First request, or a top-up.
    Deposit(DepositPayload),
    /// A request paid from the channel.
    Voucher(VoucherPayload),
    /// A cooperative refund.
    Refund(RefundPayload),
    /// Claims (seller).
    Claim(ClaimPayload),
    /// A sweep (seller).
    Settle(SettlePayload),
}

impl BatchPayload {
    /// Reads a payload by its `type` and checks its shape: hex lengths, EVM addresses, the
    /// withdrawal delay's bounds, a deposit's single authorization, a claim's rows.
    ///
    /// # Errors
    /// [`PayloadError`] naming what is wrong.
    pub fn from_value(value: &Value) -> Result<Self, PayloadError> {
        let parse = |v: &Value| -> Result<Self, PayloadError> {
            let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
            Ok(match kind {
                "deposit" => Self::Deposit(parse(v)?),
                "voucher" => Self::Voucher(parse(v)?),
                "refund" => Self::Refund(parse(v)?),
                "claim" => Self::Claim(parse(v)?),
                "settle" => Self::Settle(parse(v)?),
                _ => return Err(err("type must be deposit, voucher, refund, claim or settle")),
            })
        };
        let payload = parse(value)?;
        payload.check()?;
        Ok(payload)
    }

    /// The payload's `type`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Deposit(_) => "deposit",
            Self::Voucher(_) => "voucher",
            Self::Refund(_) => "refund",
            Self::Claim(_) => "claim",
            Self::Settle(_) => "settle",
        }
    }

    /// The channel a buyer's payload is for, with its voucher.
    #[must_use]
    pub fn channel(&self) -> Option<(&ChannelConfig, &Voucher)> {
        match self {
            Self::Deposit(p) => Some((&p.channel_config, &p.voucher)),
            Self::Voucher(p) => Some((&p.channel_config, &p.voucher)),
            Self::Refund(p) => Some((&p.channel_config, &p.voucher)),
            Self::Claim(_) | Self::Settle(_) => None,
        }
    }

    fn check(&self) -> Result<(), PayloadError> {
        if let Some((config, voucher)) = self.channel() {
            check_config(config)?;
            check_voucher(voucher)?;
        }
        match self {
            Self::Deposit(p) => check_deposit(&p.deposit),
            Self::Voucher(_) => Ok(()),
            Self::Refund(p) => {
                if p.amount.is_some_and(|a| a.get() == 0) {
                    return Err(err("amount must be positive"));
                }
                if p.claims.as_ref().is_some_and(|c| c.len() > MAX_CLAIMS) {
                    return Err(err("claims must hold at most 64 rows"));
                }
                p.claims.iter().flatten().try_for_each(check_row)?;
                [&p.refund_authorizer_signature, &p.claim_authorizer_signature]
                    .into_iter()
                    .flatten()
                    .try_for_each(|s| hex(s, None, "authorizer signatures"))
            }
            Self::Claim(p) => {
                if p.claims.is_empty() || p.claims.len() > MAX_CLAIMS {
                    return Err(err("claims must hold 1 to 64 rows"));
                }
                p.claims.iter().try_for_each(check_row)?;
                p.claim_authorizer_signature.iter().try_for_each(|s| hex(s, None, "claimAuthorizerSignature"))
            }
            Self::Settle(p) => evm(&[&p.receiver, &p.token]),
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, PayloadError> {
    super::schemes::parse(WHAT, value)
}

fn err(reason: &str) -> PayloadError {
    PayloadError { scheme: WHAT, reason: reason.to_owned() }
}

fn hex(text: &str, bytes: Option<usize>, what: &str) -> Result<(), PayloadError> {
    if super::schemes::is_hex_of_len(text, bytes) {
        Ok(())
    } else {
        Err(err(&match bytes {
            Some(n) => format!("{what} must be 0x followed by {} hex digits", 2 * n),
            None => format!("{what} must be 0x-hex"),
        }))
    }
}

fn evm(addresses: &[&Address]) -> Result<(), PayloadError> {
    if addresses.iter().all(|a| matches!(a, Address::Evm(_))) {
        Ok(())
    } else {
        Err(err("addresses must be EVM addresses"))
    }
}

/// The bounds the contract enforces on every channel.
fn check_config(c: &ChannelConfig) -> Result<(), PayloadError> {
    evm(&[&c.payer, &c.payer_authorizer, &c.receiver, &c.receiver_authorizer, &c.token])?;
    hex(&c.salt, Some(32), "channelConfig.salt")?;
    if !(MIN_WITHDRAW_DELAY..=MAX_WITHDRAW_DELAY).contains(&c.withdraw_delay) {
        return Err(err("channelConfig.withdrawDelay must be 900 to 2592000 seconds"));
    }
    Ok(())
}

fn check_voucher(v: &Voucher) -> Result<(), PayloadError> {
    hex(&v.channel_id, Some(32), "voucher.channelId")?;
    signature(&v.signature, "voucher.signature")
}

/// A signature: 65 bytes from an EOA, longer from a contract wallet.
fn signature(text: &str, what: &str) -> Result<(), PayloadError> {
    hex(text, None, what)?;
    if text.len() < 2 + 2 * 65 {
        return Err(err(&format!("{what} must be at least 65 bytes")));
    }
    Ok(())
}

fn check_deposit(d: &Deposit) -> Result<(), PayloadError> {
    if d.amount.get() == 0 {
        return Err(err("deposit.amount must be positive"));
    }
    match (&d.authorization.erc3009_authorization, &d.authorization.permit2_authorization) {
        (Some(a), None) => {
            let digits = a.salt.strip_prefix("0x").unwrap_or_default();
            if digits.is_empty() || digits.len() > 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err("erc3009Authorization.salt must be a uint256 in 0x-hex"));
            }
            signature(&a.signature, "erc3009Authorization.signature")
        }
        (None, Some(p)) => {
            evm(&[&p.from, &p.permitted.token, &p.spender])?;
            hex(&p.witness.channel_id, Some(32), "permit2Authorization.witness.channelId")?;
            if !super::schemes::is_uint256(&p.nonce) {
                return Err(err("permit2Authorization.nonce must be a uint256"));
            }
            signature(&p.signature, "permit2Authorization.signature")
        }
        _ => Err(err("deposit.authorization must hold exactly one of erc3009Authorization and permit2Authorization")),
    }
}

fn check_row(r: &ClaimRow) -> Result<(), PayloadError> {
    check_config(&r.voucher.channel)?;
    signature(&r.signature, "claims[].signature")?;
    if r.total_claimed > r.voucher.max_claimable_amount {
        return Err(err("claims[].totalClaimed must not exceed the voucher's maxClaimableAmount"));
    }
    Ok(())
}

/// The requirement's `extra` for `batch-settlement`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchExtra {
    /// Who authorizes claims and refunds.
    pub receiver_authorizer: Address,
    /// Seconds a timed withdrawal waits.
    pub withdraw_delay: u64,
    /// The token's EIP-712 name.
    pub name: String,
    /// The token's EIP-712 version.
    pub version: String,
    /// `eip3009` (default) or `permit2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_transfer_method: Option<String>,
    /// Corrective 402 only: the seller's view of the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_state: Option<ChannelState>,
    /// Corrective 402 only: the last voucher the seller holds, for the buyer to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voucher_state: Option<VoucherState>,
}

/// A channel as the chain holds it (and, in a seller's answers, what it has charged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelState {
    /// The channel id.
    pub channel_id: String,
    /// Escrowed (deposits less refunds and withdrawals).
    pub balance: AtomicAmount,
    /// Claimed on chain.
    pub total_claimed: AtomicAmount,
    /// Unix seconds a timed withdrawal started, 0 when none.
    pub withdraw_requested_at: u64,
    /// The nonce the next signed refund must carry.
    pub refund_nonce: AtomicAmount,
    /// What the seller has charged in all (seller answers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_cumulative_amount: Option<AtomicAmount>,
}

/// The last voucher a seller holds for a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherState {
    /// Its ceiling.
    pub signed_max_claimable: AtomicAmount,
    /// The payer's signature.
    pub signature: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const A: &str = "0x1111111111111111111111111111111111111111";
    const ZERO: &str = "0x0000000000000000000000000000000000000000";

    fn config() -> Value {
        json!({"payer": A, "payerAuthorizer": ZERO, "receiver": A, "receiverAuthorizer": A, "token": A,
            "withdrawDelay": 900, "salt": format!("0x{}", "00".repeat(32))})
    }

    fn voucher() -> Value {
        json!({"channelId": format!("0x{}", "ab".repeat(32)), "maxClaimableAmount": "1000",
            "signature": format!("0x{}", "11".repeat(65))})
    }

    #[test]
    fn the_spec_payloads_read_and_write_back() {
        let deposit = json!({"type": "deposit", "channelConfig": config(), "voucher": voucher(),
            "deposit": {"amount": "100000", "authorization": {"erc3009Authorization": {"validAfter": "0",
            "validBefore": "1770000000", "salt": "0x01", "signature": format!("0x{}", "22".repeat(65))}}}});
        let read = BatchPayload::from_value(&deposit).unwrap();
        let BatchPayload::Deposit(p) = &read else { panic!("{read:?}") };
        assert_eq!(p.deposit.amount.get(), 100_000);
        assert_eq!(serde_json::to_value(p).unwrap(), deposit);
        let refund = json!({"type": "refund", "channelConfig": config(), "voucher": voucher(), "amount": "1500"});
        assert!(matches!(BatchPayload::from_value(&refund).unwrap(), BatchPayload::Refund(_)));
        let settle = json!({"type": "settle", "receiver": A, "token": A});
        assert_eq!(BatchPayload::from_value(&settle).unwrap().kind(), "settle");
        let claim = json!({"type": "claim", "claims": [{"voucher": {"channel": config(), "maxClaimableAmount": "5000"},
            "signature": format!("0x{}", "33".repeat(65)), "totalClaimed": "5000"}]});
        assert_eq!(BatchPayload::from_value(&claim).unwrap().kind(), "claim");
    }

    #[test]
    fn malformed_payloads_are_refused_by_name() {
        let base = json!({"type": "voucher", "channelConfig": config(), "voucher": voucher()});
        assert!(BatchPayload::from_value(&base).is_ok());
        let cases: Vec<(&str, Value)> = vec![
            ("type", json!({"type": "steal", "channelConfig": config(), "voucher": voucher()})),
            ("withdrawDelay", {
                let mut v = base.clone();
                v["channelConfig"]["withdrawDelay"] = json!(899);
                v
            }),
            ("withdrawDelay", {
                let mut v = base.clone();
                v["channelConfig"]["withdrawDelay"] = json!(2_592_001);
                v
            }),
            ("salt", {
                let mut v = base.clone();
                v["channelConfig"]["salt"] = json!("0x00");
                v
            }),
            ("channelId", {
                let mut v = base.clone();
                v["voucher"]["channelId"] = json!("0xab");
                v
            }),
            ("signature", {
                let mut v = base.clone();
                v["voucher"]["signature"] = json!("0x1234");
                v
            }),
            ("unknown field", {
                let mut v = base.clone();
                v["voucher"]["extra"] = json!(1);
                v
            }),
            ("invalid", {
                let mut v = base.clone();
                v["voucher"]["maxClaimableAmount"] = json!(1000);
                v
            }),
            ("EVM", {
                let mut v = base.clone();
                v["channelConfig"]["payer"] = json!("9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin");
                v
            }),
        ];
        for (what, value) in cases {
            let e = BatchPayload::from_value(&value).unwrap_err();
            assert!(e.reason.contains(what) || e.to_string().contains(what), "{what}: {e}");
        }
        let both = json!({"type": "deposit", "channelConfig": config(), "voucher": voucher(),
            "deposit": {"amount": "1", "authorization": {}}});
        assert!(BatchPayload::from_value(&both).unwrap_err().reason.contains("exactly one"));
        let empty = json!({"type": "claim", "claims": []});
        assert!(BatchPayload::from_value(&empty).unwrap_err().reason.contains("1 to 64"));
        let row = json!({"voucher": {"channel": config(), "maxClaimableAmount": "5"},
            "signature": format!("0x{}", "33".repeat(65)), "totalClaimed": "5"});
        let many = json!({"type": "claim", "claims": vec![row; MAX_CLAIMS + 1]});
        assert!(BatchPayload::from_value(&many).unwrap_err().reason.contains("1 to 64"));
        let over = json!({"type": "claim", "claims": [{"voucher": {"channel": config(), "maxClaimableAmount": "5"},
            "signature": format!("0x{}", "33".repeat(65)), "totalClaimed": "6"}]});
        assert!(BatchPayload::from_value(&over).unwrap_err().reason.contains("exceed"));
    }
}
