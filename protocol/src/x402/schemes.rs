//! The `payload` objects of each scheme.
//!
//! | scheme | chain | payload |
//! |---|---|---|
//! | `exact` | EVM | [`ExactEvmPayload`]: EIP-3009 authorization + signature |
//! | `exact` (`assetTransferMethod: permit2`), `upto` | EVM | [`Permit2Payload`]: a Permit2 witness transfer + signature |
//! | `exact` | Solana | [`ExactSolanaPayload`]: base64 partially signed transaction |
//! | `exact-native` | both | [`ExactNativePayload`]: a signed transfer, or a [`NativeReceipt`] |
//!
//! A receipt proves that the holder of the sending key paid: it carries the id of an already
//! confirmed transfer and the sender's signature over [`receipt_message`], which binds the
//! network, the transaction, the recipient and the resource. A bare transaction id is never a
//! proof, because anyone can read it from the chain.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::address::Address;
use crate::amount::AtomicAmount;
use crate::network::Network;

/// Why a `payload` object does not fit its scheme.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {scheme} payload: {reason}")]
pub struct PayloadError {
    /// The scheme it was read as.
    pub scheme: &'static str,
    /// What is wrong.
    pub reason: String,
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(scheme: &'static str, value: &Value) -> Result<T, PayloadError> {
    T::deserialize(value).map_err(|e| PayloadError { scheme, reason: e.to_string() })
}

/// EIP-3009 `TransferWithAuthorization` fields, as x402 `exact` on EVM carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Eip3009Authorization {
    /// Payer.
    pub from: Address,
    /// Recipient (must be the requirement's `payTo`).
    pub to: Address,
    /// Atomic token amount.
    pub value: AtomicAmount,
    /// Unix seconds after which the authorization is valid (decimal string).
    pub valid_after: AtomicAmount,
    /// Unix seconds before which it is valid (decimal string).
    pub valid_before: AtomicAmount,
    /// 32-byte nonce, `0x` + 64 hex digits.
    pub nonce: String,
}

/// x402 `exact` payload on EVM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExactEvmPayload {
    /// `0x`-hex signature (65-byte ECDSA, or longer for EIP-1271 / EIP-6492 wallets).
    pub signature: String,
    /// What was signed.
    pub authorization: Eip3009Authorization,
}

impl ExactEvmPayload {
    /// Reads and checks the shape of a payload value.
    ///
    /// # Errors
    /// [`PayloadError`] naming the bad field.
    pub fn from_value(value: &Value) -> Result<Self, PayloadError> {
        let p: Self = parse("exact (EVM)", value)?;
        let err = |reason: &str| PayloadError { scheme: "exact (EVM)", reason: reason.to_owned() };
        if !is_hex_of_len(&p.authorization.nonce, Some(32)) {
            return Err(err("authorization.nonce must be 0x followed by 64 hex digits"));
        }
        if !is_hex_of_len(&p.signature, None) || p.signature.len() < 2 + 2 * 65 {
            return Err(err("signature must be 0x-hex of at least 65 bytes"));
        }
        if !matches!(p.authorization.from, Address::Evm(_)) || !matches!(p.authorization.to, Address::Evm(_)) {
            return Err(err("authorization addresses must be EVM addresses"));
        }
        Ok(p)
    }
}

/// A token and amount a Permit2 signature permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenPermissions {
    /// The ERC-20 contract.
    pub token: Address,
    /// Atomic amount: the price (`exact`), or the most that may be charged (`upto`).
    pub amount: AtomicAmount,
}

/// What the x402 proxy binds into a Permit2 signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permit2Witness {
    /// Recipient (must be the requirement's `payTo`).
    pub to: Address,
    /// `upto` only: the facilitator allowed to settle (and to choose the amount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator: Option<Address>,
    /// Unix seconds from which it may be settled (decimal string).
    pub valid_after: AtomicAmount,
}

/// A Permit2 `PermitWitnessTransferFrom`, as x402 carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permit2Authorization {
    /// Payer (the token owner).
    pub from: Address,
    /// Token and amount.
    pub permitted: TokenPermissions,
    /// The x402 proxy the payer signed for.
    pub spender: Address,
    /// Permit2 nonce: a uint256, in decimal (as the official client writes it) or `0x`-hex.
    pub nonce: String,
    /// Unix seconds until which the signature is valid (decimal string).
    pub deadline: AtomicAmount,
    /// What the proxy checks.
    pub witness: Permit2Witness,
}

/// x402 `exact` payload on EVM through Permit2 (`extra.assetTransferMethod: "permit2"`), and
/// the `upto` payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Permit2Payload {
    /// `0x`-hex signature (65-byte ECDSA, or longer for EIP-1271 wallets).
    pub signature: String,
    /// What was signed.
    pub permit2_authorization: Permit2Authorization,
}

impl Permit2Payload {
    /// Whether a payload value is a Permit2 one (it carries `permit2Authorization`), as the
    /// official facilitator tells the two `exact` payloads apart.
    #[must_use]
    pub fn is_permit2(value: &Value) -> bool {
        value.get("permit2Authorization").is_some()
    }

    /// Reads and checks the shape of a payload value.
    ///
    /// # Errors
    /// [`PayloadError`] naming the bad field.
    pub fn from_value(value: &Value) -> Result<Self, PayloadError> {
        const SCHEME: &str = "Permit2 (EVM)";
        let p: Self = parse(SCHEME, value)?;
        let err = |reason: &str| PayloadError { scheme: SCHEME, reason: reason.to_owned() };
        let a = &p.permit2_authorization;
        if !is_uint256(&a.nonce) {
            return Err(err("permit2Authorization.nonce must be a uint256, in decimal or 0x-hex"));
        }
        if !is_hex_of_len(&p.signature, None) || p.signature.len() < 2 + 2 * 65 {
            return Err(err("signature must be 0x-hex of at least 65 bytes"));
        }
        let evm = |a: &Address| matches!(a, Address::Evm(_));
        if ![&a.from, &a.permitted.token, &a.spender, &a.witness.to].into_iter().all(evm)
            || a.witness.facilitator.as_ref().is_some_and(|f| !evm(f))
        {
            return Err(err("permit2Authorization addresses must be EVM addresses"));
        }
        Ok(p)
    }
}

/// The extension key under which a buyer offers a signed EIP-2612 permit letting Permit2 spend
/// its tokens, for a facilitator to use when the buyer has no Permit2 allowance yet.
pub const EIP2612_GAS_SPONSORING: &str = "eip2612GasSponsoring";

/// A signed EIP-2612 permit offered in a payload's `extensions["eip2612GasSponsoring"].info`
/// (other keys the seller's declaration carries, such as `description`, are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip2612Sponsoring {
    /// The token owner (the payer).
    pub from: Address,
    /// The token.
    pub asset: Address,
    /// Who may spend: Permit2.
    pub spender: Address,
    /// Atomic amount allowed (the Permit2 permit's amount).
    pub amount: AtomicAmount,
    /// The owner's EIP-2612 nonce on the token (decimal string).
    pub nonce: AtomicAmount,
    /// Unix seconds until which the permit is valid (decimal string).
    pub deadline: AtomicAmount,
    /// `0x`-hex 65-byte signature (r, s, v).
    pub signature: String,
    /// The extension's version (`"1"`).
    pub version: String,
}

impl Eip2612Sponsoring {
    /// What a seller declares in its 402 answer (`extensions["eip2612GasSponsoring"]`) so that
    /// buyers without a Permit2 allowance offer a signed EIP-2612 permit instead of paying gas
    /// for an approval: a description and the version; the buyer fills in the rest.
    #[must_use]
    pub fn declaration() -> Value {
        serde_json::json!({"info": {
            "description": "The facilitator accepts an EIP-2612 gasless permit to the canonical Permit2 contract.",
            "version": "1"
        }})
    }

    /// The permit a payload's extensions offer: `None` without one.
    ///
    /// # Errors
    /// [`PayloadError`] when one is offered but malformed.
    pub fn from_extensions(extensions: &serde_json::Map<String, Value>) -> Result<Option<Self>, PayloadError> {
        const SCHEME: &str = "eip2612GasSponsoring";
        // A buyer that signed nothing still echoes the seller's declaration (a description and
        // a version): no permit is offered.
        let Some(info) =
            extensions.get(EIP2612_GAS_SPONSORING).and_then(|e| e.get("info")).filter(|i| i.get("signature").is_some())
        else {
            return Ok(None);
        };
        let p: Self = parse(SCHEME, info)?;
        if !is_hex_of_len(&p.signature, Some(65)) {
            return Err(PayloadError { scheme: SCHEME, reason: "signature must be 0x-hex of 65 bytes".into() });
        }
        let evm = |a: &Address| matches!(a, Address::Evm(_));
        if ![&p.from, &p.asset, &p.spender].into_iter().all(evm) {
            return Err(PayloadError { scheme: SCHEME, reason: "addresses must be EVM addresses".into() });
        }
        Ok(Some(p))
    }
}

/// The extension key under which a buyer without a Permit2 allowance offers its own signed
/// `approve(Permit2, amount)` transaction, for the facilitator to broadcast before settling.
pub const ERC20_APPROVAL_GAS_SPONSORING: &str = "erc20ApprovalGasSponsoring";

/// A signed ERC-20 approval offered in a payload's `extensions["erc20ApprovalGasSponsoring"].info`
/// (other keys the seller's declaration carries, such as `description`, are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Erc20ApprovalSponsoring {
    /// The token owner (the payer), who signed the transaction.
    pub from: Address,
    /// The token.
    pub asset: Address,
    /// Who may spend: Permit2.
    pub spender: Address,
    /// The amount approved, a uint256 in decimal (typically the largest).
    pub amount: String,
    /// The signed transaction calling `asset.approve(spender, amount)`, EIP-2718 bytes in `0x`-hex.
    pub signed_transaction: String,
    /// The extension's version (`"1"`).
    pub version: String,
}

impl Erc20ApprovalSponsoring {
    /// What a seller declares in its 402 answer (`extensions["erc20ApprovalGasSponsoring"]`).
    #[must_use]
    pub fn declaration() -> Value {
        serde_json::json!({"info": {
            "description": "The facilitator broadcasts a signed approval of the canonical Permit2 contract before settling.",
            "version": "1"
        }})
    }

    /// The approval a payload's extensions offer: `None` without one (a bare echo of the
    /// seller's declaration offers none).
    ///
    /// # Errors
    /// [`PayloadError`] when one is offered but malformed.
    pub fn from_extensions(extensions: &serde_json::Map<String, Value>) -> Result<Option<Self>, PayloadError> {
        const SCHEME: &str = "erc20ApprovalGasSponsoring";
        let Some(info) = extensions
            .get(ERC20_APPROVAL_GAS_SPONSORING)
            .and_then(|e| e.get("info"))
            .filter(|i| i.get("signedTransaction").is_some())
        else {
            return Ok(None);
        };
        let p: Self = parse(SCHEME, info)?;
        let err = |reason: &str| PayloadError { scheme: SCHEME, reason: reason.to_owned() };
        if !is_hex_of_len(&p.signed_transaction, None) || p.signed_transaction.len() < 4 {
            return Err(err("signedTransaction must be 0x-hex"));
        }
        if !is_uint256(&p.amount) || p.amount.starts_with("0x") {
            return Err(err("amount must be a uint256 in decimal"));
        }
        let evm = |a: &Address| matches!(a, Address::Evm(_));
        if ![&p.from, &p.asset, &p.spender].into_iter().all(evm) {
            return Err(err("addresses must be EVM addresses"));
        }
        Ok(Some(p))
    }
}

/// Whether `text` is a uint256 in decimal (at most 78 digits: range is checked where it is read)
/// or `0x`-hex (at most 64 digits).
pub(crate) fn is_uint256(text: &str) -> bool {
    match text.strip_prefix("0x") {
        Some(hex) => !hex.is_empty() && hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => !text.is_empty() && text.len() <= 78 && text.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// x402 `exact` payload on Solana.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExactSolanaPayload {
    /// Base64 of the bincode-serialized, partially signed transaction.
    pub transaction: String,
}

impl ExactSolanaPayload {
    /// Reads and checks the shape of a payload value.
    ///
    /// # Errors
    /// [`PayloadError`] naming the bad field.
    pub fn from_value(value: &Value) -> Result<Self, PayloadError> {
        let p: Self = parse("exact (Solana)", value)?;
        if p.transaction.is_empty() {
            return Err(PayloadError { scheme: "exact (Solana)", reason: "transaction is empty".into() });
        }
        Ok(p)
    }
}

/// A confirmed transfer, vouched for by the key that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NativeReceipt {
    /// Transaction id: Solana signature (base58) or EVM tx hash (`0x` + 64 hex).
    pub transaction: String,
    /// The address that sent the funds and signs the receipt.
    pub from: Address,
    /// Signature over [`receipt_message`]: ed25519 (base58) on Solana, EIP-191 (`0x`, 65 bytes) on EVM.
    pub signature: String,
    /// The resource the receipt pays for, if bound to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
}

/// Tollgate `exact-native` payload: exactly one of a signed transfer or a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExactNativePayload {
    /// A signed transfer for the facilitator to broadcast: base64 Solana transaction, or `0x`-hex
    /// raw EIP-1559 transaction.
    Transaction(String),
    /// An already confirmed transfer with the sender's signature.
    Receipt(NativeReceipt),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExactNativeWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transaction: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    receipt: Option<NativeReceipt>,
}

impl ExactNativePayload {
    /// Reads and checks the shape of a payload value.
    ///
    /// # Errors
    /// [`PayloadError`] unless exactly one of `transaction` and `receipt` is present and well formed.
    pub fn from_value(value: &Value) -> Result<Self, PayloadError> {
        let wire: ExactNativeWire = parse("exact-native", value)?;
        let err = |reason: &str| PayloadError { scheme: "exact-native", reason: reason.to_owned() };
        match (wire.transaction, wire.receipt) {
            (Some(tx), None) if !tx.is_empty() => Ok(Self::Transaction(tx)),
            (Some(_), None) => Err(err("transaction is empty")),
            (None, Some(receipt)) if receipt.transaction.is_empty() || receipt.signature.is_empty() => {
                Err(err("receipt.transaction and receipt.signature must not be empty"))
            }
            (None, Some(receipt)) => Ok(Self::Receipt(receipt)),
            (Some(_), Some(_)) => Err(err("give either transaction or receipt, not both")),
            (None, None) => Err(err("missing field `transaction` or `receipt`")),
        }
    }

    /// The JSON value for a payment payload's `payload` field.
    #[must_use]
    pub fn to_value(&self) -> Value {
        let wire = match self {
            Self::Transaction(tx) => ExactNativeWire { transaction: Some(tx.clone()), receipt: None },
            Self::Receipt(r) => ExactNativeWire { transaction: None, receipt: Some(r.clone()) },
        };
        serde_json::to_value(wire).unwrap_or(Value::Null)
    }
}

/// The exact bytes a receipt's signer signs (UTF-8 text, one field per line).
///
/// ```
/// # use tollgate_protocol::{Address, Network};
/// # use tollgate_protocol::x402::schemes::receipt_message;
/// let pay_to: Address = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".parse().unwrap();
/// let msg = receipt_message(&Network::solana_devnet(), "5VERv8", &pay_to, Some("https://seller.example/report"));
/// assert!(msg.starts_with("tollgate-receipt-v1\n"));
/// ```
#[must_use]
pub fn receipt_message(network: &Network, transaction: &str, pay_to: &Address, resource: Option<&str>) -> String {
    format!(
        "tollgate-receipt-v1\nnetwork: {network}\ntransaction: {transaction}\npayTo: {pay_to}\nresource: {}",
        resource.unwrap_or("")
    )
}

pub(crate) fn is_hex_of_len(text: &str, bytes: Option<usize>) -> bool {
    let Some(hex) = text.strip_prefix("0x") else {
        return false;
    };
    hex.len() % 2 == 0 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && bytes.is_none_or(|n| hex.len() == 2 * n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_echoed_declaration_offers_no_eip2612_permit() {
        let extensions = |info: Value| -> serde_json::Map<String, Value> {
            serde_json::from_value(serde_json::json!({EIP2612_GAS_SPONSORING: {"info": info}})).unwrap()
        };
        let echoed = extensions(Eip2612Sponsoring::declaration()["info"].clone());
        assert_eq!(Eip2612Sponsoring::from_extensions(&echoed).unwrap(), None);
        assert_eq!(Eip2612Sponsoring::from_extensions(&serde_json::Map::new()).unwrap(), None);
        let address = "0x1111111111111111111111111111111111111111";
        let bad = extensions(serde_json::json!({"from": address, "asset": address, "spender": address,
            "amount": "1", "nonce": "0", "deadline": "9", "signature": "0x12", "version": "1"}));
        assert!(Eip2612Sponsoring::from_extensions(&bad).is_err(), "a permit offered is checked");
    }

    #[test]
    fn exact_native_is_one_of_two_shapes() {
        let tx = ExactNativePayload::from_value(&json!({"transaction": "AQID"})).unwrap();
        assert_eq!(tx, ExactNativePayload::Transaction("AQID".into()));
        assert_eq!(ExactNativePayload::from_value(&tx.to_value()).unwrap(), tx);

        let receipt = json!({"receipt": {"transaction": "5VER", "from": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "signature": "3abc"}});
        assert!(matches!(ExactNativePayload::from_value(&receipt).unwrap(), ExactNativePayload::Receipt(_)));

        for bad in [
            json!({}),
            json!({"transaction": ""}),
            json!({"transaction": "AQID", "receipt": receipt["receipt"]}),
            json!({"transaction": 5}),
            json!({"transaction": "AQID", "extra": 1}),
            json!({"receipt": {"transaction": "5VER", "from": "nope", "signature": "3abc"}}),
            json!("AQID"),
        ] {
            assert!(ExactNativePayload::from_value(&bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn exact_evm_checks_hex_fields() {
        let good = json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
                "to": "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
                "value": "10000", "validAfter": "0", "validBefore": "1999999999",
                "nonce": format!("0x{}", "11".repeat(32)),
            }
        });
        let p = ExactEvmPayload::from_value(&good).unwrap();
        assert_eq!(p.authorization.value, AtomicAmount(10_000));
        let mut short_nonce = good.clone();
        short_nonce["authorization"]["nonce"] = json!("0x1234");
        assert!(ExactEvmPayload::from_value(&short_nonce).is_err());
        let mut bad_sig = good.clone();
        bad_sig["signature"] = json!("0xzz");
        assert!(ExactEvmPayload::from_value(&bad_sig).is_err());
        let mut float_value = good;
        float_value["authorization"]["value"] = json!(1.5);
        assert!(ExactEvmPayload::from_value(&float_value).is_err());
    }

    #[test]
    fn receipt_message_binds_every_field() {
        let a: Address = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".parse().unwrap();
        let base = receipt_message(&Network::solana_devnet(), "tx1", &a, Some("r"));
        assert_ne!(base, receipt_message(&Network::solana_mainnet(), "tx1", &a, Some("r")));
        assert_ne!(base, receipt_message(&Network::solana_devnet(), "tx2", &a, Some("r")));
        assert_ne!(base, receipt_message(&Network::solana_devnet(), "tx1", &a, None));
        assert_eq!(
            base,
            "tollgate-receipt-v1\nnetwork: solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1\ntransaction: tx1\npayTo: 2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4\nresource: r"
        );
    }
}
