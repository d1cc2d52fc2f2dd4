//! x402 messages, versions 1 and 2.
//!
//! * A seller answers 402 with a [`PaymentRequired`]: in v1 as the JSON body
//!   ([`PaymentRequiredV1`]), in v2 as the base64 `PAYMENT-REQUIRED` header ([`PaymentRequiredV2`]).
//! * The buyer pays with a [`PaymentPayload`] in `X-PAYMENT` (v1) or `PAYMENT-SIGNATURE` (v2).
//! * The seller asks a facilitator to [`VerifyRequest`] / [`SettleRequest`], and gets a
//!   [`VerifyResponse`] / [`SettleResponse`]; the facilitator lists what it handles in [`Supported`].
//!
//! Internally everything is version-neutral ([`PaymentRequirements`] in the v2 shape, with CAIP-2
//! networks); the v1 forms are converted at the edge.

pub mod batch;
pub mod bazaar;
pub mod header;
pub mod payment_identifier;
pub mod schemes;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::address::Address;
use crate::amount::AtomicAmount;
use crate::network::Network;

/// The x402 `exact` scheme (EIP-3009 on EVM, SPL `TransferChecked` on Solana).
pub const SCHEME_EXACT: &str = "exact";
/// The x402 `upto` scheme: the buyer authorizes a most amount, the seller charges what the
/// request used (EVM, through Permit2).
pub const SCHEME_UPTO: &str = "upto";
/// Tollgate's `exact-native` scheme: native SOL / ETH, as a signed transfer or a signed receipt.
pub const SCHEME_EXACT_NATIVE: &str = "exact-native";

/// When a requirement is settled relative to the seller's handler: x402's reserved
/// `extra.paymentFlow`, written only when it is not [`PaymentFlow::Authorization`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentFlow {
    /// Verified before the handler, settled after it (the default): a failed handler charges
    /// nothing. The only flow of `upto`, whose charge is known after the handler.
    Authorization,
    /// Settled before the handler runs.
    Upfront,
    /// Deposited before the handler, then settled or refunded after it (no scheme of this
    /// crate has it).
    Escrow,
}

impl PaymentFlow {
    /// Its key in a requirement's `extra`.
    pub const KEY: &'static str = "paymentFlow";

    /// Its wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::Upfront => "upfront",
            Self::Escrow => "escrow",
        }
    }

    /// The flow a requirement names (`authorization` when it names none).
    ///
    /// # Errors
    /// The text of a value that is no flow.
    pub fn of(extra: Option<&Value>) -> Result<Self, String> {
        match extra.and_then(|e| e.get(Self::KEY)) {
            None | Some(Value::Null) => Ok(Self::Authorization),
            Some(Value::String(s)) if s == "authorization" => Ok(Self::Authorization),
            Some(Value::String(s)) if s == "upfront" => Ok(Self::Upfront),
            Some(Value::String(s)) if s == "escrow" => Ok(Self::Escrow),
            Some(other) => Err(other.to_string()),
        }
    }

    /// Whether `scheme` can be paid in this flow: `exact` and `exact-native` by authorization or
    /// upfront, `upto` by authorization only (its charge is known after the handler).
    #[must_use]
    pub fn fits(self, scheme: &str) -> bool {
        match self {
            Self::Authorization => true,
            Self::Upfront => scheme == SCHEME_EXACT || scheme == SCHEME_EXACT_NATIVE,
            Self::Escrow => false,
        }
    }
}

/// What is paid with: the chain's native currency or a token contract / mint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Asset {
    /// SOL or ETH. Written `"native"`.
    Native,
    /// An SPL mint or an ERC-20 contract.
    Token(Address),
}

/// A regular expression every [`Asset`] matches: `native` or an address's
/// ([`crate::address::PATTERN`]).
pub const ASSET_PATTERN: &str = "^(native|0x[0-9a-fA-F]{40}|[1-9A-HJ-NP-Za-km-z]{32,44})$";

/// `native`, or the token's address.
impl std::fmt::Display for Asset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Native => f.write_str("native"),
            Self::Token(a) => a.fmt(f),
        }
    }
}

impl std::str::FromStr for Asset {
    type Err = <Address as std::str::FromStr>::Err;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "native" { Ok(Self::Native) } else { text.parse().map(Self::Token) }
    }
}

impl Serialize for Asset {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Asset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// The protocol version marker: serializes as the number, refuses any other on input.
macro_rules! version_marker {
    ($name:ident, $n:literal) => {
        #[doc = concat!("`x402Version: ", stringify!($n), "`.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_u8($n)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match u8::deserialize(d)? {
                    $n => Ok(Self),
                    other => Err(D::Error::custom(format!("expected x402Version {}, got {other}", $n))),
                }
            }
        }
    };
}
version_marker!(V1, 1);
version_marker!(V2, 2);

/// What is being sold (v2 `resource` object; in v1 these fields sit in each requirement).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// The URL of the paid resource.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]{0,2048}$"))]
    pub url: String,
    /// What the buyer gets.
    #[serde(default)]
    pub description: String,
    /// MIME type of the response.
    #[serde(default)]
    pub mime_type: String,
    /// The HTTP method of the request paid for (Tollgate extension: a seller's layer names it to
    /// its facilitator, which answers a repeat of the proof only for the same method). Absent
    /// from 402 answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{1,16}$"))]
    pub method: Option<String>,
    /// Service metadata (x402 `bazaar`): the service's name, topical tags and icon. A stranger's
    /// copy is read through [`crate::x402::bazaar::ServiceMetadata::sanitized`].
    #[serde(flatten)]
    pub service: crate::x402::bazaar::ServiceMetadata,
}

/// One way to pay for a resource (x402 v2 shape, CAIP-2 network).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// `exact` or `exact-native` (other schemes are carried but not handled).
    pub scheme: String,
    /// Where to pay.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::network::X402Network))]
    pub network: Network,
    /// How much, in atomic units of `asset`.
    pub amount: AtomicAmount,
    /// What to pay with.
    pub asset: Asset,
    /// Who is paid.
    pub pay_to: Address,
    /// How long the proof may take to settle.
    #[serde(deserialize_with = "crate::seconds::deserialize")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_992.0))]
    pub max_timeout_seconds: u64,
    /// Scheme-specific details (EIP-712 domain name/version, Solana `feePayer`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub extra: Option<Value>,
}

/// x402 v1 `PaymentRequirements` (resource fields inline, `maxAmountRequired`, v1 network names).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV1 {
    /// Scheme name.
    pub scheme: String,
    /// v1 network name (`base`, `solana-devnet`) or CAIP-2 for networks without one.
    #[serde(with = "v1_network")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::network::X402Network))]
    pub network: Network,
    /// Atomic amount.
    pub max_amount_required: AtomicAmount,
    /// Resource URL.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]{0,2048}$"))]
    pub resource: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// MIME type.
    #[serde(default)]
    pub mime_type: String,
    /// JSON schema of the response, if the seller publishes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub output_schema: Option<Value>,
    /// Recipient.
    pub pay_to: Address,
    /// Settlement time budget.
    #[serde(deserialize_with = "crate::seconds::deserialize")]
    #[cfg_attr(feature = "openapi", schema(maximum = 9_007_199_254_740_992.0))]
    pub max_timeout_seconds: u64,
    /// Asset.
    pub asset: Asset,
    /// Scheme-specific details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub extra: Option<Value>,
    /// The HTTP method of the request paid for (Tollgate extension, as [`ResourceInfo::method`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Z]{1,16}$"))]
    pub method: Option<String>,
}

mod v1_network {
    use super::{Deserialize, Deserializer, Network, Serializer};

    pub(super) fn serialize<S: Serializer>(n: &Network, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.v1_name_or_caip2())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Network, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl PaymentRequirements {
    /// Whether it is paid through Permit2: `upto`, or `exact` with
    /// `extra.assetTransferMethod: "permit2"`.
    #[must_use]
    pub fn through_permit2(&self) -> bool {
        self.scheme == SCHEME_UPTO
            || self.extra.as_ref().and_then(|e| e.get("assetTransferMethod")).and_then(Value::as_str) == Some("permit2")
    }
}

impl PaymentRequirementsV1 {
    /// The v1 form of a requirement for a resource.
    #[must_use]
    pub fn from_v2(req: &PaymentRequirements, resource: &ResourceInfo) -> Self {
        Self {
            scheme: req.scheme.clone(),
            network: req.network.clone(),
            max_amount_required: req.amount,
            resource: resource.url.clone(),
            description: resource.description.clone(),
            mime_type: resource.mime_type.clone(),
            output_schema: None,
            pay_to: req.pay_to,
            max_timeout_seconds: req.max_timeout_seconds,
            asset: req.asset,
            extra: req.extra.clone(),
            method: resource.method.clone(),
        }
    }

    /// Splits into the version-neutral requirement and the resource it is for.
    #[must_use]
    pub fn to_v2(&self) -> (PaymentRequirements, ResourceInfo) {
        (
            PaymentRequirements {
                scheme: self.scheme.clone(),
                network: self.network.clone(),
                amount: self.max_amount_required,
                asset: self.asset,
                pay_to: self.pay_to,
                max_timeout_seconds: self.max_timeout_seconds,
                extra: self.extra.clone(),
            },
            ResourceInfo {
                url: self.resource.clone(),
                description: self.description.clone(),
                mime_type: self.mime_type.clone(),
                method: self.method.clone(),
                service: crate::x402::bazaar::ServiceMetadata::default(),
            },
        )
    }
}

/// The v1 402 body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV1 {
    /// Always 1.
    pub x402_version: V1,
    /// Why payment is (still) required.
    #[serde(default)]
    pub error: String,
    /// Ways to pay.
    pub accepts: Vec<PaymentRequirementsV1>,
}

/// The v2 402 message (the `PAYMENT-REQUIRED` header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV2 {
    /// Always 2.
    pub x402_version: V2,
    /// Why payment is (still) required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What is sold.
    pub resource: ResourceInfo,
    /// Ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// Protocol extensions.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Map<String, Value>,
}

/// A 402 answer in whichever version it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentRequired {
    /// JSON body form.
    V1(PaymentRequiredV1),
    /// Header form.
    V2(PaymentRequiredV2),
}

impl PaymentRequired {
    /// The payment request of a 402 answer, as a buyer reads it: the v2 `PAYMENT-REQUIRED`
    /// header when there is one (it is the richer form), else the v1 JSON body.
    ///
    /// # Errors
    /// The reason, as text, when the one read is not a payment request.
    pub fn from_answer(v2_header: Option<&str>, body: &[u8]) -> Result<Self, String> {
        match v2_header {
            Some(header) => header::decode::<Self>(header).map_err(|e| e.to_string()),
            None => serde_json::from_slice::<Self>(body).map_err(|e| e.to_string()),
        }
    }

    /// Version-neutral view: the resource and the requirements.
    #[must_use]
    pub fn requirements(&self) -> Vec<(PaymentRequirements, ResourceInfo)> {
        match self {
            Self::V1(m) => m.accepts.iter().map(PaymentRequirementsV1::to_v2).collect(),
            Self::V2(m) => m.accepts.iter().map(|r| (r.clone(), m.resource.clone())).collect(),
        }
    }
}

impl PaymentRequiredV2 {
    /// A 402 message; the v1 body carrying the same content comes from [`Self::to_v1`].
    #[must_use]
    pub fn new(error: impl Into<String>, resource: ResourceInfo, accepts: Vec<PaymentRequirements>) -> Self {
        Self { x402_version: V2, error: Some(error.into()), resource, accepts, extensions: Map::new() }
    }

    /// The v1 body carrying the same requirements.
    #[must_use]
    pub fn to_v1(&self) -> PaymentRequiredV1 {
        PaymentRequiredV1 {
            x402_version: V1,
            error: self.error.clone().unwrap_or_default(),
            accepts: self.accepts.iter().map(|r| PaymentRequirementsV1::from_v2(r, &self.resource)).collect(),
        }
    }
}

/// v1 payment payload (`X-PAYMENT`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV1 {
    /// Always 1.
    pub x402_version: V1,
    /// Scheme used.
    pub scheme: String,
    /// Network paid on.
    #[serde(with = "v1_network")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::network::X402Network))]
    pub network: Network,
    /// Scheme-specific proof (see [`schemes`]).
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: Value,
}

/// v2 payment payload (`PAYMENT-SIGNATURE`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    /// Always 2.
    pub x402_version: V2,
    /// The resource, as copied from the 402 answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The requirement the buyer chose; must equal one that was offered.
    pub accepted: PaymentRequirements,
    /// Scheme-specific proof (see [`schemes`]).
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub payload: Value,
    /// Protocol extensions.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub extensions: Map<String, Value>,
}

/// A payment payload in whichever version it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentPayload {
    /// From `X-PAYMENT`.
    V1(PaymentPayloadV1),
    /// From `PAYMENT-SIGNATURE`.
    V2(Box<PaymentPayloadV2>),
}

impl PaymentPayload {
    /// The protocol version (1 or 2).
    #[must_use]
    pub const fn version(&self) -> u8 {
        match self {
            Self::V1(_) => 1,
            Self::V2(_) => 2,
        }
    }

    /// Scheme name.
    #[must_use]
    pub fn scheme(&self) -> &str {
        match self {
            Self::V1(p) => &p.scheme,
            Self::V2(p) => &p.accepted.scheme,
        }
    }

    /// Network paid on.
    #[must_use]
    pub const fn network(&self) -> &Network {
        match self {
            Self::V1(p) => &p.network,
            Self::V2(p) => &p.accepted.network,
        }
    }

    /// The scheme-specific proof.
    #[must_use]
    pub const fn payload(&self) -> &Value {
        match self {
            Self::V1(p) => &p.payload,
            Self::V2(p) => &p.payload,
        }
    }

    /// A v1 `exact-native` payload on `network`.
    #[must_use]
    pub fn exact_native_v1(network: &Network, payload: &schemes::ExactNativePayload) -> Self {
        Self::V1(PaymentPayloadV1 {
            x402_version: V1,
            scheme: SCHEME_EXACT_NATIVE.to_owned(),
            network: network.clone(),
            payload: payload.to_value(),
        })
    }

    /// Decodes an `X-PAYMENT` (v1) or `PAYMENT-SIGNATURE` (v2) header value: either version is
    /// accepted in either header, the `x402Version` field decides.
    ///
    /// # Errors
    /// [`header::HeaderError`] when the value is oversized, not base64, or not a payload.
    pub fn from_header(value: &str) -> Result<Self, header::HeaderError> {
        header::decode(value)
    }

    /// Encodes for the header of its version.
    ///
    /// # Errors
    /// Only if serialization fails, which the types here do not.
    pub fn to_header(&self) -> Result<String, serde_json::Error> {
        header::encode(self)
    }
}

/// Reads `x402Version` first, then the body of that version, so errors name the right fields.
fn by_version<'de, D, T1, T2, R>(d: D, v1: fn(T1) -> R, v2: fn(T2) -> R) -> Result<R, D::Error>
where
    D: Deserializer<'de>,
    T1: DeserializeOwned,
    T2: DeserializeOwned,
{
    let value = Value::deserialize(d)?;
    let version = value.get("x402Version").ok_or_else(|| D::Error::missing_field("x402Version"))?;
    match version.as_u64() {
        Some(1) => serde_json::from_value(value).map(v1).map_err(D::Error::custom),
        Some(2) => serde_json::from_value(value).map(v2).map_err(D::Error::custom),
        _ => Err(D::Error::custom(format!("unsupported x402Version {version}: expected 1 or 2"))),
    }
}

macro_rules! versioned_enum_serde {
    ($ty:ident) => {
        versioned_enum_serde!($ty, $ty::V2);
    };
    ($ty:ident, $v2:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    Self::V1(m) => m.serialize(s),
                    Self::V2(m) => m.serialize(s),
                }
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                by_version(d, Self::V1, $v2)
            }
        }
    };
}
versioned_enum_serde!(PaymentPayload, |p: PaymentPayloadV2| PaymentPayload::V2(Box::new(p)));
versioned_enum_serde!(PaymentRequired);

/// Body of `POST /verify` and `POST /settle`, v1 form.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequestV1 {
    /// Always 1.
    pub x402_version: V1,
    /// What the buyer sent.
    pub payment_payload: PaymentPayloadV1,
    /// What the seller asked for.
    pub payment_requirements: PaymentRequirementsV1,
    /// What the payment buys (Tollgate extension): see [`crate::ticket`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<crate::ticket::Ticket>,
}

/// Body of `POST /verify` and `POST /settle`, v2 form.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequestV2 {
    /// Always 2.
    pub x402_version: V2,
    /// What the buyer sent.
    pub payment_payload: PaymentPayloadV2,
    /// What the seller asked for.
    pub payment_requirements: PaymentRequirements,
    /// What the payment buys (Tollgate extension): see [`crate::ticket`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<crate::ticket::Ticket>,
}

/// `POST /verify` / `POST /settle` body in either version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FacilitatorRequest {
    /// v1 body.
    V1(FacilitatorRequestV1),
    /// v2 body.
    V2(FacilitatorRequestV2),
}
versioned_enum_serde!(FacilitatorRequest);

/// `POST /verify` body.
pub type VerifyRequest = FacilitatorRequest;
/// `POST /settle` body.
pub type SettleRequest = FacilitatorRequest;

impl FacilitatorRequest {
    /// The seller's ticket terms, when it sent them (Tollgate extension).
    #[must_use]
    pub const fn ticket(&self) -> Option<&crate::ticket::Ticket> {
        match self {
            Self::V1(r) => r.ticket.as_ref(),
            Self::V2(r) => r.ticket.as_ref(),
        }
    }

    /// Version-neutral view: (payload, requirement, resource when known), copied; see
    /// [`Self::into_parts`].
    #[must_use]
    pub fn parts(&self) -> (PaymentPayload, PaymentRequirements, Option<ResourceInfo>) {
        self.clone().into_parts()
    }

    /// The request taken apart, version-neutral: (payload, requirement, resource when known).
    #[must_use]
    pub fn into_parts(self) -> (PaymentPayload, PaymentRequirements, Option<ResourceInfo>) {
        match self {
            Self::V1(r) => {
                let (req, resource) = r.payment_requirements.to_v2();
                (PaymentPayload::V1(r.payment_payload), req, Some(resource))
            }
            Self::V2(r) => {
                let resource = r.payment_payload.resource.clone();
                (PaymentPayload::V2(Box::new(r.payment_payload)), r.payment_requirements, resource)
            }
        }
    }
}

/// `POST /verify` answer.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payload would settle.
    pub is_valid: bool,
    /// Why not (x402 reason strings such as `insufficient_funds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// What is wrong, for people (x402 v2 `invalidMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The paying address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Scheme details (`batch-settlement`: the channel as the chain holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

/// `POST /settle` answer; also the `X-PAYMENT-RESPONSE` / `PAYMENT-RESPONSE` header content.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the payment settled.
    pub success: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// What went wrong, for people (x402 v2 `errorMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The paying address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Transaction id / hash (empty when nothing was broadcast).
    #[serde(default)]
    pub transaction: String,
    /// Network name as the request's version writes it.
    pub network: String,
    /// Atomic units settled (x402 `SettleResponse.amount`): what moved, which for `upto` is the
    /// amount charged, not the most authorized. An empty string (the official batch-settlement
    /// server's, for a voucher that moved nothing) reads as none.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "amount_or_empty")]
    pub amount: Option<AtomicAmount>,
    /// The facilitator's payment id (Tollgate extension): an answer given back names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
    /// A settlement with a `ticket`: the answers its payment has served, this one included
    /// (Tollgate extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<crate::ticket::Answered>,
    /// Scheme details (`batch-settlement`: `channelState`, and the request's `chargedAmount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<Value>,
}

/// An optional amount, where an empty string is none.
fn amount_or_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AtomicAmount>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(value) => AtomicAmount::deserialize(value).map(Some).map_err(serde::de::Error::custom),
    }
}

/// One (version, scheme, network) the facilitator handles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// 1 or 2.
    pub x402_version: u8,
    /// Scheme name.
    pub scheme: String,
    /// v1 name for v1 kinds, CAIP-2 for v2 kinds.
    pub network: String,
    /// Scheme details (Solana `feePayer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// `GET /supported` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Supported {
    /// Every kind handled.
    pub kinds: Vec<SupportedKind>,
    /// Extensions handled.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Facilitator signer addresses by CAIP-2 pattern (`eip155:*`, `solana:*`).
    #[serde(default)]
    pub signers: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_settlement_amount_may_be_empty_but_never_garbage() {
        let read = |amount: Value| {
            serde_json::from_value::<SettleResponse>(json!({"success": true, "network": "eip155:1", "amount": amount}))
        };
        assert_eq!(read(json!("")).unwrap().amount, None, "the official batch server's voucher answer");
        assert_eq!(read(json!(null)).unwrap().amount, None);
        assert_eq!(read(json!("1000")).unwrap().amount, Some(AtomicAmount(1000)));
        assert!(read(json!("-1")).is_err() && read(json!("1e3")).is_err() && read(json!("ten")).is_err());
        let absent = serde_json::from_value::<SettleResponse>(json!({"success": true, "network": "eip155:1"}));
        assert_eq!(absent.unwrap().amount, None);
    }

    fn requirement() -> PaymentRequirements {
        PaymentRequirements {
            scheme: SCHEME_EXACT.into(),
            network: "base-sepolia".parse().unwrap(),
            amount: AtomicAmount(10_000),
            asset: Asset::Token("0x036CbD53842c5426634e7929541eC2318f3dCF7e".parse().unwrap()),
            pay_to: "0x122F8Fcaf2152420445Aa424E1D8C0306935B5c9".parse().unwrap(),
            max_timeout_seconds: 60,
            extra: Some(json!({"name": "USDC", "version": "2"})),
        }
    }

    fn resource() -> ResourceInfo {
        ResourceInfo {
            url: "https://seller.example/report".into(),
            description: "Daily report".into(),
            mime_type: "application/json".into(),
            method: None,
            service: crate::x402::bazaar::ServiceMetadata::default(),
        }
    }

    #[test]
    fn v1_body_has_the_v1_field_names() {
        let required = PaymentRequiredV2::new("X-PAYMENT header is required", resource(), vec![requirement()]);
        let v1 = serde_json::to_value(required.to_v1()).unwrap();
        assert_eq!(v1["x402Version"], 1);
        assert_eq!(v1["accepts"][0]["network"], "base-sepolia");
        assert_eq!(v1["accepts"][0]["maxAmountRequired"], "10000");
        assert_eq!(v1["accepts"][0]["resource"], "https://seller.example/report");
        assert_eq!(v1["accepts"][0]["payTo"], "0x122F8Fcaf2152420445Aa424E1D8C0306935B5c9");
        let v2 = serde_json::to_value(&required).unwrap();
        assert_eq!(v2["x402Version"], 2);
        assert_eq!(v2["accepts"][0]["network"], "eip155:84532");
        assert_eq!(v2["accepts"][0]["amount"], "10000");
        assert_eq!(v2["resource"]["mimeType"], "application/json");
    }

    #[test]
    fn v1_and_v2_convert_without_loss() {
        let (req, res) = PaymentRequirementsV1::from_v2(&requirement(), &resource()).to_v2();
        assert_eq!(req, requirement());
        assert_eq!(res, resource());
    }

    #[test]
    fn payloads_of_both_versions_decode_from_headers() {
        let v2 = PaymentPayload::V2(Box::new(PaymentPayloadV2 {
            x402_version: V2,
            resource: Some(resource()),
            accepted: requirement(),
            payload: json!({"signature": "0x00"}),
            extensions: Map::new(),
        }));
        let back = PaymentPayload::from_header(&v2.to_header().unwrap()).unwrap();
        assert_eq!(back, v2);
        assert_eq!(back.version(), 2);
        assert_eq!(back.network(), &Network::eip155(84532));

        let v1 = json!({"x402Version": 1, "scheme": "exact", "network": "solana-devnet", "payload": {"transaction": "AQ=="}});
        let decoded = PaymentPayload::from_header(&header::encode(&v1).unwrap()).unwrap();
        assert_eq!(decoded.version(), 1);
        assert_eq!(decoded.network(), &Network::solana_devnet());
        assert_eq!(serde_json::to_value(&decoded).unwrap(), v1);
    }

    /// A number in `extra` or `payload` read from JSON text and written again is the same number:
    /// the requirement a buyer echoes back still equals the one offered, and an MCP `_meta`
    /// payment carried into a header is the same payment (without serde_json's
    /// `float_roundtrip`, this number drifts by one ULP on each reading).
    #[test]
    fn numbers_survive_the_trip_through_a_header() {
        let drifting: Value = serde_json::from_str(r#"{"rate": 1.0715660391465826e-75, "n": [0.1, 1e300]}"#).unwrap();
        let offered = PaymentRequirements { extra: Some(drifting.clone()), ..requirement() };
        let required = PaymentRequiredV2::new("pay", resource(), vec![offered.clone()]);
        let read: PaymentRequiredV2 = header::decode(&header::encode(&required).unwrap()).unwrap();
        assert_eq!(read.accepts, vec![offered.clone()], "the offer as the buyer reads it");

        let paid = PaymentPayload::V2(Box::new(PaymentPayloadV2 {
            x402_version: V2,
            resource: None,
            accepted: read.accepts[0].clone(),
            payload: drifting.clone(),
            extensions: drifting.as_object().unwrap().clone(),
        }));
        let back = PaymentPayload::from_header(&paid.to_header().unwrap()).unwrap();
        assert_eq!(back, paid);
        let PaymentPayload::V2(back) = back else { panic!("a v2 payload") };
        assert_eq!(back.accepted, offered, "the echoed requirement is the offered one");
    }

    #[test]
    fn unknown_versions_and_shapes_are_refused_with_a_reason() {
        for bad in [json!({"x402Version": 3}), json!({"scheme": "exact"}), json!({"x402Version": 1, "scheme": "exact"})]
        {
            let err = PaymentPayload::from_header(&header::encode(&bad).unwrap()).unwrap_err();
            assert!(matches!(err, header::HeaderError::Json(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn facilitator_requests_of_both_versions() {
        let v1 = json!({
            "x402Version": 1,
            "paymentPayload": {"x402Version": 1, "scheme": "exact", "network": "base-sepolia", "payload": {}},
            "paymentRequirements": serde_json::to_value(PaymentRequirementsV1::from_v2(&requirement(), &resource())).unwrap(),
        });
        let v2 = json!({
            "x402Version": 2,
            "paymentPayload": {"x402Version": 2, "resource": resource(), "accepted": requirement(), "payload": {}},
            "paymentRequirements": requirement(),
        });
        for (version, body) in [(1, v1), (2, v2)] {
            let r: FacilitatorRequest = serde_json::from_value(body).unwrap();
            let (payload, req, res) = r.into_parts();
            assert_eq!(payload.version(), version);
            assert_eq!(req, requirement());
            assert_eq!(res, Some(resource()));
        }
    }
}
