//! Requests and responses of the gateway API (`/payment/*`, `/transaction/*`, `/token/info`).
//!
//! Addresses in requests are kept as text: the facilitator validates them itself so that a bad
//! recipient answers `INVALID_RECIPIENT` while every other bad address answers
//! `INVALID_PARAMETERS`. Amounts are [`DecimalAmount`]s read exactly from the JSON text; they must
//! therefore be deserialized straight from JSON text (`serde_json::from_slice`/`from_str`), not
//! through a `serde_json::Value`, which would already have rounded them to `f64`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::amount::{AtomicAmount, DecimalAmount};
use crate::network::Network;

/// Body of `POST /payment/send` and `POST /transaction/send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SendPaymentRequest {
    /// Payer's wallet (EVM or Solana). For `/payment/send`, a custodial wallet of the caller.
    pub wallet_address: String,
    /// Recipient's wallet, same family as the payer.
    pub recipient_address: String,
    /// Whole native units (SOL, ETH). `/payment/send`: 0.001 to 100.
    pub amount: DecimalAmount,
    /// URL of the protected resource being paid for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Free-form metadata kept with the payment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    /// Priority fee in whole native units. `/payment/send`: 0.00001 to 0.01. Default: automatic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_fee: Option<DecimalAmount>,
    /// CAIP-2 chain within the address family; default: the configured one for the family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

/// What a receive declares for the discovery catalog ([`ReceivePaymentRequest::discovery`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReceiveDiscovery {
    /// The resource as the seller's 402 names it (URL, description, MIME type, service
    /// metadata); its URL is the payment's `resource`.
    pub resource: crate::x402::ResourceInfo,
    /// The offer paid, as the seller's 402 makes it; it must be the payment's own terms
    /// (network, asset, amount, recipient), or nothing is cataloged.
    pub accepted: crate::x402::PaymentRequirements,
    /// The `bazaar` declaration.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub declaration: Value,
}

/// Body of `POST /payment/receive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReceivePaymentRequest {
    /// Receiving wallet.
    pub wallet_address: String,
    /// The buyer's proof, as carried in `X-PAYMENT` (base64 JSON payment payload).
    pub payment_proof: String,
    /// Whole units (of `asset`, by default the native currency) expected at least.
    pub expected_amount: DecimalAmount,
    /// Resource being paid for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// An x402 facilitator to delegate verification to (must be allow-listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator_url: Option<String>,
    /// What `expectedAmount` is paid with (extension): `"native"` (the default: the source
    /// contract's amounts are native), an SPL mint or an ERC-20 contract; `expectedAmount` is then
    /// in that asset's whole units. A proof paying another asset is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub asset: Option<crate::x402::Asset>,
    /// Verification budget in seconds (default 30).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::seconds::option::deserialize"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 300))]
    pub timeout: Option<u64>,
    /// CAIP-2 chain within the address family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// The HTTP method of the request paid for (extension, sent by Tollgate's seller layer): the
    /// payment records it, and a repeat of the proof is answered only for the same method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{1,16}$"))]
    pub method: Option<String>,
    /// What the payment buys (extension, sent by Tollgate's seller layer): its answers are
    /// counted. The first is claimed with the payment; the same proof presented again by the
    /// same account claims another, or is refused once the ticket is used up, expired, or
    /// presented for another request. Without it, a proof presented again is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<crate::ticket::Ticket>,
    /// The route's discovery declaration (extension, sent by Tollgate's seller layer for a
    /// route that declares itself, x402 `bazaar`): once the payment is confirmed, the
    /// facilitator catalogs the route under the caller's account, as it does for an x402
    /// `/settle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<ReceiveDiscovery>,
}

/// Body of `POST /payment/answer/release` (extension): gives back one answer of a payment
/// received with a ticket, which reached no buyer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseAnswerRequest {
    /// The payment (`pay_…`), the caller's received one.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_]{1,64}$"))]
    pub payment_id: String,
}

/// Answer of `POST /payment/answer/release`: what the payment's ticket still counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleasedAnswer {
    /// The payment.
    pub payment_id: String,
    /// Answers still counted as served.
    pub served: u32,
    /// Answers the payment buys.
    pub uses: u32,
}

/// Body of `POST /passes/sign-in` (extension): a buyer's `sign-in-with-x` message, checked for
/// the seller's origin and a pass of the signer's for the seller's scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PassSignIn {
    /// The buyer's `SIGN-IN-WITH-X` header, as sent (base64 JSON).
    #[cfg_attr(feature = "openapi", schema(max_length = 8192))]
    pub sign_in: String,
    /// The seller's public origin (`https://host[:port]`), as the seller configured it: the
    /// message must be bound to it.
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[hH][tT][tT][pP][sS]?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$"))]
    pub origin: String,
    /// What the pass must open, as the seller names it (a pass bought with a ticket's `pass`).
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 2048, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")
    )]
    pub scope: String,
}

/// Answer of `POST /passes/sign-in`: the wallet that signed in, and its pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PassHolder {
    /// The wallet (canonical address).
    pub payer: String,
    /// The network the pass was paid on.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub network: Network,
    /// The payment that bought the pass.
    pub payment_id: String,
    /// Until when it runs.
    pub valid_until: DateTime<Utc>,
}

/// Body of `POST /transaction/receive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LocalReceiveRequest {
    /// Receiving wallet (signs the returned transaction).
    pub wallet_address: String,
    /// The buyer's proof.
    pub payment_proof: String,
    /// Whole units (of `asset`, by default the native currency) expected at least.
    pub expected_amount: DecimalAmount,
    /// Resource being paid for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// An x402 facilitator to delegate verification to (must be allow-listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator_url: Option<String>,
    /// What `expectedAmount` is paid with (extension): `"native"` (the default: the source
    /// contract's amounts are native), an SPL mint or an ERC-20 contract; `expectedAmount` is then
    /// in that asset's whole units. A proof paying another asset is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub asset: Option<crate::x402::Asset>,
    /// Priority fee in whole native units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_fee: Option<DecimalAmount>,
    /// CAIP-2 chain within the address family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
}

/// Body of `POST /transaction/confirm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfirmTransactionRequest {
    /// The payment built by `/transaction/send` or `/transaction/receive`.
    pub payment_id: String,
    /// The signature (Solana) or hash (EVM) of the broadcast transaction.
    pub transaction: String,
}

/// Lifecycle of a payment (see the transition table in the API contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum PaymentStatus {
    /// Local mode: unsigned transaction handed out.
    Built,
    /// Hosted: proof or request checked, claim stored.
    Verified,
    /// Broadcast; the transaction id is known.
    Submitted,
    /// Broadcast, but the wait budget ran out before a verdict. Not a failure.
    Pending,
    /// Final: confirmed on chain.
    Confirmed,
    /// Final: reverted or dropped.
    Failed,
    /// Final: never made it on chain before it expired.
    Expired,
}

impl PaymentStatus {
    /// Every status.
    pub const ALL: [Self; 7] =
        [Self::Built, Self::Verified, Self::Submitted, Self::Pending, Self::Confirmed, Self::Failed, Self::Expired];

    /// `confirmed`, `failed` and `expired` never change again.
    #[must_use]
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Confirmed | Self::Failed | Self::Expired)
    }

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Built => "built",
            Self::Verified => "verified",
            Self::Submitted => "submitted",
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Failed => "failed",
            Self::Expired => "expired",
        }
    }

    /// Parses the wire name.
    #[must_use]
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// Who executed the payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum PaymentMode {
    /// The facilitator signed / settled it.
    Hosted,
    /// The caller signed and broadcast it.
    Local,
}

impl PaymentMode {
    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hosted => "hosted",
            Self::Local => "local",
        }
    }
}

/// Side of a payment seen from one wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Direction {
    /// The wallet paid.
    Sent,
    /// The wallet was paid.
    Received,
}

impl Direction {
    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Received => "received",
        }
    }
}

/// A payment as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PaymentRecord {
    /// `pay_` + ULID.
    pub payment_id: String,
    /// Current state.
    pub status: PaymentStatus,
    /// Hosted or local.
    pub mode: PaymentMode,
    /// CAIP-2 chain.
    pub network: Network,
    /// Payer address.
    pub from: String,
    /// Recipient address.
    pub to: String,
    /// Whole units of the asset.
    pub amount: DecimalAmount,
    /// Atomic units (lamports, wei, token base units).
    pub amount_atomic: AtomicAmount,
    /// `native` or the token mint / contract.
    pub asset: String,
    /// Network fee paid, in whole native units, once known.
    pub fee: Option<DecimalAmount>,
    /// Transaction signature / hash, once known.
    pub transaction: Option<String>,
    /// Resource paid for.
    pub resource: Option<String>,
    /// Caller's metadata.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it was confirmed.
    pub confirmed_at: Option<DateTime<Utc>>,
    /// Why it failed or expired.
    pub error: Option<String>,
    /// In history listings: the wallet's side of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// `/payment/send`: a receipt the buyer can put in `X-PAYMENT` at the seller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_proof: Option<String>,
    /// `/payment/receive`, `/transaction/receive`: who paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// A receive with a `ticket`: the answers its payment has served, this one included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<crate::ticket::Answered>,
}

/// `type` of a history query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HistoryType {
    /// Payments the wallet made.
    Sent,
    /// Payments the wallet received.
    Received,
    /// Both.
    #[default]
    All,
}

impl HistoryType {
    /// The direction it restricts to, if any.
    #[must_use]
    pub const fn direction(self) -> Option<Direction> {
        match self {
            Self::Sent => Some(Direction::Sent),
            Self::Received => Some(Direction::Received),
            Self::All => None,
        }
    }
}

/// Query of `GET /payment/history/{walletAddress}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct HistoryQuery {
    /// `sent`, `received` or `all` (default).
    #[serde(rename = "type", default)]
    pub kind: HistoryType,
    /// Page size, 1 to 500, default 50.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 500))]
    pub limit: Option<u32>,
    /// Records to skip, default 0.
    #[serde(default)]
    pub offset: Option<u64>,
}

/// Default page size of the history.
pub const HISTORY_DEFAULT_LIMIT: u32 = 50;
/// Largest page size of the history.
pub const HISTORY_MAX_LIMIT: u32 = 500;

/// Answer of `GET /payment/history/{walletAddress}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryResponse {
    /// The wallet asked about.
    pub wallet_address: String,
    /// The filter applied.
    #[serde(rename = "type")]
    pub kind: HistoryType,
    /// Page size.
    pub limit: u32,
    /// Offset.
    pub offset: u64,
    /// Records matching the filter in all pages.
    pub total: u64,
    /// This page, newest first; each with `direction`.
    pub payments: Vec<PaymentRecord>,
}

/// Answer of `POST /transaction/send` and `POST /transaction/receive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnsignedTransaction {
    /// The payment this transaction settles (status `built`).
    pub payment_id: String,
    /// The unsigned transaction.
    pub transaction: String,
    /// Always `base64`.
    pub encoding: String,
    /// CAIP-2 chain.
    pub network: Network,
    /// Block height (Solana) / number (EVM) after which the transaction is treated as expired.
    pub last_valid_block_height: u64,
    /// Unix seconds at which the transaction expires (about 60 s after building).
    pub expires_at: i64,
    /// Estimated network fee in whole native units.
    pub estimated_fee: DecimalAmount,
    /// `/transaction/receive`: who paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// `/transaction/receive`: the verified amount, whole units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<DecimalAmount>,
}

/// Token standard of a mint / contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum TokenStandard {
    /// SPL Token program.
    SplToken,
    /// Token-2022 program.
    #[serde(rename = "token-2022")]
    Token2022,
    /// ERC-20 contract.
    Erc20,
}

/// Answer of `GET /token/info/{mintAddress}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenInfo {
    /// Mint / contract address.
    pub address: String,
    /// CAIP-2 chain.
    pub network: Network,
    /// Token standard.
    pub standard: TokenStandard,
    /// Name, when the token publishes one.
    pub name: Option<String>,
    /// Symbol, when the token publishes one.
    pub symbol: Option<String>,
    /// Decimals.
    pub decimals: u8,
    /// Total supply in atomic units.
    pub supply: AtomicAmount,
    /// Mint authority (Solana) / owner, if any.
    pub mint_authority: Option<String>,
    /// Freeze authority (Solana), if any.
    pub freeze_authority: Option<String>,
    /// Token-2022 extensions of the mint (e.g. `transferFeeConfig`, `tokenMetadata`); empty
    /// for other tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Why this facilitator refuses payments in the token (it cannot settle them exactly), when
    /// it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn send_request_reads_amounts_exactly_and_refuses_unknown_fields() {
        let body = r#"{"walletAddress":"a","recipientAddress":"b","amount":0.1,"priorityFee":1e-5}"#;
        let req: SendPaymentRequest = serde_json::from_str(body).unwrap();
        assert_eq!(req.amount.to_atomic(18).unwrap().get(), 100_000_000_000_000_000);
        assert_eq!(req.priority_fee.unwrap().to_atomic(9).unwrap().get(), 10_000);
        let typo = r#"{"walletAddress":"a","recipientAddress":"b","ammount":0.1}"#;
        assert!(serde_json::from_str::<SendPaymentRequest>(typo).is_err());
        let string_amount = r#"{"walletAddress":"a","recipientAddress":"b","amount":"0.1"}"#;
        assert!(serde_json::from_str::<SendPaymentRequest>(string_amount).is_err());
    }

    #[test]
    fn record_serializes_amount_as_number_and_atomic_as_string() {
        let record = PaymentRecord {
            payment_id: "pay_01JD3Q8Z7Y6X5W4V3T2S1R0Q9P".into(),
            status: PaymentStatus::Confirmed,
            mode: PaymentMode::Hosted,
            network: Network::solana_devnet(),
            from: "a".into(),
            to: "b".into(),
            amount: DecimalAmount::parse("0.01").unwrap(),
            amount_atomic: AtomicAmount(10_000_000),
            asset: "native".into(),
            fee: Some(DecimalAmount::parse("0.000005").unwrap()),
            transaction: None,
            resource: None,
            metadata: None,
            created_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            updated_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            confirmed_at: None,
            error: None,
            direction: None,
            payment_proof: None,
            payer: None,
            answers: None,
        };
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""amount":0.01,"amountAtomic":"10000000""#), "{text}");
        assert!(text.contains(r#""fee":0.000005"#), "{text}");
        let back: PaymentRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], json!("confirmed"));
        assert!(v.get("direction").is_none());
    }

    #[test]
    fn statuses_round_trip() {
        for s in PaymentStatus::ALL {
            assert_eq!(PaymentStatus::from_wire(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(PaymentStatus::from_wire("done"), None);
    }
}
